"""One configuration's state in a session: what its ranks reported, kept as they report it.

``ddptop.run.session`` applies each event to the ``ConfigState`` of its configuration; this module holds what
that state is and what is read from it: its rounds and launches, its progress, its percentiles (sorted views
caught up at a look, cached per revision) and its frozen copy for the views (``ConfigState.snapshot``).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from types import MappingProxyType
from collections.abc import Sequence
from typing import Any, TypeVar

from ddptop.analysis import script_steps, stats, traces
from ddptop.protocol import precision
from ddptop.protocol.config_fields import config_fields
from ddptop.protocol.vocab import ENDED, Status
from ddptop.run.plan_records import ConfigSpec
from ddptop.run.snapshot import CHART_TAIL, ConfigSnapshot, ScriptFigures, StepStats

PRECISION_PERIOD = 1.0  # seconds between live precision estimates of a configuration whose steps stream in


@dataclass
class ConfigState:
    spec: ConfigSpec
    status: str = Status.PENDING
    reason: str | None = None
    samples: dict[int, list[float]] = field(default_factory=dict)  # rank -> measured step times, in order
    # a script's steps (bench_kernels.script_probe): list name (wire.STEP_LISTS: data_wait, examples, tokens) ->
    # rank -> one value per measured step, parallel to ``samples``; None where the probe did not know it
    step_values: dict[str, dict[int, list[Any]]] = field(default_factory=dict)
    # rank -> [(index in samples of a round's first step, that round)]: one entry per change of round, so the
    # round of every measured step is kept without a per-step list (steps before any entry are round 0)
    round_starts: dict[int, list[tuple[int, int]]] = field(default_factory=dict)
    rounds_ended: dict[int, int] = field(default_factory=dict)  # rank -> rounds it ended before the last one
    round_base: dict[int, int] = field(default_factory=dict)  # rank -> its measured steps before this round
    round_end: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its latest round's config_end
    round_ends: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  # rank -> every round's config_end
    # rank -> [(index in samples of the first step a launch measured, that launch)], as round_starts
    launch_starts: dict[int, list[tuple[int, str]]] = field(default_factory=dict)
    warmup_seen: dict[int, int] = field(default_factory=dict)  # rank -> warm-up steps of its current round
    planned_iters: int | None = None
    warmup: int | None = None
    info: dict[str, Any] = field(default_factory=dict)  # rank 0's config_start fields
    end: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> config_end fields
    errors: list[dict[str, Any]] = field(default_factory=list)
    analysis_error: str | None = None  # the communication analysis failed after the measured steps ended
    nosync: dict[int, list[float]] = field(default_factory=dict)  # rank -> step times inside no_sync()
    comm: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> comm event (DDP logging, hook)
    compiles: list[dict[str, Any]] = field(default_factory=list)  # torch.compile's first step, one per launch
    traces: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> its trace event (the file, its cost)
    tracing: bool = False  # a script's rank said it runs its traced steps (its steps are over, its end to come)
    log_tail: list[str] = field(default_factory=list)  # last lines of the ranks' stderr, when it failed
    started_t: float | None = None
    ended_t: float | None = None
    launch: str | None = None
    launch_started_t: dict[str, float] = field(default_factory=dict)  # launch -> its first config_start's time
    # launch -> when its measured steps began, as its first measured steps tell (their event's time less their
    # seconds): the start of the window the live view judges "so far" (rank 0's measure_s closes it)
    measure_started_t: dict[str, float] = field(default_factory=dict)
    settled: bool = False  # the runner's mark ended it: status and reason are final (a rank's may be an echo)
    revision: int = 0  # bumped on every change, for cached summaries
    _summary_cache: tuple[int, Any] | None = field(default=None, repr=False, compare=False)
    _precision_cache: tuple[int, float | None, float] | None = field(default=None, repr=False, compare=False)
    _snapshot_cache: tuple[tuple, ConfigSnapshot] | None = field(default=None, repr=False, compare=False)
    # sorted views of ``samples`` for percentiles, caught up at a look rather than at every event
    _pooled: stats.SampleSet = field(default_factory=stats.SampleSet, repr=False, compare=False)
    _by_rank: dict[int, stats.SampleSet] = field(default_factory=dict, repr=False, compare=False)
    # a script's step values taken in so far (caught up at a look, as the sorted views)
    _script_steps: script_steps.LiveStepValues = field(default_factory=script_steps.LiveStepValues, repr=False,
                                                       compare=False)

    def add_samples(self, rank: int, seconds: list[float], round_index: int | None = None,
                    launch: str | None = None) -> None:
        """Measured step times of one rank, in the order it ran them (ingest: one list append, and one
        comparison for a round and one for the launch)."""
        known = self.samples.get(rank)
        if launch is not None:
            marks = self.launch_starts.get(rank)
            if not marks or marks[-1][1] != launch:
                self.launch_starts.setdefault(rank, []).append((len(known) if known else 0, launch))
        if round_index is not None:
            starts = self.round_starts.get(rank)
            if (starts[-1][1] if starts else 0) != round_index:
                self.round_starts.setdefault(rank, []).append((len(known) if known else 0, round_index))
        if known is None:
            self.samples[rank] = list(seconds)
        else:
            known += seconds

    def add_step_values(self, rank: int, steps_before: int, count: int, lists: dict[str, list[Any] | None]) -> None:
        """What a script's probe saw of ``count`` measured steps beside their times (``lists``: name -> values,
        None where an event did not carry it), kept parallel to the rank's samples from ``steps_before`` on."""
        for name, values in lists.items():
            per_rank = self.step_values.get(name)
            if values is None and (per_rank is None or rank not in per_rank):
                continue  # never seen on this rank: nothing to keep parallel
            known = self.step_values.setdefault(name, {}).setdefault(rank, [])
            if len(known) < steps_before:
                known.extend([None] * (steps_before - len(known)))
            known.extend(values if values is not None and len(values) == count else [None] * count)

    def next_round(self, rank: int) -> None:
        """A rank's round ended (or a new one started): its warm-up and measured steps count from here."""
        self.warmup_seen[rank] = 0
        self.round_base[rank] = len(self.samples.get(rank, ()))

    def rounds_of_steps(self) -> dict[int, list[int]]:
        """rank -> the round of each of its measured steps, parallel to ``samples``."""
        return {rank: _label_steps(self.round_starts.get(rank, ()), len(values), 0)
                for rank, values in self.samples.items()}

    def launches_of_steps(self) -> dict[int, list[str]]:
        """rank -> the launch that measured each of its steps, parallel to ``samples`` (the launch is the
        unit of replication of the intervals, ``analysis.launches``)."""
        result = {}
        for rank, values in self.samples.items():
            marks = self.launch_starts.get(rank, ())
            result[rank] = _label_steps(marks, len(values), marks[0][1] if marks else self.launch or "")
        return result

    def launch_names(self) -> list[str]:
        """The launches that measured steps of this configuration, in the order they ran."""
        seen: dict[str, None] = {}
        for marks in self.launch_starts.values():
            for _, launch in marks:
                seen.setdefault(launch, None)
        return list(seen) or ([self.launch] if self.launch else [])

    def launch_windows(self) -> list[tuple[str, float, float, int]]:
        """(launch, start, end, measured steps) of each launch's measured steps, from rank 0's round ends
        (another rank's when rank 0 has none)."""
        ends = self.round_ends.get(0) or next(iter(self.round_ends.values()), [])
        windows = []
        for end in ends:
            if end.get("measure_s") is not None and end.get("launch"):
                windows.append((end["launch"], end["t"] - end["measure_s"], end["t"], end.get("iters") or 0))
        return windows

    def ends_in(self, launch: str) -> dict[int, dict[str, Any]]:
        """rank -> the config_end it ended its round in ``launch`` with, well (one launch's, not summed)."""
        return {rank: end for rank, ends in self.round_ends.items() for end in ends if end.get("launch") == launch}

    def span_in(self, launch: str | None) -> tuple[float | None, float | None]:
        """When the configuration started and ended in ``launch``: the earliest config_start of its ranks there
        and the last config_end; its first start and its end where the launch told neither (a launch that
        failed before its end)."""
        start = self.launch_started_t.get(launch) if launch else None
        ends = [end["t"] for ends in self.round_ends.values() for end in ends if end.get("launch") == launch]
        return (start if start is not None else self.started_t), (max(ends) if ends and launch else self.ended_t)

    def ended_round(self, round_index: int) -> bool:
        """Every rank ended its round ``round_index`` well (a launch that measures it again comes later)."""
        for rank in range(self.spec.processes):
            ends = self.round_ends.get(rank, ())
            if not any(e.get("round", 0) == round_index and e["status"] == Status.OK for e in ends):
                return False
        return True

    def rank_ends(self) -> dict[int, dict[str, Any]]:
        """rank -> its config_end over every round it measured: the configuration's, else its rounds' combined
        (``combine_round_ends``), where the sweep ended it before its last planned round (a script's tune that
        called for no try, a sweep stopped between launches), so what those rounds measured is kept."""
        found = {rank: combine_round_ends(ends) for rank, ends in self.round_ends.items() if ends}
        return {**found, **self.end}

    def rank0_end(self) -> dict[str, Any]:
        """Rank 0's end over the rounds it measured (``rank_ends``), else another rank's; {} before any."""
        ends = self.rank_ends()
        return ends.get(0) or next(iter(ends.values()), {})

    def latest_end(self) -> dict[str, Any]:
        """Rank 0's config_end (of the configuration, else of its latest round), or another rank's."""
        for ends in (self.end, self.round_end):
            found = ends.get(0) or next(iter(ends.values()), None)
            if found is not None:
                return found
        return {}

    @property
    def unstable(self) -> bool:
        """The measurement stopped on a limit (--max-iters, --max-time-per-config) short of --precision."""
        return self.latest_end().get("unstable") is True

    @property
    def precision_reached(self) -> float | None:
        """Rank 0's relative half-width of its median's 95% interval at the stop (0.02: +-2%)."""
        return self.latest_end().get("precision_reached")

    def live_precision(self) -> float | None:
        """The median's precision so far: rank 0's at its stop once known, else its batch-medians estimate
        over the steps measured, computed again at most once a second while steps stream in (it sorts
        every step so far; a frame with nothing new computes nothing)."""
        if self.precision_reached is not None:
            return self.precision_reached
        cached = self._precision_cache
        now = time.monotonic()
        if cached is None or (cached[0] != self.revision and now - cached[2] >= PRECISION_PERIOD):
            cached = self._precision_cache = (
                self.revision, precision.relative_half_width(self.samples.get(0, ())), now)
        return cached[1]

    @property
    def warmup_used(self) -> int | None:
        """Warm-up steps run (all rounds, once ended; else rank 0's so far in its round)."""
        used = self.latest_end().get("warmup_iters")
        return used if used is not None else self.warmup_seen.get(0)

    def _catch_up(self) -> None:
        """Bring the sorted views up to ``samples``: each rank's new steps sorted once, then merged into
        that rank's view and into the pooled one."""
        for rank, values in self.samples.items():
            view = self._by_rank.get(rank)
            if view is None:
                view = self._by_rank[rank] = stats.SampleSet()
            if len(view) < len(values):
                new = sorted(values[len(view):])
                view.extend_sorted(new)
                self._pooled.extend_sorted(new)

    def sample_count(self) -> int:
        return sum(len(s) for s in self.samples.values())

    def progress(self) -> float:
        """0..1: warm-up and measured steps of the slowest rank, against the plan."""
        if self.status in ENDED:
            return 1.0 if self.status == Status.OK else self._fraction()
        return self._fraction()

    def _fraction(self) -> float:
        """Each rank's rounds ended, plus its current round's steps against the round's planned steps (an
        auto warm-up counts as planned as far as it went; auto measured steps as the kernel projects them)."""
        spec = self.spec
        iters = self.planned_iters if self.planned_iters is not None else spec.iters
        if iters is None:
            iters = spec.min_iters
        fraction = 1.0
        for rank in range(spec.processes):
            warm = self.warmup_seen.get(rank, 0)
            planned_warmup = self.warmup if self.warmup is not None else spec.warmup
            total = (planned_warmup if planned_warmup is not None else warm) + iters
            measured = len(self.samples.get(rank, ())) - self.round_base.get(rank, 0)
            within = min(1.0, (warm + measured) / total) if total > 0 else 0.0
            fraction = min(fraction, (self.rounds_ended.get(rank, 0) + within) / max(1, spec.rounds))
        return min(1.0, fraction)

    def summary(self, exact: bool = False) -> dict[str, Any] | None:
        """Percentiles (pooled over ranks) and per-rank medians; None until a sample exists.

        A view's look is cached per revision and takes mean and std from running moments; ``exact`` (the
        saved summary) computes them in two passes, the same whatever order the events were read in.
        """
        if exact:
            return self._compute_summary(exact=True)
        if self._summary_cache is not None and self._summary_cache[0] == self.revision:
            return self._summary_cache[1]
        result = self._compute_summary(exact=False)
        self._summary_cache = (self.revision, result)
        return result

    def summary_of(self, launches: set[str]) -> dict[str, Any] | None:
        """The exact summary of the steps that ``launches`` measured (the others were disturbed)."""
        labels = self.launches_of_steps()
        by_rank: dict[int, stats.SampleSet] = {}
        pooled = stats.SampleSet()
        for rank, values in self.samples.items():
            kept = sorted(v for v, name in zip(values, labels[rank]) if name in launches)
            if kept:
                by_rank[rank] = stats.SampleSet()
                by_rank[rank].extend_sorted(kept)
                pooled.extend_sorted(kept)
        return self._summary_from(pooled, by_rank, exact=True)

    def _compute_summary(self, exact: bool) -> dict[str, Any] | None:
        self._catch_up()
        return self._summary_from(self._pooled, self._by_rank, exact)

    def _summary_from(self, pooled: stats.SampleSet, by_rank: dict[int, stats.SampleSet],
                      exact: bool) -> dict[str, Any] | None:
        if not pooled.n:
            return None
        result = stats.sample_summary(pooled, self.spec.batch_size, self.spec.world_size, exact=exact)
        medians = stats.rank_medians(by_rank)
        result["rank_medians"] = {str(rank): value for rank, value in medians.items()}
        result["straggler"] = stats.straggler(medians)
        return result

    def snapshot(self, analysing: str = "") -> ConfigSnapshot:
        """The configuration's frozen copy; the same object again while nothing it holds has changed."""
        precision_now = self.live_precision()
        key = (self.revision, self.status, self.reason, precision_now, self.settled, analysing)
        if self._snapshot_cache is not None and self._snapshot_cache[0] == key:
            return self._snapshot_cache[1]
        spec = self.spec
        summary = self.summary()  # cached per revision too
        step_stats = StepStats.from_summary(summary) if summary else None
        script = self.script_figures(step_stats.p50 if step_stats is not None else None)
        if script is not None and step_stats is not None:  # its batch is the one it drew, not the plan's 0
            step_stats = dataclasses.replace(step_stats, ex_sec_total_p50=script.ex_per_s)
        snapshot = ConfigSnapshot(
            **config_fields(spec),
            label=spec.label,
            backend=spec.backend,
            status=self.status,
            reason=self.reason,
            progress=self.progress(),
            sample_count=self.sample_count(),
            revision=self.revision,
            stats=step_stats,
            tails=MappingProxyType({rank: tuple(values[-CHART_TAIL:])
                                    for rank, values in sorted(self.samples.items())}),
            unstable=self.unstable,
            precision_reached=precision_now,
            warmup_used=self.warmup_used,
            settled=self.settled,
            started_t=self.started_t,
            ended_t=self.ended_t,
            analysis_phase=analysing,
            launches_measured=min(self.rounds_ended.get(rank, 0) for rank in range(spec.processes)),
            launches_planned=max(1, spec.rounds),
            variant=spec.variant,
            trace=traces.config_trace(self.traces, summary["sec_iter"]["p50"] if summary else None),
            script=script,
        )
        self._snapshot_cache = (key, snapshot)
        return snapshot

    def observed_batch(self) -> script_steps.ObservedBatch | None:
        """A user's script's batch as it drew it so far (``script_steps.observed_batch``, caught up on the steps
        new since the last look); None for a kernel, or before a counted step."""
        if self.spec.kind.own_batch:
            return None
        self._script_steps.catch_up(self.samples, self.step_values)
        return self._script_steps.observed_batch()

    def script_figures(self, p50: float | None) -> ScriptFigures | None:
        """A user's script's figures so far (None for ddptop's own kernels): the steps new since the last
        look taken in, the rest kept."""
        if not self.spec.kind.data_wait:
            return None
        tally = self._script_steps
        tally.catch_up(self.samples, self.step_values)
        batch = tally.observed_batch()
        tokens = tally.tokens_per_step()
        shares = tally.data_wait_shares()
        end = self.latest_end()
        return ScriptFigures(
            command=tuple(self.info.get("command") or ()),
            examples_per_step=batch.global_batch if batch else None,
            examples_per_rank=batch.per_rank if batch else None,
            examples_vary=batch.varies if batch else False,
            tokens_per_step=tokens,
            ex_per_s=batch.global_batch / p50 if batch and p50 else None,
            tok_per_s=tokens / p50 if tokens is not None and p50 else None,
            data_wait=tally.data_wait_share(),
            rank_data_wait=MappingProxyType(shares),
            starved_rank=script_steps.starved_rank(shares),
            ended_by=end.get("ended_by"),
            note=end.get("note"),
            group_backend=script_steps.group_backend(end.get("script")),
        )


Label = TypeVar("Label")


def _label_steps(marks: Sequence[tuple[int, Label]], steps: int, before: Label) -> list[Label]:
    """Each of ``steps`` steps with the label in force: ``marks`` are (index of the first step, label) in
    order, and ``before`` holds before the first of them."""
    labels: list[Label] = []
    current = before
    for first, label in marks:
        labels += [current] * (first - len(labels))
        current = label
    labels += [current] * (steps - len(labels))
    return labels


def combine_round_ends(ends: list[dict[str, Any]]) -> dict[str, Any]:
    """One rank's config_end over every round it measured (each in its own launch): steps and seconds
    summed, unstable if any round was, a limit as the stop reason when any round stopped on one, the widest
    round's precision, the highest memory peaks; the last round's event otherwise."""
    last = ends[-1]
    if len(ends) == 1:
        return last
    combined = dict(last)
    for key in ("iters", "warmup_iters", "warmup_s", "measure_s"):
        values = [e.get(key) for e in ends]
        combined[key] = sum(values) if all(v is not None for v in values) else last.get(key)
    limits = [e.get("stop_reason") for e in ends if e.get("stop_reason") in ("max_iters", "max_time")]
    combined["stop_reason"] = limits[0] if limits else last.get("stop_reason")
    combined["unstable"] = any(e.get("unstable") is True for e in ends)
    reached = [e.get("precision_reached") for e in ends if e.get("precision_reached") is not None]
    combined["precision_reached"] = max(reached) if reached else None
    for key in ("peak_memory_bytes", "max_rss_bytes", "counted_memory_bytes"):
        peaks = [e.get(key) for e in ends if e.get(key) is not None]
        combined[key] = max(peaks) if peaks else None
    return combined
