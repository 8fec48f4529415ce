"""The C functions that read a GPU as it runs: clocks, utilisation, memory, power and energy, temperature,
clock event reasons, field values (byte counters), its compute processes, ECC errors and Xid events."""

from __future__ import annotations

import ctypes
from ctypes import c_int, c_uint, c_ulonglong, c_void_p
from typing import Any

import pynvml

from ddptop.telemetry.fake.driver.abi import (NvmlReturn, c_function, current, device, event_sets, new_address, put,
                                              release, simulated, struct)


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetClockInfo(handle: int, clock: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.clock_mhz(gpu, clock))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetUtilizationRates(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    rates = struct(out, simulated().c_nvmlUtilization_t)
    rates.gpu, rates.memory = node.utilization(gpu, mig)


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetMemoryInfo(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    total, reserved, used = node.memory(gpu, mig)
    memory = struct(out, simulated().c_nvmlMemory_t)
    memory.total, memory.used, memory.free = total, used + reserved, total - used - reserved


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetMemoryInfo_v2(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    memory = struct(out, simulated().c_nvmlMemory_v2_t)
    if memory.version != pynvml.nvmlMemory_v2:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    total, reserved, used = node.memory(gpu, mig)
    memory.total, memory.reserved, memory.used, memory.free = total, reserved, used, total - used - reserved


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetPowerUsage(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.power_mw(gpu))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetTotalEnergyConsumption(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.energy_mj(gpu))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetTemperature(handle: int, sensor: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.temperature(gpu))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetCurrentClocksEventReasons(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.clock_event_reasons(gpu))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetCurrentClocksThrottleReasons(handle: int, out: int) -> None:
    nvmlDeviceGetCurrentClocksEventReasons(handle, out)


@c_function(c_void_p, c_int, c_void_p)
def nvmlDeviceGetFieldValues(handle: int, count: int, out: int) -> None:
    node, gpu, _ = device(handle)
    values = struct(out, simulated().c_nvmlFieldValue_t * count)
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
    array = struct(infos, simulated().c_nvmlProcessInfo_v2_t * len(listed))
    for entry, (pid, used, gpu_instance, compute_instance) in zip(array, listed):
        entry.pid = pid
        entry.usedGpuMemory = pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value if used is None else used
        entry.gpuInstanceId, entry.computeInstanceId = gpu_instance, compute_instance
    capacity.value = len(listed)


@c_function(c_void_p, c_void_p, c_void_p)
def nvmlDeviceGetComputeRunningProcesses_v3(handle: int, count: int, infos: int) -> None:
    _processes(handle, count, infos)


@c_function(c_void_p, c_void_p, c_void_p)
def nvmlDeviceGetComputeRunningProcesses_v2(handle: int, count: int, infos: int) -> None:
    _processes(handle, count, infos)


@c_function(c_void_p, c_uint, c_uint, c_void_p)
def nvmlDeviceGetTotalEccErrors(handle: int, error_type: int, counter_type: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_ulonglong, node.ecc_errors(gpu))


# -- Xid events: registered per GPU on an event set, then waited for -------------------------------------------
@c_function(c_void_p)
def nvmlEventSetCreate(out: int) -> None:
    node = current()
    put(out, c_void_p, new_address(event_sets, (node, set())))


def _event_set(address: int | None) -> tuple[Any, set[int]]:
    found = event_sets.get(address or 0)
    if found is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    return found


@c_function(c_void_p, c_ulonglong, c_void_p)
def nvmlDeviceRegisterEvents(handle: int, kinds: int, event_set: int) -> None:
    node, gpu, _ = device(handle)
    node.check(gpu)
    _event_set(event_set)[1].add(gpu)


@c_function(c_void_p, c_void_p, c_uint)
def nvmlEventSetWait_v2(event_set: int, out: int, timeout_ms: int) -> None:
    node, registered = _event_set(event_set)
    gpu, code = node.next_xid(registered, timeout_ms)
    binding = simulated()
    data = struct(out, binding.c_nvmlEventData_t)
    data.device = ctypes.cast(c_void_p(node.handle(gpu)), binding.c_nvmlDevice_t)
    data.eventType, data.eventData = pynvml.nvmlEventTypeXidCriticalError, code
    data.gpuInstanceId = data.computeInstanceId = 0xFFFFFFFF


@c_function(c_void_p)
def nvmlEventSetFree(event_set: int) -> None:
    _event_set(event_set)
    release(event_sets, event_set)
