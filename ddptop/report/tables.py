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

from ddptop.report.blocks import Block, Caption, Items, Lines, Note, Pairs, Part, Table, Verbatim
from ddptop.report.cells import config_name, tokens_too
from ddptop.report.schema import (Achieved, Buckets, CollectiveTable, DdpLogging, NcclChoice, Straggler,
                                  StragglerEvidence, Summary, TuneRow, TuneTable)
from ddptop import units
from ddptop.protocol import variants


COMM_HEADER = (
    "config", "step p50", "no_sync p50", "exposed comm", "DDP fwd", "DDP bwd", "DDP comm", "DDP overlap",
    "buckets in flight", "t(N)-t(1) est.", "allreduce/rank", "DDP busbw", "kernel busbw",
)


def communication_rows(summary: Summary) -> list[tuple[str, ...]]:
    estimates = summary.scaling_rows()
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        comm = entry.communication
        if not comm:
            continue
        logging = comm.ddp_logging or DdpLogging()
        buckets = comm.buckets or Buckets()
        achieved = buckets.achieved or Achieved()
        exposed = units.with_interval(comm.exposed_comm_s, comm.exposed_comm_s_ci, units.milliseconds)
        if comm.exposed_comm_fraction is not None:
            exposed += f", {units.percent(comm.exposed_comm_fraction)}"
        if comm.exposed_comm_s_ci and comm.exposed_comm_s_ci[0] == 0.0:
            exposed += " (within noise of none)"
        estimate = estimates.get(entry.config_id)
        rows.append(
            (
                config_name(entry)
                + (f" bucket {entry.bucket_cap_mb:g}" if len(summary.plan.bucket_caps()) > 1 else ""),
                units.milliseconds(comm.step_s),
                units.milliseconds(comm.compute_s),
                exposed,
                units.milliseconds(logging.forward_compute_s),
                units.milliseconds(logging.backward_compute_s),
                units.milliseconds(logging.backward_comm_s),
                units.milliseconds(logging.backward_compute_comm_overlap_s),
                units.milliseconds(buckets.in_flight_s),
                units.milliseconds(estimate.comm_estimate_from_t1_s if estimate else None),
                units.binary_bytes(comm.allreduce_bytes_per_rank) if entry.world_size > 1 else units.DASH,
                units.gbps(achieved.busbw_gbs) + _of_link(achieved.link_share, achieved.link),
                units.gbps(achieved.collective_busbw_gbs),
            )
        )
    return rows


def _of_link(share: float | None, link: str | None) -> str:
    """" (61% of NVLink)" after a busbw: the share of the link's peak it ran over, when there is one."""
    return f" ({units.percent(share)} of {link})" if share is not None else ""


COMM_NOTE = (
    "exposed comm = step - no_sync step (95% interval in brackets); DDP columns are DDP's own averages; buckets in flight = time any "
    "gradient bucket's allreduce was running (comm hook); t(N)-t(1) est. = t(N) minus the N=1 time scaled to "
    "the rank's work; busbw = bytes x 2(N-1)/N / time, the kernel's at DDP's bucket size, with its share of "
    "the peak of the link it ran over (NVLink, or PCIe) where there is one."
)


COLLECTIVE_HEADER = ("size", "placement", "time p50", "algbw", "busbw")


def _collective_rows(table: CollectiveTable) -> list[tuple[str, ...]]:
    return [
        (
            units.binary_bytes(r.bytes),
            "in place" if r.inplace else "out of place",
            units.microseconds(r.time_s),
            units.gbps(r.algbw_gbs),
            units.with_interval(r.busbw_gbs, r.busbw_gbs_ci, units.gbps),
        )
        for r in table.rows
    ]


def _collective_title(table: CollectiveTable) -> str:
    peak = ""
    if table.peak_busbw_gbs:
        peak = f"; peak busbw {units.gbps(table.peak_busbw_gbs)} at {units.binary_bytes(table.peak_at_bytes)}"
        if table.link_share is not None:
            peak += (f", {units.percent(table.link_share)} of the {units.gbps(table.link_peak_gbs)} "
                     f"{table.link} peak")
        elif table.link_why:
            peak += f" ({table.link_why})"
    return (
        f"Collective {table.op} at N={table.world_size} ({table.backend}), "
        f"busbw = algbw x {units.significant(table.busbw_factor)}{peak}"
    )


def communication_block(summary: Summary) -> Block:
    rows = communication_rows(summary)
    if not rows:
        return Block()
    return Block("Compute vs communication (per step)", [Table(COMM_HEADER, rows, first_left=True), Note(COMM_NOTE)])


def _times(ratio: float | None, ci: list[float] | None) -> str:
    return units.with_interval(ratio, ci, lambda v: units.number(v, 2, "x"))


def _steps(evidence: StragglerEvidence) -> str:
    return f"{evidence.steps} steps a rank" + (": too few to tell" if evidence.too_few_steps else "")


def straggler_figures(straggler: Straggler) -> tuple[str, list[str]]:
    """The straggler named (``analysis/stragglers.py``), and the figures that name it or clear every rank."""
    rank, unconfirmed = straggler.rank, straggler.unconfirmed
    if rank is not None:
        head = f"rank {rank} is the straggler ({straggler.evidence})"
    elif unconfirmed and len(unconfirmed) > 1:
        first, second = unconfirmed[:2]
        head = (f"no straggler named: the {first.evidence} points at rank {first.rank}, the "
                f"{second.evidence} at rank {second.rank}")
    elif unconfirmed:
        found = unconfirmed[0]
        other = "allreduce wait" if found.evidence == "no_sync compute" else "no_sync compute"
        head = (f"no straggler named: the {found.evidence} points at rank {found.rank}, the {other} does "
                f"not confirm it beyond noise (measured at another time: a passing load can slow one rank in one)")
    else:
        head = "no straggler beyond noise"
    figures = []
    compute = straggler.compute
    if compute:
        figures.append(f"compute alone (no_sync, {_steps(compute)}): rank {compute.rank} "
                       f"{_times(compute.ratio, compute.ratio_ci)} the other ranks'")
    wait = straggler.allreduce_wait
    if wait:
        longer = units.with_interval(wait.others_wait_s, wait.others_wait_s_ci, units.milliseconds)
        figures.append(f"allreduce wait ({_steps(wait)}): the other ranks wait {longer} a step longer than "
                       f"rank {wait.rank}")
    steps = straggler.step_time
    if steps and (compute or wait or rank is not None):
        figures.append(f"step time: rank {steps.rank} {_times(steps.ratio, steps.ratio_ci)} the "
                       f"other ranks'" + (" (alike: DDP keeps the ranks in step)" if (compute or wait) and
                                           units.interval_includes(steps.ratio_ci, 1.0) else ""))
    if rank is not None and not compute:
        figures.append("each rank's compute was not timed alone (no no_sync steps: --comm-iters 0, or the "
                       "communication analysis failed)")
    return head, figures


def stragglers_found(summary: Summary) -> list[tuple[str, str, list[str]]]:
    """(configuration, head, figures) for each configuration of two ranks or more that has a straggler named,
    or the communication analysis's figures that show none beyond noise."""
    found = []
    for entry in summary.configs:
        straggler = entry.straggler
        if straggler and (straggler.rank is not None or straggler.compute or straggler.allreduce_wait):
            found.append((entry.config_id, *straggler_figures(straggler)))
    return found


STRAGGLER_NOTE = (
    "DDP's allreduce keeps the ranks in step, so a slow rank stretches every rank's step alike: the straggler "
    "shows in each rank's compute timed alone inside no_sync() and in how long the others wait for it in the "
    "allreduce (95% intervals in brackets)."
)


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


def stragglers_block(summary: Summary) -> Block:
    found = stragglers_found(summary)
    if not found:
        return Block()
    return Block("Stragglers (per configuration)", [Items(found), Note(STRAGGLER_NOTE)])


def collectives_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.collectives:
        parts += [Caption(_collective_title(table)), Table(COLLECTIVE_HEADER, _collective_rows(table))]
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


def _tflops(value: float | None) -> str:
    return units.DASH if value is None else units.number(value / 1e12, 3)


COMPUTE_HEADER = ("config", "dtype", "GFLOPs/step", "TFLOP/s per device", "all devices", "MFU (datasheet)",
                  "of measured ceiling")


def compute_rows(summary: Summary) -> list[tuple[str, ...]]:
    """Per configuration with a FLOP count: what it achieved and the share of the two peaks."""
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        flops = entry.flops
        if not flops:
            continue
        rows.append((
            config_name(entry),
            flops.dtype or units.DASH,
            units.number((flops.per_step or 0) / 1e9, 2),
            units.with_interval(flops.achieved_per_device, flops.achieved_per_device_ci, _tflops),
            _tflops(flops.achieved_total),
            units.with_interval(flops.mfu_datasheet, flops.mfu_datasheet_ci, units.percent),
            units.with_interval(flops.mfu_ceiling, flops.mfu_ceiling_ci, units.percent),
        ))
    return rows


def _peaks_note(summary: Summary) -> str:
    sources = sorted({e.flops.datasheet_source for e in summary.configs if e.flops and e.flops.datasheet_source})
    ceilings = "; ".join(f"{units.number(c.flops_per_s / 1e12, 3)} TFLOP/s {c.dtype} on "
                         f"{c.device_name or 'this device'}" for c in summary.ceilings)
    return ("FLOPs per step counted by torch.utils.flop_counter on one forward and backward of the rank's batch; "
            f"datasheet: {', '.join(sources) or 'none'}; measured ceiling (best square matmul, after the sweep's "
            f"first launch's steps): {ceilings or 'not measured'}.")


def flops_notes(summary: Summary) -> list[str]:
    """What the FLOP counts of the compute table are not: given by a workload, missing ops torch's counter
    has no formula for (the figures then a lower bound), or not counted at all, per model."""
    lines: dict[str, str] = {}
    for entry in summary.configs:
        flops = entry.flops
        if flops and flops.source == "workload":
            lines.setdefault(entry.model, f"{entry.model}: FLOPs per step given by its workload (flops(batch)), "
                                          "not counted")
        elif flops and flops.uncounted_ops:
            lines.setdefault(entry.model, f"{entry.model}: ops without a FLOP formula, counted as 0 (FLOP/s and MFU "
                                          f"are lower bounds; give the workload flops(batch)): "
                                          f"{', '.join(flops.uncounted_ops[:6])}")
        elif not flops and entry.flops_note:
            lines.setdefault(entry.model, f"{entry.model}: no FLOP count ({entry.flops_note})")
    return list(lines.values())


def compute_block(summary: Summary) -> Block:
    rows = compute_rows(summary)
    notes = flops_notes(summary)
    if not rows:
        return Block("Compute: FLOPs not counted", [Lines(notes)]) if notes else Block()
    return Block("Compute: achieved FLOP/s and model FLOPs utilisation",
                 [Table(COMPUTE_HEADER, rows, first_left=True), Note(_peaks_note(summary)),
                  *([Lines(notes)] if notes else [])])


def verdict_pairs(summary: Summary) -> list[tuple[str, str]]:
    """Per configuration: what bounds its step (``analysis/verdict.py``)."""
    return [(entry.config_id, entry.verdict.text) for entry in summary.configs if entry.verdict]


def verdict_block(summary: Summary) -> Block:
    pairs = verdict_pairs(summary)
    return Block("Why it is not faster (per configuration):", [Pairs(pairs)]) if pairs else Block()


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
