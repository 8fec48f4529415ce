"""Render a summary as text (terminal), Markdown and CSV.

The per-configuration block keeps the layout of PyTorch's DDP benchmark (rows ``no ddp``, ``1M/1G``,
``1M/2G``...; p50/p75/p90/p95 of sec/iter with per-replica ex/sec); the scaling table keeps the columns of
the HPC article "Benchmarking Parallel Programs" (N, time, speedup, relative SU) and adds throughput,
efficiency and relative cost.

Each part of the report builds one neutral block (``*_block``: ``ddptop.report.blocks``), which one writer
renders for the terminal and one for Markdown; ``ddptop.report.sections`` says which parts there are and in
what order. Numbers are written by ``ddptop.units``.
"""

from __future__ import annotations

from typing import Any

from ddptop.report.blocks import Block, Caption, Lines, Note, Part, Table, Verbatim
from ddptop.report.cells import config_name, tokens_too
from ddptop.report.schema import NcclChoice, Summary, TuneRow, TuneTable
from ddptop import units
from ddptop.protocol import variants


LAUNCH_HEADER = ("config", "launch", "steps", "p50 (95% CI, within the launch)", "used")


def launch_spread_line(summary: Summary) -> str:
    """What every interval covers: the launch-to-launch spread pooled over the sweep, or within one launch."""
    variance = summary.uncertainty.launch_variance if summary.uncertainty else None
    if not variance:
        return ("Intervals: within one launch only (a summary from before launches were replicated): an offset "
                "between launches is not in them, and speedups compare launches.")
    if not variance.estimated:
        return ("Intervals: within one launch only (one launch per configuration): an offset between launches "
                "is not in them, and speedups compare launches; --launches 2 or more measures it.")
    ci = variance.relative_sd_ci
    return (f"Intervals: two levels. Launch-to-launch spread {units.percent(variance.relative_sd, 1)}"
            + (f" ({units.percent(ci[0], 1)}-{units.percent(ci[1], 1)})" if ci else "")
            + f" of the step time, pooled over {variance.configs} configurations' {variance.launches} "
            f"launches ({variance.df} degrees of freedom); every interval includes it.")


GPU_STATE_HEADER = "GPU busy clock, power, temp"


def _gpu_state_cell(state: dict[str, Any] | None) -> str:
    """A launch's GPUs over its window: the lowest busy SM clock, the mean power per GPU, the hottest GPU."""
    gpus = [g for g in (state or {}).values() if isinstance(g, dict)]
    clocks = [g["sm_clock_busy_mhz"] for g in gpus if g.get("sm_clock_busy_mhz")]
    power = [g["power_w"] for g in gpus if g.get("power_w") is not None]
    temps = [g["temp_max_c"] for g in gpus if g.get("temp_max_c") is not None]
    words = ([f"{min(clocks):.0f} MHz"] if clocks else []) + ([f"{sum(power) / len(power):.0f} W"] if power else [])
    return " ".join(words + ([f"{max(temps):.0f} °C"] if temps else [])) or "-"


def _with_gpu_state(summary: Summary) -> bool:
    """Whether any launch recorded its GPUs' state: the launch table's GPU column, header and rows alike."""
    return any(unit.gpu_state for entry in summary.configs for unit in entry.launches)


def launch_rows(summary: Summary) -> list[tuple[str, ...]]:
    with_gpus = _with_gpu_state(summary)
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        for unit in entry.launches:
            if unit.p50 is None:
                continue
            used = "yes" if unit.used is not False else "no: disturbed, measured again"
            if unit.used is not False and unit.disturbed:
                used = "yes, though disturbed (no quiet launch)"
            if unit.unsteady:
                used += "; not at steady state"
            rows.append((config_name(entry), unit.launch or "", str(unit.steps or "-"),
                         units.with_interval(unit.p50, unit.p50_ci, units.seconds))
                        + ((_gpu_state_cell(unit.gpu_state),) if with_gpus else ()) + (used,))
    return rows


def launches_block(summary: Summary) -> Block:
    parts: list[Part] = [Note(launch_spread_line(summary))]
    if any(len(e.launches) > 1 for e in summary.configs):
        header = LAUNCH_HEADER[:-1] + ((GPU_STATE_HEADER,) if _with_gpu_state(summary) else ()) + LAUNCH_HEADER[-1:]
        parts.append(Table(header, launch_rows(summary), first_left=True))
        unsteady = [f"{config_name(e)} {u.launch}: " + "; ".join(u.unsteady)
                    for e in summary.configs for u in e.launches if u.unsteady]
        if unsteady:
            parts.append(Note("Not at the state the other launches ran at (the GPUs' clocks, limits or temperature "
                              "differed): " + " | ".join(unsteady)))
    return Block("Launch to launch", parts)


TUNE_HEADER = ("variant", "sec/iter (p50)", "ex/s vs default", "verdict", "peak memory", "what changes in the maths")


def _tune_cells(row: TuneRow) -> tuple[str, ...]:
    speedup = ("1.00" if row.variant in (variants.DEFAULT, variants.AGAIN) else
               units.with_interval(row.speedup, row.speedup_ci, lambda v: units.number(v, 2, "x")))
    verdict = row.verdict if row.status == "ok" else f"{row.status} (below)"  # the reason: "Not measured in full"
    if row.status == "ok" and row.reason:  # dropped by the search: after how many launches
        verdict += f", {row.reason.partition(':')[0]}"
    memory = (units.binary_bytes(row.peak_memory_bytes) if row.peak_memory_bytes is not None
              else units.binary_bytes(row.max_rss_bytes) + " RSS" if row.max_rss_bytes is not None else units.DASH)
    return (row.what if row.variant not in (variants.DEFAULT, variants.AGAIN) else
            "default: DDP as written" + (", again" if row.variant == variants.AGAIN else ""),
            units.with_interval(row.sec_iter, row.sec_iter_ci, units.seconds), speedup, verdict, memory,
            row.math or "nothing")


def tune_answer(table: TuneTable) -> list[str]:
    """The recommendation under a tuning table: only what beats the default beyond noise, in those words."""
    by_name = {row.variant: row for row in [*table.rows, *table.combination]}
    best = [by_name[name] for name in table.recommended if name in by_name]
    if not best:
        return [f"Nothing beats the default beyond noise (a change is called past ±{units.percent(table.min_effect)}"
                "): keep DDP as written."]
    def times(row: TuneRow) -> str:
        return units.with_interval(row.speedup, row.speedup_ci, lambda v: units.number(v, 2, "x"))

    top = best[0]
    together = next((row for row in table.combination if variants.JOIN in row.variant), None)
    against = "the examples/s of DDP as written measured beside it" if top is together else "the default's examples/s"
    lines = [f"Set {top.what}: {times(top)} {against}."
             + (f" It changes the arithmetic: {top.math}." if top.math else "")]
    if together is not None and together is not top:
        lines.append(f"Set together ({together.what}) they were {together.verdict} against DDP as written "
                     f"measured again beside them: {times(together)}.")
    if len(best) > 1:
        alone = "" if together is not None else " Each was measured alone, not together."
        lines.append("Also faster beyond noise: " + "; ".join(f"{row.what} {times(row)}" for row in best[1:])
                     + f".{alone}")
    return lines


def compile_notes(table: TuneTable) -> list[str]:
    """torch.compile's cost, apart from its step time: the first step of each launch (which compiles), and
    whether the compiled backward still lets DDP's allreduces overlap it."""
    notes = []
    for row in [*table.rows, *table.combination]:
        cost = row.compiled
        if cost is None:
            continue
        firsts = ", ".join(units.seconds(s, 1, unit=True) for s in cost.first_step_s)
        line = (f"{row.what}: the first step, which compiles, took {firsts} (one per launch; not in the step "
                "time above; Inductor's cache on disk makes a later launch compile faster)")
        if cost.graphs == 0:
            line += ("; Dynamo captured no graph, so the model ran eagerly (a model whose forward is torch's own, "
                     "a bare nn.Sequential, is not compiled inside DDP)")
        elif cost.graphs is not None:
            line += f"; {cost.graphs} graph(s), {cost.graph_breaks or 0} graph break(s)"
        if cost.bucketing == "kept":
            line += (f"; the backward split at {cost.compiled_buckets} bucket(s) as DDP's {cost.ddp_buckets}: each "
                     "allreduce can still overlap the backward")
        elif cost.bucketing == "lost":
            line += (f"; the backward split at only {cost.compiled_buckets} bucket(s) for DDP's {cost.ddp_buckets}: "
                     "allreduces wait for more of the backward than in eager DDP")
        notes.append(line + ".")
    return notes


def nccl_notes(table: TuneTable) -> list[str]:
    """What NCCL says it used for the allreduces of each variant's launches (its TUNING log), beside what an
    NCCL variant asked for: NCCL may ignore a setting it cannot honour for a size or a topology."""
    notes = []
    for row in [*table.rows, *table.combination]:
        allreduces = [c for c in row.nccl or [] if c.collective == "AllReduce"]
        if not allreduces:
            continue
        total = sum(c.count for c in allreduces)
        def sizes(c: NcclChoice) -> str:
            low, high = units.binary_bytes(c.min_bytes), units.binary_bytes(c.max_bytes)
            return low if low == high else f"{low}–{high}"

        used = "; ".join(f"{c.algorithm}/{c.protocol} {units.percent(c.count / total)} ({sizes(c)})"
                         for c in allreduces[:4])
        line = f"{row.what}: NCCL's log shows its {total:,} allreduces ran {used}"
        asked = dict(variants.variant(row.variant).env) if row.variant != variants.AGAIN else {}
        for variable, field in (("NCCL_ALGO", "algorithm"), ("NCCL_PROTO", "protocol")):
            wanted = asked.get(variable)
            if wanted and any(getattr(c, field) != wanted.upper() for c in allreduces):
                line += f"; not all with {variable}={wanted}, which was asked"
        notes.append(line + " (every allreduce of the launches that measured it).")
    return notes


def tuning_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.tuning:
        parts += [Caption(f"Tuning: {table.model}, batch {table.batch_size} per rank at N={table.world_size} "
                          f"({table.backend}); each variant against DDP as written, 95% intervals"),
                  Table(TUNE_HEADER, [_tune_cells(row) for row in table.rows], first_left=True)]
        if table.combination:
            parts += [Caption("The faster ones set together, against DDP as written measured again beside them in "
                              "launches of their own"),
                      Table(TUNE_HEADER, [_tune_cells(row) for row in table.combination], first_left=True)]
        parts += [Note(line) for line in tune_answer(table)]
        parts += [Note(line) for line in compile_notes(table) + nccl_notes(table)]
        if table.skipped:
            parts.append(Note("Not measured on this device: " + "; ".join(
                f"{s.get('variant')} ({s.get('why')})" for s in table.skipped) + "."))
        best = next((row for row in [*table.rows, *table.combination]
                     if table.recommended and row.variant == table.recommended[0]), None)
        if best is not None and best.paste:
            parts.append(Verbatim("".join(f"    {line}\n" for line in best.paste)))
    return Block(None, parts)


def problems_text(summary: Summary) -> str:
    lines = []
    for entry in summary.configs:
        if entry.status != "ok":
            stats = entry.stats
            kept = (
                f" ({stats.n} steps kept: p50 {units.seconds(stats.sec_iter.p50, 4, unit=True)}, "
                f"{units.rate(stats.ex_sec_total.p50)} ex/s"
                f"{tokens_too(stats.tok_sec_total.p50 if stats.tok_sec_total else None)})"
                if stats else ""
            )
            lines.append(f"{entry.config_id}: {entry.status}{kept}" + (f": {entry.reason}" if entry.reason else ""))
        elif entry.analysis_error:
            lines.append(f"{entry.config_id}: ok, steps kept; communication analysis failed: {entry.analysis_error}")
    return "\n".join(lines)


def not_measured_block(summary: Summary) -> Block:
    problems = problems_text(summary)
    return Block("Not measured in full:", [Lines(problems.splitlines(), indent=False)]) if problems else Block()


def damaged_lines(summary: Summary) -> list[str]:
    """The run directory's files read around damage (``build._damage``), one line each."""
    damaged = summary.damaged
    return [f"{name}: {what}" for name, what in sorted(damaged.items())] if isinstance(damaged, dict) else []


def damaged_block(summary: Summary) -> Block:
    lines = damaged_lines(summary)
    return Block("Read around damaged files (the figures leave out what they lost):", [Lines(lines)]) if lines else Block()


def disturbed_lines(summary: Summary) -> list[str]:
    """One line per configuration measured while something else used the node (``telemetry/validity.py``)."""
    return [f"{entry.config_id}: " + "; ".join(entry.validity.reasons)
            for entry in summary.configs if entry.validity and entry.validity.disturbed]


def disturbed_block(summary: Summary) -> Block:
    lines = disturbed_lines(summary)
    heading = "Disturbed while measured (other load or GPU limits; the figure may not be this hardware's):"
    return Block(heading, [Lines(lines, indent=False)]) if lines else Block()


def overhead_line(summary: Summary) -> str:
    overhead = summary.overhead
    analysis_s = overhead.analysis_s or 0
    setup = overhead.fraction_setup if overhead.fraction_setup is not None else overhead.fraction_outside_iterations
    extra = f", {units.seconds(analysis_s, 1, unit=True)} in communication analysis and collectives" if analysis_s else ""
    if overhead.trace_s:
        extra += f", {units.seconds(overhead.trace_s, 1, unit=True)} in profiler traces"
    return (
        f"Sweep wall time {units.seconds(overhead.sweep_wall_s, 1, unit=True)}, of which "
        f"{units.seconds(overhead.iterations_s, 1, unit=True)} in warm-up and "
        f"measured steps{extra}; {units.percent(setup)} went to launching, initialising and tearing down."
    )


def overhead_block(summary: Summary) -> Block:
    return Block(None, [Caption(overhead_line(summary))])
