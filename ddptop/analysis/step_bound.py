"""One line per configuration saying what bounds its step: compute, communication, the host, or memory.

The verdict reads figures the summary already holds (exposed communication with its 95% interval, model FLOPs
utilisation, bus bandwidth as a share of the link's peak, the GPUs' idle share with its 95% interval, the
ranks' CPU, peak memory, the profiler trace's breakdown where there is one) and never states an effect its
interval cannot tell from noise: communication counts as the bound only when the lower end of its interval
clears the threshold, and as negligible only when the upper end stays under its own; the host counts as the
bound only when the lower end of the GPUs' idle share clears its threshold while the ranks ran at a full
core, or, with a GPU trace whose steps ran at the measured pace (``traces.TRACE_COST_LIMIT``), when every
traced step left the GPU idle beyond it, mostly waiting for the host.
Thresholds are here, in one place, and documented in docs/scaling-analysis.md ("Why it is not faster").
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from ddptop import units
from ddptop.analysis import script_steps, script_sync, traces
from ddptop.analysis.script_steps import INPUT_BOUND_SHARE
from ddptop.protocol.modelspec import model_kind
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT, EQUIVALENT, FASTER, SLOWER, change_words, classify_change
from ddptop.protocol.precision import t_quantile
from ddptop.records import STUDENT_T, Estimate, ci_of

# exposed communication, as a share of the step
COMM_BOUND = 0.25  # its 95% interval's lower end at or above this: communication-bound
COMM_MINOR = 0.10  # its upper end below this: communication is a minor cost
# host-bound on a GPU: the GPUs' idle share over the measured steps (100% less NVML's utilisation), its 95%
# interval's lower end above this, while ...
HOST_IDLE_SHARE = 0.10
RANK_CPU_BUSY = 90.0  # ... the ranks' mean CPU over the same readings is at least this (percent of one core per rank)
# NVML's utilisation covers a sample period of up to a second before each reading: a reading counts only this
# long after its window opened (its period lies inside the measured steps), and readings closer than this (90%
# of it, for jitter) are averaged into one before the interval, as they share part of their periods
IDLE_BLOCK_S = 1.0
# launch-bound rather than host-bound: the GPU waits for the host and its kernels average less than this, about
# what launching one costs (a few microseconds of the CUDA runtime, plus the framework's dispatch)
LAUNCH_BOUND_KERNEL_S = 20e-6
# a user's script (``script_figures``): input-bound when the ranks' wait for data, as a share of the step, has
# its 95% interval's lower end above script_steps.INPUT_BOUND_SHARE
MEMORY_FULL = 0.90  # peak memory at or above this share of the device's memory: memory-limited
# what a host-bound step can change, in the order to try it
HOST_ADVICE = ("a larger batch per GPU, CUDA graphs or torch.compile(mode=\"reduce-overhead\"), fewer small kernels "
               "(a fused optimizer: fused=True or foreach=True)")

COMPUTE, COMMUNICATION, HOST, MEMORY, BALANCED, UNKNOWN = (
    "compute-bound", "communication-bound", "host-bound", "memory", "balanced", "unknown")
INPUT, WAITING, NOT_DATA_PARALLEL = "input-bound", "waiting on the other ranks", "not data-parallel"


def _exposed(entry: Mapping[str, Any]) -> tuple[float | None, tuple[float, float] | None]:
    comm = entry.get("communication") or {}
    fraction = comm.get("exposed_comm_fraction")
    interval = comm.get("exposed_comm_fraction_ci")
    return fraction, (tuple(interval) if interval and None not in interval else None)


def _mfu_words(entry: Mapping[str, Any]) -> str | None:
    flops = entry.get("flops") or {}
    parts = []
    if flops.get("mfu_datasheet") is not None:
        parts.append(f"{units.percent(flops['mfu_datasheet'].value)} MFU")
    if flops.get("mfu_ceiling") is not None:
        parts.append(f"{units.percent(flops['mfu_ceiling'].value)} of the measured matmul ceiling")
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


_T975_SMALL = {1: 12.706, 2: 4.303, 3: 3.182}  # t's 0.975 quantile where the expansion in precision is poor


def _t975(df: int) -> float:
    return _T975_SMALL[df] if df in _T975_SMALL else t_quantile(0.975, df)


def gpu_idle(readings: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The GPUs' idle share over the measured steps with its 95% interval, from per-reading utilisations
    (``ddptop.telemetry.timeline.busy_readings``: ``t``, ``window`` and its ``start``, ``util`` in percent,
    ``rank_cpu``).

    A reading counts from ``IDLE_BLOCK_S`` after its window's start, when NVML's sample period before it lies
    inside the measured steps. Readings of one window less than 90% of ``IDLE_BLOCK_S`` after a block's first
    join that block (they share the sample period); each block's idle share (1 - mean utilisation / 100) is one
    observation, and the interval is Student's t over the blocks (none with fewer than two). ``rank_cpu_mean``:
    the ranks' mean CPU over the same readings, in percent of one core. None without a reading that counts."""
    readings = [r for r in readings if r["t"] - r.get("start", -math.inf) >= IDLE_BLOCK_S]
    if not readings:
        return None
    blocks: list[list[Mapping[str, Any]]] = []
    for reading in sorted(readings, key=lambda r: (r["window"], r["t"])):
        last = blocks[-1] if blocks else None
        if last and last[0]["window"] == reading["window"] and reading["t"] - last[0]["t"] < 0.9 * IDLE_BLOCK_S:
            last.append(reading)
        else:
            blocks.append([reading])
    idle = [1 - statistics.fmean(float(r["util"]) for r in block) / 100 for block in blocks]
    share = statistics.fmean(idle)
    interval = None
    if len(idle) >= 2:
        half = _t975(len(idle) - 1) * statistics.stdev(idle) / math.sqrt(len(idle))
        interval = [max(0.0, share - half), min(1.0, share + half)]
    return {
        "share": Estimate(value=share, ci=interval, method=STUDENT_T if interval else None),
        "readings": len(readings),
        "blocks": len(blocks),
        "launches": len({r["window"] for r in readings}),
        "rank_cpu_mean": statistics.fmean(float(r["rank_cpu"]) for r in readings),
    }


def _host_bound(idle: Mapping[str, Any] | None) -> bool:
    """The GPUs surely idle more than ``HOST_IDLE_SHARE`` of the time, the ranks at a full core meanwhile."""
    low = idle["share"].low if idle and idle.get("share") is not None else None
    if low is None or idle is None or idle.get("rank_cpu_mean") is None:
        return False
    return low > HOST_IDLE_SHARE and idle["rank_cpu_mean"] >= RANK_CPU_BUSY


def _host_words(idle: Mapping[str, Any], gpus: int, ranks: int) -> str:
    low, high = idle["share"].ci
    launches = idle.get("launches") or 1
    where = f"{idle['readings']} readings" + (f" in {launches} launches" if launches > 1 else "")
    gpu = "the GPUs were" if gpus > 1 else "the GPU was"
    rank = f"the ranks at {idle['rank_cpu_mean']:.0f}% of a core each" if ranks > 1 else \
        f"the rank at {idle['rank_cpu_mean']:.0f}% of a core"
    return (f"host-bound: {gpu} idle {units.percent(idle['share'].value)} of the measured steps (95% CI "
            f"{units.percent(low)}–{units.percent(high)}, {where}), {rank} — try {HOST_ADVICE}")


def _config_trace(entry: Mapping[str, Any]) -> traces.ConfigTrace | None:
    return traces.ConfigTrace.from_json(entry["trace"]) if isinstance(entry.get("trace"), Mapping) else None


def _measured_pace_on_gpu(entry: Mapping[str, Any], trace: traces.ConfigTrace | None) -> bool:
    """A GPU configuration's trace of the device's own work, its steps run at the measured pace: one that says
    where the measured steps' GPU time went."""
    return entry.get("device") == "cuda" and traces.on_gpu(trace) and traces.faithful(trace)


def _traced_host_bound(trace: traces.ConfigTrace | None) -> bool:
    """Every traced step of every rank left the GPU idle more than ``HOST_IDLE_SHARE`` of the step, most of it
    waiting for the host (nothing queued)."""
    idle, wait = traces.figure(trace, "idle_s"), traces.figure(trace, "idle_host_wait_s")
    return bool(idle and wait and idle.low > HOST_IDLE_SHARE and wait.median >= idle.median / 2)


def _traced_host_words(trace: traces.ConfigTrace, idle: Mapping[str, Any] | None) -> str:
    """Host-bound from the trace: the GPU's idle share and the part spent waiting for the host; launch-bound
    where the kernels are so short that launching them takes about as long as running them."""
    found, wait = traces.figure(trace, "idle_s"), traces.figure(trace, "idle_host_wait_s")
    assert found is not None and wait is not None
    count, what = traces.broken_down_over(trace)
    steps = f"{found.n} traced steps" + (f" ({trace.steps} x {count} {what}s)" if count > 1 else "")
    kernel = traces.median_kernel_s(trace)
    kind = "launch-bound" if kernel is not None and kernel < LAUNCH_BOUND_KERNEL_S else "host-bound"
    text = (f"{kind}: the GPU sat idle {units.percent(found.median)} of the step (every one of {steps} "
            f"{units.percent(found.low)}–{units.percent(found.high)}), {units.percent(wait.median)} "
            "waiting for the host with nothing queued")
    if kind == "launch-bound" and kernel is not None:
        text += f"; its median kernel runs {kernel * 1e6:.0f} us, about what launching one costs"
    if idle and idle.get("share") is not None:
        share = idle["share"]
        text += f"; NVML {'agrees' if _host_bound(idle) else 'read'}: idle {units.percent(share.value)} of the measured steps"
        if share.ci:
            text += f" (95% CI {units.percent(share.ci[0])}–{units.percent(share.ci[1])})"
    return f"{text} — try {HOST_ADVICE}"


def _traced_notes(trace: traces.ConfigTrace | None) -> list[str]:
    """What the trace adds to any verdict: memory copies that take a share of every step, and a trace that
    recorded no GPU activity (said, never read as an idle GPU)."""
    notes = []
    memory = traces.figure(trace, "memory_s")
    if memory and memory.low >= traces.TRACE_MEMORY_SHARE:
        notes.append(f"memory copies (Memcpy/Memset) take {units.percent(memory.median)} of every traced step")
    if trace is not None and trace.breakdown is not None:
        notes += [f"trace: {note}" for note in trace.breakdown.notes]
    return notes


def _traced_comm_words(trace: traces.ConfigTrace | None) -> str | None:
    """The traced communication beside the no_sync() estimate: in flight, under compute, exposed."""
    comm, exposed = traces.figure(trace, "communication_s"), traces.figure(trace, "exposed_communication_s")
    if comm is None or exposed is None or not traces.communicates(trace):  # too little to explain
        return None
    where = "" if traces.on_gpu(trace) else " (host: gloo's threads)"
    words = f"traced{where}: communication {units.percent(comm.median)} of the step"
    overlap = traces.overlap_share(trace)
    if overlap:
        words += f", {units.percent(overlap.median)} of it under compute"
    return words + f", {units.percent(exposed.median)} exposed"


def verdict(entry: Mapping[str, Any], environment: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``{"kind": ..., "text": one line}`` for one configuration's summary entry."""
    if model_kind(str(entry.get("model") or "")).verdict_of_script:
        return script_verdict(entry)
    if entry.get("stats") is None:
        return {"kind": UNKNOWN, "text": "no verdict: no measured steps"}
    on_gpu = entry.get("device") == "cuda"
    telemetry = entry.get("telemetry") or {}
    notes: list[str] = [str(note) for note in entry.get("notes") or ()]  # from the rank (bf16 emulated)

    total = _gpu_memory_total(entry, environment) if on_gpu else None
    peak = entry.get("peak_memory_bytes")
    if total and peak and peak / total >= MEMORY_FULL:
        notes.append(f"memory: {units.percent(peak / total)} of GPU memory at batch {entry.get('batch_size')}")

    trace = _config_trace(entry)
    notes += _traced_notes(trace)
    mfu = _mfu_words(entry)
    idle = telemetry.get("gpu_idle")
    traced = on_gpu and traces.on_gpu(trace)
    if trace is not None and _measured_pace_on_gpu(entry, trace):  # where the GPU's time went; NVML confirms or not
        if _traced_host_bound(trace):
            return {"kind": HOST, "text": "; ".join([_traced_host_words(trace, idle)] + ([mfu] if mfu else []) + notes)}
        if idle and _host_bound(idle):
            notes.append(f"NVML read the GPU idle {units.percent(idle['share'].value)} of the measured steps, which the "
                         "traced steps did not show")
    elif on_gpu and idle and _host_bound(idle):
        text = _host_words(idle, len(telemetry.get("gpus") or ()), len(telemetry.get("ranks") or ()))
        return {"kind": HOST, "text": "; ".join([text] + ([mfu] if mfu else []) + notes)}
    elif traced and _traced_host_bound(trace):
        notes.append(f"the traced steps left the GPU idle but ran {units.number(trace.cost_ratio if trace else None, 2, 'x')} "
                     "the measured p50 under the profiler: not taken for the measured steps'")

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
    traced_comm = _traced_comm_words(trace)
    if traced_comm:
        notes.insert(0, traced_comm)
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


def _interval_words(figure: float, ci: Sequence[float] | None, levels: str | None, launches: int | None = None,
                    of: str = "") -> str:
    """A share (``of`` what, right after it) and its interval in words, with what the interval spans (launches,
    or one launch only)."""
    text = units.percent(figure) + of
    if ci and None not in ci:
        over = f"across {launches} launches" if levels == "launches" and launches else "within one launch only"
        text += f" (95% CI {units.percent(ci[0])}–{units.percent(ci[1])}, {over})"
    return text


def _ratio_words(found: Mapping[str, Any]) -> str:
    """The step less its data wait against the smallest N's, its interval, and its change in words that follow
    the interval (``step_change.change_words``: never "within 2%" of a ratio whose interval lies beyond it)."""
    ratio, ci = found["ratio"].value, found["ratio"].ci
    text = f"{ratio:.2f}x N={found['reference_world_size']}'s" + (
        " per example a rank draws" if found.get("per_example") else "")
    text += f" (95% CI {ci[0]:.2f}–{ci[1]:.2f})" if ci and None not in ci else ""
    return f"{text}, {change_words(ci, _margin(found))}"


def _margin(found: Mapping[str, Any]) -> float:
    return found["min_effect"] if found.get("min_effect") is not None else DEFAULT_MIN_EFFECT


def step_change_of(found: Mapping[str, Any]) -> str | None:
    """The change of the step less its data wait (``step_change.classify_change``), from its interval where it
    has one (so that the words and the verdict's kind follow the same figures), else as stored."""
    ci = ci_of(found.get("ratio"))
    if ci:
        return classify_change(ci[0], ci[1], _margin(found))
    return found.get("change")


def script_verdict(entry: Mapping[str, Any]) -> dict[str, Any]:
    """A user's script's verdict: not data-parallel (N=1 alone is the serial baseline, never that), input-bound,
    waiting on the other ranks (only where DDP's timers saw its exposed communication grow), compute that grew,
    not measured, compute-bound or scaling within noise, from its data wait, its step less that wait
    (``script_figures``) and its gradient synchronisation (``script_sync``), with gradients synchronised on every
    micro-batch said with the fix; no effect is stated that its 95% interval cannot tell from noise."""
    seen = entry.get("script") if isinstance(entry.get("script"), Mapping) else {}
    notes = [script_steps.SPAWNED] if (seen or {}).get("spawned") else []
    apart = script_steps.data_parallel_problem(seen)
    if apart is not None:
        return {"kind": NOT_DATA_PARALLEL,
                "text": "; ".join([f"{apart}: its step times across N are not a scaling measurement"] + notes)}
    if entry.get("stats") is None:
        return {"kind": UNKNOWN, "text": "; ".join(["no verdict: no measured steps"] + notes)}
    sync: Mapping[str, Any] = entry["grad_sync"] if isinstance(entry.get("grad_sync"), Mapping) else {}
    every = script_sync.every_micro_batch_words(sync) if entry.get("world_size", 1) >= 2 else None
    if every:
        notes.insert(0, every)
    wait = entry.get("data_wait") or None
    less = entry.get("step_less_wait") or {}
    ci = ci_of(wait["share"]) if wait else None
    share = (_interval_words(wait["share"].value, ci, wait.get("levels"), wait.get("launches"), " of the step")
             if wait else None)
    input_bound = bool(ci and ci[0] > INPUT_BOUND_SHARE)
    change = step_change_of(less) if less.get("ratio") is not None else None
    grew = change == SLOWER
    parts: list[str] = []
    kind = None
    if input_bound and share:
        kind = INPUT
        parts.append(f"input-bound: the ranks wait for data {share}, above {units.percent(INPUT_BOUND_SHARE)} "
                     f"beyond noise — {script_steps.loader_advice(seen)}")
    trace = _config_trace(entry)
    if kind is None and trace is not None and _measured_pace_on_gpu(entry, trace) and _traced_host_bound(trace):
        kind = HOST  # its traced steps left the GPU waiting for the host: the step is the host's, whatever N
        parts.append(_traced_host_words(trace, (entry.get("telemetry") or {}).get("gpu_idle")))
    if grew:
        cause, head, why = _growth(entry, sync, less)
        if kind is None:
            kind = cause
            parts.append(head)
        else:
            parts.append(f"and {head}")
        parts += why
        found = (wait or {}).get("straggler") or {}
        if found.get("flagged"):
            parts.append(f"rank {found['rank']} waits longest for data: the others wait for it")
    if kind is None:
        single = entry.get("world_size", 1) < 2
        if single:
            kind, head = COMPUTE, "compute only (one rank, no communication)"
        elif change in (EQUIVALENT, FASTER):  # not grown: the ranks do not wait on each other
            kind, head = COMPUTE, f"compute-bound: the step less its data wait is {_ratio_words(less)}"
        elif less.get("ratio") is not None:
            kind, head = UNKNOWN, f"scaling within noise: the step less its data wait is {_ratio_words(less)}"
        else:
            kind, head = UNKNOWN, "no verdict: nothing to compare the step with"
        parts.append(head)
        if share is None:
            parts.append("the waits for data were not timed")
        elif ci and ci[1] < INPUT_BOUND_SHARE:
            parts.append(f"data wait {share}, under {units.percent(INPUT_BOUND_SHARE)}")
        else:
            parts.append(f"data wait {share}: whether it bounds the step is within noise")
    return {"kind": kind, "text": "; ".join(parts + notes)}


def _growth(entry: Mapping[str, Any], sync: Mapping[str, Any], less: Mapping[str, Any]) -> tuple[str, str, list[str]]:
    """What grew, for a step less its data wait that grew beyond noise: the ranks waiting on each other only
    where DDP's timers measured its exposed communication grow (``script_sync.grad_sync``'s ``comm_grew``),
    compute where they measured it not to, else said not to be measured. The kind, the head and what tells."""
    text = f"the step less its data wait is {_ratio_words(less)}"
    threads = script_sync.threads_words(sync, entry.get("world_size", 1))
    if sync.get("comm_grew") is True:
        low = sync.get("step_growth_low_s")
        covers = (f": {units.milliseconds(sync.get('comm_growth_s'))} more a step" +
                  (f", of a step that grew by at least {units.milliseconds(low)}" if low and low > 0 else ""))
        return WAITING, f"waiting on the other ranks: {text}", [script_sync.comm_words(sync) + covers]
    if sync.get("comm_grew") is False:
        why = [script_sync.comm_words(sync) + ": not what grew"] + ([threads] if threads else [])
        return COMPUTE, f"compute grew with N: {text}", why
    why = ["no timers of DDP's to tell the ranks' wait for each other from compute that grew"
           + (f" ({threads})" if threads else "")]
    return UNKNOWN, f"not measured whether the ranks wait on each other or their compute grew: {text}", why


def thresholds() -> dict[str, float]:
    """The thresholds as saved with each summary, so a verdict can be read against what produced it."""
    return {"comm_bound": COMM_BOUND, "comm_minor": COMM_MINOR, "host_idle_share": HOST_IDLE_SHARE,
            "rank_cpu_busy": RANK_CPU_BUSY, "idle_block_s": IDLE_BLOCK_S, "memory_full": MEMORY_FULL,
            "launch_bound_kernel_s": LAUNCH_BOUND_KERNEL_S, "trace_memory_share": traces.TRACE_MEMORY_SHARE,
            "trace_cost_limit": traces.TRACE_COST_LIMIT,
            "input_bound_share": INPUT_BOUND_SHARE}
