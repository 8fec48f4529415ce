"""How a simulated node's GPUs are connected, as NVML tells it: PCI bus ids and PCIe links, NUMA nodes and CPU
and memory affinity, the PCIe tree between two GPUs (NVML's common ancestor), peer-to-peer status and NVLinks."""

from __future__ import annotations

import pynvml

from ddptop.protocol.kernel_files import parse_cpu_list
from ddptop.telemetry.fake.driver.abi import NvmlReturn
from ddptop.telemetry.fake.node_state import NodeState
from ddptop.telemetry.fake.pci import NVSWITCHES, nvml_bus_id


class NodeTopology(NodeState):
    """The answers to the calls that say how GPUs are connected (``driver.topology``)."""

    def bus_id(self, index: int) -> str:
        self.check(index)
        return self.bus_ids[index]

    def pcie_max(self, index: int, asked: str = "") -> tuple[int, int]:
        """(generation, width); ``asked`` names the one a call wants (a replayed node may refuse just that)."""
        return self.check(index).pcie

    def pcie_current(self, index: int) -> tuple[int, int]:
        return self.links.get(index, self.check(index).pcie)

    def _numa(self, index: int) -> int:
        return self.profile.numa_of(self.profile.gpus[index].switch)

    def numa(self, index: int) -> int:
        """The NUMA node of the CPUs and memory nearest the GPU (its PCI device's, as sysfs numa_node says)."""
        self.check(index)
        return self._numa(index)

    def numa_node_id(self, index: int) -> int:
        """The GPU's own NUMA node: only where GPU memory is a NUMA node (Grace Hopper); x86: NOT_SUPPORTED."""
        gpu = self.check(index)
        if gpu.numa_node_id is None:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.numa_node_id

    def memory_affinity(self, index: int, scope: int) -> list[int]:
        """NUMA nodes nearest the GPU: its own (scope NODE) or every one of its socket's (scope SOCKET)."""
        self.check(index)
        numa = self._numa(index)
        if scope == pynvml.NVML_AFFINITY_SCOPE_SOCKET:
            first = numa - numa % self.profile.numa_per_socket
            return list(range(first, first + self.profile.numa_per_socket))
        if scope != pynvml.NVML_AFFINITY_SCOPE_NODE:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return [numa]

    def affinity(self, index: int) -> list[int]:
        gpu = self.check(index)
        if gpu.cpu_affinity:  # checked when the profile was loaded
            return parse_cpu_list(gpu.cpu_affinity)
        return self.profile.numa_cpus(self._numa(index))

    def _switches_above(self, switch: int) -> list[int]:
        chain = [switch]
        while (parent := self.profile.switches[chain[-1]].parent) is not None:
            chain.append(parent)
        return chain

    def p2p_status(self, a: int, b: int, index: int) -> int:
        """No profile says what P2P a platform allows: the call is answered as by a driver without it (a
        replayed report answers what its driver said)."""
        raise NvmlReturn(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)

    def common_ancestor(self, a: int, b: int) -> int:
        self.check(a)
        self.check(b)
        switches = self.profile.switches
        sa, sb = self.profile.gpus[a].switch, self.profile.gpus[b].switch
        if a == b:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        if sa == sb:
            return pynvml.NVML_TOPOLOGY_SINGLE
        if set(self._switches_above(sa)) & set(self._switches_above(sb)):  # a parent, grandparent, ...
            return pynvml.NVML_TOPOLOGY_MULTIPLE
        if switches[sa].root == switches[sb].root:
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        if self.profile.numa_of(sa) == self.profile.numa_of(sb) and self.profile.between_host_bridges == "NODE":
            return pynvml.NVML_TOPOLOGY_NODE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def _remote_ends(self, index: int) -> list[tuple[int, str]]:
        """(remote device type, remote PCI bus id) of each NVLink of a GPU, in link order."""
        gpu = self.profile.gpus[index]
        if self.profile.nvlink == "nvswitch":
            return [(pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH, nvml_bus_id(self._pci.nvswitches[link % NVSWITCHES]))
                    for link in range(gpu.nvlink_slots)]
        ends = [(pynvml.NVML_NVLINK_DEVICE_TYPE_GPU, self.bus_ids[peer])
                for (a, peer), count in sorted(self.profile.nvlink_pairs.items()) if a == index
                for _ in range(count)]
        return ends[: gpu.nvlink_slots]

    def nvlink_remote(self, index: int, link: int) -> tuple[int, str]:
        gpu = self.check(index)
        if gpu.nvlink_slots == 0:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # a PCIe GPU: no NVLink at all
        ends = self._remote_ends(index)
        if link >= gpu.nvlink_slots:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if link >= len(ends):
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # an unwired link
        return ends[link]

    def nvlink_state(self, index: int, link: int) -> int:
        self.nvlink_remote(index, link)
        return pynvml.NVML_FEATURE_ENABLED

    def nvlink_version(self, index: int, link: int) -> int:
        self.nvlink_remote(index, link)
        return self.profile.gpus[index].nvlink_version

    def nvlink_remote_bus(self, index: int, link: int) -> str:
        return self.nvlink_remote(index, link)[1]

    def nvlink_remote_type(self, index: int, link: int) -> int:
        return self.nvlink_remote(index, link)[0]
