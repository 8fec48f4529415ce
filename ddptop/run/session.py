"""The live state of a sweep, rebuilt from what is on disk in the run directory.

The session tails every rank's events file and ddptop's own ``runner.jsonl``; it never talks to a rank
directly. So the same code follows a sweep this process runs, one another process is writing
(``ddptop watch``), and one that ended or died long ago (``ddptop report``). Frontends call ``refresh()``
and read ``snapshot()``, a frozen copy taken under the lock (``ddptop.run.snapshot``), never the live state; the
sweep runner calls ``mark()`` for what only it knows (a launch died, a configuration was skipped or stopped),
and that too is written to disk first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

import psutil

from ddptop.run import rundir
from ddptop.analysis import stats, traces
from ddptop.run.plan import ConfigSpec, Plan
from ddptop.run.snapshot import ANALYSIS_COMMUNICATION, ANALYSIS_TRACE, CHART_TAIL, ConfigSnapshot, LaunchSnapshot, SessionSnapshot, StepStats
from ddptop.telemetry.host import RankProcess
from ddptop.protocol import layout, storage
from ddptop.protocol import precision
from ddptop.protocol.marks import ConfigEnd, LaunchEnd, LaunchStart, SweepEnd, parse_mark
from ddptop.protocol.vocab import ENDED, FAILED, Phase, Status
from ddptop.protocol.wire import EventFileReader, EventsUnwritable, EventWriter, make_event

RUNNER_RANK = -1  # runner.jsonl events carry this rank


PRECISION_PERIOD = 1.0  # seconds between live precision estimates of a configuration whose steps stream in


@dataclass
class ConfigState:
    spec: ConfigSpec
    status: str = Status.PENDING
    reason: str | None = None
    samples: dict[int, list[float]] = field(default_factory=dict)  # rank -> measured step times, in order
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
    traces: dict[int, dict[str, Any]] = field(default_factory=dict)  # rank -> trace event (file, breakdown)
    log_tail: list[str] = field(default_factory=list)  # last lines of the ranks' stderr, when it failed
    started_t: float | None = None
    ended_t: float | None = None
    launch: str | None = None
    launch_started_t: dict[str, float] = field(default_factory=dict)  # launch -> its first config_start's time
    settled: bool = False  # the runner's mark ended it: status and reason are final (a rank's may be an echo)
    revision: int = 0  # bumped on every change, for cached summaries
    _summary_cache: tuple[int, Any] | None = field(default=None, repr=False, compare=False)
    _precision_cache: tuple[int, float | None, float] | None = field(default=None, repr=False, compare=False)
    _snapshot_cache: tuple[tuple, ConfigSnapshot] | None = field(default=None, repr=False, compare=False)
    # sorted views of ``samples`` for percentiles, caught up at a look rather than at every event
    _pooled: stats.SampleSet = field(default_factory=stats.SampleSet, repr=False, compare=False)
    _by_rank: dict[int, stats.SampleSet] = field(default_factory=dict, repr=False, compare=False)

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

    def rounds_of_steps(self) -> dict[int, list[int]]:
        """rank -> the round of each of its measured steps, parallel to ``samples``."""
        result = {}
        for rank, values in self.samples.items():
            rounds: list[int] = []
            current = 0
            for first, round_index in self.round_starts.get(rank, ()):
                rounds += [current] * (first - len(rounds))
                current = round_index
            rounds += [current] * (len(values) - len(rounds))
            result[rank] = rounds
        return result

    def launches_of_steps(self) -> dict[int, list[str]]:
        """rank -> the launch that measured each of its steps, parallel to ``samples`` (the launch is the
        unit of replication of the intervals, ``analysis.launches``)."""
        result = {}
        for rank, values in self.samples.items():
            names: list[str] = []
            current = self.launch or ""
            marks = self.launch_starts.get(rank, ())
            if marks:
                current = marks[0][1]
            for first, launch in marks:
                names += [current] * (first - len(names))
                current = launch
            names += [current] * (len(values) - len(names))
            result[rank] = names
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

    def _latest_end(self) -> dict[str, Any]:
        """Rank 0's config_end (of the configuration, else of its latest round), or another rank's."""
        for ends in (self.end, self.round_end):
            found = ends.get(0) or next(iter(ends.values()), None)
            if found is not None:
                return found
        return {}

    @property
    def unstable(self) -> bool:
        """The measurement stopped on a limit (--max-iters, --max-time-per-config) short of --precision."""
        return self._latest_end().get("unstable") is True

    @property
    def precision_reached(self) -> float | None:
        """Rank 0's relative half-width of its median's 95% interval at the stop (0.02: +-2%)."""
        return self._latest_end().get("precision_reached")

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
        used = self._latest_end().get("warmup_iters")
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


@dataclass
class LaunchRecord:
    name: str
    world_size: int
    backend: str
    configs: list[str]
    started_t: float
    ended_t: float | None = None
    exit_code: int | None = None
    status: str = Status.RUNNING
    reason: str | None = None


class Session:
    def __init__(self, plan: Plan, run_dir: str) -> None:
        self.plan = plan
        self.run_dir = run_dir
        self.configs: dict[str, ConfigState] = {c.config_id: ConfigState(c) for c in plan.configs()}
        self.order = list(self.configs)
        self.launches: dict[str, LaunchRecord] = {}
        self.hellos: dict[tuple[str, int], dict[str, Any]] = {}  # (launch, rank) -> hello event
        self.collectives: list[dict[str, Any]] = []  # collective benchmark events, with their launch
        self.ceilings: list[dict[str, Any]] = []  # measured matmul ceilings (device, dtype, FLOP/s)
        self.readers: dict[str, EventFileReader] = {}
        self._drained: set[str] = set()  # events files of ended launches, read after they ended; the final read reads them to the end
        self.runner_reader = EventFileReader(os.path.join(run_dir, layout.RUNNER_FILE))
        self.lock = threading.RLock()
        self.started_t = time.time()
        self.ended_t: float | None = None
        self.last_event_t: float | None = None  # the newest event of any file: a stalled run's "elapsed"
        self.writer: dict[str, Any] | None = None  # the hello of the ddptop process that runs the sweep
        self.events_applied = 0
        self.last_started: str | None = None  # the configuration of the newest config_start
        self._runner_writer: EventWriter | None = None
        self.not_saved: dict[str, str] = {}  # run-directory file -> why it could not be written (in memory only)

    # -- construction ----------------------------------------------------------------------------------
    @classmethod
    def create(cls, plan: Plan, run_dir: str) -> "Session":
        storage.write_json(os.path.join(run_dir, layout.PLAN_FILE), plan.to_json())
        session = cls(plan, run_dir)
        session._runner_writer = EventWriter(os.path.join(run_dir, layout.RUNNER_FILE), RUNNER_RANK, 0.0)
        hello = make_event("hello", RUNNER_RANK, world_size=0, host=os.uname().nodename, pid=os.getpid(), device="-")
        session._runner_writer.emit_event(hello)
        session._runner_writer.flush(durable=True)
        session._apply_own(hello)
        return session

    @classmethod
    def load(cls, run_dir: str) -> "Session":
        """Rebuild the state of a run directory from its files (for report, watch and view)."""
        path = os.path.join(run_dir, layout.PLAN_FILE)
        try:
            with open(path, encoding="utf-8") as handle:
                plan = Plan.from_json(json.load(handle))
        except FileNotFoundError:
            raise rundir.RunDirError(f"{run_dir} is not a ddptop run directory (no {layout.PLAN_FILE})") from None
        except (ValueError, KeyError, TypeError) as exc:
            raise rundir.RunDirError(f"{path} is damaged: {exc}") from None
        session = cls(plan, run_dir)
        session.refresh(final=False)
        return session

    @property
    def writes_runner_file(self) -> bool:
        """This process runs the sweep: runner.jsonl is its own, applied as written, never read back."""
        return self._runner_writer is not None

    # -- feeding -----------------------------------------------------------------------------------------
    def refresh(self, final: bool = False) -> int:
        """Apply every event appended since the last call; ``final`` also reads unterminated last lines."""
        applied = 0
        with self.lock:
            for path in rundir.event_files(self.run_dir):
                if path not in self.readers:
                    self.readers[path] = EventFileReader(path)
            # the runner file of a live session is this process's own: applied as written (``mark``)
            sources = ([] if self.writes_runner_file else [(self.runner_reader, None)]) + [
                (reader, layout.launch_of_events_file(path))
                for path, reader in self.readers.items()
            ]
            for reader, launch in sources:
                ended = launch is not None and launch in self.launches and self.launches[launch].ended_t is not None
                if ended and not final and reader.path in self._drained:
                    continue
                if final:  # every writer is gone: an unterminated last line is all there will be of it
                    events = reader.read_rest()
                else:
                    events = reader.read_new()
                if ended:  # its writers are gone: read once more, and its file let go until the final read
                    reader.close()
                    self._drained.add(reader.path)
                for event in events:
                    self._apply(event, launch)
                applied += len(events)
            self.events_applied += applied
        return applied

    def _apply(self, event: dict[str, Any], launch: str | None) -> None:
        kind = event["type"]
        if self.last_event_t is None or event["t"] > self.last_event_t:
            self.last_event_t = event["t"]
        if launch is None:  # ddptop's own runner events
            self._apply_runner(event)
            return
        if kind == "heartbeat":  # a rank alive between samples: nothing to keep
            return
        if kind == "hello":
            self.hellos[(launch, event["rank"])] = event
            return
        if kind == "collective":
            self.collectives.append(dict(event, launch=launch))
            return
        if kind == "ceiling":
            self.ceilings.append(dict(event, launch=launch))
            return
        state = self.configs.get(event.get("config_id") or "")
        if state is None:
            return  # an error outside any configuration; kept in the launch's logs
        state.revision += 1
        if kind == "config_start":
            self.last_started = state.spec.config_id
            state.launch = launch  # the latest launch that measures it (its analysis runs in the last)
            earliest = state.launch_started_t.get(launch)  # over its ranks, whichever file was read first
            state.launch_started_t[launch] = event["t"] if earliest is None else min(earliest, event["t"])
            if state.status == Status.PENDING:
                state.status = Status.RUNNING
                state.started_t = event["t"]
            if event["rank"] == 0 or not state.info:
                # a later round's start keeps what only the first round measured (its FLOPs)
                fresh = {k: v for k, v in event.items() if k not in ("v", "type", "rank")}
                state.info = {**state.info, **{k: v for k, v in fresh.items() if v is not None or k not in state.info}}
            state.warmup = event.get("warmup", state.warmup)
            if event.get("iters") is not None and not event.get("time_budget"):
                state.planned_iters = event["iters"]
            if event.get("round"):  # a later round of the configuration: its progress starts again
                _next_round(state, event["rank"])
        elif kind == "samples":
            if state.status == Status.PENDING:
                state.status = Status.RUNNING
            if event["phase"] == Phase.MEASURE:
                state.add_samples(event["rank"], event["sec"], event.get("round"), launch)
                if event.get("of") is not None:
                    state.planned_iters = event["of"]
            elif event["phase"] == Phase.NOSYNC:
                state.nosync.setdefault(event["rank"], []).extend(event["sec"])
            else:
                state.warmup_seen[event["rank"]] = state.warmup_seen.get(event["rank"], 0) + len(event["sec"])
        elif kind == "compiled":
            if event["rank"] == 0:  # each launch compiles anew: one per launch
                state.compiles.append({k: v for k, v in event.items() if k not in ("v", "type", "rank", "t")}
                                      | {"launch": launch})
        elif kind == "comm":
            state.comm[event["rank"]] = event
        elif kind == "trace":
            state.traces[event["rank"]] = event
        elif kind == "config_end":
            ends = state.round_ends.setdefault(event["rank"], [])
            if event["status"] == Status.OK:
                event = dict(event, launch=launch)  # whose window it closes: validity is judged per launch
            if event.get("last") is False and event["status"] == Status.OK:  # one round of several ended
                state.round_end[event["rank"]] = event
                ends.append(event)
                if event.get("round", 0) < state.spec.rounds - 1:
                    state.rounds_ended[event["rank"]] = state.rounds_ended.get(event["rank"], 0) + 1
                    _next_round(state, event["rank"])
                return
            if event["status"] == Status.OK:
                # a run recorded before rounds moved into launches followed its last round's end with one
                # that summed them all: that one is not added up again
                summed = any(e.get("round", 0) == event.get("round", 0) for e in ends)
                if not summed:
                    ends.append(event)
                    event = combine_round_ends(ends)
            state.end[event["rank"]] = event
            status = event["status"]
            if status != Status.OK:
                self._end(state, _fault_status(state, status), state.reason or _error_reason(state), event["t"])
            elif len(state.end) >= state.spec.processes and all(
                e["status"] == Status.OK for e in state.end.values()
            ):
                self._end(state, Status.OK, None, event["t"])
        elif kind == "error":
            if event.get("phase") == Phase.ANALYSIS:  # after the configuration ended: its steps stand
                if state.analysis_error is None:
                    state.analysis_error = _error_words(event)
                return
            state.errors.append(event)
            if not state.settled:  # the earliest error so far, whichever rank's file was read first
                state.reason = _error_reason(state)
                if state.status in FAILED:  # and its kind: a peer's echo of an out of memory is no crash
                    state.status = _fault_status(state, state.status)

    def _apply_runner(self, event: dict[str, Any]) -> None:
        if event["type"] == "hello" and self.writer is None:
            self.writer = event
            self.started_t = event["t"]
        mark = parse_mark(event)
        if isinstance(mark, LaunchStart):
            if not self.writes_runner_file and any(c not in self.configs for c in mark.configs):
                self._reread_plan()
            self.launches[mark.launch] = LaunchRecord(
                name=mark.launch,
                world_size=mark.world_size,
                backend=mark.backend,
                configs=list(mark.configs),
                started_t=event["t"],
            )
        elif isinstance(mark, LaunchEnd):
            record = self.launches.get(mark.launch)
            if record:
                record.ended_t = event["t"]
                record.exit_code = mark.exit_code
                record.status = mark.status
                record.reason = mark.reason
        elif isinstance(mark, ConfigEnd):
            state = self.configs.get(mark.config_id)
            if state is not None:
                state.settled = True
                if mark.log_tail and not state.log_tail:
                    state.log_tail = list(mark.log_tail)
                cause = mark.cause
                if cause and state.status in ENDED:  # a rank's report ended it first: put the cause in front
                    state.reason = _caused(cause, state.reason)
                    state.revision += 1
                reason = _caused(cause, mark.reason) if cause else mark.reason
                self._end(state, mark.status, reason, event["t"])
        elif isinstance(mark, SweepEnd):
            self.ended_t = event["t"]

    def _end(self, state: ConfigState, status: str, reason: str | None, when: float) -> None:
        if state.status in ENDED:
            return
        state.status = status
        state.reason = reason
        state.ended_t = when
        state.revision += 1

    # -- what only the runner knows, written to runner.jsonl before it is applied ------------------------
    def mark(self, **data: Any) -> None:
        """Record one of the runner's marks (a launch started, a configuration ended) in runner.jsonl and
        apply it. Where that file cannot be written any more (``not_saved`` says why) the run goes on, its
        summary is complete, and only a rebuild from the files would lack the mark."""
        if self._runner_writer is None:
            raise RuntimeError("a loaded session is read-only")
        event = make_event("mark", RUNNER_RANK, data=data)
        with self.lock:
            if self._runner_writer.failed is None:
                self._runner_writer.emit_event(event)
                try:
                    self._runner_writer.flush(durable=True)
                except EventsUnwritable as exc:
                    self.not_saved[layout.RUNNER_FILE] = str(exc)
            self._apply_own(event)
        self.refresh()

    def _apply_own(self, event: dict[str, Any]) -> None:
        """Apply an event of runner.jsonl this process wrote, from memory: it is never read back, as the file
        may be gone (its directory removed) or cut short (a full disk)."""
        self._apply(event, None)
        self.events_applied += 1

    def close(self) -> None:
        if self._runner_writer is not None:
            with contextlib.suppress(EventsUnwritable):  # said in not_saved already
                self._runner_writer.close()

    # -- reading ----------------------------------------------------------------------------------------
    def snapshot(self) -> SessionSnapshot:
        """What views show, copied under the lock: they never iterate the live state."""
        with self.lock:
            return SessionSnapshot(
                run_dir=self.run_dir,
                plan_name=self.plan.name,
                configs=tuple(_config_snapshot(state, self._analysing(state)) for state in self.ordered_states()),
                launches=tuple(LaunchSnapshot(r.name, r.ended_t is not None) for r in self.launches.values()),
                ranks=tuple(self.rank_processes(local_only=False)),
                started_t=self.started_t,
                ended_t=self.ended_t,
                last_event_t=self.last_event_t,
                writer=MappingProxyType(dict(self.writer)) if self.writer is not None else None,
                events_applied=self.events_applied,
                measuring=self.measuring(),
            )

    def measuring(self) -> str | None:
        """The configuration whose steps run now: the last one started, while it runs (with --rounds, one
        configuration stays running between its rounds while the others take theirs); else the first
        running one."""
        with self.lock:
            last = self.configs.get(self.last_started or "")
            if last is not None and last.status == Status.RUNNING:
                return last.spec.config_id
            return next((c for c in self.order if self.configs[c].status == Status.RUNNING), None)

    def _analysing(self, state: ConfigState) -> str:
        """What runs after its steps ended well, a rank having yet to report it: its profiler trace, then its
        communication analysis; "" when nothing does, or its launch ended (taking any analysis left with it)."""
        if state.status != Status.OK or state.analysis_error is not None:
            return ""
        processes = state.spec.processes
        if state.spec.trace_steps > 0 and len(state.traces) < processes:
            phase = ANALYSIS_TRACE
        elif state.spec.comm_iters > 0 and len(state.comm) < processes:
            phase = ANALYSIS_COMMUNICATION
        else:
            return ""
        launch = self.launches.get(state.launch or "")
        return phase if launch is not None and launch.ended_t is None else ""

    def add_configs(self, plan: Plan, specs: Sequence[ConfigSpec]) -> None:
        """Configurations the sweep decided to run as it went (``ddptop tune``'s combination): the plan that
        holds them replaces the old one, in memory and in plan.json, so a rebuild from the files finds them."""
        storage.write_json(os.path.join(self.run_dir, layout.PLAN_FILE), plan.to_json())
        with self.lock:
            self._adopt(plan, specs)

    def _adopt(self, plan: Plan, specs: Sequence[ConfigSpec]) -> None:
        self.plan = plan
        for spec in specs:
            if spec.config_id not in self.configs:
                self.configs[spec.config_id] = ConfigState(spec)
                self.order.append(spec.config_id)

    def _reread_plan(self) -> None:
        """A watcher meets a launch of configurations its plan lacks: the sweep added them as it went
        (``add_configs``, before their launch started), so plan.json holds them now. Unreadable: they stay
        unknown, as before, until the summary names them."""
        try:
            with open(os.path.join(self.run_dir, layout.PLAN_FILE), encoding="utf-8") as handle:
                plan = Plan.from_json(json.load(handle))
        except (OSError, ValueError, KeyError, TypeError):
            return
        self._adopt(plan, plan.configs())

    def ordered_states(self) -> list[ConfigState]:
        return [self.configs[c] for c in self.order]

    def malformed_lines(self) -> int:
        readers = [self.runner_reader, *self.readers.values()]
        return sum(r.malformed for r in readers)

    def rank_processes(self, local_only: bool = True) -> list[RankProcess]:
        """The ranks of launches still running (on this host only, for the telemetry sampler)."""
        host = os.uname().nodename
        with self.lock:
            running = {name for name, record in self.launches.items() if record.ended_t is None}
            return [
                RankProcess(
                    pid=int(hello["pid"]),
                    rank=rank,
                    launch=launch,
                    local_rank=hello.get("local_rank"),
                    device=hello.get("device"),
                    cuda_visible_devices=hello.get("cuda_visible_devices"),
                    host=str(hello.get("host") or ""),
                )
                for (launch, rank), hello in sorted(self.hellos.items())
                if launch in running
                and (hello.get("host") == host or not local_only)
                and isinstance(hello.get("pid"), int)
            ]

    def rank_pids(self) -> frozenset[int]:
        """The PID of every rank the run has heard from (any launch, any host): none of them is a stranger on a GPU."""
        with self.lock:
            return frozenset(h["pid"] for h in self.hellos.values() if isinstance(h.get("pid"), int))

    def writer_alive(self) -> bool | None:
        """Whether the ddptop that runs this sweep still runs: None when it ran on another host or said no
        hello (nothing can be known from here)."""
        hello = self.writer
        if not hello or hello.get("host") != os.uname().nodename or not isinstance(hello.get("pid"), int):
            return None
        if hello["pid"] == os.getpid():
            return True
        return process_is_alive(hello["pid"], hello.get("t"))

    def versions(self) -> dict[str, Any]:
        """Versions reported by the first rank that said hello (torch lives in the ranks, not here)."""
        for (_launch, rank), hello in sorted(self.hellos.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            if rank == 0:
                return dict(hello.get("versions") or {})
        return {}


def process_is_alive(pid: int, started: float | None) -> bool:
    """The pid is alive and is the same process (not a later one that reused the number)."""
    try:
        process = psutil.Process(pid)
        if started is not None and process.create_time() > started + 1.0:
            return False
        return process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _config_snapshot(state: ConfigState, analysing: str = "") -> ConfigSnapshot:
    """The configuration's frozen copy; the same object again while nothing it holds has changed."""
    precision_now = state.live_precision()
    key = (state.revision, state.status, state.reason, precision_now, state.settled, analysing)
    if state._snapshot_cache is not None and state._snapshot_cache[0] == key:
        return state._snapshot_cache[1]
    spec = state.spec
    summary = state.summary()  # cached per revision too
    snapshot = ConfigSnapshot(
        config_id=spec.config_id,
        label=spec.label,
        model=spec.model,
        batch_size=spec.batch_size,
        backend=spec.backend,
        status=state.status,
        reason=state.reason,
        progress=state.progress(),
        sample_count=state.sample_count(),
        revision=state.revision,
        stats=StepStats.from_summary(summary) if summary else None,
        tails=MappingProxyType({rank: tuple(values[-CHART_TAIL:]) for rank, values in sorted(state.samples.items())}),
        unstable=state.unstable,
        precision_reached=precision_now,
        warmup_used=state.warmup_used,
        settled=state.settled,
        started_t=state.started_t,
        ended_t=state.ended_t,
        analysis_phase=analysing,
        launches_measured=min(state.rounds_ended.get(rank, 0) for rank in range(spec.processes)),
        launches_planned=max(1, spec.rounds),
        variant=spec.variant,
        trace=traces.config_trace(state.traces, summary["sec_iter"]["p50"] if summary else None),
    )
    state._snapshot_cache = (key, snapshot)
    return snapshot


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


def _next_round(state: ConfigState, rank: int) -> None:
    """A rank's round ended (or a new one started): its warm-up and measured steps count from here."""
    state.warmup_seen[rank] = 0
    state.round_base[rank] = len(state.samples.get(rank, ()))


def _caused(cause: str, reason: str | None) -> str:
    """A rank that died silently comes first; what the other ranks said follows as its echo."""
    return f"{cause}; then {reason}" if reason else cause


def _first_error(state: ConfigState) -> dict[str, Any] | None:
    """The first error in time: the cause. A failing rank reports before it exits, and its peers' errors (a
    connection closed by the peer) come only after; which rank's file is read first is no guide."""
    return min(state.errors, key=lambda e: e["t"]) if state.errors else None


def _error_reason(state: ConfigState) -> str | None:
    first = _first_error(state)
    return _error_words(first) if first else None


def _fault_status(state: ConfigState, reported: str) -> str:
    """A failed configuration's status is its first error's kind: out of memory on rank 1 is what ended it,
    even where rank 0's 'connection closed' (failed) was read first."""
    first = _first_error(state)
    if first is None:
        return reported
    return Status.OOM if first.get("oom") else Status.FAILED


REASON_CHARS = 500  # a reason's length at most; the rank's whole message is in the configuration's log tail
# sentences of advice in an out-of-memory message (torch's "If reserved but unallocated memory is large try ...",
# "See documentation for Memory Management (url)"): the log tail keeps them, the reason keeps the figures
_ADVICE = ("If ", "See ")
_SENTENCE_END = re.compile(r"(?<=[.;])\s+(?=\S)")


def _error_words(error: dict[str, Any]) -> str:
    """A rank's error event in one line: its message's first line in whole sentences (for an out of memory: what
    was asked, the capacity, what was in use, without torch's advice), never cut inside a word."""
    prefix = "out of memory: " if error.get("oom") else ""
    head = f"{prefix}rank {error['rank']}: {error['error_type']}: "
    return head + brief_message(str(error["message"]), REASON_CHARS - len(head), drop_advice=bool(error.get("oom")))


def brief_message(message: str, limit: int, drop_advice: bool = False) -> str:
    """The first line of ``message`` in as many whole sentences as fit in ``limit`` characters, " …" where
    anything was left out; a first sentence longer than the limit is cut at a space."""
    lines = message.strip().splitlines() or [""]
    sentences = _SENTENCE_END.split(lines[0].strip())
    shown = [s for s in sentences if not s.startswith(_ADVICE)] if drop_advice else sentences
    kept: list[str] = []
    for sentence in shown or sentences[:1]:
        if len(" ".join(kept + [sentence])) > limit - 2:  # room for " …"
            break
        kept.append(sentence)
    if not kept:
        cut = sentences[0][:max(1, limit - 2)]
        kept = [cut.rsplit(" ", 1)[0] if " " in cut else cut]
    text = " ".join(kept)
    whole = len(lines) == 1 and kept == sentences
    return text if whole else text + " …"
