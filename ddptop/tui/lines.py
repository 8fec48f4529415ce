"""Widgets drawn through Textual's line API: the streaming chart and the tables refreshed every second.

On a slow core, Textual's general pipeline costs: a Static redraw goes Text -> Content -> strips (about
35 ms for a 150x20 braille chart), and any DataTable.update_cell re-renders every cell of the table (about
30 ms for 8 GPUs x 13 columns), each once a second. Here a line is one Strip of a few segments, one per
styled run, built when its content changes and handed to the compositor as is: benchmarks/tui_cost.py
measured the view's CPU fall from 8.8% to 3.8% of a core with both.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual.geometry import Region, Size
from textual.scroll_view import ScrollView
from textual.strip import Strip
from textual.widget import Widget

from ddptop.tui import format as fmt

_CONSOLE = Console(width=10_000, color_system="truecolor", legacy_windows=False)  # for overlapping spans


def text_segments(text: Text) -> list[Segment]:
    """The segments of a one-line Text, its own style under its spans' (rich's ``Text.render`` drops the
    Text's style when it has no spans); neighbours of one style are joined, so each run is one escape."""
    spans = sorted(text.spans, key=lambda s: s.start)
    if any(a.end > b.start for a, b in zip(spans, spans[1:])):
        return list(Segment.simplify(text.render(_CONSOLE, end="")))  # nested styles: let rich combine them
    base = _style(text.style) if text.style else None
    plain = text.plain
    segments, position = [], 0
    for span in spans:
        if span.start > position:
            segments.append(Segment(plain[position : span.start], base))
        style = _style(span.style)
        segments.append(Segment(plain[span.start : span.end], base + style if base else style))
        position = max(position, span.end)
    if position < len(plain):
        segments.append(Segment(plain[position:], base))
    return list(Segment.simplify(segments))


_PARSED: dict[str, Style] = {}  # a chart redraw names the same few styles a thousand times


def _style(style: str | Style) -> Style:
    if isinstance(style, Style):
        return style
    parsed = _PARSED.get(style)
    if parsed is None:
        parsed = _PARSED[style] = Style.parse(style)
    return parsed


class TextLines(Widget):
    """Lines of styled text, cropped or padded to the widget's width; nothing is wrapped."""

    def __init__(self, *, id: str | None = None) -> None:  # noqa: A002 - Textual's own keyword
        super().__init__(id=id)
        self._lines: list[list[Segment]] = []
        self._shown_size = Size(0, 0)
        self._pass: tuple[int, Style] | None = None

    def show(self, lines: list[Text]) -> None:
        """Only the lines that changed are drawn again (a terminal is sent every cell of a redrawn line)."""
        new = [text_segments(fmt.ascii_text(line) if fmt.ASCII else line) for line in lines]
        old, self._lines = self._lines, new
        if len(old) != len(new) or self._shown_size != self.size:  # laid out anew: every line
            self._shown_size = self.size
            self.refresh()
            return
        for y, (before, now) in enumerate(zip(old, new)):
            if before != now:
                self.refresh(Region(0, y, self.size.width, 1))

    def _lookups(self) -> tuple[int, Style]:
        return self.size.width, self.rich_style

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass = self._lookups()  # once per redraw, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        width, base = self._pass or self._lookups()
        if y >= len(self._lines):
            return Strip.blank(width, base)
        return Strip(self._lines[y]).apply_style(base).crop_extend(0, width, base)


KEEP = 100  # a column priority never dropped
HINT_WIDTH = 4  # "+N" after the header when columns are hidden


class LineTable(ScrollView, can_focus=False):
    """A read-only table with fixed column widths: rows keyed, cells str or Text, header always on top.

    Only rows whose cells changed are drawn again. In a narrow window whole columns are dropped by priority
    (the header ends with "+N", the number hidden); what still does not fit scrolls sideways.
    """

    COMPONENT_CLASSES = {"line-table--header", "line-table--even-row"}
    DEFAULT_CSS = """
    LineTable {
        height: auto;
        max-height: 100%;
        background: $surface;
        color: $foreground;
        & > .line-table--header { text-style: bold; background: $panel; color: $foreground; }
        & > .line-table--even-row { background: $surface-lighten-1 50%; }
        &:dark > .line-table--even-row { background: $surface-darken-1 40%; }
    }
    """

    def __init__(self, columns: Sequence[tuple[Any, ...]], *, zebra_stripes: bool = False,
                 id: str | None = None) -> None:  # noqa: A002 - Textual's own keyword
        super().__init__(id=id)
        # (key, label, width[, priority]): in a narrow window the lowest priorities go first, whole columns
        # rather than values cut at the edge; without one a column is kept as long as any is
        self.all_columns = [(c[0], c[1], c[2], c[3] if len(c) > 3 else KEEP) for c in columns]
        self.zebra_stripes = zebra_stripes
        self._keys: list[str] = []
        self._cells: dict[str, dict[str, Any]] = {}
        # row key -> its drawn line, before row and scroll styles (cells carry their own colours, so a theme
        # change does not make it stale)
        self._strips: dict[str, Strip] = {}
        self._pass: tuple[Any, ...] | None = None
        self.every_column = False  # `w`: keep every column, and scroll sideways (focused, with ← →) instead
        self._show_columns(self.all_columns)

    def _show_columns(self, columns: list[tuple[str, str, int, int]]) -> None:
        self.columns = [(key, label, width) for key, label, width, _ in columns]
        self.hidden = len(self.all_columns) - len(columns)
        header = self._line({key: label for key, label, _ in self.columns})
        if self.hidden:  # said where the eye reads the columns: more exist in a wider window
            header = Strip.join([header, Strip([Segment(f"+{self.hidden}", Style(dim=True))])])
        self._header = header
        self._strips.clear()
        self._width = header.cell_length
        self.virtual_size = Size(self._width, len(self._keys) + 1)

    def fit_columns(self, width: int) -> None:
        """Drop the lowest-priority columns until the rest fit ``width`` cells (all back when they fit)."""
        shown = list(self.all_columns)
        while not self.every_column and sum(c[2] + 2 for c in shown) + (
                HINT_WIDTH if len(shown) < len(self.all_columns) else 0) > width:
            droppable = [c for c in shown if c[3] < KEEP]
            if not droppable:
                break  # the rest scroll sideways
            lowest = min(droppable, key=lambda c: (c[3], -shown.index(c)))
            shown.remove(lowest)
        if [c[0] for c in shown] != [c[0] for c in self.columns]:
            self._show_columns(shown)
            self.refresh()
        self._focusable(self.every_column and self._width > width)

    def _focusable(self, wider: bool) -> None:
        """Only a table that scrolls sideways is on the focus chain (Tab skips the ones that fit)."""
        self.can_focus = wider
        if not wider and self.has_focus:
            self.blur()

    def on_resize(self) -> None:
        self.fit_columns(self.scrollable_content_region.width)

    def show_every_column(self, every: bool) -> None:
        """Every column (a table wider than its window takes the focus and scrolls with ← →), or those that
        fit."""
        self.every_column = every
        if self.size.width:  # one on a hidden tab is fitted when it is shown (on_resize)
            self.fit_columns(self.scrollable_content_region.width)
        else:
            self._focusable(every)
        if not every:
            self.scroll_to(x=0, animate=False)

    # -- data ---------------------------------------------------------------------------------------------
    @property
    def row_count(self) -> int:
        return len(self._keys)

    @property
    def rows(self) -> list[str]:
        return list(self._keys)

    def get_cell(self, row: str, column: str) -> Any:
        return self._cells[row][column]

    def set_row(self, key: str, cells: Mapping[str, Any]) -> None:
        """Add the row or change its cells; nothing is drawn again when nothing changed."""
        if key not in self._cells:
            self._keys.append(key)
            self._cells[key] = {}
            self.virtual_size = Size(self._width, len(self._keys) + 1)
            self.refresh()
        row = self._cells[key]
        changed = {c: v for c, v in cells.items() if row.get(c) != v}
        if changed:
            row.update(changed)
            self._strips.pop(key, None)
            self.refresh_line(self._keys.index(key) + 1)  # the row's line alone, below the header

    def clear(self) -> None:
        self._keys, self._cells = [], {}
        self._strips.clear()
        self.virtual_size = Size(self._width, 1)
        self.refresh()

    # -- drawing ------------------------------------------------------------------------------------------
    def _line(self, cells: Mapping[str, Any]) -> Strip:
        segments = []
        for key, _label, width in self.columns:  # one space either side of a cell, as DataTable pads
            value = cells.get(key, "")
            if fmt.ASCII:
                value = fmt.ascii_text(value)
            segments.append(Segment(" "))
            if isinstance(value, str) and cell_len(value) <= width:  # most cells: no Text to build
                segments.append(Segment(value + " " * (width - cell_len(value))))
            else:
                text = value.copy() if isinstance(value, Text) else Text(str(value))
                text.truncate(width, overflow="crop" if fmt.ASCII else "ellipsis", pad=True)
                segments += text_segments(text)
            segments.append(Segment(" "))
        return Strip(Segment.simplify(segments))

    def _lookups(self) -> tuple[Any, ...]:
        base = self.rich_style
        return (
            self.scroll_offset, self.size.width, base,
            base + self.get_component_rich_style("line-table--header"),
            base + self.get_component_rich_style("line-table--even-row"),
        )

    def render_lines(self, crop: Region) -> list[Strip]:
        self._pass = self._lookups()  # once per redraw, not once per line
        return super().render_lines(crop)

    def render_line(self, y: int) -> Strip:
        (scroll_x, scroll_y), width, base, header_style, even_style = self._pass or self._lookups()
        if y == 0:
            return self._header.apply_style(header_style).crop_extend(scroll_x, scroll_x + width, header_style)
        index = y - 1 + scroll_y
        if index >= len(self._keys):
            return Strip.blank(width, base)
        key = self._keys[index]
        strip = self._strips.get(key)
        if strip is None:
            strip = self._strips[key] = self._line(self._cells[key])
        style = even_style if self.zebra_stripes and index % 2 == 0 else base
        return strip.apply_style(style).crop_extend(scroll_x, scroll_x + width, style)
