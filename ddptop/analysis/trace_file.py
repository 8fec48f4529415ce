"""A torch.profiler (Kineto) Chrome trace as the breakdown reads it: the file, its complete events as spans,
and the names and categories that tell a step, a launch, a kernel and a copy apart.

Times are whole nanoseconds, so that the sums and differences of ``ddptop.analysis.trace_breakdown`` are
exact; a trace gives microseconds with a fraction.
"""

from __future__ import annotations

import gzip
import json
import math
import re
import zlib
from dataclasses import dataclass
from typing import Any

STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
NCCL_KERNEL = re.compile(r"^nccl", re.IGNORECASE)  # ncclKernel_* (older NCCL) and ncclDevKernel_*
HOST_CATS = frozenset({"cpu_op", "user_annotation"})
GPU_CATS = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})  # not gpu_user_annotation: it has a stream too
MEMORY_CATS = frozenset({"gpu_memcpy", "gpu_memset"})
LAUNCH_CATS = frozenset({"cuda_runtime", "cuda_driver"})


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
    args: dict[str, Any]

    @property
    def thread(self) -> tuple[Any, Any]:
        return (self.pid, self.tid)


def read_trace(path: str) -> dict[str, Any]:
    """The trace as a dict (a ``.gz`` path is gzip-compressed JSON); a broken file raises TraceUnreadable."""
    opener: Any = gzip.open if str(path).endswith(".gz") else open
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


def spans(trace: dict[str, Any]) -> list[Span]:
    """The complete events with a time and a duration: metadata, flow and instant events say nothing here."""
    found = []
    for event in trace.get("traceEvents") or ():
        if not isinstance(event, dict) or event.get("ph") != "X":
            continue
        ts: Any = event.get("ts")
        dur: Any = event.get("dur")
        if not _is_number(ts) or not _is_number(dur) or dur < 0:
            continue
        args = event.get("args")
        found.append(Span(str(event.get("name", "")), str(event.get("cat", "")), event.get("pid"),
                          event.get("tid"), round(ts * 1000), round((ts + dur) * 1000),
                          args if isinstance(args, dict) else {}))
    return found


def step_spans(found: list[Span]) -> dict[int, Span]:
    """The ``ProfilerStep#N`` spans by N (user_annotation; cpu_op in older torch)."""
    steps: dict[int, Span] = {}
    for span in found:
        match = STEP_NAME.match(span.name)
        if match and span.cat in HOST_CATS:
            steps.setdefault(int(match.group(1)), span)
    return steps


def gpu_events(found: list[Span]) -> list[Span]:
    """Kernels, memcpys and memsets that took time (a zero-length one says nothing)."""
    return [s for s in found if s.cat in GPU_CATS and "stream" in s.args and s.end > s.start]


def gpu_of(event: Span) -> Any:
    """The GPU a device event ran on: Kineto's ``device`` argument, else its pid (Kineto's GPU rows)."""
    return event.args.get("device", event.pid)


def kind_of(event: Span) -> str:
    """computation, communication (an NCCL kernel) or memory (a copy or a set)."""
    if NCCL_KERNEL.match(event.name):
        return "communication"
    if event.cat in MEMORY_CATS or event.name.startswith(("Memcpy", "Memset")):
        return "memory"
    return "computation"
