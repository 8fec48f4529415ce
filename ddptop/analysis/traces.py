"""A configuration's profiler trace as the summary and the views hold it: its files, what it cost, and the
breakdown of every kept step of every rank.

Each rank writes its trace file and sends a ``trace`` event (``bench_kernels.trace``) with the file's path
(relative to the run directory), its size and the wall time of its traced steps. ddptop breaks each file
down (``ddptop.analysis.trace_breakdown``) and puts the ranks together here. A run recorded when the ranks
broke their files down themselves carries each rank's breakdown in its event: that is used where the file
is gone. The cost is measured, not assumed: the traced steps' median against the measured p50, and the
file's bytes per recorded step.

The records are declared here once; the summary holds them as they are (``ddptop.report.schema.trace``), and
the figures are read from them (``figure``, ``overlap_share``, ...).
"""

from __future__ import annotations

import functools
import os
import statistics
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptop.analysis import stats
from ddptop.analysis.trace_breakdown import (FIGURES, CollectiveTotal, GpuWork, KernelTotal, RankBreakdown,
                                             TracedStep, breakdown)
from ddptop.analysis.trace_file import TraceUnreadable, read_trace
from ddptop.records import Record

# where a figure of the breakdown counts in a verdict: every kept step of every rank beyond it
TRACE_MEMORY_SHARE = 0.10  # memory copies (Memcpy/Memset) at least this share of the step: said
# communication under this share of every traced step: too little for its overlap to say anything
COMMUNICATION_SHARE = 0.01
# the traced steps' median at most this many times the measured p50: the profiler left the step as measured,
# so the trace's idle share may stand for the measured steps' (the profiler's own host work lengthens every
# launch, the very thing a host-bound call weighs)
TRACE_COST_LIMIT = 1.2
COMBINED_TOP = 10  # kernels (host ops) kept over all ranks


# -- the typed results ------------------------------------------------------------------------------------------


@dataclass(kw_only=True)
class Spread(Record):
    """A figure over every kept step of every rank: its median, lowest and highest step, and how many."""

    median: float = 0.0
    low: float = 0.0
    high: float = 0.0
    n: int = 0


@dataclass(kw_only=True)
class CombinedBreakdown(Record):
    """Every rank's kept steps together: each figure as a share of its step's window (the window in seconds),
    the share of communication under computation, the top kernels and the collectives over all ranks."""

    device: str | None = None  # cuda, cpu, or mixed when ranks differ
    steps: int = 0  # rows: kept steps x ranks (x GPUs of a rank that drove several)
    figures: dict[str, Spread | None] = field(default_factory=dict)  # by trace_breakdown.FIGURES' names, in order
    overlap_share: Spread | None = None  # of communication, under computation
    notes: list[str] = field(default_factory=list)
    kernels: list[KernelTotal] = field(default_factory=list)
    collectives: list[CollectiveTotal] = field(default_factory=list)
    gpu_work: GpuWork | None = None


@dataclass(kw_only=True)
class TraceFile(Record):
    """A rank's trace file: its path from the run directory and its size when written."""

    rank: int = 0
    path: str = ""
    size_bytes: int = 0


@dataclass(kw_only=True)
class ConfigTrace(Record):
    """A configuration's trace: its files, its cost, its breakdown over every rank, and why anything is
    missing; the summary holds it as it is (``ddptop.report.schema.Trace``)."""

    files: list[TraceFile] = field(default_factory=list)
    steps: int | None = None  # kept steps per rank
    wall_s: float | None = None  # the profiled steps, the profiler's start and the export, on the slowest rank
    export_s: float | None = None
    traced_step_s: float | None = None  # the median traced step, against the measured p50
    untraced_step_s: float | None = None
    cost_ratio: float | None = None
    bytes_per_step: float | None = None  # file size per recorded step, the largest rank's
    breakdown: CombinedBreakdown | None = None
    notes: list[str] = field(default_factory=list)


# -- over ranks ---------------------------------------------------------------------------------------------


def spread(values: list[float]) -> Spread | None:
    if not values:
        return None
    return Spread(median=statistics.median(values), low=min(values), high=max(values), n=len(values))


def shares_of_window(steps: list[TracedStep], key: str) -> list[float]:
    """A figure as a fraction of its step's window (the window itself in seconds), a missing one skipped."""
    if key == "window_s":
        return [step.window_s for step in steps if step.window_s is not None]
    return [value / step.window_s for step in steps if (value := step.figure(key)) is not None and step.window_s]


def overlap_shares(steps: list[TracedStep]) -> list[float]:
    """The share of each step's communication that ran under computation (steps with communication alone)."""
    return [step.overlap_s / step.communication_s for step in steps
            if step.communication_s and step.overlap_s is not None]


def _rank_kernel_total(rows: tuple[KernelTotal, ...]) -> float:
    """A rank's time over every counted kernel, which its top rows may not reach: a row's total over share."""
    return next((row.total_s / row.share for row in rows if row.share > 0), sum(row.total_s for row in rows))


def merged_kernels(per_rank: list[RankBreakdown]) -> list[KernelTotal]:
    """The top kernels over every rank, each one's share of every rank's kernel time."""
    totals: dict[str, list[Any]] = {}  # name -> [kind, count, total_s], in the order first met
    for rank in per_rank:
        for row in rank.kernels:
            into = totals.setdefault(row.name, [row.kind, 0, 0.0])
            into[1] += row.count
            into[2] += row.total_s
    grand = sum(_rank_kernel_total(rank.kernels) for rank in per_rank if rank.kernels)
    names = sorted(totals, key=lambda name: (-totals[name][2], name))[:COMBINED_TOP]
    return [KernelTotal(name=name, kind=totals[name][0], count=totals[name][1], total_s=totals[name][2],
                        mean_s=totals[name][2] / totals[name][1], share=totals[name][2] / grand if grand else 0.0)
            for name in names]


def merged_collectives(per_rank: list[RankBreakdown]) -> list[CollectiveTotal]:
    totals: dict[str, list[Any]] = {}  # name -> [count, total_s]
    for rank in per_rank:
        for row in rank.collectives:
            into = totals.setdefault(row.name, [0, 0.0])
            into[0] += row.count
            into[1] += row.total_s
    return [CollectiveTotal(name=name, count=totals[name][0], total_s=totals[name][1])
            for name in sorted(totals, key=lambda name: (-totals[name][1], name))]


def summed_work(per_rank: list[RankBreakdown]) -> GpuWork | None:
    """The ranks' GPU work added up, with the ranks' middle median kernel."""
    found = [rank.gpu_work for rank in per_rank if rank.gpu_work is not None]
    if not found:
        return None
    medians = [w.computation_median_s for w in found if w.computation_median_s is not None]
    return GpuWork(count=sum(w.count for w in found), total_s=sum(w.total_s for w in found),
                   computation_median_s=statistics.median(medians) if medians else None)


def combine(per_rank: list[RankBreakdown]) -> CombinedBreakdown:
    """Every rank's kept steps together: each figure as a fraction of its step's window, as median and range,
    so that one line can say where the run's time went and how much the steps and ranks disagree."""
    steps = [step for rank in per_rank for step in rank.steps]
    devices = {rank.device for rank in per_rank}
    return CombinedBreakdown(
        device=devices.pop() if len(devices) == 1 else ("mixed" if devices else None),
        steps=len(steps),
        figures={key: spread(shares_of_window(steps, key)) for key in FIGURES},
        overlap_share=spread(overlap_shares(steps)),
        notes=list(dict.fromkeys(rank.note for rank in per_rank if rank.note)),
        kernels=merged_kernels(per_rank),
        collectives=merged_collectives(per_rank),
        gpu_work=summed_work(per_rank))


# -- a configuration's trace from its ranks' events and files ------------------------------------------------


@functools.lru_cache(maxsize=256)
def _file_breakdown(path: str, device: str, identity: tuple[int, int, int]) -> RankBreakdown:
    """One file broken down, kept while it stays the same file (its inode, size and time): the live view and
    the summary of one process read each file once."""
    return breakdown(read_trace(path), device)


def file_breakdown(path: str, device: str) -> RankBreakdown:
    """The breakdown of the trace file at ``path``; TraceUnreadable when it is gone or broken."""
    try:
        found = os.stat(path)
    except OSError as error:
        raise TraceUnreadable(f"{path}: not a readable trace: {error.strerror or error}") from error
    return _file_breakdown(os.path.abspath(path), device, (found.st_ino, found.st_size, found.st_mtime_ns))


def _rank_device(event: Mapping[str, Any], device: str | None) -> str:
    """The device the rank traced on: said in its event, else the kind its own breakdown gave (a run whose
    ranks broke their own files down), else the configuration's."""
    said = event.get("device")
    carried = event.get("breakdown")
    if said not in ("cuda", "cpu") and isinstance(carried, Mapping):
        said = carried.get("device")
    if said not in ("cuda", "cpu"):
        said = device
    return said if said in ("cuda", "cpu") else "cpu"


def rank_breakdown(event: Mapping[str, Any], run_dir: str | None,
                   device: str | None = None) -> tuple[RankBreakdown | None, str | None]:
    """One rank's breakdown and, where there is none, why: its file broken down when there is a
    ``run_dir`` and the rank wrote the file; else (no run directory given, or the file gone) the breakdown its
    event carried, in a run recorded when the ranks broke their files down themselves."""
    carried = event.get("breakdown")
    rank_made = RankBreakdown.from_json(carried) if isinstance(carried, Mapping) else None
    if run_dir is None or not isinstance(event.get("size_bytes"), int) or not isinstance(event.get("path"), str):
        return rank_made, None
    path = os.path.join(run_dir, event["path"])
    try:
        return file_breakdown(path, _rank_device(event, device)), None
    except (TraceUnreadable, TypeError, KeyError, MemoryError) as exc:  # TypeError, KeyError: not Kineto's shape
        if rank_made is not None:
            return rank_made, None
        if event.get("note"):  # the rank said why already
            return None, None
        said = str(exc) if isinstance(exc, TraceUnreadable) else f"{path}: {type(exc).__name__}: {exc}"
        return None, f"the trace could not be read: {said}"


def config_trace(events: Mapping[int, Mapping[str, Any]], measured_p50: float | None, run_dir: str | None = None,
                 device: str | None = None) -> ConfigTrace | None:
    """The summary's ``trace`` of one configuration from its ranks' trace events; None without any.

    With ``run_dir`` each rank's file is broken down (``rank_breakdown``); without it, only what the events
    carry. ``device`` is the configuration's, for an event that does not say its own."""
    if not events:
        return None
    ordered = [events[rank] for rank in sorted(events)]
    files = [TraceFile(rank=e["rank"], path=e["path"], size_bytes=e["size_bytes"]) for e in ordered
             if isinstance(e.get("size_bytes"), int)]
    found = [rank_breakdown(e, run_dir, device) for e in ordered]
    per_rank = [rank for rank, _ in found if rank is not None]
    combined = combine(per_rank) if per_rank else None
    notes = [str(e["note"]) for e in ordered if e.get("note")] + [why for _, why in found if why]
    notes += [n for n in (combined.notes if combined else ()) if n not in notes]
    steps = max(int(e.get("steps") or 0) for e in ordered)
    traced = [float(s) for e in ordered for s in e.get("step_s") or ()]
    traced_step = stats.median(traced) if traced else None
    recorded = steps + 1  # the last active step is in the file, left out of the breakdown
    sizes = [f.size_bytes / recorded for f in files]
    return ConfigTrace(
        files=files,
        steps=steps,
        # the rank's breakdown time is there in runs recorded when the ranks broke their files down
        wall_s=max(float(e["wall_s"]) + float(e.get("breakdown_s") or 0) for e in ordered),
        export_s=max((float(e["export_s"]) for e in ordered if e.get("export_s") is not None), default=None),
        traced_step_s=traced_step,
        untraced_step_s=measured_p50,
        cost_ratio=traced_step / measured_p50 if traced_step and measured_p50 else None,
        bytes_per_step=max(sizes) if sizes else None,
        breakdown=combined,
        notes=notes,
    )


# -- reading the figures ------------------------------------------------------------------------------------


def figure(trace: ConfigTrace | None, name: str) -> Spread | None:
    """One figure of a trace's breakdown (``idle_s``, ``compute_s`` ...: a share of the step, median and range over
    every kept step of every rank), or None where the trace has none."""
    if trace is None or trace.breakdown is None:
        return None
    return trace.breakdown.figures.get(name)


def communicates(trace: ConfigTrace | None) -> bool:
    """Some traced step spent ``COMMUNICATION_SHARE`` of itself or more in communication."""
    found = figure(trace, "communication_s")
    return found is not None and found.high >= COMMUNICATION_SHARE


def overlap_share(trace: ConfigTrace | None) -> Spread | None:
    """The share of communication that ran under computation (median and range), where there is communication
    enough to have one."""
    if trace is None or trace.breakdown is None or not communicates(trace):
        return None
    return trace.breakdown.overlap_share


def on_gpu(trace: ConfigTrace | None) -> bool:
    """The trace holds the device's own activity (CUDA kernels), not only the host's."""
    return (trace is not None and trace.breakdown is not None and trace.breakdown.device == "cuda"
            and figure(trace, "busy_s") is not None)


def broken_down_over(trace: ConfigTrace) -> tuple[int, str]:
    """What each step was broken down over: its ranks, or the GPUs of a rank that drove several (DataParallel
    gives a row per step and GPU, so its rows outnumber its steps)."""
    ranks = len(trace.files) or 1
    rows, steps = trace.breakdown.steps if trace.breakdown is not None else None, trace.steps
    if rows is not None and steps and rows > steps * ranks:
        return rows // steps, "GPU"
    return ranks, "rank"


def median_kernel_s(trace: ConfigTrace | None) -> float | None:
    """The traced steps' median computation kernel (the ranks' middle); None without any."""
    if trace is None or trace.breakdown is None or trace.breakdown.gpu_work is None:
        return None
    return trace.breakdown.gpu_work.computation_median_s


def faithful(trace: ConfigTrace | None) -> bool:
    """The traced steps ran at the measured pace (within ``TRACE_COST_LIMIT``)."""
    return trace is not None and trace.cost_ratio is not None and trace.cost_ratio <= TRACE_COST_LIMIT
