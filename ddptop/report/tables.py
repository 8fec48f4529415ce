"""Render a summary as text (terminal), Markdown and CSV.

The per-configuration block keeps the layout of PyTorch's DDP benchmark (rows ``no ddp``, ``1M/1G``,
``1M/2G``...; p50/p75/p90/p95 of sec/iter with per-replica ex/sec); the scaling table keeps seed 000's
(N, time, speedup, relative SU) and adds throughput, efficiency and relative cost.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from ddptop.analysis.stats import PERCENTILES
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
    """Seed 001's per-model block, one row per configuration."""
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
            if entry["status"] == "ok" and stats:
                cells = [
                    f"  {p}: {stats['sec_iter'][p]:6.3f}s{_fmt_rate(stats['ex_sec_replica'][p]):>8s}/s"
                    for p in SHOWN_PERCENTILES
                ]
                out.append(prefix + "".join(cells))
            else:
                reason = f": {entry['reason']}" if entry.get("reason") else ""
                partial = f" ({stats['n']} samples kept)" if stats else ""
                out.append(f"{prefix}  {entry['status']}{partial}{reason}")
        out.append("")
    return "\n".join(out)


def _fmt_rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.0f}%"


def _num(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


SCALING_HEADER = (
    "N", "sec/iter (p50)", "ex/sec (all ranks)", "speedup", "efficiency", "relative cost", "relative SU", "Karp-Flatt",
)
COST_HEADER = "cost / 1M examples"


def _priced(summary: dict[str, Any]) -> bool:
    return summary["plan"].get("price_per_gpu_hour") is not None


def _scaling_header(summary: dict[str, Any]) -> tuple[str, ...]:
    return SCALING_HEADER + ((COST_HEADER,) if _priced(summary) else ())


def _scaling_cells(row: dict[str, Any], priced: bool = False) -> tuple[str, ...]:
    cells = (
        row["label"],
        f"{row['sec_iter']:.4f}",
        f"{row['ex_sec_total']:.1f}",
        _num(row["speedup"]),
        _pct(row["efficiency"]),
        _num(row["relative_cost"]),
        _num(row["relative_su"]),
        _num(row.get("karp_flatt"), 3),
    )
    return cells + ((_num(row.get("cost_per_million")),) if priced else ())


def aligned(header: tuple[str, ...], rows: list[tuple[str, ...]], first_left: bool = False) -> list[str]:
    table = [header] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(header))]
    return [
        "  " + "  ".join(c.ljust(w) if (first_left and i == 0) else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
        for r in table
    ]


def markdown_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(cells) + " |" for cells in rows]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.1f} ms"


def _gbs(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g} GB/s"


def model_lines(table: dict[str, Any]) -> list[str]:
    """The scaling model under a scaling table: Amdahl's fit and the data moved per epoch."""
    lines = []
    fit = table.get("amdahl")
    if fit:
        limit = f", so speedup can never pass {fit['max_speedup']:.1f}" if fit.get("max_speedup") else ""
        lines.append(
            f"Amdahl fit over {fit['points']} world size{'s' if fit['points'] > 1 else ''} above 1: serial fraction {100 * fit['serial_fraction']:.1f}%{limit} "
            f"(fit error {fit['rmse_speedup']:.2f} in speedup)."
        )
    largest = table["rows"][-1] if table["rows"] else None
    epoch = largest.get("epoch") if largest else None
    if epoch and largest["world_size"] > 1:
        lines.append(
            f"Per epoch of {epoch['epoch_examples']:,} examples at N={largest['world_size']}: "
            f"{epoch['steps_per_epoch']:,} steps; gradients synchronised "
            f"{_bytes(epoch['seed004_bytes_per_epoch'])} (seed 004's count), "
            f"{_bytes(epoch['ring_bytes_per_rank_per_epoch'])} sent by each rank in a ring allreduce."
        )
    return lines


COMM_HEADER = (
    "config", "step p50", "no_sync p50", "exposed comm", "DDP fwd", "DDP bwd", "DDP comm", "DDP overlap",
    "buckets in flight", "seed 002 est.", "allreduce/rank", "DDP busbw", "kernel busbw",
)


def communication_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    estimates = {row["config_id"]: row for table in summary["scaling"] for row in table["rows"]}
    rows = []
    for entry in summary["configs"]:
        comm = entry.get("communication")
        if not comm:
            continue
        logging = comm.get("ddp_logging") or {}
        buckets = comm.get("buckets") or {}
        achieved = buckets.get("achieved") or {}
        exposed = _ms(comm.get("exposed_comm_s"))
        if comm.get("exposed_comm_fraction") is not None:
            exposed += f" ({_pct(comm['exposed_comm_fraction'])})"
        rows.append(
            (
                f"{entry['label']} {entry['model']} bs{entry['batch_size']}"
                + (f" bucket {entry['bucket_cap_mb']:g}" if len(_caps(summary["plan"])) > 1 else ""),
                _ms(comm.get("step_s")),
                _ms(comm.get("compute_s")),
                exposed,
                _ms(logging.get("forward_compute_s")),
                _ms(logging.get("backward_compute_s")),
                _ms(logging.get("backward_comm_s")),
                _ms(logging.get("backward_compute_comm_overlap_s")),
                _ms(buckets.get("in_flight_s")),
                _ms((estimates.get(entry["config_id"]) or {}).get("seed002_comm_estimate_s")),
                _bytes(comm.get("allreduce_bytes_per_rank")) if entry["world_size"] > 1 else "-",
                _gbs(achieved.get("busbw_gbs")),
                _gbs(achieved.get("collective_busbw_gbs")),
            )
        )
    return rows


COMM_NOTE = (
    "exposed comm = step - no_sync step; DDP columns are DDP's own averages; buckets in flight = time any "
    "gradient bucket's allreduce was running (comm hook); seed 002 est. = t(N) - t(1) scaled to the rank's "
    "work; busbw = bytes x 2(N-1)/N / time, the kernel's at DDP's bucket size."
)

BATCH_HEADER = ("batch", "global batch", "sec/iter (p50)", "ex/sec (all ranks)", "status")


def _batch_rows(table: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            str(r["batch_size"]),
            str(r["global_batch"]),
            "-" if r["sec_iter"] is None else f"{r['sec_iter']:.4f}",
            _num(r["ex_sec_total"], 1),
            r["status"] + (" <- best" if r["batch_size"] == table["best_batch"] and r["status"] == "ok" else ""),
        )
        for r in table["rows"]
    ]


def _batch_title(table: dict[str, Any]) -> str:
    title = f"Throughput per batch size: {table['model']} at N={table['world_size']} ({table['backend']})"
    if table["best_batch"] is not None:
        title += f"; best {table['best_batch']} per rank ({table['best_ex_sec_total']:.1f} ex/s)"
    if table["first_oom_batch"] is not None:
        title += f"; out of memory from {table['first_oom_batch']}"
    return title


COLLECTIVE_HEADER = ("size", "placement", "time p50", "algbw", "busbw")


def _collective_rows(table: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            _bytes(r["bytes"]),
            "in place" if r["inplace"] else "out of place",
            "-" if r["time_s"] is None else f"{r['time_s'] * 1e6:.1f} us",
            _gbs(r["algbw_gbs"]),
            _gbs(r["busbw_gbs"]),
        )
        for r in table["rows"]
    ]


def _collective_title(table: dict[str, Any]) -> str:
    peak = ""
    if table.get("peak_busbw_gbs"):
        peak = f"; peak busbw {table['peak_busbw_gbs']:.3g} GB/s at {_bytes(table['peak_at_bytes'])}"
    return (
        f"Collective {table['op']} at N={table['world_size']} ({table['backend']}), "
        f"busbw = algbw x {table['busbw_factor']:.3g}{peak}"
    )


DP_HEADER = ("model", "batch/device", "N", "DataParallel sec/iter", "DDP sec/iter", "DP ex/s", "DDP ex/s",
             "DDP speedup over DP")


def dp_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    return [
        (
            r["model"], str(r["batch_size"]), str(r["world_size"]),
            _num(r["dp_sec_iter"], 4) if r["dp_status"] == "ok" else r["dp_status"],
            _num(r["ddp_sec_iter"], 4), _num(r["dp_ex_sec_total"], 1), _num(r["ddp_ex_sec_total"], 1),
            "-" if r["ddp_speedup_over_dp"] is None else f"{r['ddp_speedup_over_dp']:.2f}x",
        )
        for r in summary.get("dp_vs_ddp") or ()
    ]


def analysis_text(summary: dict[str, Any]) -> str:
    """Compute vs communication, throughput per batch size and the collective benchmark, as text."""
    out = []
    rows = communication_rows(summary)
    if rows:
        out.append("Compute vs communication (per step)")
        out += aligned(COMM_HEADER, rows, first_left=True)
        out.append("  " + COMM_NOTE)
        out.append("")
    rows = dp_rows(summary)
    if rows:
        out.append("DataParallel vs DDP")
        out += aligned(DP_HEADER, rows, first_left=True)
        out.append("")
    for table in summary.get("batch_throughput") or ():
        out.append(_batch_title(table))
        out += aligned(BATCH_HEADER, _batch_rows(table))
        out.append("")
    for table in summary.get("collectives") or ():
        out.append(_collective_title(table))
        out += aligned(COLLECTIVE_HEADER, _collective_rows(table))
        out.append("")
    return "\n".join(out)


def _scaling_title(table: dict[str, Any]) -> str:
    title = (
        f"Scaling: {table['model']}, batch {table['batch_size']} {table['batch_meaning']} "
        f"({table['scaling']} scaling, {table['backend']}), against N={table['reference_world_size']}"
    )
    if table.get("ddp_overhead_at_reference") is not None:
        title += f"; DDP costs {100 * table['ddp_overhead_at_reference']:+.1f}% over no-DDP at N=1"
    return title


def scaling_text(summary: dict[str, Any]) -> str:
    out = []
    priced = _priced(summary)
    for table in summary["scaling"]:
        out.append(_scaling_title(table))
        out += aligned(_scaling_header(summary), [_scaling_cells(r, priced) for r in table["rows"]])
        if table.get("recommendation"):
            out.append("  " + table["recommendation"])
        out += ["  " + line for line in model_lines(table)]
        out.append("")
    return "\n".join(out)


def problems_text(summary: dict[str, Any]) -> str:
    lines = []
    for entry in summary["configs"]:
        if entry["status"] != "ok":
            lines.append(f"{entry['config_id']}: {entry['status']}" + (f": {entry['reason']}" if entry["reason"] else ""))
    return "\n".join(lines)


def overhead_line(summary: dict[str, Any]) -> str:
    overhead = summary["overhead"]
    analysis_s = overhead.get("analysis_s") or 0
    setup = overhead.get("fraction_setup", overhead["fraction_outside_iterations"])
    extra = f", {analysis_s:.1f} s in communication analysis and collectives" if analysis_s else ""
    return (
        f"Sweep wall time {overhead['sweep_wall_s']:.1f} s, of which {overhead['iterations_s']:.1f} s in warm-up and "
        f"measured steps{extra}; {_pct(setup)} went to launching, initialising and tearing down."
    )


def topology_text(summary: dict[str, Any]) -> str:
    """The topology matrix the summary saved (seed 001 prints it before its results)."""
    data = summary.get("topology")
    if not data:
        return "Topology: not recorded\n"
    topo = Topology.from_json(data)
    if not topo.devices:
        return f"Topology: {topo.problem or 'no GPU or RDMA NIC found'}\n"
    return "--- topology (nvidia-smi topo -m) ---\n\n" + format_matrix(topo)


def _bytes(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


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
        ",".join(map(str, load.get("gpus") or [])) or "-",
        _num(load.get("util_mean"), 0) + ("%" if load.get("util_mean") is not None else ""),
        _num(load.get("util_max"), 0) + ("%" if load.get("util_max") is not None else ""),
        _bytes(load.get("mem_peak_bytes")),
        _num(load.get("power_mean_w"), 0) + (" W" if load.get("power_mean_w") is not None else ""),
        "-" if joules is None else f"{joules:.3g}",
        _num(load.get("host_cpu_mean"), 0) + ("%" if load.get("host_cpu_mean") is not None else ""),
        _bytes(rss if ranks else None),
        f"{sum(cpus) / len(cpus):.0f}%" if cpus else "-",
    )


def load_rows(summary: dict[str, Any]) -> list[tuple[str, ...]]:
    return [cells for entry in summary["configs"] if (cells := _load_cells(entry)) is not None]


def load_text(summary: dict[str, Any]) -> str:
    rows = load_rows(summary)
    if not rows:
        return ""
    info = (summary.get("telemetry") or {}).get("info") or {}
    title = "Load during measured steps (telemetry"
    title += f", {info['fake_label']} GPUs)" if info.get("fake") else ")"
    return "\n".join([title] + aligned(LOAD_HEADER, rows, first_left=True)) + "\n"


def text_report(summary: dict[str, Any]) -> str:
    parts = [topology_text(summary), benchmark_text(summary), scaling_text(summary)]
    deeper = analysis_text(summary)
    if deeper:
        parts.append(deeper)
    load = load_text(summary)
    if load:
        parts.append(load)
    problems = problems_text(summary)
    if problems:
        parts.append("Not measured in full:\n" + problems + "\n")
    nodes = nodes_text(summary)
    if nodes:
        parts.append(nodes)
    parts.append(overhead_line(summary))
    return "\n".join(parts).rstrip() + "\n"


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


def closing_text(summary: dict[str, Any], paths: dict[str, str]) -> str:
    """What a run prints when it ends: the report, then where the summary files are."""
    text = text_report(summary) + f"Summary: {paths['json']}  {paths['md']}  {paths['csv']}\n"
    if paths.get("plots"):
        text += f"Plots: {paths['plots']}/ (PNG and SVG)\n"
    elif paths.get("plots_error"):
        text += f"Plots not drawn: {paths['plots_error']}\n"
    return text


def _caps(plan: dict[str, Any]) -> list[float]:
    caps = plan.get("bucket_cap_mb")
    return list(caps) if isinstance(caps, (list, tuple)) else [caps]


def markdown(summary: dict[str, Any]) -> str:
    env = summary["environment"]
    versions = env.get("versions") or {}
    plan = summary["plan"]
    lines = [f"# ddptop summary: {summary['name']}", ""]
    if not summary.get("complete", True):
        lines += ["**Incomplete:** the sweep did not finish; these are the configurations measured so far.", ""]
    lines += [
        "## Environment",
        "",
        f"- host: {env.get('hostname', '?')} ({env.get('platform', '?')})",
        f"- CPU: {env.get('cpu_model') or '?'}, {env.get('usable_cpus', '?')} usable cores",
        f"- GPUs: {', '.join(g['name'] for g in env.get('gpus', [])) or 'none'}"
        + (f" (driver {env['driver']})" if env.get("driver") else "")
        + (f"; NVML: {env['nvml']}" if env.get("nvml") not in (None, "ok") else ""),
        f"- torch {versions.get('torch', '?')}, torchvision {versions.get('torchvision', '?')}, "
        f"torch built for CUDA {versions.get('cuda') or '-'}, cuDNN {versions.get('cudnn') or '-'}, NCCL {versions.get('nccl') or '-'}",
        f"- ddptop {env.get('ddptop', '?')}, Python {env.get('python', '?')}",
        "",
        "## Plan",
        "",
        f"- models: {', '.join(plan['models'])}; batch sizes: {', '.join(map(str, plan['batch_sizes']))} "
        f"({'per rank, weak' if plan['scaling'] == 'weak' else 'global, strong'} scaling)",
        f"- world sizes: {', '.join(map(str, plan['world_sizes']))} on {plan['device']}; "
        f"backends: {', '.join(plan['backends'])}",
        f"- image {plan['image_size']} px, {plan['num_classes']} classes, warm-up {plan['warmup']}, "
        + (f"time budget {plan['time_budget']} s" if plan.get("time_budget") else f"{plan['iters']} measured steps")
        + f", bucket_cap_mb {', '.join(f'{c:g}' for c in _caps(plan))}"
        + (f", AMP {plan['amp']}" if plan.get("amp") else "")
        + (", channels_last" if plan.get("channels_last") else ""),
        "",
        "## Step time per configuration",
        "",
        "```",
        benchmark_text(summary).rstrip(),
        "```",
        "",
        "## Scaling",
        "",
    ]
    priced = _priced(summary)
    for table in summary["scaling"]:
        lines += [_scaling_title(table), ""]
        lines += markdown_table(_scaling_header(summary), [_scaling_cells(r, priced) for r in table["rows"]])
        lines.append("")
        if table.get("recommendation"):
            lines += [table["recommendation"], ""]
        lines += [line + "\n" for line in model_lines(table)]
    comm_rows = communication_rows(summary)
    if comm_rows:
        lines += ["## Compute vs communication", ""] + markdown_table(COMM_HEADER, comm_rows) + ["", COMM_NOTE, ""]
    if dp_rows(summary):
        lines += ["## DataParallel vs DDP", ""] + markdown_table(DP_HEADER, dp_rows(summary)) + [""]
    batch_tables = summary.get("batch_throughput") or ()
    if batch_tables:
        lines += ["## Throughput per batch size", ""]
        for table in batch_tables:
            lines += [_batch_title(table), ""] + markdown_table(BATCH_HEADER, _batch_rows(table)) + [""]
    collective_tables = summary.get("collectives") or ()
    if collective_tables:
        lines += ["## Collective bandwidth", ""]
        for table in collective_tables:
            lines += [_collective_title(table), ""] + markdown_table(COLLECTIVE_HEADER, _collective_rows(table))
            lines.append("")
    rows = load_rows(summary)
    if rows:
        lines += ["## Load during measured steps", ""] + markdown_table(LOAD_HEADER, rows) + [""]
    lines += ["## Topology", "", "```", topology_text(summary).rstrip(), "```", ""]
    problems = problems_text(summary)
    if problems:
        lines += ["## Not measured in full", ""] + [f"- {p}" for p in problems.splitlines()] + [""]
    if summary.get("nodes"):
        lines += ["## Nodes", "", "```", nodes_text(summary).rstrip(), "```", ""]
    lines += ["## Overhead", "", overhead_line(summary), ""]
    return "\n".join(lines)


CSV_SPEC_FIELDS = (
    "config_id", "model", "mode", "label", "world_size", "nnodes", "batch_size", "global_batch", "backend",
    "device", "scaling", "image_size", "status", "reason", "params", "peak_memory_bytes",
)


CSV_LOAD_FIELDS = (
    "util_mean", "util_max", "mem_peak_bytes", "power_mean_w", "energy_j", "energy_per_example_j", "host_cpu_mean",
)


CSV_COMM_FIELDS = ("compute_s", "exposed_comm_s", "exposed_comm_fraction", "allreduce_bytes_per_rank")


def csv_text(summary: dict[str, Any]) -> str:
    scaling_by_config = {row["config_id"]: row for table in summary["scaling"] for row in table["rows"]}
    header = list(CSV_SPEC_FIELDS) + ["samples", "mean_s", "std_s"]
    header += [f"sec_iter_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_replica_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_total_p{q}" for q in PERCENTILES]
    header += ["speedup", "efficiency", "relative_cost", "relative_su", "karp_flatt", "cost_per_million"]
    header += list(CSV_COMM_FIELDS) + ["seed002_comm_estimate_s", "ddp_busbw_gbs"]
    header += list(CSV_LOAD_FIELDS) + ["rank_peak_rss_bytes"]
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
        row.append(scale.get("seed002_comm_estimate_s"))
        row.append(((comm.get("buckets") or {}).get("achieved") or {}).get("busbw_gbs"))
        load = entry.get("telemetry") or {}
        row += [load.get(k) for k in CSV_LOAD_FIELDS]
        ranks = (load.get("ranks") or {}).values()
        row.append(max((r.get("peak_rss_bytes") or 0 for r in ranks), default=None))
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()
