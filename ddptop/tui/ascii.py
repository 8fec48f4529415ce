"""``--ascii``: the whole view in ASCII (no braille, block or box-drawing character), for a serial console,
an old terminal or a font without those glyphs.

ddptop's own cells switch through ``format.use_ascii``; Textual's chrome through its own extension points:
the scrollbar renderer class (``ScrollBar.renderer``), the tab underline's bar characters, the header's icon
and title separator (``App.format_title``), the command palette's icon and placeholder, and CSS (ascii.tcss)
for the footer's, the help's and the palette's borders.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

from textual.command import CommandPalette, SearchIcon
from textual.content import Content
from textual.renderables.bar import Bar
from textual.scrollbar import ScrollBar, ScrollBarRender

from ddptop.report import chart_data
from ddptop.report.schema import Summary
from ddptop.tui import format as fmt

CSS_PATH = Path(__file__).with_name("ascii.tcss")  # absolute: apps in other modules add it to theirs
HEADER_ICON = "*"


class AsciiScrollBarRender(ScrollBarRender):
    """The thumb in colour alone, without the block characters Textual draws its ends with."""

    VERTICAL_BARS = [" "] * 8
    HORIZONTAL_BARS = [" "] * 8


class AsciiCommandPalette(CommandPalette):
    """Textual's command palette (ctrl+p) without its magnifier glyph and the ellipsis of its placeholder."""

    def __init__(self, providers: Any = None, placeholder: str = "Search for commands...",
                 id: str | None = None) -> None:  # noqa: A002 - Textual's own keyword
        super().__init__(providers, id=id, placeholder=placeholder)

    def on_mount(self) -> None:
        for icon in self.query(SearchIcon):
            icon.icon = ">"


def use_ascii() -> None:
    """Switch this process's view to ASCII (before the app starts)."""
    fmt.use_ascii()
    ScrollBar.renderer = AsciiScrollBarRender
    Bar.HALF_BAR_LEFT = Bar.BAR = Bar.HALF_BAR_RIGHT = "-"


def format_title(title: str, sub_title: str) -> Content:
    """The header's title and subtitle, joined by an ASCII dash (Textual's own uses an em dash)."""
    return Content(fmt.ascii_of(f"{title} - {sub_title}" if sub_title else title))


def speedup_lines(summary: Summary, width: int, height: int) -> list[str]:
    """The summary's speedup against N in ASCII: 'o' measured (a letter per table past the first), '|' its
    95% interval, 'x' the projection, '.' perfect scaling; ticks at the world sizes, a legend below."""
    marks = "oabcdefghijk"
    series = chart_data.speedup_series(summary)
    label_width, plot_w, plot_h = 6, max(4, width - 8), max(3, height - 4)
    sizes = chart_data.world_sizes(series)
    measured = [dataclasses.replace(s, projected=[]) for s in series]  # the axis as measured: a projection clips
    top = max(float(sizes[-1]), chart_data.highest(measured)) * 1.1
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
        for point in (*line.measured, *line.projected):  # the 95% interval (the projection's range) first, marks over it
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
    lines.append(fmt.ascii_of("  ".join(legend + [". perfect", "x projected", "| 95% interval"])))
    return lines
