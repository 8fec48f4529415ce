"""A simulated NVML node, for tests and demos on machines without a GPU. Everything it reports is FAKE.

Three layers, the lowest one simulated:
- the node (:class:`FakeNvml`): a profile from ``ddptop/telemetry/fake/profiles/`` (``docs/fake-nodes.md``), its
  readings, and faults injected by tests;
- the C library (``driver``): ``nvml.h``'s functions as ctypes callbacks that fill the real structs;
- the binding: the installed ``pynvml`` module file, unchanged, loaded a second time over the fake library
  (``driver.library.binding``; the ``pynvml`` module itself is never touched). A ``FakeNvml`` is handed to
  ddptop where the ``pynvml`` module would be; an attribute read on it returns that binding's own function
  or constant, so every call crosses pynvml's real code and a C boundary.

NICs are not NVML's business, so the node also writes the sysfs tree such a machine has
(``DDPTOP_SYSFS_ROOT``), which the topology reader walks exactly as it walks ``/sys``.

Readings change smoothly with a clock (``clock``, default ``time.monotonic``); counters (energy, PCIe and
NVLink bytes) are exact integrals of the rates they report, so tests can check derived rates and joules.
Faults are injected per instance: ``fail`` (C function → NVML error code), ``missing`` (C functions the
"driver" lacks: FUNCTION_NOT_FOUND), ``absent`` (functions the "binding" lacks: AttributeError),
``lose_gpu(i)`` (GPU_IS_LOST from then on), ``deny_gpu(i)`` (NO_PERMISSION on its handle),
``library_missing`` (nvmlInit fails), ``xid(i, code)``, ``ecc_error(i)``. Interference:
``throttle(i, bits)`` (clock event reasons held active, the SM clock pulled down), ``attach_process(i, pid,
bytes, mig=None)`` (any PID: a rank's, or a stranger's; on a MIG GPU inside instance ``mig``, listed on that
instance's handle and, with its GPU instance id, on the GPU's), ``pcie_link(i, gen, width)`` (a link trained
down).
"""

from __future__ import annotations

import atexit
import math
import shutil
import threading
import time
import weakref
from typing import Any, Callable

import pynvml

from ddptop.protocol.kernel_files import parse_cpu_list
from ddptop.telemetry.fake.driver import library as fake_library
from ddptop.telemetry.fake.driver.abi import NvmlReturn, new_handle
from ddptop.telemetry.fake.nodes import GpuSpec, MigInstance, NodeProfile, known_nodes, load_profile
from ddptop.telemetry.fake.pci import NVSWITCHES, PciLayout, add_pci_device, bus_key, new_sysfs, nvml_bus_id

IS_FAKE = True
GIB = 1 << 30
MIB = 1 << 20
RESERVED_BYTES = 400 << 20  # memory the driver keeps for itself: in v1's "used", apart in v2
MIG_CONTEXT_BYTES = 12 << 20  # what an idle MIG instance shows in use (nvidia-smi: about 12 MiB of 4864)


ALL_NODES: "weakref.WeakSet[FakeNvml]" = weakref.WeakSet()  # every node made, for the tests' bug check


def __getattr__(name: str) -> Any:
    if name == "NODES":  # the shipped profiles, read when asked
        return tuple(known_nodes())
    raise AttributeError(name)


class FakeNvml:
    IS_FAKE = True
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
    def FAKE_NODE(self) -> str:  # noqa: N802 - read by name, like NVML constants
        return self.profile.name

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

    # -- the binding: pynvml's own functions, answered by this node ----------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        if name in self.absent:
            raise AttributeError(name)  # as an older nvidia-ml-py lacks it
        binding = fake_library.activate(self)
        value = getattr(binding, name)
        if name.startswith("nvml") and callable(value) and not isinstance(value, type):
            self.calls[name] = self.calls.get(name, 0) + 1
        return value

    # -- what the C library asks --------------------------------------------------------------------------------
    def refusal(self, function: str) -> int:
        """A return code that answers ``function`` before it runs: an injected fault or a missing function."""
        if self.library_missing and function in ("nvmlInitWithFlags", "nvmlInit_v2"):
            return pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
        if function in self.lacks:
            return pynvml.NVML_ERROR_FUNCTION_NOT_FOUND  # what pynvml raises when dlsym finds nothing
        return self.fail.get(function, 0)

    def init(self) -> None:
        pass

    def shutdown(self) -> None:
        pass

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

    def name(self, index: int, mig: int | None) -> str:
        gpu = self.check(index)
        if mig is not None:
            return f"{gpu.name} MIG {self.mig_instance(index, mig).profile} (FAKE)"
        return f"{gpu.name} (FAKE)"

    def uuid(self, index: int, mig: int | None) -> str:
        gpu = self.check(index)
        if mig is None:
            return gpu.uuid
        return f"MIG-{gpu.uuid[4:-4]}{mig:04x}"

    def bus_id(self, index: int) -> str:
        self.check(index)
        return self.bus_ids[index]

    def power_limit_mw(self, index: int) -> int:
        return self.check(index).power_limit_w * 1000

    def max_clock(self, index: int, clock: int) -> int:
        gpu = self.check(index)
        return gpu.sm_clock_max_mhz if clock in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS) \
            else gpu.memory_clock_mhz

    def clock_mhz(self, index: int, clock: int) -> int:
        gpu = self.check(index)
        if clock not in (pynvml.NVML_CLOCK_SM, pynvml.NVML_CLOCK_GRAPHICS):
            return gpu.memory_clock_mhz
        if index in self.throttled:
            return round(gpu.sm_clock_max_mhz * self.throttled[index][1])
        return round(gpu.sm_clock_max_mhz * (0.857 + 0.143 * self._wave(index, 13.0, 0.5)))

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

    def utilization(self, index: int, mig: int | None) -> tuple[int, int]:
        gpu = self.check(index)
        if gpu.mig or mig is not None:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)  # NVML has no utilisation in MIG mode
        busy = 90 if self.steady else round(55 + 40 * self._wave(index, 7.0))
        return busy, round(busy * 0.45)

    def memory(self, index: int, mig: int | None) -> tuple[int, int, int]:
        """(total, reserved by the driver, used by processes) in bytes."""
        gpu = self.check(index)
        if mig is not None:  # an instance's own slice: what its processes hold, over what its context keeps
            mine = sum(b or 0 for _, b, on in self.processes_on.get(index, ()) if on == mig)
            total = self.mig_instance(index, mig).memory_mib * MIB
            return total, 0, min(MIG_CONTEXT_BYTES + mine, total)
        total = gpu.memory_mib * MIB
        used = 600 * MIB + sum(b or 0 for _, b, _ in self.processes_on.get(index, ()))
        if not self.processes_on.get(index) and not self.steady:
            used += int(0.55 * total * self._wave(index, 11.0, 1.0))
        return total, RESERVED_BYTES, min(used, total - RESERVED_BYTES)

    def _power_w(self, index: int) -> float:
        return 150.0 + 20.0 * index if self.steady else 120.0 + 150.0 * self._wave(index, 7.0)

    def power_mw(self, index: int) -> int:
        self.check(index)
        return int(self._power_w(index) * 1000)

    def energy_mj(self, index: int) -> int:
        self.check(index)
        t = self._elapsed()
        if self.steady:
            return int(self._power_w(index) * t * 1000)
        # integral of 120 + 150 * (0.5 + 0.5 sin(w t + p)) dt
        w, p = 2 * math.pi / 7.0, index * 0.7
        joules = 195.0 * t - 75.0 / w * (math.cos(w * t + p) - math.cos(p))
        return int(joules * 1000)

    def temperature(self, index: int) -> int:
        self.check(index)
        return round(38 + 30 * self._wave(index, 23.0, 2.0))

    def clock_event_reasons(self, index: int) -> int:
        self.check(index)
        if index in self.throttled:
            return self.throttled[index][0]
        if not self.steady and self._wave(index, 7.0) > 0.9:
            return pynvml.nvmlClocksEventReasonSwPowerCap
        return pynvml.nvmlClocksEventReasonNone

    def timestamp_us(self) -> int:
        return int((self._epoch0 + self._elapsed()) * 1e6)  # NVML stamps readings in microseconds

    def field(self, index: int, field: int) -> int | None:
        """A field value, or None when this GPU/driver does not support it."""
        self.check(index)
        if field == pynvml.NVML_FI_DEV_TOTAL_ENERGY_CONSUMPTION:
            return self.energy_mj(index)
        if field in self.unsupported_fields:
            return None
        t = self._elapsed()
        rates = {  # bytes/s (NVLink counters are in KiB, as NVML's are)
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: 2.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: 3.0e9 + 1.0e8 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX: 40.0e9 + 1.0e9 * index,
            pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX: 41.0e9 + 1.0e9 * index,
        }
        if field not in rates:
            return None
        nvlink = field in (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX)
        if nvlink and self.profile.gpus[index].nvlink_slots == 0:
            return None
        value = rates[field] * t / (1024 if nvlink else 1)
        return int(value) % (1 << self.profile.counter_bits)

    def processes(self, index: int, mig: int | None = None) -> list[tuple[int, int | None, int, int]]:
        """(pid, used bytes or None, GPU instance, compute instance) of each compute process: on a MIG
        instance's handle its own, on the GPU's every one (each with its instance's ids, as NVML gives)."""
        gpu = self.check(index)
        no_instance = 0xFFFFFFFF
        listed = []
        for pid, used, on in self.processes_on.get(index, ()):
            if mig is not None and on != mig:
                continue
            instance = gpu.mig[on] if on is not None and on < len(gpu.mig) else None
            listed.append((pid, used, instance.gpu_instance if instance else no_instance,
                           instance.compute_instance if instance else no_instance))
        return listed

    def ecc_errors(self, index: int) -> int:
        self.check(index)
        return self.ecc.get(index, 0)

    def mig_mode(self, index: int) -> int:
        gpu = self.check(index)
        if not gpu.mig_capable:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.NVML_DEVICE_MIG_ENABLE if gpu.mig else pynvml.NVML_DEVICE_MIG_DISABLE

    def max_mig_devices(self, index: int) -> int:
        gpu = self.check(index)
        if not gpu.mig_capable:
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return 7

    def mig_instance(self, index: int, mig: int | None) -> MigInstance:
        gpu = self.check(index)
        if mig is None or not 0 <= mig < len(gpu.mig):
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.mig[mig]

    def mig_handle(self, index: int, mig: int) -> int:
        gpu = self.check(index)
        if not gpu.mig:
            raise NvmlReturn(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if not 0 <= mig < len(gpu.mig):
            raise NvmlReturn(pynvml.NVML_ERROR_NOT_FOUND)  # an empty slot of the 7
        return self._handle_of(index, mig)

    def gpm_supported(self, index: int) -> bool:
        return self.check(index).gpm

    # GPM metric -> (steady value, mean of the wave, swing): percent of time or of capacity
    GPM_METRICS = {2: (82.0, 70.0, 20.0), 3: (41.0, 35.0, 10.0), 5: (33.0, 28.0, 15.0), 10: (57.0, 50.0, 20.0)}

    def gpm_metric(self, index: int, metric: int, start: float, end: float) -> float | None:
        """A GPM metric over [start, end] (seconds of this node's clock): SM active (2), SM occupancy (3),
        any tensor pipe active (5), DRAM bandwidth used (10); None for the others."""
        self.check(index)
        if metric not in self.GPM_METRICS or end <= start:
            return None
        steady, mean, swing = self.GPM_METRICS[metric]
        if self.steady:
            return steady
        period, phase = 9.0, index * 0.7 + metric  # mean over the window of mean + swing sin(w t + phase)
        w = 2 * math.pi / period
        integral = (math.cos(w * start + phase) - math.cos(w * end + phase)) / w
        return mean + swing * integral / (end - start)

    def elapsed(self) -> float:
        return self._elapsed()

    def next_xid(self, registered: set[int], timeout_ms: int) -> tuple[int, int]:
        with self._lock:
            for position, (gpu, code) in enumerate(self._xids):
                if gpu in registered:
                    del self._xids[position]
                    return gpu, code
        raise NvmlReturn(pynvml.NVML_ERROR_TIMEOUT)

    # -- plumbing --------------------------------------------------------------------------------------------
    def _elapsed(self) -> float:
        return self.clock() - self._t0

    def _wave(self, index: int, period: float, phase: float = 0.0) -> float:
        """0..1, smooth; 1.0 when steady."""
        if self.steady:
            return 1.0
        return 0.5 + 0.5 * math.sin(2 * math.pi * self._elapsed() / period + index * 0.7 + phase)

    # -- the sysfs tree of this node (NICs and PCIe paths) ----------------------------------------------------
    @property
    def DDPTOP_SYSFS_ROOT(self) -> str:  # noqa: N802 - read by name, like NVML constants
        with self._lock:
            if self._sysfs is None:
                self._sysfs = self._write_sysfs()
                atexit.register(shutil.rmtree, self._sysfs, True)
            return self._sysfs

    def _write_sysfs(self) -> str:
        """devices/pciDDDD:BB/<root port>/<switch up>/<switch down>/[<child switch up>/...]<endpoint>,
        bus/pci/devices and class/infiniband links, numa_node files: the parts of /sys the topology reader
        looks at."""
        root = new_sysfs("ddptop-fake-sysfs-")
        for (kind, name), (switch, _bdf, path) in self._pci.endpoints.items():
            add_pci_device(root, path, self.profile.numa_of(switch), name if kind == "nic" else None)
        return root
