"""Threads, ranks and the GPU: the thread curve, the best split of the cores, and the CPU against the GPUs.

Three answers from the configurations of a thread sweep (``--threads``) and of ``--devices cpu,cuda``, for
the saved summary:

- ``thread_tables``: per model, batch and world size, the step time over each rank's intra-op threads, with
  speedup and efficiency against the fewest threads, Amdahl's serial fraction (Karp-Flatt per point and the
  least-squares fit) and where adding threads stops paying, each with its interval across launches;
- ``core_budget``: the ranks x threads splits of the cores that were measured, and the one that gives the
  most examples/s, beyond noise or not;
- ``devices_compared``: the same model and batch on the CPU (its best split) and on the GPUs (their best
  world size): examples/s of each, the GPU's speedup and its relative cost in service units, in words.

Every comparison of two configurations is a ratio of their examples/s whose interval comes from their
independent bootstrap replicates (``intervals``), and a difference is called only when that interval lies
beyond ``DEFAULT_MIN_EFFECT``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddptop import units
from ddptop.analysis import formulas, stats
from ddptop.analysis.figures import put
from ddptop.analysis.intervals import _from, serial_fraction_intervals
from ddptop.analysis.scaling import PlanFigures, as_written, charged_cores, rank_threads, table_batch
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.records import BOOTSTRAP, Estimate, ci_of, paired, value_of

Replicates = Mapping[str, np.ndarray]


def _measured(entry: Mapping[str, Any]) -> bool:
    return entry["mode"] == "ddp" and as_written(entry) and entry["status"] == "ok" and bool(
        (entry.get("stats") or {}).get("sec_iter", {}).get("p50"))


def _in_thread_sweep(entry: Mapping[str, Any]) -> bool:
    """A measured CPU configuration of a split with its own thread count (a thread sweep's, the CPU part's)."""
    return bool(entry.get("threads")) and entry["device"] == "cpu" and _measured(entry)


def _threads(entry: Mapping[str, Any], plan: PlanFigures) -> int:
    return rank_threads(plan, entry["world_size"], entry.get("threads") or 0)


def _p50(entry: Mapping[str, Any]) -> float:
    return float(entry["stats"]["sec_iter"]["p50"])


def _throughput(entry: Mapping[str, Any]) -> float:
    """Examples/s of all ranks at the p50 step."""
    return entry["global_batch"] / _p50(entry)


def _throughput_reps(entry: Mapping[str, Any], replicates: Replicates | None) -> np.ndarray | None:
    reps = (replicates or {}).get(entry["config_id"])
    return None if reps is None else entry["global_batch"] / np.asarray(reps, dtype=float)


# -- the thread curve ----------------------------------------------------------------------------------------


def thread_tables(entries: Sequence[Mapping[str, Any]], plan: PlanFigures,
                  replicates: Replicates | None = None) -> list[dict[str, Any]]:
    """One table per (model, batch, backend, world size) measured at two thread counts or more on the CPU:
    each row a thread count t, its time, examples/s, speedup over the fewest threads (t0) scaled to one
    thread as the scaling tables do (t0 * T(t0) / T(t)), efficiency (speedup / t) and, from one thread,
    Karp-Flatt's serial fraction; the table Amdahl's fit and the recommendation in words."""
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for entry in entries:
        if _in_thread_sweep(entry):
            key = (entry["model"], table_batch(entry), entry["backend"], entry["world_size"], entry["bucket_cap_mb"])
            groups.setdefault(key, []).append(entry)
    tables = []
    for (model, batch, backend, world_size, cap), members in groups.items():
        if len({e["threads"] for e in members}) < 2:
            continue
        members = sorted(members, key=lambda e: e["threads"])
        with_intervals = bool(replicates) and all(e["config_id"] in (replicates or {}) for e in members)
        points = [stats.ScalingPoint(world_size=e["threads"], sec_iter=_p50(e), global_batch=e["global_batch"],
                                     cores=e["threads"] * world_size, gpus=0,
                                     replicates=(replicates or {}).get(e["config_id"]) if with_intervals else None)
                  for e in members]
        figures = stats.scaling_rows(points, plan.su_core_weight, plan.su_gpu_weight)
        rows = figures.rows
        for row in rows:  # the thread count where the scaling rows have the world size
            row["threads"] = row.pop("world_size")
            row.pop("reference_world_size", None)
        reference = rows[0]
        for row, entry in zip(rows, members):
            row["config_id"], row["label"], row["cores"] = entry["config_id"], entry["label"], entry["threads"] * world_size
            karp_flatt = figures.karp_flatt.get(row["threads"])
            put(row, "karp_flatt", karp_flatt)
            if karp_flatt is None or karp_flatt.replicates is None:
                del row["karp_flatt_ci"]
        fit = formulas.amdahl_fit([(r["threads"], r["speedup"]) for r in rows]) if reference["threads"] == 1 else None
        table: dict[str, Any] = {
            "model": model, "batch_size": batch, "batch_meaning": "per rank" if plan.scaling == "weak" else "global",
            "backend": backend, "world_size": world_size, "bucket_cap_mb": cap,
            "reference_threads": reference["threads"], "rows": rows, "amdahl": fit,
            "efficiency_threshold": plan.efficiency_threshold,
        }
        if with_intervals:  # Amdahl's fit from each thread count's speedup replicates
            serial_fraction_intervals(table["amdahl"], {t: s.replicates for t, s in figures.speedups.items()})
        # the recommendation reads the rows as a scaling table's: threads in place of world sizes
        as_sizes = [{**r, "world_size": r["threads"]} for r in rows]
        table["recommendation"] = stats.recommendation(as_sizes, "threads", plan.efficiency_threshold, symbol="t")
        tables.append(table)
    return tables


# -- the best split of the cores -----------------------------------------------------------------------------


def _throughput_ratio(best: Mapping[str, Any], other: Mapping[str, Any],
                      replicates: Replicates | None) -> Estimate:
    """best's examples/s over other's, with its interval where both have replicates."""
    value = _throughput(best) / _throughput(other)
    a, b = _throughput_reps(best, replicates), _throughput_reps(other, replicates)
    return paired(value, _from(a / b, value) if a is not None and b is not None else None, BOOTSTRAP)


def beyond_noise(ci: list[float] | None, min_effect: float = DEFAULT_MIN_EFFECT) -> bool:
    """Whether a ratio's interval lies above 1 by more than the margin (its low end past 1 + min_effect)."""
    return ci is not None and ci[0] > 1 + min_effect


def _split(entry: Mapping[str, Any], plan: PlanFigures) -> str:
    n, t = entry["world_size"], _threads(entry, plan)
    return f"{n} rank{'s' if n != 1 else ''} x {t} thread{'s' if t != 1 else ''}"


def core_budget(entries: Sequence[Mapping[str, Any]], plan: PlanFigures,
                replicates: Replicates | None = None) -> list[dict[str, Any]]:
    """Per (model, batch, backend): every ranks x threads split of the cores measured on the CPU in a thread
    sweep, with its examples/s, and the split that gives the most, against the next best, in one sentence."""
    cores = getattr(plan, "cpu_cores", 0) or None
    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for entry in entries:
        if _in_thread_sweep(entry):
            groups.setdefault((entry["model"], table_batch(entry), entry["backend"], entry["bucket_cap_mb"]), []).append(entry)
    tables = []
    for (model, batch, backend, cap), members in groups.items():
        if len(members) < 2 or len({e["world_size"] for e in members}) < 2:
            continue  # one world size: the thread table says it all
        cells = []
        for entry in sorted(members, key=lambda e: (e["world_size"], e["threads"])):
            cells.append({"world_size": entry["world_size"], "threads": entry["threads"],
                          "cores": entry["world_size"] * entry["threads"], "config_id": entry["config_id"],
                          "global_batch": entry["global_batch"], "sec_iter": _p50(entry),
                          **_throughput_figures(entry, replicates)})
        best = max(members, key=_throughput)
        second = max((e for e in members if e is not best), key=_throughput)
        ratio = _throughput_ratio(best, second, replicates)
        clear = beyond_noise(ratio.ci)
        for cell in cells:
            cell["best"] = cell["config_id"] == best["config_id"]
        best_cell = next(c for c in cells if c["best"])
        ex_text = units.estimate(best_cell["ex_sec_total"], units.rate)
        ratio_text = units.estimate(ratio, lambda v: units.number(v, 2, "x"))
        budget = f"the {cores} cores" if cores else "the cores"
        if clear:
            answer = (f"Best split of {budget} for {model}: {_split(best, plan)}, {ex_text} examples/s, {ratio_text} "
                      f"the next best ({_split(second, plan)}), beyond noise.")
        else:
            why = "within noise" if ratio.ci else "no interval to decide by: a single measurement"
            answer = (f"Best split of {budget} for {model}: {_split(best, plan)} and {_split(second, plan)} cannot be "
                      f"told apart ({ratio_text}, {why}); {_split(best, plan)} measured highest, {ex_text} "
                      "examples/s.")
        if len({e["global_batch"] for e in members}) > 1:  # weak scaling: more ranks, a larger global batch
            answer += (" Under weak scaling the splits differ in global batch too (each rank its own batch); "
                       "--scaling strong compares them at one global batch.")
        tables.append({"model": model, "batch_size": batch, "backend": backend, "bucket_cap_mb": cap,
                       "cores": cores, "cells": cells, "best_config_id": best["config_id"] if clear else None,
                       "measured_highest": best["config_id"], "next_best": second["config_id"],
                       "ratio": ratio, "answer": answer})
    return tables


# -- the CPU against the GPUs --------------------------------------------------------------------------------


def _charge(entry: Mapping[str, Any], plan: PlanFigures) -> float:
    """Service units per example: (w_core * cores + w_gpu * GPUs) * seconds / examples."""
    n = entry["world_size"]
    cores = charged_cores(plan, n, entry.get("threads") or 0, entry["device"]) * n
    gpus = n if entry["device"] == "cuda" else 0
    return (plan.su_core_weight * cores + plan.su_gpu_weight * gpus) * _p50(entry) / entry["global_batch"]


def _charge_reps(entry: Mapping[str, Any], plan: PlanFigures, replicates: Replicates | None) -> np.ndarray | None:
    reps = (replicates or {}).get(entry["config_id"])
    if reps is None:
        return None
    return _charge(entry, plan) * np.asarray(reps, dtype=float) / _p50(entry)


def devices_compared(entries: Sequence[Mapping[str, Any]], plan: PlanFigures,
                     replicates: Replicates | None = None) -> list[dict[str, Any]]:
    """Per model and batch measured on both devices (--devices cpu,cuda): each device's fastest configuration
    (most examples/s) and cheapest (fewest service units per example), the GPUs' speedup over the CPU (fastest
    against fastest) and their relative cost (cheapest against cheapest), each with its interval, and the
    answer; with the GPUs left out (none usable), the CPU part and why."""
    devices = tuple(getattr(plan, "devices", ()) or ())
    if not devices:
        return []
    skipped = dict(getattr(plan, "devices_skipped", {}) or {})
    groups: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
    for entry in entries:
        if _measured(entry):
            groups.setdefault((entry["model"], table_batch(entry)), {}).setdefault(entry["device"], []).append(entry)
    tables = []
    for (model, batch), by_device in groups.items():
        fastest = {d: max(members, key=_throughput) for d, members in by_device.items()}
        cheapest = {d: min(members, key=lambda e: _charge(e, plan)) for d, members in by_device.items()}
        table: dict[str, Any] = {
            "model": model, "batch_size": batch, "batch_meaning": "per rank" if plan.scaling == "weak" else "global",
            **{d: _side(fastest[d], plan, replicates) if d in fastest else None for d in ("cpu", "cuda")},
            **{f"{d}_cheapest": _side(cheapest[d], plan, replicates) if d in cheapest else None
               for d in ("cpu", "cuda")},
            "gpu_speedup": None, "relative_su": None,
            "worth_it": None, "su_core_weight": plan.su_core_weight, "su_gpu_weight": plan.su_gpu_weight}
        if "cpu" in fastest and "cuda" in fastest:
            table["gpu_speedup"] = _throughput_ratio(fastest["cuda"], fastest["cpu"], replicates)
            gpu, cpu = cheapest["cuda"], cheapest["cpu"]
            if _charge(cpu, plan) > 0:
                cost = _charge(gpu, plan) / _charge(cpu, plan)
                a, b = _charge_reps(gpu, plan, replicates), _charge_reps(cpu, plan, replicates)
                table["relative_su"] = paired(cost, _from(a / b, cost) if a is not None and b is not None else None,
                                              BOOTSTRAP)
            table["worth_it"], table["answer"] = _worth_it(table, model, plan)
        elif "cpu" in fastest:
            why = skipped.get("cuda") or "no GPU configuration was measured"
            table["answer"] = (f"{model}: the CPU part alone ({_split(fastest['cpu'], plan)}, "
                               f"{units.rate(table['cpu']['ex_sec_total'].value)} examples/s); GPUs not measured: {why}.")
        else:
            table["answer"] = f"{model}: the GPUs alone; the CPU part was not measured."
        tables.append(table)
    return tables


def _throughput_figures(entry: Mapping[str, Any], replicates: Replicates | None) -> dict[str, Any]:
    """``ex_sec_total`` with its interval from the configuration's replicates (none without them)."""
    ex, reps = _throughput(entry), _throughput_reps(entry, replicates)
    return {"ex_sec_total": paired(ex, _from(reps, ex) if reps is not None else None, BOOTSTRAP)}


def _side(entry: Mapping[str, Any], plan: PlanFigures, replicates: Replicates | None) -> dict[str, Any]:
    n = entry["world_size"]
    return {"config_id": entry["config_id"], "label": entry["label"], "world_size": n,
            "threads": _threads(entry, plan),
            "cores": charged_cores(plan, n, entry.get("threads") or 0, entry["device"]) * n,
            "gpus": n if entry["device"] == "cuda" else 0, "sec_iter": _p50(entry),
            **_throughput_figures(entry, replicates), "su_hours_per_million": _charge(entry, plan) * 1e6 / 3600}


def _worth_it(table: Mapping[str, Any], model: str, plan: PlanFigures) -> tuple[bool | None, str]:
    """Worth it when each example costs fewer service units on the GPUs, beyond noise; not when more."""
    relative_su = table["relative_su"]
    cost, ci = value_of(relative_su), ci_of(relative_su)
    speedup = units.estimate(table["gpu_speedup"], lambda v: units.number(v, 2, "x"))
    weights = f"{plan.su_core_weight:g} SU per core-hour, {plan.su_gpu_weight:g} per GPU-hour"
    fast_gpu, fast_cpu, gpu, cpu = table["cuda"], table["cpu"], table["cuda_cheapest"], table["cpu_cheapest"]
    head = f"{model}: the GPUs ({fast_gpu['label']}) give {speedup} the CPU's examples/s ({fast_cpu['label']})"
    if cost is None:
        return None, f"{head}; the CPU is charged nothing ({weights}), so there is no cost to compare."
    cost_text = units.estimate(relative_su, lambda v: units.number(v, 2, "x"))
    head += (f"; at the fewest service units per example of each ({gpu['label']} against {cpu['label']}, "
             f"{weights}) an example costs {cost_text} on the GPUs")
    if ci is not None and ci[1] < 1 - DEFAULT_MIN_EFFECT:
        return True, f"{head}: worth it, {1 / cost:.2f}x cheaper per example, beyond noise."
    if ci is not None and ci[0] > 1 + DEFAULT_MIN_EFFECT:
        return False, f"{head}: not worth it, {cost:.2f}x dearer per example, beyond noise."
    reason = "within noise" if ci is not None else "a single launch gives no interval"
    return None, f"{head}: neither cheaper nor dearer beyond noise ({reason})."
