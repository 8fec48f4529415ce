"""The live state of a sweep, rebuilt from what is on disk in the run directory.

The session tails every rank's events file and ddptop's own ``runner.jsonl``; it never talks to a rank
directly. So the same code follows a sweep this process runs, one another process is writing
(``ddptop watch``), and one that ended or died long ago (``ddptop report``). Frontends call ``refresh()``
and read ``snapshot()``, a frozen copy taken under the lock (``ddptop.run.snapshot``), never the live state; the
sweep runner calls ``mark()`` for what only it knows (a launch died, a configuration was skipped or stopped),
and that too is written to disk first.

Each event is applied by the handler its kind names (``Session._LAUNCH_EVENTS``, ``Session._CONFIG_EVENTS``) to
the launch or to the configuration's ``ConfigState`` (``ddptop.run.config_state``); which error ended a
configuration, and in what words, is ``ddptop.run.failure_reasons``.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, ClassVar

import psutil

from ddptop.run import rundir
from ddptop.run.config_state import ConfigState, combine_round_ends
from ddptop.run.failure_reasons import (cause_in_front, measured_nothing, error_reason, error_words,
                                        fault_status)
from ddptop.run.plan_records import ConfigSpec, Plan
from ddptop.run.snapshot import ANALYSIS_COMMUNICATION, ANALYSIS_TRACE, LaunchSnapshot, SessionSnapshot
from ddptop.telemetry.host import RankProcess
from ddptop.protocol import layout, storage
from ddptop.protocol.marks import ConfigEnd, LaunchEnd, LaunchStart, SweepEnd, parse_mark
from ddptop.protocol.vocab import ENDED, FAILED, Phase, Status
from ddptop.protocol.wire import STEP_LISTS, EventFileReader, EventsUnwritable, EventWriter, make_event

RUNNER_RANK = -1  # runner.jsonl events carry this rank


@dataclass
class LaunchProgress:
    """A launch as the session follows it: its configurations, when it started and ended, how (the summary
    saves it as a ``LaunchRecord``)."""
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
        self.launches: dict[str, LaunchProgress] = {}
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
        if self.last_event_t is None or event["t"] > self.last_event_t:
            self.last_event_t = event["t"]
        if launch is None:  # ddptop's own runner events
            self._apply_runner(event)
            return
        kind = event["type"]
        of_launch = self._LAUNCH_EVENTS.get(kind)
        if of_launch is not None:
            of_launch(self, event, launch)
            return
        state = self.configs.get(event.get("config_id") or "")
        if state is None:
            return  # an error outside any configuration; kept in the launch's logs
        state.revision += 1
        of_config = self._CONFIG_EVENTS.get(kind)
        if of_config is not None:
            of_config(self, state, event, launch)

    # -- a launch's events: what the launch, not one configuration, keeps ----------------------------------
    def _on_heartbeat(self, event: dict[str, Any], launch: str) -> None:
        """A rank alive between samples: nothing to keep, but that a script's rank runs its traced steps (its
        configuration is running until its end, which comes after them: the view says what runs meanwhile)."""
        state = self.configs.get(event.get("config_id") or "")
        if event.get("trace") and state is not None and state.status == Status.RUNNING:
            state.tracing = True

    def _on_hello(self, event: dict[str, Any], launch: str) -> None:
        self.hellos[(launch, event["rank"])] = event

    def _on_collective(self, event: dict[str, Any], launch: str) -> None:
        self.collectives.append(dict(event, launch=launch))

    def _on_ceiling(self, event: dict[str, Any], launch: str) -> None:
        self.ceilings.append(dict(event, launch=launch))

    # -- a configuration's events ------------------------------------------------------------------------
    def _on_config_start(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
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
            state.next_round(event["rank"])

    def _on_samples(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        if state.status == Status.PENDING:
            state.status = Status.RUNNING
        if event["phase"] == Phase.MEASURE:
            if event["sec"] and launch not in state.measure_started_t:
                state.measure_started_t[launch] = event["t"] - sum(event["sec"])
            before = len(state.samples.get(event["rank"], ()))
            state.add_samples(event["rank"], event["sec"], event.get("round"), launch)
            if any(event.get(name) is not None for name, _ in STEP_LISTS) or state.step_values:
                state.add_step_values(event["rank"], before, len(event["sec"]),
                                      {name: event.get(name) for name, _ in STEP_LISTS})
            if event.get("of") is not None:
                state.planned_iters = event["of"]
        elif event["phase"] == Phase.NOSYNC:
            state.nosync.setdefault(event["rank"], []).extend(event["sec"])
        else:
            state.warmup_seen[event["rank"]] = state.warmup_seen.get(event["rank"], 0) + len(event["sec"])

    def _on_compiled(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        if event["rank"] == 0:  # each launch compiles anew: one per launch
            state.compiles.append({k: v for k, v in event.items() if k not in ("v", "type", "rank", "t")}
                                  | {"launch": launch})

    def _on_comm(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        state.comm[event["rank"]] = event  # the probe runs in a configuration's last launch

    def _on_trace(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        state.traces[event["rank"]] = event

    def _on_config_end(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        ends = state.round_ends.setdefault(event["rank"], [])
        if event["status"] == Status.OK:
            event = dict(event, launch=launch)  # whose window it closes: validity is judged per launch
        if event.get("last") is False and event["status"] == Status.OK:  # one round of several ended
            state.round_end[event["rank"]] = event
            ends.append(event)
            if event.get("round", 0) < state.spec.rounds - 1:
                state.rounds_ended[event["rank"]] = state.rounds_ended.get(event["rank"], 0) + 1
                state.next_round(event["rank"])
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
            reason = state.reason or error_reason(state.errors)
            self._end(state, fault_status(state.errors, status), reason, event["t"])
        elif len(state.end) >= state.spec.processes and all(
            e["status"] == Status.OK for e in state.end.values()
        ) and not any(measured_nothing(e) for e in state.ends_in(launch).values()):
            # a script that ended before its first measured step in this launch measured nothing: the sweep fails it,
            # with its exit code and its last words from the ranks' logs (a ConfigEnd mark)
            self._end(state, Status.OK, None, event["t"])

    def _on_error(self, state: ConfigState, event: dict[str, Any], launch: str) -> None:
        if event.get("phase") == Phase.ANALYSIS:  # after the configuration ended: its steps stand
            if state.analysis_error is None:
                state.analysis_error = error_words(event)
            return
        state.errors.append(event)
        if not state.settled:  # the earliest error so far, whichever rank's file was read first
            state.reason = error_reason(state.errors)
            if state.status in FAILED:  # and its kind: a peer's echo of an out of memory is no crash
                state.status = fault_status(state.errors, state.status)

    # event kind -> what applies it; a configuration's event of a kind not listed (bye) changes only its revision
    _LAUNCH_EVENTS: ClassVar[dict[str, Callable[[Session, dict[str, Any], str], None]]] = {
        "heartbeat": _on_heartbeat, "hello": _on_hello, "collective": _on_collective, "ceiling": _on_ceiling,
    }
    _CONFIG_EVENTS: ClassVar[dict[str, Callable[[Session, ConfigState, dict[str, Any], str], None]]] = {
        "config_start": _on_config_start, "samples": _on_samples, "compiled": _on_compiled, "comm": _on_comm,
        "trace": _on_trace, "config_end": _on_config_end, "error": _on_error,
    }

    def _apply_runner(self, event: dict[str, Any]) -> None:
        if event["type"] == "hello" and self.writer is None:
            self.writer = event
            self.started_t = event["t"]
        mark = parse_mark(event)
        if isinstance(mark, LaunchStart):
            if not self.writes_runner_file and any(c not in self.configs for c in mark.configs):
                self._reread_plan()
            self.launches[mark.launch] = LaunchProgress(
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
                    state.reason = cause_in_front(cause, state.reason)
                    state.revision += 1
                reason = cause_in_front(cause, mark.reason) if cause else mark.reason
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
                configs=tuple(state.snapshot(self._analysing(state)) for state in self.ordered_states()),
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
        """What runs after its steps ended well, a rank having yet to report it: its profiler trace (a script's
        while its ranks trace, before its end), then its communication analysis; "" when nothing does, or its
        launch ended (taking any analysis left with it)."""
        tracing = state.status == Status.RUNNING and state.tracing  # a script's, before its end
        if not tracing and (state.status != Status.OK or state.analysis_error is not None):
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
