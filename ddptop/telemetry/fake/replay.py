"""A machine's driver report (``ddptop doctor --report FILE``) replayed as a simulated node.

``DDPTOP_FAKE_NVML=path/to/report.json`` makes every ddptop command read the node the report describes, as
``DDPTOP_FAKE_NVML=<profile>`` does for the shipped profiles: ``nodes.load_profile`` reads the file
(``recorded.read_report``) into a node profile whose ``recorded`` holds the driver's answers, and
:class:`ReplayNvml` (a :class:`~ddptop.telemetry.fake.nvml.FakeNvml`) answers from them: each GPU's identity,
PCI bus id, memory, power limit, clocks, PCIe maxima, NUMA node, CPU and memory affinity, every NVLink's
state and far end, MIG mode and instances, the common ancestor of every pair, the driver's word on an
NVLink's far end that is no listed GPU, with the errors the driver gave (NOT_SUPPORTED stays NOT_SUPPORTED).
Its sysfs tree holds the GPUs and NICs at the PCI paths the report recorded, so ``ddptop topo`` on the replay
prints the matrix the machine printed. What a report does not hold (utilisation, power, temperature over
time) moves as on any simulated node.
"""

from __future__ import annotations

import os
from typing import Any

import pynvml

from ddptop.telemetry.fake.driver.abi import NvmlReturn
from ddptop.telemetry.fake.nodes import MigInstance, NodeProfile, load_profile
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.fake.pci import add_pci_device, new_sysfs
from ddptop.telemetry.fake.recorded import (FAKE_SUFFIX, MIB, Recorded, RecordedGpu, Refused, answered_bytes,
                                            mig_profile, plain_name)

__all__ = ["ReplayNvml", "replay_node"]


def given(value: Any) -> Any:
    """A recorded answer, or the driver's error raised as it returned it."""
    if isinstance(value, Refused):
        raise NvmlReturn(value.code)
    if value is None:
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
    return value


class ReplayNvml(FakeNvml):
    """A simulated node answering from a driver report (a profile ``nodes.load_profile`` read from one)."""

    REPLAYS = True

    def __init__(self, profile: NodeProfile, **options: Any) -> None:
        super().__init__(profile, **options)
        self.recorded: Recorded = profile.recorded
        self.bus_ids = [gpu.answers["bus_id"] if isinstance(gpu.answers.get("bus_id"), str) else ""
                        for gpu in self.recorded.gpus]

    def _gpu(self, index: int) -> RecordedGpu:
        self.check(index)
        return self.recorded.gpus[index]

    def handle(self, index: int) -> int:
        refused = self.recorded.gpus[index].handle if 0 <= index < self.count else None
        if refused is not None:
            raise NvmlReturn(refused.code)
        return super().handle(index)

    def handle_by_bus(self, bus_id: str) -> int:
        answer = self.recorded.lookups.get(bus_id)
        if isinstance(answer, Refused):
            raise NvmlReturn(answer.code)
        return super().handle_by_bus(bus_id)

    def name(self, index: int, mig: int | None) -> str:
        if mig is not None:
            return plain_name(given(self._instance(index, mig)["name"])) + FAKE_SUFFIX
        return plain_name(given(self._gpu(index).answers["name"])) + FAKE_SUFFIX

    def uuid(self, index: int, mig: int | None) -> str:
        if mig is not None:
            return given(self._instance(index, mig)["uuid"])
        return given(self._gpu(index).answers["uuid"])

    def bus_id(self, index: int) -> str:
        return given(self._gpu(index).answers["bus_id"])

    def power_limit_mw(self, index: int) -> int:
        return given(self._gpu(index).answers["power_limit_mw"])

    def max_clock(self, index: int, clock: int) -> int:
        sm = clock in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS)
        return given(self._gpu(index).answers["max_clock_sm" if sm else "max_clock_mem"])

    def pcie_max(self, index: int, asked: str = "") -> tuple[int, int]:
        answers = self._gpu(index).answers
        if asked:
            given(answers[f"pcie_{asked}"])
        return (self._or(answers["pcie_generation"], 1), self._or(answers["pcie_width"], 1))

    @staticmethod
    def _or(value: Any, default: int) -> int:
        return value if isinstance(value, int) else default

    def numa_node_id(self, index: int) -> int:
        return given(self._gpu(index).answers["numa_node_id"])

    def memory_affinity(self, index: int, scope: int) -> list[int]:
        key = "memory_affinity_socket" if scope == pynvml.NVML_AFFINITY_SCOPE_SOCKET else "memory_affinity_node"
        return given(self._gpu(index).answers[key])

    def affinity(self, index: int) -> list[int]:
        return given(self._gpu(index).answers["cpu_affinity"])

    def common_ancestor(self, a: int, b: int) -> int:
        self.check(a)
        self.check(b)
        if a == b:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        return given(self.recorded.ancestors.get((a, b), Refused(pynvml.NVML_ERROR_INVALID_ARGUMENT)))

    def p2p_status(self, a: int, b: int, index: int) -> int:
        self.check(a)
        self.check(b)
        return given(self.recorded.p2p.get((a, b, index), Refused(pynvml.NVML_ERROR_INVALID_ARGUMENT)))

    def _link(self, index: int, link: int) -> dict[str, Any]:
        links = self._gpu(index).nvlinks
        if not 0 <= link < len(links):
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)  # past the last link the driver answered
        return links[link]

    def nvlink_state(self, index: int, link: int) -> int:
        return given(self._link(index, link)["state"])

    def nvlink_version(self, index: int, link: int) -> int:
        found = self._link(index, link)
        given(found["state"])
        return given(found["version"])

    def nvlink_remote_bus(self, index: int, link: int) -> str:
        found = self._link(index, link)
        given(found["state"])
        return given(found["remote_bus"])

    def nvlink_remote_type(self, index: int, link: int) -> int:
        found = self._link(index, link)
        given(found["state"])
        return given(found["remote_type"])

    def memory(self, index: int, mig: int | None) -> tuple[int, int, int]:
        total = given(self._instance(index, mig)["memory_total"] if mig is not None
                      else self._gpu(index).answers["memory_total"])
        whole, reserved, used = super().memory(index, mig)
        scale = total / whole if whole else 1.0
        reserved, used = min(int(reserved * scale), total), int(used * scale)
        return total, reserved, min(used, total - reserved)

    def mig_mode(self, index: int) -> int:
        return given(self._gpu(index).answers["mig_mode"])[0]

    def max_mig_devices(self, index: int) -> int:
        return given(self._gpu(index).answers["max_mig_devices"])

    def _instance(self, index: int, slot: int | None) -> dict[str, Any]:
        found = self._gpu(index).mig.get(slot if slot is not None else -1)
        if found is None:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_FOUND)
        return found

    def mig_handle(self, index: int, mig: int) -> int:
        mode = self._gpu(index).answers.get("mig_mode")
        if not isinstance(mode, list) or mode[0] != pynvml.NVML_DEVICE_MIG_ENABLE:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        given(self._instance(index, mig)["handle"])
        return self._handle_of(index, mig)

    def mig_instance(self, index: int, mig: int | None) -> MigInstance:
        found = self._instance(index, mig)
        return MigInstance(mig_profile(found.get("name")), max(1, answered_bytes(found.get("memory_total")) // MIB),
                           given(found["gpu_instance_id"]), given(found["compute_instance_id"]))

    def _write_sysfs(self) -> str:
        """The GPUs and NICs at the PCI paths the report recorded, with their numa_node files."""
        root = new_sysfs("ddptop-replay-sysfs-")
        devices: list[tuple[str | None, list[str] | None, int | None]] = [
            (None, gpu.sysfs_path, gpu.sysfs_numa) for gpu in self.recorded.gpus]
        devices += [(name, path, numa) for name, _bdf, path, numa in self.recorded.nics]
        for nic, path, numa in devices:
            if not path:  # a GPU or NIC the machine's sysfs placed on no PCI path (a soft RoCE device, a VM)
                if nic is not None:
                    os.makedirs(os.path.join(root, "class", "infiniband", nic), exist_ok=True)
                continue
            add_pci_device(root, path, -1 if numa is None else numa, nic)
        return root


def replay_node(path: str) -> ReplayNvml:
    """A simulated node answering as the machine of the report at ``path`` did; ProfileError in one line for a
    file that is no such report."""
    return ReplayNvml(load_profile(path))
