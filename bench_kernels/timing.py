"""The step loop: run a phase's steps one at a time, time each alone, and stream the times to the events file.

Apart from the model and the process group so the loop that produces every sample can be read (and tested,
with a fake step) in one place: ``time.perf_counter()`` around exactly one call of ``step``, and everything
else (recording, writing events, flushing, an injected fault, the ranks' agreement to stop) between steps,
outside the clock. Standard library only; the step function brings torch with it.

Three ways to decide how many steps a phase runs:
- ``run_steps``: a fixed count (``--warmup N``, ``--iters N``, a time budget's count);
- ``measure_until_precise`` (``--iters auto``): blocks of steps until the median's 95% interval is narrow
  enough on every rank, or a limit is reached;
- ``warm_up_until_steady`` (``--warmup auto``): windows of steps until the step time stops falling.
The adaptive two call ``agree`` after each block, with figures every rank must share: the worker passes a
MAX all_reduce over the process group, so every rank takes the same decision after the same step (DDP
needs the same number of steps on every rank), or ``alone`` in a single process. ``measure_round`` runs one
round of a configuration with them (its warm-up, then its measured steps) and gives the ``Measured`` its
config_end reports.
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.precision import relative_half_width
from ddptop.protocol.vocab import Phase, Status
from ddptop.protocol.wire import EventWriter

# A time budget with a step far below the clock's resolution must still end: at most this many steps.
MAX_BUDGET_ITERS = 1_000_000
BLOCK = 5  # measured steps between two looks at the precision (and two agreements of the ranks)
WARMUP_WINDOW = {"cuda": 5, "cpu": 3}  # warm-up steps whose median is compared with the window before
WARMUP_SHARE = 3  # the auto warm-up takes at most a third of --max-time-per-config

# Why a configuration's measurement stopped (config_end.stop_reason)
PRECISION, MAX_ITERS, MAX_TIME, FIXED, TIME_BUDGET = "precision", "max_iters", "max_time", "fixed", "time_budget"
LIMITS = (MAX_ITERS, MAX_TIME)  # stopped on a limit: unstable when the precision was not reached
STEADY, MAX_WARMUP = "steady", "max_warmup"

# Every rank's figures combined into the same answer on every rank: the element-wise maximum.
Agree = Callable[[list[float]], list[float]]


def alone(values: list[float]) -> list[float]:
    """The agreement of a single process: its own figures."""
    return list(values)


def max_over_group(torch: Any, device: Any, around: Callable[[], Any] = contextlib.nullcontext) -> Agree:
    """The agreement of the ranks of the default process group: a MAX all_reduce of a few float64 figures on
    ``device``, called between blocks of steps, never inside a timed step; ``around`` the collective (the
    probe keeps its own collective out of the script's count)."""
    dist = torch.distributed

    def agree(values: list[float]) -> list[float]:
        figures = torch.tensor(values, dtype=torch.float64, device=device)
        with around():
            dist.all_reduce(figures, op=dist.ReduceOp.MAX)
        return figures.tolist()

    return agree


class SampleStream:
    """One phase's step times: recorded, and sent as ``samples`` events at most every flush interval."""

    def __init__(
        self, writer: EventWriter, config_id: str, phase: str, total: int, round_index: int | None = None
    ) -> None:
        self.writer, self.config_id, self.phase, self.total = writer, config_id, phase, total
        self.round = round_index  # sent with every event when the configuration has several rounds
        self.pending: list[float] = []  # recorded, not yet emitted
        self.sent = 0
        self.recorded: list[float] = []

    @classmethod
    def for_round(cls, writer: EventWriter, cfg: RunConfig, phase: str, total: int, round_index: int) -> SampleStream:
        """A phase of one round of ``cfg``: its events name the round where the configuration has several."""
        return cls(writer, cfg.config_id, phase, total, round_index if cfg.rounds > 1 else None)

    def add(self, seconds: float) -> None:
        self.pending.append(seconds)
        self.recorded.append(seconds)
        if time.monotonic() - self.writer.last_flush >= self.writer.flush_interval:
            self.send()
            self.writer.flush()

    def send(self) -> None:
        """Emit the pending samples (the writer decides when they reach the file)."""
        if self.pending:
            extra = {} if self.round is None else {"round": self.round}
            self.writer.emit(
                "samples",
                config_id=self.config_id,
                phase=self.phase,
                first_iter=self.sent,
                of=self.total,
                sec=self.pending,
                **extra,
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


def _timed_steps(
    step: Callable[[], None], first: int, count: int, stream: SampleStream, fault: InjectedFault | None
) -> None:
    """Steps ``first`` .. ``first + count - 1`` of a phase, each timed alone, the time streamed after it."""
    clock = time.perf_counter
    for index in range(first, first + count):
        if fault is not None and index == fault.at:
            stream.send()  # a fault may kill the process: what was measured before it is on disk first
            stream.writer.flush()
            fault.fire()
        start = clock()
        step()
        stream.add(clock() - start)  # streaming happens here, after the step's clock stopped


def run_steps(
    step: Callable[[], None], count: int, stream: SampleStream, fault: InjectedFault | None = None
) -> PhaseTiming:
    """Run ``count`` steps, each timed alone, streaming the times; a failure still sends what was measured."""
    clock = time.perf_counter
    with _sending_on_failure(stream):
        phase_start = clock()
        _timed_steps(step, 0, count, stream, fault)
        elapsed = clock() - phase_start
    stream.send()
    stream.writer.flush()
    return PhaseTiming(elapsed, stream.recorded)


@dataclass(frozen=True)
class StopChoice:
    """How a round's measured steps end: after a count (``iters``, for its ``reason``), or when the precision
    rule (``rule``) says, at a look between blocks."""

    iters: int | None
    reason: str
    rule: StopRule | None = None


def stop_choice(cfg: RunConfig, pace: Sequence[float], largest: Callable[[int], int] | None) -> StopChoice | None:
    """After the warm-up (``pace``: its steps' times): as many steps as fill the time budget at that pace (agreed:
    ``largest`` is the most of any rank's counts, so that every rank runs as many, or DDP deadlocks), as many as
    asked (``--iters``), or until the median is precise on every rank (the rule, agreed at each look). None where
    the choice needs the ranks to agree and they cannot (``largest`` None: a script without a group of the
    launch's ranks). The kernel's rounds and a script's steps choose by this one rule."""
    if cfg.time_budget:
        return None if largest is None else StopChoice(largest(budget_iterations(cfg.time_budget, pace)), TIME_BUDGET)
    if cfg.iters is not None:
        return StopChoice(cfg.iters, FIXED)
    if largest is None:
        return None
    return StopChoice(None, PRECISION, StopRule(cfg.precision, cfg.min_iters, cfg.max_iters, cfg.max_time_per_config))


@dataclass(frozen=True)
class StopRule:
    """When ``measure_until_precise`` stops: the first of precision reached (after ``min_iters``),
    ``max_iters`` steps, or ``max_time`` seconds of the phase's wall time."""

    precision: float
    min_iters: int
    max_iters: int
    max_time: float
    block: int = BLOCK


@dataclass(frozen=True)
class AdaptiveTiming(PhaseTiming):
    stop_reason: str  # PRECISION, MAX_ITERS or MAX_TIME (STEADY, MAX_WARMUP or MAX_TIME for a warm-up)
    half_width: float | None  # this rank's relative half-width of its median at the stop (None: too few steps)
    agreed_half_width: float | None  # the widest of every rank's: what the decision was taken on


def _next_block(block: int, done: int, most: int, time_left: float, step_s: float) -> int:
    """Steps in the next block: ``block``, fewer where the limits come sooner, at least one. Every argument is
    the same on every rank (agreed figures), so every rank runs the same block."""
    by_time = math.ceil(time_left / step_s) if step_s > 0 else block
    return max(1, min(block, most - done, by_time))


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


class PrecisionLooks:
    """The looks ``measure_until_precise`` takes after each block of measured steps, apart from the loop that
    runs the steps, so that a loop it does not drive (a user's training script: ``bench_kernels.script_probe``)
    stops by the same rule: run ``count`` steps (streamed to ``stream``), then call ``after_block`` with the
    phase's elapsed seconds: the stop reason, or None and the next block's ``count``."""

    def __init__(self, rule: StopRule, stream: SampleStream, agree: Agree = alone) -> None:
        self.rule, self.stream, self.agree = rule, stream, agree
        self.done, self.count = 0, min(rule.block, rule.max_iters)
        stream.total = max(rule.min_iters, self.count)
        self.precise_before = False
        self.width: float | None = None  # this rank's relative half-width at the last look
        self.widest = math.inf  # the widest of every rank's at the last look

    def after_block(self, elapsed: float) -> str | None:
        """After each block, every rank agrees on the widest relative half-width of its median, the longest
        elapsed time and the slowest median step; all stop together when the widest is within the precision
        (once ``min_iters`` are measured), at ``max_iters``, or once ``max_time`` is spent."""
        rule, stream = self.rule, self.stream
        self.done += self.count
        done = self.done
        self.width = relative_half_width(stream.recorded) if done >= rule.min_iters else None
        median = statistics.median(stream.recorded)
        self.widest, longest, slowest = self.agree([math.inf if self.width is None else self.width, elapsed, median])
        precise = done >= rule.min_iters and self.widest <= rule.precision
        # Stopping at the first look within the target would stop on a lucky dip (the estimate is
        # noisy too): it must hold at two looks in a row, and the final interval then meets the target
        # in most runs (tests/test_kernels.py measures it against the bootstrap's).
        if precise and self.precise_before:
            return PRECISION
        if done >= rule.max_iters:
            return MAX_ITERS
        if longest >= rule.max_time:
            return MAX_TIME
        self.precise_before = precise
        self.count = _next_block(rule.block, done, rule.max_iters, rule.max_time - longest, slowest)
        stream.total = _projected(done, self.count, self.widest, rule, rule.max_time - longest, slowest)
        return None


def measure_until_precise(
    step: Callable[[], None],
    rule: StopRule,
    stream: SampleStream,
    agree: Agree = alone,
    fault: InjectedFault | None = None,
) -> AdaptiveTiming:
    """``--iters auto``: measure in blocks until the median is precise enough on every rank, or a limit is
    reached (``PrecisionLooks``). ``stream.total`` (the samples' ``of``) is kept at the projected step count."""
    clock = time.perf_counter
    with _sending_on_failure(stream):
        phase_start = clock()
        looks = PrecisionLooks(rule, stream, agree)
        reason = None
        while reason is None:
            _timed_steps(step, looks.done, looks.count, stream, fault)
            reason = looks.after_block(clock() - phase_start)
        elapsed = clock() - phase_start
    _close(stream, looks.done)
    return AdaptiveTiming(elapsed, stream.recorded, reason, looks.width, _finite(looks.widest))


@contextlib.contextmanager
def _sending_on_failure(stream: SampleStream) -> Iterator[None]:
    """A phase that fails still sends what it measured: the caller reports the failure and flushes, these
    samples ahead of it."""
    try:
        yield
    except BaseException:
        stream.send()
        raise


def _close(stream: SampleStream, done: int) -> None:
    """A phase measured in full: its count is what was run, and its last samples reach the file now."""
    stream.total = done
    stream.send()
    stream.writer.flush()


def _projected(done: int, count: int, widest: float, rule: StopRule, time_left: float, step_s: float) -> int:
    """The steps this measurement will likely take: the half-width shrinks as 1/sqrt(n), within the limits."""
    most = rule.max_iters
    if step_s > 0:
        most = min(most, done + max(count, math.ceil(time_left / step_s)))
    need = max(rule.min_iters, done + count)
    if math.isfinite(widest):
        need = max(need, math.ceil(done * (widest / rule.precision) ** 2))
    return max(done + count, min(need, most))


def warm_up_until_steady(
    step: Callable[[], None],
    window: int,
    precision: float,
    max_steps: int,
    max_time: float,
    stream: SampleStream,
    agree: Agree = alone,
) -> AdaptiveTiming:
    """``--warmup auto``: windows of ``window`` steps until the step time stops falling: the latest window's
    median is no more than ``precision`` below the previous one's, on every rank, after at least two windows.
    At most ``max_steps`` steps and ``max_time`` seconds. ``samples`` are every warm-up step."""
    clock = time.perf_counter
    with _sending_on_failure(stream):
        phase_start = clock()
        done, previous, reason = 0, None, MAX_WARMUP
        stream.total = max_steps
        while done < max_steps:
            count = min(window, max_steps - done)
            _timed_steps(step, done, count, stream, None)
            done += count
            latest = statistics.median(stream.recorded[-count:])
            falling = previous is None or latest < previous * (1 - precision)
            still_falling, longest = agree([1.0 if falling else 0.0, clock() - phase_start])
            previous = latest
            if not still_falling:
                reason = STEADY
                break
            if longest >= max_time:
                reason = MAX_TIME
                break
        elapsed = clock() - phase_start
    _close(stream, done)
    return AdaptiveTiming(elapsed, stream.recorded, reason, None, None)


def budget_iterations(time_budget: float, warmup_samples: Sequence[float]) -> int:
    """Measured steps that fill ``time_budget`` seconds at the warm-up's median step time (1 s without one)."""
    ordered = sorted(warmup_samples)
    typical = ordered[len(ordered) // 2] if ordered else 1.0
    return min(MAX_BUDGET_ITERS, max(1, math.ceil(time_budget / max(typical, 1e-6))))


@dataclass(frozen=True)
class Measured:
    """What a configuration's config_end reports of one round's warm-up and measured steps."""

    iters: int  # measured steps: as asked, as the time budget allowed, or until precise
    warmup_s: float
    measure_s: float
    warmup_iters: int = 0
    stop_reason: str = FIXED  # precision, max_iters, max_time, fixed or time_budget
    precision_reached: float | None = None  # this rank's relative half-width of its median at the stop
    unstable: bool = False  # stopped on a limit before every rank reached the precision
    samples: tuple[float, ...] = ()
    peak_memory_bytes: int | None = None  # the device's allocator peak over the round, read right after it
    # CPU: what one step holds on this rank, counted by kind (bench_kernels.strategy_wrappers.counted_memory)
    counted_memory: dict[str, int] | None = None


def measure_round(
    step: Callable[[], None],
    cfg: RunConfig,
    round_index: int,
    writer: EventWriter,
    device_type: str,
    agree: Agree,
    largest: Callable[[int], int],
    fault: InjectedFault | None = None,
    warmed_up: Callable[[], None] = lambda: None,
) -> Measured:
    """One round of ``cfg``: the warm-up (fixed, or until steady), then the measured steps: as many as asked,
    as fill the time budget at the warm-up's pace (the ``largest`` count of any rank's, so that every rank
    runs as many steps, or DDP deadlocks), or until the median is precise on every rank. ``warmed_up`` runs
    between the two phases, outside every timed step."""

    def stream(phase: str, count: int) -> SampleStream:
        return SampleStream.for_round(writer, cfg, phase, count, round_index)

    if cfg.warmup is None:
        window = WARMUP_WINDOW.get(device_type, WARMUP_WINDOW["cpu"])
        warmup: PhaseTiming = warm_up_until_steady(step, window, cfg.precision, cfg.max_warmup,
                                                   cfg.max_time_per_config / WARMUP_SHARE,
                                                   stream(Phase.WARMUP, cfg.max_warmup), agree)
        pace = warmup.samples[-window:]  # the steady window, not the first slow steps
    else:
        warmup = run_steps(step, cfg.warmup, stream(Phase.WARMUP, cfg.warmup))
        pace = warmup.samples
    warmed_up()
    choice = stop_choice(cfg, pace, largest)
    assert choice is not None  # the kernel's ranks always agree: they are the launch's process group
    if choice.rule is None:
        iters = choice.iters or 0
        measure = run_steps(step, iters, stream(Phase.MEASURE, iters), fault)
        return Measured(iters, warmup.wall_s, measure.wall_s, len(warmup.samples), choice.reason,
                        relative_half_width(measure.samples), False, tuple(measure.samples))
    adaptive = measure_until_precise(step, choice.rule, stream(Phase.MEASURE, cfg.min_iters), agree, fault)
    return Measured(len(adaptive.samples), warmup.wall_s, adaptive.wall_s, len(warmup.samples),
                    adaptive.stop_reason, adaptive.half_width, adaptive.stop_reason in LIMITS,
                    tuple(adaptive.samples))


def config_end_fields(cfg: RunConfig, measured: Measured, round_index: int, last: bool) -> dict[str, Any]:
    """The fields of the config_end that ends one round of ``cfg`` well (``last``: its last round, which ends
    the configuration), with that round's figures alone: the kernel's round and a script's steps alike."""
    from bench_kernels.rank_process import max_rss_bytes  # the process's peak RSS, as the round ends

    return {
        "config_id": cfg.config_id,
        "status": Status.OK,
        "round": round_index,
        "last": last,
        "rounds": cfg.rounds,
        "iters": measured.iters,
        "warmup_iters": measured.warmup_iters,
        "stop_reason": measured.stop_reason,
        "precision_target": cfg.precision if cfg.adaptive else None,
        "precision_reached": measured.precision_reached,
        "unstable": measured.unstable,
        "warmup_s": measured.warmup_s,
        "measure_s": measured.measure_s,
        "peak_memory_bytes": measured.peak_memory_bytes,
        "max_rss_bytes": max_rss_bytes(),
        **({"counted_memory_bytes": sum(measured.counted_memory.values()), "counted_memory": measured.counted_memory}
           if measured.counted_memory else {}),
    }


def failed_end_fields(config_id: str, oom: bool) -> dict[str, Any]:
    """The fields of the config_end of a configuration that raised: failed, or out of memory."""
    return {"config_id": config_id, "status": Status.OOM if oom else Status.FAILED}
