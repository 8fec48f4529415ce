"""A configuration's profiler trace as the summary and the views hold it: its files, what it cost, and the
breakdown of every kept step of every rank.

Each rank's ``trace`` event (``bench_kernels.trace``) carries its file (relative to the run directory), its
size, the wall time of its traced steps and the breakdown it read back from that file
(``ddptop.protocol.trace_breakdown``); here the ranks are put together. The cost is measured, not assumed:
the traced steps' median against the measured p50, and the file's bytes per recorded step.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptop.analysis import stats
from ddptop.protocol.trace_breakdown import combine

# where a figure of the breakdown counts in a verdict: every kept step of every rank beyond it
TRACE_MEMORY_SHARE = 0.10  # memory copies (Memcpy/Memset) at least this share of the step: said
# communication under this share of every traced step: too little for its overlap to say anything
COMMUNICATION_SHARE = 0.01
# the traced steps' median at most this many times the measured p50: the profiler left the step as measured,
# so the trace's idle share may stand for the measured steps' (the profiler's own host work lengthens every
# launch, the very thing a host-bound call weighs)
TRACE_COST_LIMIT = 1.2


def config_trace(events: Mapping[int, Mapping[str, Any]], measured_p50: float | None) -> dict[str, Any] | None:
    """The summary's ``trace`` of one configuration from its ranks' trace events; None without any."""
    if not events:
        return None
    ordered = [events[rank] for rank in sorted(events)]
    files = [{"rank": e["rank"], "path": e["path"], "size_bytes": e["size_bytes"]}
             for e in ordered if isinstance(e.get("size_bytes"), int)]
    per_rank = [e["breakdown"] for e in ordered if isinstance(e.get("breakdown"), dict)]
    combined = combine(per_rank) if per_rank else None
    notes = [str(e["note"]) for e in ordered if e.get("note")]
    notes += [n for n in (combined or {}).get("notes") or () if n not in notes]
    steps = max(int(e.get("steps") or 0) for e in ordered)
    traced = [float(s) for e in ordered for s in e.get("step_s") or ()]
    traced_step = stats.median(traced) if traced else None
    recorded = steps + 1  # the last active step is in the file, left out of the breakdown
    sizes = [f["size_bytes"] / recorded for f in files]
    return {
        "files": files,
        "steps": steps,
        "wall_s": max(float(e["wall_s"]) + float(e.get("breakdown_s") or 0) for e in ordered),
        "export_s": max((float(e["export_s"]) for e in ordered if e.get("export_s") is not None), default=None),
        "traced_step_s": traced_step,
        "untraced_step_s": measured_p50,
        "cost_ratio": traced_step / measured_p50 if traced_step and measured_p50 else None,
        "bytes_per_step": max(sizes) if sizes else None,
        "breakdown": combined,
        "notes": notes,
    }


def figure(trace: Mapping[str, Any] | None, name: str) -> Mapping[str, Any] | None:
    """One figure of a trace's breakdown (``idle_s``, ``compute_s`` ...: a share of the step, median and range over
    every kept step of every rank), or None where the trace has none."""
    breakdown = (trace or {}).get("breakdown") or {}
    found = (breakdown.get("figures") or {}).get(name)
    return found if found and found.get("median") is not None else None


def communicates(trace: Mapping[str, Any] | None) -> bool:
    """Some traced step spent ``COMMUNICATION_SHARE`` of itself or more in communication."""
    found = figure(trace, "communication_s")
    return found is not None and found["high"] >= COMMUNICATION_SHARE


def overlap_share(trace: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The share of communication that ran under computation (median and range), where there is communication
    enough to have one."""
    found = ((trace or {}).get("breakdown") or {}).get("overlap_share")
    return found if found and found.get("median") is not None and communicates(trace) else None


def on_gpu(trace: Mapping[str, Any] | None) -> bool:
    """The trace holds the device's own activity (CUDA kernels), not only the host's."""
    breakdown = (trace or {}).get("breakdown") or {}
    return breakdown.get("device") == "cuda" and figure(trace, "busy_s") is not None


def broken_down_over(trace: Mapping[str, Any]) -> tuple[int, str]:
    """What each step was broken down over: its ranks, or the GPUs of a rank that drove several (DataParallel
    gives a row per step and GPU, so its rows outnumber its steps)."""
    ranks = len(trace.get("files") or ()) or 1
    rows, steps = (trace.get("breakdown") or {}).get("steps"), trace.get("steps")
    if isinstance(rows, int) and isinstance(steps, int) and steps and rows > steps * ranks:
        return rows // steps, "GPU"
    return ranks, "rank"


def median_kernel_s(trace: Mapping[str, Any] | None) -> float | None:
    """The traced steps' median computation kernel (the ranks' middle); None without any."""
    work = ((trace or {}).get("breakdown") or {}).get("gpu_work") or {}
    return work.get("computation_median_s")


def faithful(trace: Mapping[str, Any] | None) -> bool:
    """The traced steps ran at the measured pace (within ``TRACE_COST_LIMIT``)."""
    ratio = (trace or {}).get("cost_ratio")
    return ratio is not None and ratio <= TRACE_COST_LIMIT
