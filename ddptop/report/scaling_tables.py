"""Step time per configuration, the scaling tables and DataParallel against DDP as report blocks
(``analysis/scaling.py`` makes the figures; ``report/sections.py`` places the blocks).

The per-configuration block keeps the layout of PyTorch's DDP benchmark (rows ``no ddp``, ``1M/1G``,
``1M/2G``...; p50/p75/p90/p95 of sec/iter with per-replica ex/sec, headed "ex/sec per rank"); the scaling
table keeps the columns of the HPC article "Benchmarking Parallel Programs" (N, time, speedup, relative SU) and adds throughput,
efficiency and relative cost.
"""

from __future__ import annotations

from typing import Any

from ddptop import units
from ddptop.analysis import formulas, gradient_noise, script_steps
from ddptop.protocol.comm_hooks import AVERAGING_HOOKS
from ddptop.protocol.modelspec import display_name, is_builtin
from ddptop.report.blocks import Block, Caption, Note, Part, Table, Verbatim
from ddptop.report.cells import TOKENS_HEADER, tokens_too
from ddptop.report.schema import ci_of, value_of, Amdahl, Config, ScalingRow, ScalingTable, Summary

SHOWN_PERCENTILES = ("p50", "p75", "p90", "p95")
PER_RANK_RATE = "ex/sec per rank"  # the step time block's examples/s: one rank's, where the scaling table's are all ranks'
RATE_WIDTH = len(PER_RANK_RATE) + 3


def _benchmark_groups(summary: Summary) -> dict[tuple, list[Config]]:
    groups: dict[tuple, list[Config]] = {}
    for entry in summary.configs:
        # a script's batch is what it drew at each N: its world sizes in one block, each row its own batch
        batch = None if not entry.kind.own_batch else entry.batch_size if entry.scaling == "weak" else entry.global_batch
        groups.setdefault((entry.model, batch, entry.scaling, entry.backend), []).append(entry)
    for members in groups.values():
        members.sort(key=lambda e: (e.mode != "no_ddp", e.world_size, e.mode == "dp"))
    return groups


def _unit(entry: Config) -> str:
    return "GPUs" if entry.device == "cuda" else "ranks"


def _row_prefix(entry: Config, label_width: int = 8) -> str:
    return f"{entry.world_size:4d} {_unit(entry)} -- {entry.label:>{label_width}s}:"


def benchmark_text(summary: Summary) -> str:
    """PyTorch's DDP benchmark's per-model block, one row per configuration."""
    out = []
    for (model, batch, scaling, backend), members in _benchmark_groups(summary).items():
        meaning = "per rank" if scaling == "weak" else "global"
        first = members[0]  # a summary from before the workloads: a preset's seq_len alone
        seq_len = first.tokens_per_example or (first.seq_len if is_builtin(first.model) else None)
        tokens = f", {units.significant(seq_len, 6)} tokens per example" if seq_len else ""
        if not first.kind.own_batch:
            own = next((found for e in members
                        if e.script and (found := script_steps.own_backend(backend, e.script.group_backend))), None)
            out.append(f"Benchmark: {display_name(model)}, the batch as the script drew it ({_script_batches(members)}; "
                       f"{script_steps.backend_words(backend, own)}){tokens}")
        else:
            out.append(f"Benchmark: {display_name(model)} with batch size {batch} ({meaning}, {scaling} scaling, {backend}){tokens}")
        out.append("")
        width = max(8, *(len(entry.label) for entry in members))  # PyTorch's 8, wider for a tune's variants
        indent = len(_row_prefix(members[0], width))
        # its ex/sec is one rank's (the batch per rank over the step), the scaling table's all ranks': said
        out.append(" " * indent + ("sec/iter".rjust(14) + PER_RANK_RATE.rjust(RATE_WIDTH)) * len(SHOWN_PERCENTILES)
                   + ("   tok/sec (all ranks, p50)" if seq_len else ""))
        for entry in members:
            prefix = _row_prefix(entry, width)
            stats = entry.stats
            if stats:  # a configuration cut short shows what its kept steps say, and that it was cut
                cells = [
                    f"  {p}: {units.seconds(stats.sec_iter.at(p), 3):>6}s"
                    f"{units.rate(stats.ex_sec_replica.at(p)):>{RATE_WIDTH - 2}s}/s"
                    for p in SHOWN_PERCENTILES
                ]
                if stats.tok_sec_total is not None:
                    cells.append(f"  {units.rate(stats.tok_sec_total.p50):>24s}/s")
                out.append(prefix + "".join(cells) + _cut_short(entry))
            else:
                reason = f": {entry.reason}" if entry.reason else ""
                out.append(f"{prefix}  {entry.status}{reason}")
        out.append("")
    return "\n".join(out)


def _script_batches(members: list[Config]) -> str:
    """Each world size's examples per rank per step, as the probe counted them."""
    measured = [e for e in members if e.stats]  # one not measured yet drew nothing
    said = (f"{e.batch_size} per rank at N={e.world_size}" if e.global_batch
            else f"examples not counted at N={e.world_size}" for e in measured)
    return ", ".join(dict.fromkeys(said)) or "nothing measured"  # a tune's tries at one N: said once


def _cut_short(entry: Config) -> str:
    """'' for a configuration measured in full; else its status, the steps kept and why."""
    if entry.status == "ok":
        return ""
    reason = f": {entry.reason}" if entry.reason else ""
    return f"  [{entry.status}, {entry.stats.n if entry.stats else 0} steps kept{reason}]"


def benchmark_block(summary: Summary) -> Block:
    found = benchmark_text(summary)
    return Block(None, [Verbatim(found)]) if found else Block()


SCALING_HEADER = (
    "N", "sec/iter (p50)", "ex/sec (all ranks)", "speedup", "efficiency", "relative cost", "relative SU", "Karp-Flatt",
)
COST_HEADER = "cost / 1M examples"


def _priced(summary: Summary) -> bool:
    return summary.plan.price_per_gpu_hour is not None


ENERGY_HEADER = ("ex/J", "relative energy")


def _metered(summary: Summary) -> bool:
    """Whether any row has NVML energy figures (a GPU with an energy counter, or power readings)."""
    return any(r.examples_per_joule for table in summary.scaling for r in table.rows)


def _tokens(table: ScalingTable) -> bool:
    """Whether the table is a transformer's, with tokens/s beside examples/s."""
    return any(r.tok_sec_total is not None for r in table.rows)


# the figures of a row relative to the table's reference row
RELATIVE_FIGURES = ("speedup", "efficiency", "relative_cost", "relative_su", "karp_flatt")


def _to_loss(table: ScalingTable) -> bool:
    """Whether a row has a speedup in time to the same loss (its gradient noise scale resolved)."""
    return any(r.time_to_loss_speedup is not None for r in table.rows)


def _scaling_header(summary: Summary, tokens: bool = False, to_loss: bool = False) -> tuple[str, ...]:
    header = SCALING_HEADER[:3] + ((TOKENS_HEADER,) if tokens else ()) + SCALING_HEADER[3:4]
    header += ((TO_LOSS_HEADER,) if to_loss else ()) + SCALING_HEADER[4:]
    return (header + ((COST_HEADER,) if _priced(summary) else ())
            + (ENERGY_HEADER if _metered(summary) else ()))


TO_LOSS_HEADER = "to-loss speedup (model)"


REFERENCE_ONLY = "reference"  # the speedup cell of a table's only row: nothing was measured to compare with


def _scaling_cells(row: ScalingRow, priced: bool = False, metered: bool = False,
                   tokens: bool = False, alone: bool = False, to_loss: bool = False) -> tuple[str, ...]:
    """A row's cells; ``alone``: the table's only row, whose speedup, efficiency and costs are the reference's
    by definition (N_ref, 100%, 1), not measured, so shown as the reference and no figure."""
    def shown(key: str, fmt: Any) -> str:
        if alone and key in RELATIVE_FIGURES:
            return REFERENCE_ONLY if key == "speedup" else "-"
        return units.estimate(row.figure(key), fmt)

    cells: tuple[str, ...] = (
        row.label,
        shown("sec_iter", units.seconds),
        shown("ex_sec_total", lambda v: units.number(v, 1)),
    )
    if tokens:
        cells += (units.estimate(row.tok_sec_total, lambda v: units.number(v, 0)),)
    cells += (shown("speedup", units.number),)
    if to_loss:
        cells += (units.estimate(row.time_to_loss_speedup, units.number),)
    cells += (
        shown("efficiency", units.percent),
        shown("relative_cost", units.number),
        shown("relative_su", units.number),
        shown("karp_flatt", lambda v: units.number(v, 3)),
    )
    cells += (units.number(row.cost_per_million),) if priced else ()
    return cells + ((units.significant(row.examples_per_joule), "-" if alone else units.number(row.relative_energy))
                    if metered else ())


def projection_lines(table: ScalingTable) -> list[str]:
    """The projection beyond this node under a scaling table (``analysis/projection.py``), labelled as one."""
    found = table.projection
    if not found:
        return []
    points = "; ".join(
        f"N={p.world_size} on {p.nodes} nodes "
        f"{units.estimate(p.sec_iter, units.seconds)} s/iter, "
        f"speedup {units.estimate(p.speedup, lambda v: units.number(v, 1))}, "
        f"efficiency {units.estimate(p.efficiency, units.percent)}"
        for p in found.points)
    return [f"Projected beyond this node ({found.assumptions}): {points}."]


def model_lines(table: ScalingTable) -> list[str]:
    """The scaling model under a scaling table: Amdahl's fit, the data moved per epoch, the projection."""
    lines = projection_lines(table)
    fit = table.amdahl
    raw = fit.raw_serial_fraction if fit else None
    fraction = fit.serial_fraction if fit else None
    if fit and raw and not formulas.amdahl_applies(raw.value):
        lines.append(_amdahl_misfit(fit))
    elif fit and fraction:
        fraction_ci = ci_of(fit.serial_fraction)
        limit = (
            f", so speedup can never pass "
            f"{units.estimate(fit.max_speedup, lambda v: units.number(v, 1))}"
            if fit.max_speedup else ""
        )
        noise = " (an interval that includes 0: the data cannot tell a serial part from none)" if (
            units.interval_includes(fraction_ci, 0.0) and fraction.value > 0) else ""
        lines.append(
            f"Amdahl fit over {fit.points} world size{'s' if fit.points > 1 else ''} above 1: "
            f"serial fraction {units.estimate(fit.serial_fraction, lambda v: units.percent(v, 1))}"
            f"{limit} (fit error {units.number(fit.rmse_speedup)} in speedup){noise}."
        )
    largest = table.rows[-1] if table.rows else None
    epoch = largest.epoch if largest else None
    if epoch and largest and largest.world_size > 1:
        lines.append(
            f"Per epoch of {epoch.epoch_examples:,} examples at N={largest.world_size}: "
            f"{epoch.steps_per_epoch:,} steps; gradients synchronised "
            f"{units.binary_bytes(epoch.grad_bytes_per_epoch)} (gradient bytes × steps), "
            f"{units.binary_bytes(epoch.ring_bytes_per_rank_per_epoch)} sent by each rank in a ring allreduce."
        )
    return lines


def _amdahl_misfit(fit: Amdahl) -> str:
    """The sentence for a fit outside [0, 1]: printing it bounded ("serial fraction 100%, speedup can never
    pass 1.0") would state a law the data contradict."""
    sizes = f"{fit.points} world size{'s' if fit.points > 1 else ''} above 1"
    whole = ", on the whole," if fit.points > 1 else ""
    raw, raw_ci = value_of(fit.raw_serial_fraction) or 0.0, ci_of(fit.raw_serial_fraction)
    fitted = units.estimate(fit.raw_serial_fraction, lambda v: units.percent(v, 1))
    if raw > 1:
        edge = (" The interval reaches 100%: an all-serial step cannot be ruled out."
                if units.interval_includes(raw_ci, 1.0) else "")
        return (f"Amdahl's law does not fit over {sizes}: the speedup is{whole} below 1, so the step grew with N, which "
                f"no fixed serial part explains (fitted serial fraction {fitted}, above the 100% it can be).{edge}")
    edge = " The interval reaches 0%: it may be plain linear scaling." if units.interval_includes(raw_ci, 0.0) else ""
    return (f"Amdahl's law does not fit over {sizes}: the speedup is{whole} above N (superlinear), so there is no "
            f"serial part to fit (fitted serial fraction {fitted}).{edge}")


def table_place(table: ScalingTable) -> str:
    """A scaling table's device and threads, where the plan measured more than one (--devices, --threads)."""
    place = f", {table.device}" if table.device else ""
    return place + (f", {table.threads} thread{'s' if table.threads != 1 else ''} per rank" if table.threads else "")


def _scaling_title(table: ScalingTable) -> str:
    if table.batch_observed is not None:  # a user's script: the batch as it drew it, or no scaling at all
        head = "Scaling"
        if table.not_data_parallel:  # named where the table says which world sizes (an older summary does not)
            sizes = ", ".join(f"N={n}" for n in table.not_data_parallel_at or ())
            head = f"Not scaling ({sizes} not data-parallel)" if sizes else "Not scaling"
        return (f"{head}: {display_name(table.model)} ({table.backend_words}{table_place(table)}), batch as observed: "
                f"{table.batch_observed}; against N={table.reference_world_size}")
    title = (
        f"Scaling: {display_name(table.model)}{'' if table.strategy == 'ddp' else ' ' + table.strategy}, batch {table.batch_size} "
        f"{table.batch_meaning} "
        f"({table.scaling} scaling, {table.backend}{table_place(table)}), against N={table.reference_world_size}"
    )
    overhead = table.ddp_overhead_at_reference
    if overhead is not None:
        ci = overhead.ci
        figure = units.estimate(overhead, lambda v: units.percent(v, 1, signed=True))
        if units.interval_includes(ci, 0.0):
            title += f"; DDP's cost over no-DDP at N=1 is within noise: {figure}"
        else:
            title += f"; DDP costs {figure} over no-DDP at N=1"
    return title


def scaling_block(summary: Summary) -> Block:
    parts: list[Part] = []
    priced, metered = _priced(summary), _metered(summary)
    for table in summary.scaling:
        to_loss = _to_loss(table)
        parts += [Caption(_scaling_title(table)),
                  Table(_scaling_header(summary, _tokens(table), to_loss),
                        [_scaling_cells(r, priced, metered, _tokens(table), alone=len(table.rows) == 1,
                                        to_loss=to_loss)
                         for r in table.rows])]
        if table.not_data_parallel:
            parts.append(Note(f"{table.not_data_parallel[0].upper()}{table.not_data_parallel[1:]}."))
        if table.no_ddp_note:
            parts.append(Note(f"{table.no_ddp_note[0].upper()}{table.no_ddp_note[1:]}."))
        if table.recommendation:
            parts.append(Note(table.recommendation))
        parts += [Note(line) for line in model_lines(table)]
        parts += [Note(line) for line in noise_lines(table, summary)]
    return Block(None, parts)


def drift_words(noise: Any) -> str:
    """How B_noise moved between the two halves of its synchronisations, where both were estimated."""
    if noise.drift is None:
        return ""
    halves = (f"{units.estimate(noise.first_half, units.significant)} over the first half of them, "
              f"{units.estimate(noise.second_half, units.significant)} over the second")
    if noise.drift == gradient_noise.STEADY:
        return f" {halves[0].upper()}{halves[1:]}: no change told from the noise."
    return f" It {noise.drift} over the window: {halves} (the intervals apart)."


def _noise_not_measured(entry: Config) -> str | None:
    """Why a script's configuration at N >= 2 gave no gradient noise scale, where what the probe saw says."""
    wrappers = (entry.script.wrappers or []) if entry.script is not None else []
    sharded = sorted({w.kind for w in wrappers if w.kind and w.kind != "DistributedDataParallel"})
    if sharded and not any(w.kind == "DistributedDataParallel" for w in wrappers):
        return (f"Gradient noise scale: not measured under {', '.join(sharded)}, whose gradients are reduced in "
                "shards (no whole gradient on either side of one allreduce).")
    hooks = sorted({w.comm_hook for w in wrappers if w.kind == "DistributedDataParallel" and w.comm_hook
                    and w.comm_hook not in AVERAGING_HOOKS})
    if hooks:
        return (f"Gradient noise scale: not measured under the script's comm hook {', '.join(hooks)}, whose result "
                "is not the average of the ranks' gradients.")
    counts = [(syncs, steps) for w in wrappers if w.kind == "DistributedDataParallel"
              for _, syncs, steps in (w.sync_steps or [])]
    if counts and not any(syncs == 1 for syncs, _ in counts):
        return ("Gradient noise scale: not measured, as no step synchronised exactly once (a bucket synchronised "
                "after each micro-batch holds the earlier ones' average plus its own gradient, no one batch's).")
    return None


def noise_lines(table: ScalingTable, summary: Summary) -> list[str]:
    """The gradient noise scale of each world size of a scaling table where it was measured, what it means for
    time to the same loss (a model, its assumptions said), and why a strategy's table has none."""
    ids = {row.config_id for row in table.rows}
    measured = [entry for entry in summary.configs if entry.config_id in ids and entry.gradient_noise is not None]
    if table.strategy != "ddp":
        return [f"Gradient noise scale: not measured under {table.strategy} (the communication probe, which takes "
                "the gradient norms, runs on plain DDP)."]
    if not measured:
        return [line for line in (_noise_not_measured(entry) for entry in summary.configs
                                  if entry.config_id in ids and entry.world_size > 1) if line][:1]
    lines = []
    for entry in sorted(measured, key=lambda e: e.world_size):
        noise = entry.gradient_noise
        assert noise is not None
        head = f"Gradient noise scale B_noise = tr(Σ)/|G|² at N={entry.world_size}: {noise.words()}"
        lines.append(f"{head}." if noise.b_noise is None else
                     f"{head}, over {noise.syncs} synchronisations of {noise.over} (local batch "
                     f"{units.significant(noise.batch_local)}, global {units.significant(noise.batch_global)})."
                     + drift_words(noise))
    said = [row for row in table.rows if row.time_to_loss_speedup is not None]
    if said:
        row, reference = said[-1], table.rows[0]
        lines.append(
            f"In time to the same loss: at N={row.world_size} the global batch of {row.global_batch} makes each "
            f"example worth about {units.estimate(row.example_worth, lambda v: units.significant(v, 2))} of one at "
            f"N={reference.world_size} "
            f"(global batch {reference.global_batch}); "
            f"expected speedup {units.estimate(row.time_to_loss_speedup, units.number)} against a throughput "
            f"speedup of {units.estimate(row.speedup, units.number)}.")
    estimated = [e.gradient_noise for e in measured if e.gradient_noise and e.gradient_noise.b_noise is not None]
    if estimated:  # what the figure means, where there is one
        caveat = f"; {gradient_noise.SYNTHETIC}" if any(noise.synthetic for noise in estimated) else ""
        lines.append(f"{gradient_noise.ASSUMPTIONS}{caveat}.")
    return lines


DP_HEADER = ("model", "batch/device", "N", "DataParallel sec/iter", "DDP sec/iter", "DP ex/s", "DDP ex/s",
             "DDP speedup over DP")


def dp_rows(summary: Summary) -> list[tuple[str, ...]]:
    return [
        (
            r.model, str(r.batch_size), str(r.world_size),
            units.seconds(r.dp_sec_iter) if r.dp_status == "ok" else r.dp_status,
            units.seconds(r.ddp_sec_iter), units.number(r.dp_ex_sec_total, 1) + tokens_too(r.dp_tok_sec_total),
            units.number(r.ddp_ex_sec_total, 1) + tokens_too(r.ddp_tok_sec_total),
            units.number(r.ddp_speedup_over_dp, 2, "x"),
        )
        for r in summary.dp_vs_ddp
    ]


def dp_block(summary: Summary) -> Block:
    rows = dp_rows(summary)
    return Block("DataParallel vs DDP", [Table(DP_HEADER, rows, first_left=True)]) if rows else Block()
