"""The live TUI: a thin Textual view over a ``RunControl`` (a sweep this process runs, or a recorded one).

Nothing here measures, computes results or reads files. ``--fps`` times a second the app asks its snapshot
thread for a ``RunSnapshot`` from the control (the disk reads happen there, never on the UI thread); the
thread posts it, and the app hands it to every panel, which redraws only what changed. A new frame is asked
for only once the last one arrived, so slow reads never pile up. Keys go to the control (skip, stop, save);
when the run ends the summary screen opens.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from typing import Any, Iterable

from textual import work
from textual.app import ComposeResult, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.content import Content
from textual.containers import ScrollableContainer, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Static, TabbedContent, TabPane

from ddptop.control import LiveControl, RecordedControl, RunControl, ScreenSummary, display_path
from ddptop.report import sections
from ddptop.report.schema import Summary
from ddptop.live.live_run import LiveRun
from ddptop.run.options import DEFAULT_FPS
from ddptop.run.signals import handle_stop_signals
from ddptop.run.snapshot import FINAL_PHASES, RunSnapshot
from ddptop.telemetry.topology import format_matrix
from ddptop.tui import ascii
from ddptop.tui import format as fmt
from ddptop.tui.panels import (ConfigNotes, ConfigTable, GpuTable, HostLine, LogPanel, RankTable, StatusLine,
                               StepChart, TunePanel)
from ddptop.tui.footer import FittingFooter
from ddptop.tui.lines import LineTable
from ddptop.tui.screens import HelpScreen, SummaryScreen, TracesScreen
from ddptop.tui.view_failure import FailureAwareApp, report

# Until the telemetry's first reading is in (the monitor starts with the app), frames come this often, for
# this long: the first useful frame should not wait a whole frame period for it.
FIRST_READING_POLL, FIRST_READING_WAIT = 0.03, 3.0
TAB_OF_PANEL = {"overview": "overview", "ranks": "ranks-tab", "topology": "topology-tab", "logs": "logs-tab",
                "tune": "tune-tab"}
PANELS = tuple(TAB_OF_PANEL)
# The panels each tab shows, drawn only while it is the active tab: a hidden widget that asks to be redrawn
# makes Textual rebuild its map of every widget at the next frame (half the view's compositing cost).
TAB_WIDGETS: dict[str, tuple[type, ...]] = {
    "overview": (GpuTable, HostLine, ConfigTable, ConfigNotes, StepChart), "ranks-tab": (RankTable,), "topology-tab": (),
    "logs-tab": (LogPanel,), "tune-tab": (TunePanel,),
}
PANEL_KINDS = tuple(kind for kinds in TAB_WIDGETS.values() for kind in kinds)
SHUTDOWN_GRACE = 10.0  # seconds Textual gets to restore the terminal after a signal, once the summary is saved


class FrameReady(Message):
    """A snapshot taken off the UI thread, ready to draw."""

    def __init__(self, snapshot: RunSnapshot) -> None:
        super().__init__()
        self.snapshot = snapshot


class FrameFailed(Message):
    """Taking a snapshot raised: the app fails with that error, as it would had it drawn on its own thread."""

    def __init__(self, error: Exception) -> None:
        super().__init__()
        self.error = error


class SummaryShown(Message):
    def __init__(self, found: ScreenSummary | None) -> None:
        super().__init__()
        self.found = found


class AsciiAwareApp(FailureAwareApp):
    """Textual's own chrome (the header's title, the command palettes, borders, the loading indicator) in ASCII
    under ``--ascii``; an exception it closes on kept for ``view_failure.report``."""

    def __init__(self) -> None:
        super().__init__()
        if fmt.ASCII:  # read when the app starts
            self.css_path.append(ascii.CSS_PATH)  # last, so that its rules win over the app's own
            self.animation_level = "none"  # a loading indicator says "Loading..." instead of animated dots

    def format_title(self, title: str, sub_title: str) -> Content:
        return ascii.format_title(title, sub_title) if fmt.ASCII else super().format_title(title, sub_title)

    def action_command_palette(self) -> None:
        if fmt.ASCII and self.use_command_palette and not CommandPalette.is_open(self):
            self.push_screen(ascii.AsciiCommandPalette(id="--command-palette"))
        else:
            super().action_command_palette()

    def search_themes(self) -> None:
        """The palette's theme list ("Theme" in ctrl+p)."""
        if fmt.ASCII:
            from textual.theme import ThemeProvider

            self.push_screen(ascii.AsciiCommandPalette(providers=[ThemeProvider], placeholder="Search for themes..."))
        else:
            super().search_themes()


class SummaryApp(AsciiAwareApp):
    """``ddptop view summary.json`` for a summary without its run directory: the summary screen alone."""

    TITLE = "ddptop: summary"

    def __init__(self, summary: Summary, paths: dict[str, str] | None) -> None:
        super().__init__()
        self.summary = summary
        self.paths = paths

    def on_mount(self) -> None:
        self.push_screen(SummaryScreen(self.summary, self.paths, with_topology=True, alone=True))

    def action_quit_run(self) -> None:
        self.exit(0)

    def action_screenshot(self) -> None:
        where = self.paths.get("json") if self.paths else None
        path = self.save_screenshot(path=os.path.dirname(os.path.abspath(where)) if where else None)
        self.notify(f"Screenshot: {display_path(path)}")


class DdptopApp(AsciiAwareApp):
    TITLE = "ddptop"
    CSS_PATH = "app.tcss"
    BINDINGS = [
        Binding("q", "quit_run", "Quit"),
        Binding("ctrl+c", "quit_run", "Quit", show=False, priority=True),
        Binding("s", "save", "Save now"),
        Binding("n", "skip", "Skip config"),
        Binding("p", "pause", "Pause"),
        Binding("r", "results", "Summary"),
        Binding("t", "screenshot", "Screenshot"),
        Binding("x", "traces", "Traces"),
        # watch and view: the keys above a watcher may press out of habit say why nothing happens
        Binding("s,n", "only_looking", "", show=False),
        Binding("c", "chart_mode", "step chart: median and p10-p90 band, or every rank", show=False),
        Binding("w", "every_column", "tables: every column (Tab to one, then ← →), or those that fit", show=False),
        Binding("T", "next_theme", "next colour theme", show=False),
        Binding("1", "panel('overview')", "Overview", show=False),
        Binding("2", "panel('ranks')", "Ranks", show=False),
        Binding("3", "panel('topology')", "Topology", show=False),
        Binding("4", "panel('logs')", "Logs", show=False),
        Binding("5", "panel('tune')", "Tune (ddptop tune)", show=False),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
    ]

    def __init__(self, control: RunControl, fps: float = DEFAULT_FPS, screenshot_dir: str | None = None) -> None:
        super().__init__()
        self.control = control
        self.fps = fps
        self.screenshot_dir = screenshot_dir or control.run_dir
        self.paused = False
        self.every_column = False  # `w`: the tables keep every column and scroll sideways
        self.frames_shown = 0
        self.last_snapshot: RunSnapshot | None = None
        self._panels: dict[type, Any] | None = None
        self._frame_pending = False
        self._settled = False  # a finished run is drawn in full: no more snapshots are taken
        self._mounted_t = time.monotonic()
        self._last_events: int | None = None
        self._snapshots: threading.Thread | None = None
        self._snapshot_wanted = threading.Event()
        self._snapshots_stop = threading.Event()
        self._summary_asked = False
        self._summary_shown = False
        self._signalled = False
        self._quitting = False
        self._signals = contextlib.ExitStack()

    @classmethod
    def for_live(cls, live: LiveRun, fps: float = DEFAULT_FPS, telemetry: Any | None = None) -> "DdptopApp":
        return cls(LiveControl(live, telemetry), fps)

    @classmethod
    def for_recorded(cls, run_dir: str, fps: float = DEFAULT_FPS, open_summary: str | None = None) -> "DdptopApp":
        """A view of a run directory from its files: a finished run, or one another process is writing."""
        return cls(RecordedControl.of(run_dir, open_summary), fps)

    # -- layout ------------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False, icon=ascii.HEADER_ICON if fmt.ASCII else None)
        yield StatusLine(id="status-line")
        with TabbedContent(initial="overview"):
            with TabPane("1 Overview", id="overview"):
                with Vertical(id="overview-body"):
                    yield GpuTable(id="gpus")
                    yield HostLine(fmt.given(self.control.environment), id="host")
                    yield ConfigTable(self.control.session.plan.configs(), id="configs")
                    yield ConfigNotes(id="config-notes")
                    yield StepChart(id="chart")
            with TabPane("2 Ranks", id="ranks-tab"):
                yield RankTable(id="ranks", data_wait=any(spec.kind.data_wait
                                                          for spec in self.control.session.plan.configs()))
            with TabPane("3 Topology", id="topology-tab"):
                with ScrollableContainer():
                    topology = self.control.topology
                    text = (format_matrix(topology, self.control.session.plan.thread_splits())
                            if topology is not None else "Topology was not recorded.")
                    yield Static(fmt.ascii_of(text) if fmt.ASCII else text, id="topology")
            with TabPane("4 Logs", id="logs-tab"):
                yield LogPanel(id="logs-view")
            plan = self.control.session.plan
            if len(plan.variants) > 1 or plan.script_tune:  # ddptop tune: the variants' standing so far
                against = ("the script as written (its tries join after its first run)" if plan.script_tune
                           else "DDP as written")
                with TabPane("5 Tune", id="tune-tab"):
                    yield Static(f"Median step so far against {against} (point figures: the 95% intervals "
                                 "and the verdicts come with the summary)", classes="tune-note")
                    yield TunePanel(id="tune")
        yield FittingFooter()

    def on_mount(self) -> None:
        self.title = "ddptop"
        self.sub_title = self.control.session.plan.name
        if self.control.owns_run:
            self._install_signal_handlers()
        self.query_one(StatusLine).starting(
            len(self.control.session.order), "starting" if self.control.owns_run else "reading the run")
        self.control.start()
        self._mounted_t = time.monotonic()
        self.request_frame()
        self.set_interval(1.0 / max(self.fps, 0.1), self.request_frame)

    def _install_signal_handlers(self) -> None:
        """SIGTERM and SIGHUP (the SSH connection dropped): stop the ranks, save, exit."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, _frame: Any) -> None:
            self._quitting = True
            if not self._signalled:
                self._signalled = True
                self.control.stop()
                threading.Thread(target=self._save_then_leave, name="ddptop-signal-save", daemon=True).start()
            loop.call_soon_threadsafe(self.exit, 130)

        self._signals.enter_context(handle_stop_signals(on_signal))

    def on_unmount(self) -> None:
        self._snapshots_stop.set()
        self._snapshot_wanted.set()
        self._signals.close()  # the previous handlers back, for whoever runs after the app

    def _save_then_leave(self) -> None:
        """Write the summary whatever the terminal does next; leave if Textual's shutdown is stuck.

        Seen once: after the terminal went away, Textual's driver waited forever on an output queue nobody
        read. The summary no longer depends on that shutdown, and the process ends regardless.
        """
        code = self.control.finish()
        time.sleep(SHUTDOWN_GRACE)
        os._exit(code)  # reached only if the normal exit has not happened in the meantime

    # -- frames ------------------------------------------------------------------------------------------------
    @property
    def settled(self) -> bool:
        """The run can no longer change and is drawn in full: no snapshot is taken any more."""
        return self._settled

    def request_frame(self) -> None:
        """Ask for a snapshot unless one is on its way (reads never overlap) or the display is paused."""
        if self.paused or self._frame_pending or self._settled or not self.is_running:
            return
        self._frame_pending = True
        if self._snapshots is None:  # one thread for the app's life: a thread per frame costs more than the frame
            self._snapshots = threading.Thread(target=self._take_snapshots, name="ddptop-snapshots", daemon=True)
            self._snapshots.start()
        self._snapshot_wanted.set()

    def _take_snapshots(self) -> None:
        """The snapshot thread: one snapshot per request, posted to the UI thread; a failure is re-raised there."""
        while True:
            self._snapshot_wanted.wait()
            self._snapshot_wanted.clear()
            if self._snapshots_stop.is_set():
                return
            try:
                self.post_message(FrameReady(self.control.take_snapshot()))
            except Exception as exc:  # noqa: BLE001 - shown by the app as its own crash, with the traceback
                self.post_message(FrameFailed(exc))
                return

    def on_frame_failed(self, message: FrameFailed) -> None:
        raise message.error

    def on_frame_ready(self, message: FrameReady) -> None:
        self._frame_pending = False
        if not self.is_running or self._quitting:  # widgets may be going away: nothing to draw into
            return
        snapshot = message.snapshot
        self.show_snapshot(snapshot)
        if snapshot.telemetry.latest is None and time.monotonic() - self._mounted_t < FIRST_READING_WAIT:
            self.set_timer(FIRST_READING_POLL, self.request_frame)  # the GPU table as soon as a reading exists
        wants_summary = not self._summary_shown and self.control.wants_summary(snapshot)
        if wants_summary and not self._summary_asked:
            self._summary_asked = True
            self._fetch_final_summary()
        # Idle cost: once a run that can no longer change is drawn twice alike, stop reading it
        events = snapshot.session.events_applied
        self._settled = snapshot.phase in FINAL_PHASES and events == self._last_events and not wants_summary
        self._last_events = events

    def show_snapshot(self, snapshot: RunSnapshot) -> None:
        self.last_snapshot = snapshot
        if self._panels is None:  # looked up once: a DOM query per panel per frame shows in the view's cost
            self._panels = {kind: found for kind in (StatusLine, TabbedContent, *PANEL_KINDS)
                            for found in self.query(kind).results()}  # the Tune tab only in a tune
        self._panels[StatusLine].update_from(snapshot, self.paused)
        for kind in TAB_WIDGETS[self._panels[TabbedContent].active]:
            self._panels[kind].update_from(snapshot)
        self.frames_shown += 1

    def on_tabbed_content_tab_activated(self, _event: TabbedContent.TabActivated) -> None:
        """A tab shown again is drawn from the newest snapshot at once (a settled run takes no more)."""
        if self.last_snapshot is not None:
            self.show_snapshot(self.last_snapshot)

    # -- the summary ---------------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="summary")
    def _fetch_final_summary(self) -> None:
        """Off the UI thread: a live run's finish saves the summary and draws the plots (seconds)."""
        self.post_message(SummaryShown(self.control.final_summary()))

    def on_summary_shown(self, message: SummaryShown) -> None:
        self._summary_asked = False  # not there yet (a watched run's writer is still saving): ask again later
        if message.found is None or self._summary_shown or self._quitting or not self.is_running:
            return  # not while quitting: the screen would mount into an app that is tearing down
        self._summary_shown = True
        found = message.found
        self.push_screen(SummaryScreen(found.summary, found.paths, found.note))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Every key's action, by name, in the command palette (ctrl+p)."""
        yield from super().get_system_commands(screen)
        yield SystemCommand("Stop and quit", "Stop the ranks, save the summary, exit", self.action_quit_run)
        yield SystemCommand("Save summary now", "Write summary.json/.md/.csv of what is measured so far", self.action_save)
        yield SystemCommand("Skip configuration", "End the running configuration and go on", self.action_skip)
        yield SystemCommand("Pause or resume the display", "The sweep goes on either way", self.action_pause)
        yield SystemCommand("Summary screen", "Scaling tables, speedup chart, recommendation", self.action_results)
        yield SystemCommand("SVG screenshot", "Save the screen as SVG in the run directory", self.action_screenshot)
        for number, panel in enumerate(PANELS, 1):
            yield SystemCommand(
                f"Show {panel} panel", f"Key {number}", lambda panel=panel: self.action_panel(panel)
            )

    # -- actions ----------------------------------------------------------------------------------------------
    def action_chart_mode(self) -> None:
        """The step-time chart: median and p10-p90 band, or every rank's steps."""
        self.query_one(StepChart).toggle()
        if self.last_snapshot is not None:
            self.query_one(StepChart).update_from(self.last_snapshot)

    def action_every_column(self) -> None:
        """The tables with every column, scrolling sideways where the window is narrower; or those that fit."""
        every = not self.every_column
        self.every_column = every
        tables = list(self.screen_stack[0].query(LineTable))  # the sweep's tables, from any screen
        for table in tables:
            table.show_every_column(every)
        wider = sum(1 for t in tables if t.can_focus and t.size.width)  # on the tab shown, wider than the window
        if every:
            self.notify("every column: Tab to a table, then ← →; w: only those that fit" if wider
                        else "every column fits already", timeout=3)
        else:
            self.notify("the columns that fit (w: every column)", timeout=2)

    def action_next_theme(self) -> None:
        """Cycle through Textual's themes (a light terminal, a 256-colour one that renders some badly)."""
        names = sorted(self.available_themes)
        self.theme = names[(names.index(self.theme) + 1) % len(names)] if self.theme in names else names[0]
        self.notify(f"theme: {self.theme} (T: next)", timeout=2)

    def action_quit_run(self) -> None:
        if self.control.running:
            self._quitting = True
            self.notify("Stopping the ranks and saving the summary…", timeout=10)
            self.control.stop()
            self._quit_when_finished()
            return
        self.exit(self.control.exit_code())

    @work(thread=True, exclusive=True, group="quit")
    def _quit_when_finished(self) -> None:
        code = self.control.finish()
        self.call_from_thread(self.exit, code)

    @work(thread=True, exclusive=True, group="save")
    def action_save(self) -> None:
        message = self.control.save_now()  # writes files: off the UI thread
        self.call_from_thread(self.notify, message)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("save", "skip"):  # watch and view only look: no room taken in the footer by such keys
            return self.control.owns_run
        if action == "only_looking":
            return not self.control.owns_run
        return True

    def action_only_looking(self) -> None:
        self.notify(self.control.refusal())

    def action_skip(self) -> None:
        self.notify(self.control.skip())

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.notify("Display paused (the sweep goes on)" if self.paused else "Display resumed")
        if not self.paused:
            self.request_frame()
        elif self.last_snapshot is not None:
            self.query_one(StatusLine).update_from(self.last_snapshot, self.paused)

    @work(thread=True, exclusive=True, group="results")
    def action_results(self) -> None:
        found = self.control.summary_for_screen()  # may build it from the events: off the UI thread
        self.call_from_thread(self.push_screen, SummaryScreen(found.summary, found.paths, found.note))

    def action_screenshot(self) -> None:
        path = self.save_screenshot(path=self.screenshot_dir)
        self.notify(f"Screenshot: {display_path(path)}")

    def action_panel(self, panel: str) -> None:
        tabs = self.query_one(TabbedContent)
        if tabs.query(f"#{TAB_OF_PANEL[panel]}"):  # the Tune tab is there in a tune only
            tabs.active = TAB_OF_PANEL[panel]

    def action_traces(self) -> None:
        """Each configuration traced so far: its breakdown, and where its trace files are."""
        snapshot = self.last_snapshot
        configs = snapshot.session.configs if snapshot is not None else ()
        traced = [(config.config_id, config.trace) for config in configs if config.trace is not None]
        self.push_screen(TracesScreen(traced, snapshot.session.run_dir if snapshot is not None else None))

    def action_help(self) -> None:
        self.push_screen(HelpScreen(self.BINDINGS))


def run_tui(live: LiveRun, fps: float, mouse: bool = True) -> int:
    """Run the sweep under the live view; print the tables after it closes. The exit code of the sweep, or
    ``EXIT_VIEW_FAILED`` where the view raised (the sweep's measurements and summary saved all the same)."""
    import sys

    if live.monitor is not None:
        live.monitor.start()  # its first reading comes while the terminal is set up: the first frame has GPUs
    app = DdptopApp.for_live(live, fps)
    try:
        app.run(mouse=mouse)
    finally:
        code = live.finish()  # whatever ended the app: save what was measured
    try:
        if live.summary is not None and live.paths is not None:
            sys.stdout.write(sections.closing_text(live.summary, live.paths))
            sys.stdout.flush()
    except OSError:  # the terminal went away (SIGHUP): the files are written, nothing to show
        pass
    if not app.failure:
        return code
    saved = "the summary is saved" if live.paths and not live.paths.get("save_error") else "the steps are saved"
    return report(app.failure, live.session.run_dir, "the live view", saved)
