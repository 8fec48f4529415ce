"""Where each profiled step's time went on one rank, from its torch.profiler (Kineto) Chrome trace.

The figures follow Holistic Trace Analysis (HTA), where they differ said in docs/traces.md, and, as its
analyzers do, each question has its own function: which step a GPU event belongs to (``work_by_step``),
each step's busy, compute, communication, memory and overlap (``gpu_step``, ``host_step``), why the GPU sat
idle (``idle_split``), the top kernels (``top_kernels``), the collectives (``collective_totals``) and how
short the kernels are (``gpu_work_totals``). ``breakdown`` answers them all for one rank's trace.

A step is a ``ProfilerStep#N`` span; a GPU event belongs to the step whose span holds its launch (the
CPU-side runtime call with the same CUPTI correlation id); busy is the union of the GPU intervals over every
stream; overlap is the time computation and communication run at once; the last step is dropped, since the
profiler may cut it short. A CPU run has no GPU event: the same figures are then said of the training thread,
as host figures (the ``gloo:*`` ops on gloo's own threads are its communication).

Times are whole nanoseconds inside, so that sums and differences are exact; seconds in the results.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from ddptop.analysis.trace_file import (HOST_CATS, LAUNCH_CATS, STEP_NAME, Span, gpu_events, gpu_of, kind_of,
                                        spans, step_spans)
from ddptop.records import Record

NO_GPU_EVENT_NOTE = "the trace holds no GPU kernel (CUPTI recorded none): no device breakdown"
# a step's figures, each a share of its window in the combined breakdown (the window itself in seconds)
FIGURES = ("window_s", "busy_s", "idle_s", "compute_s", "communication_s", "memory_s", "overlap_s",
           "exposed_communication_s", "idle_host_wait_s", "idle_other_s")

Interval = tuple[int, int]  # [start, end) in nanoseconds


# -- the results ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TracedStep:
    """One kept step's figures in seconds; None where the trace cannot give one (no GPU event on a CUDA run,
    no copies or idle split on the host)."""

    step: int
    window_s: float
    busy_s: float | None = None
    idle_s: float | None = None
    compute_s: float | None = None
    communication_s: float | None = None
    memory_s: float | None = None
    overlap_s: float | None = None
    exposed_communication_s: float | None = None
    idle_host_wait_s: float | None = None
    idle_other_s: float | None = None
    gpu: Any = None  # the GPU of this row where one process drove several (DataParallel); None otherwise

    def figure(self, name: str) -> float | None:
        """The figure called ``name`` (one of ``FIGURES``)."""
        value: float | None = getattr(self, name)
        return value

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"step": self.step, **{name: self.figure(name) for name in FIGURES}}
        if self.gpu is not None:
            found["gpu"] = self.gpu
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TracedStep:
        figures: dict[str, Any] = {name: data.get(name) for name in FIGURES}
        return cls(step=data["step"], gpu=data.get("gpu"), **figures)


@dataclass(kw_only=True)
class KernelTotal(Record):
    """A kernel (or a host op) over the kept steps: how often it ran, its time, and its share of all of it."""

    name: str = ""
    kind: str = ""  # computation, communication, memory; host for a host op
    count: int = 0
    total_s: float = 0.0
    mean_s: float = 0.0
    share: float = 0.0  # of every rank's kernel (host op) time


@dataclass(kw_only=True)
class CollectiveTotal(Record):
    """A collective over the kept steps: how many kernels (or gloo ops) ran it, and their time."""

    name: str = ""
    count: int = 0
    total_s: float = 0.0


@dataclass(kw_only=True)
class GpuWork(Record):
    """How many GPU events the kept steps launched, their summed time, and the median computation kernel's
    length (the ranks' middle median where several are combined)."""

    count: int = 0
    total_s: float = 0.0
    computation_median_s: float | None = None


@dataclass(frozen=True)
class RankBreakdown:
    """One rank's trace broken down: each kept step's figures, the top kernels (host ops on a CPU run), the
    collectives, and on a GPU the GPU work's count and lengths. ``note`` says in one line why a figure is
    missing."""

    device: str  # cuda (the device's own activity) or cpu (the host's)
    steps: tuple[TracedStep, ...] = ()
    kernels: tuple[KernelTotal, ...] = ()
    collectives: tuple[CollectiveTotal, ...] = ()
    note: str | None = None
    gpu_work: GpuWork | None = None  # a trace with GPU events alone

    def to_json(self) -> dict[str, Any]:
        """As a recorded rank's ``trace`` event carries it (a run whose ranks broke their own files down)."""
        found: dict[str, Any] = {"device": self.device, "steps": [s.to_json() for s in self.steps],
                                 "kernels": [k.to_json() for k in self.kernels],
                                 "collectives": [c.to_json() for c in self.collectives], "note": self.note}
        if self.gpu_work is not None:
            found["gpu_work"] = self.gpu_work.to_json()
        return found

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> RankBreakdown:
        """The breakdown a rank sent in its ``trace`` event (a run recorded when the ranks computed it)."""
        work = data.get("gpu_work")
        return cls(str(data.get("device")), tuple(TracedStep.from_json(s) for s in data.get("steps") or ()),
                   tuple(KernelTotal.from_json(k) for k in data.get("kernels") or ()),
                   tuple(CollectiveTotal.from_json(c) for c in data.get("collectives") or ()),
                   data.get("note"), GpuWork.from_json(work) if isinstance(work, Mapping) else None)


# -- intervals ----------------------------------------------------------------------------------------------


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering the same time: when anything of the list ran."""
    merged: list[Interval] = []
    for start, end in sorted(intervals):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def intersection(a: list[Interval], b: list[Interval]) -> list[Interval]:
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


def length(merged: list[Interval]) -> int:
    return sum(end - start for start, end in merged)


def clipped(found: Iterable[Span], low: int, high: int) -> list[Interval]:
    """The spans' parts inside [low, high), empty ones left out."""
    return [(max(s.start, low), min(s.end, high)) for s in found if min(s.end, high) > max(s.start, low)]


def _seconds(ns: int | None) -> float | None:
    return None if ns is None else ns / 1e9


def traced_step(number: int, window: int, busy: int | None = None, compute: int | None = None,
                communication: int | None = None, memory: int | None = None, overlap: int | None = None,
                host_wait: int | None = None, other: int | None = None) -> TracedStep:
    """One step's figures from its nanoseconds; idle and exposed communication follow from the others."""
    idle = None if busy is None else window - busy
    exposed = None if communication is None or overlap is None else communication - overlap
    return TracedStep(number, window / 1e9, _seconds(busy), _seconds(idle), _seconds(compute),
                      _seconds(communication), _seconds(memory), _seconds(overlap), _seconds(exposed),
                      _seconds(host_wait), _seconds(other))


# -- tables -------------------------------------------------------------------------------------------------


def top_kernels(items: Iterable[tuple[str, str, int]], top: int | None) -> list[KernelTotal]:
    """Per name (with its kind): count, total, mean and share of every item's time; largest total first, as
    ``nsys``'s kernel summary."""
    totals: dict[str, int] = defaultdict(int)
    counts: dict[str, int] = defaultdict(int)
    kinds: dict[str, str] = {}
    for name, kind, duration in items:
        totals[name] += duration
        counts[name] += 1
        kinds.setdefault(name, kind)
    grand = sum(totals.values())
    names = sorted(totals, key=lambda name: (-totals[name], name))[:top]
    return [KernelTotal(name=name, kind=kinds[name], count=counts[name], total_s=totals[name] / 1e9,
                        mean_s=totals[name] / counts[name] / 1e9, share=totals[name] / grand if grand else 0.0)
            for name in names]


def collective_totals(items: Iterable[tuple[str, int]]) -> list[CollectiveTotal]:
    """Per collective: count and total time; largest total first."""
    table = top_kernels(((name, "", duration) for name, duration in items), top=None)
    return [CollectiveTotal(name=row.name, count=row.count, total_s=row.total_s) for row in table]


# -- the GPU breakdown --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LaunchedWork:
    """A counted GPU event, with the launch that put it in a step."""

    event: Span
    launch: Span
    kind: str  # computation | communication | memory


def work_by_step(found: list[Span], steps: dict[int, Span]) -> dict[int, list[LaunchedWork]]:
    """Each GPU event under the step whose span holds its launch, matched by correlation id (HTA's rule);
    one with no launch, or launched outside every kept step, is left out."""
    launches = {s.args["correlation"]: s for s in found if s.cat in LAUNCH_CATS and "correlation" in s.args}
    by_start = sorted(steps.items(), key=lambda item: item[1].start)
    starts = [span.start for _, span in by_start]
    work: dict[int, list[LaunchedWork]] = {number: [] for number in steps}
    for event in gpu_events(found):
        launch = launches.get(event.args.get("correlation"))
        if launch is None:
            continue
        index = bisect.bisect_right(starts, launch.start) - 1
        if index >= 0 and launch.start < by_start[index][1].end:
            work[by_start[index][0]].append(LaunchedWork(event, launch, kind_of(event)))
    return work


def idle_split(busy: list[Interval], idle: int, work: list[LaunchedWork]) -> tuple[int, int]:
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


def gpu_step(number: int, step: Span, work: list[LaunchedWork]) -> TracedStep:
    """One step's GPU figures: busy over every stream, each class's union, compute under communication, and
    the idle time split; its window reaches the step's first and last GPU events too."""
    low = min([step.start] + [item.event.start for item in work])
    high = max([step.end] + [item.event.end for item in work])

    def union_of(*kinds: str) -> list[Interval]:
        return union((item.event.start, item.event.end) for item in work if item.kind in kinds)

    busy = union_of("computation", "communication", "memory")
    compute, communication = union_of("computation"), union_of("communication")
    idle = (high - low) - length(busy)
    host_wait, other = idle_split(busy, idle, work)
    return traced_step(number, high - low, length(busy), length(compute), length(communication),
                       length(union_of("memory")), length(intersection(compute, communication)), host_wait, other)


def _nccl_ops_by_thread(found: list[Span]) -> dict[Any, tuple[list[int], list[Span]]]:
    """The host's ``nccl:*`` ops per thread, by start (the longer first), with their starts for bisect."""
    by_thread: dict[Any, list[Span]] = defaultdict(list)
    for span in found:
        if span.cat in HOST_CATS and span.name.startswith("nccl:"):
            by_thread[span.thread].append(span)
    ordered = {thread: sorted(ops, key=lambda op: (op.start, -op.end)) for thread, ops in by_thread.items()}
    return {thread: ([op.start for op in ops], ops) for thread, ops in ordered.items()}


def collective_of(launch: Span, nccl_ops: dict[Any, tuple[list[int], list[Span]]]) -> str:
    """The innermost ``nccl:`` op enclosing the launch on its thread: the kernel's name does not say which
    collective (one kernel serves several), the op that issued it does."""
    starts, ops = nccl_ops.get(launch.thread, ([], []))
    for index in range(bisect.bisect_right(starts, launch.start) - 1, -1, -1):
        if ops[index].end >= launch.end:
            return ops[index].name
    return "unknown"


def gpu_work_totals(counted: list[LaunchedWork]) -> GpuWork:
    """How many GPU events the kept steps launched, their summed time, and the median computation kernel's
    length, which tells a launch-bound step (kernels about as short as their launch) from a host-bound one
    (a median: a few long NCCL kernels or copies do not hide thousands of short ones)."""
    computation = [i.event.end - i.event.start for i in counted if i.kind == "computation"]
    return GpuWork(count=len(counted), total_s=sum(i.event.end - i.event.start for i in counted) / 1e9,
                   computation_median_s=statistics.median(computation) / 1e9 if computation else None)


def _gpu_breakdown(found: list[Span], steps: dict[int, Span], top: int) -> RankBreakdown:
    """The steps' rows, the top kernels, the collectives and the GPU work's count and lengths, of the GPU events
    launched in the kept steps."""
    work = work_by_step(found, steps)
    gpus = sorted({gpu_of(item.event) for items in work.values() for item in items}, key=str)
    if len(gpus) > 1:  # one process driving several GPUs (DataParallel): each GPU's busy and idle its own
        rows = [replace(gpu_step(number, steps[number], [i for i in work[number] if gpu_of(i.event) == gpu]), gpu=gpu)
                for number in sorted(steps) for gpu in gpus]
    else:
        rows = [gpu_step(number, steps[number], work[number]) for number in sorted(steps)]
    counted = [item for number in sorted(steps) for item in work[number]]
    kernels = top_kernels(((i.event.name, i.kind, i.event.end - i.event.start) for i in counted), top)
    nccl_ops = _nccl_ops_by_thread(found)
    collectives = collective_totals((collective_of(i.launch, nccl_ops), i.event.end - i.event.start)
                                    for i in counted if i.kind == "communication")
    return RankBreakdown("cuda", tuple(rows), tuple(kernels), tuple(collectives), None, gpu_work_totals(counted))


# -- the host (CPU) breakdown -------------------------------------------------------------------------------


def top_level(ops: list[tuple[int, int, str]]) -> list[tuple[str, int]]:
    """The ops no other op encloses, as (name, duration)."""
    tops, reach = [], None
    for start, end, name in sorted(ops, key=lambda op: (op[0], -op[1])):
        if reach is None or end > reach:
            tops.append((name, end - start))
            reach = end
    return tops


def host_step(number: int, step: Span, inside: list[tuple[int, int, str]], gloo: list[Span]) -> TracedStep:
    """One step's host figures: the training thread's busy time (its ops ``inside`` the step, clipped) and
    gloo's time on its own threads, and how much of that ran under the training thread's ops."""
    busy = union((start, end) for start, end, _ in inside)
    communication = union(clipped(gloo, step.start, step.end))
    return traced_step(number, step.end - step.start, length(busy), length(busy), length(communication), None,
                       length(intersection(busy, communication)))


def _host_breakdown(found: list[Span], steps: dict[int, Span], top: int) -> RankBreakdown:
    """The steps' rows, the training thread's top ops and gloo's collectives (each counted in the step it
    started in, whole), for a run with no GPU event."""
    ops_by_thread: dict[Any, list[Span]] = defaultdict(list)
    gloo_by_pid: dict[Any, list[Span]] = defaultdict(list)
    for span in found:
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
        rows.append(host_step(number, step, inside, gloo))
        tops += top_level(inside)
        collectives += [(s.name, s.end - s.start) for s in gloo if step.start <= s.start < step.end]
    kernels = top_kernels(((name, "host", duration) for name, duration in tops), top)
    return RankBreakdown("cpu", tuple(rows), tuple(kernels), tuple(collective_totals(collectives)))


# -- the breakdown ------------------------------------------------------------------------------------------


def _no_step_note(count: int) -> str:
    if count == 0:
        return "the trace holds no ProfilerStep span: no step to break down"
    return "the trace holds one ProfilerStep span, dropped as the last (the profiler may cut it short): no step"


def breakdown(trace: dict[str, Any], device: str, *, drop_last: bool = True, top: int = 10) -> RankBreakdown:
    """Each kept step's figures, the top kernels (host ops on a CPU run) and the collectives of one rank's trace.

    ``device`` is the kind the run used ("cuda" or "cpu"); GPU events in the trace make it a GPU breakdown
    whatever the device."""
    if device not in ("cuda", "cpu"):
        raise ValueError(f"device must be 'cuda' or 'cpu', not {device!r}")
    found = spans(trace)
    all_steps = step_spans(found)
    steps = {n: all_steps[n] for n in sorted(all_steps)[:-1 if drop_last else None]}
    has_gpu_events = bool(gpu_events(found))
    kind = "cuda" if has_gpu_events or device == "cuda" else "cpu"
    if not steps:
        return RankBreakdown(kind, note=_no_step_note(len(all_steps)))
    if has_gpu_events:
        return _gpu_breakdown(found, steps, top)
    if kind == "cuda":  # a CUDA run without CUPTI: a window alone, never 100% idle
        return RankBreakdown(kind, tuple(traced_step(n, steps[n].end - steps[n].start) for n in sorted(steps)),
                             note=NO_GPU_EVENT_NOTE)
    return _host_breakdown(found, steps, top)
