"""ddptop tune's standing while it runs: each DDP variant's median step so far against DDP as written's.

Point figures only: the intervals (which need every launch's bootstrap) and the verdicts come with the
summary; a variant the search dropped as slower says so, with the launches it had.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ddptop.protocol.vocab import Status
from ddptop.run.snapshot import ConfigSnapshot, RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable

DEFAULT = "default"

# (key, label, width, priority): the lowest priority is dropped first in a narrow window
TUNE_COLUMNS = (
    ("variant", "variant", 24), ("status", "status", 12), ("launches", "launches", 8, 50),
    ("p50", "median step s", 13, 60), ("ratio", "ex/s vs default", 15), ("note", "", 40, 20),
)


def _status(config: ConfigSnapshot) -> str:
    if config.status == Status.RUNNING and config.launches_measured and config.sample_count and not config.progress:
        return f"queued {config.launches_measured}/{config.launches_planned}"
    return str(config.status)


class TunePanel(LineTable):
    """One row per DDP configuration with its variant, the default first, then by examples/s so far."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(TUNE_COLUMNS, **kwargs)
        self._drawn_from: tuple[Any, ...] | None = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        configs = [c for c in snapshot.session.configs if "/ddp/" in c.config_id]  # not no-DDP or DataParallel
        drawn_from = tuple((c.config_id, c.revision, c.status) for c in configs)
        if drawn_from == self._drawn_from:
            return
        self._drawn_from = drawn_from
        default = next((c for c in configs if c.variant == DEFAULT), None)
        base = default.stats.p50 if default is not None and default.stats is not None else None

        def speedup(config: ConfigSnapshot) -> float | None:
            ours = config.stats.p50 if config.stats is not None else None
            return base / ours if base and ours else None

        ordered = sorted(configs, key=lambda c: (c.variant != DEFAULT, -(speedup(c) or 0.0)))
        wanted = [c.config_id for c in ordered]
        if wanted != self.rows:
            self.clear()
        for config in ordered:
            found = speedup(config)
            dropped = config.status == Status.OK and (config.reason or "").startswith("dropped")
            self.set_row(config.config_id, {
                "variant": config.variant,
                "status": Text("dropped", style="yellow") if dropped else _status(config),
                "launches": (f"{config.launches_planned}/{config.launches_planned}"
                             if config.status == Status.OK and not dropped
                             else f"{config.launches_measured}/{config.launches_planned}"),
                "p50": fmt.seconds(config.stats.p50 if config.stats is not None else None),
                "ratio": "1.00" if config.variant == DEFAULT else "-" if found is None else f"{found:.2f}x",
                "note": (config.reason or "") if dropped or config.status != Status.OK else "",
            })
