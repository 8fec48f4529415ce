"""What a view may ask of the run it shows: a snapshot, the final summary, and the commands.

Two kinds of run look the same to a view: one this process runs (``LiveControl`` over a ``LiveRun``) and one
another process writes or wrote (``RecordedControl`` over a ``RecordedRun``: ``ddptop watch`` and ``view``).
A recorded run answers skip, stop and save with the reason it cannot, so a view has no branch on which
kind it shows. ``take_snapshot``, ``final_summary`` and ``summary_for_screen`` read files: a view calls
them off its UI thread (a slow NFS read must never freeze the keys).
"""

from __future__ import annotations

import dataclasses
import os
import time
from dataclasses import dataclass
from typing import Any

from ddptop.analysis import traces
from ddptop.run import rundir
from ddptop.live.live_scaling import live_noise, live_scaling
from ddptop.live.live_validity import LiveValidity
from ddptop.errors import EXIT_OK
from ddptop.live.live_run import LiveRun
from ddptop.report import store
from ddptop.report.schema import Summary, value_of
from ddptop.run.session import Session
from ddptop.protocol import layout
from ddptop.protocol.layout import TIMELINE_FILE
from ddptop.protocol.vocab import ENDED, Status
from ddptop.run.snapshot import (ConfigSnapshot, RunPhase, RunSnapshot, ScalingFigures, SessionSnapshot,
                                  TelemetrySnapshot)
from ddptop.telemetry.timeline import TimelineFollower
from ddptop.telemetry.topology import Topology
from ddptop.live.recorded_run import RecordedRun

LOG_LINES = 200  # lines of the newest launch's logs a view keeps
LOG_PERIOD = 1.0  # seconds between reads of the log files


@dataclass(frozen=True)
class ScreenSummary:
    summary: Summary
    paths: dict[str, str] | None  # where it was saved; None when built for the screen only
    note: str | None = None  # what the reader should know about it (not finished, rebuilt here...)


NODE_LOOK_PERIOD = 3.0  # seconds between looks for follower nodes' timelines


class RunControl:
    """The common part: snapshots of a session, its telemetry and its newest launch's logs."""

    owns_run = False  # whether this process runs the sweep (and so handles signals, saves, exits 1/130)

    def __init__(self, session: Session, telemetry: Any, topology: Topology | None,
                 environment: dict[str, Any] | None = None) -> None:
        self.session = session
        self.telemetry = telemetry  # a Monitor or a TimelineFollower
        self.topology = topology
        self.environment = environment  # what the run's environment.json says (what the job was given)
        self._logs_read = -LOG_PERIOD
        self._validity = LiveValidity()
        self._nodes: dict[int, TimelineFollower] = {}  # follower nodes' timelines, found as they appear
        self._nodes_looked = -NODE_LOOK_PERIOD
        # per traced configuration: the session's snapshot of it, and that snapshot with its files broken down
        self._traced: dict[str, tuple[ConfigSnapshot, ConfigSnapshot]] = {}

    @property
    def run_dir(self) -> str:
        return self.session.run_dir

    # -- reading (off the UI thread) ----------------------------------------------------------------------
    def take_snapshot(self) -> RunSnapshot:
        self.session.refresh()
        self.telemetry.refresh()
        session = self._with_trace_breakdowns(self.session.snapshot())
        phase, who = self._phase()
        telemetry = TelemetrySnapshot.of(self.telemetry)
        nodes = self._node_telemetry()
        if nodes:
            telemetry = dataclasses.replace(telemetry, nodes=nodes)
        session = self._with_validity(session, telemetry)
        return RunSnapshot(
            session=session,
            telemetry=telemetry,
            scaling=self._scaling(),
            logs=self._logs(session),
            phase=phase,
            who=who,
            live=self.owns_run,
            not_saved=self._not_saved(),
        )

    def _node_telemetry(self) -> dict[int, TelemetrySnapshot]:
        """Each follower node's telemetry, from its own timeline in the shared run directory (looked for
        every few seconds: a follower writes its first record once it has joined)."""
        now = time.monotonic()
        if now - self._nodes_looked >= NODE_LOOK_PERIOD:
            self._nodes_looked = now
            for node_rank in layout.node_ranks_with(self.run_dir, TIMELINE_FILE):
                if node_rank and node_rank not in self._nodes:
                    self._nodes[node_rank] = TimelineFollower(layout.run_file(self.run_dir, TIMELINE_FILE, node_rank))
        found = {}
        for node_rank, follower in sorted(self._nodes.items()):
            follower.refresh()
            found[node_rank] = TelemetrySnapshot.of(follower)
        return found

    def _with_trace_breakdowns(self, session: SessionSnapshot) -> SessionSnapshot:
        """Each traced configuration with the breakdown of its ranks' trace files, read here rather than under
        the session's lock (a GPU trace can take seconds to parse), and each file once
        (``traces.file_breakdown`` keeps what it read, for the summary too)."""
        configs, changed = [], False
        for config in session.configs:
            if config.trace is not None:
                done = self._traced.get(config.config_id)
                if done is None or done[0] is not config:  # the session's snapshot of it changed
                    done = (config, dataclasses.replace(config, trace=self._trace_of(config)))
                    self._traced[config.config_id] = done
                config, changed = done[1], True
            configs.append(config)
        return dataclasses.replace(session, configs=tuple(configs)) if changed else session

    def _trace_of(self, config: ConfigSnapshot) -> traces.ConfigTrace | None:
        state = self.session.configs.get(config.config_id)
        if state is None or config.trace is None:
            return config.trace
        with self.session.lock:  # the events so far: a later one changes the snapshot, which is read again
            events, device = dict(state.traces), state.spec.device
        return traces.config_trace(events, config.trace.untraced_step_s, self.run_dir, device)

    def _not_saved(self) -> tuple[str, ...]:
        telemetry = getattr(self.telemetry, "not_saved", None)  # a Monitor's; a follower writes nothing
        found = list(self.session.not_saved.values())
        return tuple(found + [f"telemetry not saved: {telemetry}"] if telemetry else found)

    def _phase(self) -> tuple[RunPhase, str | None]:
        raise NotImplementedError

    def _with_validity(self, session: SessionSnapshot, telemetry: TelemetrySnapshot) -> SessionSnapshot:
        """Whether each configuration that ran while this view watched was measured on a quiet node: the
        running one over its measured steps so far, an ended one as its summary judges it
        (``live.live_validity``), from every record the telemetry source holds (only the new ones are read)."""
        self._validity.add(self.telemetry.recent())
        shown = self._validity.update(self.session, dict(telemetry.info), self.session.rank_pids())
        if not shown:
            return session
        configs = tuple(dataclasses.replace(c, validity=shown[c.config_id]) if c.config_id in shown else c
                        for c in session.configs)
        return dataclasses.replace(session, configs=configs)

    def _scaling(self) -> dict[str, ScalingFigures]:
        rows = live_scaling(self.session)  # recomputed only when a configuration's figures changed
        noise = live_noise(self.session)
        return {
            config_id: ScalingFigures(row.speedup.value, row.efficiency.value, value_of(row.exposed_comm_fraction),
                                      noise.get(config_id))
            for config_id, row in rows.items() if row.speedup is not None and row.efficiency is not None
        }

    def _logs(self, session: SessionSnapshot) -> tuple[str, ...] | None:
        """The newest running launch's torchrun log and each local rank's stdout and stderr (a user's script's
        prints among them), at most once a second; after them how each of a script's configurations ended."""
        now = time.monotonic()
        if now - self._logs_read < LOG_PERIOD or not session.launches:
            return None
        self._logs_read = now
        launch = next((l for l in reversed(session.launches) if not l.ended), session.launches[-1])
        path = layout.launch_path(self.run_dir, launch.name)
        scripts = [c for c in session.configs if c.script is not None]
        running = next((c for c in scripts if c.status == Status.RUNNING), None)
        what = f": {running.script.command_text()}" if running is not None and running.script.command else ""
        lines = [f"--- {launch.name}{what} (torchrun agent.log and each local rank's stdout and stderr, last lines)"]
        lines += [f"[agent] {line}" for line in rundir.tail_lines(layout.agent_log(path), 20)]
        for local_rank, streams in sorted(rundir.worker_logs(path).items()):
            for stream, tag in (("stdout", "out"), ("stderr", "err")):
                if stream in streams:
                    lines += [f"[{local_rank} {tag}] {line}" for line in rundir.tail_lines(streams[stream], 40)]
        ended = [f"--- {c.label} {c.script.command_text()}: {c.script.ending()}" for c in scripts
                 if c.status in ENDED and c.script.ending()]
        return tuple(lines[-(LOG_LINES - len(ended)):] + ended)

    def wants_summary(self, snapshot: RunSnapshot) -> bool:
        """Whether the view should open the summary screen by itself now."""
        return False

    def final_summary(self) -> ScreenSummary | None:
        """The summary the view opens by itself; None if it is not there yet (ask again later)."""
        return None

    def summary_for_screen(self) -> ScreenSummary:
        """What the summary key shows: the final summary if there is one, else what is measured so far."""
        self.session.refresh()
        from ddptop.report import build  # with the summary, not the live view
        return ScreenSummary(build.build_summary(self.session), None)

    # -- commands ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        pass

    @property
    def running(self) -> bool:
        """A sweep is in progress that this process can stop."""
        return False

    def refusal(self) -> str:
        return "Only looking: saving, skipping and stopping belong to the ddptop running the sweep."

    def skip(self) -> str:
        return self.refusal()

    def stop(self) -> None:
        pass

    def save_now(self) -> str:
        return self.refusal()

    def finish(self) -> int:
        return EXIT_OK

    def exit_code(self) -> int:
        return EXIT_OK


class LiveControl(RunControl):
    """A sweep this process runs."""

    owns_run = True

    def __init__(self, live: LiveRun, telemetry: Any | None = None) -> None:
        if telemetry is None:  # telemetry off: show what the timeline file has (nothing, said plainly)
            telemetry = live.monitor or TimelineFollower(os.path.join(live.session.run_dir, TIMELINE_FILE))
        super().__init__(live.session, telemetry, live.topology, live.environment)
        self.live = live

    def _phase(self) -> tuple[RunPhase, str | None]:
        return (RunPhase.RUNNING if self.live.running else RunPhase.ENDED), None

    def wants_summary(self, snapshot: RunSnapshot) -> bool:
        return snapshot.phase == RunPhase.ENDED

    def final_summary(self) -> ScreenSummary | None:
        self.live.finish()  # waits for the sweep, saves summary and plots (seconds): never on the UI thread
        assert self.live.summary is not None
        return ScreenSummary(self.live.summary, self.live.paths)

    def summary_for_screen(self) -> ScreenSummary:
        if self.live.summary is not None:
            return ScreenSummary(self.live.summary, self.live.paths)
        return super().summary_for_screen()

    def start(self) -> None:
        self.live.start()

    @property
    def running(self) -> bool:
        return self.live.running

    def skip(self) -> str:
        if not self.live.running:
            return "No configuration is running."
        self.live.skip()
        return "Skipping the running configuration…"

    def stop(self) -> None:
        self.live.stop()

    def save_now(self) -> str:
        paths = self.live.save_now()
        if "json" not in paths:
            return f"Not saved: {paths.get('save_error')}"
        where = f" (not in the run directory: {paths['save_error']})" if paths.get("save_error") else ""
        return f"Saved {display_path(paths['json'])}{where}"

    def finish(self) -> int:
        return self.live.finish()

    def exit_code(self) -> int:
        return self.live.exit_code()


class RecordedControl(RunControl):
    """A run directory another process writes (``watch``) or wrote (``view``): read-only."""

    def __init__(self, recorded: RecordedRun, open_summary: str | None = None) -> None:
        topology = store.load_saved_topology(recorded.run_dir)
        super().__init__(
            recorded.session,
            TimelineFollower(os.path.join(recorded.run_dir, TIMELINE_FILE)),
            Topology.from_json(topology) if topology else None,
            store.read_json_object(os.path.join(recorded.run_dir, layout.ENVIRONMENT_FILE))[0],
        )
        self.recorded = recorded
        self.open_summary = open_summary  # "now" (view), "when_done" (watch) or None

    @classmethod
    def of(cls, run_dir: str, open_summary: str | None = None) -> "RecordedControl":
        return cls(RecordedRun(run_dir), open_summary)

    def _phase(self) -> tuple[RunPhase, str | None]:
        return self.recorded.state(), self.recorded.writer

    def refusal(self) -> str:
        return (
            "Only looking: saving, skipping and stopping belong to the ddptop running the sweep "
            f"({self.recorded.writer})."
        )

    def wants_summary(self, snapshot: RunSnapshot) -> bool:
        if self.open_summary == "now":
            return True
        return self.open_summary == "when_done" and snapshot.phase in (RunPhase.FINISHED, RunPhase.WRITER_GONE)

    def final_summary(self) -> ScreenSummary | None:
        """watch: the summary once the run has a final one; view: at once, built from the events if need be."""
        summary = self.recorded.final_summary()
        note = None
        if summary is None and self.open_summary == "now":
            self.session.refresh()
            from ddptop.report import build  # with the summary, not the live view
            summary = build.build_summary(self.session)
            note = f"The run is not finished ({self.recorded.state()}): what is measured so far."
        if summary is None:
            return None
        if self.recorded.summary_rebuilt:
            note = f"Built here from the events: {self.recorded.writer} saved no final summary."
        return ScreenSummary(summary, self.recorded.paths, note)

    def summary_for_screen(self) -> ScreenSummary:
        if self.recorded.final_summary() is not None:
            assert self.recorded.summary is not None
            return ScreenSummary(self.recorded.summary, self.recorded.paths)
        return super().summary_for_screen()


def display_path(path: str) -> str:
    """A path as the user would type it from here: relative below the working directory."""
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative
