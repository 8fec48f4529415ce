"""The C functions that say how the node's GPUs are connected: PCIe links, NUMA nodes and CPU and memory
affinity, the PCIe tree between two GPUs, peer-to-peer status and each NVLink."""

from __future__ import annotations

import ctypes
from ctypes import c_uint, c_void_p

from ddptop.telemetry.fake.driver.abi import c_function, device, fill_pci, put, struct


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetMaxPcieLinkGeneration(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_max(gpu, "generation")[0])


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetMaxPcieLinkWidth(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_max(gpu, "width")[1])


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetCurrPcieLinkGeneration(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_current(gpu)[0])


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetCurrPcieLinkWidth(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.pcie_current(gpu)[1])


@c_function(c_void_p, c_void_p)
def nvmlDeviceGetNumaNodeId(handle: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.numa_node_id(gpu))


@c_function(c_void_p, c_uint, c_void_p, c_uint)
def nvmlDeviceGetMemoryAffinity(handle: int, words: int, out: int, scope: int) -> None:
    node, gpu, _ = device(handle)
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    array = struct(out, ctypes.c_ulong * words)
    for i in range(words):
        array[i] = 0
    for numa in node.memory_affinity(gpu, scope):
        if numa // bits < words:
            array[numa // bits] |= 1 << (numa % bits)


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetCpuAffinity(handle: int, words: int, out: int) -> None:
    node, gpu, _ = device(handle)
    bits = 8 * ctypes.sizeof(ctypes.c_ulong)
    array = struct(out, ctypes.c_ulong * words)
    for i in range(words):
        array[i] = 0
    for cpu in node.affinity(gpu):
        if cpu // bits < words:
            array[cpu // bits] |= 1 << (cpu % bits)


@c_function(c_void_p, c_void_p, c_void_p)
def nvmlDeviceGetTopologyCommonAncestor(first: int, second: int, out: int) -> None:
    node, a, _ = device(first)
    _, b, _ = device(second)
    put(out, c_uint, node.common_ancestor(a, b))


@c_function(c_void_p, c_void_p, c_uint, c_void_p)
def nvmlDeviceGetP2PStatus(first: int, second: int, index: int, out: int) -> None:
    node, a, _ = device(first)
    _, b, _ = device(second)
    put(out, c_uint, node.p2p_status(a, b, index))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetNvLinkState(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_state(gpu, link))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetNvLinkRemotePciInfo_v2(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    fill_pci(out, node.nvlink_remote_bus(gpu, link))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetNvLinkRemoteDeviceType(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_remote_type(gpu, link))


@c_function(c_void_p, c_uint, c_void_p)
def nvmlDeviceGetNvLinkVersion(handle: int, link: int, out: int) -> None:
    node, gpu, _ = device(handle)
    put(out, c_uint, node.nvlink_version(gpu, link))
