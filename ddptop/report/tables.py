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

import csv
import io
from typing import Any

from ddptop.analysis import formulas
from ddptop.analysis.stats import PERCENTILES
from ddptop.report.blocks import Block, Caption, Items, Lines, Note, Pairs, Part, Table, Verbatim
from ddptop import units
from ddptop.telemetry.topology import Topology, format_matrix

SHOWN_PERCENTILES = ("p50", "p75", "p90", "p95")


def _benchmark_groups(summary: dict[str, Any]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for entry in summary["configs"]:
        batch = entry["batch_size"] if entry["scaling"] == "weak" else entry["global_batch"]
        groups.setdefault((entry["model"], batch, entry["scaling"], entry["backend"]), []).append(entry)
    for members in groups.values():
        members.sort(key=lambda e: (e["mode"] != "no_ddp", e["world_size"], e["mode"] == "dp"))
    return groups


def _unit(entry: dict[str, Any]) -> str:
    return "GPUs" if entry["device"] == "cuda" else "ranks"


def _row_prefix(entry: dict[str, Any]) -> str:
    return f"{entry['world_size']:4d} {_unit(entry)} -- {entry['label']:>8s}:"


def benchmark_text(summary: dict[str, Any]) -> str:
    """PyTorch's DDP benchmark's per-model block, one row per configuration."""
    out = []
    for (model, batch, scaling, backend), members in _benchmark_groups(summary).items():
        meaning = "per rank" if scaling == "weak" else "global"
        out.append(f"Benchmark: {model} with batch size {batch} ({meaning}, {scaling} scaling, {backend})")
        out.append("")
        indent = len(_row_prefix(members[0]))
        out.append(" " * indent + ("sec/iter".rjust(14) + "ex/sec".rjust(10)) * len(SHOWN_PERCENTILES))
        for entry in members:
            prefix = _row_prefix(entry)
            stats = entry["stats"]
            if stats:  # a configuration cut short shows what its kept steps say, and that it was cut
                cells = [
                    f"  {p}: {units.seconds(stats['sec_iter'][p], 3):>6}s{units.rate(stats['ex_sec_replica'][p]):>8s}/s"
                    for p in SHOWN_PERCENTILES
                ]
                out.append(prefix + "".join(cells) + _cut_short(entry))
            else:
                reason = f": {entry['reason']}" if entry.get("reason") else ""
                out.append(f"{prefix}  {entry['status']}{reason}")
        out.append("")
    return "\n".join(out)


def _cut_short(entry: dict[str, Any]) -> str:
    """'' for a configuration measured in full; else its status, the steps kept and why."""
    if entry["status"] == "ok":
        return ""
    reason = f": {entry['reason']}" if entry.get("reason") else ""
    return f"  [{entry['status']}, {entry['stats']['n']} steps kept{reason}]"


SCALING_HEADER = (
    "N", "sec/iter (p50)", "ex/sec (all ranks)", "speedup", "efficiency", "relative cost", "relative SU", "Karp-Flatt",
)
COST_HEADER = "cost / 1M examples"


def _priced(summary: dict[str, Any]) -> bool:
    return summary["plan"].get("price_per_gpu_hour") is not None


ENERGY_HEADER = ("ex/J", "relative energy")


def _metered(summary: dict[str, Any]) -> bool:
    """Whether any row has NVML energy figures (a GPU with an energy counter, or power readings)."""
    return any(r.get("examples_per_joule") for table in summary["scaling"] for r in table["rows"])


def _scaling_header(summary: dict[str, Any]) -> tuple[str, ...]:
    return (SCALING_HEADER + ((COST_HEADER,) if _priced(summary) else ())
            + (ENERGY_HEADER if _metered(summary) else ()))


def _scaling_cells(row: dict[str, Any], priced: bool = False, metered: bool = False) -> tuple[str, ...]:
    def shown(key: str, fmt: Any) -> str:
        return units.with_interval(row.get(key), row.get(f"{key}_ci"), fmt)

    cells: tuple[str, ...] = (
        row["label"],
        shown("sec_iter", units.seconds),
        shown("ex_sec_total", lambda v: units.number(v, 1)),
        shown("speedup", units.number),
        shown("efficiency", units.percent),
        shown("relative_cost", units.number),
        shown("relative_su", units.number),
        shown("karp_flatt", lambda v: units.number(v, 3)),
    )
    cells += (units.number(row.get("cost_per_million")),) if priced else ()
    return cells + ((units.significant(row.get("examples_per_joule")), units.number(row.get("relative_energy")))
                    if metered else ())


def projection_lines(table: dict[str, Any]) -> list[str]:
    """The projection beyond this node under a scaling table (``analysis/projection.py``), labelled as one."""
    found = table.get("projection")
    if not found:
        return []
    points = "; ".join(
        f"N={p['world_size']} on {p['nodes']} nodes "
        f"{units.with_interval(p['sec_iter'], p.get('sec_iter_ci'), units.seconds)} s/iter, "
        f"speedup {units.with_interval(p['speedup'], p.get('speedup_ci'), lambda v: units.number(v, 1))}, "
        f"efficiency {units.with_interval(p['efficiency'], p.get('efficiency_ci'), units.percent)}"
        for p in found["points"])
    return [f"Projected beyond this node ({found['assumptions']}): {points}."]


def model_lines(table: dict[str, Any]) -> list[str]:
    """The scaling model under a scaling table: Amdahl's fit, the data moved per epoch, the projection."""
    lines = projection_lines(table)
    fit = table.get("amdahl")
    if fit and not formulas.amdahl_applies(fit):
        lines.append(_amdahl_misfit(fit))
    elif fit:
        fraction_ci = fit.get("serial_fraction_ci")
        limit = (
            f", so speedup can never pass "
            f"{units.with_interval(fit['max_speedup'], fit.get('max_speedup_ci'), lambda v: units.number(v, 1))}"
            if fit.get("max_speedup") else ""
        )
        noise = " (an interval that includes 0: the data cannot tell a serial part from none)" if (
            units.interval_includes(fraction_ci, 0.0) and fit["serial_fraction"] > 0) else ""
        lines.append(
            f"Amdahl fit over {fit['points']} world size{'s' if fit['points'] > 1 else ''} above 1: "
            f"serial fraction {units.with_interval(fit['serial_fraction'], fraction_ci, lambda v: units.percent(v, 1))}"
            f"{limit} (fit error {units.number(fit['rmse_speedup'])} in speedup){noise}."
        )
    largest = table["rows"][-1] if table["rows"] else None
    epoch = largest.get("epoch") if largest else None
    if epoch and largest and largest["world_size"] > 1:
        lines.append(
            f"Per epoch of {epoch['epoch_examples']:,} examples at N={largest['world_size']}: "
            f"{epoch['steps_per_epoch']:,} steps; gradients synchronised "
            f"{units.binary_bytes(epoch.get('grad_bytes_per_epoch'))} (gradient bytes × steps), "
            f"{units.binary_bytes(epoch['ring_bytes_per_rank_per_epoch'])} sent by each rank in a ring allreduce."
        )
    return lines


def _amdahl_misfit(fit: dict[str, Any]) -> str:
    """The sentence for a fit outside [0, 1]: printing it bounded ("serial fraction 100%, speedup can never
    pass 1.0") would state a law the data contradict."""
    sizes = f"{fit['points']} world size{'s' if fit['points'] > 1 else ''} above 1"
    whole = ", on the whole," if fit["points"] > 1 else ""
    raw, raw_ci = fit["raw_serial_fraction"], fit.get("raw_serial_fraction_ci")
    fitted = units.with_interval(raw, raw_ci, lambda v: units.percent(v, 1))
    if raw > 1:
        edge = (" The interval reaches 100%: an all-serial step cannot be ruled out."
                if units.interval_includes(raw_ci, 1.0) else "")
        return (f"Amdahl's law does not fit over {sizes}: the speedup is{whole} below 1, so the step grew with N, which "
                f"no fixed serial part explains (fitted serial fraction {fitted}, above the 100% it can be).{edge}")
    edge = " The interval reaches 0%: it may be plain linear scaling." if units.interval_includes(raw_ci, 0.0) else ""
    return (f"Amdahl's law does not fit over {sizes}: the speedup is{whole} above N (superlinear), so there is no "
            f"serial part to fit (fitted serial fraction {fitted}).{edge}")


COMM_HEADER = (
    "config", "step p50", "no_sync p50", "exposed comm", "DDP fwd", "DDP bwd", "DDP comm", "DDP overlap",
    "buckets in flight", "t(N)-t(1) est.", "allreduce/rank", "DDP busbw", "kernel busbw",
)


def communication_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    estimates = {row["config_id"]: row for table in summary["scaling"] for row in table["rows"]}
    rows: list[tuple[str, ...]] = []
    for entry in summary["configs"]:
        comm = entry.get("communication")
        if not comm:
            continue
        logging = comm.get("ddp_logging") or {}
        buckets = comm.get("buckets") or {}
        achieved = buckets.get("achieved") or {}
        exposed = units.with_interval(comm.get("exposed_comm_s"), comm.get("exposed_comm_s_ci"), units.milliseconds)
        if comm.get("exposed_comm_fraction") is not None:
            exposed += f", {units.percent(comm['exposed_comm_fraction'])}"
        if (comm.get("exposed_comm_s_ci") or [None])[0] == 0.0:
            exposed += " (within noise of none)"
        rows.append(
            (
                f"{entry['label']} {entry['model']} bs{entry['batch_size']}"
                + (f" bucket {entry['bucket_cap_mb']:g}" if len(_caps(summary["plan"])) > 1 else ""),
                units.milliseconds(comm.get("step_s")),
                units.milliseconds(comm.get("compute_s")),
                exposed,
                units.milliseconds(logging.get("forward_compute_s")),
                units.milliseconds(logging.get("backward_compute_s")),
                units.milliseconds(logging.get("backward_comm_s")),
                units.milliseconds(logging.get("backward_compute_comm_overlap_s")),
                units.milliseconds(buckets.get("in_flight_s")),
                units.milliseconds((estimates.get(entry["config_id"]) or {}).get("comm_estimate_from_t1_s")),
                units.binary_bytes(comm.get("allreduce_bytes_per_rank")) if entry["world_size"] > 1 else units.DASH,
                units.gbps(achieved.get("busbw_gbs")) + _of_link(achieved),
                units.gbps(achieved.get("collective_busbw_gbs")),
            )
        )
    return rows


def _of_link(figures: dict[str, Any]) -> str:
    """" (61% of NVLink)" after a busbw: the share of the link's peak it ran over, when there is one."""
    share = figures.get("link_share")
    return f" ({units.percent(share)} of {figures['link']})" if share is not None else ""


COMM_NOTE = (
    "exposed comm = step - no_sync step (95% interval in brackets); DDP columns are DDP's own averages; buckets in flight = time any "
    "gradient bucket's allreduce was running (comm hook); t(N)-t(1) est. = t(N) minus the N=1 time scaled to "
    "the rank's work; busbw = bytes x 2(N-1)/N / time, the kernel's at DDP's bucket size, with its share of "
    "the peak of the link it ran over (NVLink, or PCIe) where there is one."
)

BATCH_HEADER = ("batch", "global batch", "sec/iter (p50)", "ex/sec (all ranks)", "status")


def _batch_rows(table: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            str(r["batch_size"]),
            str(r["global_batch"]),
            units.with_interval(r["sec_iter"], r.get("sec_iter_ci"), units.seconds),
            units.with_interval(r["ex_sec_total"], r.get("ex_sec_total_ci"), lambda v: units.number(v, 1)),
            r["status"] + (" <- best" if r["batch_size"] == table["best_batch"] and r["status"] == "ok" else ""),
        )
        for r in table["rows"]
    ]


def _batch_title(table: dict[str, Any]) -> str:
    title = f"Throughput per batch size: {table['model']} at N={table['world_size']} ({table['backend']})"
    if table["best_batch"] is not None:
        title += f"; best {table['best_batch']} per rank ({units.number(table['best_ex_sec_total'], 1)} ex/s)"
    if table["first_oom_batch"] is not None:
        title += f"; out of memory from {table['first_oom_batch']}"
    return title


COLLECTIVE_HEADER = ("size", "placement", "time p50", "algbw", "busbw")


def _collective_rows(table: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            units.binary_bytes(r["bytes"]),
            "in place" if r["inplace"] else "out of place",
            units.microseconds(r["time_s"]),
            units.gbps(r["algbw_gbs"]),
            units.with_interval(r["busbw_gbs"], r.get("busbw_gbs_ci"), units.gbps),
        )
        for r in table["rows"]
    ]


def _collective_title(table: dict[str, Any]) -> str:
    peak = ""
    if table.get("peak_busbw_gbs"):
        peak = f"; peak busbw {units.gbps(table['peak_busbw_gbs'])} at {units.binary_bytes(table['peak_at_bytes'])}"
        if table.get("link_share") is not None:
            peak += (f", {units.percent(table['link_share'])} of the {units.gbps(table['link_peak_gbs'])} "
                     f"{table['link']} peak")
        elif table.get("link_why"):
            peak += f" ({table['link_why']})"
    return (
        f"Collective {table['op']} at N={table['world_size']} ({table['backend']}), "
        f"busbw = algbw x {units.significant(table['busbw_factor'])}{peak}"
    )


DP_HEADER = ("model", "batch/device", "N", "DataParallel sec/iter", "DDP sec/iter", "DP ex/s", "DDP ex/s",
             "DDP speedup over DP")


def dp_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            r["model"], str(r["batch_size"]), str(r["world_size"]),
            units.seconds(r["dp_sec_iter"]) if r["dp_status"] == "ok" else r["dp_status"],
            units.seconds(r["ddp_sec_iter"]), units.number(r["dp_ex_sec_total"], 1),
            units.number(r["ddp_ex_sec_total"], 1), units.number(r["ddp_speedup_over_dp"], 2, "x"),
        )
        for r in summary.get("dp_vs_ddp") or ()
    ]


def communication_block(summary: dict[str, Any]) -> Block:
    rows = communication_rows(summary)
    if not rows:
        return Block()
    return Block("Compute vs communication (per step)", [Table(COMM_HEADER, rows, first_left=True), Note(COMM_NOTE)])


def _times(ratio: float | None, ci: list[float] | None) -> str:
    return units.with_interval(ratio, ci, lambda v: units.number(v, 2, "x"))


def _steps(evidence: dict[str, Any]) -> str:
    return f"{evidence['steps']} steps a rank" + (": too few to tell" if evidence.get("too_few_steps") else "")


def straggler_figures(straggler: dict[str, Any]) -> tuple[str, list[str]]:
    """The straggler named (``analysis/stragglers.py``), and the figures that name it or clear every rank."""
    rank, unconfirmed = straggler.get("rank"), straggler.get("unconfirmed")
    if rank is not None:
        head = f"rank {rank} is the straggler ({straggler['evidence']})"
    elif unconfirmed and len(unconfirmed) > 1:
        first, second = unconfirmed[:2]
        head = (f"no straggler named: the {first['evidence']} points at rank {first['rank']}, the "
                f"{second['evidence']} at rank {second['rank']}")
    elif unconfirmed:
        found = unconfirmed[0]
        other = "allreduce wait" if found["evidence"] == "no_sync compute" else "no_sync compute"
        head = (f"no straggler named: the {found['evidence']} points at rank {found['rank']}, the {other} does "
                f"not confirm it beyond noise (measured at another time: a passing load can slow one rank in one)")
    else:
        head = "no straggler beyond noise"
    figures = []
    compute = straggler.get("compute")
    if compute:
        figures.append(f"compute alone (no_sync, {_steps(compute)}): rank {compute['rank']} "
                       f"{_times(compute['ratio'], compute.get('ratio_ci'))} the other ranks'")
    wait = straggler.get("allreduce_wait")
    if wait:
        longer = units.with_interval(wait["others_wait_s"], wait.get("others_wait_s_ci"), units.milliseconds)
        figures.append(f"allreduce wait ({_steps(wait)}): the other ranks wait {longer} a step longer than "
                       f"rank {wait['rank']}")
    steps = straggler.get("step_time")
    if steps and (compute or wait or rank is not None):
        figures.append(f"step time: rank {steps['rank']} {_times(steps['ratio'], steps.get('ratio_ci'))} the "
                       f"other ranks'" + (" (alike: DDP keeps the ranks in step)" if (compute or wait) and
                                           units.interval_includes(steps.get("ratio_ci"), 1.0) else ""))
    if rank is not None and not compute:
        figures.append("each rank's compute was not timed alone (no no_sync steps: --comm-iters 0, or the "
                       "communication analysis failed)")
    return head, figures


def stragglers_found(summary: dict[str, Any]) -> list[tuple[str, str, list[str]]]:
    """(configuration, head, figures) for each configuration of two ranks or more that has a straggler named,
    or the communication analysis's figures that show none beyond noise."""
    found = []
    for entry in summary["configs"]:
        straggler = entry.get("straggler")
        if straggler and (straggler.get("rank") is not None or straggler.get("compute")
                          or straggler.get("allreduce_wait")):
            found.append((entry["config_id"], *straggler_figures(straggler)))
    return found


STRAGGLER_NOTE = (
    "DDP's allreduce keeps the ranks in step, so a slow rank stretches every rank's step alike: the straggler "
    "shows in each rank's compute timed alone inside no_sync() and in how long the others wait for it in the "
    "allreduce (95% intervals in brackets)."
)


LAUNCH_HEADER = ("config", "launch", "steps", "p50 (95% CI, within the launch)", "used")


def launch_spread_line(summary: dict[str, Any]) -> str:
    """What every interval covers: the launch-to-launch spread pooled over the sweep, or within one launch."""
    variance = (summary.get("uncertainty") or {}).get("launch_variance")
    if not variance:
        return ("Intervals: within one launch only (a summary from before launches were replicated): an offset "
                "between launches is not in them, and speedups compare launches.")
    if not variance.get("estimated"):
        return ("Intervals: within one launch only (one launch per configuration): an offset between launches "
                "is not in them, and speedups compare launches; --launches 2 or more measures it.")
    ci = variance.get("relative_sd_ci")
    return (f"Intervals: two levels. Launch-to-launch spread {units.percent(variance['relative_sd'], 1)}"
            + (f" ({units.percent(ci[0], 1)}-{units.percent(ci[1], 1)})" if ci else "")
            + f" of the step time, pooled over {variance['configs']} configurations' {variance['launches']} "
            f"launches ({variance['df']} degrees of freedom); every interval includes it.")


def launch_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for entry in summary["configs"]:
        for unit in entry.get("launches") or ():
            if unit.get("p50") is None:
                continue
            used = "yes" if unit.get("used", True) else "no: disturbed, measured again"
            if unit.get("used", True) and unit.get("disturbed"):
                used = "yes, though disturbed (no quiet launch)"
            rows.append((entry["label"] + " " + entry["model"] + f" bs{entry['batch_size']}", unit["launch"], str(unit.get("steps") or "-"),
                         units.with_interval(unit["p50"], unit.get("p50_ci"), units.seconds), used))
    return rows


def launches_block(summary: dict[str, Any]) -> Block:
    parts: list[Part] = [Note(launch_spread_line(summary))]
    if any(len(e.get("launches") or ()) > 1 for e in summary["configs"]):
        parts.append(Table(LAUNCH_HEADER, launch_rows(summary), first_left=True))
    return Block("Launch to launch", parts)


def stragglers_block(summary: dict[str, Any]) -> Block:
    found = stragglers_found(summary)
    if not found:
        return Block()
    return Block("Stragglers (per configuration)", [Items(found), Note(STRAGGLER_NOTE)])


def dp_block(summary: dict[str, Any]) -> Block:
    rows = dp_rows(summary)
    return Block("DataParallel vs DDP", [Table(DP_HEADER, rows, first_left=True)]) if rows else Block()


def batch_block(summary: dict[str, Any]) -> Block:
    parts: list[Part] = []
    for table in summary.get("batch_throughput") or ():
        parts += [Caption(_batch_title(table)), Table(BATCH_HEADER, _batch_rows(table))]
    return Block(None, parts)


def collectives_block(summary: dict[str, Any]) -> Block:
    parts: list[Part] = []
    for table in summary.get("collectives") or ():
        parts += [Caption(_collective_title(table)), Table(COLLECTIVE_HEADER, _collective_rows(table))]
    return Block(None, parts)


def _scaling_title(table: dict[str, Any]) -> str:
    title = (
        f"Scaling: {table['model']}, batch {table['batch_size']} {table['batch_meaning']} "
        f"({table['scaling']} scaling, {table['backend']}), against N={table['reference_world_size']}"
    )
    overhead = table.get("ddp_overhead_at_reference")
    if overhead is not None:
        ci = table.get("ddp_overhead_at_reference_ci")
        figure = units.with_interval(overhead, ci, lambda v: units.percent(v, 1, signed=True))
        if units.interval_includes(ci, 0.0):
            title += f"; DDP's cost over no-DDP at N=1 is within noise: {figure}"
        else:
            title += f"; DDP costs {figure} over no-DDP at N=1"
    return title


def scaling_block(summary: dict[str, Any]) -> Block:
    parts: list[Part] = []
    priced, metered = _priced(summary), _metered(summary)
    for table in summary["scaling"]:
        parts += [Caption(_scaling_title(table)),
                  Table(_scaling_header(summary), [_scaling_cells(r, priced, metered) for r in table["rows"]])]
        if table.get("recommendation"):
            parts.append(Note(table["recommendation"]))
        parts += [Note(line) for line in model_lines(table)]
    return Block(None, parts)


def benchmark_block(summary: dict[str, Any]) -> Block:
    found = benchmark_text(summary)
    return Block(None, [Verbatim(found)]) if found else Block()


def problems_text(summary: dict[str, Any]) -> str:
    lines = []
    for entry in summary["configs"]:
        if entry["status"] != "ok":
            stats = entry["stats"]
            kept = (
                f" ({stats['n']} steps kept: p50 {units.seconds(stats['sec_iter']['p50'], 4, unit=True)}, "
                f"{units.rate(stats['ex_sec_total']['p50'])} ex/s)"
                if stats else ""
            )
            lines.append(f"{entry['config_id']}: {entry['status']}{kept}" + (f": {entry['reason']}" if entry["reason"] else ""))
        elif entry.get("analysis_error"):
            lines.append(f"{entry['config_id']}: ok, steps kept; communication analysis failed: {entry['analysis_error']}")
    return "\n".join(lines)


def not_measured_block(summary: dict[str, Any]) -> Block:
    problems = problems_text(summary)
    return Block("Not measured in full:", [Lines(problems.splitlines(), indent=False)]) if problems else Block()


def damaged_lines(summary: dict[str, Any]) -> list[str]:
    """The run directory's files read around damage (``build._damage``), one line each."""
    damaged = summary.get("damaged") or {}
    return [f"{name}: {what}" for name, what in sorted(damaged.items())] if isinstance(damaged, dict) else []


def damaged_block(summary: dict[str, Any]) -> Block:
    lines = damaged_lines(summary)
    return Block("Read around damaged files (the figures leave out what they lost):", [Lines(lines)]) if lines else Block()


def disturbed_lines(summary: dict[str, Any]) -> list[str]:
    """One line per configuration measured while something else used the node (``telemetry/validity.py``)."""
    lines = []
    for entry in summary["configs"]:
        found = entry.get("validity") or {}
        if found.get("disturbed"):
            lines.append(f"{entry['config_id']}: " + "; ".join(found.get("reasons") or ()))
    return lines


def _tflops(value: float | None) -> str:
    return units.DASH if value is None else units.number(value / 1e12, 3)


COMPUTE_HEADER = ("config", "dtype", "GFLOPs/step", "TFLOP/s per device", "all devices", "MFU (datasheet)",
                  "of measured ceiling")


def compute_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    """Per configuration with a FLOP count: what it achieved and the share of the two peaks."""
    rows: list[tuple[str, ...]] = []
    for entry in summary["configs"]:
        flops = entry.get("flops")
        if not flops:
            continue
        rows.append((
            f"{entry['label']} {entry['model']} bs{entry['batch_size']}",
            flops.get("dtype") or units.DASH,
            units.number(flops["per_step"] / 1e9, 2),
            units.with_interval(flops["achieved_per_device"], flops.get("achieved_per_device_ci"), _tflops),
            _tflops(flops.get("achieved_total")),
            units.with_interval(flops.get("mfu_datasheet"), flops.get("mfu_datasheet_ci"), units.percent),
            units.with_interval(flops.get("mfu_ceiling"), flops.get("mfu_ceiling_ci"), units.percent),
        ))
    return rows


def _peaks_note(summary: dict[str, Any]) -> str:
    sources = sorted({e["flops"]["datasheet_source"] for e in summary["configs"] if e.get("flops")
                      and e["flops"].get("datasheet_source")})
    ceilings = "; ".join(f"{units.number(c['flops_per_s'] / 1e12, 3)} TFLOP/s {c['dtype']} on "
                         f"{c.get('device_name') or 'this device'}" for c in summary.get("ceilings") or ())
    return ("FLOPs per step counted by torch.utils.flop_counter on one forward and backward of the rank's batch; "
            f"datasheet: {', '.join(sources) or 'none'}; measured ceiling (best square matmul at the sweep's "
            f"start): {ceilings or 'not measured'}.")


def compute_block(summary: dict[str, Any]) -> Block:
    rows = compute_rows(summary)
    if not rows:
        return Block()
    return Block("Compute: achieved FLOP/s and model FLOPs utilisation",
                 [Table(COMPUTE_HEADER, rows, first_left=True), Note(_peaks_note(summary))])


def verdict_pairs(summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Per configuration: what bounds its step (``analysis/verdict.py``)."""
    return [(entry["config_id"], entry["verdict"]["text"]) for entry in summary["configs"] if entry.get("verdict")]


def verdict_block(summary: dict[str, Any]) -> Block:
    pairs = verdict_pairs(summary)
    return Block("Why it is not faster (per configuration):", [Pairs(pairs)]) if pairs else Block()


def disturbed_block(summary: dict[str, Any]) -> Block:
    lines = disturbed_lines(summary)
    heading = "Disturbed while measured (other load or GPU limits; the figure may not be this hardware's):"
    return Block(heading, [Lines(lines, indent=False)]) if lines else Block()


def overhead_line(summary: dict[str, Any]) -> str:
    overhead = summary["overhead"]
    analysis_s = overhead.get("analysis_s") or 0
    setup = overhead.get("fraction_setup", overhead["fraction_outside_iterations"])
    extra = f", {units.seconds(analysis_s, 1, unit=True)} in communication analysis and collectives" if analysis_s else ""
    return (
        f"Sweep wall time {units.seconds(overhead['sweep_wall_s'], 1, unit=True)}, of which "
        f"{units.seconds(overhead['iterations_s'], 1, unit=True)} in warm-up and "
        f"measured steps{extra}; {units.percent(setup)} went to launching, initialising and tearing down."
    )


def overhead_block(summary: dict[str, Any]) -> Block:
    return Block(None, [Caption(overhead_line(summary))])


def topology_text(summary: dict[str, Any]) -> str:
    """The topology matrix the summary saved (PyTorch's DDP benchmark prints it before its results)."""
    data = summary.get("topology")
    if not data:
        return "Topology: not recorded\n"
    topo = Topology.from_json(data)
    if not topo.devices:
        return f"Topology: {topo.problem or 'no GPU or RDMA NIC found'}\n"
    return "--- topology (nvidia-smi topo -m) ---\n\n" + format_matrix(topo)


def topology_block(summary: dict[str, Any]) -> Block:
    return Block(None, [Verbatim(topology_text(summary))])


LOAD_HEADER = (
    "config", "GPUs", "util mean", "util max", "GPU mem peak", "power mean", "J/example", "host CPU",
    "rank RSS peak", "rank CPU mean",
)


def _load_cells(entry: dict[str, Any]) -> tuple[str, ...] | None:
    load = entry.get("telemetry")
    if not load:
        return None
    ranks = list((load.get("ranks") or {}).values())
    rss = max((r.get("peak_rss_bytes") or 0 for r in ranks), default=None)
    cpus = [r["cpu_mean"] for r in ranks if r.get("cpu_mean") is not None]
    joules = load.get("energy_per_example_j")
    return (
        f"{entry['label']} {entry['model']} bs{entry['batch_size']}",
        ",".join(map(str, load.get("gpus") or [])) or units.DASH,
        units.percent(load.get("util_mean"), fraction=False),
        units.percent(load.get("util_max"), fraction=False),
        units.binary_bytes(load.get("mem_peak_bytes")),
        units.number(load.get("power_mean_w"), 0, " W"),
        units.significant(joules),
        units.percent(load.get("host_cpu_mean"), fraction=False),
        units.binary_bytes(rss if ranks else None),
        units.percent(sum(cpus) / len(cpus) if cpus else None, fraction=False),
    )


GPM_HEADER = ("SM active", "SM occupancy", "tensor active", "DRAM active")
GPM_LOAD_KEYS = ("sm_active_mean", "sm_occupancy_mean", "tensor_active_mean", "dram_active_mean")


def _counted(summary: dict[str, Any]) -> bool:
    """Whether any configuration has GPM hardware counters (Hopper and later)."""
    return any((e.get("telemetry") or {}).get("sm_active_mean") is not None for e in summary["configs"])


def load_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    counted = _counted(summary)
    rows = []
    for entry in summary["configs"]:
        cells = _load_cells(entry)
        if cells is None:
            continue
        load = entry.get("telemetry") or {}
        rows.append(cells + (tuple(units.percent(load.get(k), fraction=False) for k in GPM_LOAD_KEYS)
                             if counted else ()))
    return rows


def _load_header(summary: dict[str, Any]) -> tuple[str, ...]:
    return LOAD_HEADER + (GPM_HEADER if _counted(summary) else ())


def load_block(summary: dict[str, Any]) -> Block:
    rows = load_rows(summary)
    if not rows:
        return Block()
    info = (summary.get("telemetry") or {}).get("info") or {}
    title = "Load during measured steps (telemetry"
    title += f", {info['fake_label']} GPUs)" if info.get("fake") else ")"
    return Block(title, [Table(_load_header(summary), rows, first_left=True)])


def nodes_text(summary: dict[str, Any]) -> str:
    """A multi-node sweep: each node, its process and what its torchrun agents did."""
    nodes = summary.get("nodes") or []
    if not nodes:
        return ""
    lines = [f"Nodes ({len(nodes)}; launches on one node ran on node 0)"]
    for node in nodes:
        where = f"{node.get('host') or '?'} pid {node.get('pid') or '?'}"
        if node.get("problem"):
            lines.append(f"  node {node['node_rank']}  {where}: {node['problem']}")
            continue
        done = ", ".join(f"{l['launch']} {l['status']}" for l in node["launches"]) or "no launch"
        lines.append(f"  node {node['node_rank']}  {where} ({node['role']}): {done}")
    return "\n".join(lines) + "\n"


def nodes_block(summary: dict[str, Any]) -> Block:
    found = nodes_text(summary)
    return Block(None, [Verbatim(found)]) if found else Block()


def _caps(plan: dict[str, Any]) -> list[float]:
    caps = plan.get("bucket_cap_mb")  # a list; one number in plans written before it became a list
    return list(caps) if isinstance(caps, (list, tuple)) else [caps] if caps is not None else []


def environment_markdown(summary: dict[str, Any]) -> list[str]:
    env = summary["environment"]
    versions = env.get("versions") or {}
    return [
        f"- host: {env.get('hostname', '?')} ({env.get('platform', '?')})",
        f"- CPU: {env.get('cpu_model') or '?'}, {env.get('usable_cpus', '?')} usable cores",
        f"- GPUs: {', '.join(g['name'] for g in env.get('gpus', [])) or 'none'}"
        + (f" (driver {env['driver']})" if env.get("driver") else "")
        + (f"; NVML: {env['nvml']}" if env.get("nvml") not in (None, "ok") else ""),
        f"- torch {versions.get('torch', '?')}, torchvision {versions.get('torchvision', '?')}, "
        f"torch built for CUDA {versions.get('cuda') or '-'}, cuDNN {versions.get('cudnn') or '-'}, NCCL {versions.get('nccl') or '-'}",
        f"- ddptop {env.get('ddptop', '?')}, Python {env.get('python', '?')}",
        *_launch_setup_lines(env.get("launch_setup") or {}),
        "",
    ]


def _launch_setup_lines(setup: dict[str, Any]) -> list[str]:
    """How the ranks were bound, and whether the GPU setup of the launches differed (summaries before these
    were recorded: nothing)."""
    hows = sorted({r["binding"] for e in setup.values() for r in (e.get("ranks") or {}).values() if r.get("binding")})
    gpu = {repr(sorted(e["gpu_setup"].items())) for e in setup.values() if isinstance(e.get("gpu_setup"), dict)}
    lines = [f"- ranks' CPUs: {'; '.join(hows)} (each rank's: environment.launch_setup)"] if hows else []
    if len(gpu) > 1:
        lines.append("- the launches' GPU setup (cuDNN flags, NCCL environment) differs: environment.launch_setup")
    return lines


def plan_markdown(summary: dict[str, Any]) -> list[str]:
    plan = summary["plan"]
    return [
        f"- models: {', '.join(plan['models'])}; batch sizes: {', '.join(map(str, plan['batch_sizes']))} "
        f"({'per rank, weak' if plan['scaling'] == 'weak' else 'global, strong'} scaling)",
        f"- world sizes: {', '.join(map(str, plan['world_sizes']))} on {plan['device']}; "
        f"backends: {', '.join(plan['backends'])}",
        f"- image {plan['image_size']} px, {plan['num_classes']} classes, "
        f"warm-up {plan['warmup'] if plan['warmup'] is not None else 'auto'}, "
        + (f"time budget {plan['time_budget']} s" if plan.get("time_budget") else f"{plan['iters']} measured steps"
           if plan["iters"] is not None else f"measured to ±{plan['precision']:.1%} of the median "
           f"({plan['min_iters']}-{plan['max_iters']} steps, at most {plan['max_time_per_config']:g} s)")
        + (f", {plan['launches_per_config']} launches per configuration" if plan.get("launches_per_config", 1) > 1
           else f", {plan['rounds']} rounds in one launch" if plan.get("rounds", 1) > 1 else "")
        + f", bucket_cap_mb {', '.join(f'{c:g}' for c in _caps(plan))}"
        + (f", AMP {plan['amp']}" if plan.get("amp") else "")
        + (", channels_last" if plan.get("channels_last") else ""),
        "",
    ]


CSV_SPEC_FIELDS = (
    "config_id", "model", "mode", "label", "world_size", "nnodes", "batch_size", "global_batch", "backend",
    "device", "scaling", "image_size", "status", "reason", "params", "peak_memory_bytes",
)


CSV_LOAD_FIELDS = (
    "util_mean", "util_max", "mem_peak_bytes", "power_mean_w", "energy_j", "energy_per_example_j", "host_cpu_mean",
)


CSV_COMM_FIELDS = ("compute_s", "exposed_comm_s", "exposed_comm_fraction", "allreduce_bytes_per_rank")


CSV_INTERVAL_FIELDS = ("sec_iter_p50", "speedup", "efficiency", "relative_cost", "relative_su")


def csv_text(summary: dict[str, Any]) -> str:
    scaling_by_config = {row["config_id"]: row for table in summary["scaling"] for row in table["rows"]}
    header = list(CSV_SPEC_FIELDS) + ["samples", "mean_s", "std_s"]
    header += [f"sec_iter_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_replica_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_total_p{q}" for q in PERCENTILES]
    header += ["speedup", "efficiency", "relative_cost", "relative_su", "karp_flatt", "cost_per_million"]
    header += list(CSV_COMM_FIELDS) + ["comm_estimate_from_t1_s", "ddp_busbw_gbs"]
    header += list(CSV_LOAD_FIELDS) + ["rank_peak_rss_bytes"]
    # appended, so the columns above keep their places: the 95% intervals and how far to trust the row
    header += [f"{key}_{end}" for key in CSV_INTERVAL_FIELDS for end in ("low", "high")]
    header += ["p50_precision", "stop_reason", "unstable", "disturbed", "disturbed_reason"]
    header += list(GPM_LOAD_KEYS) + ["verdict"]
    header += ["straggler_rank", "straggler_evidence"]
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for entry in summary["configs"]:
        stats = entry["stats"] or {}
        row: list[Any] = [entry.get(f) for f in CSV_SPEC_FIELDS]
        row += [stats.get("n", 0), stats.get("mean"), stats.get("std")]
        for key in ("sec_iter", "ex_sec_replica", "ex_sec_total"):
            row += [(stats.get(key) or {}).get(f"p{q}") for q in PERCENTILES]
        scale = scaling_by_config.get(entry["config_id"], {})
        row += [scale.get(k) for k in ("speedup", "efficiency", "relative_cost", "relative_su", "karp_flatt")]
        row.append(scale.get("cost_per_million"))
        comm = entry.get("communication") or {}
        row += [comm.get(k) for k in CSV_COMM_FIELDS]
        row.append(scale.get("comm_estimate_from_t1_s"))
        row.append(((comm.get("buckets") or {}).get("achieved") or {}).get("busbw_gbs"))
        load = entry.get("telemetry") or {}
        row += [load.get(k) for k in CSV_LOAD_FIELDS]
        ranks = (load.get("ranks") or {}).values()
        row.append(max((r.get("peak_rss_bytes") or 0 for r in ranks), default=None))
        intervals = {"sec_iter_p50": stats.get("p50_ci"), **{k: scale.get(f"{k}_ci") for k in CSV_INTERVAL_FIELDS[1:]}}
        row += [(intervals.get(key) or [None, None])[end] for key in CSV_INTERVAL_FIELDS for end in (0, 1)]
        validity = entry.get("validity") or {}
        row += [stats.get("p50_precision"), entry.get("stop_reason"), entry.get("unstable"),
                validity.get("disturbed"), (validity.get("reasons") or [None])[0]]
        row += [load.get(k) for k in GPM_LOAD_KEYS] + [(entry.get("verdict") or {}).get("text")]
        straggler = entry.get("straggler") or {}
        row += [straggler.get("rank"), straggler.get("evidence")]
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()
