"""The followed configuration's step times, newest on the right: by default the median of each column of
steps as a line over their p10-p90 band (all ranks pooled); on a key (``c``), every rank's steps as dots
of its own colour. The axis ends at the steps' fences; the outliers beyond are marks in a row of their own,
counted in the title (``format.axis_range``)."""

from __future__ import annotations

import time

from rich.cells import cell_len
from rich.text import Text

from ddptop.protocol.vocab import Status
from ddptop.run.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import TextLines

# Seconds between redraws while samples stream in: at least CHART_PERIOD, longer for a larger chart, so that
# its redraws cost about as much a second at any size (a redraw's work and bytes grow with its cells: every
# line changes as the steps move left). 80x24's chart redraws every 2 s, 160x50's about every 4 s.
CHART_PERIOD = 2.0
CHART_CELLS_PER_SECOND = 1200
MAX_RANKS = 8  # series drawn; more would be colours nobody can tell apart
LABEL_WIDTH = 9


class StepChart(TextLines):
    """Redrawn when its configuration, its size or (at most every ``redraw_period`` while it runs) its samples
    change."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple[str, int, tuple[int, int], bool] | None = None
        self._drawn = 0.0
        self.per_rank = False  # the per-rank dots instead of the median and band
        self._waiting = False  # what it shows is the line that waits for the first steps
        self._snapshot: RunSnapshot | None = None  # drawn again on a resize: a settled run sends no more frames

    def toggle(self) -> None:
        """Switch between the median and band and the per-rank dots; drawn at the next frame."""
        self.per_rank = not self.per_rank
        self._key = None

    def on_resize(self) -> None:
        if self._snapshot is not None:
            self.update_from(self._snapshot)

    def update_from(self, snapshot: RunSnapshot) -> None:
        self._snapshot = snapshot
        config = snapshot.session.current()
        size = (self.size.width, self.size.height)
        if config is None or size[0] < 20 or size[1] < 3:
            return
        key = (config.config_id, config.revision, size, self.per_rank)
        if key == self._key or (
            config.status == Status.RUNNING  # an ended configuration is drawn as it ended, at once
            and not self._waiting  # nor are its first steps, after the line that waited for them
            and self._key is not None
            and self._key[0] == key[0]
            and self._key[2:] == key[2:]
            and time.monotonic() - self._drawn < redraw_period(*size)
        ):
            return
        self._key = key
        self._drawn = time.monotonic()
        self._waiting = not any(config.tails.values())
        if self._waiting:  # warming up, or its ranks not yet heard from: nothing to draw
            self.show([waiting_title(config.heading, config.status, config.warmup_used, size[0])])
            return
        ranks = sorted(config.tails)[:MAX_RANKS]
        width, height = size[0] - LABEL_WIDTH - 1, size[1] - 1
        if self.per_rank:
            plot = fmt.braille_chart([config.tails[r] for r in ranks], width, height)
            legend = [(f"rank {rank}", fmt.SERIES_STYLES[position % len(fmt.SERIES_STYLES)])
                      for position, rank in enumerate(ranks)]
            details, keys = [], [" (c: median and band)", " (c)"]
        else:
            plot = fmt.band_chart([config.tails[r] for r in sorted(config.tails)], width, height)
            legend = [("median", fmt.MEDIAN_STYLE), ("and", ""), ("p10-p90", fmt.BAND_STYLE)]
            details = [f" of {len(config.tails)} rank(s), {plot.per_column} step(s) per column"]
            keys = [" (c: per rank)", " (c)"]
        notes = outlier_notes(plot, "" if self.per_rank else fmt.OUTLIER_STYLE)  # per rank: marks of their colour
        title = chart_title(f"sec/iter, {config.heading} ({config.status}): ", legend, notes, details, keys, size[0])
        self.show([title, *chart_lines(plot)])


def waiting_title(heading: str, status: str, warmup_used: int | None, width: int) -> Text:
    """The chart's one line before its configuration's first measured step: what it waits for (and the warm-up
    steps run so far where it fits), no axis and no plot of nothing."""
    title = Text(f"sec/iter, {heading} ({status}): ")
    title.append("waiting for the first steps")
    warm = f" (warm-up: {warmup_used} step{'s' if warmup_used != 1 else ''} run)" if warmup_used else ""
    if warm and title.cell_len + cell_len(warm) <= width:
        title.append(warm, style="dim")
    return title


def redraw_period(width: int, height: int) -> float:
    """Seconds between redraws of a running configuration's chart of ``width`` x ``height`` cells."""
    return max(CHART_PERIOD, width * height / CHART_CELLS_PER_SECOND)


def outlier_notes(plot: fmt.Plot, mark_style: str) -> list[Text]:
    """What the chart says of its outliers, longest first: how many steps lie beyond the axis, and the
    extreme (the largest above, the smallest below); the marks in ``mark_style`` (none where they take their
    rank's colour)."""
    up, down = fmt.marks()
    beyond = [(count, mark, where, extreme) for count, mark, where, extreme in (
        (plot.above, up, "above", plot.largest), (plot.below, down, "below", plot.smallest)) if count]
    if not beyond:
        return []
    forms = (
        lambda count, where, extreme: f" {count} step{'s' if count != 1 else ''} {where} the axis, "
                                      f"{'largest' if where == 'above' else 'smallest'} {extreme:.4f}s",
        lambda count, where, extreme: f" {count} {where}, {extreme:.4f}s",
        lambda count, where, extreme: f" {count} {where}",
    )
    notes = []
    for form in forms:
        note = Text()
        for number, (count, mark, where, extreme) in enumerate(beyond):
            note.append("; " if number == 0 else ", ")
            note.append(mark, style=mark_style)
            note.append(form(count, where, extreme))
        notes.append(note)
    return notes


def chart_title(head: str, legend: list[tuple[str, str]], notes: list[Text], details: list[str], keys: list[str],
                width: int) -> Text:
    """The title line within ``width`` cells: the head and the legend, its detail, the outlier note, the key.
    The head, the legend and the note always (the note's longest form that leaves room for the key's
    shortest); the detail where it fits beside them; then the longest form of the key that still fits."""
    title = Text(head)
    for number, (words, style) in enumerate(legend):
        if number:
            title.append(" ")
        title.append(words, style=style)
    shortest_key = min(map(cell_len, keys))
    room = width - title.cell_len
    note = next((n for n in notes if n.cell_len + shortest_key <= room), notes[-1]) if notes else Text()
    room -= note.cell_len
    detail = next((d for d in details if cell_len(d) + shortest_key <= room), "")
    room -= cell_len(detail)
    key = next((k for k in keys if cell_len(k) <= room), "")
    title.append(detail, style="dim")
    title.append_text(note)
    title.append(key, style="dim")
    return title


def chart_lines(plot: fmt.Plot) -> list[Text]:
    """The chart's rows after their labels: the axis's top and bottom values on its first and last data rows; a
    row of outlier marks beyond the axis is labelled with the extreme it reaches, in the marks' style, and its
    axis is broken."""
    lines = []
    last = len(plot.rows) - 1
    for number, row in enumerate(plot.rows):
        if (number == 0 and plot.top_row) or (number == last and plot.bottom_row):
            extreme = plot.largest if number == 0 else plot.smallest
            line = Text(f"{extreme or 0.0:.4f}s".rjust(LABEL_WIDTH), style=fmt.OUTLIER_STYLE)
            line.append(fmt.AXIS_BREAK)
        else:
            top, bottom = int(plot.top_row), last - int(plot.bottom_row)
            label = f"{plot.high:.4f}s" if number == top else f"{plot.low:.4f}s" if number == bottom else ""
            line = Text(f"{label:>{LABEL_WIDTH}}{fmt.AXIS}")
        line.append_text(row)
        lines.append(line)
    return lines
