"""A simulated NVML node, for tests and demos on machines without a GPU. Everything it reports is FAKE.

``FakeNvml`` answers the subset of the ``pynvml`` API that ddptop calls, with pynvml's own constants and
error classes, so the code that reads it is the code that reads a real driver. The ``dgx1`` node is the
machine whose ``nvidia-smi topo -m`` the README of PyTorch's DDP benchmark (``benchmarks/distributed/ddp``)
prints as its example output, a DGX-1: eight Tesla V100-SXM2 in a hybrid cube mesh of NVLinks
(NV1/NV2), two GPUs and one Mellanox NIC behind each of four PCIe switches, two switches per CPU socket,
NUMA split 0-3 / 4-7. NICs are not NVML's business, so the fake also writes the sysfs tree such a node has
(``DDPTOP_SYSFS_ROOT``), which the topology reader walks exactly as it walks ``/sys``.

Readings change smoothly with a clock (``clock``, default ``time.monotonic``); counters (energy, PCIe and
NVLink bytes) are exact integrals of the rates they report, so tests can check derived rates and joules.
Faults are injected per instance: ``fail`` (function → NVML error code), ``missing`` (functions the
"driver" lacks: FunctionNotFound), ``absent`` (attributes the "binding" lacks: AttributeError),
``lose_gpu(i)`` (GPU_IS_LOST from then on), ``library_missing`` (nvmlInit fails), ``xid(i, code)``,
``ecc_error(i)``. Interference is injected the same way: ``throttle(i, bits)`` (clock event reasons held
active, the SM clock pulled down to ``clock_fraction`` of its maximum), ``attach_process(i, pid, bytes)``
(any PID: a rank's, or a stranger's), ``pcie_link(i, gen, width)`` (a link trained down; every link is
gen 3 x16, the most a V100-SXM2 and its slot allow).
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import tempfile
import threading
import time
from types import SimpleNamespace
from typing import Any, Callable

import pynvml

IS_FAKE = True
NODES = ("dgx1",)

# GPU i -> {peer: number of NVLinks}, as in that README's matrix.
DGX1_NVLINKS: dict[int, dict[int, int]] = {
    0: {1: 1, 2: 1, 3: 2, 4: 2},
    1: {0: 1, 2: 2, 3: 1, 5: 2},
    2: {0: 1, 1: 2, 3: 2, 6: 1},
    3: {0: 2, 1: 1, 2: 2, 7: 1},
    4: {0: 2, 5: 1, 6: 1, 7: 2},
    5: {1: 2, 4: 1, 6: 2, 7: 1},
    6: {2: 1, 4: 1, 5: 2, 7: 2},
    7: {3: 1, 4: 2, 5: 1, 6: 2},
}
DGX1_AFFINITY_CPUS = list(range(0, 20)) + list(range(40, 60))  # that README shows 0-19,40-59 for every GPU
GIB = 1 << 30
RESERVED_BYTES = 400 << 20  # memory the driver keeps for itself: in v1's "used", apart in v2
SM_CLOCK_MAX_MHZ = 1530
PCIE_GEN_MAX, PCIE_WIDTH_MAX = 3, 16  # a V100-SXM2 in a DGX-1: PCIe gen 3 x16


class _Value(SimpleNamespace):
    """The union inside nvmlFieldValue_t: every member present, as ctypes would read them."""


class _FieldValue(SimpleNamespace):
    pass


def _switch_of_gpu(index: int) -> int:
    return index // 2


def _cpu_of_switch(switch: int) -> int:
    return switch // 2


class FakeNvml:
    IS_FAKE = True
    FAKE_NODE = "dgx1"

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        steady: bool = False,
        fail: dict[str, int] | None = None,
        missing: set[str] | frozenset[str] = frozenset(),
        absent: set[str] | frozenset[str] = frozenset(),
        library_missing: bool = False,
        process_calls_v3: bool = False,
        memory_v2: bool = True,
    ) -> None:
        self.clock = clock
        self.steady = steady  # constant readings (no wave): for exact checks of averages and joules
        self.fail = dict(fail or {})
        self.missing = set(missing)
        self.absent = set(absent)
        self.library_missing = library_missing
        # The DGX-1's driver predates the _v3 process calls: pynvml's unversioned call then raises its
        # NVMLLibraryMismatchError (not an NVMLError), and only _v2 answers.
        self.process_calls_v3 = process_calls_v3
        self.memory_v2 = memory_v2  # whether the "driver" has nvmlDeviceGetMemoryInfo_v2
        self.lost: set[int] = set()
        self.denied: set[int] = set()
        self.processes: dict[int, list[tuple[int, int]]] = {}  # gpu -> [(pid, bytes)]
        self.calls: dict[str, int] = {}  # function -> times called
        self.unsupported_fields: set[int] = set()  # field ids answered NOT_SUPPORTED (e.g. PCIe counters)
        self._t0 = clock()
        self._epoch0 = time.time()
        self._xids: list[tuple[int, int]] = []
        self._sysfs: str | None = None
        self._lock = threading.Lock()
        self.count = 8
        self.bus_ids = [self._gpu_bus(i) for i in range(self.count)]
        self.throttled: dict[int, tuple[int, float]] = {}  # gpu -> (reason bits, SM clock fraction of max)
        self.links: dict[int, tuple[int, int]] = {}  # gpu -> (PCIe generation, width) when not the maximum
        self.ecc: dict[int, int] = {}  # gpu -> volatile uncorrected ECC errors

    # -- what tests change ---------------------------------------------------------------------------------
    def lose_gpu(self, index: int) -> None:
        self.lost.add(index)

    def deny_gpu(self, index: int) -> None:
        """This process may not use GPU ``index`` (another job's, cgroup-denied): its handle is refused."""
        self.denied.add(index)

    def attach_process(self, gpu: int, pid: int, used_bytes: int) -> None:
        self.processes.setdefault(gpu, []).append((pid, used_bytes))

    def detach_process(self, gpu: int, pid: int) -> None:
        self.processes[gpu] = [(p, b) for p, b in self.processes.get(gpu, ()) if p != pid]

    def xid(self, gpu: int, code: int) -> None:
        self._xids.append((gpu, code))

    def throttle(self, gpu: int, bits: int | None, clock_fraction: float = 0.7) -> None:
        """Hold clock event reasons active on a GPU (``None`` lets it run free again)."""
        if bits is None:
            self.throttled.pop(gpu, None)
        else:
            self.throttled[gpu] = (bits, clock_fraction)

    def pcie_link(self, gpu: int, generation: int = PCIE_GEN_MAX, width: int = PCIE_WIDTH_MAX) -> None:
        self.links[gpu] = (generation, width)

    def ecc_error(self, gpu: int, count: int = 1) -> None:
        self.ecc[gpu] = self.ecc.get(gpu, 0) + count

    # -- plumbing --------------------------------------------------------------------------------------------
    def __getattribute__(self, name: str) -> Any:
        if name.startswith("nvml") and not name.startswith(("nvmlClocks", "nvmlEventType", "nvmlMemory_v2")):
            if name in object.__getattribute__(self, "absent"):
                raise AttributeError(name)
            calls = object.__getattribute__(self, "calls")
            calls[name] = calls.get(name, 0) + 1
            if name in object.__getattribute__(self, "missing"):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
            code = object.__getattribute__(self, "fail").get(name)
            if code is not None:
                raise pynvml.NVMLError(code)
        return object.__getattribute__(self, name)

    def __getattr__(self, name: str) -> Any:  # constants and error classes: pynvml's own
        if name.startswith(("NVML_", "NVMLError", "NVMLLibraryMismatchError", "nvmlClocks", "nvmlEventType",
                            "nvmlMemory_v2")):
            return getattr(pynvml, name)
        raise AttributeError(name)

    def _elapsed(self) -> float:
        return self.clock() - self._t0

    def _handle(self, handle: Any) -> int:
        index = handle.index
        if index in self.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        return index

    def _wave(self, index: int, period: float, phase: float = 0.0) -> float:
        """0..1, smooth; 1.0 when steady."""
        if self.steady:
            return 1.0
        return 0.5 + 0.5 * math.sin(2 * math.pi * self._elapsed() / period + index * 0.7 + phase)

    @staticmethod
    def _gpu_bus(index: int) -> str:
        switch = _switch_of_gpu(index)
        base = 0x04 + (switch % 2) * 0x06 + _cpu_of_switch(switch) * 0x80
        return f"00000000:{base + 2 + index % 2:02X}:00.0"

    # -- system ------------------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        if self.library_missing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    def nvmlShutdown(self) -> None:
        pass

    def nvmlSystemGetDriverVersion(self) -> str:
        return "535.183.01"

    def nvmlSystemGetNVMLVersion(self) -> str:
        return "12.535.183.01"

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 12020

    def nvmlDeviceGetCount(self) -> int:
        return self.count

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        if not 0 <= index < self.count:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if index in self.denied:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION)
        return SimpleNamespace(index=index)

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._handle(handle)

    # -- slow-changing -----------------------------------------------------------------------------------------
    def nvmlDeviceGetName(self, handle: Any) -> str:
        self._handle(handle)
        return "Tesla V100-SXM2-16GB (FAKE)"

    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        return f"GPU-fa4e0000-0000-0000-0000-00000000000{self._handle(handle)}"

    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return SimpleNamespace(busId=self.bus_ids[self._handle(handle)])

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: Any) -> int:
        self._handle(handle)
        return 300_000

    def nvmlDeviceGetMaxClockInfo(self, handle: Any, clock_type: int) -> int:
        self._handle(handle)
        return SM_CLOCK_MAX_MHZ if clock_type == pynvml.NVML_CLOCK_SM else 877

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: Any) -> int:
        self._handle(handle)
        return PCIE_GEN_MAX

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: Any) -> int:
        self._handle(handle)
        return PCIE_WIDTH_MAX

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: Any) -> int:
        return self.links.get(self._handle(handle), (PCIE_GEN_MAX, PCIE_WIDTH_MAX))[0]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: Any) -> int:
        return self.links.get(self._handle(handle), (PCIE_GEN_MAX, PCIE_WIDTH_MAX))[1]

    def nvmlDeviceGetNumaNodeId(self, handle: Any) -> int:
        return _cpu_of_switch(_switch_of_gpu(self._handle(handle)))

    def nvmlDeviceGetCpuAffinity(self, handle: Any, cpu_set_size: int) -> list[int]:
        self._handle(handle)
        words = [0] * cpu_set_size
        for cpu in DGX1_AFFINITY_CPUS:
            words[cpu // 64] |= 1 << (cpu % 64)
        return words

    def nvmlDeviceGetTopologyCommonAncestor(self, first: Any, second: Any) -> int:
        a, b = self._handle(first), self._handle(second)
        if a == b:
            return pynvml.NVML_TOPOLOGY_INTERNAL
        if _switch_of_gpu(a) == _switch_of_gpu(b):
            return pynvml.NVML_TOPOLOGY_SINGLE
        if _cpu_of_switch(_switch_of_gpu(a)) == _cpu_of_switch(_switch_of_gpu(b)):
            return pynvml.NVML_TOPOLOGY_HOSTBRIDGE
        return pynvml.NVML_TOPOLOGY_SYSTEM

    def _links(self, index: int) -> list[int]:
        """Remote GPU of each of the 6 NVLinks of a V100, in link order."""
        return [peer for peer, count in sorted(DGX1_NVLINKS[index].items()) for _ in range(count)]

    def nvmlDeviceGetNvLinkState(self, handle: Any, link: int) -> int:
        if link >= len(self._links(self._handle(handle))):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return pynvml.NVML_FEATURE_ENABLED

    def nvmlDeviceGetNvLinkRemotePciInfo(self, handle: Any, link: int) -> Any:
        links = self._links(self._handle(handle))
        if link >= len(links):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return SimpleNamespace(busId=self.bus_ids[links[link]])

    def nvmlDeviceGetNvLinkRemoteDeviceType(self, handle: Any, link: int) -> int:
        self.nvmlDeviceGetNvLinkRemotePciInfo(handle, link)
        return pynvml.NVML_NVLINK_DEVICE_TYPE_GPU

    # -- fast-changing -------------------------------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: Any) -> Any:
        index = self._handle(handle)
        gpu = round(55 + 40 * self._wave(index, 7.0)) if not self.steady else 90
        return SimpleNamespace(gpu=gpu, memory=round(gpu * 0.45))

    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        """pynvml's signature: without ``version`` the v1 struct, whose ``used`` counts the memory the driver
        reserves (``RESERVED_BYTES``); with ``nvmlMemory_v2`` the v2 struct, which reports it apart."""
        index = self._handle(handle)
        total = 16 * GIB - 512 * (1 << 20)
        used = 600 * (1 << 20) + sum(b for _, b in self.processes.get(index, ()))
        if not self.processes.get(index) and not self.steady:
            used += int(9 * GIB * self._wave(index, 11.0, 1.0))
        used = min(used, total - RESERVED_BYTES)
        if not version:
            return SimpleNamespace(total=total, used=used + RESERVED_BYTES, free=total - used - RESERVED_BYTES)
        if not self.memory_v2:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)  # as _nvmlGetFunctionPointer does
        return SimpleNamespace(version=version, total=total, reserved=RESERVED_BYTES, used=used,
                               free=total - used - RESERVED_BYTES)

    def _power_w(self, index: int) -> float:
        return 150.0 + 20.0 * index if self.steady else 120.0 + 150.0 * self._wave(index, 7.0)

    def nvmlDeviceGetPowerUsage(self, handle: Any) -> int:
        return int(self._power_w(self._handle(handle)) * 1000)

    def _energy_mj(self, index: int) -> int:
        t = self._elapsed()
        if self.steady:
            return int(self._power_w(index) * t * 1000)
        # integral of 120 + 150 * (0.5 + 0.5 sin(w t + p)) dt
        w, p = 2 * math.pi / 7.0, index * 0.7
        joules = 195.0 * t - 75.0 / w * (math.cos(w * t + p) - math.cos(p))
        return int(joules * 1000)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: Any) -> int:
        return self._energy_mj(self._handle(handle))

    def nvmlDeviceGetTemperature(self, handle: Any, sensor: int) -> int:
        index = self._handle(handle)
        return round(38 + 30 * self._wave(index, 23.0, 2.0))

    def nvmlDeviceGetClockInfo(self, handle: Any, clock_type: int) -> int:
        index = self._handle(handle)
        if clock_type == pynvml.NVML_CLOCK_SM:
            if index in self.throttled:
                return round(SM_CLOCK_MAX_MHZ * self.throttled[index][1])
            return round(1312 + 218 * self._wave(index, 13.0, 0.5))
        return 877

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: Any) -> int:
        index = self._handle(handle)
        if index in self.throttled:
            return self.throttled[index][0]
        if not self.steady and self._wave(index, 7.0) > 0.9:
            return pynvml.nvmlClocksEventReasonSwPowerCap
        return pynvml.nvmlClocksEventReasonNone

    nvmlDeviceGetCurrentClocksThrottleReasons = nvmlDeviceGetCurrentClocksEventReasons

    def _counter(self, index: int, field: int) -> int:
        t = self._elapsed()
        rates = {  # bytes/s (NVLink counters are in KiB, as NVML's are)
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: 2.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: 3.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 40.0e9 + 1.0e9 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 41.0e9 + 1.0e9 * index,
        }
        value = rates[field] * t
        if field in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX):
            value /= 1024
        return int(value)

    def nvmlDeviceGetFieldValues(self, handle: Any, field_ids: list[Any]) -> list[Any]:
        index = self._handle(handle)
        stamp = int((self._epoch0 + self._elapsed()) * 1e6)  # NVML stamps readings in microseconds
        values = []
        for item in field_ids:
            field, scope = item if isinstance(item, tuple) else (item, 0)
            out = _FieldValue(fieldId=field, scopeId=scope, timestamp=stamp, latencyUsec=0)
            if field == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
                number, known = self._energy_mj(index), True
            elif field in self.unsupported_fields:
                number, known = 0, False
            else:
                try:
                    number, known = self._counter(index, field), True
                except KeyError:
                    number, known = 0, False
            out.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            out.nvmlReturn = pynvml.NVML_SUCCESS if known else pynvml.NVML_ERROR_NOT_SUPPORTED
            out.value = _Value(ullVal=number, ulVal=number, uiVal=number & 0xFFFFFFFF, dVal=float(number))
            values.append(out)
        return values

    def nvmlDeviceGetComputeRunningProcesses(self, handle: Any) -> list[Any]:
        if not self.process_calls_v3:  # pynvml's @throwOnVersionMismatch around the _v3 call
            raise pynvml.NVMLLibraryMismatchError(
                "Unversioned function called and the pyNVML version does not match the NVML lib version.")
        return self.nvmlDeviceGetComputeRunningProcesses_v2(handle)

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: Any) -> list[Any]:
        index = self._handle(handle)
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.processes.get(index, ())]

    def nvmlDeviceGetTotalEccErrors(self, handle: Any, error_type: int, counter_type: int) -> int:
        return self.ecc.get(self._handle(handle), 0)

    # -- Xid events ---------------------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace(registered=set())

    def nvmlDeviceRegisterEvents(self, handle: Any, event_types: int, event_set: Any) -> None:
        event_set.registered.add(self._handle(handle))

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> Any:
        with self._lock:
            for position, (gpu, code) in enumerate(self._xids):
                if gpu in event_set.registered:
                    del self._xids[position]
                    return SimpleNamespace(
                        device=SimpleNamespace(index=gpu),
                        eventType=pynvml.nvmlEventTypeXidCriticalError,
                        eventData=code,
                    )
        raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        pass

    # -- the sysfs tree of this node (NICs and PCIe paths) ----------------------------------------------------
    @property
    def DDPTOP_SYSFS_ROOT(self) -> str:  # noqa: N802 - read by name, like NVML constants
        with self._lock:
            if self._sysfs is None:
                self._sysfs = _write_dgx1_sysfs()
                atexit.register(shutil.rmtree, self._sysfs, True)
            return self._sysfs


def _write_dgx1_sysfs() -> str:
    """devices/pci0000:XX/<root port>/<switch up>/<switch down>/<endpoint>, bus/pci/devices and
    class/infiniband links, numa_node files: the parts of /sys the topology reader looks at."""
    root = tempfile.mkdtemp(prefix="ddptop-fake-sysfs-")
    bus_dir = os.path.join(root, "bus", "pci", "devices")
    ib_dir = os.path.join(root, "class", "infiniband")
    os.makedirs(bus_dir)
    os.makedirs(ib_dir)
    for switch in range(4):
        cpu = _cpu_of_switch(switch)
        top = 0x80 * cpu
        base = 0x04 + (switch % 2) * 0x06 + top
        path = [
            f"pci0000:{top:02x}",
            f"0000:{top:02x}:{1 + switch % 2:02x}.0",  # root port
            f"0000:{base - 1:02x}:00.0",  # switch upstream port
        ]
        # endpoints: the NIC, then the switch's two GPUs
        endpoints = [(f"0000:{base + 1 + k:02x}:00.0", k) for k in range(3)]
        for bdf, k in endpoints:
            device = os.path.join(root, "devices", *path, f"0000:{base:02x}:{8 + k:02x}.0", bdf)
            os.makedirs(device)
            with open(os.path.join(device, "numa_node"), "w", encoding="ascii") as handle:
                handle.write(f"{cpu}\n")
            os.symlink(device, os.path.join(bus_dir, bdf))
            if k == 0:
                name = f"mlx5_{switch}"
                ib_entry = os.path.join(device, "infiniband", name)
                os.makedirs(ib_entry)
                os.symlink("../..", os.path.join(ib_entry, "device"))
                os.symlink(ib_entry, os.path.join(ib_dir, name))
    return root


_MODULES: dict[str, FakeNvml] = {}


def module_for(node: str) -> FakeNvml:
    """The process-wide fake for ``DDPTOP_FAKE_NVML=<node>``."""
    if node not in NODES:
        raise ValueError(f"DDPTOP_FAKE_NVML={node!r} is not a known fake node (known: {', '.join(NODES)})")
    if node not in _MODULES:
        _MODULES[node] = FakeNvml()
    return _MODULES[node]
