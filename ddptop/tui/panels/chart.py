"""The followed configuration's step times, newest on the right: by default the median of each column of
steps as a line over their p10-p90 band (all ranks pooled); on a key (``c``), every rank's steps as dots
of its own colour."""

from __future__ import annotations

import time

from rich.text import Text

from ddptop.protocol.vocab import Status
from ddptop.run.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import TextLines

CHART_PERIOD = 2.0  # seconds between redraws while samples stream in (each redraw sends most of its lines)
MAX_RANKS = 8  # series drawn; more would be colours nobody can tell apart
LABEL_WIDTH = 9


class StepChart(TextLines):
    """Redrawn when its configuration, its size or (at most every CHART_PERIOD while it runs) its samples
    change."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple[str, int, tuple[int, int], bool] | None = None
        self._drawn = 0.0
        self.per_rank = False  # the per-rank dots instead of the median and band
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
            and self._key is not None
            and self._key[0] == key[0]
            and self._key[2:] == key[2:]
            and time.monotonic() - self._drawn < CHART_PERIOD
        ):
            return
        self._key = key
        self._drawn = time.monotonic()
        ranks = sorted(config.tails)[:MAX_RANKS]
        title = Text(f"sec/iter, {config.heading} ({config.status}): ")
        if self.per_rank:
            rows, low, high = fmt.braille_chart(
                [config.tails[r] for r in ranks], size[0] - LABEL_WIDTH - 1, size[1] - 1
            )
            for position, rank in enumerate(ranks):
                title.append(f"rank {rank} ", style=fmt.SERIES_STYLES[position % len(fmt.SERIES_STYLES)])
            title.append(" (c: median and band)" if title.cell_len + 21 <= size[0] else " (c)", style="dim")
        else:
            rows, low, high, per_column = fmt.band_chart(
                [config.tails[r] for r in sorted(config.tails)], size[0] - LABEL_WIDTH - 1, size[1] - 1
            )
            title.append("median", style=fmt.MEDIAN_STYLE)
            title.append(" and ")
            title.append("p10-p90", style=fmt.BAND_STYLE)
            detail = f" of {len(config.tails)} rank(s), {per_column} step(s) per column (c: per rank)"
            if title.cell_len + len(detail) > size[0]:  # a narrow window: the key, not a cut sentence
                detail = " (c: per rank)"
            title.append(detail, style="dim")
        lines = [title]
        for number, row in enumerate(rows):
            label = f"{high:.4f}s" if number == 0 else f"{low:.4f}s" if number == len(rows) - 1 else ""
            line = Text(f"{label:>{LABEL_WIDTH}}{fmt.AXIS}")
            line.append_text(row)
            lines.append(line)
        self.show(lines)
