"""The step loop: run a phase's steps one at a time, time each alone, and stream the times to the events file.

Apart from the model and the process group so the loop that produces every sample can be read (and tested,
with a fake step) in one place: ``time.perf_counter()`` around exactly one call of ``step``, and everything
else (recording, writing events, flushing, an injected fault) between steps, outside the clock. Standard
library only; the step function brings torch with it.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ddptop.protocol.wire import EventWriter

# A time budget with a step far below the clock's resolution must still end: at most this many steps.
MAX_BUDGET_ITERS = 1_000_000


class SampleStream:
    """One phase's step times: recorded, and sent as ``samples`` events at most every flush interval."""

    def __init__(self, writer: EventWriter, config_id: str, phase: str, total: int) -> None:
        self.writer, self.config_id, self.phase, self.total = writer, config_id, phase, total
        self.pending: list[float] = []  # recorded, not yet emitted
        self.sent = 0
        self.recorded: list[float] = []

    def add(self, seconds: float) -> None:
        self.pending.append(seconds)
        self.recorded.append(seconds)
        if time.monotonic() - self.writer.last_flush >= self.writer.flush_interval:
            self.send()
            self.writer.flush()

    def send(self) -> None:
        """Emit the pending samples (the writer decides when they reach the file)."""
        if self.pending:
            self.writer.emit(
                "samples",
                config_id=self.config_id,
                phase=self.phase,
                first_iter=self.sent,
                of=self.total,
                sec=self.pending,
            )
            self.sent += len(self.pending)
            self.pending = []


@dataclass(frozen=True)
class InjectedFault:
    """A fault (``bench_kernels.faults``, a testing aid) to make happen just before step ``at`` of a phase."""

    at: int
    fire: Callable[[], None]


@dataclass(frozen=True)
class PhaseTiming:
    wall_s: float  # the whole phase, streaming included
    samples: list[float]  # one per step, the step alone


def run_steps(
    step: Callable[[], None], count: int, stream: SampleStream, fault: InjectedFault | None = None
) -> PhaseTiming:
    """Run ``count`` steps, each timed alone, streaming the times; a failure still sends what was measured."""
    clock = time.perf_counter
    try:
        phase_start = clock()
        for index in range(count):
            if fault is not None and index == fault.at:
                stream.send()  # a fault may kill the process: what was measured before it is on disk first
                stream.writer.flush()
                fault.fire()
            start = clock()
            step()
            stream.add(clock() - start)  # streaming happens here, after the step's clock stopped
        elapsed = clock() - phase_start
    except BaseException:
        stream.send()  # the caller reports the failure and flushes, these samples ahead of it
        raise
    stream.send()
    stream.writer.flush()
    return PhaseTiming(elapsed, stream.recorded)


def budget_iterations(time_budget: float, warmup_samples: Sequence[float]) -> int:
    """Measured steps that fill ``time_budget`` seconds at the warm-up's median step time (1 s without one)."""
    ordered = sorted(warmup_samples)
    typical = ordered[len(ordered) // 2] if ordered else 1.0
    return min(MAX_BUDGET_ITERS, max(1, math.ceil(time_budget / max(typical, 1e-6))))
