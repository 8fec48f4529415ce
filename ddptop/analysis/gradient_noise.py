"""The gradient noise scale of a configuration as the summary holds it, and what it means for its scaling table:
declared here without numpy (the summary's schema names it, and the live view loads the schema before any
statistics), with what the live view computes of it; the estimate and its interval are ``noise_scale``'s.

The ranks send, per synchronisation of their measured DDP steps, the squared norm of their local gradient
before the allreduce and of the averaged one after it, and the examples behind the local one
(``bench_kernels.gradient_norms``). Ranks of unequal batches b_i average local means into an unweighted mean,
whose variance is tr(Sigma) mean(1/b_i) / N: the batches the estimator takes are then 1 / mean(1/b_i) before
and N / mean(1/b_i) after (the plain b and N b where the batches are equal).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from ddptop import units
from ddptop.records import BOOTSTRAP, MODEL, Estimate, Record

MIN_SYNCS = 8  # synchronisations below which no noise scale is estimated: too few to bootstrap
# How B_noise's interval was obtained: the synchronisations, not the step times, are what is resampled.
SYNC_BOOTSTRAP = "circular block bootstrap of the synchronisations"
B_NOISE_METHOD = SYNC_BOOTSTRAP + ", tr(Σ) clamped at 0 (the point and each replicate alike)"
TIME_TO_LOSS_METHOD = f"{MODEL}: B_noise's and the speedup's replicates through the time-to-loss formula"
ASSUMPTIONS = (
    "A model (McCandlish et al. 2018): steps to a given loss go as 1 + B_noise/B with the learning rate retuned "
    "for each global batch B; B_noise is the simple noise scale (curvature ignored), measured over this window "
    "of training (it grows as the loss falls)")
SYNTHETIC = "on ddptop's synthetic batches it is a property of random labels, not of your data"


@dataclass(kw_only=True)
class GradientNoise(Record):
    """B_noise = tr(Sigma) / |G|^2 in examples, with the two means it is the ratio of, over ``syncs``
    synchronisations of a local batch of ``batch_local`` examples averaged into a global one of
    ``batch_global``. Not ``resolved``: |G|^2's interval reaches 0, so B_noise has no upper bound and
    ``b_noise`` carries no interval (``at_least`` is its interval's lower end)."""
    b_noise: Estimate | None = None
    resolved: bool = False
    at_least: float | None = None
    true_sq: Estimate | None = None  # |G|^2
    trace: Estimate | None = None  # tr(Sigma), per example
    syncs: int = 0
    batch_local: float | None = None
    batch_global: float | None = None
    over: str = ""  # which steps were synchronised: the probe's hooked steps, or the script's measured ones
    synthetic: bool = False  # ddptop's random batches: the figure is one of random labels
    # B_noise over the first and the second half of the synchronisations (resolved halves only), and whether it
    # moved between them beyond the noise (ROSE, FELL or STEADY; None: halves too short or not resolved)
    first_half: Estimate | None = None
    second_half: Estimate | None = None
    drift: str | None = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"first_half", "second_half", "drift"})

    _flat_method: ClassVar[str] = SYNC_BOOTSTRAP

    def words(self) -> str:
        """"about 604 examples (95%: 447-3550)", or what can be said where it is not resolved."""
        if self.b_noise is None:
            return (f"not estimated from {self.syncs} synchronisations of {self.over}, fewer than the {MIN_SYNCS} "
                    "it needs")
        if not self.resolved:
            bound = (f"; at least {units.significant(self.at_least)} examples"
                     if self.at_least is not None and math.isfinite(self.at_least) and self.at_least > 0 else "")
            return f"not resolved (|G|² not told from 0{bound})"
        found = f"about {units.estimate(self.b_noise, units.significant)} examples"
        ci = self.b_noise.ci
        if ci and ci[0] > 0 and ci[1] / ci[0] > TOO_WIDE:
            found += " (an interval this wide says little: more synchronisations narrow it)"
        return found


ROSE, FELL, STEADY = "rose", "fell", "no change told from the noise"  # GradientNoise.drift: the halves' intervals
TOO_WIDE = 10.0  # an interval whose ends are further apart than this factor cannot place B_noise against a batch


def synchronisations(per_rank: Sequence[tuple[Sequence[Any], Sequence[Any], Sequence[Any]]], world_size: int
                     ) -> tuple[list[float], list[float], list[float], list[float]] | None:
    """Per synchronisation, from each rank's (local squared norms, averaged squared norms, local batches) in the
    same order on every rank: the mean local squared norm, the averaged gradient's squared norm, and the
    batches before and after (see the module). None unless every one of the ``world_size`` ranks (two or
    more) sent its lists: the batch after the allreduce is all of theirs. Ranks lock-step, so a rank cut short
    has the others' first synchronisations: the lists are taken up to the shortest. A synchronisation a rank
    has no values for, or whose norms are not finite (an fp16 step skipped for overflow), is left out."""
    if world_size < 2 or len(per_rank) != world_size:
        return None
    count = min(len(values) for lists in per_rank for values in lists)
    small, big, b_small, b_big = [], [], [], []
    for i in range(count):
        found = [(local[i], averaged[i], batch[i]) for local, averaged, batch in per_rank]
        if any(v is None for values in found for v in values):
            continue
        local_sq = [float(v[0]) for v in found]
        averaged_sq, batches = float(found[0][1]), [float(v[2]) for v in found]
        if not all(math.isfinite(x) for x in local_sq + [averaged_sq]) or min(batches) <= 0:
            continue
        inverse = sum(1 / b for b in batches) / world_size
        small.append(sum(local_sq) / world_size)
        big.append(averaged_sq)
        b_small.append(1 / inverse)
        b_big.append(world_size / inverse)
    return small, big, b_small, b_big


def measured_pairs(comm_events: Mapping[int, Mapping[str, Any]], step_values: Mapping[str, Mapping[Any, Sequence[Any]]],
                   steps: Sequence[int] | None = None) -> list[tuple[Sequence[Any], Sequence[Any], Sequence[Any]]]:
    """Each rank's norms and batches, in rank order: the communication probe's (its comm event: a kernel, a
    user's model; one launch's), else those streamed beside a script's measured steps (its examples the local
    batch), of the measured steps numbered ``steps`` alone where given (one launch's)."""
    probed = [(e["grad_sq_local"], e["grad_sq_averaged"], e["grad_batch_local"])
              for _, e in sorted(comm_events.items()) if e.get("grad_sq_local") and e.get("grad_batch_local")
              and e.get("grad_sq_averaged")]
    if probed:
        return probed
    local, averaged = step_values.get("grad_sq_local") or {}, step_values.get("grad_sq_averaged") or {}
    examples = step_values.get("examples") or {}

    def kept(values: Sequence[Any]) -> Sequence[Any]:
        return values if steps is None else [values[i] if i < len(values) else None for i in steps]

    return [(kept(local[r]), kept(averaged.get(r) or []), kept(examples.get(r) or []))
            for r in sorted(local, key=int)]


def per_step(small_sq: Any, big_sq: Any, b_small: Any, b_big: Any) -> tuple[Any, Any]:
    """Each synchronisation's unbiased estimates of tr(Sigma) and |G|^2 (``noise_scale``'s module says how):
    numbers, or numpy arrays of the same length."""
    trace = (small_sq - big_sq) / (1 / b_small - 1 / b_big)
    true_sq = (b_big * big_sq - b_small * small_sq) / (b_big - b_small)
    return trace, true_sq


def so_far(comm_events: Mapping[int, Mapping[str, Any]], step_values: Mapping[str, Mapping[Any, Sequence[Any]]],
           world_size: int) -> float | None:
    """B_noise as the ratio of the two means over the synchronisations in so far, without its interval (the
    live view's; numpy-free), from ``MIN_SYNCS`` on; None before, or where neither mean is above 0."""
    found = synchronisations(measured_pairs(comm_events, step_values), world_size)
    if found is None or len(found[0]) < MIN_SYNCS:
        return None
    pairs = [per_step(*sync) for sync in zip(*found)]
    traces, true_sq = [trace for trace, _ in pairs], [true for _, true in pairs]
    mean_true, mean_trace = sum(true_sq) / len(true_sq), sum(traces) / len(traces)
    return mean_trace / mean_true if mean_true > 0 and mean_trace > 0 else None


def over_words(kind: Any) -> str:
    """Which synchronisations the noise scale was measured over, for a configuration of ``kind``
    (``modelspec.ModelKind``)."""
    return ("the communication probe's hooked steps (--comm-iters; a fresh batch each)" if kind.own_batch
            else "the script's measured steps")


def record(noise: Any, over: str, synthetic: bool, halves: tuple[Any, Any] | None = None) -> GradientNoise:
    """The summary's record of a ``noise_scale.NoiseScale``, and of the estimates over the halves of its
    synchronisations (``noise_scale.halves``) where there are both."""
    found = GradientNoise(b_noise=_b_noise(noise), resolved=bool(noise.resolved), true_sq=noise.true_sq.estimate(SYNC_BOOTSTRAP),
                          trace=noise.trace.estimate(SYNC_BOOTSTRAP), syncs=noise.syncs, batch_local=noise.batch_small,
                          batch_global=noise.batch_big, over=over, synthetic=synthetic)
    interval = noise.b_noise_interval()
    if not found.resolved and interval is not None and math.isfinite(interval[0]) and interval[0] > 0:
        found.at_least = float(interval[0])
    if halves is not None and all(half.resolved for half in halves):
        found.first_half, found.second_half = (_b_noise(half) for half in halves)
        first, second = found.first_half.ci, found.second_half.ci
        found.drift = (STEADY if not first or not second else ROSE if first[1] < second[0]
                       else FELL if second[1] < first[0] else STEADY)
    return found


def _b_noise(noise: Any) -> Estimate:
    """B_noise's record: with its interval where resolved (else it has no upper bound: no interval)."""
    resolved = bool(noise.resolved)
    return Estimate(value=float(noise.b_noise.value), ci=noise.b_noise_interval() if resolved else None,
                    method=B_NOISE_METHOD if resolved else None)


__all__ = ["ASSUMPTIONS", "B_NOISE_METHOD", "BOOTSTRAP", "FELL", "MIN_SYNCS", "ROSE", "STEADY", "SYNC_BOOTSTRAP", "SYNTHETIC", "TIME_TO_LOSS_METHOD", "GradientNoise",
           "TOO_WIDE", "measured_pairs", "over_words", "per_step", "record", "so_far", "synchronisations"]
