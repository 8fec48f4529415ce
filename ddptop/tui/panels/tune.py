"""ddptop tune's standing while it runs: each DDP variant's median step so far against DDP as written's;
the combination of the faster ones against DDP as written measured again beside it.

Point figures only: the intervals (which need every launch's bootstrap) and the verdicts come with the
summary; a variant the search dropped as slower says so, with the launches it had.
"""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ddptop.protocol.variants import AGAIN, DEFAULT, JOIN, as_written
from ddptop.protocol.vocab import Mode, Status
from ddptop.run.snapshot import ConfigSnapshot, RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable
from ddptop.tui.panels.configs import status_text



def _together(variant: str) -> bool:
    return JOIN in variant

# (key, label, width, priority): the lowest priority is dropped first in a narrow window
TUNE_COLUMNS = (
    ("variant", "variant", 24), ("status", "status", 12), ("launches", "launches", 8, 50),
    ("p50", "median step s", 13, 60), ("ratio", "ex/s vs default", 15), ("note", "", 40, 20),
)


class TunePanel(LineTable):
    """One row per DDP configuration with its variant, the default first, then by examples/s so far."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(TUNE_COLUMNS, **kwargs)
        self._drawn_from: tuple[Any, ...] | None = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        configs = [c for c in snapshot.session.configs if c.mode == Mode.DDP]  # not no-DDP or DataParallel
        measuring, going = snapshot.session.measuring, snapshot.going
        drawn_from = (measuring, going, tuple((c.config_id, c.revision, c.status) for c in configs))
        if drawn_from == self._drawn_from:
            return
        self._drawn_from = drawn_from
        def p50(variant: str) -> float | None:
            found = next((c for c in configs if c.variant == variant), None)
            return found.stats.p50 if found is not None and found.stats is not None else None

        base, again = p50(DEFAULT), p50(AGAIN)

        def speedup(config: ConfigSnapshot) -> float | None:
            ours = config.stats.p50 if config.stats is not None else None
            reference = again if _together(config.variant) else base  # the combination: against DDP again
            return reference / ours if reference and ours else None

        ordered = sorted(configs, key=lambda c: (c.variant != DEFAULT, c.variant == AGAIN or _together(c.variant),
                                                 c.variant != AGAIN, -(speedup(c) or 0.0)))
        wanted = [c.config_id for c in ordered]
        if wanted != self.rows:
            self.clear()
        for config in ordered:
            found = speedup(config)
            dropped = config.status == Status.OK and (config.reason or "").startswith("dropped")
            budget = config.status == Status.OK and (config.reason or "").startswith("search budget")
            together = _together(config.variant)
            self.set_row(config.config_id, {
                "variant": f"together ({config.variant.count(JOIN) + 1})" if together else config.variant,
                "status": (Text("dropped", style="yellow") if dropped else Text("budget spent", style="yellow")
                           if budget else status_text(config, going, measuring == config.config_id)),
                "launches": (f"{config.launches_planned}/{config.launches_planned}"
                             if config.status == Status.OK and not (dropped or budget)
                             else f"{config.launches_measured}/{config.launches_planned}"),
                "p50": fmt.seconds(config.stats.p50 if config.stats is not None else None),
                "ratio": ("1.00" if as_written(config.variant) else "-" if found is None
                          else f"{found:.2f}x"),
                "note": ((config.reason or "") if dropped or budget or config.status != Status.OK
                         else f"{config.variant} against default_again" if together
                         else f"{config.kind.as_written}, again, beside the combination"
                         if config.variant == AGAIN else ""),
            })
