"""The live TUI: a thin Textual view over a session, a telemetry source and (when running) a LiveRun.

Nothing here measures or computes results: every frame (``--fps`` a second, never per event) it refreshes
the session from disk, reads the telemetry source's latest records, and updates tables in place, cell by
changed cell. Keys go to LiveRun (skip, stop, save). When the sweep ends the summary screen opens.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from typing import Any, Iterable

from rich.text import Text
from textual import work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import DataTable, Footer, Header, Log, Static, TabbedContent, TabPane
from textual_plotext import PlotextPlot

from ddptop import rundir
from ddptop.live import LiveRun
from ddptop.report import summary as summary_mod
from ddptop.report import tables
from ddptop.session import ENDED, FAILED, ConfigState, Session
from ddptop.protocol import layout
from ddptop.protocol.layout import TIMELINE_FILE
from ddptop.telemetry.timeline import TimelineFollower
from ddptop.telemetry.topology import Topology, format_matrix
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable, TextLines
from ddptop.watch import FINISHED, WRITER_GONE, RecordedRun

PANELS = ("overview", "ranks", "topology", "logs")
STATUS_STYLE = {
    "pending": "dim",
    "running": "bold cyan",
    "ok": "green",
    "failed": "bold red",
    "oom": "bold red",
    "skipped": "yellow",
    "stopped": "yellow",
    "not_run": "dim",
}
# (key, label, width): fixed widths, so that cells updated in place never reflow the table
GPU_COLUMNS = (
    ("gpu", "GPU", 3), ("name", "name", 22), ("util", "util", 13), ("hist", "util history", 12),
    ("mem", "memory", 13), ("memgib", "GiB", 9), ("power", "power W", 7), ("temp", "temp", 4),
    ("clock", "SM MHz", 6), ("pcie", "PCIe GB/s", 9), ("nvlink", "NVLink GB/s", 11), ("rank", "rank", 5),
    ("notes", "notes", 16),
)
CONFIG_COLUMNS = (
    ("label", "N", 6), ("model", "model", 12), ("bs", "batch", 5), ("backend", "backend", 7),
    ("status", "status", 10), ("progress", "progress", 13), ("p50", "p50 s", 7), ("p75", "p75 s", 7),
    ("p90", "p90 s", 7), ("p95", "p95 s", 7), ("exs", "ex/s", 7), ("speedup", "speedup", 7), ("eff", "eff", 5),
    ("comm", "comm", 5),
)
RANK_COLUMNS = (
    ("rank", "rank", 4), ("pid", "PID", 8), ("host", "host", 16), ("gpu", "GPU", 3), ("cpu", "CPU %", 5),
    ("rss", "RSS GiB", 7), ("threads", "threads", 7), ("last", "last step s", 11), ("median", "median s", 8),
    ("mark", "", 16),
)
LOG_LINES = 200
CHART_PERIOD = 1.0  # seconds between redraws of the sec/iter chart while samples stream in


def _display_path(path: str) -> str:
    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def compose(self) -> ComposeResult:
        rows = "\n".join(
            f"  {b.key_display or b.key:<10} {b.description}" for b in DdptopApp.BINDINGS if isinstance(b, Binding)
        )
        yield Static(
            "ddptop keys\n\n" + rows + "\n\n  ctrl+p     command palette (every action by name)\n\n"
            "Esc closes this help.",
            id="help",
        )


SHUTDOWN_GRACE = 10.0  # seconds Textual gets to restore the terminal after a signal, once the summary is saved


class SummaryScreen(Screen[None]):
    """The scaling tables, speedup against perfect scaling, the recommendation, and where files went."""

    # A class default, not set on mount: a title changed after mount schedules a Header update that can
    # land after a quick "q" has already torn the Header down.
    TITLE = "ddptop: summary"
    DEFAULT_CSS = """
    #summary-text { width: 1fr; }
    #summary-tables { width: auto; }
    #speedup-chart { width: 40%; min-width: 30; }
    """

    BINDINGS = [
        Binding("escape", "back", "Back to the sweep"),
        Binding("q", "app.quit_run", "Quit"),
        Binding("t", "app.screenshot", "Screenshot"),
    ]

    def __init__(
        self, summary: dict[str, Any], paths: dict[str, str] | None, note: str | None = None,
        with_topology: bool = False,
    ) -> None:
        super().__init__()
        self.summary = summary
        self.paths = paths
        self.note = note
        self.with_topology = with_topology  # a lone summary.json has no Topology panel to show it

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="summary-body"):
            with ScrollableContainer(id="summary-text"):
                yield Static(self._text(), id="summary-tables")
            yield PlotextPlot(id="speedup-chart")
        yield Footer()

    def _text(self) -> Text:
        out = Text()
        status = "complete" if self.summary.get("complete") else "incomplete (stopped before the end)"
        out.append(f"Sweep {status}\n", style="bold")
        if self.note:
            out.append(self.note + "\n", style="yellow")
        if self.paths:
            out.append("Saved: ", style="bold")
            shown = [self.paths[k] for k in ("json", "md", "csv", "plots") if self.paths.get(k)]
            out.append("  ".join(_display_path(p) for p in shown) + "\n")
            if self.paths.get("plots_error"):
                out.append(f"Plots not drawn: {self.paths['plots_error']}\n", style="yellow")
        out.append("\n")
        body = tables.scaling_text(self.summary).rstrip() or "No scaling table: no configuration finished."
        out.append(body + "\n\n")
        deeper = tables.analysis_text(self.summary)
        if deeper:
            out.append(deeper + "\n")
        load = tables.load_text(self.summary)
        if load:
            out.append(load + "\n")
        problems = tables.problems_text(self.summary)
        if problems:
            out.append("Not measured in full:\n", style="bold yellow")
            out.append(problems + "\n\n")
        out.append(tables.overhead_line(self.summary) + "\n\n")
        if self.with_topology:
            out.append(tables.topology_text(self.summary))
        return out

    def on_mount(self) -> None:
        plot = self.query_one("#speedup-chart", PlotextPlot)
        plt = plot.plt
        plt.title("speedup vs N")
        plt.xlabel("N")
        largest = 1
        for table in self.summary["scaling"]:
            rows = table["rows"]
            if not rows:
                continue
            xs = [r["world_size"] for r in rows]
            largest = max(largest, *xs)
            plt.plot(xs, [r["speedup"] for r in rows], marker="dot", label=f"{table['model']} bs{table['batch_size']}")
        plt.plot([1, largest], [1, largest], label="perfect")
        highest = max([largest] + [r["speedup"] for t in self.summary["scaling"] for r in t["rows"]])
        plt.ylim(0, highest * 1.1)
        plt.xlim(0.5, largest + 0.5)

    def action_back(self) -> None:
        if len(self.app.screen_stack) <= 2 and isinstance(self.app, SummaryApp):
            self.app.exit(0)  # nothing behind it
            return
        self.app.pop_screen()


class SummaryApp(App[int]):
    """``ddptop view summary.json`` for a summary without its run directory: the summary screen alone."""

    TITLE = "ddptop: summary"
    def __init__(self, summary: dict[str, Any], paths: dict[str, str] | None) -> None:
        super().__init__()
        self.summary = summary
        self.paths = paths

    def on_mount(self) -> None:
        self.push_screen(SummaryScreen(self.summary, self.paths, with_topology=True))

    def action_quit_run(self) -> None:
        self.exit(0)

    def action_screenshot(self) -> None:
        path = self.save_screenshot(path=os.path.dirname(os.path.abspath(self.paths["json"])) if self.paths else None)
        self.notify(f"Screenshot: {_display_path(path)}")


class DdptopApp(App[int]):
    TITLE = "ddptop"
    CSS = """
    TabbedContent { height: 1fr; }
    TabPane { height: 1fr; padding: 0; }
    #overview-body { height: 1fr; }
    #gpus { height: auto; max-height: 40%; }
    #host { height: auto; padding: 0 1; }
    #configs { height: auto; max-height: 35%; }
    #chart { height: 1fr; min-height: 4; }
    #ranks, #logs-view { height: 1fr; }
    #help { width: 64; height: auto; border: round $accent; padding: 1 2; background: $panel; }
    HelpScreen { align: center middle; }
    #status-line { height: 1; padding: 0 1; background: $boost; }
    """
    BINDINGS = [
        Binding("q", "quit_run", "Quit"),
        Binding("ctrl+c", "quit_run", "Quit", show=False, priority=True),
        Binding("s", "save", "Save now"),
        Binding("n", "skip", "Skip config"),
        Binding("p", "pause", "Pause"),
        Binding("r", "results", "Summary"),
        Binding("t", "screenshot", "Screenshot"),
        Binding("1", "panel('overview')", "Overview", show=False),
        Binding("2", "panel('ranks')", "Ranks", show=False),
        Binding("3", "panel('topology')", "Topology", show=False),
        Binding("4", "panel('logs')", "Logs", show=False),
        Binding("question_mark,f1", "help", "Help", key_display="?"),
    ]

    def __init__(
        self,
        session: Session,
        telemetry: Any,
        live: LiveRun | None = None,
        topology: Topology | None = None,
        fps: float = 4.0,
        screenshot_dir: str | None = None,
        recorded: RecordedRun | None = None,
        open_summary: str | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.recorded = recorded  # a run another process writes (watch) or wrote (view)
        self.open_summary = open_summary  # recorded runs: "now" (view), "when_done" (watch) or never
        self.telemetry = telemetry
        self.live = live
        self.topology = topology
        self.fps = fps
        self.screenshot_dir = screenshot_dir or session.run_dir
        self.paused = False
        self.exit_code = 0
        self._cells: dict[tuple[str, str, str], Any] = {}
        self._chart_key: tuple[str, int, tuple[int, int]] | None = None
        self._chart_drawn = 0.0
        self._gpus_from: dict[str, Any] | None = None  # the telemetry record the GPU table shows
        self._ranks_from: tuple[Any, ...] | None = None  # what the ranks table was drawn from
        self._last_logs = 0.0
        self._log_text: list[str] = []
        self._summary_shown = False
        self._finishing = False
        self._signalled = False
        self._quitting = False

    @classmethod
    def for_recorded(cls, run_dir: str, fps: float = 4.0, open_summary: str | None = None) -> "DdptopApp":
        """A view of a run directory from its files: a finished run, or one another process is writing."""
        recorded = RecordedRun(run_dir)
        topology = summary_mod.load_saved_topology(run_dir)
        telemetry = TimelineFollower(os.path.join(run_dir, TIMELINE_FILE))
        return cls(
            recorded.session, telemetry, None, Topology.from_json(topology) if topology else None, fps,
            recorded=recorded, open_summary=open_summary,
        )

    # -- layout ------------------------------------------------------------------------------------------------
    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        yield Static(id="status-line")
        with TabbedContent(initial="overview"):
            with TabPane("1 Overview", id="overview"):
                with Vertical(id="overview-body"):
                    yield LineTable(GPU_COLUMNS, id="gpus", zebra_stripes=True)
                    yield Static(id="host")
                    yield DataTable(id="configs", cursor_type="row")
                    yield TextLines(id="chart")
            with TabPane("2 Ranks", id="ranks-tab"):
                yield LineTable(RANK_COLUMNS, id="ranks")
            with TabPane("3 Topology", id="topology-tab"):
                with ScrollableContainer():
                    yield Static(id="topology")
            with TabPane("4 Logs", id="logs-tab"):
                yield Log(id="logs-view", max_lines=LOG_LINES)
        yield Footer()

    def on_mount(self) -> None:
        self.title = "ddptop"
        self.sub_title = self.session.plan.name
        configs = self.query_one("#configs", DataTable)
        for key, label, width in CONFIG_COLUMNS:
            configs.add_column(label, key=key, width=width)
        for state in self.session.ordered_states():
            configs.add_row(*("" for _ in CONFIG_COLUMNS), key=state.spec.config_id)
        self.query_one("#topology", Static).update(
            format_matrix(self.topology) if self.topology is not None else "Topology was not recorded."
        )
        if self.live is not None:
            self._install_signal_handlers()
            self.live.start()
        self.render_frame()
        self.set_interval(1.0 / max(self.fps, 0.1), self.render_frame)

    def _install_signal_handlers(self) -> None:
        """SIGTERM and SIGHUP (the SSH connection dropped): stop the ranks, save, exit."""
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, _frame: Any) -> None:
            self._quitting = True
            if self.live is not None and not self._signalled:
                self._signalled = True
                self.live.stop()
                threading.Thread(target=self._save_then_leave, name="ddptop-signal-save", daemon=True).start()
            loop.call_soon_threadsafe(self.exit, 130)

        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(sig, on_signal)

    def _save_then_leave(self) -> None:
        """Write the summary whatever the terminal does next; leave if Textual's shutdown is stuck.

        Seen once: after the terminal went away, Textual's driver waited forever on an output queue nobody
        read. The summary no longer depends on that shutdown, and the process ends regardless.
        """
        assert self.live is not None
        code = self.live.finish()
        time.sleep(SHUTDOWN_GRACE)
        os._exit(code)  # reached only if the normal exit has not happened in the meantime

    # -- frames ------------------------------------------------------------------------------------------------
    def render_frame(self) -> None:
        if self.paused or not self.is_running:  # not while shutting down: the widgets are being removed
            return
        self.session.refresh()
        self.telemetry.refresh()
        self._render_status()
        self._render_gpus()
        self._render_configs()
        self._render_chart()
        self._render_ranks()
        if time.monotonic() - self._last_logs >= 1.0:
            self._render_logs()
        if self.live is not None and not self.live.running and not self._finishing:
            self._finishing = True
            self._finish_in_background()
        if self.recorded is not None and self.open_summary and not self._summary_shown:
            self._open_recorded_summary()

    def _open_recorded_summary(self) -> None:
        """watch: the summary once the run has a final one; view: at once, built from the events if need be."""
        assert self.recorded is not None
        summary = self.recorded.final_summary()
        note = None
        if summary is None and self.open_summary == "now":
            summary = summary_mod.build_summary(self.session)
            note = f"The run is not finished ({self.recorded.state()}): what is measured so far."
        if summary is None:
            return
        if self.recorded.summary_rebuilt:
            note = f"Built here from the events: {self.recorded.writer} saved no final summary."
        self._summary_shown = True
        self.push_screen(SummaryScreen(summary, self.recorded.paths, note))

    def _set(self, table: DataTable, row: str, column: str, value: Any) -> None:
        """Update a cell only when its content changed: tables are edited in place, never rebuilt."""
        key = (table.id or "", row, column)
        if self._cells.get(key) != value:
            self._cells[key] = value
            table.update_cell(row, column, value)

    def _update_static(self, widget_id: str, content: Any) -> None:
        """Redraw a Static only when its content changed, and lay the screen out again only when its number
        of lines did (a layout pass costs more than the redraw itself)."""
        key = ("static", widget_id, "")
        previous = self._cells.get(key)
        if previous != content:
            self._cells[key] = content
            relayout = previous is None or str(previous).count("\n") != str(content).count("\n")
            self.query_one(f"#{widget_id}", Static).update(content, layout=relayout)

    def _render_status(self) -> None:
        states = self.session.ordered_states()
        done = sum(1 for s in states if s.status in ENDED)
        running = next((s for s in states if s.status == "running"), None)
        recorded_state = self.recorded.state() if self.recorded is not None else None
        if self.session.ended_t is not None:
            end = self.session.ended_t
        elif recorded_state == WRITER_GONE:  # nothing more will come: the run stopped at its last event
            end = self.session.last_event_t or self.session.started_t
        else:
            end = time.time()
        elapsed = max(0.0, end - self.session.started_t)
        info = self.telemetry.info()
        parts = [f"{done}/{len(states)} configurations", f"elapsed {fmt.duration(elapsed)}"]
        if running is not None:
            parts.append(f"running {running.spec.label} {running.spec.model} bs{running.spec.batch_size}")
        elif self.live is not None and not self.live.running:
            parts.append("finished")
        if self.recorded is not None:
            if recorded_state == FINISHED:
                parts.append("finished")
            elif recorded_state == WRITER_GONE:
                parts.append(f"the ddptop running this sweep ({self.recorded.writer}) is gone: no more data")
            else:
                parts.append(f"watching {self.recorded.writer}")
        if self.paused:
            parts.append("PAUSED (display only; the sweep goes on)")
        text = Text("  ·  ".join(parts))
        if info.get("fake"):
            text.append("   FAKE GPUs (DDPTOP_FAKE_NVML)", style="bold magenta")
        self._update_static("status-line", text)

    def _render_gpus(self) -> None:
        latest = self.telemetry.latest()
        if latest is not None and latest is self._gpus_from:
            return  # telemetry comes once a second; frames come more often
        self._gpus_from = latest
        table = self.query_one("#gpus", LineTable)
        info = self.telemetry.info()
        names = {g["index"]: g.get("name", "") for g in info.get("gpus") or []}
        readings = (latest or {}).get("gpus") or []
        history = self.telemetry.recent(60)
        ranks_on: dict[int, list[str]] = {}
        for rank in (latest or {}).get("ranks") or []:
            if rank.get("gpu") is not None:
                ranks_on.setdefault(rank["gpu"], []).append(str(rank["rank"]))
        if table.display != bool(readings):
            table.display = bool(readings)
        for reading in readings:
            row = str(reading["index"])
            util_history = [
                next((g.get("util") for g in r.get("gpus") or [] if g.get("index") == reading["index"]), None)
                for r in history
            ]
            mem_pct = (
                100 * reading["mem_used"] / reading["mem_total"]
                if reading.get("mem_used") is not None and reading.get("mem_total")
                else None
            )
            notes = list(reading.get("throttle") or [])
            if reading.get("lost"):
                notes = ["GPU LOST"]
            if reading.get("xid"):
                notes.append("Xid " + ",".join(map(str, reading["xid"])))
            if reading.get("ecc_uncorrected"):
                notes.append(f"ECC {reading['ecc_uncorrected']}")
            power = reading.get("power_w")
            limit = reading.get("power_limit_w")
            cells = {
                "gpu": row,
                "name": names.get(reading["index"], "").removeprefix("Tesla ").removeprefix("NVIDIA ")[:22],
                "util": fmt.bar(reading.get("util"), 8),
                "hist": fmt.sparkline(util_history, 12),
                "mem": fmt.bar(mem_pct, 8, fmt.MEMORY_THRESHOLDS),
                "memgib": fmt.pair(fmt.gib(reading.get("mem_used")), fmt.gib(reading.get("mem_total"))),
                "power": "N/A" if power is None else f"{power:.0f}/{limit:.0f}" if limit else f"{power:.0f}",
                "temp": "N/A" if reading.get("temp_c") is None else f"{reading['temp_c']}C",
                "clock": "N/A" if reading.get("sm_clock_mhz") is None else str(reading["sm_clock_mhz"]),
                "pcie": fmt.pair(fmt.gbps(reading.get("pcie_tx_bps")), fmt.gbps(reading.get("pcie_rx_bps"))),
                "nvlink": fmt.pair(fmt.gbps(reading.get("nvlink_tx_bps")), fmt.gbps(reading.get("nvlink_rx_bps"))),
                "rank": ",".join(ranks_on.get(reading["index"], [])) or "-",
                "notes": Text(", ".join(notes), style="bold red" if reading.get("lost") else "yellow"),
            }
            table.set_row(row, cells)
        host = (latest or {}).get("host")
        line = Text()
        if not readings:
            line.append(f"GPUs: {info.get('nvml', 'no telemetry')}\n", style="yellow")
        if host:
            line.append("Host CPU ")
            line.append_text(fmt.bar(host.get("cpu"), 10))
            line.append("  cores ")
            line.append_text(fmt.sparkline(host.get("per_cpu") or [], len(host.get("per_cpu") or []) or 1))
            line.append(f"  mem {fmt.gib(host.get('mem_used'))}/{fmt.gib(host.get('mem_total'))} GiB")
            if host.get("load"):
                line.append(f"  load {' '.join(f'{v:.2f}' for v in host['load'])}")
            line.append(f"  ddptop {host.get('ddptop_cpu', 0):.0f}%")
        elif not readings:
            line.append("Host: no reading yet")
        self._update_static("host", line)

    def _render_configs(self) -> None:
        table = self.query_one("#configs", DataTable)
        speedups = summary_mod.live_scaling(self.session)
        with self.session.lock:
            states = self.session.ordered_states()
            for state in states:
                self._render_config_row(table, state, speedups.get(state.spec.config_id))

    def _render_config_row(self, table: DataTable, state: ConfigState, scale: dict[str, Any] | None) -> None:
        spec = state.spec
        stats = state.summary()
        status = Text(state.status, style=STATUS_STYLE.get(state.status, ""))
        if state.status in FAILED and state.reason:
            status.append(f" {state.reason[:60]}", style="red")
        cells = {
            "label": spec.label,
            "model": spec.model,
            "bs": str(spec.batch_size),
            "backend": spec.backend,
            "status": status,
            "progress": fmt.bar(100 * state.progress(), 8, (101, 101)),
            "p50": fmt.seconds(stats["sec_iter"]["p50"]) if stats else "-",
            "p75": fmt.seconds(stats["sec_iter"]["p75"]) if stats else "-",
            "p90": fmt.seconds(stats["sec_iter"]["p90"]) if stats else "-",
            "p95": fmt.seconds(stats["sec_iter"]["p95"]) if stats else "-",
            "exs": fmt.rate(stats["ex_sec_total"]["p50"]) if stats else "-",
            "speedup": f"{scale['speedup']:.2f}" if scale else "-",
            "eff": f"{100 * scale['efficiency']:.0f}%" if scale else "-",
            # the share of the step that synchronisation adds (step vs no_sync step), once measured
            "comm": f"{100 * scale['exposed_comm_fraction']:.0f}%"
            if scale and scale.get("exposed_comm_fraction") is not None
            else "-",
        }
        for column, value in cells.items():
            self._set(table, spec.config_id, column, value)

    def _current_state(self) -> ConfigState | None:
        states = self.session.ordered_states()
        running = next((s for s in states if s.status == "running"), None)
        if running is not None:
            return running
        return next((s for s in reversed(states) if s.sample_count()), None)

    def _render_chart(self) -> None:
        """The current configuration's step times per rank, newest on the right (braille, redrawn ≤ 1/s)."""
        state = self._current_state()
        chart = self.query_one("#chart", TextLines)
        size = (chart.size.width, chart.size.height)
        if state is None or size[0] < 20 or size[1] < 3:
            return
        key = (state.spec.config_id, state.revision, size)
        if key == self._chart_key or (
            self._chart_key is not None
            and self._chart_key[0] == key[0]
            and self._chart_key[2] == size
            and time.monotonic() - self._chart_drawn < CHART_PERIOD
        ):
            return
        self._chart_key = key
        self._chart_drawn = time.monotonic()
        ranks = sorted(state.samples)[:8]
        label_width = 9
        rows, low, high = fmt.braille_chart(
            [state.samples[r] for r in ranks], size[0] - label_width - 1, size[1] - 1
        )
        title = Text(f"sec/iter, {state.spec.label} {state.spec.model} bs{state.spec.batch_size} ({state.status}): ")
        for position, rank in enumerate(ranks):
            title.append(f"rank {rank} ", style=fmt.SERIES_STYLES[position % len(fmt.SERIES_STYLES)])
        lines = [title]
        for number, row in enumerate(rows):
            label = f"{high:.4f}s" if number == 0 else f"{low:.4f}s" if number == len(rows) - 1 else ""
            line = Text(f"{label:>{label_width}}│")
            line.append_text(row)
            lines.append(line)
        chart.show(lines)

    def _render_ranks(self) -> None:
        latest = self.telemetry.latest() or {}
        state = self._current_state()
        drawn_from = (latest.get("t"), state and state.spec.config_id, state and state.revision, len(self.session.hellos))
        if drawn_from == self._ranks_from:
            return
        self._ranks_from = drawn_from
        table = self.query_one("#ranks", LineTable)
        by_pid = {r["pid"]: r for r in latest.get("ranks") or []}
        stats = state.summary() if state is not None else None
        medians = (stats or {}).get("rank_medians") or {}
        straggler = (stats or {}).get("straggler")
        processes = self.session.rank_processes(local_only=False)  # other nodes' ranks too, without readings
        sampled_host = (self.session.writer or {}).get("host") or os.uname().nodename
        wanted = [str(p.rank) for p in processes]
        if wanted != table.rows:
            table.clear()
        hosts = {(launch, rank): hello.get("host") for (launch, rank), hello in self.session.hellos.items()}
        for process in processes:
            row = str(process.rank)
            reading = by_pid.get(process.pid, {}) if process.host in ("", sampled_host) else {}
            samples = state.samples.get(process.rank, []) if state is not None else []
            flagged = bool(straggler and straggler["flagged"] and straggler["rank"] == process.rank)
            cells = {
                "rank": row,
                "pid": str(process.pid),
                "host": hosts.get((process.launch, process.rank)) or "-",
                "gpu": "-" if reading.get("gpu") is None else str(reading["gpu"]),
                "cpu": "-" if reading.get("cpu") is None else f"{reading['cpu']:.0f}",
                "rss": fmt.gib(reading.get("rss")),
                "threads": str(reading.get("threads", "-")),
                "last": fmt.seconds(samples[-1]) if samples else "-",
                "median": fmt.seconds(medians.get(row)),
                "mark": Text(f"straggler x{straggler['ratio']:.2f}", style="bold red") if flagged else "",
            }
            table.set_row(row, cells)

    def _render_logs(self) -> None:
        self._last_logs = time.monotonic()
        launches = list(self.session.launches.values())
        if not launches:
            return
        launch = next((l for l in reversed(launches) if l.ended_t is None), launches[-1])
        path = layout.launch_path(self.session.run_dir, launch.name)
        lines = [f"--- {launch.name} (torchrun agent.log and each local rank's stderr, last lines)"]
        lines += [f"[agent] {line}" for line in rundir.tail_lines(layout.agent_log(path), 20)]
        for local_rank, streams in sorted(rundir.worker_logs(path).items()):
            if "stderr" in streams:
                lines += [f"[{local_rank}] {line}" for line in rundir.tail_lines(streams["stderr"], 40)]
        lines = lines[-LOG_LINES:]
        if lines != self._log_text:
            self._log_text = lines
            log = self.query_one("#logs-view", Log)
            log.clear()
            log.write_lines(lines)

    # -- the end ----------------------------------------------------------------------------------------------
    @work(thread=True, exclusive=True, group="finish")
    def _finish_in_background(self) -> None:
        assert self.live is not None
        self.exit_code = self.live.finish()
        self.call_from_thread(self._show_summary)

    def _show_summary(self) -> None:
        if self._summary_shown or self._quitting or self.live is None or self.live.summary is None:
            return  # not while quitting: the screen would mount into an app that is tearing down
        self._summary_shown = True
        self.render_frame()
        self.push_screen(SummaryScreen(self.live.summary, self.live.paths))

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
    def action_quit_run(self) -> None:
        if self.live is not None and self.live.running:
            self._quitting = True
            self.notify("Stopping the ranks and saving the summary…", timeout=10)
            self.live.stop()
            self._quit_when_finished()
            return
        self.exit(self.exit_code if self.live is not None else 0)

    @work(thread=True, exclusive=True, group="quit")
    def _quit_when_finished(self) -> None:
        assert self.live is not None
        code = self.live.finish()
        self.call_from_thread(self.exit, code)

    def action_save(self) -> None:
        if self.live is None:
            self.notify(self._not_yours())
            return
        paths = self.live.save_now()
        self.notify(f"Saved {_display_path(paths['json'])}")

    def _not_yours(self) -> str:
        who = self.recorded.writer if self.recorded is not None else "the ddptop that ran it"
        return f"Only looking: saving, skipping and stopping belong to the ddptop running the sweep ({who})."

    def action_skip(self) -> None:
        if self.live is None:
            self.notify(self._not_yours())
            return
        if not self.live.running:
            self.notify("No configuration is running.")
            return
        self.live.skip()
        self.notify("Skipping the running configuration…")

    def action_pause(self) -> None:
        self.paused = not self.paused
        self.notify("Display paused (the sweep goes on)" if self.paused else "Display resumed")
        if not self.paused:
            self.render_frame()
        else:
            self._render_status()

    def action_results(self) -> None:
        if self.live is not None and self.live.summary is not None:
            summary, paths = self.live.summary, self.live.paths
        elif self.recorded is not None and self.recorded.final_summary() is not None:
            summary, paths = self.recorded.summary, self.recorded.paths
        else:
            self.session.refresh()
            summary, paths = summary_mod.build_summary(self.session), None
        self.push_screen(SummaryScreen(summary, paths))

    def action_screenshot(self) -> None:
        path = self.save_screenshot(path=self.screenshot_dir)
        self.notify(f"Screenshot: {_display_path(path)}")

    def action_panel(self, panel: str) -> None:
        tab = {"overview": "overview", "ranks": "ranks-tab", "topology": "topology-tab", "logs": "logs-tab"}[panel]
        self.query_one(TabbedContent).active = tab

    def action_help(self) -> None:
        self.push_screen(HelpScreen())
