"""Run a sweep without the TUI: a progress bar per configuration (rich), then the tables.

On a terminal the bars redraw at ``fps``; elsewhere (SLURM logs, CI) one line is printed per configuration
as it ends, whole however long (a file has no width to wrap at). Either way the display reads session
snapshots at a fixed rate, never per event.
"""

from __future__ import annotations

import io
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.progress import BarColumn, Progress, TaskID, TextColumn

from ddptop.analysis import script_steps
from ddptop.live.live_run import LiveRun
from ddptop.protocol.modelspec import with_batch
from ddptop.protocol.vocab import ENDED, FAILED, Status
from ddptop.report import sections
from ddptop.run.session import Session
from ddptop.run.signals import handle_stop_signals
from ddptop.run.snapshot import ConfigSnapshot
from ddptop.tui import format as fmt


def _status_text(config: ConfigSnapshot) -> str:
    stats = config.stats if config.status in (Status.RUNNING, Status.OK) else None
    if stats is not None:
        rate = stats.ex_sec_total_p50  # a script's: from the examples it drew; None where they were not counted
        text = f"{config.status:7s} p50 {stats.p50:.4f} s/iter  {'-' if rate is None else f'{rate:.1f}':>8s} ex/s"
        script = config.script
        if script is not None:
            if script.tok_per_s is not None:
                text += f"  {script.tok_per_s:.0f} tok/s"
            if script.data_wait is not None:
                text += f"  data wait {script.data_wait:.0%}"
        if config.unstable:
            reached = config.precision_reached
            text += f"  unstable (±{reached:.1%})" if reached is not None else "  unstable"
        if script is not None and script_steps.own_backend(config.backend, script.group_backend):
            text += f"  backend {script_steps.backend_words(config.backend, script.group_backend)}"
        return text
    return config.status + (f": {config.reason}" if config.reason and config.status in FAILED else "")


def say(console: Console, line: str) -> None:
    """One line of ddptop's, whole: never cut or wrapped at a width rich assumed (80 columns where stdout is a
    file or a pipe, which have none). On a terminal the terminal wraps it, as it wraps any long line."""
    console.print(line, soft_wrap=True, highlight=False, markup=False)


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
            for spec in self.session.plan.configs():
                self.tasks[spec.config_id] = self.progress.add_task(
                    f"{spec.label:>8s} {with_batch(spec.model, spec.batch_size)}", total=1.0, status="pending"
                )
        return self

    def __exit__(self, *exc: Any) -> None:
        self.render()
        if self.live:
            self.progress.stop()

    def render(self) -> None:
        self.session.refresh()
        configs = self.session.snapshot().configs
        if self.live:
            for config in configs:
                analysing = f"  analysing {config.analysis_phase}" if config.analysing else ""
                self.progress.update(self.tasks[config.config_id], completed=config.progress,
                                     status=_status_text(config) + analysing)
            self.progress.refresh()
            return
        for config in configs:
            if config.status in FAILED and not config.settled:
                continue  # a rank's own report may be the echo of another's fault: the runner's word comes next
            if config.status in ENDED and config.config_id not in self.reported:
                self.reported.add(config.config_id)
                say(self.console, f"[{config.config_id}] {_status_text(config)}")


class AsciiStream(io.TextIOBase):
    """A text stream that passes on only ASCII (``--ascii`` without the TUI): symbols spelled out as the TUI
    spells them. It says its encoding is ASCII, so rich draws its progress bars with '-' too."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return "ascii"

    def write(self, text: str) -> int:
        self.stream.write(fmt.ascii_of(text))
        return len(text)

    def flush(self) -> None:
        self.stream.flush()

    def isatty(self) -> bool:
        return self.stream.isatty()

    def fileno(self) -> int:
        return self.stream.fileno()


def headless_console(ascii_only: bool = False) -> Console:
    """Where the headless progress and tables go: stdout, or stdout in ASCII alone."""
    if ascii_only:
        fmt.use_ascii()
        return Console(file=AsciiStream(sys.stdout))
    return Console()


def run_headless(live: LiveRun, fps: float, console: Console) -> int:
    session = live.session

    count = len(session.configs)
    planned = (f"{count} configuration{'s' if count != 1 else ''}" if not session.plan.script_tune
               else "the script as written first; the tries its run calls for after it")
    say(console, f"ddptop: {planned}, results in {session.run_dir}")
    with handle_stop_signals(lambda _signum, _frame: live.stop()):
        try:
            with HeadlessView(session, console) as view:
                live.start()
                period = 1.0 / max(fps, 0.1)
                told: set[str] = set()
                while live.running:
                    live.join(period)
                    view.render()
                    for name, why in live.not_saved().items():  # a full disk: said once, as it happens
                        if name not in told and name != "run directory":  # that one: the stopped line says it
                            told.add(name)
                            say(console, f"ddptop: {why}; kept in memory for the summary")
        finally:
            code = live.finish()
    monitor = live.monitor
    if monitor is not None and monitor.errors:
        say(console, f"ddptop: telemetry missed {monitor.errors} readings ({monitor.last_error})")
    # Plain stdout, not rich: the tables must not be re-wrapped to the terminal width, nor styled in logs.
    out = console.file
    out.flush()
    assert live.summary is not None and live.paths is not None
    out.write("\n" + sections.closing_text(live.summary, live.paths))
    out.flush()
    return code
