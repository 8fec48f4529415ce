"""Reading the telemetry timeline back, and what it says about one configuration.

A configuration's GPU figures cover its measured steps: the window ``[end - measure_s, end]`` from rank 0's
``config_end`` (the whole configuration when it did not finish). NVML averages utilisation over the period
before each reading, so a window shorter than the sampling interval is described by the first reading after
it (marked ``coarse``). Energy is the change of each GPU's energy counter across the window, read by linear
interpolation between the readings around each edge; without a counter it is mean power × duration.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from ddptop.protocol.wire import EventFileReader
from ddptop.telemetry.running_peak import PeakUse

GPM_KEYS = ("sm_active", "sm_occupancy", "tensor_active", "dram_active")  # as telemetry/gpu.py reads them


def read_timeline(path: str) -> tuple[list[dict[str, Any]], int]:
    """The telemetry records of a timeline file, in time order, and the number of malformed lines."""
    if not os.path.exists(path):
        return [], 0
    reader = EventFileReader(path)
    telemetry = [e for e in reader.read_rest() if e["type"] == "telemetry"]
    records = [e for e in telemetry if _well_formed(e)]
    records.sort(key=lambda e: e["t"])
    return records, reader.malformed + len(telemetry) - len(records)


def _well_formed(record: dict[str, Any]) -> bool:
    """Whether a record has the shape every reader counts on (a damaged file's may not): its readings in lists
    of objects, the host's and the device list's in objects."""
    lists_of_objects = all(value is None or (isinstance(value, list) and all(isinstance(v, dict) for v in value))
                           for value in (record.get("gpus"), record.get("ranks")))
    objects = all(value is None or isinstance(value, dict) for value in (record.get("host"), record.get("info")))
    return isinstance(record.get("t"), (int, float)) and lists_of_objects and objects


def timeline_info(records: list[dict[str, Any]]) -> dict[str, Any] | None:
    return next((r["info"] for r in records if isinstance(r.get("info"), dict)), None)


def _gpu(record: dict[str, Any], index: int) -> dict[str, Any] | None:
    for reading in record.get("gpus") or ():
        if isinstance(reading, dict) and reading.get("index") == index:
            return reading
    return None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _interpolate(series: list[tuple[float, float]], when: float) -> float | None:
    """Linear interpolation of a counter at ``when``; None unless readings bracket it."""
    for (t0, v0), (t1, v1) in zip(series, series[1:]):
        if t0 <= when <= t1:
            return v0 if t1 == t0 else v0 + (v1 - v0) * (when - t0) / (t1 - t0)
    return None


def gpus_of_launch(records: list[dict[str, Any]], launch: str | None, start: float, end: float) -> list[int]:
    """GPUs that the launch's ranks ran on while the window was open."""
    found: set[int] = set()
    for record in records:
        if start - 5 <= record["t"] <= end + 5:
            for rank in record.get("ranks") or ():
                if isinstance(rank, dict) and rank.get("launch") == launch:
                    # every GPU of a process on several (DataParallel), the one GPU of a DDP rank
                    on = rank.get("gpus") if isinstance(rank.get("gpus"), list) else [rank.get("gpu")]
                    found.update(g for g in on if isinstance(g, int))
    return sorted(found)


def window_figures(
    records: list[dict[str, Any]],
    start: float,
    end: float,
    launch: str | None,
    examples: int | None,
    rank_spans: Sequence[tuple[str | None, float, float]] = (),
) -> dict[str, Any] | None:
    """GPU, host and rank figures for one configuration; None when no reading covers it. The GPU and host
    figures are of the window; the ranks' of ``rank_spans``, (launch, start, end) of the configuration in each
    launch its figures use (its whole time, warm-up included), else of the window."""
    if not records or end < start:
        return None
    inside = [r for r in records if start < r["t"] <= end]
    coarse = False
    if not inside:
        after = next((r for r in records if r["t"] > end), None)
        if after is None:
            return None
        inside, coarse = [after], True
    result: dict[str, Any] = {"window_s": end - start, "readings": len(inside), "coarse": coarse}
    gpus = gpus_of_launch(records, launch, start, end)
    result["gpus"] = gpus
    result.update(_gpu_figures(records, inside, gpus, start, end, examples))
    cpu = [r["host"]["cpu"] for r in inside if isinstance(r.get("host"), dict) and r["host"].get("cpu") is not None]
    result["host_cpu_mean"] = _mean(cpu)
    spans = [([r for r in records if low <= r["t"] <= high], of) for of, low, high in rank_spans or [(launch, start, end)]]
    if not any(found for found, _ in spans):
        spans = [(inside, launch)]
    result["ranks"] = _rank_figures(spans)
    return result


def _gpu_figures(
    records: list[dict[str, Any]],
    inside: list[dict[str, Any]],
    gpus: list[int],
    start: float,
    end: float,
    examples: int | None,
) -> dict[str, Any]:
    empty = {
        "util_mean": None,
        "util_max": None,
        "mem_peak_bytes": None,
        "power_mean_w": None,
        "energy_j": None,
        "energy_source": None,
        "energy_per_example_j": None,
        **{f"{key}_mean": None for key in GPM_KEYS},
    }
    if not gpus:
        return empty
    utils, mems, powers = [], [], []
    counters: dict[str, list[float]] = {key: [] for key in GPM_KEYS}
    for record in inside:
        watts = []
        for index in gpus:
            reading = _gpu(record, index)
            if reading is None:
                continue
            if reading.get("util") is not None:
                utils.append(reading["util"])
            for key in GPM_KEYS:
                if reading.get(key) is not None:
                    counters[key].append(reading[key])
            if reading.get("mem_used") is not None:
                mems.append(reading["mem_used"])
            if reading.get("power_w") is not None:
                watts.append(reading["power_w"])
        if watts and len(watts) == len(gpus):
            powers.append(sum(watts))
    figures = dict(empty)
    figures["util_mean"] = _mean(utils)
    figures["util_max"] = max(utils) if utils else None
    for key in GPM_KEYS:  # GPM (Hopper and later): each reading covers the time since the one before
        figures[f"{key}_mean"] = _mean(counters[key])
    figures["mem_peak_bytes"] = max(mems) if mems else None
    figures["power_mean_w"] = _mean(powers)
    joules = 0.0
    for index in gpus:
        series = [
            (r["t"], float(g["energy_j"]))
            for r in records
            if (g := _gpu(r, index)) is not None and g.get("energy_j") is not None
        ]
        first, last = _interpolate(series, start), _interpolate(series, end)
        if first is None or last is None:
            joules = -1.0
            break
        joules += last - first
    if joules >= 0:
        figures["energy_j"], figures["energy_source"] = joules, "energy counter"
    elif figures["power_mean_w"] is not None:
        figures["energy_j"], figures["energy_source"] = figures["power_mean_w"] * (end - start), "mean power x time"
    if figures["energy_j"] is not None and examples:
        figures["energy_per_example_j"] = figures["energy_j"] / examples
    return figures


def busy_readings(records: list[dict[str, Any]], windows: list[tuple[str | None, float, float]]) -> list[dict[str, Any]]:
    """Each reading inside a measured window ``(launch, start, end]`` that read every GPU the launch's ranks
    used and at least one of those ranks' CPU: its time, its window's index and start, the GPUs' mean utilisation
    (percent; NVML's, over its sample period before the reading) and the ranks' mean CPU (percent of one
    core, since the reading before). The evidence of the host-bound verdict (``ddptop.analysis.step_bound``)."""
    found: list[dict[str, Any]] = []
    for index, (launch, start, end) in enumerate(windows):
        gpus = gpus_of_launch(records, launch, start, end)
        if not gpus:
            continue
        for record in records:
            if not start < record["t"] <= end:
                continue
            utils = [float(g["util"]) for i in gpus if (g := _gpu(record, i)) is not None
                     and isinstance(g.get("util"), (int, float))]
            cpus = [float(r["cpu"]) for r in record.get("ranks") or ()
                    if isinstance(r, dict) and r.get("launch") == launch and isinstance(r.get("cpu"), (int, float))]
            if len(utils) == len(gpus) and cpus:
                found.append({"t": record["t"], "window": index, "start": start, "util": sum(utils) / len(utils),
                              "rank_cpu": sum(cpus) / len(cpus)})
    return found


def _rank_figures(spans: list[tuple[list[dict[str, Any]], str | None]]) -> dict[str, dict[str, Any]]:
    """Each rank's peak RSS, most threads and mean CPU over the readings of its launch in each span: a rank of
    several launches (a configuration measured in each) is one row, its figures over all of them."""
    ranks: dict[str, dict[str, Any]] = {}
    cpu: dict[str, list[float]] = {}
    readings = (reading for records, launch in spans for record in records for reading in record.get("ranks") or ()
                if isinstance(reading, dict) and reading.get("launch") == launch)
    for reading in readings:
        key = str(reading.get("rank"))
        entry = ranks.setdefault(key, {"pid": reading.get("pid"), "peak_rss_bytes": 0, "threads_max": 0})
        entry["peak_rss_bytes"] = max(entry["peak_rss_bytes"], int(reading.get("rss") or 0))
        entry["threads_max"] = max(entry["threads_max"], int(reading.get("threads") or 0))
        if reading.get("gpu") is not None:
            entry["gpu"] = reading["gpu"]
        if reading.get("cpu") is not None:
            cpu.setdefault(key, []).append(float(reading["cpu"]))
    for key, entry in ranks.items():
        entry["cpu_mean"] = _mean(cpu.get(key, []))
        entry["readings"] = len(cpu.get(key, []))  # behind cpu_mean (and the sampled peak RSS)
    return dict(sorted(ranks.items(), key=lambda kv: int(kv[0]) if kv[0].lstrip("-").isdigit() else 0))


class TimelineFollower:
    """Telemetry read back from a run directory's timeline, with the Monitor's reading interface.

    Views that show a run this process is not sampling (a recorded run, or one another process writes)
    read it through this; ``refresh`` picks up records appended since the last call.
    """

    def __init__(self, path: str, keep: int = 600) -> None:
        self.reader = EventFileReader(path)
        self.records: list[dict[str, Any]] = []
        self.keep = keep
        self._info: dict[str, Any] | None = None
        self._peak = PeakUse()  # over every record read, not only those ``records`` keeps

    def refresh(self) -> None:
        new = [e for e in self.reader.read_new() if e["type"] == "telemetry"]
        for record in new:
            if self._info is None and isinstance(record.get("info"), dict):
                self._info = record["info"]
            self._peak.add(record)
        self.records = (self.records + new)[-self.keep :]

    def info(self) -> dict[str, Any]:
        return self._info or {"fake": False, "nvml": "no telemetry recorded", "gpus": []}

    def latest(self) -> dict[str, Any] | None:
        return self.records[-1] if self.records else None

    def recent(self, count: int | None = None) -> list[dict[str, Any]]:
        return list(self.records if count is None else self.records[-count:])

    def peak(self) -> dict[str, Any]:
        """What the ranks used at their peak over every record read (``PeakUse``)."""
        return self._peak.as_dict()
