"""The summary's plots, each saved as PNG and SVG in ``<run dir>/plots``: matplotlib with its Agg backend.

- speedup.*: speedup against N for every scaling table (95% intervals as error bars), the perfect-scaling line (as the HPC article
  "Benchmarking Parallel Programs" draws it) and Amdahl's fit;
- efficiency.*: efficiency against N with the recommendation threshold;
- batch_throughput.*: examples/s against the batch size, out-of-memory batches marked (the batch-size sweep
  until out of memory of a course notebook on data parallelism with ResNet-18 on CIFAR-10);
- comm_split.*: per DDP configuration, compute (no_sync step) and exposed communication stacked;
- busbw.*: the collective benchmark's bus bandwidth against message size, with what DDP's buckets reached;
- threads.*: speedup and efficiency against each rank's threads (--threads), 95% intervals, the perfect line
  and Amdahl's fit;
- memory_frontier.*: per strategy (--strategies: DDP, ZeRO-1, FSDP2), examples/s against memory per rank at
  every batch measured, each point labelled with its batch.

A plot with nothing to draw is not written (speedup and efficiency need two world sizes, or a projection
beyond the node). ``ddptop run --no-plots`` draws none; ``ddptop plot`` draws them from a saved summary.
matplotlib is imported here only, after a run, never by the TUI while it draws.
"""

from __future__ import annotations

import io
import os
from typing import Any

from ddptop.analysis import formulas
from ddptop.protocol import storage
from ddptop.protocol.layout import PLOTS_DIR
from ddptop.protocol.modelspec import display_name, with_batch
from ddptop.report.chart_data import Axes, Plotted, error_bars, plotted, points_of, xs, ys
from ddptop.report import chart_data
from ddptop.report.schema import value_of, Estimate, ScalingTable, Summary

FORMATS = ("png", "svg")


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _table_label(table: ScalingTable, many_caps: bool) -> str:
    label = f"{table.series_label()} {table.backend}"
    return label + (f" bucket {table.bucket_cap_mb:g}" if many_caps else "")


def _save(fig: Any, out_dir: str, name: str) -> list[str]:
    paths = []
    for fmt in FORMATS:
        path = os.path.join(out_dir, f"{name}.{fmt}")
        image = io.BytesIO()
        fig.savefig(image, format=fmt, dpi=110, bbox_inches="tight")
        storage.write_atomic(path, image.getvalue())  # whole or not at all, the user's only, on a full disk too
        paths.append(path)
    return paths


def _unit(summary: Summary) -> str:
    on_gpus = summary.plan.device == "cuda" and not any(t.device == "cpu" for t in summary.scaling)
    return "GPUs" if on_gpus else "ranks"


def _subplots(plt: Any, count: int, figsize: tuple[float, float]) -> tuple[Any, list[Axes]]:
    """A figure of ``count`` axes side by side, each typed as the calls made of it (``chart_data.Axes``)."""
    fig, axes = plt.subplots(1, count, figsize=figsize, squeeze=False)
    return fig, list(axes[0])


def _finish(plt: Any, fig: Any, axes: list[Axes], out_dir: str, name: str, legend_size: int = 8) -> list[str]:
    for axis in axes:
        axis.grid(alpha=0.3)
        axis.legend(fontsize=legend_size)
    paths = _save(fig, out_dir, name)
    plt.close(fig)
    return paths


def _name_intervals(drawn: Any, gid: str) -> None:
    """Name an errorbar's interval lines in the SVG (``id="ci-step"``...), so a reader can find them."""
    for index, collection in enumerate(drawn.lines[2]):
        collection.set_gid(gid if index == 0 else f"{gid}-{index}")


def _draw_efficiency(axis: Axes, summary: Summary, tables: list[ScalingTable], many_caps: bool) -> None:
    for table in tables:
        efficiency = points_of([(r.world_size, r.efficiency) for r in table.rows], 100)
        drawn = axis.errorbar(xs(efficiency), ys(efficiency), yerr=error_bars(efficiency), capsize=3, marker="o",
                              label=_table_label(table, many_caps))
        _name_intervals(drawn, f"ci-efficiency-{len(axis.containers)}")
    first = tables[0].efficiency_threshold
    threshold = 100 * (first if first is not None else 0.7)
    axis.axhline(threshold, linestyle="--", color="grey", label=f"threshold {threshold:.0f}%")
    axis.set(xlabel=f"N ({_unit(summary)})", ylabel="efficiency (%)", title="Efficiency", ylim=(0, 110))


def _speedup(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    # one world size is a speedup of 1 and an efficiency of 100% by definition: nothing to see unless projected
    tables = [t for t in summary.scaling if len(t.rows) >= 2 or (t.rows and t.projection and t.projection.points)]
    if not tables:
        return []
    many_caps = len({t.bucket_cap_mb for t in tables}) > 1
    fig, (left, right) = _subplots(plt, 2, figsize=(11, 4.2))
    series = chart_data.speedup_series(summary, tables)
    sizes = list(range(1, chart_data.world_sizes(series)[-1] + 1))
    left.plot(sizes, sizes, linestyle="--", color="grey", label="perfect scaling")
    for line in series:
        drawn = left.errorbar(xs(line.measured), ys(line.measured), yerr=error_bars(line.measured), capsize=3,
                              marker="o", label=_table_label(line.table, many_caps))
        _name_intervals(drawn, f"ci-speedup-{len(left.containers)}")
        if line.projected:  # a model, not a measurement: dashed, from the last measured point
            left.plot(xs(line.projected_line), ys(line.projected_line), linestyle="--", marker="x",
                      color=drawn.lines[0].get_color(), label="projected beyond the node (a model)")
        fit = line.table.amdahl
        if fit and fit.raw_serial_fraction and fit.serial_fraction and formulas.amdahl_applies(fit.raw_serial_fraction.value):
            left.plot(sizes, [formulas.amdahl_speedup(fit.serial_fraction.value, n) for n in sizes], linestyle=":",
                      color=drawn.lines[0].get_color(), label=f"Amdahl, serial {100 * fit.serial_fraction.value:.1f}%",
                      gid=f"amdahl-{len(left.containers)}")
    left.set(xlabel=f"N ({_unit(summary)})", ylabel="speedup", title="Speedup")
    _draw_efficiency(right, summary, tables, many_caps)
    fig.suptitle(summary.name or "")
    paths = _finish(plt, fig, [left, right], out_dir, "speedup")
    # efficiency alone as well, for documents that want one chart per figure
    fig, (axis,) = _subplots(plt, 1, figsize=(6, 4))
    _draw_efficiency(axis, summary, tables, many_caps)
    return paths + _finish(plt, fig, [axis], out_dir, "efficiency")


def _threads(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    """The thread curve of each thread table: speedup (left) and efficiency (right) against threads per rank."""
    tables = summary.threads
    if not tables:
        return []
    fig, (left, right) = _subplots(plt, 2, figsize=(11, 4.2))
    largest = max(r.threads for t in tables for r in t.rows)
    counts = list(range(1, largest + 1))
    left.plot(counts, counts, linestyle="--", color="grey", label="perfect scaling")
    for index, table in enumerate(tables):
        rows = table.rows
        label = f"{table.model} bs{table.batch_size} N={table.world_size}"
        speedups = points_of([(r.threads, r.speedup) for r in rows])
        drawn = left.errorbar(xs(speedups), ys(speedups), yerr=error_bars(speedups), capsize=3, marker="o",
                              label=label)
        _name_intervals(drawn, f"ci-thread-speedup-{index + 1}")
        fit = table.amdahl
        raw, fraction = (value_of(fit.raw_serial_fraction), value_of(fit.serial_fraction)) if fit else (None, None)
        if raw is not None and fraction is not None and formulas.amdahl_applies(raw):
            left.plot(counts, [formulas.amdahl_speedup(fraction, t) for t in counts], linestyle=":",
                      color=drawn.lines[0].get_color(), label=f"Amdahl, serial {100 * fraction:.1f}%")
        efficiency = points_of([(r.threads, r.efficiency) for r in rows], 100)
        drawn = right.errorbar(xs(efficiency), ys(efficiency), yerr=error_bars(efficiency), capsize=3,
                               marker="o", label=label)
        _name_intervals(drawn, f"ci-thread-efficiency-{index + 1}")
    threshold = 100 * (tables[0].efficiency_threshold or 0.7)
    right.axhline(threshold, linestyle="--", color="grey", label=f"threshold {threshold:.0f}%")
    measured = sorted({r.threads for t in tables for r in t.rows})
    for axis in (left, right):
        if largest > 4:  # 1, 2, 4, 8, 16 evenly spaced
            axis.set_xscale("log", base=2)
        axis.set_xticks(measured, [str(t) for t in measured])
    left.set(xlabel="threads per rank", ylabel="speedup", title="Speedup over threads")
    right.set(xlabel="threads per rank", ylabel="efficiency (%)", title="Efficiency over threads", ylim=(0, 110))
    fig.suptitle(summary.name or "")
    return _finish(plt, fig, [left, right], out_dir, "threads")


def _batch_throughput(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    tables = summary.batch_throughput
    if not tables:
        return []
    fig, (axis,) = _subplots(plt, 1, figsize=(6.5, 4.2))
    for table in tables:
        measured = points_of([(r.batch_size, r.ex_sec_total) for r in table.rows])
        label = f"{display_name(table.model)} N={table.world_size}" + (f" {table.strategy}" if table.strategy != "ddp" else "")
        drawn = axis.errorbar(xs(measured), ys(measured), yerr=error_bars(measured), marker="o", capsize=3,
                              label=label)
        _name_intervals(drawn, f"ci-throughput-{len(axis.containers)}")
        ooms = [float(r.batch_size) for r in table.rows if r.status == "oom"]
        if ooms and measured:
            axis.scatter(ooms, [measured[-1].y] * len(ooms), marker="x", s=80,
                         color=drawn.lines[0].get_color(), label=f"{label}: out of memory")
    axis.set_xscale("log", base=2)
    axis.set(xlabel="batch per rank", ylabel="examples/s (all ranks)", title="Throughput per batch size")
    return _finish(plt, fig, [axis], out_dir, "batch_throughput")


def _comm_split(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    found = [(e, e.communication) for e in summary.configs
             if e.communication and e.communication.compute_s is not None and e.communication.step_s is not None]
    if not found:
        return []
    entries = [e for e, _ in found]
    labels = [f"{e.label}\n{with_batch(e.model, e.batch_size)}" for e in entries]
    # every entry has a bar: an exposed part not measured is none, not a gap
    compute = [plotted(i, c.compute_s, 1e3) or Plotted(i, 0.0) for i, (_, c) in enumerate(found)]
    exposed = [plotted(i, c.exposed_comm_s, 1e3) or Plotted(i, 0.0) for i, (_, c) in enumerate(found)]
    # the step as measured (its p50, with that figure's interval)
    steps = [plotted(i, e.stats.p50 if e.stats and e.stats.p50 else Estimate(value=c.step_s or 0.0), 1e3)
             or Plotted(i, 0.0) for i, (e, c) in enumerate(found)]
    fig, (axis,) = _subplots(plt, 1, figsize=(max(5, 1.3 * len(entries) + 2), 4.2))
    positions = xs(compute)
    axis.bar(positions, ys(compute), label="compute (step inside no_sync)")
    axis.bar(positions, ys(exposed), bottom=ys(compute), label="exposed communication")
    compute_ci = error_bars(compute)
    if compute_ci is not None:  # the interval of each part measured: the no_sync step, and the step
        _name_intervals(axis.errorbar(positions, ys(compute), yerr=compute_ci, fmt="none", ecolor="dimgrey",
                                      capsize=4, zorder=3), "ci-compute")
    axis.scatter(positions, ys(steps), color="black", marker="_", s=300, zorder=3, label="measured step (p50)")
    step_ci = error_bars(steps)
    if step_ci is not None:
        _name_intervals(axis.errorbar(positions, ys(steps), yerr=step_ci, fmt="none", ecolor="black", capsize=4,
                                      zorder=3, label="95% interval"), "ci-step")
    axis.set_xticks(positions, labels, fontsize=8)
    axis.set(ylabel="ms per step", title="Compute vs communication")
    return _finish(plt, fig, [axis], out_dir, "comm_split")


def _busbw(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    tables = summary.collectives
    if not tables:
        return []
    fig, (axis,) = _subplots(plt, 1, figsize=(7, 4.4))
    for table in tables:
        for inplace in (True, False):
            busbw = points_of([(r.bytes, r.busbw_gbs) for r in table.rows if r.inplace is inplace and r.busbw_gbs])
            if busbw:
                place = "" if table.op in ("allreduce", "broadcast") else (" in place" if inplace else " out of place")
                drawn = axis.errorbar(xs(busbw), ys(busbw), yerr=error_bars(busbw), marker=".", capsize=2,
                                      label=f"{table.op}{place} N={table.world_size} {table.backend}")
                _name_intervals(drawn, f"ci-busbw-{len(axis.containers)}")  # ids are unique in an SVG
    for entry in summary.configs:
        buckets = entry.communication.buckets if entry.communication else None
        achieved = buckets.achieved if buckets else None
        if buckets and achieved and buckets.mean_bucket_bytes and achieved.busbw_gbs is not None:
            axis.scatter([float(buckets.mean_bucket_bytes)], [float(achieved.busbw_gbs)], marker="*", s=120, zorder=3,
                         label=f"DDP buckets: {display_name(entry.model)} N={entry.world_size}")
    axis.set_xscale("log", base=2)
    axis.set(xlabel="message size (bytes)", ylabel="bus bandwidth (GB/s)", title="Collective bus bandwidth")
    return _finish(plt, fig, [axis], out_dir, "busbw", legend_size=7)


def save_plots(summary: Summary, run_dir: str) -> list[str]:
    """Draw every plot the summary has data for into ``run_dir/plots``; return the files written."""
    out_dir = os.path.join(run_dir, PLOTS_DIR)
    os.makedirs(out_dir, mode=0o700, exist_ok=True)
    plt = _pyplot()
    paths: list[str] = []
    for draw in (_speedup, _threads, _batch_throughput, _comm_split, _busbw, _frontier):
        paths += draw(plt, summary, out_dir)
    return paths


def _frontier(plt: Any, summary: Summary, out_dir: str) -> list[str]:
    """The memory frontier: examples/s (95% intervals) against memory per rank, one line per strategy."""
    tables = [t for t in summary.strategies if len(t.frontier) >= 2]
    if not tables:
        return []
    fig, (axis,) = _subplots(plt, 1, figsize=(6.5, 4.2))
    kinds: set[str | None] = set()
    for table in tables:
        for strategy in dict.fromkeys(p.strategy for p in table.frontier):
            found = [p for p in table.frontier if p.strategy == strategy and p.memory_bytes and p.ex_sec_total]
            if not found:
                continue
            kinds.update(p.memory_kind for p in found)
            points = points_of([((p.memory_bytes or 0) / 2**20, p.ex_sec_total) for p in found])
            label = strategy + (f" ({display_name(table.model)} N={table.world_size})" if len(tables) > 1 else "")
            drawn = axis.errorbar(xs(points), ys(points), yerr=error_bars(points), marker="o", capsize=3, label=label)
            _name_intervals(drawn, f"ci-frontier-{len(axis.containers)}")
            for point, batch in zip(points, [p.batch_size for p in found]):
                axis.annotate(str(batch), (point.x, point.y), textcoords="offset points", xytext=(4, 4), fontsize=7)
    for cap in sorted({t.memory_cap_mb for t in tables if t.memory_cap_mb}):
        axis.axvline(cap, linestyle="--", color="grey", label=f"memory cap {cap:g} MiB")
    kind = " (counted)" if kinds == {"counted"} else ""
    axis.set(xlabel=f"memory per rank (MiB){kind}", ylabel="examples/s (all ranks)",
             title="Memory frontier: examples/s against memory per rank (labels: batch per rank)")
    return _finish(plt, fig, [axis], out_dir, "memory_frontier")
