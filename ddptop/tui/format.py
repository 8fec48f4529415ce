"""Cell text for the TUI: bars, sparklines and the braille chart, with nvitop-like load colours. Rich only, no
Textual. Numbers are written by ``ddptop.units``; the names below keep the screen's choices among its options."""

from __future__ import annotations

from typing import Any, Sequence

from rich.text import Span, Text

from ddptop import units
from ddptop.analysis import stats

SPARK = "▁▂▃▄▅▆▇█"
ASCII_SPARK = "_.,-=+*#"
# --ascii: every character drawn is ASCII (a serial console, an old terminal, a font without braille or
# blocks): bars of '#', sparklines of punctuation, charts of '*' and 'o', and the rest transliterated
ASCII = False
AXIS = "│"
TRANSLITERATION = {
    "±": "+-", "–": "-", "—": "-", "·": "|", "×": "x", "≥": ">=", "≤": "<=", "…": "~", "→": "->", "←": "<-",
    "◂": "<", "▸": ">", "µ": "u", "≈": "~", "°": "", "│": "|", "─": "-", "━": "-", "▏": "|", "’": "'", "✓": "ok",
}


def use_ascii() -> None:
    """Draw with ASCII alone from now on (the whole process: ``--ascii``)."""
    global ASCII, AXIS
    ASCII, AXIS = True, "|"


def ascii_of(text: str) -> str:
    """``text`` in ASCII: known symbols spelled out, anything else outside ASCII as '?'."""
    if text.isascii():
        return text
    return "".join(c if c.isascii() else TRANSLITERATION.get(c, "?") for c in text)


def ascii_text(content: Any) -> Any:
    """A str or a rich Text in ASCII, styles kept (a symbol may take more cells than it did)."""
    if isinstance(content, str):
        return ascii_of(content)
    if not isinstance(content, Text) or content.plain.isascii():
        return content
    plain = content.plain
    cuts = sorted({0, len(plain), *(i for span in content.spans for i in (span.start, span.end) if 0 <= i <= len(plain))})
    out = Text(style=content.style, end=content.end, justify=content.justify, no_wrap=content.no_wrap,
               overflow=content.overflow)
    for start, end in zip(cuts, cuts[1:]):
        piece = ascii_of(plain[start:end])
        at = len(out.plain)
        out.append(piece)
        for span in content.spans:  # in their order: a later span still wins where they overlap
            if span.start <= start and end <= span.end:
                out.stylize(span.style, at, at + len(piece))
    return out


# nvitop's load thresholds: below the first is light (green), below the second moderate (yellow), else heavy.
UTIL_THRESHOLDS = (10, 75)
MEMORY_THRESHOLDS = (10, 80)


def load_style(percent: float | None, thresholds: tuple[int, int] = UTIL_THRESHOLDS) -> str:
    if percent is None:
        return "dim"
    if percent < thresholds[0]:
        return "green"
    if percent < thresholds[1]:
        return "yellow"
    return "red"


def bar(percent: float | None, width: int = 10, thresholds: tuple[int, int] = UTIL_THRESHOLDS) -> Text:
    """A bar with the number after it: ``███▌      42%``."""
    if percent is None:
        return Text("N/A".ljust(width + 5), style="dim")
    percent = max(0.0, min(100.0, percent))
    eighths = round(percent / 100 * width * 8)
    full, part = divmod(eighths, 8)
    if ASCII:
        full, part = round(eighths / 8), 0
    cells = ("#" if ASCII else "█") * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    text = Text(cells.ljust(width), style=load_style(percent, thresholds))
    text.append(f"{percent:4.0f}%")
    return text


def sparkline(values: Sequence[float | None], width: int = 12, top: float | None = 100.0) -> Text:
    """The last ``width`` values as block characters (missing values blank)."""
    recent = list(values)[-width:]
    known = [v for v in recent if v is not None]
    if not known:
        return Text(" " * width)
    ceiling = top if top is not None else max(known) or 1.0
    chars = []
    for value in recent:
        if value is None:
            chars.append(" ")
        else:
            levels = ASCII_SPARK if ASCII else SPARK
            chars.append(levels[min(len(levels) - 1, max(0, int(value / ceiling * (len(levels) - 1) + 0.5)))])
    return Text("".join(chars).rjust(width), style="cyan")


def gib(value: float | None) -> str:
    return units.gib(value)


def gbps(value: float | None) -> str:
    """NVML's bytes/s as GB/s in a column whose header names the unit."""
    return units.gbps(value, from_bytes=True, compact=True, missing=units.NA)


def pair(a: str, b: str) -> str:
    return units.pair(a, b)


def seconds(value: float | None) -> str:
    return units.seconds(value)


def rate(value: float | None) -> str:
    """Examples/s: one decimal below 100, where a slow CPU run would otherwise read 0 or 1."""
    return units.rate(value, digits_below_100=1)


def duration(value: float) -> str:
    return units.duration(value)


BRAILLE_BASE = 0x2800
# dot bit for (column 0..1, row 0..3 from the top) inside one braille cell
BRAILLE_DOTS = ((0x01, 0x02, 0x04, 0x40), (0x08, 0x10, 0x20, 0x80))
SERIES_STYLES = ("cyan", "magenta", "yellow", "green", "blue", "red", "white", "bright_black")


def braille_chart(series: Sequence[Sequence[float]], width: int, height: int) -> tuple[list[Text], float, float]:
    """The last 2·width points of each series as braille dots on a width×height grid, one colour each.

    Returns the rows (top first) and the y range (low, high) they span. Cheap: one pass over the points.
    """
    width, height = max(1, width), max(1, height)
    tails = [list(values[-2 * width :]) for values in series]  # the tail only: a series may be millions long
    points = [v for tail in tails for v in tail]
    if not points:
        return [Text(" " * width) for _ in range(height)], 0.0, 0.0
    low, high = min(points), max(points)
    if high - low < 1e-12:
        low, high = low * 0.95, high * 1.05 + 1e-9
    levels = 4 * height - 1
    cells = [[0] * width for _ in range(height)]
    owner = [[-1] * width for _ in range(height)]
    longest = max(len(tail) for tail in tails)
    stretch = (2 * width - 1) / (longest - 1) if 1 < longest < 2 * width else 1.0  # few points: spread them
    for index, tail in enumerate(tails):
        offset = longest - len(tail)
        for position, value in enumerate(tail):
            x = round((position + offset) * stretch) if stretch != 1.0 else position + 2 * width - len(tail)
            column, half = divmod(min(x, 2 * width - 1), 2)
            level = round((value - low) / (high - low) * levels)
            row, dot = divmod(levels - level, 4)
            cells[row][column] |= BRAILLE_DOTS[half][dot]
            owner[row][column] = index
    rows = []
    for row in range(height):
        # one span per run of cells of the same series, not one per cell: far fewer segments to draw
        plain = "".join(("o" if ASCII else chr(BRAILLE_BASE + bits)) if bits else " " for bits in cells[row])
        spans, start = [], 0
        for column in range(1, width + 1):
            here = owner[row][start] if cells[row][start] else -1
            if column < width and (owner[row][column] if cells[row][column] else -1) == here:
                continue
            if here >= 0:
                spans.append(Span(start, column, SERIES_STYLES[here % len(SERIES_STYLES)]))
            start = column
        rows.append(Text(plain, spans=spans))
    return rows, low, high


BAND_STYLE = "on grey23"  # the p10-p90 band: a background, so the median's dots stay readable on it
MEDIAN_STYLE = "bold cyan"
MEDIAN_ON_BAND_STYLE = f"{MEDIAN_STYLE} {BAND_STYLE}"


def band_chart(series: Sequence[Sequence[float]], width: int, height: int) -> tuple[list[Text], float, float, int]:
    """The steps of every series pooled and cut into ``width`` columns of consecutive steps (newest on the
    right): per column the median as a line of braille dots over the p10-p90 band as a shaded background.

    Returns the rows (top first), the y range (low, high) and the steps per column. The range is the band's,
    so one slow outlier does not flatten the rest (the per-rank view shows every point).
    """
    width, height = max(1, width), max(1, height)
    tails = [list(values) for values in series if values]
    if not tails:
        return [Text(" " * width) for _ in range(height)], 0.0, 0.0, 0
    steps = min(len(tail) for tail in tails)
    aligned = [tail[len(tail) - steps:] for tail in tails]  # on the newest step
    per_column = max(1, -(-steps // width))
    columns = []
    for end in range(steps, 0, -per_column):  # at most width columns: per_column * width >= steps
        values = sorted(v for tail in aligned for v in tail[max(0, end - per_column):end])
        columns.append(tuple(stats.percentile(values, q) for q in (10, 50, 90)))  # the tables' definition
    columns.reverse()
    if len(columns) < width:  # fewer steps than columns: each step widened to fill the chart, as it starts
        columns = [columns[x * len(columns) // width] for x in range(width)]
    low, high = min(c[0] for c in columns), max(c[2] for c in columns)
    if high - low < 1e-12:
        low, high = low * 0.95, high * 1.05 + 1e-9
    levels = 4 * height - 1
    chars = [[" "] * width for _ in range(height)]
    banded = [[False] * width for _ in range(height)]
    for column, (p10, p50, p90) in enumerate(columns):
        top, bottom = (int((levels - round((v - low) / (high - low) * levels)) // 4) for v in (p90, p10))
        for row in range(top, bottom + 1):
            banded[row][column] = True
            if ASCII:  # the band as characters too: without colour a background is not seen
                chars[row][column] = ":"
        row, dot = divmod(levels - round((p50 - low) / (high - low) * levels), 4)
        chars[row][column] = "*" if ASCII else chr(BRAILLE_BASE + (BRAILLE_DOTS[0][dot] | BRAILLE_DOTS[1][dot]))
    rows = []
    for row in range(height):
        # one span per run of cells in or out of the band, none nested: cheap to draw
        spans, start = [], 0
        for column in range(1, width + 1):
            if column < width and banded[row][column] == banded[row][start]:
                continue
            spans.append(Span(start, column, MEDIAN_ON_BAND_STYLE if banded[row][start] else MEDIAN_STYLE))
            start = column
        rows.append(Text("".join(chars[row]), spans=spans))
    return rows, low, high, per_column
