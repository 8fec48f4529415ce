"""What every simulated C function shares: the registry they enter, the node that answers, the addresses handed
out as handles, and the writes into the caller's memory.

A C function is registered with :func:`c_function`, giving its prototype (the arguments after the
``nvmlReturn_t`` result); :mod:`~ddptop.telemetry.fake.driver.library` makes one ``CFUNCTYPE`` callback of each.
An answer fails with :class:`NvmlReturn` carrying NVML's return code.
"""

from __future__ import annotations

import ctypes
import sys
import threading
from types import ModuleType
from typing import Any, Callable

import pynvml

# the installed pynvml loaded a second time over the fake library (library.binding); pynvml finds itself
# under this name to make its error classes
BINDING_NAME = "ddptop_simulated_pynvml"


class NvmlReturn(Exception):
    """An NVML return code other than success, raised by the node's answers."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


# -- the C functions: prototype (arguments after the nvmlReturn_t result) and answer ------------------------------
_registered: dict[str, tuple[tuple[Any, ...], Callable[..., None]]] = {}


def c_function(*argtypes: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Registers the decorated answer as the C function of its name, with these argument types."""

    def register(answer: Callable[..., None]) -> Callable[..., None]:
        _registered[answer.__name__] = (argtypes, answer)
        return answer

    return register


def registered() -> dict[str, tuple[tuple[Any, ...], Callable[..., None]]]:
    """Every C function registered so far: all of them once ``library`` has imported the modules of calls."""
    return dict(_registered)


def simulated() -> ModuleType:
    """The simulated binding, whose struct classes the callbacks fill: ctypes checks a pointer field's class on
    assignment, and the ``pynvml`` module's classes of the same names are other classes."""
    return sys.modules[BINDING_NAME]


# -- which node answers -----------------------------------------------------------------------------------------
_local = threading.local()
_state: dict[str, Any] = {"last": None}


def answer_with(node: Any) -> None:
    """``node`` answers this thread's next calls that carry no handle (and other threads' that never chose)."""
    _local.node = node
    _state["last"] = node


def current() -> Any:
    node = getattr(_local, "node", None) or _state["last"]
    if node is None:
        raise NvmlReturn(pynvml.NVML_ERROR_UNINITIALIZED)
    return node


# -- addresses handed out: device handles, event sets, GPM samples ------------------------------------------------
_registry_lock = threading.Lock()
_handles: dict[int, tuple[Any, int, int | None]] = {}  # address -> (node, GPU index, MIG instance or None)
event_sets: dict[int, tuple[Any, set[int]]] = {}  # address -> (node, registered GPU indices)
gpm_samples: dict[int, list[Any]] = {}  # sample address -> [node, GPU index or None, time taken or None]
_keep: list[Any] = []  # buffers whose addresses are handles: alive as long as the process


def new_address(table: dict[int, Any], entry: Any) -> int:
    """A new address (of a small buffer kept for the life of the process) that ``table`` maps to ``entry``."""
    buffer = ctypes.create_string_buffer(8)
    address = ctypes.addressof(buffer)
    with _registry_lock:
        _keep.append(buffer)
        table[address] = entry
    return address


def release(table: dict[int, Any], address: int) -> Any:
    """Forgets an address ``table`` maps; what it mapped to, or None."""
    with _registry_lock:
        return table.pop(address, None)


def new_handle(node: Any, gpu: int, mig: int | None = None) -> int:
    return new_address(_handles, (node, gpu, mig))


def device(address: int | None) -> tuple[Any, int, int | None]:
    found = _handles.get(address or 0)
    if found is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return found


def owner(address: int) -> Any:
    """The node a device handle, event set or GPM sample belongs to; None for any other address."""
    found = _handles.get(address) or event_sets.get(address) or gpm_samples.get(address)
    return None if found is None else found[0]


# -- writing into the caller's memory ----------------------------------------------------------------------------
def put(address: int | None, ctype: Any, value: Any) -> None:
    if not address:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    ctype.from_address(address).value = value


def put_text(address: int | None, size: int, text: str) -> None:
    data = text.encode() + b"\0"
    if not address:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    if len(data) > size:
        raise NvmlReturn(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    ctypes.memmove(address, data, len(data))


def struct(address: int | None, ctype: Any) -> Any:
    if not address:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return ctype.from_address(address)


def fill_pci(address: int | None, bus_id: str) -> None:
    info = struct(address, simulated().nvmlPciInfo_t)
    domain, bus, devfn = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{devfn}".encode()  # 16 bytes with its NUL: a 4-digit domain
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(devfn.split(".")[0], 16)
    info.pciDeviceId = 0x1DB110DE
