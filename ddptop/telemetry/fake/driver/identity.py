"""The C functions that say what the node is: the library's start and versions, how many GPUs, their handles,
and each GPU's index, name, UUID, PCI identity, power limit and highest clocks."""

from __future__ import annotations

import ctypes
from ctypes import c_int, c_uint, c_void_p

import pynvml

from ddptop.telemetry.fake.driver.abi import NvmlReturn, c_function, current, device, fill_pci, put, put_text


@c_function(c_uint)
def nvmlInitWithFlags(flags: int) -> None:
    current().init()


@c_function()
def nvmlInit_v2() -> None:
    current().init()


@c_function()
def nvmlShutdown() -> None:
    current().shutdown()


@c_function(c_void_p, c_uint)
def nvmlSystemGetDriverVersion(buffer: int, size: int) -> None:
    put_text(buffer, size, current().profile.driver_version)


@c_function(c_void_p, c_uint)
def nvmlSystemGetNVMLVersion(buffer: int, size: int) -> None:
    put_text(buffer, size, current().profile.nvml_version)


@c_function(c_void_p)
def nvmlSystemGetCudaDriverVersion(out: int) -> None:
    put(out, c_int, current().profile.cuda_version)


@c_function(c_void_p)
def nvmlSystemGetCudaDriverVersion_v2(out: int) -> None:
    put(out, c_int, current().profile.cuda_version)


@c_function(c_void_p)
def nvmlDeviceGetCount_v2(out: int) -> None:
    put(out, c_uint, current().count)


@c_function(c_uint, c_void_p)
def nvmlDeviceGetHandleByIndex_v2(index: int, out: int) -> None:
    node = current()
    put(out, c_void_p, node.handle(index))


@c_function(ctypes.c_char_p, c_void_p)
def nvmlDeviceGetHandleByPciBusId_v2(bus_id: bytes | None, out: int) -> None:
    node = current()
    put(out, c_void_p, node.handle_by_bus(bus_id.decode() if bus_id else ""))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetIndex(handle: int, out: int) -> None:
    node, gpu, mig = device(handle)
    node.check(gpu)
    if mig is not None:
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a MIG device has no index of its own
    put(out, c_uint, gpu)


@c_function(c_void_p, c_void_p, c_uint)
def nvmlDeviceGetName(handle: int, buffer: int, size: int) -> None:
    node, gpu, mig = device(handle)
    put_text(buffer, size, node.name(gpu, mig))


@c_function(c_void_p, c_void_p, c_uint)
def nvmlDeviceGetUUID(handle: int, buffer: int, size: int) -> None:
    node, gpu, mig = device(handle)
    put_text(buffer, size, node.uuid(gpu, mig))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetPciInfo_v3(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    fill_pci(out, node.bus_id(gpu))


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetEnforcedPowerLimit(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.power_limit_mw(gpu))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetMaxClockInfo(handle: int, clock: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.max_clock(gpu, clock))
