"""What a chart is handed: plain numbers, read from the summary's estimates in one place.

The chart libraries (plotext in the summary screen, matplotlib in ``plots``) are untyped and take anything;
an ``Estimate`` handed to one as a number fails only when the chart is drawn, in front of the user. So the
boundary is typed on this side: ``plotted`` is the one function that reads an estimate's value and interval
for a chart, the series below are built with it alone, and the two protocols (``PlotCanvas`` for plotext,
``Axes`` for matplotlib) declare the calls ddptop makes with ``Sequence[float]`` where a chart takes
numbers, so that the type checker refuses anything else on its way in (``tests/test_types.py``).
"""

from __future__ import annotations

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


class PlotCanvas(Protocol):
    """The calls the summary screen makes of plotext (``PlotextPlot.plt``), numbers typed."""

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
