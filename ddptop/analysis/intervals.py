"""95% confidence intervals for every headline figure of a summary, from the step times themselves.

Each configuration's pooled median step time gets block-bootstrap replicates (``uncertainty``); every figure
derived from one or more medians (ex/s, speedup, efficiency, relative cost and SU, Karp-Flatt, DDP's cost
over the plain model, exposed communication, the t(N)-t(1) estimate, Amdahl's serial fraction, a
collective's bus bandwidth) is the same formula applied to the replicates, and its interval is read from
them. Configurations are measured independently, so their replicates are independent draws. Intervals are
written beside their figure as ``<figure>_ci: [low, high]``.

Each configuration's bootstrap is seeded from its id, so a summary rebuilt from the same files has the same
intervals.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddptop.analysis import communication, launches
from ddptop.analysis import stats as stats_module
from ddptop.analysis import stragglers
from ddptop.analysis import uncertainty
from ddptop.protocol import precision

Replicates = Mapping[str, np.ndarray]  # config id -> bootstrap replicates of its pooled median step time


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def used_units(entry: Mapping[str, Any]) -> dict[str, dict[int, list[float]]]:
    """A just built entry's steps split by launch (``used_units_of``)."""
    return used_units_of(entry.get("samples") or {},
                         [(u.get("launch"), u.get("used")) for u in entry.get("launches") or ()],
                         entry.get("launch_of_steps"))


def used_units_of(
    by_rank: Mapping[str, Sequence[float]], launch_units: Sequence[tuple[str | None, bool | None]],
    runs: Mapping[str, Sequence[Sequence[int]]] | None,
) -> dict[str, dict[int, list[float]]]:
    """A configuration's steps (``by_rank``: rank -> step times) split by launch, the launches its figures
    use only (``launch_units``: (name, used) of each; a disturbed launch that was measured again is left
    out); ``runs``: rank -> [launch index, steps] runs. One unnamed launch for a summary without launches."""
    samples = {int(rank): list(values) for rank, values in by_rank.items() if values}
    if not launch_units or not isinstance(runs, Mapping):
        return launches.split_by_launch(samples, None)
    names = [name or str(i) for i, (name, _) in enumerate(launch_units)]
    labels: dict[int, list[str]] = {}
    for rank in samples:
        expanded: list[str] = []
        for index, count in runs.get(str(rank), ()):
            expanded += [names[index] if 0 <= index < len(names) else ""] * count
        labels[rank] = expanded
    split = launches.split_by_launch(samples, labels)
    unused = {name for name, used in launch_units if used is False}
    kept = {name: steps for name, steps in split.items() if name not in unused}
    return kept or split


def _steps_by_launch(entry: Mapping[str, Any]) -> dict[int, int]:
    """Every launch's steps over all ranks, used or not, counted from the entry's run lengths."""
    counts: dict[int, int] = {}
    for runs in (entry.get("launch_of_steps") or {}).values():
        for index, count in runs:
            counts[index] = counts.get(index, 0) + count
    return counts


def fit_launches(entries: Sequence[Mapping[str, Any]], salt: str = "",
                 resamples: int = uncertainty.RESAMPLES) -> list[launches.ConfigLaunches]:
    """Every entry with steps, split by launch and bootstrapped within each launch."""
    return [launches.config_launches(e["config_id"], used_units(e), resamples, salt)
            for e in entries if e.get("stats") and e.get("samples")]


def add_step_intervals(states: Sequence[Any], entries: Sequence[dict[str, Any]]
                       ) -> tuple[dict[str, np.ndarray], launches.LaunchVariance]:
    """Put the p50's interval (and ex/s's, and exposed communication's) into each entry with steps; return
    the replicates by configuration id for the figures derived from several configurations, and the
    launch-to-launch variance pooled over the configurations (``analysis.launches``)."""
    fitted = {c.config_id: c for c in fit_launches(entries)}
    variance, replicates = launches.estimates(list(fitted.values()))
    for state, entry in zip(states, entries):
        stats = entry.get("stats")
        if not stats or entry["config_id"] not in fitted:
            continue
        config = fitted[entry["config_id"]]
        samples = {rank: values for rank, values in state.samples.items() if values}
        reps = replicates[entry["config_id"]]
        estimate = uncertainty.estimate(reps, stats["sec_iter"]["p50"])
        steps = _steps_by_launch(entry)
        for index, unit in enumerate(entry.get("launches") or ()):
            fit = next((u for u in config.units if u.name == unit["launch"]), None)
            unit["steps"] = steps.get(index, 0)
            unit["p50"] = fit.median if fit else None
            if fit is not None:
                unit["p50_ci"] = uncertainty.estimate(fit.median * np.exp(fit.deviations), fit.median).ci
        stats["p50_ci"] = estimate.ci
        stats["p50_precision"] = estimate.rel_half_width()
        stats["p50_levels"] = "launches" if variance.estimated else "within launch"
        for key, examples in (("ex_sec_total", entry["global_batch"]), ("ex_sec_replica", entry["batch_size"])):
            stats[f"{key}_p50_ci"] = _derived(lambda t, e=examples: e / t, reps, value=stats[key]["p50"])
        _exposed_communication(state, entry, reps)
        _straggler(stats, samples, entry["config_id"])
        entry["straggler"] = stragglers.config_straggler(state, entry)
    return replicates, variance


def add_tail_intervals(entries: Sequence[dict[str, Any]], variance: launches.LaunchVariance,
                       q: float = precision.TAIL) -> None:
    """Put the step's ``q`` quantile (the p95) with its two-level interval into each entry with steps
    (``stats.sec_iter_p95`` and ``_ci``) where it measured enough steps for one (``precision.tail_steps``; the
    ranks of one step count once; ``stats.p95_steps`` says how many): each launch's steps bootstrapped for that
    quantile, the launch offsets from the medians' pooled variance (``launches.config_launches``). A tune's rows
    show it; a sweep's tables do not, so only a tune pays for it."""
    key = f"p{round(q * 100)}"
    for entry in entries:
        stats = entry.get("stats")
        if not stats or not entry.get("samples") or (stats.get("sec_iter") or {}).get(key) is None:
            continue
        units = used_units(entry)
        steps = sum(max((len(v) for v in unit.values()), default=0) for unit in units.values())
        stats[f"{key}_steps"] = steps
        if steps < precision.tail_steps(q):
            continue
        config = launches.config_launches(entry["config_id"], units, q=q)
        value = stats["sec_iter"][key]  # the launches used, as the replicates' (the stats are of those launches)
        estimate = uncertainty.estimate(launches.replicates(config, variance), value)
        stats[f"sec_iter_{key}"], stats[f"sec_iter_{key}_ci"] = value, estimate.ci


def _straggler(stats: dict[str, Any], samples: Mapping[int, Sequence[float]], config_id: str) -> None:
    """The slowest rank's median over the other ranks' pooled median, with its interval from one bootstrap of
    both (the live view's point sets it against the median of the others' medians: with two ranks the same
    figure). The rank is flagged a straggler only when the interval clears
    STRAGGLER_RATIO: slower than the other ranks beyond noise."""
    found = stats.get("straggler")
    if not found or len(samples) < 2:
        return
    slow = found["rank"]
    others = {rank: values for rank, values in samples.items() if rank != slow}
    comparison = uncertainty.compare(others, {slow: samples[slow]}, min_effect=0.0,
                                     seed=_seed(config_id + "/straggler"))
    found["ratio"] = comparison.ratio
    beyond_noise = comparison.ratio.low is not None and comparison.ratio.low >= stats_module.STRAGGLER_RATIO
    if comparison.ratio.value >= stats_module.STRAGGLER_RATIO and not beyond_noise:
        found["within_noise"] = True
    found["flagged"] = beyond_noise


def _derived(fn: Any, *arrays: np.ndarray, value: float | None) -> list[float] | None:
    if value is None:
        return None
    return uncertainty.propagate(fn, *arrays, value=value).ci


def _exposed_communication(state: Any, entry: dict[str, Any], step_reps: np.ndarray) -> None:
    comm = entry.get("communication")
    nosync = {rank: values for rank, values in state.nosync.items() if values}
    if not comm or not nosync or comm.get("exposed_comm_s") is None:
        return
    nosync_reps = uncertainty.median_replicates(nosync, seed=_seed(entry["config_id"] + "/nosync"))
    comm["compute_s_ci"] = uncertainty.estimate(nosync_reps, comm["compute_s"]).ci
    # the point figure is clamped at 0 (synchronising cannot speed a step up); so is its interval
    comm["exposed_comm_s_ci"] = _derived(lambda s, n: np.maximum(s - n, 0.0), step_reps, nosync_reps,
                                         value=comm["exposed_comm_s"])
    if comm.get("exposed_comm_fraction") is not None:
        comm["exposed_comm_fraction_ci"] = _derived(lambda s, n: np.maximum(s - n, 0.0) / s, step_reps,
                                                    nosync_reps, value=comm["exposed_comm_fraction"])


def add_scaling_intervals(table: dict[str, Any], by_size: Mapping[int, dict[str, Any]], baseline: dict[str, Any] | None,
                          replicates: Replicates, speedups: Mapping[int, Any]) -> None:
    """The intervals of a scaling table's figures beyond its rows' own (``stats.scaling_rows`` gives those
    with their values): the communication estimated from N=1's step, DDP's cost over no-DDP at the reference,
    and Amdahl's fit from each size's speedup replicates (``speedups``: world size -> ``figures.Measured``)."""
    rows = table["rows"]
    if not rows or any(by_size[r["world_size"]]["config_id"] not in replicates for r in rows):
        return
    reference = rows[0]
    ref_entry = by_size[reference["world_size"]]
    t_ref = replicates[ref_entry["config_id"]]
    for row in rows:
        entry = by_size[row["world_size"]]
        t = replicates[entry["config_id"]]
        if row["speedup"] is None:  # a batch not counted (a script's): the step time's interval alone
            continue
        single = baseline if baseline is not None else (ref_entry if reference["world_size"] == 1 else None)
        if row.get("comm_estimate_from_t1_s") is not None and single is not None:
            t1 = replicates.get(single["config_id"])
            if t1 is not None:
                compute = t1 * entry["batch_size"] / single["batch_size"]
                row["comm_estimate_from_t1_s_ci"] = _from(t - compute, row["comm_estimate_from_t1_s"])
        comm = entry.get("communication") or {}
        for key in ("exposed_comm_s", "exposed_comm_fraction"):
            if comm.get(f"{key}_ci") is not None:
                row[f"{key}_ci"] = comm[f"{key}_ci"]
    if baseline is not None and table.get("ddp_overhead_at_reference") is not None:
        t_plain = replicates.get(baseline["config_id"])
        if t_plain is not None:
            table["ddp_overhead_at_reference_ci"] = _from(t_ref / t_plain - 1, table["ddp_overhead_at_reference"])
    fit = table.get("amdahl")
    sized = {n: s.replicates for n, s in speedups.items() if s.replicates is not None}
    fractions = serial_fraction_intervals(fit, sized) if len(sized) == len(rows) else None
    if fit is not None and fractions is not None:
        fit["max_speedup_ci"] = _from(np.where(fractions > 0, 1 / np.maximum(fractions, 1e-12), np.inf),
                                      fit["max_speedup"]) if fit.get("max_speedup") is not None else None


def serial_fraction_intervals(fit: dict[str, Any] | None, speedups: Mapping[int, np.ndarray]) -> np.ndarray | None:
    """The intervals of an Amdahl fit's serial fraction, as fitted and bounded to [0, 1], from each size's
    speedup replicates (world size or threads -> replicates); the bounded fractions, for the figures made of
    them. None without a fit or a size above 1."""
    if fit is None:
        return None
    raw = _amdahl_fractions(speedups)
    if raw is None:
        return None
    fit["raw_serial_fraction_ci"] = _from(raw, fit["raw_serial_fraction"])
    fractions = np.clip(raw, 0.0, 1.0)
    fit["serial_fraction_ci"] = _from(fractions, fit["serial_fraction"])
    return fractions


def _from(derived: np.ndarray, value: float | None) -> list[float] | None:
    if value is None:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        return uncertainty.estimate(np.asarray(derived, dtype=float), value).ci


def _amdahl_fractions(speedups: Mapping[int, np.ndarray]) -> np.ndarray | None:
    """``formulas.amdahl_fit``'s closed form applied to every replicate: f = sum((1/S - 1/N)(1 - 1/N)) /
    sum((1 - 1/N)^2) over N > 1, not yet bounded to [0, 1] (outside it the law does not fit)."""
    usable = [(n, s) for n, s in speedups.items() if n > 1]
    if not usable:
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        numerator = sum((1 / s - 1 / n) * (1 - 1 / n) for n, s in usable)
    denominator = sum((1 - 1 / n) ** 2 for n, _ in usable)
    return np.asarray(numerator / denominator)  # already an array (usable is not empty): for the type


def add_collective_intervals(tables: Sequence[dict[str, Any]], events: Sequence[dict[str, Any]],
                             launches: Mapping[str, Any]) -> None:
    """busbw's interval per message size: each rank's median time bootstrapped (its operations in order),
    the slowest rank's per replicate, as the point figure takes the slowest rank's median."""
    per_key = communication.collective_samples(events, launches)
    for table in tables:
        for row in table["rows"]:
            per_rank = per_key.get((table["world_size"], table["backend"], table["op"], row["bytes"], row["inplace"]))
            if not per_rank or row.get("busbw_gbs") is None:
                continue
            name = f"{table['world_size']}/{table['backend']}/{table['op']}/{row['bytes']}/{row['inplace']}"
            reps = [uncertainty.median_replicates({0: values}, seed=_seed(f"{name}/{rank}"))
                    for rank, values in sorted(per_rank.items()) if values]
            slowest = np.max(np.vstack(reps), axis=0)
            scale = row["bytes"] / 1e9 * table["busbw_factor"]
            row["busbw_gbs_ci"] = _from(scale / slowest, row["busbw_gbs"])
