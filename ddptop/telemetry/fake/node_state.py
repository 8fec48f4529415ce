"""The state of a simulated node: its profile, what tests changed (lost and denied GPUs, processes, Xids,
throttles, PCIe links, ECC errors), its clock, and the handles of its GPUs and MIG instances. What the node
answers is built on this: ``node_topology``, ``node_readings`` and ``nvml.FakeNvml``."""

from __future__ import annotations

import math
import threading
import time
import weakref
from typing import Callable

import pynvml

from ddptop.telemetry.fake.driver.abi import NvmlReturn, new_handle
from ddptop.telemetry.fake.nodes import GpuSpec, MigInstance, NodeProfile, load_profile
from ddptop.telemetry.fake.pci import PciLayout, bus_key, nvml_bus_id

MIB = 1 << 20

ALL_NODES: "weakref.WeakSet[NodeState]" = weakref.WeakSet()  # every node made, for the tests' bug check


class NodeState:
    """The part of a simulated node every other part reads; made only as part of one (``nvml.FakeNvml``)."""

    REPLAYS = False  # answers from a driver report (replay.ReplayNvml)

    def __init__(
        self,
        profile: str | NodeProfile = "dgx1",
        clock: Callable[[], float] = time.monotonic,
        steady: bool = False,
        fail: dict[str, int] | None = None,
        missing: set[str] | frozenset[str] = frozenset(),
        absent: set[str] | frozenset[str] = frozenset(),
        library_missing: bool = False,
        process_calls_v3: bool | None = None,
        memory_v2: bool | None = None,
    ) -> None:
        self.profile = profile if isinstance(profile, NodeProfile) else load_profile(profile)
        if self.profile.recorded is not None and not self.REPLAYS:
            raise TypeError("a driver report is replayed by replay.ReplayNvml (replay.replay_node), not FakeNvml")
        self.clock = clock
        self.steady = steady  # constant readings (no wave): for exact checks of averages and joules
        self.fail = dict(fail or {})
        self.lacks = set(self.profile.lacks) | set(missing)
        # switches for the two driver generations tests compare (the profile decides otherwise)
        for flag, function in ((process_calls_v3, "nvmlDeviceGetComputeRunningProcesses_v3"),
                               (memory_v2, "nvmlDeviceGetMemoryInfo_v2")):
            if flag is True:
                self.lacks.discard(function)
            elif flag is False:
                self.lacks.add(function)
        self.absent = set(absent)
        self.library_missing = library_missing
        self.lost: set[int] = set()
        self.denied: set[int] = {i for i, gpu in enumerate(self.profile.gpus) if not gpu.accessible}
        # gpu -> [(pid, bytes or None, MIG instance or None)]
        self.processes_on: dict[int, list[tuple[int, int | None, int | None]]] = {}
        for foreign in self.profile.foreign_processes:
            used = None if foreign.used_mib is None else foreign.used_mib * MIB
            self.processes_on.setdefault(foreign.gpu, []).append((foreign.pid, used, None))
        self.calls: dict[str, int] = {}  # binding function -> times called
        self.callback_errors: list[str] = []  # exceptions inside the C callbacks: a bug, tests assert none
        ALL_NODES.add(self)
        self.unsupported_fields: set[int] = {int(getattr(pynvml, f)) for f in self.profile.unsupported_fields}
        self._t0 = clock()
        self._epoch0 = time.time()
        self._xids: list[tuple[int, int]] = []
        self._sysfs: str | None = None
        self._lock = threading.Lock()
        self._handles: dict[tuple[int, int | None], int] = {}
        self._pci = PciLayout(self.profile)
        self.bus_ids = [nvml_bus_id(self._pci.endpoints[("gpu", str(i))][1]) for i in range(len(self.profile.gpus))]
        self.throttled: dict[int, tuple[int, float]] = {}  # gpu -> (reason bits, SM clock fraction of max)
        self.links: dict[int, tuple[int, int]] = {}  # gpu -> (PCIe generation, width) when not the maximum
        self.ecc: dict[int, int] = {}  # gpu -> volatile uncorrected ECC errors

    @property
    def count(self) -> int:
        return len(self.profile.gpus)

    # -- what tests change ---------------------------------------------------------------------------------
    def lose_gpu(self, index: int) -> None:
        self.lost.add(index)

    def deny_gpu(self, index: int) -> None:
        """This process may not use GPU ``index`` (another job's, cgroup-denied): its handle is refused."""
        self.denied.add(index)

    def attach_process(self, gpu: int, pid: int, used_bytes: int | None, mig: int | None = None) -> None:
        if mig is not None:
            self.mig_instance(gpu, mig)  # a test naming an instance the GPU lacks fails here, not later
        self.processes_on.setdefault(gpu, []).append((pid, used_bytes, mig))

    def xid(self, gpu: int, code: int) -> None:
        self._xids.append((gpu, code))

    def throttle(self, gpu: int, bits: int | None, clock_fraction: float = 0.7) -> None:
        """Hold clock event reasons active on a GPU (``None`` lets it run free again)."""
        if bits is None:
            self.throttled.pop(gpu, None)
        else:
            self.throttled[gpu] = (bits, clock_fraction)

    def pcie_link(self, gpu: int, generation: int | None = None, width: int | None = None) -> None:
        most = self.profile.gpus[gpu].pcie
        self.links[gpu] = (generation or most[0], width or most[1])

    def ecc_error(self, gpu: int, count: int = 1) -> None:
        self.ecc[gpu] = self.ecc.get(gpu, 0) + count

    # -- the GPUs and MIG instances, by index and by handle ----------------------------------------------------
    def check(self, index: int) -> GpuSpec:
        if index in self.lost:
            raise NvmlReturn(pynvml.NVML_ERROR_GPU_IS_LOST)
        return self.profile.gpus[index]

    def handle(self, index: int) -> int:
        if not 0 <= index < self.count:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index in self.denied:
            raise NvmlReturn(pynvml.NVML_ERROR_NO_PERMISSION)
        return self._handle_of(index, None)

    def handle_by_bus(self, bus_id: str) -> int:
        """The GPU at a PCI bus id (any spelling: 8- or 4-digit domain, any case); an NVSwitch's or an empty
        slot's is NOT_FOUND, one this process may not open NO_PERMISSION."""
        wanted = bus_key(bus_id)
        if wanted is None:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for index, known in enumerate(self.bus_ids):
            if bus_key(known) == wanted:
                if index in self.lost:
                    raise NvmlReturn(pynvml.NVML_ERROR_GPU_IS_LOST)
                return self.handle(index)
        raise NvmlReturn(pynvml.NVML_ERROR_NOT_FOUND)

    def _handle_of(self, index: int, mig: int | None) -> int:
        with self._lock:
            if (index, mig) not in self._handles:
                self._handles[(index, mig)] = new_handle(self, index, mig)
            return self._handles[(index, mig)]

    def mig_instance(self, index: int, mig: int | None) -> MigInstance:
        gpu = self.check(index)
        if mig is None or not 0 <= mig < len(gpu.mig):
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.mig[mig]

    # -- the clock ---------------------------------------------------------------------------------------------
    def timestamp_us(self) -> int:
        return int((self._epoch0 + self._elapsed()) * 1e6)  # NVML stamps readings in microseconds

    def elapsed(self) -> float:
        return self._elapsed()

    def _elapsed(self) -> float:
        return self.clock() - self._t0

    def _wave(self, index: int, period: float, phase: float = 0.0) -> float:
        """0..1, smooth; 1.0 when steady."""
        if self.steady:
            return 1.0
        return 0.5 + 0.5 * math.sin(2 * math.pi * self._elapsed() / period + index * 0.7 + phase)
