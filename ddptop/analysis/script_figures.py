"""A user's script's figures with their 95% intervals, for the summary (``ddptop.report.build``).

A script has no no_sync() steps of ddptop's, no comm hook and no plain-model baseline: what tells its step apart
is the probe's wait for each batch (``script_steps``) and DDP's own timers (``script_sync``). Per configuration (one world size):

- **data wait**: the share of the step the ranks spent waiting for a batch, sum of waits over sum of step
  times (not a median of per-step shares: with loader workers most steps wait nothing and every k-th a lot),
  pooled over the ranks and per rank. Its interval resamples whole launches first (the launch is the unit of
  replication), then blocks of steps within each (``uncertainty.sum_replicates``); with one launch it is
  within that launch only, and says so (``levels``).
- **the rank the others wait for**: DDP's allreduce evens out the backward, so a rank with slow input shows
  as the largest data wait while the other ranks' step less their wait grows (they wait for it in the
  allreduce). Named only when its share exceeds the other ranks' pooled share by ``STRAGGLER_RATIO - 1`` of
  the step beyond noise, on at least ``stragglers.MIN_STEPS`` steps a rank.
- **step less data wait against the smallest N**: the pooled median of each step's time less its wait, with
  the two-level replicates of ``analysis.launches`` (launch offsets pooled over the script's configurations),
  and its ratio to the smallest N's with the change's verdict (``uncertainty.verdict``, DEFAULT_MIN_EFFECT):
  "slower" is a step that grew with N beyond noise, the ranks waiting on each other.

- **gradient synchronisation** (``grad_sync``, ``script_sync.grad_sync``): the micro-batches and synchronisations
  of a measured step, DDP's exposed communication a step and whether it grew against the smallest N's beyond
  its spread: what tells the ranks waiting on each other from compute that grew.

The verdict in words is ``step_bound.script_verdict``'s.
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from typing import Any

from ddptop.analysis import intervals, launches, script_steps, script_sync, stats, stragglers, uncertainty
from ddptop.protocol.modelspec import model_kind
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.records import BOOTSTRAP, OVER_LAUNCHES

WAIT_STRAGGLER_SHARE = stats.STRAGGLER_RATIO - 1  # a rank's data wait this much of the step above the others'


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _method(levels: str) -> str:
    """How a figure of these ``levels`` was bootstrapped: over launches where the launch was the unit."""
    return OVER_LAUNCHES if levels == "launches" else BOOTSTRAP


def _used_positions(entry: Mapping[str, Any]) -> dict[str, dict[int, list[int]]]:
    """launch -> rank -> the indices of its measured steps that the configuration's figures use (a disturbed
    launch measured again is left out, as for the step times)."""
    positions = {rank: list(range(len(values))) for rank, values in (entry.get("samples") or {}).items()}
    split = intervals.used_units_of(positions, [(u.get("launch"), u.get("used")) for u in entry.get("launches") or ()],
                                    entry.get("launch_of_steps"))
    return {name: {rank: [int(i) for i in steps] for rank, steps in by_rank.items()} for name, by_rank in split.items()}


def data_wait(entry: Mapping[str, Any], resamples: int = uncertainty.RESAMPLES) -> dict[str, Any] | None:
    """The data wait's share of the step, pooled and per rank, with intervals, and the rank the others wait
    for (``straggler``); None where no wait was timed."""
    samples = entry.get("samples") or {}
    waits = (entry.get("step_values") or {}).get("data_wait") or {}
    parts: dict[int, list[float]] = {}
    wholes: dict[int, list[float]] = {}
    rounds: dict[int, list[int]] = {}
    for launch_index, (_, by_rank) in enumerate(_used_positions(entry).items()):
        for rank, positions in by_rank.items():
            rank_waits, rank_steps = waits.get(str(rank)) or (), samples.get(str(rank)) or ()
            for i in positions:
                if i < len(rank_waits) and rank_waits[i] is not None and rank_steps[i] > 0:
                    parts.setdefault(rank, []).append(float(rank_waits[i]))
                    wholes.setdefault(rank, []).append(float(rank_steps[i]))
                    rounds.setdefault(rank, []).append(launch_index)
    if not parts:
        return None
    reps = uncertainty.sum_replicates(parts, wholes, rounds, resamples, seed=_seed(f"{entry['config_id']}/data_wait"))
    share = sum(map(sum, parts.values())) / sum(map(sum, wholes.values()))
    per_rank = {}
    for rank in sorted(parts):
        value = sum(parts[rank]) / sum(wholes[rank])
        per_rank[str(rank)] = {"share": uncertainty.estimate(reps.share([rank]), value)}
    counted = len({k for labels in rounds.values() for k in labels})
    steps = min(len(values) for values in parts.values())
    levels = "launches" if counted > 1 else "within launch"
    return {
        "share": uncertainty.estimate(reps.share(), share, method=_method(levels)),
        "levels": levels,
        "launches": counted,
        "steps": steps,
        "per_rank": per_rank,
        "straggler": _wait_straggler(entry, parts, wholes, reps, steps, resamples) if len(parts) > 1 else None,
    }


def _wait_straggler(entry: Mapping[str, Any], parts: Mapping[int, list[float]], wholes: Mapping[int, list[float]],
                    reps: uncertainty.SumReplicates, steps: int, resamples: int) -> dict[str, Any]:
    """The rank with the largest data-wait share against the others' pooled share, and how much longer the
    others' steps less their waits are than its (they wait for it in the allreduce)."""
    shares = {rank: sum(parts[rank]) / sum(wholes[rank]) for rank in parts}
    slow = max(shares, key=lambda r: shares[r])
    others = [r for r in parts if r != slow]
    excess = shares[slow] - sum(sum(parts[r]) for r in others) / sum(sum(wholes[r]) for r in others)
    excess_share = uncertainty.estimate(reps.difference(slow), excess)
    busy = {rank: [s - w for s, w in zip(wholes[rank], parts[rank])] for rank in parts}
    name = str(entry["config_id"])
    reps_others = uncertainty.median_replicates({r: busy[r] for r in others}, resamples=resamples,
                                                seed=_seed(name + "/wait_straggler/others"))
    reps_slow = uncertainty.median_replicates({slow: busy[slow]}, resamples=resamples,
                                              seed=_seed(name + "/wait_straggler/slow"))
    longer = uncertainty.pooled_median({r: busy[r] for r in others}) - uncertainty.pooled_median({slow: busy[slow]})
    return {
        "rank": slow,
        "excess_share": excess_share,
        "others_busy_longer_s": uncertainty.propagate(lambda o, s: o - s, reps_others, reps_slow, value=longer),
        "flagged": bool(steps >= stragglers.MIN_STEPS and excess_share.low is not None
                        and excess_share.low >= WAIT_STRAGGLER_SHARE),
        "steps": steps,
        "too_few_steps": steps < stragglers.MIN_STEPS,
    }


def _busy_units(entry: Mapping[str, Any]) -> dict[str, dict[int, list[float]]]:
    """launch -> rank -> each used step's time less its data wait."""
    busy = script_steps.busy_steps(entry.get("samples") or {}, entry.get("step_values") or {})
    return {name: {rank: [busy[str(rank)][i] for i in positions] for rank, positions in by_rank.items() if positions}
            for name, by_rank in _used_positions(entry).items()}


def step_less_wait(entries: Sequence[dict[str, Any]], resamples: int = uncertainty.RESAMPLES
                   ) -> dict[str, dict[str, Any]]:
    """config id -> the median step less its data wait with its interval, and its ratio to the smallest N of
    the same script, backend and device with the change's verdict; the script entries with steps only."""
    measured = [e for e in entries if model_kind(e["model"]).data_wait and e.get("stats") and e.get("samples")]
    if not measured:
        return {}
    fits = {e["config_id"]: launches.config_launches(e["config_id"], _busy_units(e), resamples, salt="busy/")
            for e in measured}
    variance = launches.pool_variance(list(fits.values()), resamples)
    reps = {config_id: launches.replicates(fit, variance) for config_id, fit in fits.items()}
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for entry in measured:  # a tune's try is compared with the script as written in the tune's table, not here
        groups.setdefault(_script_group(entry), []).append(entry)
    found = {}
    for members in groups.values():
        reference = min(members, key=lambda e: e["world_size"])
        ref_id = reference["config_id"]
        for entry in members:
            config_id = entry["config_id"]
            value = fits[config_id].value
            levels = "launches" if variance.estimated else "within launch"
            figures: dict[str, Any] = {
                "median_s": uncertainty.estimate(reps[config_id], value, method=_method(levels)),
                "reference_world_size": reference["world_size"],
                "levels": levels,
            }
            if config_id != ref_id and fits[ref_id].value > 0:
                # where each rank drew fewer or more examples a step than at the smallest N (strong scaling), the
                # step is compared per example drawn: a rank with half the batch should take half the time
                scale = _per_example_scale(reference, entry)
                ratio = uncertainty.step_ratio(reps[ref_id], reps[config_id] * scale,
                                               value * scale / fits[ref_id].value)
                if ratio.ci is not None:
                    ratio.method = _method(levels)
                figures.update(ratio=ratio, min_effect=DEFAULT_MIN_EFFECT,
                               change=uncertainty.verdict(ratio, DEFAULT_MIN_EFFECT), per_example=scale != 1.0)
            found[config_id] = figures
    return found


def _script_group(entry: Mapping[str, Any]) -> tuple[Any, ...]:
    """The configurations whose world sizes are compared with the smallest: one script, backend and device, and
    one try of ``ddptop tune`` (its tries are compared with the script as written at one N, in its own table)."""
    return entry["model"], entry.get("backend"), entry.get("device"), entry.get("variant") or "default"


def _per_example_scale(reference: Mapping[str, Any], entry: Mapping[str, Any]) -> float:
    """The reference's examples per rank per step over the entry's, where both were counted and differ; else 1."""
    ref_batch, batch = reference.get("batch_size") or 0, entry.get("batch_size") or 0
    if reference.get("global_batch") and entry.get("global_batch") and ref_batch > 0 and batch > 0:
        return ref_batch / batch
    return 1.0


def add_script_figures(entries: Sequence[dict[str, Any]], resamples: int = uncertainty.RESAMPLES,
                       threads: Mapping[int, int] | None = None) -> None:
    """Each script entry's ``data_wait``, ``step_less_wait`` and ``grad_sync`` (how its gradients were
    synchronised, against the smallest N's: ``script_sync.grad_sync``; ``threads``: each rank's threads per
    world size, the plan's); its ``straggler`` named by the data wait where that names one (a script has no
    no_sync steps nor comm hook to name it otherwise)."""
    less = step_less_wait(entries, resamples)
    for entry in entries:
        if not model_kind(entry["model"]).data_wait or not entry.get("stats"):
            continue
        entry["data_wait"] = data_wait(entry, resamples)
        entry["step_less_wait"] = less.get(entry["config_id"])
        found = (entry["data_wait"] or {}).get("straggler")
        if found and found["flagged"]:
            entry["straggler"] = {**(entry.get("straggler") or {}), "rank": found["rank"], "evidence": "data wait"}
    references: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for entry in entries:
        if model_kind(entry["model"]).data_wait and entry.get("stats"):
            references.setdefault(_script_group(entry), []).append(entry)
    for members in references.values():
        reference = min(members, key=lambda e: e["world_size"])
        for entry in members:
            ref_size = (entry.get("step_less_wait") or {}).get("reference_world_size")
            sync = script_sync.grad_sync(entry, reference if ref_size == reference["world_size"] else None, threads)
            if sync is not None:
                entry["grad_sync"] = sync
