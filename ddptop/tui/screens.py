"""The screens pushed over the live view: the key help and the summary (tables, speedup chart, saved paths)."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Header, Static

from ddptop.control import display_path
from ddptop.tui import format as fmt


class HelpScreen(ModalScreen[None]):
    BINDINGS = [Binding("escape,q,question_mark,f1", "dismiss", "Close")]

    def __init__(self, keys: list[Any]) -> None:
        super().__init__()
        self.app_keys = keys  # the app's bindings, listed as they are

    def compose(self) -> ComposeResult:
        rows = "\n".join(
            f"  {b.key_display or b.key:<10} {b.description}" for b in self.app_keys if isinstance(b, Binding)
        )
        yield Static(
            "ddptop keys\n\n" + rows + "\n\n  ctrl+p     command palette (every action by name)\n\n"
            "Esc closes this help.",
            id="help",
        )


class SummaryScreen(Screen[None]):
    """The scaling tables, speedup against perfect scaling, the recommendation, and where files went."""

    # A class default, not set on mount: a title changed after mount schedules a Header update that can
    # land after a quick "q" has already torn the Header down.
    TITLE = "ddptop: summary"
    # Beside the tables from CHART_BESIDE columns on; below that the chart takes the whole screen on a key
    # (g) instead of squeezing the tables, which scroll sideways rather than being cut.
    CHART_BESIDE = 120
    DEFAULT_CSS = """
    #summary-text { width: 1fr; }
    #summary-tables { width: auto; }
    #speedup-chart { width: 40%; min-width: 30; }
    SummaryScreen.narrow #speedup-chart { display: none; }
    SummaryScreen.narrow.chart-only #speedup-chart { display: block; width: 100%; }
    SummaryScreen.narrow.chart-only #summary-text { display: none; }
    """

    BINDINGS = [
        Binding("escape", "back", "Back to the sweep"),
        Binding("q", "app.quit_run", "Quit"),
        Binding("t", "app.screenshot", "Screenshot"),
        Binding("g", "chart", "Chart/tables"),
    ]

    def __init__(
        self, summary: dict[str, Any], paths: dict[str, str] | None, note: str | None = None,
        with_topology: bool = False,
        alone: bool = False,
    ) -> None:
        super().__init__()
        self.alone = alone  # the app shows nothing else: leaving this screen leaves the app
        self.summary = summary
        self.paths = paths
        self.note = note
        self.with_topology = with_topology  # a lone summary.json has no Topology panel to show it

    def compose(self) -> ComposeResult:
        yield Header(show_clock=False)
        with Horizontal(id="summary-body"):
            with ScrollableContainer(id="summary-text"):
                yield Static(self._text(), id="summary-tables")
            yield _plot()(id="speedup-chart")
        yield Footer()

    def _text(self) -> Text:
        out = Text()
        status = "complete" if self.summary.get("complete") else "incomplete (stopped before the end)"
        out.append(f"Sweep {status}\n", style="bold")
        if self.note:
            out.append(self.note + "\n", style="yellow")
        if self.paths:
            if self.paths.get("save_error"):  # a full disk or quota: where it went, and how to write it later
                from ddptop.report import sections

                out.append(sections.saved_line(self.summary, self.paths).splitlines()[0] + "\n", style="bold yellow")
            out.append("Saved: ", style="bold")
            shown = [self.paths[k] for k in ("json", "md", "csv", "plots") if self.paths.get(k)]
            out.append("  ".join(display_path(p) for p in shown) + "\n" if shown else "nothing\n")
            if self.paths.get("plots_error"):
                out.append(f"Plots not drawn: {self.paths['plots_error']}\n", style="yellow")
        out.append("\n")
        from ddptop.report import sections  # the report's text: loaded when a summary is shown

        for heading, body, style in sections.screen_sections(self.summary, self.with_topology):
            if heading is not None:
                out.append(heading, style=style)
            out.append(body)
        return out

    def on_mount(self) -> None:
        plot = self.query_one("#speedup-chart", _plot())
        plt = plot.plt
        plt.title("speedup vs N")
        plt.xlabel("N")
        measured: set[int] = {1}
        highest = 1.0
        for index, table in enumerate(self.summary["scaling"]):
            color = CHART_COLORS[index % len(CHART_COLORS)]
            rows = table["rows"]
            if not rows:
                continue
            xs = [r["world_size"] for r in rows]
            measured.update(xs)
            label = f"{table['model']} bs{table['batch_size']}"
            plt.plot(xs, [r["speedup"] for r in rows], marker="dot", color=color, label=label)
            for row in rows:  # the 95% interval, as a vertical bar through the point
                low, high = row.get("speedup_ci") or (None, None)
                if low is not None and high is not None:
                    plt.plot([row["world_size"]] * 2, [low, high], marker="│", color=color)
                    highest = max(highest, high)
            highest = max(highest, *(r["speedup"] for r in rows))
            projected = (table.get("projection") or {}).get("points") or []
            if projected:  # a model, not a measurement: its own marker, said in the legend
                plt.plot([rows[-1]["world_size"]] + [p["world_size"] for p in projected],
                         [rows[-1]["speedup"]] + [p["speedup"] for p in projected], marker="x", color=color,
                         label=f"{label} projected")
                measured.update(p["world_size"] for p in projected)
                highest = max(highest, *(p["speedup"] for p in projected))
        largest = max(measured)
        plt.plot([1, largest], [1, largest], color="gray", label="perfect")
        ticks = sorted(measured)
        plt.xticks(ticks, [str(n) for n in ticks])  # the world sizes run, not a continuous axis
        plt.ylim(0, max(highest, largest) * 1.1)
        plt.xlim(0.5, largest + 0.5)

    def on_resize(self, event: Any) -> None:
        self.set_class(event.size.width < self.CHART_BESIDE, "narrow")

    def action_chart(self) -> None:
        """In a narrow terminal: the speedup chart over the whole screen, or the tables again."""
        if self.has_class("narrow"):
            self.toggle_class("chart-only")
        else:
            self.notify("the chart is beside the tables at this width", timeout=2)

    def action_back(self) -> None:
        if len(self.app.screen_stack) <= 2 and self.alone:
            self.app.exit(0)  # nothing behind it
            return
        self.app.pop_screen()


# the live chart's series colours that plotext also names (its grey is the perfect-scaling line's)
CHART_COLORS = fmt.SERIES_STYLES[:6]


def _plot() -> Any:
    """The chart widget, imported when the summary screen is first shown: the live view starts without it."""
    from textual_plotext import PlotextPlot

    return PlotextPlot
