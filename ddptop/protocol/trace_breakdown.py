"""Where each profiled step's time went, read from a torch.profiler (Kineto) Chrome trace.

The figures follow Holistic Trace Analysis (HTA), where they differ said in docs/traces.md: a step is a
``ProfilerStep#N`` span; a GPU event belongs to the step whose span holds its launch (the CPU-side runtime
call with the same CUPTI correlation id); busy is the union of the GPU intervals over every stream;
overlap is the time computation and communication run at once; the last step is dropped, since the profiler
may cut it short. A CPU run has no GPU event: the same figures are then said of the training thread, as host
figures (the ``gloo:*`` ops on gloo's own threads are its communication).

Times are whole nanoseconds inside, so that sums and differences are exact; seconds in the result. Standard
library only, like the rest of ``ddptop.protocol``: torchrun workers import it to send their breakdown, which
ddptop reads as ``ddptop.analysis.trace_breakdown.RankBreakdown`` (the same arithmetic, typed) and puts
together in ``ddptop.analysis.traces``.
"""

from __future__ import annotations

import bisect
import gzip
import json
import math
import re
import statistics
import zlib
from collections import defaultdict
from dataclasses import dataclass
from typing import Any, Iterable

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
NCCL_KERNEL = re.compile(r"^nccl", re.IGNORECASE)  # ncclKernel_* (older NCCL) and ncclDevKernel_*
HOST_CATS = frozenset({"cpu_op", "user_annotation"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # not gpu_user_annotation: it has a stream too
MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})
NO_GPU_EVENT_NOTE = "the trace holds no GPU kernel (CUPTI recorded none): no device breakdown"
FIGURES = ("window_s", "busy_s", "idle_s", "compute_s", "communication_s", "memory_s", "overlap_s",
           "exposed_communication_s", "idle_host_wait_s", "idle_other_s")

Interval = tuple[int, int]  # [start, end) in nanoseconds


class TraceUnreadable(ValueError):
    """The file is no readable Chrome trace: missing, truncated, not JSON, or without a traceEvents list."""


@dataclass(frozen=True)
class Span:
    """A complete ("X") event, its times in nanoseconds."""

    name: str
    cat: str
    pid: Any
    tid: Any
    start: int
    end: int
    args: dict

    @property
    def thread(self) -> tuple[Any, Any]:
        return (self.pid, self.tid)


@dataclass(frozen=True)
class GpuWork:
    """A counted GPU event, with the launch that put it in a step."""

    event: Span
    launch: Span
    kind: str  # computation | communication | memory


# -- reading ------------------------------------------------------------------------------------------------


def read_trace(path: str) -> dict:
    """The trace as a dict (a ``.gz`` path is gzip-compressed JSON); a broken file raises TraceUnreadable."""
    opener = gzip.open if str(path).endswith(".gz") else open
    try:
        with opener(path, "rt", encoding="utf-8") as file:
            trace = json.load(file)
    except (OSError, EOFError, zlib.error, ValueError) as error:  # a bad gzip stream, bad UTF-8, bad JSON
        said = " ".join(str(error).split()) or type(error).__name__
        raise TraceUnreadable(f"{path}: not a readable trace: {said}") from error
    if not isinstance(trace, dict) or not isinstance(trace.get("traceEvents"), list):
        raise TraceUnreadable(f"{path}: not a Chrome trace (no traceEvents list)")
    return trace


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _spans(trace: dict) -> list[Span]:
    """The complete events with a time and a duration: metadata, flow and instant events say nothing here."""
    spans = []
    for event in trace.get("traceEvents") or ():
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts, dur = event.get("ts"), event.get("dur")
        if not _is_number(ts) or not _is_number(dur) or dur < 0:
            continue
        args = event.get("args")
        spans.append(Span(str(event.get("name", "")), str(event.get("cat", "")), event.get("pid"),
                          event.get("tid"), round(ts * 1000), round((ts + dur) * 1000),
                          args if isinstance(args, dict) else {}))
    return spans


def _step_spans(spans: list[Span]) -> dict[int, Span]:
    """The ``ProfilerStep#N`` spans by N (user_annotation; cpu_op in older torch)."""
    steps: dict[int, Span] = {}
    for span in spans:
        match = STEP_NAME.match(span.name)
        if match and span.cat in HOST_CATS:
            steps.setdefault(int(match.group(1)), span)
    return steps


# -- intervals ----------------------------------------------------------------------------------------------


def _union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time: when anything of the list ran."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _intersection(a: list[Interval], b: list[Interval]) -> list[Interval]:
    """The time two unions have in common, by a two-pointer sweep."""
    common, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            common.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return common


def _length(merged: list[Interval]) -> int:
    return sum(end - start for start, end in merged)


def _clipped(spans: Iterable[Span], low: int, high: int) -> list[Interval]:
    """The spans' parts inside [low, high), empty ones left out."""
    return [(max(s.start, low), min(s.end, high)) for s in spans if min(s.end, high) > max(s.start, low)]


# -- tables -------------------------------------------------------------------------------------------------


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def _kernel_table(items: Iterable[tuple[str, str, int]], top: int | None) -> list[dict]:
    """Per name (with its kind): count, total, mean and share of every item's time; largest total first."""
    totals: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    kinds: dict[str, str] = {}
    for name, kind, duration in items:
        totals[name] += duration
        counts[name] += 1
        kinds.setdefault(name, kind)
    grand = sum(totals.values())
    names = sorted(totals, key=lambda name: (-totals[name], name))[:top]
    return [{"name": name, "kind": kinds[name], "count": counts[name], "total_s": _seconds(totals[name]),
             "mean_s": totals[name] / counts[name] / 1e9, "share": totals[name] / grand if grand else 0.0}
            for name in names]


def _collective_table(items: Iterable[tuple[str, int]]) -> list[dict]:
    """Per collective: count and total time; largest total first."""
    table = _kernel_table(((name, "", duration) for name, duration in items), top=None)
    return [{"name": row["name"], "count": row["count"], "total_s": row["total_s"]} for row in table]


def _row(number: int, window: int, busy: int | None = None, compute: int | None = None,
         communication: int | None = None, memory: int | None = None, overlap: int | None = None,
         host_wait: int | None = None, other: int | None = None) -> dict:
    """One step's figures in seconds; idle and exposed communication follow from the others."""
    idle = None if busy is None else window - busy
    exposed = None if communication is None or overlap is None else communication - overlap
    return {"step": number, "window_s": _seconds(window), "busy_s": _seconds(busy), "idle_s": _seconds(idle),
            "compute_s": _seconds(compute), "communication_s": _seconds(communication),
            "memory_s": _seconds(memory), "overlap_s": _seconds(overlap),
            "exposed_communication_s": _seconds(exposed), "idle_host_wait_s": _seconds(host_wait),
            "idle_other_s": _seconds(other)}


# -- the GPU breakdown --------------------------------------------------------------------------------------


def _gpu_events(spans: list[Span]) -> list[Span]:
    """Kernels, memcpys and memsets that took time (a zero-length one says nothing)."""
    return [s for s in spans if s.cat in GPU_CATS and "stream" in s.args and s.end > s.start]


def _gpu_of(event: Span) -> Any:
    """The GPU a device event ran on: Kineto's ``device`` argument, else its pid (Kineto's GPU rows)."""
    return event.args.get("device", event.pid)


def _kind(event: Span) -> str:
    if NCCL_KERNEL.match(event.name):
        return "communication"
    if event.cat in MEMORY_CATS or event.name.startswith(("Memcpy", "Memset")):
        return "memory"
    return "computation"


def _work_by_step(spans: list[Span], steps: dict[int, Span]) -> dict[int, list[GpuWork]]:
    """Each GPU event under the step whose span holds its launch, matched by correlation id (HTA's rule);
    one with no launch, or launched outside every kept step, is left out."""
    launches = {s.args["correlation"]: s for s in spans if s.cat in LAUNCH_CATS and "correlation" in s.args}
    by_start = sorted(steps.items(), key=lambda item: item[1].start)
    starts = [span.start for _, span in by_start]
    work: dict[int, list[GpuWork]] = {number: [] for number in steps}
    for event in _gpu_events(spans):
        launch = launches.get(event.args.get("correlation"))
        if launch is None:
            continue
        index = bisect.bisect_right(starts, launch.start) - 1
        if index >= 0 and launch.start < by_start[index][1].end:
            work[by_start[index][0]].append(GpuWork(event, launch, _kind(event)))
    return work


def _idle_split(busy: list[Interval], idle: int, work: list[GpuWork]) -> tuple[int, int]:
    """The idle time as (host wait, other). A gap is the host's when the GPU event that ends it was launched
    at or after the gap began (the GPU had run everything queued), and so are the time before the first event
    and after the last (nothing queued); a gap whose next event was queued before it began waited on
    something else (a dependency, an event wait)."""
    first_launch: dict[int, int] = {}
    for item in work:
        at = item.event.start
        first_launch[at] = min(first_launch.get(at, item.launch.start), item.launch.start)
    other = sum(gap_end - gap_start for (_, gap_start), (gap_end, _) in zip(busy, busy[1:])
                if first_launch[gap_end] < gap_start)
    return idle - other, other


def _gpu_row(number: int, step: Span, work: list[GpuWork]) -> dict:
    """One step's GPU figures: its window reaches the step's first and last GPU events too."""
    low = min([step.start] + [item.event.start for item in work])
    high = max([step.end] + [item.event.end for item in work])

    def union(*kinds: str) -> list[Interval]:
        return _union((item.event.start, item.event.end) for item in work if item.kind in kinds)

    busy = union("computation", "communication", "memory")
    compute, communication = union("computation"), union("communication")
    idle = (high - low) - _length(busy)
    host_wait, other = _idle_split(busy, idle, work)
    return _row(number, high - low, _length(busy), _length(compute), _length(communication),
                _length(union("memory")), _length(_intersection(compute, communication)), host_wait, other)


def _nccl_ops_by_thread(spans: list[Span]) -> dict[Any, tuple[list[int], list[Span]]]:
    """The host's ``nccl:*`` ops per thread, by start (the longer first), with their starts for bisect."""
    found: dict[Any, list[Span]] = defaultdict(list)
    for span in spans:
        if span.cat in HOST_CATS and span.name.startswith("nccl:"):
            found[span.thread].append(span)
    ordered = {thread: sorted(ops, key=lambda op: (op.start, -op.end)) for thread, ops in found.items()}
    return {thread: ([op.start for op in ops], ops) for thread, ops in ordered.items()}


def _collective_of(launch: Span, nccl_ops: dict[Any, tuple[list[int], list[Span]]]) -> str:
    """The innermost ``nccl:`` op enclosing the launch on its thread: the kernel's name does not say which
    collective (one kernel serves several), the op that issued it does."""
    starts, ops = nccl_ops.get(launch.thread, ([], []))
    for index in range(bisect.bisect_right(starts, launch.start) - 1, -1, -1):
        if ops[index].end >= launch.end:
            return ops[index].name
    return "unknown"


def _gpu_work(counted: list[GpuWork]) -> dict:
    """How many GPU events the kept steps launched, their summed time, and the median computation kernel's
    length, which tells a launch-bound step (kernels about as short as their launch) from a host-bound one
    (a median: a few long NCCL kernels or copies do not hide thousands of short ones)."""
    computation = [i.event.end - i.event.start for i in counted if i.kind == "computation"]
    return {"count": len(counted), "total_s": _seconds(sum(i.event.end - i.event.start for i in counted)),
            "computation_median_s": statistics.median(computation) / 1e9 if computation else None}


def _gpu_breakdown(spans: list[Span], steps: dict[int, Span], top: int) -> tuple[list, list, list, dict]:
    """The steps' rows, the top kernels, the collectives and the GPU work's count and lengths, of the GPU events
    launched in the kept steps."""
    work = _work_by_step(spans, steps)
    gpus = sorted({_gpu_of(item.event) for items in work.values() for item in items}, key=str)
    if len(gpus) > 1:  # one process driving several GPUs (DataParallel): each GPU's busy and idle its own
        rows = [{**_gpu_row(number, steps[number], [i for i in work[number] if _gpu_of(i.event) == gpu]),
                 "gpu": gpu} for number in sorted(steps) for gpu in gpus]
    else:
        rows = [_gpu_row(number, steps[number], work[number]) for number in sorted(steps)]
    counted = [item for number in sorted(steps) for item in work[number]]
    kernels = _kernel_table(((i.event.name, i.kind, i.event.end - i.event.start) for i in counted), top)
    nccl_ops = _nccl_ops_by_thread(spans)
    collectives = _collective_table((_collective_of(i.launch, nccl_ops), i.event.end - i.event.start)
                                    for i in counted if i.kind == "communication")
    return rows, kernels, collectives, _gpu_work(counted)


# -- the host (CPU) breakdown -------------------------------------------------------------------------------


def _top_level(intervals: list[tuple[int, int, str]]) -> list[tuple[str, int]]:
    """The ops no other op encloses, as (name, duration)."""
    tops, reach = [], None
    for start, end, name in sorted(intervals, key=lambda op: (op[0], -op[1])):
        if reach is None or end > reach:
            tops.append((name, end - start))
            reach = end
    return tops


def _host_row(number: int, step: Span, inside: list[tuple[int, int, str]], gloo: list[Span]) -> dict:
    """One step's host figures: the training thread's busy time (its ops ``inside`` the step, clipped) and
    gloo's time on its own threads."""
    busy = _union((start, end) for start, end, _ in inside)
    communication = _union(_clipped(gloo, step.start, step.end))
    return _row(number, step.end - step.start, _length(busy), _length(busy), _length(communication), None,
                _length(_intersection(busy, communication)))


def _host_breakdown(spans: list[Span], steps: dict[int, Span], top: int) -> tuple[list, list, list]:
    """The steps' rows, the training thread's top ops and gloo's collectives (each counted in the step it
    started in, whole), for a run with no GPU event."""
    ops_by_thread: dict[Any, list[Span]] = defaultdict(list)
    gloo_by_pid: dict[Any, list[Span]] = defaultdict(list)
    for span in spans:
        if span.cat in HOST_CATS and not STEP_NAME.match(span.name):
            ops_by_thread[span.thread].append(span)
            if span.name.startswith("gloo:"):
                gloo_by_pid[span.pid].append(span)
    rows, tops, collectives = [], [], []
    for number in sorted(steps):
        step = steps[number]
        own = ops_by_thread[step.thread]
        gloo = [span for span in gloo_by_pid[step.pid] if span.tid != step.tid]
        inside = [(max(s.start, step.start), min(s.end, step.end), s.name) for s in own
                  if min(s.end, step.end) > max(s.start, step.start)]
        rows.append(_host_row(number, step, inside, gloo))
        tops += _top_level(inside)
        collectives += [(s.name, s.end - s.start) for s in gloo if step.start <= s.start < step.end]
    kernels = _kernel_table(((name, "host", duration) for name, duration in tops), top)
    return rows, kernels, _collective_table(collectives)


# -- the breakdown ------------------------------------------------------------------------------------------


def _no_step_note(count: int) -> str:
    if count == 0:
        return "the trace holds no ProfilerStep span: no step to break down"
    return "the trace holds one ProfilerStep span, dropped as the last (the profiler may cut it short): no step"


def breakdown(trace: dict, device: str, *, drop_last: bool = True, top: int = 10) -> dict:
    """Each kept step's figures, the top kernels (host ops on a CPU run) and the collectives, in seconds.

    ``device`` is the kind the run used ("cuda" or "cpu"); GPU events in the trace make it a GPU breakdown
    whatever the device. ``note`` says, in one line, why a figure is missing."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    spans = _spans(trace)
    all_steps = _step_spans(spans)
    steps = {n: all_steps[n] for n in sorted(all_steps)[:-1 if drop_last else None]}
    has_gpu_events = bool(_gpu_events(spans))
    kind = "cuda" if has_gpu_events or device == "cuda" else "cpu"
    result: dict[str, Any] = {"device": kind, "steps": [], "kernels": [], "collectives": [], "note": None}
    if not steps:
        result["note"] = _no_step_note(len(all_steps))
    elif has_gpu_events:
        result["steps"], result["kernels"], result["collectives"], result["gpu_work"] = _gpu_breakdown(spans, steps, top)
    elif kind == "cuda":  # a CUDA run without CUPTI: a window alone, never 100% idle
        result["steps"] = [_row(n, steps[n].end - steps[n].start) for n in sorted(steps)]
        result["note"] = NO_GPU_EVENT_NOTE
    else:
        result["steps"], result["kernels"], result["collectives"] = _host_breakdown(spans, steps, top)
    return result
