"""A user's training script as a report block: its wait for data per world size and per rank, its step less
that wait against the smallest N, the rank the others wait for, and what the probe saw of the script (the
command, who ended it, what it lost, its process group and processes). ``analysis/script_figures.py`` makes
the figures, ``analysis/step_bound.py`` the verdict; ``report/sections.py`` places the block."""

from __future__ import annotations

from ddptop import units
from ddptop.analysis import script_steps, script_sync
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT, change_words
from ddptop.protocol.modelspec import is_script, script_command
from ddptop.report.blocks import Block, Items, Lines, Note, Part, Table
from ddptop.report.cells import not_measured, unlisted_note
from ddptop.report.schema import Config, Estimate, Summary

DATA_WAIT_HEADER = ("N", "examples per rank per step", "data wait (share of step)", "per rank",
                    "step less data wait (p50)", "against the smallest N")

DATA_WAIT_NOTE = ("Data wait: the time each rank waited for a batch over its step time (sum over sum), 95% "
                  "intervals with the launch as the unit of replication (one launch: within it only). The step less "
                  "its data wait grows with N when the ranks wait for each other in the allreduce; a change is "
                  "called only beyond noise and beyond its margin.")


def _share(found: Estimate | None) -> str:
    return units.estimate(found, units.percent)


def _per_rank(entry: Config) -> str:
    wait = entry.data_wait
    if not wait or len(wait.per_rank) < 2:
        return units.DASH
    return ", ".join(f"{rank}: {_share(figure.share)}" for rank, figure in sorted(
        wait.per_rank.items(), key=lambda item: int(item[0])))


def _against_reference(entry: Config) -> str:
    less = entry.step_less_wait
    if not less or less.ratio is None:
        return "reference" if less else units.DASH
    ratio = units.estimate(less.ratio, lambda v: units.number(v, 2, "x"))
    per = " per example" if less.per_example else ""
    margin = less.min_effect if less.min_effect is not None else DEFAULT_MIN_EFFECT
    return f"{ratio}{per} ({change_words(less.ratio.ci, margin, short=True)})"


def data_wait_rows(configs: list[Config]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for entry in sorted(configs, key=lambda e: e.world_size):
        wait, less = entry.data_wait, entry.step_less_wait
        rows.append((
            str(entry.world_size) + ("" if entry.variant == "default" else f" {entry.variant}"),  # a tune's try
            str(entry.batch_size) if entry.global_batch else "not counted",
            _share(wait.share) if wait else "not timed",
            _per_rank(entry),
            units.estimate(less.median_s, units.milliseconds) if less else units.DASH,
            _against_reference(entry),
        ))
    return rows


def _straggler_line(entry: Config) -> str | None:
    found = entry.data_wait.straggler if entry.data_wait else None
    if not found or found.rank is None:
        return None
    excess = units.estimate(found.excess_share, lambda v: units.percent(v, signed=True))
    longer = units.estimate(found.others_busy_longer_s, units.milliseconds)
    figures = (f"rank {found.rank}'s data wait {excess} of the step against the other ranks', their step less "
               f"data wait {longer} longer than its")
    if found.flagged:
        return f"N={entry.world_size}: rank {found.rank} is the rank the others wait for ({figures})"
    why = "too few steps to tell" if found.too_few_steps else "within noise"
    return f"N={entry.world_size}: no rank the others wait for beyond noise ({figures}: {why})"


def _loaders(entry: Config) -> str | None:
    loaders = entry.script.loaders if entry.script else []
    if not loaders:
        return None
    def one(loader: dict) -> str:
        settings = ", ".join(f"{key}={value}" for key, value in loader.items() if key not in LOADER_RECORD)
        if "at" not in loader:  # a summary from before the probe named each loader's line
            return settings
        made = loader.get("made") or 1
        return (f"at {loader['at']}: {settings} ({loader.get('batches', 0)} batches drawn"
                + (f", made {made} times)" if made > 1 else ")"))

    return f"DataLoader{'s' if len(loaders) > 1 else ''}: " + "; ".join(one(loader) for loader in loaders)


# what a loader's record holds beside its settings (bench_kernels.script_loaders)
LOADER_RECORD = ("at", "made", "first", "batches", "library")


def _comm_line(entry: Config) -> str | None:
    """DDP's exposed communication a step, from its own timers, with its spread over ranks and launches."""
    sync = entry.grad_sync
    if sync is None or sync.exposed_comm_s is None or sync.synchronises is False:
        return None
    spread = sync.exposed_comm_range_s
    text = f"DDP's exposed communication (its timers: backward allreduce less its overlap) {units.milliseconds(sync.exposed_comm_s)} a step"
    if spread and spread[0] != spread[1]:
        text += (f" ({units.milliseconds(spread[0]).removesuffix(' ms')}–{units.milliseconds(spread[1])} over ranks "
                 "and launches)")
    if sync.backward_comm_s is not None:
        text += f", of {units.milliseconds(sync.backward_comm_s)} of backward communication"
    return text


def seen_details(entry: Config) -> list[str]:
    """What the probe saw of one configuration's script, line by line."""
    details = []
    problem = script_steps.data_parallel_problem(entry.script.to_json() if entry.script else None)
    if problem:
        details.append(problem)
    if entry.script and entry.script.spawned:
        details.append(script_steps.SPAWNED)
    own = script_steps.own_backend(entry.backend, entry.script.group_backend) if entry.script else None
    if own:
        details.append(f"process group: {script_steps.backend_words(entry.backend, own)}")
    ended = script_steps.ended_by_words(entry.ended_by)
    if ended:
        details.append(ended)
    if entry.script and entry.script.step_marks:
        details.append(f"steps marked by {'ddptop_probe.step' if entry.script.step_marks == 'explicit' else 'the optimizer step'}"
                       f", {script_steps.optimizer_steps_words(entry.script.to_json())}")
    details += script_sync.seen_lines(entry.script.to_json() if entry.script else None)
    comm = _comm_line(entry)
    if comm:
        details.append(comm)
    loaders = _loaders(entry)
    if loaders:
        details.append(loaders)
    if not entry.global_batch and entry.stats:
        details.append("examples not counted: ex/s unknown")
    details += [f"the probe lost: {note}" for note in entry.probe_notes or ()]
    straggler = _straggler_line(entry)
    if straggler:
        details.append(straggler)
    return details


def script_block(summary: Summary) -> Block:
    scripts = [entry for entry in summary.configs if is_script(entry.model)]
    if not scripts:
        return Block()
    parts: list[Part] = []
    # the script as typed, where ddptop started (its ranks ran the same with the path made absolute)
    _, folder = summary.plan.script_command()
    commands = sorted({script_command(entry.model) for entry in scripts if entry.command})
    if commands:
        parts.append(Lines([f"command: {command}" + (f" (in {folder})" if folder else "") for command in commands]))
    groups: dict[tuple, list[Config]] = {}
    for entry in scripts:
        if entry.stats:  # a configuration not measured (yet) has no row: named under the table
            groups.setdefault((entry.model, entry.backend, entry.device), []).append(entry)
    for members in groups.values():
        parts.append(Table(DATA_WAIT_HEADER, data_wait_rows(members), first_left=True))
    if groups:
        parts.append(Note(DATA_WAIT_NOTE))
    missing = unlisted_note(scripts, {e.config_id for e in scripts if e.stats}, lambda e: not_measured(e) or "")
    if missing:
        parts.append(Note(missing))
    items = [(entry.config_id, f"N={entry.world_size}", seen_details(entry)) for entry in scripts]
    parts.append(Items([item for item in items if item[2]]))
    return Block("The script: data wait and what the probe saw", parts)
