"""The screens pushed over the live view: the key help and the summary (tables, speedup chart, saved paths)."""

from __future__ import annotations

import os
import re
from typing import Any

from rich.table import Table
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, HorizontalScroll, ScrollableContainer, Vertical
from textual.screen import ModalScreen, Screen
from textual.widgets import Header, Static

from ddptop.control import display_path
from ddptop.report import chart_data, sections, trace_tables
from ddptop.report.schema import Summary, Trace
from ddptop.tui import ascii
from ddptop.tui import format as fmt
from ddptop.tui.footer import FittingFooter
from ddptop.tui.lines import TextLines


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, keys: list[Any]) -> None:
        super().__init__()
        self.app_keys = keys  # the app's bindings, listed as they are

    def compose(self) -> ComposeResult:
        rows = "\n".join(
            f"  {b.key_display or b.key:<10} {b.description}" for b in self.app_keys
            if isinstance(b, Binding) and b.description  # a key without words is another's stand-in
        )
        text = ("ddptop keys\n\n" + rows + "\n\n  ctrl+p     command palette (every action by name)\n\n"
                "Esc closes this help.")
        yield Static(fmt.ascii_of(text) if fmt.ASCII else text, id="help")


class TracesScreen(ModalScreen[None]):
    """Each traced configuration: its breakdown, top kernels, cost, and where its trace files are (to open in
    Perfetto or chrome://tracing)."""

    BINDINGS = [Binding("escape,q,x", "dismiss", "Close")]
    # here rather than in a stylesheet: the summary viewer (SummaryApp) pushes it too, without the app's
    DEFAULT_CSS = """
    TracesScreen { align: center middle; }
    #traces { width: 90%; height: 90%; border: round $accent; padding: 0 1; background: $panel; }
    """

    def __init__(self, traced: list[tuple[str, Trace]], run_dir: str | None) -> None:
        super().__init__()
        self.traced = traced  # (configuration heading, its trace as the summary holds it)
        self.run_dir = run_dir

    def compose(self) -> ComposeResult:
        # no markup: kernel and op names (a user's record_function among them) hold brackets of their own
        yield ScrollableContainer(Static(traces_text(self.traced, self.run_dir), id="traces-text", markup=False),
                                  id="traces")


def traces_text(traced: list[tuple[str, Trace]], run_dir: str | None) -> str:
    """What the traces screen shows, in plain text."""
    if not traced:
        body = ("No trace yet: a configuration is traced after its measured steps (--trace-steps; --no-trace "
                "turns it off).")
    else:
        body = "\n\n".join(heading + "\n" + "\n".join("  " + line for line in trace_tables.detail_lines(trace, run_dir))
                           for heading, trace in traced)
    text = (f"Profiler traces\n\n{body}\n\n{trace_tables.OPEN_NOTE.format(run=display_path(run_dir or 'RUN_DIR'))}"
            "\n\nEsc closes this.")
    return fmt.ascii_of(text) if fmt.ASCII else text


class SummaryScreen(Screen[None]):
    """The scaling tables, speedup against perfect scaling, the recommendation, and where files went. The
    speedup chart only where some table has two world sizes or more (a projection counts): with one, the
    text has the whole width."""

    # A class default, not set on mount: a title changed after mount schedules a Header update that can
    # land after a quick "q" has already torn the Header down.
    TITLE = "ddptop: summary"
    # Beside the tables from CHART_BESIDE columns on; below that the chart takes the whole screen on a key
    # (g) instead of squeezing the tables, which scroll sideways rather than being cut.
    CHART_BESIDE = 120
    CSS_PATH = "summary.tcss"

    BINDINGS = [
        Binding("escape", "back", "Back"),
        Binding("q", "app.quit_run", "Quit"),
        Binding("t", "app.screenshot", "Screenshot"),
        Binding("g", "chart", "Chart/tables"),
        Binding("x", "traces", "Traces"),
    ]

    def __init__(
        self, summary: Summary, paths: dict[str, str] | None, note: str | None = None,
        with_topology: bool = False,
        alone: bool = False,
    ) -> None:
        super().__init__()
        self.alone = alone  # the app shows nothing else: leaving this screen leaves the app
        self.summary = summary
        self.paths = paths
        self.note = note
        self.with_topology = with_topology  # a lone summary.json has no Topology panel to show it
        self.with_chart = has_speedup_chart(summary)
        self._scroll_hints: list[tuple[HorizontalScroll, Static]] = []

    def compose(self) -> ComposeResult:
        # the layout for the terminal's width from the first frame: a resize arrives only after it is drawn,
        # and a slow link would show the wide layout, overlapping, until then
        self._fit_layout(self.app.size.width)
        yield Header(show_clock=False, icon=ascii.HEADER_ICON if fmt.ASCII else None)
        with Horizontal(id="summary-body"):
            with ScrollableContainer(id="summary-text"):
                with Vertical(id="summary-tables"):
                    # sentences wrap to the window; a table keeps its columns and scrolls sideways instead
                    text = self._text()
                    for kind, indent, block in text_blocks(fmt.ascii_text(text) if fmt.ASCII else text):
                        if kind in (PROSE, KEYED):
                            prose = KeyedLines(block) if kind == KEYED else Static(block, classes="prose")
                            prose.styles.padding = (0, 0, 0, indent)  # a wrapped line keeps its indent
                            yield prose
                        else:
                            scroller = HorizontalScroll()
                            hint = Static(fmt.ascii_of(SCROLL_HINT) if fmt.ASCII else SCROLL_HINT, classes="scroll-hint")
                            self._scroll_hints.append((scroller, hint))
                            with scroller:
                                yield Static(block, classes="table")
                            yield hint
            if self.with_chart:
                yield AsciiSpeedupChart(self.summary, id="speedup-chart") if fmt.ASCII else _plot()(id="speedup-chart")
        yield FittingFooter()

    def plain_text(self) -> str:
        """Every block's text, in order (what the screen shows, before wrapping)."""
        return "".join(w.text.plain + "\n" if isinstance(w, KeyedLines) else str(w.render()) + "\n"
                       for w in self.query("#summary-tables > .prose, .table"))

    def _text(self) -> Text:
        out = Text()
        status = "complete" if self.summary.complete else "incomplete (stopped before the end)"
        out.append(f"Sweep {status}\n", style="bold")
        if self.note:
            out.append(self.note + "\n", style="yellow")
        if self.paths:
            if self.paths.get("save_error"):  # a full disk or quota: where it went, and how to write it later
                out.append(sections.saved_line(self.summary, self.paths).splitlines()[0] + "\n", style="bold yellow")
            out.append("Saved: ", style="bold")
            shown = [self.paths[k] for k in ("json", "md", "csv", "plots") if self.paths.get(k)]
            out.append(saved_paths(shown) + "\n")
            if self.paths.get("plots_error"):
                out.append(f"Plots not drawn: {self.paths['plots_error']}\n", style="yellow")
        out.append("\n")
        for heading, body, style in sections.screen_sections(self.summary, self.with_topology):
            if heading is not None:
                out.append(heading, style=style)
            out.append(body)
        return out

    def on_mount(self) -> None:
        if fmt.ASCII or not self.with_chart:
            return  # the ASCII chart draws itself at its size
        chart_data.draw_speedup(self.query_one("#speedup-chart", _plot()).plt, self.summary, CHART_COLORS)

    def _fit_layout(self, width: int) -> None:
        self.set_class(width < self.CHART_BESIDE, "narrow")

    def on_resize(self, event: Any) -> None:
        self._fit_layout(event.size.width)
        self.call_after_refresh(self._show_scroll_hints)

    def _show_scroll_hints(self) -> None:
        """Under each table wider than its window, the line that says it scrolls."""
        for scroller, hint in self._scroll_hints:
            hint.set_class(scroller.virtual_size.width > scroller.scrollable_content_region.width, "shown")

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.with_chart or action != "chart"  # no chart, no key for it in the footer

    def action_chart(self) -> None:
        """In a narrow terminal: the speedup chart over the whole screen, or the tables again."""
        if self.has_class("narrow"):
            self.toggle_class("chart-only")
        else:
            self.notify("the chart is beside the tables at this width", timeout=2)

    def action_traces(self) -> None:
        traced = [(f"{e.config_id}", e.trace) for e in self.summary.configs if e.trace is not None]
        self.app.push_screen(TracesScreen(traced, self.summary.run_dir))

    def action_back(self) -> None:
        if len(self.app.screen_stack) <= 2 and self.alone:
            self.app.exit(0)  # nothing behind it
            return
        self.app.pop_screen()


def has_speedup_chart(summary: Summary) -> bool:
    """Whether a speedup chart says anything: some table has two world sizes or more, measured or projected
    (one world size is one point at speedup 1)."""
    return any(
        len({r.world_size for r in table.rows}
            | {p.world_size for p in (table.projection.points if table.projection else [])}) > 1
        for table in summary.scaling
    )


def saved_paths(paths: list[str]) -> str:
    """The saved files as one sentence that wraps, the first by a path that opens it from here and the others
    beside it by name where they share its directory ("out/run/summary.json, and beside it summary.md,
    plots/"); each by its path where they do not."""
    if not paths:
        return "nothing"
    shown = [display_path(p) for p in paths]

    def named(path: str, name: str) -> str:
        return name + (os.sep if os.path.isdir(path) else "")  # plots/ is a folder

    folder = os.path.dirname(shown[0])
    if len(shown) > 1 and all(os.path.dirname(p) == folder for p in shown):
        beside = ", ".join(named(p, os.path.basename(p)) for p in shown[1:])
        return f"{named(shown[0], shown[0])}, and beside it {beside}"
    return ", ".join(named(p, p) for p in shown)


PROSE, KEYED, TABLE = "prose", "keyed", "table"
SCROLL_HINT = "  ◂ ▸ wider than the window: Tab to the table, then ← →"
_GAP = re.compile(r" {2,}")


def _line_kind(words: str) -> str:
    """A table line has two spaces or more between words (aligned columns); a sentence has one; a keyed line
    is a key, such a gap, then a sentence of two words or more ("resnet18/ddp/bs4/n2  compute only ...")."""
    cells = _GAP.split(words)
    if len(cells) == 1:
        return PROSE
    return KEYED if len(cells) == 2 and " " in cells[1] else TABLE


def text_blocks(text: Text) -> list[tuple[str, int, Text]]:
    """The summary's text cut into runs of prose lines, of keyed lines (each of one indent, taken off) and
    of table lines, in order, styles kept: (kind, indent, text)."""
    blocks: list[tuple[str, int, list[Text]]] = []
    for line in text.split("\n", allow_blank=True):
        words = line.plain.strip()
        kind = _line_kind(words)
        indent = len(line.plain) - len(line.plain.lstrip(" ")) if kind != TABLE and words else 0
        if kind != TABLE:
            line = line[indent:]
        if blocks and blocks[-1][:2] == (kind, indent):
            blocks[-1][2].append(line)
        else:
            blocks.append((kind, indent, [line]))
    return [(kind, indent, Text("\n").join(lines)) for kind, indent, lines in blocks]


class KeyedLines(Static):
    """Lines of a key and a sentence: the keys keep their column, each sentence wraps beside its key."""

    def __init__(self, text: Text) -> None:
        grid = Table.grid(padding=(0, 0, 0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(ratio=1)
        for line in text.split("\n"):
            gap = _GAP.search(line.plain)
            if gap is None:
                continue
            grid.add_row(line[: gap.start()], line[gap.end() :])
        super().__init__(grid, classes="prose")
        self.text = text  # what it says, unwrapped


class AsciiSpeedupChart(TextLines):
    """The speedup chart in ASCII (``--ascii``), drawn again at each size."""

    def __init__(self, summary: Summary, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.summary = summary

    def on_resize(self) -> None:
        if self.size.width and self.size.height:
            self.show([Text(line) for line in ascii.speedup_lines(self.summary, self.size.width, self.size.height)])


# the live chart's series colours that plotext also names (its grey is the perfect-scaling line's)
CHART_COLORS = fmt.SERIES_STYLES[:6]


def _plot() -> Any:
    """The chart widget, imported when the summary screen is first shown: the live view starts without it."""
    from textual_plotext import PlotextPlot

    return PlotextPlot
