"""Run a sweep without the TUI: a progress bar per configuration (rich), then the tables.

On a terminal the bars redraw at ``fps``; elsewhere (SLURM logs, CI) one line is printed per configuration
as it ends. Either way the display reads session snapshots at a fixed rate, never per event.
"""

from __future__ import annotations

import signal
import sys
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from ddptop.live import LiveRun
from ddptop.report import tables
from ddptop.session import ENDED, FAILED, ConfigState, Session


def _status_text(state: ConfigState) -> str:
    summary = state.summary() if state.status in ("running", "ok") else None
    if summary:
        p50 = summary["sec_iter"]["p50"]
        rate = summary["ex_sec_total"]["p50"]
        return f"{state.status:7s} p50 {p50:.4f} s/iter  {rate:8.1f} ex/s"
    return state.status + (f": {state.reason}" if state.reason and state.status in FAILED else "")


class HeadlessView:
    def __init__(self, session: Session, console: Console) -> None:
        self.session = session
        self.console = console
        self.live = console.is_terminal
        self.progress = Progress(
            TextColumn("{task.description}"),
            BarColumn(bar_width=24),
            TextColumn("{task.percentage:>3.0f}%"),
            TextColumn("{task.fields[status]}"),
            console=console,
            auto_refresh=False,
            transient=False,
        )
        self.tasks: dict[str, TaskID] = {}
        self.reported: set[str] = set()

    def __enter__(self) -> "HeadlessView":
        if self.live:
            self.progress.start()
            for state in self.session.ordered_states():
                self.tasks[state.spec.config_id] = self.progress.add_task(
                    f"{state.spec.label:>8s} {state.spec.model} bs{state.spec.batch_size}",
                    total=1.0,
                    status="pending",
                )
        return self

    def __exit__(self, *exc: Any) -> None:
        self.render()
        if self.live:
            self.progress.stop()

    def render(self) -> None:
        self.session.refresh()
        with self.session.lock:
            states = self.session.ordered_states()
            if self.live:
                for state in states:
                    self.progress.update(
                        self.tasks[state.spec.config_id], completed=state.progress(), status=_status_text(state)
                    )
                self.progress.refresh()
                return
            for state in states:
                if state.status in ENDED and state.spec.config_id not in self.reported:
                    self.reported.add(state.spec.config_id)
                    self.console.print(
                        f"[{state.spec.config_id}] {_status_text(state)}", highlight=False, markup=False
                    )


def run_headless(live: LiveRun, fps: float, console: Console) -> int:
    session = live.session

    def on_signal(signum: int, _frame: Any) -> None:
        live.stop()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}
    console.print(f"ddptop: {len(session.configs)} configurations, results in {session.run_dir}", highlight=False)
    try:
        with HeadlessView(session, console) as view:
            live.start()
            period = 1.0 / max(fps, 0.1)
            while live.running:
                live.join(period)
                view.render()
    finally:
        code = live.finish()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    monitor = live.monitor
    if monitor is not None and monitor.errors:
        console.print(f"ddptop: telemetry missed {monitor.errors} readings ({monitor.last_error})", highlight=False)
    # Plain stdout, not rich: the tables must not be re-wrapped to the terminal width, nor styled in logs.
    console.file.flush()
    assert live.summary is not None and live.paths is not None
    sys.stdout.write("\n" + tables.closing_text(live.summary, live.paths))
    sys.stdout.flush()
    return code
