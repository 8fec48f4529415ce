"""Which rank holds the others back, found where it shows.

DDP's gradient allreduce keeps the ranks in step: a rank that computes slower stretches every rank's step
alike, so the ranks' step times (``stats.straggler``) can rarely tell it. Two measurements of the
communication analysis can:
- **compute**: each rank's steps inside ``no_sync()``, where no gradient is allreduced and, after the first
  step, no buffer is re-sent, so no rank waits for another: the straggler's median is above the others';
- **allreduce wait**: each rank's time per step with a gradient bucket's allreduce in flight (the comm
  hook's steps): a bucket completes only when every rank has handed it over, so the ranks wait there for
  the straggler, which itself waits least.
Each names a rank when its figure clears the threshold beyond noise (its 95% interval), on at least
``MIN_STEPS`` steps a rank: compute at least ``STRAGGLER_RATIO`` times the others', or the others waiting for
it at least ``STRAGGLER_RATIO - 1`` of a step; the configuration's straggler is the rank both name
(``name_straggler``). Without the analysis, the step times' own straggler is named when its ratio clears the
same bar (``intervals._straggler``). On a GPU both measurements come from CUDA-event timings (the step's
closing synchronize, the comm hook's events); only their CPU form has run.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping
from typing import Any

from ddptop.analysis import stats, uncertainty

COMPUTE, WAIT, STEP_TIME = "no_sync compute", "allreduce wait", "step time"
# Fewer steps a rank name no rank: a bootstrap interval of a median never leaves the steps' range, so with
# a handful it is little more than that range (the CPU plan's analysis times 5 steps a phase by default).
MIN_STEPS = 5


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _seconds(values: Any) -> list[float]:
    """The finite numbers of a list (a damaged events file may hold anything in a comm event's lists)."""
    if not isinstance(values, (list, tuple)):
        return []
    return [float(v) for v in values
            if isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)]


def _ranks(per_rank: Mapping[int, Any]) -> dict[int, list[float]]:
    found = {rank: _seconds(values) for rank, values in sorted(per_rank.items())}
    return {rank: values for rank, values in found.items() if values}


def _beyond(low: float | None, bar: float, steps: int) -> bool:
    """Whether an interval's low end clears ``bar``, on enough steps to tell (a NaN end clears nothing)."""
    return steps >= MIN_STEPS and low is not None and low == low and low >= bar


def compute_evidence(nosync: Mapping[int, Any], seed: int = 0) -> dict[str, Any] | None:
    """The rank whose ``no_sync()`` steps are slowest, and its median over the other ranks' pooled median
    with the ratio's interval; None with fewer than two ranks measured."""
    ranks = _ranks(nosync)
    if len(ranks) < 2:
        return None
    medians = {rank: stats.median(values) for rank, values in ranks.items()}
    slow = max(medians, key=lambda r: medians[r])
    others = {rank: values for rank, values in ranks.items() if rank != slow}
    ratio = uncertainty.compare(others, {slow: ranks[slow]}, min_effect=0.0, seed=seed).ratio
    steps = min(len(values) for values in ranks.values())
    return {
        "rank": slow,
        "ratio": ratio,
        # the interval's low end never exceeds the figure, so this is the figure beyond noise
        "flagged": _beyond(ratio.low, stats.STRAGGLER_RATIO, steps),
        "steps": steps,
        "too_few_steps": steps < MIN_STEPS,
        "rank_medians_s": {str(rank): value for rank, value in medians.items()},
    }


def wait_evidence(waits: Mapping[int, Any], step_s: float | None,
                  seed: int = 0) -> dict[str, Any] | None:
    """The rank that waits least with a bucket in flight, and how much longer the others wait
    (``others_wait_s``, their pooled median less its median) with its interval; flagged when that is at least
    ``STRAGGLER_RATIO - 1`` of ``step_s`` beyond noise. None with fewer than two ranks measured."""
    ranks = _ranks(waits)
    if len(ranks) < 2:
        return None
    medians = {rank: stats.median(values) for rank, values in ranks.items()}
    least = min(medians, key=lambda r: medians[r])
    others = {rank: values for rank, values in ranks.items() if rank != least}
    reps_others = uncertainty.median_replicates(others, seed=seed)
    reps_least = uncertainty.median_replicates({least: ranks[least]}, seed=seed + 1)
    value = uncertainty.pooled_median(others) - medians[least]
    longer = uncertainty.propagate(lambda o, s: o - s, reps_others, reps_least, value=value)
    bar = (stats.STRAGGLER_RATIO - 1) * step_s if step_s else None
    steps = min(len(values) for values in ranks.values())
    return {
        "rank": least,
        "others_wait_s": longer,
        "step_s": step_s,
        "flagged": bar is not None and _beyond(longer.low, bar, steps),
        "steps": steps,
        "too_few_steps": steps < MIN_STEPS,
        "rank_medians_s": {str(rank): value for rank, value in medians.items()},
    }


def name_straggler(compute: dict[str, Any] | None, wait: dict[str, Any] | None,
                   step_time: dict[str, Any] | None) -> dict[str, Any]:
    """The configuration's ``straggler``: the rank named (None: none) and the evidence that named it, with
    each measurement beside it.

    The two measurements of the analysis are taken apart in time (the no_sync steps, then the hooked ones), so
    a passing load on one rank can slow it in one of them: where both were measured, a rank is named only
    when both name it beyond noise, else the one that did is kept as ``unconfirmed``. Where neither was (no
    analysis), the step times name it when they can."""
    measured = [(evidence, found) for evidence, found in ((COMPUTE, compute), (WAIT, wait)) if found]
    flagged = [(evidence, found) for evidence, found in measured if found.get("flagged")]
    named: dict[str, Any] = {"rank": None, "evidence": None}
    if measured and len(flagged) == len(measured) and len({found["rank"] for _, found in flagged}) == 1:
        named = {"rank": flagged[0][1]["rank"], "evidence": " and ".join(evidence for evidence, _ in flagged)}
    elif flagged:
        named["unconfirmed"] = [{"rank": found["rank"], "evidence": evidence} for evidence, found in flagged]
    elif not measured and step_time and step_time.get("flagged"):
        named = {"rank": step_time["rank"], "evidence": STEP_TIME,
                 "ratio": step_time["ratio"]}
    if named["rank"] is not None and compute and compute.get("flagged"):
        named.update(ratio=compute["ratio"])
    if named["rank"] is not None and wait and wait.get("flagged"):
        named.update(others_wait_s=wait["others_wait_s"])
    return {**named, "compute": compute, "allreduce_wait": wait, "step_time": step_time}


def config_straggler(state: Any, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The straggler of one configuration with two ranks or more, from its session state (``nosync`` steps and
    each rank's ``comm`` event) and its entry (``stats.straggler``, the hooked step time); None otherwise."""
    if entry.get("world_size", 1) < 2 or not entry.get("stats"):
        return None
    name = entry["config_id"]
    compute = compute_evidence(state.nosync, seed=_seed(name + "/straggler/compute"))
    waits = {rank: event.get("bucket_comm_s") for rank, event in state.comm.items()}
    hooked = ((entry.get("communication") or {}).get("buckets") or {}).get("hooked_step_s")
    wait = wait_evidence(waits, hooked, seed=_seed(name + "/straggler/wait"))
    return name_straggler(compute, wait, entry["stats"].get("straggler"))
