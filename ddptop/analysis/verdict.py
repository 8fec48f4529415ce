"""One line per configuration saying what bounds its step: compute, communication, the host, or memory.

The verdict reads figures the summary already holds (exposed communication with its 95% interval, model FLOPs
utilisation, bus bandwidth as a share of the link's peak, GPU utilisation, the ranks' CPU, peak memory) and
never states an effect its interval cannot tell from noise: communication counts as the bound only when
the lower end of its interval clears the threshold, and as negligible only when the upper end stays under
its own. Thresholds are here, in one place, and documented in docs/scaling-analysis.md ("Why it is not faster").
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddptop import units

# exposed communication, as a share of the step
COMM_BOUND = 0.25  # its 95% interval's lower end at or above this: communication-bound
COMM_MINOR = 0.10  # its upper end below this: communication is a minor cost
# host-bound on a GPU: the GPUs busy less than this share of the time, while ...
GPU_IDLE_UTIL = 70.0  # percent, NVML's mean utilisation over the measured steps
RANK_CPU_BUSY = 90.0  # ... the ranks' mean CPU is at least this (percent of one core per rank, psutil)
MEMORY_FULL = 0.90  # peak memory at or above this share of the device's memory: memory-limited

COMPUTE, COMMUNICATION, HOST, MEMORY, BALANCED, UNKNOWN = (
    "compute-bound", "communication-bound", "host-bound", "memory", "balanced", "unknown")


def _exposed(entry: Mapping[str, Any]) -> tuple[float | None, tuple[float, float] | None]:
    comm = entry.get("communication") or {}
    fraction = comm.get("exposed_comm_fraction")
    interval = comm.get("exposed_comm_fraction_ci")
    return fraction, (tuple(interval) if interval and None not in interval else None)


def _mfu_words(entry: Mapping[str, Any]) -> str | None:
    flops = entry.get("flops") or {}
    parts = []
    if flops.get("mfu_datasheet") is not None:
        parts.append(f"{units.percent(flops['mfu_datasheet'])} MFU")
    if flops.get("mfu_ceiling") is not None:
        parts.append(f"{units.percent(flops['mfu_ceiling'])} of the measured matmul ceiling")
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else f"{parts[0]} ({parts[1]})"


def _link_words(entry: Mapping[str, Any]) -> str | None:
    achieved = ((entry.get("communication") or {}).get("buckets") or {}).get("achieved") or {}
    share, link = achieved.get("link_share"), achieved.get("link")
    if share is None or not link:
        return None
    return f"at {units.percent(share)} of {link} peak"


def _gpu_memory_total(entry: Mapping[str, Any], environment: Mapping[str, Any] | None) -> int | None:
    totals = [g.get("memory_total") for g in (environment or {}).get("gpus") or [] if g.get("memory_total")]
    return min(totals) if totals else None


def _rank_cpu(entry: Mapping[str, Any]) -> float | None:
    ranks = ((entry.get("telemetry") or {}).get("ranks") or {}).values()
    values = [r.get("cpu_mean") for r in ranks if r.get("cpu_mean") is not None]
    return sum(values) / len(values) if values else None


def verdict(entry: Mapping[str, Any], environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"kind": ..., "text": one line}`` for one configuration's summary entry."""
    if entry.get("stats") is None:
        return {"kind": UNKNOWN, "text": "no verdict: no measured steps"}
    on_gpu = entry.get("device") == "cuda"
    telemetry = entry.get("telemetry") or {}
    notes: list[str] = [str(note) for note in entry.get("notes") or ()]  # from the rank (bf16 emulated)

    total = _gpu_memory_total(entry, environment) if on_gpu else None
    peak = entry.get("peak_memory_bytes")
    if total and peak and peak / total >= MEMORY_FULL:
        notes.append(f"memory: {units.percent(peak / total)} of GPU memory at batch {entry.get('batch_size')}")

    util, rank_cpu = telemetry.get("util_mean"), _rank_cpu(entry)
    if on_gpu and util is not None and rank_cpu is not None and util < GPU_IDLE_UTIL and rank_cpu >= RANK_CPU_BUSY:
        text = f"host-bound: GPUs idle {100 - util:.0f}% of the time, ranks at {rank_cpu:.0f}% CPU"
        return {"kind": HOST, "text": "; ".join([text] + notes)}

    mfu = _mfu_words(entry)
    fraction, interval = _exposed(entry)
    single = entry.get("mode") != "ddp" or entry.get("world_size", 1) < 2
    if single:
        base = "compute only" + (f": {mfu}" if mfu else "") + " (one rank, no communication)"
        return {"kind": COMPUTE, "text": "; ".join([base] + notes)}
    if fraction is None:
        base = "no verdict: compute and communication were not told apart (no no_sync steps)" + (
            f"; {mfu}" if mfu else "")
        return {"kind": UNKNOWN, "text": "; ".join([base] + notes)}

    exposed = f"{units.percent(fraction)} of the step is exposed communication"
    if interval:
        exposed += f" (95% CI {units.percent(interval[0])}–{units.percent(interval[1])})"
    link = _link_words(entry)
    if interval and interval[0] >= COMM_BOUND:
        text = f"communication-bound: {exposed}" + (f", allreduce {link}" if link else "")
        text += " — try larger buckets (--bucket-cap-mb), fewer ranks per link, or gradient compression"
        kind = COMMUNICATION
    elif interval and interval[1] < COMM_MINOR:
        text = "compute-bound" + (f": {mfu}" if mfu else "") + f", communication {units.percent(fraction)} exposed"
        kind = COMPUTE
    else:
        text = f"balanced: {exposed}; neither compute nor communication clearly bounds the step" + (
            f"; {mfu}" if mfu else "")
        kind = BALANCED
    return {"kind": kind, "text": "; ".join([text] + notes)}


def thresholds() -> dict[str, float]:
    """The thresholds as saved with each summary, so a verdict can be read against what produced it."""
    return {"comm_bound": COMM_BOUND, "comm_minor": COMM_MINOR, "gpu_idle_util": GPU_IDLE_UTIL,
            "rank_cpu_busy": RANK_CPU_BUSY, "memory_full": MEMORY_FULL}
