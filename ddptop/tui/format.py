"""Cell text for the TUI: bars, sparklines and the braille chart, with nvitop-like load colours. Rich only, no
Textual. Numbers are written by ``ddptop.units``; the names below keep the screen's choices among its options."""

from __future__ import annotations

import math
from dataclasses import dataclass
from collections.abc import Mapping
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
AXIS_BREAK = "╎"  # a chart's axis beside its row of outliers: what that row holds is beyond the axis's scale
TRANSLITERATION = {
    "±": "+-", "–": "-", "—": "-", "·": "|", "×": "x", "≥": ">=", "≤": "<=", "…": "~", "→": "->", "←": "<-",
    "◂": "<", "▸": ">", "µ": "u", "≈": "~", "°": "", "│": "|", "─": "-", "━": "-", "▏": "|", "’": "'", "✓": "ok",
}


def use_ascii() -> None:
    """Draw with ASCII alone from now on (the whole process: ``--ascii``)."""
    global ASCII, AXIS, AXIS_BREAK
    ASCII, AXIS, AXIS_BREAK = True, "|", ":"


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


def given(environment: Any) -> str | None:
    """What the job was given, in a few words for the host line: ``given 16 cores · 64.0 GiB memory limit
    · 2 GPUs (SLURM 1234)``. The cores are its CPUs, or its CPU quota where that is fewer; the GPUs are those
    NVML lets it use. None where the environment has no ``allocation`` (a run recorded before it was read)."""
    allocation = environment.get("allocation") if isinstance(environment, dict) else None
    if not isinstance(allocation, dict):
        return None
    parts = []
    cores, quota = allocation.get("cores_count"), allocation.get("cpu_quota_cores")
    if isinstance(quota, (int, float)) and (not isinstance(cores, int) or quota < cores):
        parts.append(f"{quota:.3g} cores (quota)")
    elif isinstance(cores, int):
        parts.append(f"{cores} core{'' if cores == 1 else 's'}")
    limit = allocation.get("memory_limit_bytes")
    parts.append(f"{units.binary_bytes(limit)} memory limit" if isinstance(limit, int) else "no memory limit")
    gpus = environment.get("gpus")
    count = len(gpus) if isinstance(gpus, list) else 0
    parts.append(f"{count} GPU{'' if count == 1 else 's'}")
    slurm = allocation.get("slurm")
    job = slurm.get("job_id") if isinstance(slurm, dict) else None
    return "given " + " · ".join(parts) + (f" (SLURM {job})" if job is not None else "")


def peak(use: Any) -> str | None:
    """What the ranks used at their peak so far, for the host line beside what the job was given:
    ``peak 1.9 cores · 1.8 GiB RSS · 12.0 GiB on a GPU``; None before any rank was read."""
    if not isinstance(use, Mapping):
        return None
    parts = []
    if isinstance(use.get("cores_busy"), (int, float)):
        parts.append(f"{use['cores_busy']:.1f} cores")
    if isinstance(use.get("rss_bytes"), int):
        parts.append(f"{units.binary_bytes(use['rss_bytes'])} RSS")
    if isinstance(use.get("gpu_memory_bytes"), int):
        parts.append(f"{units.binary_bytes(use['gpu_memory_bytes'])} on a GPU")
    return "peak " + " · ".join(parts) if parts else None


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

# The step charts' y axis spans what lies inside Tukey's fences, as a box plot's whiskers do: each rank's are
# FENCE_IQRS interquartile ranges beyond the quartiles of its steps on the chart, and a step beyond the widest
# of them is an outlier. Real GPU steps have rare 2-3x spikes; an axis that spanned them would leave the
# median flat on the bottom row. Outliers are marks in a row of their own beyond the axis; the chart says how
# many and the extreme.
FENCE_IQRS = 1.5
FENCE_MIN_STEPS = 20  # a rank with fewer steps has no quartiles to speak of: its steps are all inside the axis
FENCE_MIN_SPREAD = 0.01  # the interquartile range counts as at least this share of the median (identical steps)
ABOVE, BELOW = "▲", "▼"
OUTLIER_STYLE = "bold yellow"


def marks() -> tuple[str, str]:
    """The outlier marks above and below the axis as drawn now (``--ascii``: ``^`` and ``v``)."""
    return ("^", "v") if ASCII else (ABOVE, BELOW)


@dataclass(frozen=True)
class Plot:
    """A chart's rows (top first) and what they show: the y axis from ``low`` (bottom data row) to ``high`` (top
    data row); the steps beyond it, as marks in the row above (``above``, up to ``largest``) or below
    (``below``, down to ``smallest``), when ``top_row`` or ``bottom_row`` is that row of marks; and how many
    consecutive steps each column pools (1 for the per-rank dots, where each column is two points)."""

    rows: list[Text]
    low: float
    high: float
    per_column: int = 1
    above: int = 0
    largest: float | None = None
    below: int = 0
    smallest: float | None = None
    top_row: bool = False
    bottom_row: bool = False


def fences(values: Sequence[float]) -> tuple[float, float]:
    """Tukey's fences of ``values``: (Q1 - k IQR, Q3 + k IQR), k = FENCE_IQRS; unbounded for too few values."""
    if len(values) < FENCE_MIN_STEPS:
        return -math.inf, math.inf
    ordered = sorted(values)
    q1, q3 = stats.percentile(ordered, 25), stats.percentile(ordered, 75)
    spread = max(q3 - q1, FENCE_MIN_SPREAD * abs(stats.percentile(ordered, 50)))
    return q1 - FENCE_IQRS * spread, q3 + FENCE_IQRS * spread


def axis_range(tails: Sequence[Sequence[float]], drawn: Sequence[tuple[float, float]]
               ) -> tuple[float, float, float, float]:
    """The y axis for what is drawn (``drawn``: each column's band, or each point, as (lowest, highest)): it
    spans what lies inside the fences, the widest of the ranks' own (a rank that is slower throughout is
    inside its own fences, a spike outside every one). A band that crosses a fence is held at it; one wholly
    beyond is left to the marks. Returns (low, high, and the fences beyond which a step is an outlier)."""
    bounds = [fences(tail) for tail in tails if tail]
    fence_low = min((b[0] for b in bounds), default=-math.inf)
    fence_high = max((b[1] for b in bounds), default=math.inf)
    inside = [(max(a, fence_low), min(b, fence_high)) for a, b in drawn if a <= fence_high and b >= fence_low]
    if inside:
        low, high = min(a for a, _ in inside), max(b for _, b in inside)
    else:  # nothing drawn inside the fences (cannot be for a spread of steps): all of it, no outliers
        low, high, fence_low, fence_high = min(a for a, _ in drawn), max(b for _, b in drawn), -math.inf, math.inf
    if high - low < 1e-12:
        low, high = low * 0.95, high * 1.05 + 1e-9
    return low, high, fence_low, fence_high


class _Grid:
    """A chart of ``height`` rows for values from ``low`` to ``high``, with a row of marks beyond each edge
    that has outliers (where at least two rows of data remain; else the marks are drawn over the edge row)."""

    def __init__(self, height: int, low: float, high: float, above: bool, below: bool) -> None:
        self.height, self.low, self.high = height, low, high
        self.top_row = above and height - below >= 3
        self.bottom_row = below and height - self.top_row >= 3
        self.first = int(self.top_row)  # the first and last rows of data
        self.levels = 4 * (height - self.top_row - self.bottom_row) - 1

    def place(self, value: float) -> tuple[int, int]:
        """(row, dot 0..3 from the top of its cell) of a value, held inside the data rows."""
        level = round((min(max(value, self.low), self.high) - self.low) / (self.high - self.low) * self.levels)
        row, dot = divmod(self.levels - level, 4)
        return self.first + row, dot

    def rows(self, plains: list[str], spans: list[list[Span]], up: Sequence[Any], down: Sequence[Any],
             styles: Sequence[str]) -> list[Text]:
        """The rows as Texts, the marks put in: ``up``/``down`` per column are -1 or the index of the mark's
        style in ``styles``."""
        above, below = marks()
        for row, flags, mark, own in ((0, up, above, self.top_row), (self.height - 1, down, below, self.bottom_row)):
            if not any(f >= 0 for f in flags):
                continue
            plain = "".join(mark if f >= 0 else (" " if own else plains[row][x]) for x, f in enumerate(flags))
            runs = _runs(flags, lambda f: styles[f] if f >= 0 else None)
            plains[row], spans[row] = plain, runs if own else spans[row] + runs  # later spans win where they meet
        return [Text(plain, spans=row_spans) for plain, row_spans in zip(plains, spans)]


def _runs(keys: Sequence[Any], style_of: Any) -> list[Span]:
    """One span per run of equal keys that has a style: far fewer segments to draw than one per cell."""
    edges = [0, *(x for x in range(1, len(keys)) if keys[x] != keys[x - 1]), len(keys)]
    spans = []
    for start, end in zip(edges, edges[1:]):
        style = style_of(keys[start])
        if style:
            spans.append(Span(start, end, style))
    return spans


def braille_chart(series: Sequence[Sequence[float]], width: int, height: int) -> Plot:
    """The last 2·width points of each series as braille dots on a width×height grid, one colour each; the
    y axis cut at the ranks' fences (``axis_range``), the points beyond them as marks of their series' colour
    in a row of their own. Cheap: one pass over the points."""
    width, height = max(1, width), max(1, height)
    tails = [list(values[-2 * width :]) for values in series]  # the tail only: a series may be millions long
    points = [v for tail in tails for v in tail]
    if not points:
        return Plot([Text(" " * width) for _ in range(height)], 0.0, 0.0)
    low, high, fence_low, fence_high = axis_range(tails, [(v, v) for v in points])
    above = [v for v in points if v > fence_high]
    below = [v for v in points if v < fence_low]
    grid = _Grid(height, low, high, bool(above), bool(below))
    cells = [[0] * width for _ in range(height)]
    owner = [[-1] * width for _ in range(height)]
    up, down = [-1] * width, [-1] * width  # the series of each column's outlier, if any
    longest = max(len(tail) for tail in tails)
    stretch = (2 * width - 1) / (longest - 1) if 1 < longest < 2 * width else 1.0  # few points: spread them
    for index, tail in enumerate(tails):
        offset = longest - len(tail)
        for position, value in enumerate(tail):
            x = round((position + offset) * stretch) if stretch != 1.0 else position + 2 * width - len(tail)
            column, half = divmod(min(x, 2 * width - 1), 2)
            if value > fence_high or value < fence_low:
                (up if value > fence_high else down)[column] = index
                continue
            row, dot = grid.place(value)
            cells[row][column] |= BRAILLE_DOTS[half][dot]
            owner[row][column] = index
    styles = [SERIES_STYLES[i % len(SERIES_STYLES)] for i in range(len(tails))]
    plains = ["".join(("o" if ASCII else chr(BRAILLE_BASE + bits)) if bits else " " for bits in row) for row in cells]
    spans = [_runs([owner[r][c] if cells[r][c] else -1 for c in range(width)], lambda i: styles[i] if i >= 0 else None)
             for r in range(height)]
    return Plot(grid.rows(plains, spans, up, down, styles), low, high, 1, len(above), max(above, default=None),
                len(below), min(below, default=None), grid.top_row, grid.bottom_row)


BAND_STYLE = "on grey23"  # the p10-p90 band: a background, so the median's dots stay readable on it
MEDIAN_STYLE = "bold cyan"
MEDIAN_ON_BAND_STYLE = f"{MEDIAN_STYLE} {BAND_STYLE}"


def band_chart(series: Sequence[Sequence[float]], width: int, height: int) -> Plot:
    """The steps of every series pooled and cut into ``width`` columns of consecutive steps (newest on the
    right): per column the median as a line of braille dots over the p10-p90 band as a shaded background.

    The y axis spans the bands, cut at the ranks' fences (``axis_range``): a band beyond it is held at its
    edge, and each column with outliers gets a mark in a row of its own beyond the axis, so that rare slow
    steps neither flatten the median nor pass unseen.
    """
    width, height = max(1, width), max(1, height)
    tails = [list(values) for values in series if values]
    if not tails:
        return Plot([Text(" " * width) for _ in range(height)], 0.0, 0.0, 0)
    steps = min(len(tail) for tail in tails)
    aligned = [tail[len(tail) - steps:] for tail in tails]  # on the newest step
    per_column = max(1, -(-steps // width))
    groups = []
    for end in range(steps, 0, -per_column):  # at most width columns: per_column * width >= steps
        groups.append(sorted(v for tail in aligned for v in tail[max(0, end - per_column):end]))
    groups.reverse()
    columns = [tuple(stats.percentile(values, q) for q in (10, 50, 90)) for values in groups]  # the tables' definition
    low, high, fence_low, fence_high = axis_range(aligned, [(c[0], c[2]) for c in columns])
    above = [v for group in groups for v in group if v > fence_high]
    below = [v for group in groups for v in group if v < fence_low]
    up = [0 if group[-1] > fence_high else -1 for group in groups]
    down = [0 if group[0] < fence_low else -1 for group in groups]
    if len(columns) < width:  # fewer steps than columns: each step widened to fill the chart, as it starts
        picks = [x * len(columns) // width for x in range(width)]
        columns, up, down = [columns[i] for i in picks], [up[i] for i in picks], [down[i] for i in picks]
    grid = _Grid(height, low, high, bool(above), bool(below))
    chars = [[" "] * width for _ in range(height)]
    banded = [[False] * width for _ in range(height)]
    for column, (p10, p50, p90) in enumerate(columns):
        if p10 > high or p90 < low:
            continue  # the whole band is beyond the axis: the column's mark says so
        top, bottom = grid.place(p90)[0], grid.place(p10)[0]
        for row in range(top, bottom + 1):
            banded[row][column] = True
            if ASCII:  # the band as characters too: without colour a background is not seen
                chars[row][column] = ":"
        if low <= p50 <= high:
            row, dot = grid.place(p50)
            chars[row][column] = "*" if ASCII else chr(BRAILLE_BASE + (BRAILLE_DOTS[0][dot] | BRAILLE_DOTS[1][dot]))
    # one span per run of cells in the band, none nested: cheap to draw (the median lies in its band, so the cells
    # outside are blank and need no style)
    spans = [_runs(row, lambda band: MEDIAN_ON_BAND_STYLE if band else None) for row in banded]
    rows = grid.rows(["".join(row) for row in chars], spans, up, down, [OUTLIER_STYLE])
    return Plot(rows, low, high, per_column, len(above), max(above, default=None), len(below),
                min(below, default=None), grid.top_row, grid.bottom_row)
