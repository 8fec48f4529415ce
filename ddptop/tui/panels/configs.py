"""One row per configuration: status, progress, live percentiles and how well the median is known, ex/s,
speedup, efficiency, comm share, the idle share of its traced steps and the gradient noise scale so far; for a
user's script, the batch its ranks drew, their data-wait share and tokens/s in place of the comm and idle
shares."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.text import Text

from ddptop.analysis import gradient_noise, script_steps, traces
from ddptop.protocol.vocab import FAILED, Status
from ddptop.protocol.modelspec import display_name
from ddptop.run.snapshot import ConfigSnapshot, RunSnapshot, ScalingFigures, ValiditySoFar
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable
from ddptop.tui.panels.cached import CachedStatic

STATUS_STYLE = {
    "pending": "dim",
    "running": "bold cyan",
    "ok": "green",
    "failed": "bold red",
    "oom": "bold red",
    "skipped": "yellow",
    "stopped": "yellow",
    "not_run": "dim",
    "interrupted": "yellow",
}
DISTURBED_MARK = "!"  # beside the status of a configuration measured on a busy node (the notes say why)
# the longest status a cell shows whole: "interrupted !" (and "queued 10/12", a run of up to 99 launches)
STATUS_WIDTH = len(f"{Status.INTERRUPTED} {DISTURBED_MARK}")
# (key, label, width, priority): the lowest priority is dropped first in a narrow window
CONFIG_COLUMNS = (
    ("label", "N", 6), ("model", "model", 12, 70), ("bs", "batch", 5, 60), ("backend", "backend", 7, 30),
    ("status", "status", STATUS_WIDTH), ("progress", "progress", 13, 50), ("p50", "p50 s", 7), ("prec", "±p50", 7, 95),
    ("p75", "p75 s", 7, 20), ("p90", "p90 s", 7, 40), ("p95", "p95 s", 7, 25), ("exs", "ex/s", 7, 80),
    ("speedup", "speedup", 7, 90), ("eff", "eff", 5, 85), ("comm", "comm", 5, 55), ("idle", "idle", 5, 45),
    ("noise", "B_noise", 7, 40),
)


# a user's script's plan (``ddptop run -- train.py``): no communication analysis or trace runs beside its steps,
# so its comm and idle columns give way to the share of the step its ranks waited for batches, and its tokens/s;
# in a narrow window its data wait and ex/s are kept before its efficiency (speedup / N: the speedup says it)
SCRIPT_COLUMNS = tuple((*c[:3], 65) if c[0] == "eff" else c for c in CONFIG_COLUMNS if c[0] not in ("comm", "idle")) + (
    ("wait", "data wait", 9, 75), ("toks", "tok/s", 7, 35),
)

LABEL_WIDTH_MAX = 12
NOTES_SHOWN = 3  # notes under the table: more would push the step chart off an 80x24 screen


def noise_measured(spec: Any) -> bool:
    """Whether a configuration may give a gradient noise scale: DDP at N >= 2, with enough hooked steps for a
    kernel (``--comm-iters``) or, for a script, its measured steps."""
    if spec.mode != "ddp" or spec.world_size < 2:
        return False
    return not spec.kind.own_batch or spec.comm_iters >= gradient_noise.MIN_SYNCS


class ConfigTable(LineTable):
    """Drawn through the line API like the GPU table: only a row whose cells changed is drawn again (a
    DataTable re-renders every cell of every row on any change, which the running row makes every frame)."""

    def __init__(self, specs: list[Any], **kwargs: Any) -> None:
        # the label column as wide as the plan's labels need (a thread sweep's 1M/2Px4t), up to 12
        width = max(6, min(LABEL_WIDTH_MAX, max((len(spec.label) for spec in specs), default=0)))
        columns = SCRIPT_COLUMNS if any(spec.kind.data_wait for spec in specs) else CONFIG_COLUMNS
        if not any(noise_measured(spec) for spec in specs):  # no configuration gives a gradient noise scale
            columns = tuple(c for c in columns if c[0] != "noise")
        super().__init__([(*c[:2], width, *c[3:]) if c[0] == "label" else c for c in columns], **kwargs)
        self._specs = specs  # the plan's configurations: what the first frame shows before any snapshot
        self._drawn: dict[str, tuple[int, ScalingFigures | None, float, ValiditySoFar | None, bool, bool]] = {}

    def on_mount(self) -> None:
        for spec in self._specs:
            self.set_row(spec.config_id, {"label": spec.label, "model": display_name(spec.model, short=True),
                                          # a script's batch is the one it draws: known at its first steps
                                          "bs": str(spec.batch_size) if spec.kind.own_batch else "-",
                                          "backend": spec.backend,
                                          "status": Text(Status.PENDING, style="dim")})

    def update_from(self, snapshot: RunSnapshot) -> None:
        for config in snapshot.session.configs:
            scale = snapshot.scaling.get(config.config_id)
            going = snapshot.going  # a sweep that ended, or whose ddptop is gone, analyses nothing more
            measuring = snapshot.session.measuring == config.config_id
            drawn_from = (config.revision, scale, config.progress, config.validity, config.analysing and going,
                          measuring)
            if self._drawn.get(config.config_id) == drawn_from:
                continue
            self._drawn[config.config_id] = drawn_from
            self.set_row(config.config_id, _config_cells(config, scale, going, measuring))


def status_text(config: ConfigSnapshot, going: bool = True, measuring: bool = True) -> Text:
    """A configuration's status as the tables show it: analysing, queued between its launches, or its word with
    the mark of a disturbed node beside it (``config_notes`` says what the mark means, and why one failed).
    ``going``: the sweep may still measure; ``measuring``: it runs now."""
    status = Text(config.status, style=STATUS_STYLE.get(config.status, ""))
    if config.analysing and going:  # its steps are in, ok; the compute/communication split is still being measured
        status = Text("analysing", style=STATUS_STYLE.get(Status.RUNNING, ""))
    elif (config.status == Status.RUNNING and not measuring and going
          and 0 < config.launches_measured < config.launches_planned):
        # measured in some of its launches, waiting for the next one: not running now
        status = Text(f"queued {config.launches_measured + 1}/{config.launches_planned}", style="dim")
    elif config.status not in FAILED and config.validity is not None and config.validity.disturbed:
        status.append(f" {DISTURBED_MARK}", style="bold yellow")  # measured on a busy node: the notes say why
    return status


def config_notes(configs: Sequence[ConfigSnapshot]) -> list[Text]:
    """What the status cells cannot hold, one note per configuration, in the table's order: why one failed, and
    what a mark means and why it is there ("! 1M/1P disturbed while measured: other processes used 1.9 cores
    (so far)"). Those in the summary's "Disturbed while measured" list are marked the same way once ended."""
    notes = []
    for config in configs:
        if config.status in FAILED and config.reason:
            notes.append(Text(f"{config.label} {config.status}: {config.reason}", style="red"))
        elif config.validity is not None and config.validity.disturbed:
            note = Text(DISTURBED_MARK, style="bold yellow")
            note.append(f" {config.label} disturbed while measured")
            reasons = config.validity.reasons
            if reasons:
                note.append(f": {reasons[0]}", style="yellow")
                if len(reasons) > 1:
                    note.append(f"; +{len(reasons) - 1} more", style="yellow")
            if config.validity.so_far:
                note.append(" (so far)", style="dim")
            notes.append(note)
    return notes


class ConfigNotes(CachedStatic):
    """The lines under the configuration table: what its marks mean and why one failed (``config_notes``), at
    most ``NOTES_SHOWN`` of them and how many more; hidden when there is nothing to say."""

    def update_from(self, snapshot: RunSnapshot) -> None:
        notes = config_notes(snapshot.session.configs)
        self.display = bool(notes)
        if not notes:
            return
        shown = Text("\n").join(notes[:NOTES_SHOWN])
        if len(notes) > NOTES_SHOWN:
            shown.append(f"\n+{len(notes) - NOTES_SHOWN} more (r: the summary lists them)", style="dim")
        self.show_content(shown)


def _config_cells(config: ConfigSnapshot, scale: ScalingFigures | None, going: bool = True,
                  measuring: bool = True) -> dict[str, Any]:
    stats = config.stats
    status = status_text(config, going, measuring)
    script = config.script
    if script is not None:
        return _config_row(config, scale, stats, status) | {
            # the batch each rank drew (its median examples a step; ~ where it varied from step to step)
            "bs": "-" if script.examples_per_rank is None
            else f"{'~' if script.examples_vary else ''}{script.examples_per_rank}",
            "wait": _share(script.data_wait, script.data_bound),
            "toks": fmt.rate(script.tok_per_s) if script.tok_per_s is not None else "-",
            # the backend of the script's own process group, once seen, where it is not the launch's
            "backend": script_steps.own_backend(config.backend, script.group_backend) or config.backend,
        }
    return _config_row(config, scale, stats, status)


def _share(share: float | None, warn: bool) -> Text | str:
    """A share of the step as a percentage ("-" where not measured), yellow where it is worth a look."""
    if share is None:
        return "-"
    return Text(f"{100 * share:.0f}%", style="yellow" if warn else "")


def _precision(half_width: float) -> str:
    """The median's relative half-width in the 7-wide cell: one decimal under 100%, none from there on
    (a median known to ±2544% is shown whole, not cut)."""
    percent = 100 * half_width
    return f"±{percent:.1f}%" if percent < 99.95 else f"±{percent:.0f}%"


def _config_row(config: ConfigSnapshot, scale: ScalingFigures | None, stats: Any, status: Text) -> dict[str, Any]:
    return {
        "label": config.label,
        "model": display_name(config.model, short=True),
        "bs": str(config.batch_size),
        "backend": config.backend,
        "status": status,
        "progress": fmt.bar(100 * config.progress, 8, (101, 101)),
        "p50": fmt.seconds(stats.p50) if stats else "-",
        # how well the median is known (95% interval's half-width); yellow: stopped on a limit short of it
        "prec": Text(_precision(config.precision_reached), style="yellow" if config.unstable else "")
        if config.precision_reached is not None
        else "-",
        "p75": fmt.seconds(stats.p75) if stats else "-",
        "p90": fmt.seconds(stats.p90) if stats else "-",
        "p95": fmt.seconds(stats.p95) if stats else "-",
        # "-" where unknown: a script whose examples were not counted
        "exs": fmt.rate(stats.ex_sec_total_p50) if stats and stats.ex_sec_total_p50 is not None else "-",
        "speedup": f"{scale.speedup:.2f}" if scale else "-",
        "eff": f"{100 * scale.efficiency:.0f}%" if scale else "-",
        # the share of the step that synchronisation adds (step vs no_sync step), once measured
        "comm": f"{100 * scale.exposed_comm_fraction:.0f}%"
        if scale and scale.exposed_comm_fraction is not None
        else "-",
        # the traced steps' idle share (GPU: no kernel running; CPU: the training thread outside any op); x lists them
        "idle": _traced_idle(config),
        # the gradient noise scale so far, in examples (its interval in the summary)
        "noise": fmt.rate(scale.b_noise) if scale and scale.b_noise is not None else "-",
    }


def _traced_idle(config: ConfigSnapshot) -> str:
    found = traces.figure(config.trace, "idle_s")
    return f"{100 * found.median:.0f}%" if found else "-"
