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
