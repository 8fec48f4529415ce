"""A run directory seen from outside the ddptop that writes it: ``ddptop watch`` and ``ddptop view``.

The session is rebuilt from the files and refreshed from them; who writes the run comes from the hello
at the top of runner.jsonl. Once the sweep has ended, the writer's final summary.json is shown; if the
writer died first (or never saves one), the summary is built here from the events, and not written: the
run directory belongs to its writer (``ddptop report RUN_DIR`` saves a rebuilt one).
"""

from __future__ import annotations

import os
import time
from typing import Any

from ddptop.protocol import layout
from ddptop.protocol.layout import PLOTS_DIR, SUMMARY_JSON
from ddptop.protocol.marks import SweepEnd, parse_mark
from ddptop.protocol.wire import EventFileReader
from ddptop.report import store
from ddptop.report.schema import Summary
from ddptop.run.session import Session, process_is_alive
from ddptop.run.snapshot import RunPhase

SAVE_GRACE = 30.0  # seconds the writer gets after the sweep's end to save summary.json
CHECK_PERIOD = 2.0  # seconds between checks that the writer is alive


def writer_is_alive(hello: dict[str, Any] | None) -> bool | None:
    """Whether the ddptop that said this hello still runs; None when it runs on another host (or is not
    known)."""
    if not hello or hello.get("host") != os.uname().nodename or not isinstance(hello.get("pid"), int):
        return None
    return process_is_alive(hello["pid"], hello.get("t"))


def run_state(ended: bool, alive: bool | None) -> RunPhase:
    if ended:
        return RunPhase.FINISHED
    return RunPhase.WRITER_GONE if alive is False else RunPhase.RUNNING if alive else RunPhase.UNKNOWN


def who(hello: dict[str, Any] | None) -> str:
    hello = hello or {}
    return f"pid {hello.get('pid', '?')} on {hello.get('host', '?')}"


def writer_of(run_dir: str) -> tuple[RunPhase, str]:
    """The state of a run directory's sweep and who writes it, from runner.jsonl alone (its hello and its
    sweep_end mark): cheap beside rebuilding the session from every rank's events."""
    events = EventFileReader(layout.run_file(run_dir, layout.RUNNER_FILE)).read_rest()
    hello = next((e for e in events if e["type"] == "hello"), None)
    end = next((e for e in events if isinstance(parse_mark(e), SweepEnd)), None)
    if end is None:
        return run_state(False, writer_is_alive(hello)), who(hello)
    # alive, or on another host where it cannot be told: within the grace it is taken to be saving
    saving = time.time() - end["t"] < SAVE_GRACE and writer_is_alive(hello) is not False
    return (RunPhase.SAVING if saving else RunPhase.FINISHED), who(hello)


class RecordedRun:
    def __init__(self, run_dir: str) -> None:
        self.run_dir = run_dir
        self.session = Session.load(run_dir)
        self.summary: Summary | None = None
        self.paths: dict[str, str] | None = None
        self.summary_rebuilt = False
        self._alive: bool | None = None
        self._checked = 0.0
        self._ended_seen: float | None = None

    @property
    def writer(self) -> str:
        return who(self.session.writer)

    def writer_alive(self) -> bool | None:
        """Whether the writing ddptop still runs; None when it runs on another host (or is not known)."""
        now = time.monotonic()
        if now - self._checked >= CHECK_PERIOD:
            self._checked = now
            self._alive = writer_is_alive(self.session.writer)
        return self._alive

    def state(self) -> RunPhase:
        ended = self.session.ended_t is not None
        return run_state(ended, None if ended else self.writer_alive())

    def final_summary(self) -> Summary | None:
        """The summary once there is a final one: the writer's, or one built here when it cannot come."""
        if self.summary is not None:
            return self.summary
        state = self.state()
        if state not in (RunPhase.FINISHED, RunPhase.WRITER_GONE):
            return None
        if state == RunPhase.FINISHED and self._ended_seen is None:
            self._ended_seen = time.monotonic()
        saved = self._saved_final(state)
        if saved is not None:
            self.summary, self.paths = saved, self._saved_paths()
        elif (
            state == RunPhase.WRITER_GONE
            or self.writer_alive() is False  # ended, but died before saving
            or time.monotonic() - (self._ended_seen or 0) > SAVE_GRACE
        ):
            self.session.refresh(final=True)
            from ddptop.report import build  # with the summary, not the live view
            self.summary, self.summary_rebuilt = build.build_summary(self.session), True
        return self.summary

    def _saved_final(self, state: RunPhase) -> Summary | None:
        path = os.path.join(self.run_dir, SUMMARY_JSON)
        if not os.path.exists(path):
            return None
        try:
            data = store.load_summary(path)
        except store.SummaryError:
            return None  # being replaced right now, or damaged: the next frame looks again
        # a summary saved mid-run ("s") is not the final one
        return data if data.complete or state == RunPhase.WRITER_GONE else None

    def _saved_paths(self) -> dict[str, str]:
        paths = dict(store.summary_paths(self.run_dir), plots=os.path.join(self.run_dir, PLOTS_DIR))
        return {key: path for key, path in paths.items() if os.path.exists(path)}
