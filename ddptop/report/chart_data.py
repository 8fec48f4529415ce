"""What a chart is handed: plain numbers, read from the summary's estimates in one place.

The chart libraries (plotext in the summary screen, matplotlib in ``plots``) are untyped and take anything;
an ``Estimate`` handed to one as a number fails only when the chart is drawn, in front of the user. So the
boundary is typed on this side: ``plotted`` is the one function that reads an estimate's value and interval
for a chart, the series below are built with it alone, and the two protocols (``PlotCanvas`` for plotext,
``Axes`` for matplotlib) declare the calls ddptop makes with ``Sequence[float]`` where a chart takes
numbers, so that the type checker refuses anything else on its way in (``tests/test_types.py``).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from ddptop.records import Estimate
from ddptop.report.schema import ProjectionPoint, ScalingRow, ScalingTable, Summary


@dataclass(frozen=True)
class Plotted:
    """One point of a chart: where it lies (``x``, ``y``) and its 95% interval (``low``, ``high``), or None
    where the figure has none."""
    x: float
    y: float
    low: float | None = None
    high: float | None = None

    @property
    def has_interval(self) -> bool:
        return self.low is not None and self.high is not None


def plotted(x: float, figure: Estimate | None, scale: float = 1.0) -> Plotted | None:
    """A figure as a chart's point, ``scale`` applied to its value and interval alike (100 for a percentage);
    None where there is no figure or its value is not a finite number (a chart has nowhere to put it)."""
    if figure is None or not math.isfinite(figure.value):
        return None
    low, high = (None, None) if figure.ci is None else (scale * figure.ci[0], scale * figure.ci[1])
    if low is not None and high is not None and not (math.isfinite(low) and math.isfinite(high)):
        low = high = None
    return Plotted(float(x), scale * figure.value, low, high)


def xs(points: Sequence[Plotted]) -> list[float]:
    return [p.x for p in points]


def ys(points: Sequence[Plotted]) -> list[float]:
    return [p.y for p in points]


def error_bars(points: Sequence[Plotted]) -> list[list[float]] | None:
    """matplotlib's ``yerr`` for the points' intervals (distances below and above each point); a point without
    one gets no bar (NaN), not a zero-length one; None when no point has one."""
    if not any(p.has_interval for p in points):
        return None
    nan = float("nan")
    below = [max(0.0, p.y - p.low) if p.low is not None and p.high is not None else nan for p in points]
    above = [max(0.0, p.high - p.y) if p.low is not None and p.high is not None else nan for p in points]
    return [below, above]


def points_of(pairs: Sequence[tuple[float, Estimate | None]], scale: float = 1.0) -> list[Plotted]:
    """The points of (x, figure) pairs that have a figure to draw."""
    return [p for x, figure in pairs if (p := plotted(x, figure, scale)) is not None]


@dataclass(frozen=True)
class SpeedupSeries:
    """One scaling table as a chart's series: its measured speedups and, beyond the node, the projection's
    (a model, drawn from the last measured point, with its range as the interval)."""
    label: str
    table: ScalingTable
    measured: list[Plotted]
    projected: list[Plotted]

    @property
    def projected_line(self) -> list[Plotted]:
        """The projection's line: from the last measured point on, so that it reads as a continuation."""
        return [*self.measured[-1:], *self.projected] if self.projected else []


def _speedups(points: Sequence[ScalingRow | ProjectionPoint]) -> list[Plotted]:
    return points_of([(p.world_size, p.speedup) for p in points])


def speedup_series(summary: Summary, tables: Sequence[ScalingTable] | None = None) -> list[SpeedupSeries]:
    """Every scaling table with a measured row as a series of the speedup chart (``tables``: those to draw,
    the summary's by default)."""
    chosen = summary.scaling if tables is None else tables
    return [SpeedupSeries(table.series_label(), table, _speedups(table.rows),
                          _speedups(table.projection.points if table.projection else []))
            for table in chosen if table.rows]


def world_sizes(series: Sequence[SpeedupSeries]) -> list[int]:
    """The world sizes a speedup chart marks on its axis: 1 and every one measured or projected."""
    return sorted({1, *(int(p.x) for s in series for p in (*s.measured, *s.projected)),
                   *(r.world_size for s in series for r in s.table.rows)})


def highest(series: Sequence[SpeedupSeries]) -> float:
    """The highest speedup any point or interval of the series reaches (1 at least)."""
    return max([1.0] + [max(p.y, p.high if p.high is not None else p.y)
                        for s in series for p in (*s.measured, *s.projected)])


INTERVAL_ROOM = 2.0  # an interval is drawn up to this many times the highest point (or perfect scaling)


def axis_top(series: Sequence[SpeedupSeries], largest: int) -> float:
    """The top of a speedup chart's axis: every point and perfect scaling up to ``largest``, and the intervals up
    to ``INTERVAL_ROOM`` times that. A run of few steps has intervals many times its points: drawn whole, they
    would squash the points and the perfect line to the floor; beyond the top they run off the chart."""
    points = max([float(largest)] + [p.y for s in series for p in (*s.measured, *s.projected)])
    return max(points, min(highest(series), INTERVAL_ROOM * points)) * 1.1


class PlotCanvas(Protocol):
    """The calls the summary screen makes of plotext (``PlotextPlot.plt``, a plotext figure), numbers typed."""

    def title(self, label: str) -> None: ...
    def xlabel(self, label: str) -> None: ...
    def plot(self, x: Sequence[float], y: Sequence[float], *, marker: str = ..., color: str = ...,
             label: str = ...) -> None: ...
    def xticks(self, ticks: Sequence[float], labels: Sequence[str]) -> None: ...
    def ylim(self, lower: float, upper: float) -> None: ...
    def xlim(self, lower: float, upper: float) -> None: ...


class Axes(Protocol):
    """The calls ``plots`` makes of a matplotlib ``Axes``, numbers typed (the rest passes as matplotlib's
    own keywords)."""

    containers: Any

    def plot(self, x: Sequence[float], y: Sequence[float], **style: Any) -> Any: ...
    def errorbar(self, x: Sequence[float], y: Sequence[float], *, yerr: Sequence[Sequence[float]] | None = None,
                 **style: Any) -> Any: ...
    def scatter(self, x: Sequence[float], y: Sequence[float], **style: Any) -> Any: ...
    def bar(self, x: Sequence[float], height: Sequence[float], *, bottom: Sequence[float] | None = None,
            **style: Any) -> Any: ...
    def axhline(self, y: float, **style: Any) -> Any: ...
    def axvline(self, x: float, **style: Any) -> Any: ...
    def annotate(self, text: str, xy: tuple[float, float], **style: Any) -> Any: ...
    def set(self, **properties: Any) -> Any: ...
    def set_xscale(self, scale: str, **options: Any) -> Any: ...
    def set_xticks(self, ticks: Sequence[float], labels: Sequence[str] | None = None, **options: Any) -> Any: ...
    def grid(self, **options: Any) -> Any: ...
    def legend(self, **options: Any) -> Any: ...


def draw_speedup(plt: PlotCanvas, summary: Summary, colors: Sequence[str]) -> None:
    """The summary screen's speedup chart on a plotext figure: each table's measured speedups with their 95%
    intervals as bars, its projection beyond the node (its own marker, in the legend), perfect scaling, and
    ticks at the world sizes run."""
    plt.title("speedup vs N")
    plt.xlabel("N")
    series = speedup_series(summary)
    for index, line in enumerate(series):
        color = colors[index % len(colors)]
        if not line.measured:  # no speedup to draw (examples not counted): plotext cannot label an empty line
            continue
        plt.plot(xs(line.measured), ys(line.measured), marker="dot", color=color, label=line.label)
        for point in (*line.measured, *line.projected):  # the 95% interval (the projection's range), a bar
            if point.low is not None and point.high is not None:
                plt.plot([point.x, point.x], [point.low, point.high], marker="│", color=color)
        if line.projected:  # a model, not a measurement: its own marker, said in the legend
            plt.plot(xs(line.projected_line), ys(line.projected_line), marker="x", color=color,
                     label=f"{line.label} projected")
    sizes = world_sizes(series)
    largest = sizes[-1]
    plt.plot([1.0, float(largest)], [1.0, float(largest)], color="gray", label="perfect")
    plt.xticks([float(n) for n in sizes], [str(n) for n in sizes])  # the world sizes run, not a continuous axis
    plt.ylim(0.0, axis_top(series, largest))
    plt.xlim(0.5, largest + 0.5)


def ascii_speedup_lines(summary: Summary, width: int, height: int) -> list[str]:
    """The speedup chart in characters (``--ascii``): 'o' measured (a letter per table past the first), '|' its
    95% interval, 'x' the projection, '.' perfect scaling; ticks at the world sizes, a legend below (in the
    tables' own words: the view transliterates them)."""
    marks = "oabcdefghijk"
    series = speedup_series(summary)
    label_width, plot_w, plot_h = 6, max(4, width - 8), max(3, height - 4)
    sizes = world_sizes(series)
    # the axis as measured: a projection above it is drawn at its top
    top = axis_top([dataclasses.replace(s, projected=[]) for s in series], sizes[-1])
    grid = [[" "] * plot_w for _ in range(plot_h)]

    def col(n: float) -> int:
        return min(plot_w - 1, max(0, round((n - 0.5) / (sizes[-1]) * (plot_w - 1))))

    def row(v: float) -> int:
        return min(plot_h - 1, max(0, plot_h - 1 - round(v / top * (plot_h - 1))))

    for x in range(plot_w):  # perfect scaling: speedup = N
        n = 0.5 + x * sizes[-1] / max(1, plot_w - 1)
        if n <= top:
            grid[row(n)][x] = "."
    for index, line in enumerate(series):
        for point in (*line.measured, *line.projected):  # the intervals first, the marks over them
            if point.low is not None and point.high is not None:
                for y in range(row(point.high), row(point.low) + 1):
                    grid[y][col(point.x)] = "|"
        for point in line.projected:
            grid[row(point.y)][col(point.x)] = "x"
        for point in line.measured:
            grid[row(point.y)][col(point.x)] = marks[index % len(marks)]
    lines = ["speedup vs N".center(width).rstrip()]
    for y in range(plot_h):
        label = f"{top * (plot_h - 1 - y) / (plot_h - 1):.2f}" if y in (0, plot_h // 2, plot_h - 1) else ""
        lines.append(f"{label:>{label_width}} |" + "".join(grid[y]))
    axis = [" "] * plot_w
    ticks = [" "] * plot_w
    for n in sizes:
        axis[col(n)] = "+"
        for offset, char in enumerate(str(n)):
            if col(n) + offset < plot_w:
                ticks[col(n) + offset] = char
    lines.append(" " * label_width + " +" + "".join(axis).replace(" ", "-"))
    lines.append(" " * (label_width + 2) + "".join(ticks) + "  N")
    legend = [f"{marks[i % len(marks)]} {line.label}" for i, line in enumerate(series)]
    lines.append("  ".join(legend + [". perfect", "x projected", "| 95% interval"]))
    return lines


def plotext_figure() -> Any:
    """A plotext figure of its own (not plotext's module-wide one), as the summary screen's widget holds."""
    from plotext._figure import _figure_class  # plotext's figure class, as textual-plotext takes it

    return _figure_class()
