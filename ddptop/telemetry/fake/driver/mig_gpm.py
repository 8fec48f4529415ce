"""The C functions of MIG (a GPU's mode, its instances as devices of their own) and of GPM (GPU performance
metrics: two samples of a GPU, and the metrics over the time between them)."""

from __future__ import annotations

import ctypes
from ctypes import c_uint, c_void_p

import pynvml

from ddptop.telemetry.fake.driver.abi import (NvmlReturn, c_function, current, device, gpm_samples, new_address, put,
                                              release, simulated, struct)


@c_function(c_void_p, c_void_p, c_void_p)
def nvmlDeviceGetMigMode(handle: int, current: int, pending: int) -> None:
    node, gpu, _ = device(handle)
    mode = node.mig_mode(gpu)
    put(current, c_uint, mode)
    put(pending, c_uint, mode)


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetMaxMigDeviceCount(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.max_mig_devices(gpu))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetMigDeviceHandleByIndex(handle: int, index: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_void_p, node.mig_handle(gpu, index))


@c_function(c_void_p, c_void_p)
def nvmlDeviceIsMigDeviceHandle(handle: int, out: int) -> None:
    _, _, mig = device(handle)
    put(out, c_uint, int(mig is not None))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    if mig is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    put(out, c_void_p, node.handle(gpu))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetGpuInstanceId(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    put(out, c_uint, node.mig_instance(gpu, mig).gpu_instance)


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetComputeInstanceId(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    put(out, c_uint, node.mig_instance(gpu, mig).compute_instance)


@c_function(c_void_p, c_void_p)
def nvmlGpmQueryDeviceSupport(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    support = struct(out, simulated().c_nvmlGpmSupport_t)
    if support.version != pynvml.NVML_GPM_SUPPORT_VERSION:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    support.isSupportedDevice = int(node.gpm_supported(gpu))


@c_function(c_void_p)
def nvmlGpmSampleAlloc(out: int) -> None:
    node = current()
    put(out, c_void_p, new_address(gpm_samples, [node, None, None]))


@c_function(c_void_p)
def nvmlGpmSampleFree(sample: int) -> None:
    if release(gpm_samples, sample or 0) is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)


@c_function(c_void_p, c_void_p)
def nvmlGpmSampleGet(handle: int, sample: int) -> None:
    node, gpu, _ = device(handle)
    if not node.gpm_supported(gpu):
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
    slot = gpm_samples.get(sample or 0)
    if slot is None:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
    slot[1], slot[2] = gpu, node.elapsed()


@c_function(c_void_p)
def nvmlGpmMetricsGet(out: int) -> None:
    request = struct(out, simulated().c_nvmlGpmMetricsGet_t)
    if request.version != pynvml.NVML_GPM_METRICS_GET_VERSION:
        raise NvmlReturn(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
    first = gpm_samples.get(ctypes.cast(request.sample1, c_void_p).value or 0)
    second = gpm_samples.get(ctypes.cast(request.sample2, c_void_p).value or 0)
    if first is None or second is None or first[1] is None or first[1] != second[1]:
        raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # two samples of one GPU are needed
    node, gpu = second[0], second[1]
    for position in range(request.numMetrics):
        metric = request.metrics[position]
        value = node.gpm_metric(gpu, int(metric.metricId), first[2], second[2])
        metric.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED if value is None else pynvml.NVML_SUCCESS
        metric.value = value or 0.0
