"""The followed configuration's step times per rank, newest on the right, as braille dots."""

from __future__ import annotations

import time

from rich.text import Text

from ddptop.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import TextLines

CHART_PERIOD = 1.0  # seconds between redraws while samples stream in
MAX_RANKS = 8  # series drawn; more would be colours nobody can tell apart
LABEL_WIDTH = 9


class StepChart(TextLines):
    """Redrawn when its configuration, its size or (at most once a second) its samples change."""

    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self._key: tuple[str, int, tuple[int, int]] | None = None
        self._drawn = 0.0

    def update_from(self, snapshot: RunSnapshot) -> None:
        config = snapshot.session.current()
        size = (self.size.width, self.size.height)
        if config is None or size[0] < 20 or size[1] < 3:
            return
        key = (config.config_id, config.revision, size)
        if key == self._key or (
            self._key is not None
            and self._key[0] == key[0]
            and self._key[2] == size
            and time.monotonic() - self._drawn < CHART_PERIOD
        ):
            return
        self._key = key
        self._drawn = time.monotonic()
        ranks = sorted(config.tails)[:MAX_RANKS]
        rows, low, high = fmt.braille_chart(
            [config.tails[r] for r in ranks], size[0] - LABEL_WIDTH - 1, size[1] - 1
        )
        title = Text(f"sec/iter, {config.heading} ({config.status}): ")
        for position, rank in enumerate(ranks):
            title.append(f"rank {rank} ", style=fmt.SERIES_STYLES[position % len(fmt.SERIES_STYLES)])
        lines = [title]
        for number, row in enumerate(rows):
            label = f"{high:.4f}s" if number == 0 else f"{low:.4f}s" if number == len(rows) - 1 else ""
            line = Text(f"{label:>{LABEL_WIDTH}}│")
            line.append_text(row)
            lines.append(line)
        self.show(lines)
