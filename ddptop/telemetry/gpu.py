"""Per-GPU readings from NVML: one ``GpuSampler`` opens NVML once and answers ``sample()`` on demand.

Rates (PCIe, NVLink) come from byte counters read through ``nvmlDeviceGetFieldValues`` as Δcounter/Δt,
never from the calls that block ~20 ms to measure. A field the GPU, driver or binding does not provide is
``None`` in the reading with its reason in ``na``; a reason that cannot change (not supported, missing
from the driver) is remembered so the field is not asked for again. A lost GPU stays in the list, marked.
Slow-changing fields (name, memory size, power limit, ECC counts) are cached for ``slow_ttl`` seconds.
Maxima (SM clock, PCIe link generation and width) are read once, when NVML is opened; the current PCIe
link generation and width every tick, so that a link trained down (narrower or slower than it can be) is
seen while the GPU is busy (an idle GPU lowers its link generation to save power: that is no fault).
MIG mode and a MIG GPU's instances (profile, UUID, size) are read once, at open: instances are made and
destroyed only by an administrator on an idle GPU, never during a run; each instance's memory in use and its
processes are read every tick, on the instance's own handle.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass, field
from typing import Any

from ddptop.telemetry import nvml as nv

UINT_MAX = 0xFFFFFFFF  # field scope "all links" for the NVLink throughput counters

# reading key -> (field id name, scope, bytes per counter unit)
COUNTERS = {
    "pcie_tx_bps": ("NVML_FI_DEV_PCIE_COUNT_TX_BYTES", 0, 1),
    "pcie_rx_bps": ("NVML_FI_DEV_PCIE_COUNT_RX_BYTES", 0, 1),
    "nvlink_tx_bps": ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX", UINT_MAX, 1024),
    "nvlink_rx_bps": ("NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX", UINT_MAX, 1024),
}
# bit name suffix (nvmlClocksEventReason*, formerly nvmlClocksThrottleReason*) -> words
THROTTLE_REASONS = (
    ("GpuIdle", "idle"),
    ("ApplicationsClocksSetting", "app clocks"),
    ("SwPowerCap", "power cap"),
    ("HwSlowdown", "HW slowdown"),
    ("SyncBoost", "sync boost"),
    ("SwThermalSlowdown", "SW thermal"),
    ("HwThermalSlowdown", "HW thermal"),
    ("HwPowerBrakeSlowdown", "power brake"),
    ("DisplayClockSetting", "display clocks"),
)
IDLE_REASONS = ("idle",)

# NVML GPM (GPU performance monitoring, Hopper and later): reading key -> metric id name. Percent of time an
# SM had a warp resident, warps resident against the maximum, any tensor pipe busy, DRAM bandwidth used.
GPM_METRICS = {
    "sm_active": "NVML_GPM_METRIC_SM_UTIL",
    "sm_occupancy": "NVML_GPM_METRIC_SM_OCCUPANCY",
    "tensor_active": "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
    "dram_active": "NVML_GPM_METRIC_DRAM_BW_UTIL",
}
NO_GPM = "no GPM counters on this GPU (Hopper and later)"
# NVML answers NOT_SUPPORTED for utilisation on a GPU in MIG mode (and on its instances): not the GPU's lack
MIG_NO_UTIL = "NVML gives no utilisation in MIG mode"

# pynvml's unversioned process call is the _v3 one; drivers before it answer only _v2
PROCESS_CALLS = ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses_v2")


@dataclass
class MigStatic:
    slot: int  # the instance's position among its GPU's MIG devices (nvmlDeviceGetMigDeviceHandleByIndex)
    uuid: str | None  # MIG-..., what CUDA_VISIBLE_DEVICES names
    profile: str | None  # e.g. 1g.5gb: slices of compute and GB of memory, as nvidia-smi names it
    gpu_instance: int | None  # the GI id nvidia-smi lists
    memory_total: int | None


@dataclass
class GpuStatic:
    index: int
    name: str
    uuid: str | None
    bus_id: str | None
    memory_total: int | None
    power_limit_w: float | None
    sm_clock_max_mhz: int | None
    pcie_gen_max: int | None = None  # the most this GPU and this system's slot allow
    pcie_width_max: int | None = None
    mig_mode: str | None = None  # "enabled" or "disabled"; None where the GPU has no MIG
    mig: list[MigStatic] = field(default_factory=list)  # its MIG instances, in NVML's order


@dataclass
class GpuReading:
    index: int
    t: float
    util: int | None = None  # % of time a kernel ran (SM)
    mem_util: int | None = None  # % of time memory was read or written
    mem_used: int | None = None
    mem_total: int | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    energy_j: float | None = None  # counter since the driver loaded
    temp_c: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle: list[str] | None = None  # active clock limits other than idle
    pcie_gen: int | None = None  # current PCIe link generation and width (lanes)
    pcie_width: int | None = None
    pcie_tx_bps: float | None = None
    pcie_rx_bps: float | None = None
    nvlink_tx_bps: float | None = None
    nvlink_rx_bps: float | None = None
    sm_active: float | None = None  # GPM, percent, over the time since the previous reading
    sm_occupancy: float | None = None
    tensor_active: float | None = None
    dram_active: float | None = None
    ecc_uncorrected: int | None = None  # volatile (since boot) uncorrected ECC errors
    xid: list[int] = field(default_factory=list)  # critical Xid errors seen since ddptop started
    processes: list[dict[str, Any]] = field(default_factory=list)  # pid, gpu_memory
    # each MIG instance: slot, uuid, profile, gpu_instance, mem_used, mem_total, processes (pid, gpu_memory), na
    mig: list[dict[str, Any]] = field(default_factory=list)
    lost: bool = False
    inaccessible: str | None = None  # why this process may not use the GPU (another job's, in a container)
    na: dict[str, str] = field(default_factory=dict)  # field -> why it is None

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        return {k: v for k, v in data.items() if v is not None and v != [] and v != {} and v is not False}


class GpuSampler:
    def __init__(self, nvml_module: Any | None = None, slow_ttl: float = 30.0) -> None:
        self._module = nvml_module
        self.slow_ttl = slow_ttl
        self.nvml: Any = None
        self.fake = False
        self.problem: str | None = None
        self.driver: str | None = None
        self.handles: list[Any] = []
        self.static: list[GpuStatic] = []
        self._never: dict[tuple[int, str], str] = {}  # permanent N/A reasons
        self._dead: set[tuple[int, str]] = set()  # (GPU, function or variant) this driver never answers
        self._lost: set[int] = set()
        self._inaccessible: dict[int, str] = {}  # GPU -> why its handle was refused
        self._slow: dict[tuple[int, str], tuple[float, Any]] = {}
        self._counters: dict[tuple[int, str], tuple[float, int]] = {}
        self._events: Any = None
        self._xid: dict[int, list[int]] = {}
        self._field_ids: list[tuple[str, Any]] = []
        self._gpm_samples: dict[int, Any] = {}  # GPU -> its previous GPM sample
        self._mig_handles: dict[int, list[Any]] = {}  # GPU -> its MIG instances' handles, as static[i].mig

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self) -> "GpuSampler":
        try:
            self.nvml, self.fake = nv.load(self._module)
            nv.init(self.nvml)
        except nv.NvmlUnavailable as exc:
            self.problem = str(exc)
            self.nvml = None
            return self
        nvml = self.nvml
        count = nv.call(nvml, "nvmlDeviceGetCount")
        if isinstance(count, nv.Unavailable):
            self.problem = f"NVML could not count GPUs: {count.reason}"
            return self
        driver = nv.call(nvml, "nvmlSystemGetDriverVersion")
        self.driver = None if isinstance(driver, nv.Unavailable) else nv.text(driver)
        for index in range(count):
            handle = nv.call(nvml, "nvmlDeviceGetHandleByIndex", index)
            if isinstance(handle, nv.Unavailable):
                if handle.lost:
                    self._lost.add(index)
                else:  # no permission (cgroups), or any other refusal: not lost, not ours
                    self._inaccessible[index] = handle.reason
                handle = None
            self.handles.append(handle)
            self.static.append(self._read_static(index, handle))
            if handle is not None:
                self._read_mig(self.static[-1], handle)
        if not count:
            self.problem = "NVML sees no GPU"
        for key, (name, scope, _unit) in COUNTERS.items():
            field_id = getattr(nvml, name, None)
            if field_id is None:
                for index in range(count):
                    self._never[(index, key)] = "not in the installed nvidia-ml-py"
            else:
                self._field_ids.append((key, (field_id, scope)))
        self._open_xid_events()
        return self

    def close(self) -> None:
        if self.nvml is None:
            return
        if self._events is not None:
            nv.call(self.nvml, "nvmlEventSetFree", self._events)
            self._events = None
        for sample in self._gpm_samples.values():
            nv.call(self.nvml, "nvmlGpmSampleFree", sample)
        self._gpm_samples.clear()
        nv.shutdown(self.nvml)
        self.nvml = None

    def __enter__(self) -> "GpuSampler":
        return self.open()

    def __exit__(self, *exc: Any) -> None:
        self.close()

    # -- reading ------------------------------------------------------------------------------------------------
    def _read_static(self, index: int, handle: Any) -> GpuStatic:
        if handle is None:
            return GpuStatic(index, "(unavailable)", None, None, None, None, None)
        nvml = self.nvml
        name = nv.call(nvml, "nvmlDeviceGetName", handle)
        uuid = nv.call(nvml, "nvmlDeviceGetUUID", handle)
        pci = nv.call(nvml, "nvmlDeviceGetPciInfo", handle)
        memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", handle)
        limit = nv.call(nvml, "nvmlDeviceGetEnforcedPowerLimit", handle)
        max_sm = nv.call(nvml, "nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1))
        gen_max = nv.call(nvml, "nvmlDeviceGetMaxPcieLinkGeneration", handle)
        width_max = nv.call(nvml, "nvmlDeviceGetMaxPcieLinkWidth", handle)
        ok = lambda value: not isinstance(value, nv.Unavailable)  # noqa: E731
        for key, value in (("pcie_gen", gen_max), ("pcie_width", width_max)):
            if not ok(value):  # no maximum to compare with: the current value is not asked for either
                self._never[(index, key)] = f"maximum: {value.reason}"
        return GpuStatic(
            index=index,
            name=nv.text(name) if ok(name) else "(unknown)",
            uuid=nv.text(uuid) if ok(uuid) else None,
            bus_id=nv.text(pci.busId) if ok(pci) else None,
            memory_total=int(memory.total) if ok(memory) else None,
            power_limit_w=int(limit) / 1000 if ok(limit) else None,
            sm_clock_max_mhz=int(max_sm) if ok(max_sm) else None,
            pcie_gen_max=int(gen_max) if ok(gen_max) else None,
            pcie_width_max=int(width_max) if ok(width_max) else None,
        )

    def _read_mig(self, static: GpuStatic, handle: Any) -> None:
        """MIG mode and, when on, every instance (an empty slot of the most the GPU allows is NOT_FOUND)."""
        nvml, index = self.nvml, static.index
        mode = nv.call(nvml, "nvmlDeviceGetMigMode", handle)  # [current, pending]
        if isinstance(mode, nv.Unavailable):
            return  # not MIG-capable (NOT_SUPPORTED), or a driver or binding without MIG
        enabled = int(mode[0]) == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        static.mig_mode = "enabled" if enabled else "disabled"
        if not enabled:
            return
        self._never[(index, "util")] = MIG_NO_UTIL
        most = nv.call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle)
        handles = self._mig_handles.setdefault(index, [])
        ok = lambda value: not isinstance(value, nv.Unavailable)  # noqa: E731
        for slot in range(0 if isinstance(most, nv.Unavailable) else int(most)):
            mig = nv.call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
            if isinstance(mig, nv.Unavailable):
                continue
            name = nv.call(nvml, "nvmlDeviceGetName", mig)
            uuid = nv.call(nvml, "nvmlDeviceGetUUID", mig)
            instance = nv.call(nvml, "nvmlDeviceGetGpuInstanceId", mig)
            memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", mig)
            static.mig.append(MigStatic(
                slot=slot,
                uuid=nv.text(uuid) if ok(uuid) else None,
                profile=mig_profile(nv.text(name)) if ok(name) else None,
                gpu_instance=int(instance) if ok(instance) else None,
                memory_total=int(memory.total) if ok(memory) else None,
            ))
            handles.append(mig)

    def _get(self, reading: GpuReading, key: str, function: str | tuple[str, ...], *args: Any) -> Any:
        """A value, or None with ``reading.na[key]`` set; remembers reasons that cannot change."""
        never = self._never.get((reading.index, key))
        if never is not None:
            reading.na[key] = never
            return None
        names = function if isinstance(function, tuple) else (function,)
        value: Any = nv.Unavailable("no such function")
        for position, name in enumerate(names):
            if (reading.index, name) in self._dead and position < len(names) - 1:
                continue  # a spelling this driver never answers: straight to the next one
            value = nv.call(self.nvml, name, self.handles[reading.index], *args)
            if isinstance(value, nv.Unavailable) and value.permanent and position < len(names) - 1:
                self._dead.add((reading.index, name))  # e.g. pynvml's _v3 call on a driver without it
                continue
            break
        if isinstance(value, nv.Unavailable):
            reading.na[key] = value.reason
            if value.lost:
                self._lost.add(reading.index)
            elif value.permanent:
                self._never[(reading.index, key)] = value.reason
            return None
        return value

    def _memory(self, reading: GpuReading) -> Any:
        """Memory in use as nvidia-smi shows it: the v2 struct leaves out what the driver reserves for itself
        (v1's ``used`` counts it); v1 on a driver without ``nvmlDeviceGetMemoryInfo_v2``."""
        version = getattr(self.nvml, "nvmlMemory_v2", None)
        if version is not None and (reading.index, "memory_v2") not in self._dead:
            value = nv.call(self.nvml, "nvmlDeviceGetMemoryInfo", self.handles[reading.index], version)
            if not isinstance(value, nv.Unavailable):
                return value
            if value.lost:
                self._lost.add(reading.index)
                reading.na["mem_used"] = value.reason
                return None
            self._dead.add((reading.index, "memory_v2"))
        return self._get(reading, "mem_used", "nvmlDeviceGetMemoryInfo")

    def _slow_get(self, reading: GpuReading, key: str, function: str, *args: Any) -> Any:
        cached = self._slow.get((reading.index, key))
        now = time.monotonic()
        if cached is not None and now - cached[0] < self.slow_ttl:
            return cached[1]
        value = self._get(reading, key, function, *args)
        if value is not None:
            self._slow[(reading.index, key)] = (now, value)
        return value

    def sample(self) -> list[GpuReading]:
        if self.nvml is None:
            return []
        self._drain_xid_events()
        return [self._sample_one(index) for index in range(len(self.handles))]

    def _sample_one(self, index: int) -> GpuReading:
        nvml = self.nvml
        reading = GpuReading(index=index, t=time.time())
        reading.xid = list(self._xid.get(index, ()))
        if index in self._lost:
            reading.lost = True
            reading.na["all"] = "GPU lost (fell off the bus?)"
            return reading
        if index in self._inaccessible:
            reading.inaccessible = self._inaccessible[index]
            reading.na["all"] = f"not accessible: {reading.inaccessible}"
            return reading
        static = self.static[index]
        reading.mem_total = static.memory_total
        reading.power_limit_w = static.power_limit_w
        util = self._get(reading, "util", "nvmlDeviceGetUtilizationRates")
        if util is not None:
            reading.util, reading.mem_util = int(util.gpu), int(util.memory)
        memory = self._memory(reading)
        if memory is not None:
            reading.mem_used, reading.mem_total = int(memory.used), int(memory.total)
        power = self._get(reading, "power_w", "nvmlDeviceGetPowerUsage")
        reading.power_w = None if power is None else int(power) / 1000
        energy = self._get(reading, "energy_j", "nvmlDeviceGetTotalEnergyConsumption")
        reading.energy_j = None if energy is None else int(energy) / 1000
        temp = self._get(reading, "temp_c", "nvmlDeviceGetTemperature", getattr(nvml, "NVML_TEMPERATURE_GPU", 0))
        reading.temp_c = None if temp is None else int(temp)
        sm = self._get(reading, "sm_clock_mhz", "nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_SM", 1))
        reading.sm_clock_mhz = None if sm is None else int(sm)
        mem = self._get(reading, "mem_clock_mhz", "nvmlDeviceGetClockInfo", getattr(nvml, "NVML_CLOCK_MEM", 2))
        reading.mem_clock_mhz = None if mem is None else int(mem)
        reasons = self._get(
            reading,
            "throttle",
            ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"),
        )
        if reasons is not None:
            reading.throttle = self._throttle_names(int(reasons))
        gen = self._get(reading, "pcie_gen", "nvmlDeviceGetCurrPcieLinkGeneration")
        reading.pcie_gen = None if gen is None else int(gen)
        width = self._get(reading, "pcie_width", "nvmlDeviceGetCurrPcieLinkWidth")
        reading.pcie_width = None if width is None else int(width)
        self._read_counters(reading)
        self._read_gpm(reading)
        ecc = self._slow_get(
            reading,
            "ecc_uncorrected",
            "nvmlDeviceGetTotalEccErrors",
            getattr(nvml, "NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1),
            getattr(nvml, "NVML_VOLATILE_ECC", 0),
        )
        reading.ecc_uncorrected = None if ecc is None else int(ecc)
        processes = self._get(reading, "processes", PROCESS_CALLS)
        reading.processes = _process_list(processes or ())
        self._read_mig_instances(reading)
        if index in self._lost:  # lost during this reading
            reading.lost = True
        return reading

    def _read_mig_instances(self, reading: GpuReading) -> None:
        """Each MIG instance's memory in use and processes, asked on its own handle (the GPU's memory is the
        whole card's; its process list may leave out those of instances)."""
        index = reading.index
        for static, handle in zip(self.static[index].mig, self._mig_handles.get(index, ())):
            entry: dict[str, Any] = {"slot": static.slot, "uuid": static.uuid, "profile": static.profile,
                                     "gpu_instance": static.gpu_instance, "mem_total": static.memory_total}
            na: dict[str, str] = {}
            version = getattr(self.nvml, "nvmlMemory_v2", None)
            memory: Any = nv.Unavailable("no v2 call")
            if version is not None and (index, "memory_v2") not in self._dead:  # as the GPU's own reading
                memory = nv.call(self.nvml, "nvmlDeviceGetMemoryInfo", handle, version)
            if isinstance(memory, nv.Unavailable) and not memory.lost:
                memory = nv.call(self.nvml, "nvmlDeviceGetMemoryInfo", handle)
            if isinstance(memory, nv.Unavailable):
                na["mem_used"] = memory.reason
            else:
                entry["mem_used"], entry["mem_total"] = int(memory.used), int(memory.total)
            processes = self._first_answer(index, PROCESS_CALLS, handle)
            if isinstance(processes, nv.Unavailable):
                na["processes"] = processes.reason
            else:
                entry["processes"] = _process_list(processes)
            for problem in (memory, processes):
                if isinstance(problem, nv.Unavailable) and problem.lost:
                    self._lost.add(index)
            if na:
                entry["na"] = na
            reading.mig.append(entry)

    def _first_answer(self, index: int, names: tuple[str, ...], handle: Any, *args: Any) -> Any:
        """The first of ``names`` this driver answers (as ``_get``, for a handle other than the GPU's)."""
        value: Any = nv.Unavailable("no such function")
        for position, name in enumerate(names):
            last = position == len(names) - 1
            if (index, name) in self._dead and not last:
                continue
            value = nv.call(self.nvml, name, handle, *args)
            if isinstance(value, nv.Unavailable) and value.permanent and not last:
                self._dead.add((index, name))
                continue
            break
        return value

    def _gpm_na(self, reading: GpuReading, reason: str, permanent: bool) -> None:
        for key in GPM_METRICS:
            reading.na[key] = reason
            if permanent:
                self._never[(reading.index, key)] = reason

    def _read_gpm(self, reading: GpuReading) -> None:
        """GPM metrics over the time since this GPU's previous sample: a sample is taken every tick and the
        metrics are computed between the last two (the first tick has none yet)."""
        index = reading.index
        never = self._never.get((index, "sm_active"))
        if never is not None:
            self._gpm_na(reading, never, permanent=False)
            return
        if index not in self._gpm_samples:
            support = self._get(reading, "gpm", "nvmlGpmQueryDeviceSupport")
            reason = reading.na.pop("gpm", None)
            if support is None or not int(support.isSupportedDevice):
                self._gpm_na(reading, NO_GPM if support is not None else reason or NO_GPM,
                             permanent=support is not None or (index, "gpm") in self._never)
                return
        sample = nv.call(self.nvml, "nvmlGpmSampleAlloc")
        if isinstance(sample, nv.Unavailable):
            self._gpm_na(reading, sample.reason, sample.permanent)
            return
        taken = nv.call(self.nvml, "nvmlGpmSampleGet", self.handles[index], sample)
        if isinstance(taken, nv.Unavailable):
            nv.call(self.nvml, "nvmlGpmSampleFree", sample)
            self._gpm_na(reading, taken.reason, taken.permanent)
            return
        previous = self._gpm_samples.get(index)
        self._gpm_samples[index] = sample
        if previous is None:
            self._gpm_na(reading, "first reading (GPM needs two samples)", permanent=False)
            return
        request = self.nvml.c_nvmlGpmMetricsGet_t()
        request.version = self.nvml.NVML_GPM_METRICS_GET_VERSION
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = previous, sample
        for position, name in enumerate(GPM_METRICS.values()):
            request.metrics[position].metricId = int(getattr(self.nvml, name))
        answer = nv.call(self.nvml, "nvmlGpmMetricsGet", request)
        nv.call(self.nvml, "nvmlGpmSampleFree", previous)
        if isinstance(answer, nv.Unavailable):
            self._gpm_na(reading, answer.reason, permanent=False)
            return
        for position, key in enumerate(GPM_METRICS):
            metric = answer.metrics[position]
            if int(metric.nvmlReturn) == 0:
                setattr(reading, key, round(float(metric.value), 1))
            else:
                reading.na[key] = nv.reason_of(self.nvml, self.nvml.NVMLError(int(metric.nvmlReturn))).reason

    def _throttle_names(self, bits: int) -> list[str]:
        names = []
        for suffix, words in THROTTLE_REASONS:
            mask = getattr(self.nvml, "nvmlClocksEventReason" + suffix, None)
            if mask is None:
                mask = getattr(self.nvml, "nvmlClocksThrottleReason" + suffix, 0)
            if bits & int(mask) and words not in IDLE_REASONS:
                names.append(words)
        return names

    def _read_counters(self, reading: GpuReading) -> None:
        wanted = [(key, fid) for key, fid in self._field_ids if (reading.index, key) not in self._never]
        for key, _fid in self._field_ids:
            if (reading.index, key) in self._never:
                reading.na[key] = self._never[(reading.index, key)]
        if not wanted:
            return
        values = self._get(reading, "counters", "nvmlDeviceGetFieldValues", [fid for _key, fid in wanted])
        if values is None:
            reason = reading.na.pop("counters")
            for key, _fid in wanted:
                reading.na[key] = reason
                if (reading.index, "counters") in self._never:
                    self._never[(reading.index, key)] = reason
            return
        now = time.monotonic()
        for (key, _fid), value in zip(wanted, values):
            code = int(value.nvmlReturn)
            if code != 0:
                problem = nv.reason_of(self.nvml, self.nvml.NVMLError(code))
                reading.na[key] = problem.reason
                if problem.permanent:
                    self._never[(reading.index, key)] = problem.reason
                continue
            unit = COUNTERS[key][2]
            number = _field_number(self.nvml, value) * unit
            stamp = int(getattr(value, "timestamp", 0) or 0) / 1e6 or now
            previous = self._counters.get((reading.index, key))
            self._counters[(reading.index, key)] = (stamp, number)
            if previous is None or stamp <= previous[0] or number < previous[1]:
                reading.na[key] = "rate needs two readings"
                continue
            setattr(reading, key, round((number - previous[1]) / (stamp - previous[0])))

    # -- Xid (critical error) events ------------------------------------------------------------------------------
    def _open_xid_events(self) -> None:
        nvml = self.nvml
        events = nv.call(nvml, "nvmlEventSetCreate")
        if isinstance(events, nv.Unavailable):
            return
        kind = getattr(nvml, "nvmlEventTypeXidCriticalError", 8)
        registered = False
        for handle in self.handles:
            if handle is not None:
                result = nv.call(nvml, "nvmlDeviceRegisterEvents", handle, kind, events)
                registered = registered or not isinstance(result, nv.Unavailable)
        if registered:
            self._events = events
        else:
            nv.call(nvml, "nvmlEventSetFree", events)

    def _drain_xid_events(self) -> None:
        if self._events is None:
            return
        for _ in range(64):  # never loop forever on a flood
            event = nv.call(self.nvml, "nvmlEventSetWait_v2", self._events, 0)
            if isinstance(event, nv.Unavailable):
                return  # Timeout: nothing pending
            index = nv.call(self.nvml, "nvmlDeviceGetIndex", event.device)
            if isinstance(index, nv.Unavailable):
                continue
            codes = self._xid.setdefault(int(index), [])
            codes.append(int(event.eventData))
            del codes[:-8]


def _process_list(processes: Any) -> list[dict[str, Any]]:
    listed = []
    for process in processes:
        used = getattr(process, "usedGpuMemory", None)
        listed.append({"pid": int(process.pid), "gpu_memory": None if used is None else int(used)})
    return listed


def mig_profile(name: str) -> str | None:
    """The profile in a MIG device's name: "NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb" (NVML has no
    call that names it; nvidia-smi and nvitop read it there too)."""
    _, found, rest = name.partition(" MIG ")
    return rest.split()[0] if found and rest.split() else None


def _field_number(nvml: Any, value: Any) -> float:
    kind = int(value.valueType)
    member = {
        getattr(nvml, "NVML_VALUE_TYPE_DOUBLE", 0): "dVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_INT", 1): "uiVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_LONG", 2): "ulVal",
        getattr(nvml, "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG", 3): "ullVal",
        getattr(nvml, "NVML_VALUE_TYPE_SIGNED_LONG_LONG", 4): "sllVal",
        getattr(nvml, "NVML_VALUE_TYPE_SIGNED_INT", 5): "siVal",
    }.get(kind, "ullVal")
    return float(getattr(value.value, member))
