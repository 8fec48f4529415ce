"""Render a summary as text (terminal), Markdown and CSV.

The per-configuration block keeps the layout of PyTorch's DDP benchmark (rows ``no ddp``, ``1M/1G``,
``1M/2G``...; p50/p75/p90/p95 of sec/iter with per-replica ex/sec); the scaling table keeps seed 000's
(N, time, speedup, relative SU) and adds throughput, efficiency and relative cost.
"""

from __future__ import annotations

import csv
import io
from typing import Any

from ddptop.stats import PERCENTILES
from ddptop.telemetry.topology import Topology, format_matrix

SHOWN_PERCENTILES = ("p50", "p75", "p90", "p95")


def _benchmark_groups(summary: dict[str, Any]) -> dict[tuple, list[dict[str, Any]]]:
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for entry in summary["configs"]:
        batch = entry["batch_size"] if entry["scaling"] == "weak" else entry["global_batch"]
        groups.setdefault((entry["model"], batch, entry["scaling"], entry["backend"]), []).append(entry)
    for members in groups.values():
        members.sort(key=lambda e: (e["mode"] != "no_ddp", e["world_size"]))
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


SCALING_HEADER = ("N", "sec/iter (p50)", "ex/sec (all ranks)", "speedup", "efficiency", "relative cost", "relative SU")


def _scaling_cells(row: dict[str, Any]) -> tuple[str, ...]:
    return (
        row["label"],
        f"{row['sec_iter']:.4f}",
        f"{row['ex_sec_total']:.1f}",
        _num(row["speedup"]),
        _pct(row["efficiency"]),
        _num(row["relative_cost"]),
        _num(row["relative_su"]),
    )


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
    for table in summary["scaling"]:
        out.append(_scaling_title(table))
        rows = [SCALING_HEADER] + [_scaling_cells(r) for r in table["rows"]]
        widths = [max(len(r[i]) for r in rows) for i in range(len(SCALING_HEADER))]
        for cells in rows:
            out.append("  " + "  ".join(c.rjust(w) for c, w in zip(cells, widths)))
        if table.get("recommendation"):
            out.append("  " + table["recommendation"])
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
    fraction = overhead["fraction_outside_iterations"]
    return (
        f"Sweep wall time {overhead['sweep_wall_s']:.1f} s, of which {overhead['iterations_s']:.1f} s in warm-up and "
        f"measured steps; {_pct(fraction)} went to launching, initialising and tearing down."
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
    table = [LOAD_HEADER] + rows
    widths = [max(len(r[i]) for r in table) for i in range(len(LOAD_HEADER))]
    out = [title]
    for cells in table:
        out.append("  " + "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(cells, widths))))
    return "\n".join(out) + "\n"


def text_report(summary: dict[str, Any]) -> str:
    parts = [topology_text(summary), benchmark_text(summary), scaling_text(summary)]
    load = load_text(summary)
    if load:
        parts.append(load)
    problems = problems_text(summary)
    if problems:
        parts.append("Not measured in full:\n" + problems + "\n")
    parts.append(overhead_line(summary))
    return "\n".join(parts).rstrip() + "\n"


def closing_text(summary: dict[str, Any], paths: dict[str, str]) -> str:
    """What a run prints when it ends: the report, then where the summary files are."""
    return text_report(summary) + f"Summary: {paths['json']}  {paths['md']}  {paths['csv']}\n"


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
        + f", bucket_cap_mb {plan['bucket_cap_mb']}"
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
    for table in summary["scaling"]:
        lines.append(_scaling_title(table))
        lines.append("")
        lines.append("| " + " | ".join(SCALING_HEADER) + " |")
        lines.append("|" + "---|" * len(SCALING_HEADER))
        for row in table["rows"]:
            lines.append("| " + " | ".join(_scaling_cells(row)) + " |")
        lines.append("")
        if table.get("recommendation"):
            lines += [table["recommendation"], ""]
    rows = load_rows(summary)
    if rows:
        lines += ["## Load during measured steps", "", "| " + " | ".join(LOAD_HEADER) + " |"]
        lines.append("|" + "---|" * len(LOAD_HEADER))
        lines += ["| " + " | ".join(cells) + " |" for cells in rows]
        lines.append("")
    lines += ["## Topology", "", "```", topology_text(summary).rstrip(), "```", ""]
    problems = problems_text(summary)
    if problems:
        lines += ["## Not measured in full", ""] + [f"- {p}" for p in problems.splitlines()] + [""]
    lines += ["## Overhead", "", overhead_line(summary), ""]
    return "\n".join(lines)


CSV_SPEC_FIELDS = (
    "config_id", "model", "mode", "label", "world_size", "nnodes", "batch_size", "global_batch", "backend",
    "device", "scaling", "image_size", "status", "reason", "params", "peak_memory_bytes",
)


CSV_LOAD_FIELDS = (
    "util_mean", "util_max", "mem_peak_bytes", "power_mean_w", "energy_j", "energy_per_example_j", "host_cpu_mean",
)


def csv_text(summary: dict[str, Any]) -> str:
    scaling_by_config = {row["config_id"]: row for table in summary["scaling"] for row in table["rows"]}
    header = list(CSV_SPEC_FIELDS) + ["samples", "mean_s", "std_s"]
    header += [f"sec_iter_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_replica_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_total_p{q}" for q in PERCENTILES]
    header += ["speedup", "efficiency", "relative_cost", "relative_su"]
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
        row += [scale.get(k) for k in ("speedup", "efficiency", "relative_cost", "relative_su")]
        load = entry.get("telemetry") or {}
        row += [load.get(k) for k in CSV_LOAD_FIELDS]
        ranks = (load.get("ranks") or {}).values()
        row.append(max((r.get("peak_rss_bytes") or 0 for r in ranks), default=None))
        writer.writerow(["" if v is None else v for v in row])
    return buffer.getvalue()
