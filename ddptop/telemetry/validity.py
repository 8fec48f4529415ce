"""Was a configuration measured on a quiet node? Interference and faults over its window, from the timeline.

A step time measured while another process took CPU, while the node swapped, while a GPU was held back
(thermal, power, HW slowdown), ran below its clocks, shared its GPU with a stranger, had its PCIe link
trained down, or reported an Xid or a new ECC error is not the same figure as one measured without them.
:class:`ValidityAccumulator` takes telemetry records one at a time (so a live view adds only the records
that are new since its last frame: ``live.live_validity``) and says, with the thresholds below, whether the
window was ``disturbed`` and why, one line per reason. Each record's host figures describe the interval before it, as
NVML's utilisation does, so a window takes the records inside ``(start, end]`` (the next one when none is).

A field the timeline does not have (a timeline written before these checks existed, a GPU that cannot
report it) is ``None`` with a note saying "not recorded", never a guess.
"""

from __future__ import annotations

from typing import Any, Collection, Iterable

# thresholds: a window is disturbed when one is passed
OTHER_CPU_CORES_MAX = 0.5  # other processes' mean CPU over the window, in cores
SWAP_BYTES_MAX = 0  # bytes swapped in or out: any swap activity
THROTTLE_FLAGGED = ("power cap", "power brake", "SW thermal", "HW thermal", "HW slowdown")
THROTTLE_SHARE_MAX = 0.10  # a flagged clock limit active in more than this share of a GPU's samples
SM_CLOCK_FRACTION = 0.90  # "below max": SM clock under this fraction of the GPU's maximum SM clock...
SM_CLOCK_LOW_SHARE_MAX = 0.25  # ...in more than this share of its busy samples
BUSY_UTIL = 50  # a GPU sample is busy at this SM utilisation (%) or more

NOT_RECORDED = "not recorded"
NO_READING = "not checked: no telemetry reading during the measured steps"  # a window without a reading


def _new_codes(before: list[int], now: list[int]) -> list[int]:
    """Codes in ``now`` that ``before`` did not end with (both are the last codes seen, oldest first)."""
    if now == before:
        return []
    for shift in range(len(before) + 1):
        kept = before[shift:]
        if now[: len(kept)] == kept:
            return now[len(kept):]
    return list(now)


class _Gpu:
    __slots__ = ("samples", "throttle_samples", "throttle", "busy_clock", "busy_low", "busy_link", "degraded",
                 "link_seen", "worst_link", "xid_before", "xid", "ecc_first", "ecc_last", "clock_sum", "power",
                 "temps")

    def __init__(self) -> None:
        self.samples = 0
        self.clock_sum = 0.0  # SM clock over the busy samples with one (busy_clock of them)
        self.power: list[float] = []
        self.temps: list[float] = []
        self.throttle_samples = 0  # samples where the clock limits were read
        self.throttle: dict[str, int] = {}
        self.busy_clock = 0  # busy samples with an SM clock
        self.busy_low = 0
        self.busy_link = 0  # busy samples with a PCIe link reading
        self.degraded = 0
        self.link_seen = False
        self.worst_link: tuple[int, int] | None = None
        self.xid_before: list[int] | None = None
        self.xid: list[int] = []
        self.ecc_first: int | None = None
        self.ecc_last: int | None = None


class ValidityAccumulator:
    """Validity of one configuration's window, built from records added in time order."""

    def __init__(self, start: float, end: float | None, launch: str | None,
                 info: dict[str, Any] | None = None, rank_pids: Collection[int] = ()) -> None:
        self.start, self.end, self.launch = start, end, launch
        self.info = info
        # every rank's PID the run has heard of, in any launch: NVML lists a new launch's rank on its GPU before
        # its hello is read, and the telemetry record of that moment may call it "not a rank"; it never was one
        self.rank_pids = set(rank_pids)
        self.readings = 0
        self.coarse = False
        self.last_t: float | None = None
        self._other: list[float] = []
        self._steal: list[float] = []
        self._swap = 0
        self._swap_seen = 0
        self._mem_min: int | None = None
        self._job_gpus: set[int] = set()
        self._gpus: dict[int, _Gpu] = {}
        self._foreign: dict[tuple[int, Any], dict[str, Any]] = {}

    # -- feeding -------------------------------------------------------------------------------------------
    def add(self, record: dict[str, Any]) -> None:
        t = record.get("t")
        if not isinstance(t, (int, float)):
            return
        if self.last_t is not None and t <= self.last_t:
            return  # seen already
        self.last_t = t
        for rank in record.get("ranks") or ():
            if isinstance(rank, dict) and rank.get("launch") == self.launch and isinstance(rank.get("gpu"), int):
                self._job_gpus.add(rank["gpu"])
        if self.info is None and isinstance(record.get("info"), dict):
            self.info = record["info"]
        if t <= self.start:
            self._baseline(record)
            return
        if self.end is not None and t > self.end:
            return
        self._inside(record)

    def add_all(self, records: Iterable[dict[str, Any]]) -> "ValidityAccumulator":
        for record in records:
            try:
                self.add(record)
            except (TypeError, ValueError, AttributeError):
                continue  # a reading of the wrong shape (a damaged timeline file) is left out
        return self

    def _gpu(self, index: int) -> _Gpu:
        gpu = self._gpus.get(index)
        if gpu is None:
            gpu = self._gpus[index] = _Gpu()
        return gpu

    def _baseline(self, record: dict[str, Any]) -> None:
        """A record before the window: where the Xid lists and ECC counters stood."""
        for reading in record.get("gpus") or ():
            if not isinstance(reading, dict) or not isinstance(reading.get("index"), int):
                continue
            gpu = self._gpu(reading["index"])
            gpu.xid_before = list(reading.get("xid") or [])
            if reading.get("ecc_uncorrected") is not None:
                gpu.ecc_first = int(reading["ecc_uncorrected"])

    def _inside(self, record: dict[str, Any]) -> None:
        self.readings += 1
        host = record.get("host") if isinstance(record.get("host"), dict) else {}
        if host.get("other_cpu_cores") is not None:
            self._other.append(float(host["other_cpu_cores"]))
        if host.get("steal_cores") is not None:
            self._steal.append(float(host["steal_cores"]))
        if host.get("swap_in") is not None or host.get("swap_out") is not None:
            self._swap_seen += 1
            self._swap += int(host.get("swap_in") or 0) + int(host.get("swap_out") or 0)
        available = host.get("mem_available")
        if available is None and host.get("mem_total") is not None and host.get("mem_used") is not None:
            available = host["mem_total"] - host["mem_used"]  # older timelines: used = total - available
        if available is not None:
            self._mem_min = int(available) if self._mem_min is None else min(self._mem_min, int(available))
        for reading in record.get("gpus") or ():
            if isinstance(reading, dict) and isinstance(reading.get("index"), int) and not reading.get("lost"):
                self._gpu_reading(reading)

    def _gpu_reading(self, reading: dict[str, Any]) -> None:
        index = reading["index"]
        gpu = self._gpu(index)
        gpu.samples += 1
        static = self._static(index)
        throttle = reading.get("throttle")
        if "throttle" not in (reading.get("na") or {}):  # read (an empty list is not written): counts
            gpu.throttle_samples += 1
            for name in throttle or ():
                gpu.throttle[name] = gpu.throttle.get(name, 0) + 1
        busy = reading.get("util") is not None and reading["util"] >= BUSY_UTIL
        clock, clock_max = reading.get("sm_clock_mhz"), static.get("sm_clock_max_mhz")
        if busy and clock is not None and clock_max:
            gpu.busy_clock += 1
            gpu.clock_sum += clock
            if clock < SM_CLOCK_FRACTION * clock_max:
                gpu.busy_low += 1
        if reading.get("power_w") is not None:
            gpu.power.append(float(reading["power_w"]))
        if reading.get("temp_c") is not None:
            gpu.temps.append(float(reading["temp_c"]))
        gen, width = reading.get("pcie_gen"), reading.get("pcie_width")
        gen_max, width_max = static.get("pcie_gen_max"), static.get("pcie_width_max")
        if gen is not None and width is not None and gen_max and width_max:
            gpu.link_seen = True
            if busy:
                gpu.busy_link += 1
                if gen < gen_max or width < width_max:
                    gpu.degraded += 1
                    gpu.worst_link = min(gpu.worst_link or (gen, width), (gen, width), key=lambda l: l[0] * l[1])
        for process in reading.get("processes") or ():
            if isinstance(process, dict) and process.get("foreign") is not None:
                key = (index, process.get("pid"))
                seen = self._foreign.setdefault(key, {
                    "gpu": index, "pid": process.get("pid"), "known": process["foreign"] is True,
                    "gpu_memory_max": None,
                })
                memory = process.get("gpu_memory")
                if memory is not None:
                    seen["gpu_memory_max"] = max(seen["gpu_memory_max"] or 0, int(memory))
        xid = list(reading.get("xid") or [])
        gpu.xid += _new_codes(gpu.xid_before if gpu.xid_before is not None else [], xid)
        gpu.xid_before = xid
        if reading.get("ecc_uncorrected") is not None:
            value = int(reading["ecc_uncorrected"])
            if gpu.ecc_first is None:
                gpu.ecc_first = value
            gpu.ecc_last = value

    def _static(self, index: int) -> dict[str, Any]:
        for static in (self.info or {}).get("gpus") or ():
            if isinstance(static, dict) and static.get("index") == index:
                return static
        return {}

    def mark_coarse(self, record: dict[str, Any]) -> None:
        """No reading inside the window: the first one after it describes it (as NVML's averages do)."""
        self.coarse = True
        self._inside(record)

    # -- the answer -----------------------------------------------------------------------------------------
    def result(self) -> dict[str, Any]:
        reasons: list[str] = []
        notes: list[str] = []
        out: dict[str, Any] = {"disturbed": False, "reasons": reasons, "notes": notes, "readings": self.readings,
                               "coarse": self.coarse}
        if not self.readings:
            notes.append(NO_READING)
        out["other_cpu_cores"] = sum(self._other) / len(self._other) if self._other else None
        out["steal_cores"] = sum(self._steal) / len(self._steal) if self._steal else None
        if out["other_cpu_cores"] is None:
            if self.readings:
                notes.append(f"other processes' CPU: {NOT_RECORDED}")
        elif out["other_cpu_cores"] > OTHER_CPU_CORES_MAX:
            reasons.append(f"other processes used {out['other_cpu_cores']:.1f} cores")
        out["swap_bytes"] = self._swap if self._swap_seen else None
        if out["swap_bytes"] is None:
            if self.readings:
                notes.append(f"swap activity: {NOT_RECORDED}")
        elif out["swap_bytes"] > SWAP_BYTES_MAX:
            reasons.append(f"the node swapped {out['swap_bytes'] / (1 << 20):.1f} MiB")
        out["mem_available_min_bytes"] = self._mem_min
        self._gpu_result(out, reasons, notes)
        out["disturbed"] = bool(reasons)
        return out

    def _gpu_result(self, out: dict[str, Any], reasons: list[str], notes: list[str]) -> None:
        job = sorted(self._job_gpus)
        out["gpus"] = job
        gpus = [(index, self._gpus[index]) for index in job if index in self._gpus and self._gpus[index].samples]
        if not gpus:
            out.update({"throttle_share": None, "sm_clock_below_max_share": None, "pcie_degraded": None,
                        "foreign_gpu_processes": [], "xid": [], "ecc": None, "gpu_checks": "skipped"})
            if self.readings:
                notes.append("GPU checks skipped: no GPU ran this configuration")
            return
        out["gpu_checks"] = "done"
        out["gpu_state"] = {str(index): _state(gpu) for index, gpu in gpus}
        samples = sum(g.throttle_samples for _, g in gpus)
        if samples:
            names = sorted({name for _, g in gpus for name in g.throttle})
            out["throttle_share"] = {name: sum(g.throttle.get(name, 0) for _, g in gpus) / samples for name in names}
            for index, gpu in gpus:
                for name in THROTTLE_FLAGGED:
                    share = gpu.throttle.get(name, 0) / gpu.throttle_samples if gpu.throttle_samples else 0.0
                    if share > THROTTLE_SHARE_MAX:
                        reasons.append(f"GPU {index}: {name} held its clocks in {share:.0%} of samples")
        else:
            out["throttle_share"] = None
            notes.append(f"clock limits: {NOT_RECORDED}")
        busy = sum(g.busy_clock for _, g in gpus)
        out["sm_clock_below_max_share"] = sum(g.busy_low for _, g in gpus) / busy if busy else None
        if busy:
            for index, gpu in gpus:
                share = gpu.busy_low / gpu.busy_clock if gpu.busy_clock else 0.0
                if share > SM_CLOCK_LOW_SHARE_MAX:
                    reasons.append(f"GPU {index}: SM clock below {SM_CLOCK_FRACTION:.0%} of max in {share:.0%} "
                                   "of busy samples")
        else:
            notes.append(f"SM clock against max: {NOT_RECORDED} (or the GPUs were never busy)")
        if not any(g.link_seen for _, g in gpus):
            out["pcie_degraded"] = None
            notes.append(f"PCIe link: {NOT_RECORDED}")
        elif not any(g.busy_link for _, g in gpus):
            out["pcie_degraded"] = None
            notes.append("PCIe link: not checked (the GPUs were never busy)")
        else:
            out["pcie_degraded"] = any(g.degraded for _, g in gpus)
            for index, gpu in gpus:
                if gpu.degraded and gpu.worst_link is not None:
                    static = self._static(index)
                    reasons.append(f"GPU {index}: PCIe link gen{gpu.worst_link[0]} x{gpu.worst_link[1]} while busy "
                                   f"(can do gen{static.get('pcie_gen_max')} x{static.get('pcie_width_max')})")
        foreign = [dict(v) for (index, pid), v in sorted(self._foreign.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
                   if index in self._job_gpus and pid not in self.rank_pids]
        out["foreign_gpu_processes"] = foreign
        for process in foreign:
            if process["known"]:
                reasons.append(f"GPU {process['gpu']}: a compute process that is not a rank (PID {process['pid']})")
        unknown = sorted({p["gpu"] for p in foreign if not p["known"]})
        if unknown:
            notes.append(f"GPU {','.join(map(str, unknown))}: other compute processes unknown (NVML shows PIDs of "
                         "another PID namespace)")
        out["xid"] = [{"gpu": index, "code": code} for index, gpu in gpus for code in gpu.xid]
        for index, gpu in gpus:
            if gpu.xid:
                reasons.append(f"GPU {index}: Xid {', '.join(map(str, gpu.xid))}")
        ecc_known = [(index, g) for index, g in gpus if g.ecc_first is not None and g.ecc_last is not None]
        out["ecc"] = sum(max(0, g.ecc_last - g.ecc_first) for _, g in ecc_known) if ecc_known else None  # type: ignore[operator]
        if out["ecc"] is None:
            notes.append(f"ECC errors: {NOT_RECORDED}")
        for index, gpu in ecc_known:
            new = gpu.ecc_last - gpu.ecc_first  # type: ignore[operator]
            if new > 0:
                reasons.append(f"GPU {index}: {new} new uncorrected ECC error{'s' if new > 1 else ''}")


def _state(gpu: _Gpu) -> dict[str, Any]:
    """One GPU's state over a window: its SM clock while busy, power, temperature and the clock limits seen."""
    return {
        "readings": gpu.samples,
        "sm_clock_busy_mhz": gpu.clock_sum / gpu.busy_clock if gpu.busy_clock else None,
        "power_w": sum(gpu.power) / len(gpu.power) if gpu.power else None,
        "temp_c": sum(gpu.temps) / len(gpu.temps) if gpu.temps else None,
        "temp_max_c": max(gpu.temps) if gpu.temps else None,
        "limits": {name: count / gpu.throttle_samples for name, count in sorted(gpu.throttle.items())
                   if gpu.throttle_samples},
    }


# a launch off the node's steady state, against the other launches of the same configuration
STEADY_CLOCK_FRACTION = 0.97  # its busy SM clock below this fraction of the fastest launch's
STEADY_TEMP_C = 10.0  # its mean temperature this far from the coolest launch's


def unsteady_launches(states: dict[str, dict[str, Any] | None]) -> dict[str, list[str]]:
    """Per launch (name -> its window's ``gpu_state``), why it was not at the state the configuration's other
    launches ran at: a clock limit seen (power cap, thermal, ...), its GPUs' busy SM clock lower or their
    temperature away from the rest. A configuration measured in one launch has nothing to compare with
    except its clock limits."""
    by_gpu: dict[str, dict[str, dict[str, Any]]] = {}
    for launch, state in states.items():
        for index, figures in (state or {}).items():
            by_gpu.setdefault(index, {})[launch] = figures
    found: dict[str, list[str]] = {launch: [] for launch in states}
    for index, launches in sorted(by_gpu.items()):
        clocks = {l: f["sm_clock_busy_mhz"] for l, f in launches.items() if f.get("sm_clock_busy_mhz")}
        temps = {l: f["temp_c"] for l, f in launches.items() if f.get("temp_c") is not None}
        for launch, figures in launches.items():
            limits = [name for name, share in (figures.get("limits") or {}).items()
                      if name in THROTTLE_FLAGGED and share > 0]
            if limits:
                found[launch].append(f"GPU {index}: {', '.join(limits)} seen")
            top = max(clocks.values(), default=None)
            if launch in clocks and top and clocks[launch] < STEADY_CLOCK_FRACTION * top:
                found[launch].append(f"GPU {index}: SM clock {clocks[launch]:.0f} MHz while busy, "
                                     f"{top:.0f} MHz in another launch")
            coolest = min(temps.values(), default=None)
            if launch in temps and coolest is not None and temps[launch] - coolest > STEADY_TEMP_C:
                found[launch].append(f"GPU {index}: {temps[launch]:.0f} °C, {coolest:.0f} °C in another launch")
    return found


def window_validity(
    records: list[dict[str, Any]],
    start: float,
    end: float,
    launch: str | None,
    info: dict[str, Any] | None = None,
    rank_pids: Collection[int] = (),
) -> dict[str, Any]:
    """Validity of the window ``(start, end]`` of a configuration run by ``launch``; records in time order;
    ``rank_pids``: the PIDs of the run's ranks (their hellos), never taken for a stranger on a GPU."""
    acc = ValidityAccumulator(start, end, launch, info, rank_pids)
    acc.add_all(records)
    if not acc.readings:
        after = next((r for r in records if r["t"] > end), None)
        if after is not None:
            for rank in after.get("ranks") or ():
                if isinstance(rank, dict) and rank.get("launch") == launch and isinstance(rank.get("gpu"), int):
                    acc._job_gpus.add(rank["gpu"])
            acc.mark_coarse(after)
    return acc.result()
