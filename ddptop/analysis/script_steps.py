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
    medians = [statistics.median(values) for values in counted.values()]
    return ObservedBatch(round(statistics.median(medians)), round(sum(medians)), len(counted),
                         any(min(values) != max(values) for values in counted.values()))


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


# a configuration whose ranks wait for batches this share of the step or more is held back by its input pipeline
# (its loader's workers, transforms or storage) rather than by its model or its communication
DATA_BOUND_SHARE = 0.2
STARVED_SHARE = 0.1  # a rank's data-wait share at least this, and
STARVED_RATIO = 2.0  # at least this many times the other ranks' median share: that rank waits on its data alone


def mean_share(shares: Mapping[Any, float]) -> float | None:
    """A configuration's data-wait share: its ranks' shares' mean (None where no rank's wait was timed)."""
    return sum(shares.values()) / len(shares) if shares else None


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
        varies = any(len(counts) > 1 for counts in self._counts["examples"].values())
        return ObservedBatch(round(statistics.median(medians.values())), round(sum(medians.values())), len(medians),
                             varies)

    def tokens_per_step(self) -> int | None:
        """Tokens a step over every rank whose tokens were given (explicit mode's ``tokens=``), at each rank's
        median; None where none were."""
        medians = self._medians("tokens")
        return round(sum(medians.values())) if medians else None

    def data_wait_shares(self) -> dict[Any, float]:
        return {rank: wait / total for rank, (wait, total) in self._waits.items() if total > 0}
