"""The C side of a simulated NVML: ctypes callbacks with ``nvml.h``'s signatures, answering the real binding.

The installed ``pynvml`` (nvidia-ml-py) is the code under test: its wrappers build the real ctypes structs,
look functions up by their versioned C names, pass handles and buffers through ctypes and map return codes
to its own error classes (and ``NVMLLibraryMismatchError``). Only the shared library beneath it is
replaced. The simulation runs in a second instance of that same module file (:func:`binding`, its own
globals), whose ``nvmlLib`` is a :class:`FakeLibrary`: attributes that are C function pointers (``CFUNCTYPE``
callbacks) which read their arguments as raw addresses and fill the caller's structs, the way
``libnvidia-ml.so`` does. The ``pynvml`` module itself is never touched, so a process (or a test session)
that also reads a real driver, or finds none, sees exactly what it would without the simulation. A callback that meets an unexpected argument fails the call with
``NVML_ERROR_UNKNOWN`` and records the error on the node (``callback_errors``), so a test sees it.

Why ctypes callbacks and not a shim ``.so`` built against ``nvml.h``: no compiler or header is needed on a
test machine, the node stays a Python object that tests can steer mid-run, and the binding still crosses
a real C call boundary (libffi converts every argument by the prototype below).

Which node answers: a device or event-set handle names its node (handles are addresses of small buffers a
node owns); calls without one (count, driver version, handle by index) go to the node whose binding proxy
was used last on this thread (``activate``).
"""

from __future__ import annotations

import ctypes
import importlib.util
import sys
import threading
from types import ModuleType
from ctypes import CFUNCTYPE, c_int, c_uint, c_ulonglong, c_void_p
from typing import Any, Callable

import pynvml

_VOIDP = c_void_p


class NvmlReturn(Exception):
    """An NVML return code other than success, raised by the node's answers."""

    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


_local = threading.local()
_state: dict[str, Any] = {"last": None}
_registry_lock = threading.Lock()
_handles: dict[int, tuple[Any, int, int | None]] = {}  # address -> (node, GPU index, MIG instance or None)
_event_sets: dict[int, tuple[Any, set[int]]] = {}  # address -> (node, registered GPU indices)
_keep: list[Any] = []  # buffers whose addresses are handles: alive as long as the process


def activate(node: Any) -> ModuleType:
    """``node`` answers this thread's next calls that carry no handle; returns the simulated binding."""
    _local.node = node
    _state["last"] = node
    return binding()


def _current() -> Any:
    node = getattr(_local, "node", None) or _state["last"]
    if node is None:
        raise NvmlReturn(pynvml.NVML_ERROR_UNINITIALIZED)
    return node


def new_handle(node: Any, gpu: int, mig: int | None = None) -> int:
    buffer = ctypes.create_string_buffer(8)
    address = ctypes.addressof(buffer)
    with _registry_lock:
        _keep.append(buffer)
        _handles[address] = (node, gpu, mig)
    return address


def device(address: int | None) -> tuple[Any, int, int | None]:
    found = _handles.get(address or 0)
    if found is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return found


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


def _fill_pci(address: int | None, bus_id: str) -> None:
    info = struct(address, pynvml.nvmlPciInfo_t)
    domain, bus, devfn = bus_id.split(":")
    info.busId = bus_id.encode()
    info.busIdLegacy = f"{int(domain, 16):04X}:{bus}:{devfn}".encode()  # 16 bytes with its NUL: a 4-digit domain
    info.domain, info.bus, info.device = int(domain, 16), int(bus, 16), int(devfn.split(".")[0], 16)
    info.pciDeviceId = 0x1DB110DE


# -- the C functions: prototype (arguments after the nvmlReturn_t result) and answer ------------------------------
_FUNCTIONS: dict[str, tuple[tuple[Any, ...], Callable[..., None]]] = {}


def _c(*argtypes: Any) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(answer: Callable[..., None]) -> Callable[..., None]:
        _FUNCTIONS[answer.__name__] = (argtypes, answer)
        return answer

    return register


@_c(c_uint)
def nvmlInitWithFlags(flags: int) -> None:
    _current().init()


@_c()
def nvmlInit_v2() -> None:
    _current().init()


@_c()
def nvmlShutdown() -> None:
    _current().shutdown()


@_c(_VOIDP, c_uint)
def nvmlSystemGetDriverVersion(buffer: int, size: int) -> None:
    put_text(buffer, size, _current().profile.driver_version)


@_c(_VOIDP, c_uint)
def nvmlSystemGetNVMLVersion(buffer: int, size: int) -> None:
    put_text(buffer, size, _current().profile.nvml_version)


@_c(_VOIDP)
def nvmlSystemGetCudaDriverVersion(out: int) -> None:
    put(out, c_int, _current().profile.cuda_version)


@_c(_VOIDP)
def nvmlSystemGetCudaDriverVersion_v2(out: int) -> None:
    put(out, c_int, _current().profile.cuda_version)


@_c(_VOIDP)
def nvmlDeviceGetCount_v2(out: int) -> None:
    put(out, c_uint, _current().count)


@_c(c_uint, _VOIDP)
def nvmlDeviceGetHandleByIndex_v2(index: int, out: int) -> None:
    node = _current()
    put(out, c_void_p, node.handle(index))


@_c(ctypes.c_char_p, _VOIDP)
def nvmlDeviceGetHandleByPciBusId_v2(bus_id: bytes | None, out: int) -> None:
    node = _current()
    put(out, c_void_p, node.handle_by_bus(bus_id.decode() if bus_id else ""))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetIndex(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    node.check(gpu)
    if mig is not None:
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a MIG device has no index of its own
    put(out, c_uint, gpu)


@_c(_VOIDP, _VOIDP, c_uint)
def nvmlDeviceGetName(handle: int, buffer: int, size: int) -> None:
    node, gpu, mig = device(handle)
    put_text(buffer, size, node.name(gpu, mig))


@_c(_VOIDP, _VOIDP, c_uint)
def nvmlDeviceGetUUID(handle: int, buffer: int, size: int) -> None:
    node, gpu, mig = device(handle)
    put_text(buffer, size, node.uuid(gpu, mig))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetPciInfo_v3(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    _fill_pci(out, node.bus_id(gpu))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetEnforcedPowerLimit(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.power_limit_mw(gpu))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetMaxClockInfo(handle: int, clock: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.max_clock(gpu, clock))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetClockInfo(handle: int, clock: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.clock_mhz(gpu, clock))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetMaxPcieLinkGeneration(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_max(gpu, "generation")[0])


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetMaxPcieLinkWidth(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_max(gpu, "width")[1])


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetCurrPcieLinkGeneration(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_current(gpu)[0])


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetCurrPcieLinkWidth(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_current(gpu)[1])


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetNumaNodeId(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.numa_node_id(gpu))


@_c(_VOIDP, c_uint, _VOIDP, c_uint)
def nvmlDeviceGetMemoryAffinity(handle: int, words: int, out: int, scope: int) -> None:
    node, gpu, _ = device(handle)
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    array = struct(out, ctypes.c_ulong * words)
    for i in range(words):
        array[i] = 0
    for numa in node.memory_affinity(gpu, scope):
        if numa // bits < words:
            array[numa // bits] |= 1 << (numa % bits)


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetCpuAffinity(handle: int, words: int, out: int) -> None:
    node, gpu, _ = device(handle)
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    array = struct(out, ctypes.c_ulong * words)
    for i in range(words):
        array[i] = 0
    for cpu in node.affinity(gpu):
        if cpu // bits < words:
            array[cpu // bits] |= 1 << (cpu % bits)


@_c(_VOIDP, _VOIDP, _VOIDP)
def nvmlDeviceGetTopologyCommonAncestor(first: int, second: int, out: int) -> None:
    node, a, _ = device(first)
    _, b, _ = device(second)
    put(out, c_uint, node.common_ancestor(a, b))


@_c(_VOIDP, _VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetP2PStatus(first: int, second: int, index: int, out: int) -> None:
    node, a, _ = device(first)
    _, b, _ = device(second)
    put(out, c_uint, node.p2p_status(a, b, index))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetNvLinkState(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_state(gpu, link))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetNvLinkRemotePciInfo_v2(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    _fill_pci(out, node.nvlink_remote_bus(gpu, link))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetNvLinkRemoteDeviceType(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_remote_type(gpu, link))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetNvLinkVersion(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_version(gpu, link))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetUtilizationRates(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    rates = struct(out, pynvml.c_nvmlUtilization_t)
    rates.gpu, rates.memory = node.utilization(gpu, mig)


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetMemoryInfo(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    total, reserved, used = node.memory(gpu, mig)
    memory = struct(out, pynvml.c_nvmlMemory_t)
    memory.total, memory.used, memory.free = total, used + reserved, total - used - reserved


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetMemoryInfo_v2(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    memory = struct(out, pynvml.c_nvmlMemory_v2_t)
    if memory.version != pynvml.nvmlMemory_v2:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    total, reserved, used = node.memory(gpu, mig)
    memory.total, memory.reserved, memory.used, memory.free = total, reserved, used, total - used - reserved


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetPowerUsage(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.power_mw(gpu))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetTotalEnergyConsumption(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.energy_mj(gpu))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetTemperature(handle: int, sensor: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.temperature(gpu))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetCurrentClocksEventReasons(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.clock_event_reasons(gpu))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetCurrentClocksThrottleReasons(handle: int, out: int) -> None:
    nvmlDeviceGetCurrentClocksEventReasons(handle, out)


@_c(_VOIDP, c_int, _VOIDP)
def nvmlDeviceGetFieldValues(handle: int, count: int, out: int) -> None:
    node, gpu, _ = device(handle)
    values = struct(out, pynvml.c_nvmlFieldValue_t * count)
    stamp = node.timestamp_us()
    for value in values:
        number = node.field(gpu, int(value.fieldId))
        value.timestamp, value.latencyUsec = stamp, 0
        value.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
        value.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if number is None else pynvml.NVML_SUCCESS
        value.value.ullVal = number or 0


def _processes(handle: int, count_address: int, infos: int | None) -> None:
    node, gpu, mig = device(handle)
    listed = node.processes(gpu, mig)
    capacity = struct(count_address, c_uint)
    if not listed:
        capacity.value = 0
        return
    if not infos or capacity.value < len(listed):
        capacity.value = len(listed)
        raise NvmlReturn(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
    array = struct(infos, pynvml.c_nvmlProcessInfo_v2_t * len(listed))
    for entry, (pid, used, gpu_instance, compute_instance) in zip(array, listed):
        entry.pid = pid
        entry.usedGpuMemory = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
        entry.gpuInstanceId, entry.computeInstanceId = gpu_instance, compute_instance
    capacity.value = len(listed)


@_c(_VOIDP, _VOIDP, _VOIDP)
def nvmlDeviceGetComputeRunningProcesses_v3(handle: int, count: int, infos: int) -> None:
    _processes(handle, count, infos)


@_c(_VOIDP, _VOIDP, _VOIDP)
def nvmlDeviceGetComputeRunningProcesses_v2(handle: int, count: int, infos: int) -> None:
    _processes(handle, count, infos)


@_c(_VOIDP, c_uint, c_uint, _VOIDP)
def nvmlDeviceGetTotalEccErrors(handle: int, error_type: int, counter_type: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.ecc_errors(gpu))


@_c(_VOIDP, _VOIDP, _VOIDP)
def nvmlDeviceGetMigMode(handle: int, current: int, pending: int) -> None:
    node, gpu, _ = device(handle)
    mode = node.mig_mode(gpu)
    put(current, c_uint, mode)
    put(pending, c_uint, mode)


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetMaxMigDeviceCount(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.max_mig_devices(gpu))


@_c(_VOIDP, c_uint, _VOIDP)
def nvmlDeviceGetMigDeviceHandleByIndex(handle: int, index: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_void_p, node.mig_handle(gpu, index))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceIsMigDeviceHandle(handle: int, out: int) -> None:
    _, _, mig = device(handle)
    put(out, c_uint, int(mig is not None))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    if mig is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    put(out, c_void_p, node.handle(gpu))


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetGpuInstanceId(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    put(out, c_uint, node.mig_instance(gpu, mig).gpu_instance)


@_c(_VOIDP, _VOIDP)
def nvmlDeviceGetComputeInstanceId(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    put(out, c_uint, node.mig_instance(gpu, mig).compute_instance)


_gpm_samples: dict[int, list[Any]] = {}  # sample address -> [node, GPU index or None, time taken or None]


@_c(_VOIDP, _VOIDP)
def nvmlGpmQueryDeviceSupport(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    support = struct(out, pynvml.c_nvmlGpmSupport_t)
    if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    support.isSupportedDevice = int(node.gpm_supported(gpu))


@_c(_VOIDP)
def nvmlGpmSampleAlloc(out: int) -> None:
    node = _current()
    buffer = ctypes.create_string_buffer(8)
    address = ctypes.addressof(buffer)
    with _registry_lock:
        _keep.append(buffer)
        _gpm_samples[address] = [node, None, None]
    put(out, c_void_p, address)


@_c(_VOIDP)
def nvmlGpmSampleFree(sample: int) -> None:
    with _registry_lock:
        if _gpm_samples.pop(sample or 0, None) is None:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)


@_c(_VOIDP, _VOIDP)
def nvmlGpmSampleGet(handle: int, sample: int) -> None:
    node, gpu, _ = device(handle)
    if not node.gpm_supported(gpu):
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
    slot = _gpm_samples.get(sample or 0)
    if slot is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    slot[1], slot[2] = gpu, node.elapsed()


@_c(_VOIDP)
def nvmlGpmMetricsGet(out: int) -> None:
    request = struct(out, pynvml.c_nvmlGpmMetricsGet_t)
    if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    first = _gpm_samples.get(ctypes.cast(request.sample1, c_void_p).value or 0)
    second = _gpm_samples.get(ctypes.cast(request.sample2, c_void_p).value or 0)
    if first is None or second is None or first[1] is None or first[1] != second[1]:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # two samples of one GPU are needed
    node, gpu = second[0], second[1]
    for position in range(request.numMetrics):
        metric = request.metrics[position]
        value = node.gpm_metric(gpu, int(metric.metricId), first[2], second[2])
        metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else pynvml.NVML_SUCCESS
        metric.value = value or 0.0


@_c(_VOIDP)
def nvmlEventSetCreate(out: int) -> None:
    node = _current()
    buffer = ctypes.create_string_buffer(8)
    address = ctypes.addressof(buffer)
    with _registry_lock:
        _keep.append(buffer)
        _event_sets[address] = (node, set())
    put(out, c_void_p, address)


def _event_set(address: int | None) -> tuple[Any, set[int]]:
    found = _event_sets.get(address or 0)
    if found is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return found


@_c(_VOIDP, c_ulonglong, _VOIDP)
def nvmlDeviceRegisterEvents(handle: int, kinds: int, event_set: int) -> None:
    node, gpu, _ = device(handle)
    node.check(gpu)
    _event_set(event_set)[1].add(gpu)


@_c(_VOIDP, _VOIDP, c_uint)
def nvmlEventSetWait_v2(event_set: int, out: int, timeout_ms: int) -> None:
    node, registered = _event_set(event_set)
    gpu, code = node.next_xid(registered, timeout_ms)
    data = struct(out, pynvml.c_nvmlEventData_t)
    data.device = ctypes.cast(c_void_p(node.handle(gpu)), pynvml.c_nvmlDevice_t)
    data.eventType, data.eventData = pynvml.nvmlEventTypeXidCriticalError, code
    data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF


@_c(_VOIDP)
def nvmlEventSetFree(event_set: int) -> None:
    _event_set(event_set)
    with _registry_lock:
        _event_sets.pop(event_set, None)


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
        except NvmlReturn as returned:
            return returned.code
        except Exception as exc:  # a bug here, or an argument nvml.h would not pass: fail loudly in tests
            if node is not None:
                node.callback_errors.append(f"{name}: {type(exc).__name__}: {exc}")
            return pynvml.NVML_ERROR_UNKNOWN

    return CFUNCTYPE(c_int, *argtypes)(call)


def _owner(args: tuple[Any, ...]) -> Any:
    """The node a call is for: the one its first handle names, else this thread's."""
    if args and isinstance(args[0], int):
        found = _handles.get(args[0]) or _event_sets.get(args[0]) or _gpm_samples.get(args[0])
        if found is not None:
            return found[0]
    return _current()


class FakeLibrary:
    """Stands where ``CDLL("libnvidia-ml.so.1")`` stands: attributes are C function pointers."""

    def __init__(self) -> None:
        for name, (argtypes, answer) in _FUNCTIONS.items():
            setattr(self, name, _entry(name, argtypes, answer))
        # const char* nvmlErrorString(nvmlReturn_t): pynvml sets restype = c_char_p on it
        self._error_text = ctypes.create_string_buffer(b"Unknown Error")
        self.nvmlErrorString = CFUNCTYPE(c_void_p, c_int)(lambda code: ctypes.addressof(self._error_text))

    def __getattr__(self, name: str) -> Any:  # a function no simulated driver has: as dlsym would fail
        raise AttributeError(name)


FUNCTIONS = frozenset(_FUNCTIONS)
BINDING_NAME = "ddptop_simulated_pynvml"
_binding: ModuleType | None = None


def binding() -> ModuleType:
    """The installed pynvml, loaded a second time under its own name, over the fake library."""
    global _binding, pynvml
    with _registry_lock:
        if _binding is None:
            spec = importlib.util.spec_from_file_location(BINDING_NAME, _real_pynvml.__file__)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[BINDING_NAME] = module  # pynvml finds itself there to make its error classes
            spec.loader.exec_module(module)
            module.nvmlLib = FakeLibrary()
            # the callbacks fill structs of this instance's classes (ctypes checks pointer types by class)
            pynvml = module
            _binding = module
    return _binding


_real_pynvml = pynvml
