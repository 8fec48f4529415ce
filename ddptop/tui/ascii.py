"""``--ascii``: the whole view in ASCII (no braille, block or box-drawing character), for a serial console,
an old terminal or a font without those glyphs.

ddptop's own cells switch through ``format.use_ascii``; Textual's chrome through its own extension points:
the scrollbar renderer class (``ScrollBar.renderer``), the tab underline's bar characters, the header's icon
and title separator (``App.format_title``), the command palette's icon and placeholder, and CSS (ascii.tcss)
for the footer's, the help's and the palette's borders.
"""

from __future__ import annotations

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
    """The summary's speedup chart in ASCII (``chart_data.ascii_speedup_lines``), its legend transliterated."""
    return [fmt.ascii_of(line) for line in chart_data.ascii_speedup_lines(summary, width, height)]
