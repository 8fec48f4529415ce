"""The C side of a simulated NVML: ctypes callbacks with ``nvml.h``'s signatures, answering the real binding.

The installed ``pynvml`` (nvidia-ml-py) is the code under test: its wrappers build the real ctypes structs,
look functions up by their versioned C names, pass handles and buffers through ctypes and map return codes
to its own error classes (and ``NVMLLibraryMismatchError``). Only the shared library beneath it is
replaced. The simulation runs in a second instance of that same module file (:func:`binding`, its own
globals), whose ``nvmlLib`` is a :class:`FakeLibrary`: attributes that are C function pointers (``CFUNCTYPE``
callbacks) which read their arguments as raw addresses and fill the caller's structs, the way
``libnvidia-ml.so`` does. The ``pynvml`` module itself is never touched, so a process (or a test session)
that also reads a real driver, or finds none, sees exactly what it would without the simulation. A callback
that meets an unexpected argument fails the call with ``NVML_ERROR_UNKNOWN`` and records the error on the node
(``callback_errors``), so a test sees it.

Why ctypes callbacks and not a shim ``.so`` built against ``nvml.h``: no compiler or header is needed on a
test machine, the node stays a Python object that tests can steer mid-run, and the binding still crosses
a real C call boundary (libffi converts every argument by the prototypes the modules of calls register).

Which node answers: a device or event-set handle names its node (handles are addresses of small buffers a
node owns); calls without one (count, driver version, handle by index) go to the node whose binding proxy
was used last on this thread (``activate``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
from ctypes import CFUNCTYPE, c_int, c_void_p
from types import ModuleType
from typing import Any, Callable

import pynvml

from ddptop.telemetry.fake.driver import abi
# Not re-exports: importing the modules of calls is what registers their C functions (abi.c_function), so
# that the FakeLibrary below has every one the binding looks up.
from ddptop.telemetry.fake.driver import identity, mig_gpm, readings, topology  # noqa: F401

_binding_lock = threading.Lock()


def activate(node: Any) -> ModuleType:
    """``node`` answers this thread's next calls that carry no handle; returns the simulated binding."""
    abi.answer_with(node)
    return binding()


def _entry(name: str, argtypes: tuple[Any, ...], answer: Callable[..., None]) -> Any:
    def call(*args: Any) -> int:
        node = None
        try:
            node = _owner(args)
            refused = node.refusal(name)
            if refused:
                return refused
            answer(*args)
            return pynvml.NVML_SUCCESS
        except abi.NvmlReturn as returned:
            return returned.code
        except Exception as exc:  # a bug here, or an argument nvml.h would not pass: fail loudly in tests
            if node is not None:
                node.callback_errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return pynvml.NVML_ERROR_UNKNOWN

    return CFUNCTYPE(c_int, *argtypes)(call)


def _owner(args: tuple[Any, ...]) -> Any:
    """The node a call is for: the one its first handle names, else this thread's."""
    if args and isinstance(args[0], int):
        found = abi.owner(args[0])
        if found is not None:
            return found
    return abi.current()


class FakeLibrary:
    """Stands where ``CDLL("libnvidia-ml.so.1")`` stands: attributes are C function pointers."""

    def __init__(self) -> None:
        for name, (argtypes, answer) in abi.registered().items():
            setattr(self, name, _entry(name, argtypes, answer))
        # const char* nvmlErrorString(nvmlReturn_t): pynvml sets restype = c_char_p on it
        self._error_text = ctypes.create_string_buffer(b"Unknown Error")
        self.nvmlErrorString = CFUNCTYPE(c_void_p, c_int)(lambda code: ctypes.addressof(self._error_text))

    def __getattr__(self, name: str) -> Any:  # a function no simulated driver has: as dlsym would fail
        raise AttributeError(name)


FUNCTIONS = frozenset(abi.registered())
_binding: ModuleType | None = None


def binding() -> ModuleType:
    """The installed pynvml, loaded a second time under its own name, over the fake library."""
    global _binding
    with _binding_lock:
        if _binding is None:
            spec = importlib.util.spec_from_file_location(abi.BINDING_NAME, pynvml.__file__)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            # pynvml finds itself there to make its error classes; the callbacks find its struct classes there
            sys.modules[abi.BINDING_NAME] = module
            spec.loader.exec_module(module)
            module.nvmlLib = FakeLibrary()
            _binding = module
    return _binding
