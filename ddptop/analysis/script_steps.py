"""What a user's script's measured steps say beside their times (``bench_kernels.script_probe``): the examples
each rank drew per step, its wait for batches, and the batch as the script ran it.

``step_values`` is a configuration's ``name -> rank -> one value per measured step`` (``data_wait``,
``examples``, ``tokens``; None where the probe did not know it), parallel to ``samples`` (rank -> step seconds):
``ConfigState.step_values`` live, a summary entry's ``step_values`` (rank keys as text) once saved. Standard
library only: the live view and the report read the same figures.
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptop.analysis import script_sync


def known(values: Sequence[Any] | None) -> list[float]:
    """The values the probe knew (None left out)."""
    return [v for v in values or () if v is not None]


@dataclass(frozen=True)
class ObservedBatch:
    """The batch as the script drew it: each rank's median examples a step, and their sum over the ranks (what
    the tables' examples/s divide by the step time, as a kernel's global batch)."""

    per_rank: int
    global_batch: int
    ranks: int  # ranks whose examples were counted
    varies: bool  # a rank's examples changed from step to step (a last partial batch, batches of varying size)


def observed_batch(step_values: Mapping[str, Mapping[Any, Sequence[Any]]]) -> ObservedBatch | None:
    """None where no rank's examples were counted (explicit mode without ``examples=``, batches without a
    tensor)."""
    counted = {rank: known(values) for rank, values in (step_values.get("examples") or {}).items()}
    counted = {rank: values for rank, values in counted.items() if values}
    if not counted:
        return None
    return _batch_of([statistics.median(values) for values in counted.values()],
                     any(min(values) != max(values) for values in counted.values()))


def _batch_of(medians: Sequence[float], varies: bool) -> ObservedBatch:
    """The batch from each counted rank's median examples a step: the median rank's, and their sum."""
    return ObservedBatch(round(statistics.median(medians)), round(sum(medians)), len(medians), varies)


def tokens_per_example(step_values: Mapping[str, Mapping[Any, Sequence[Any]]]) -> float | None:
    """Tokens per example over the steps where the script gave both (``examples=``/``tokens=``, or counted
    examples beside its tokens); None where it gave no tokens."""
    examples, tokens = step_values.get("examples") or {}, step_values.get("tokens") or {}
    pairs = [(e, t) for rank in tokens for e, t in zip(examples.get(rank) or (), tokens[rank] or ())
             if e is not None and t is not None]
    counted = sum(e for e, _ in pairs)
    return sum(t for _, t in pairs) / counted if counted > 0 else None


def data_wait_share(samples: Mapping[Any, Sequence[float]], step_values: Mapping[str, Mapping[Any, Sequence[Any]]]
                    ) -> dict[Any, float]:
    """rank -> the share of its measured step time it spent waiting for batches, over the steps whose wait was
    timed (a rank whose waits were never timed is left out)."""
    shares = {}
    for rank, waits in (step_values.get("data_wait") or {}).items():
        steps = samples.get(rank) or ()
        pairs = [(wait, sec) for wait, sec in zip(waits, steps) if wait is not None]
        total = sum(sec for _, sec in pairs)
        if pairs and total > 0:
            shares[rank] = sum(wait for wait, _ in pairs) / total
    return shares


# -- what the report says of a script ----------------------------------------------------------------------

WEAK, STRONG, CHANGED, UNKNOWN, SINGLE = "weak", "strong", "changed", "unknown", "single"


@dataclass(frozen=True)
class ObservedScaling:
    """Weak or strong scaling as the script's batches showed it, not as the plan said (the script chooses)."""

    kind: str  # WEAK (per-rank batch the same at every N), STRONG (global batch the same), CHANGED, UNKNOWN, SINGLE
    text: str  # the batch in words, for a scaling table's title


def observed_scaling(batches: Mapping[int, tuple[int, int] | None]) -> ObservedScaling:
    """world size -> (examples per rank per step, global batch), None where the examples were not counted."""
    sizes = sorted(batches)
    unknown = [n for n in sizes if not batches[n]]
    if unknown:
        where = ", ".join(f"N={n}" for n in unknown)
        return ObservedScaling(UNKNOWN, f"examples not counted ({where}): batch and ex/s unknown")
    per_rank = {n: batches[n][0] for n in sizes}  # type: ignore[index]
    total = {n: batches[n][1] for n in sizes}  # type: ignore[index]
    listed = ", ".join(f"{per_rank[n]} at N={n}" for n in sizes)
    if len(sizes) == 1:
        return ObservedScaling(SINGLE, f"{per_rank[sizes[0]]} examples per rank per step (one world size)")
    if len(set(per_rank.values())) == 1:
        return ObservedScaling(WEAK, f"{per_rank[sizes[0]]} examples per rank per step at every N "
                                     "(weak scaling, as observed: the global batch grows with N)")
    if len(set(total.values())) == 1:
        return ObservedScaling(STRONG, f"global batch {total[sizes[0]]} at every N (strong scaling, as observed: "
                                       f"examples per rank per step {listed})")
    return ObservedScaling(CHANGED, f"examples per rank per step changed with N ({listed}): neither weak nor "
                                    "strong scaling; speedup compares examples/s")


def data_parallel_problem(seen: Mapping[str, Any] | None) -> str | None:
    """Why a script's ranks do not train one model together, from what the probe saw (``config_end.script``);
    None when they do, when the probe saw no step to tell, or for a launch of one rank (without a process group,
    the serial baseline; with one, its only rank)."""
    if not seen or seen.get("process_group") is None or seen.get("launch_world_size") == 1:
        return None
    if not seen.get("process_group"):
        return "not data-parallel: each rank trains alone (the script made no process group)"
    group, launch = seen.get("group_world_size"), seen.get("launch_world_size")
    if group is not None and launch is not None and group != launch:
        return (f"not data-parallel: each rank trains alone (its process group has {group} "
                f"rank{'s' if group != 1 else ''}, the launch {launch})")
    return script_sync.alone_reason(seen)


def seen_over_launches(seen: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What the probe saw of a script over every launch of one configuration (each launch's
    ``config_end.script`` of one rank, in the order they ran), so that a count is the configuration's and not
    its last launch's: ``optimizer_steps`` summed over the launches (None if a launch did not count them) and,
    with more than one, listed per launch (``optimizer_steps_per_launch``); ``spawned`` the most any launch
    started; the process group of the first launch whose ranks each trained alone, where one did; the models
    wrapped for data parallelism with each DDP model's measured steps over every launch and its timers per
    launch (``script_sync.wrappers_over_launches``), the script's collectives summed; the rest as the last
    launch saw it. None without a launch that saw the script."""
    if not seen:
        return None
    combined = dict(seen[-1])
    wrappers = script_sync.wrappers_over_launches(seen)
    if wrappers is not None:  # each DDP model's measured steps over every launch, its timers per launch
        combined["wrappers"] = wrappers
    if len(seen) == 1:
        return combined
    collectives = [s.get("collectives") for s in seen if isinstance(s.get("collectives"), int)]
    if collectives:
        combined["collectives"] = sum(collectives)
    if any(s.get("wrappers_incomplete") for s in seen):
        combined["wrappers_incomplete"] = True
    for key in ("tried_on", "loader_tried_on"):  # ddptop tune's try: the calls given it over every launch
        tried = [s.get(key) for s in seen if isinstance(s.get(key), int)]
        if tried:
            combined[key] = sum(tried)
    steps = [s.get("optimizer_steps") for s in seen]
    combined["optimizer_steps"] = sum(steps) if all(isinstance(v, int) for v in steps) else None
    combined["optimizer_steps_per_launch"] = steps
    spawned = [s["spawned"] for s in seen if isinstance(s.get("spawned"), int)]
    combined["spawned"] = max(spawned) if spawned else combined.get("spawned")
    alone = next((s for s in seen if data_parallel_problem(s)), None)
    if alone is not None:
        combined.update({key: alone.get(key) for key in ("process_group", "group_world_size", "launch_world_size")})
    return combined


def optimizer_steps_words(seen: Mapping[str, Any]) -> str:
    """'60 optimizer steps seen over 2 launches (30, 30)'; one launch's: '30 optimizer steps seen'."""
    total = seen.get("optimizer_steps")
    per_launch = seen.get("optimizer_steps_per_launch") or []
    words = f"{total if total is not None else 'an unknown number of'} optimizer steps seen"
    if len(per_launch) > 1:
        words += (f" over {len(per_launch)} launches ("
                  + ", ".join("not counted" if v is None else str(v) for v in per_launch) + ")")
    return words


def backend_words(launch_backend: str, group_backend: str | None) -> str:
    """The backend a script's ranks communicate over: its own process group's (``init_process_group("nccl")``)
    where the probe saw one, the launch's beside it where they differ ("nccl (the script's; launched for
    gloo)"); the launch's alone where they agree or the script made no group."""
    own = own_backend(launch_backend, group_backend)
    return f"{own} (the script's; launched for {launch_backend})" if own else launch_backend


def own_backend(launch_backend: str, group_backend: str | None) -> str | None:
    """The backend of the script's own process group where it is not the launch's; None where it is, or where
    the script made no group. A group made with no backend, recorded as torch says it ("undefined") by a probe
    before it named the device's, uses torch's default for each device, which the launch's is (gloo on the CPU,
    nccl on GPUs)."""
    return None if not group_backend or group_backend in (launch_backend, "undefined") else group_backend


def group_backend(seen: Mapping[str, Any] | None) -> str | None:
    """The backend of the script's own process group as the probe saw it at its first step; None without."""
    found = (seen or {}).get("group_backend")
    return found if isinstance(found, str) and found else None


SPAWNED = "it trains in processes it started itself (mp.spawn): the probe sees none of their steps"


def ended_by_words(ended_by: str | None) -> str | None:
    """Who ended the script, in words (``config_end.ended_by``)."""
    if ended_by == "ddptop":
        return "ended by ddptop after the planned steps"
    if ended_by == "script":
        return "ended by the script itself"
    return None


def busy_steps(samples: Mapping[Any, Sequence[float]], step_values: Mapping[str, Mapping[Any, Sequence[Any]]]
               ) -> dict[Any, list[float]]:
    """rank -> each measured step's time less its wait for data (the step itself where the wait was not
    timed): what grows with N when a rank waits for the others in DDP's allreduce."""
    waits = step_values.get("data_wait") or {}
    found = {}
    for rank, steps in samples.items():
        rank_waits = list(waits.get(rank) or ())
        rank_waits += [None] * (len(steps) - len(rank_waits))
        found[rank] = [max(0.0, sec - (wait or 0.0)) for sec, wait in zip(steps, rank_waits)]
    return found


def loader_advice(seen: Mapping[str, Any] | None) -> str:
    """What to try for a step that waits for data, by what the probe saw of the script's DataLoaders."""
    loaders = [loader for loader in (seen or {}).get("loaders") or () if isinstance(loader, Mapping)]
    if not loaders:
        return ("try DataLoader(num_workers=...) to make batches in parallel, pin_memory=True on a GPU, "
                "persistent_workers=True, a larger prefetch_factor")
    # the loader the steps drew most batches from (the training loader), where the probe counted them
    loader = max(loaders, key=lambda l: (l.get("batches") or 0, l.get("num_workers") or 0))
    workers = loader.get("num_workers") or 0
    tries = []
    if workers == 0:
        tries.append("num_workers > 0 (its DataLoader makes every batch in the training process, num_workers=0)")
    elif workers == 1:
        tries.append("more than its single worker (num_workers=1)")
    else:
        tries.append(f"more workers than its {workers}, if the cores allow")
    if workers and not loader.get("persistent_workers"):
        tries.append("persistent_workers=True (its workers start again every epoch)")
    if workers and (loader.get("prefetch_factor") or 2) <= 2:
        tries.append(f"a larger prefetch_factor than {loader.get('prefetch_factor') or 2}")
    if not loader.get("pin_memory"):
        tries.append("pin_memory=True when training on a GPU")
    return ("try " + ", ".join(tries) + "; a cheaper per-example transform helps at any setting (ddptop tune -- "
            "SCRIPT measures these settings on the script)")


# a configuration whose ranks wait for batches more than this share of the step is held back by its input pipeline
# (its loader's workers, transforms or storage) rather than by its model or its communication: the report's verdict
# (``step_bound``) when the share's interval lies above it, the live view's mark when the share itself does
INPUT_BOUND_SHARE = 0.10
STARVED_SHARE = INPUT_BOUND_SHARE  # a rank's data-wait share at least this, and
STARVED_RATIO = 2.0  # at least this many times the other ranks' median share: that rank waits on its data alone


def starved_rank(shares: Mapping[Any, float]) -> Any | None:
    """The rank that waits for its batches far longer than the others (``STARVED_SHARE``, ``STARVED_RATIO``), so
    the others wait for it at their next collective; None with fewer than two ranks, or none standing out."""
    if len(shares) < 2:
        return None
    rank = max(shares, key=lambda r: shares[r])
    others = statistics.median(v for r, v in shares.items() if r != rank)
    return rank if shares[rank] >= STARVED_SHARE and shares[rank] >= STARVED_RATIO * others else None


def _counted_median(counts: Mapping[float, int]) -> float:
    """The median of values given as value -> how many times it was seen (as ``statistics.median``)."""
    total = sum(counts.values())
    low_at, high_at = (total - 1) // 2, total // 2
    low = high = None
    seen = 0
    for value in sorted(counts):
        seen += counts[value]
        if low is None and seen > low_at:
            low = value
        if seen > high_at:
            high = value
            break
    assert low is not None and high is not None
    return (low + high) / 2


class LiveStepValues:
    """A script's figures so far, caught up on the steps new since the last look (``catch_up``), so that a live
    view looking several times a second never goes over every step again: each rank's examples and tokens a
    step kept as value -> count (a batch takes few sizes), its timed waits and their steps' seconds as sums.
    What it gives equals ``observed_batch`` and ``data_wait_share`` of the same steps."""

    def __init__(self) -> None:
        self._counts: dict[str, dict[Any, dict[float, int]]] = {"examples": {}, "tokens": {}}
        self._waits: dict[Any, list[float]] = {}  # rank -> [wait seconds, step seconds] over the timed steps
        self._seen: dict[tuple[str, Any], int] = {}  # (list name, rank) -> steps already taken in

    def catch_up(self, samples: Mapping[Any, Sequence[float]],
                 step_values: Mapping[str, Mapping[Any, Sequence[Any]]]) -> None:
        """Take in the values appended since the last call (the lists only ever grow)."""
        for name, per_rank in self._counts.items():
            for rank, values in (step_values.get(name) or {}).items():
                start = self._seen.get((name, rank), 0)
                if start < len(values):
                    counts = per_rank.setdefault(rank, {})
                    for value in values[start:]:
                        if value is not None:
                            counts[value] = counts.get(value, 0) + 1
                    self._seen[(name, rank)] = len(values)
        for rank, waits in (step_values.get("data_wait") or {}).items():
            steps = samples.get(rank) or ()
            start, end = self._seen.get(("data_wait", rank), 0), min(len(waits), len(steps))
            if start < end:
                sums = self._waits.setdefault(rank, [0.0, 0.0])
                for wait, sec in zip(waits[start:end], steps[start:end]):
                    if wait is not None:
                        sums[0] += wait
                        sums[1] += sec
                self._seen[("data_wait", rank)] = end

    def _medians(self, name: str) -> dict[Any, float]:
        return {rank: _counted_median(counts) for rank, counts in self._counts[name].items() if counts}

    def observed_batch(self) -> ObservedBatch | None:
        medians = self._medians("examples")
        if not medians:
            return None
        return _batch_of(list(medians.values()), any(len(counts) > 1 for counts in self._counts["examples"].values()))

    def tokens_per_step(self) -> int | None:
        """Tokens a step over every rank whose tokens were given (explicit mode's ``tokens=``), at each rank's
        median; None where none were."""
        medians = self._medians("tokens")
        return round(sum(medians.values())) if medians else None

    def data_wait_shares(self) -> dict[Any, float]:
        return {rank: wait / total for rank, (wait, total) in self._waits.items() if total > 0}

    def data_wait_share(self) -> float | None:
        """The configuration's share: every rank's timed waits over their steps' seconds, pooled as the report's
        (``script_figures``); None where no wait was timed."""
        total = sum(t for _, t in self._waits.values())
        return sum(w for w, _ in self._waits.values()) / total if total > 0 else None
