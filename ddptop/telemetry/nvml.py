"""One door to NVML: which module answers (real ``pynvml`` or the fake node), and errors as N/A reasons.

Every NVML call ddptop makes goes through :func:`call`, so a field the GPU, driver or binding cannot give
becomes a short reason ("not supported on this GPU") instead of an exception. ``DDPTOP_FAKE_NVML=dgx1``
swaps in :mod:`ddptop.telemetry.fake.nvml`, a simulated 8-GPU node, through this same door: everything
downstream runs the code it would run against a real driver.
"""

from __future__ import annotations

import os
from typing import Any

FAKE_ENV = "DDPTOP_FAKE_NVML"
FAKE_LABEL = "FAKE"  # shown on every screen and written into every file the fake feeds


class NvmlUnavailable(Exception):
    """NVML cannot be used at all on this machine; the message says why in one line."""


# NVML return codes that will not change while ddptop runs: stop asking for that field.
_PERMANENT = {
    "NVML_ERROR_NOT_SUPPORTED": "not supported on this GPU",
    "NVML_ERROR_FUNCTION_NOT_FOUND": "not in this driver's NVML (driver older than nvidia-ml-py)",
    "NVML_ERROR_NO_PERMISSION": "no permission",
    "NVML_ERROR_GPU_IS_LOST": "GPU lost (fell off the bus?)",
    "NVML_ERROR_NOT_FOUND": "not found",
    "NVML_ERROR_INVALID_ARGUMENT": "not available on this GPU",
}


class Unavailable:
    """A value NVML did not give, with the reason; ``permanent`` ones are not asked for again."""

    __slots__ = ("reason", "permanent", "lost")

    def __init__(self, reason: str, permanent: bool = False, lost: bool = False) -> None:
        self.reason = reason
        self.permanent = permanent
        self.lost = lost

    def __repr__(self) -> str:
        return f"Unavailable({self.reason!r})"


def load(module: Any | None = None) -> tuple[Any, bool]:
    """The NVML module to use and whether it is the fake; raises NvmlUnavailable with a reason."""
    if module is not None:
        return module, bool(getattr(module, "IS_FAKE", False))
    fake = os.environ.get(FAKE_ENV)
    if fake:
        from ddptop.telemetry.fake import choose  # the simulator: loaded only when asked for

        try:
            return choose.module_for(fake), True
        except ValueError as exc:
            raise NvmlUnavailable(str(exc)) from None
    try:
        import pynvml
    except ImportError:
        raise NvmlUnavailable("NVML bindings (nvidia-ml-py) are not installed") from None
    return pynvml, False


def init(nvml: Any) -> None:
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, LibRmVersionMismatch, ...
        raise NvmlUnavailable(f"NVML unavailable: {exc} (no NVIDIA driver on this machine?)") from None


def shutdown(nvml: Any) -> None:
    try:
        nvml.nvmlShutdown()
    except Exception:
        pass


def text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def reason_of(nvml: Any, exc: BaseException) -> Unavailable:
    """Classify an exception from an NVML call."""
    if isinstance(exc, AttributeError):
        return Unavailable("not in the installed nvidia-ml-py", permanent=True)
    mismatch = getattr(nvml, "NVMLLibraryMismatchError", None)
    if isinstance(mismatch, type) and isinstance(exc, mismatch):
        # pynvml's unversioned call needs a newer driver than this one (not an NVMLError, so no code)
        return Unavailable("this driver's NVML lacks the version nvidia-ml-py calls", permanent=True)
    code = getattr(exc, "value", None)
    for name, words in _PERMANENT.items():
        if code is not None and code == getattr(nvml, name, object()):
            return Unavailable(words, permanent=True, lost=name == "NVML_ERROR_GPU_IS_LOST")
    return Unavailable(str(exc) or type(exc).__name__)


def call(nvml: Any, function: str, *args: Any) -> Any:
    """``nvml.<function>(*args)``, or an :class:`Unavailable` saying why not."""
    try:
        return getattr(nvml, function)(*args)
    except Exception as exc:  # every NVMLError subclass, and AttributeError for an old binding
        return reason_of(nvml, exc)
