"""The gradient noise scale of a configuration as the summary holds it, and what it means for its scaling table:
declared here without numpy (the summary's schema names it, and the live view loads the schema before any
statistics); the estimate itself is ``noise_scale``'s.

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

# How B_noise's interval was obtained: the synchronisations, not the step times, are what is resampled.
SYNC_BOOTSTRAP = "circular block bootstrap of the synchronisations"
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

    _flat_method: ClassVar[str] = SYNC_BOOTSTRAP

    def words(self) -> str:
        """"about 604 examples (95%: 447-3550)", or what can be said where it is not resolved."""
        if self.b_noise is None:
            return "not measured"
        if not self.resolved:
            bound = (f"; at least {units.significant(self.at_least)} examples"
                     if self.at_least is not None and math.isfinite(self.at_least) and self.at_least > 0 else "")
            return f"not resolved (|G|² not told from 0 over {self.syncs} synchronisations{bound})"
        found = f"about {units.estimate(self.b_noise, units.significant)} examples"
        ci = self.b_noise.ci
        if ci and ci[0] > 0 and ci[1] / ci[0] > TOO_WIDE:
            found += " (an interval this wide says little: more synchronisations narrow it)"
        return found


TOO_WIDE = 10.0  # an interval whose ends are further apart than this factor cannot place B_noise against a batch


def synchronisations(comm_events: Mapping[int, Mapping[str, Any]]
                     ) -> tuple[list[float], list[float], list[float], list[float]] | None:
    """Per synchronisation, over the ranks' comm events: the mean local squared norm, the averaged gradient's
    squared norm, and the batches before and after (see the module). None where no rank sent norms, or the
    ranks sent different counts (a rank cut short: the synchronisations no longer line up). A synchronisation
    with a norm that is not finite (an fp16 step skipped for overflow) is left out."""
    per_rank = [event for _, event in sorted(comm_events.items())
                if event.get("grad_sq_local") and event.get("grad_sq_averaged") and event.get("grad_batch_local")]
    if len(per_rank) < 2:
        return None
    count = len(per_rank[0]["grad_sq_local"])
    if any(len(e["grad_sq_local"]) != count or len(e["grad_sq_averaged"]) != count
           or len(e["grad_batch_local"]) != count for e in per_rank):
        return None
    small, big, b_small, b_big = [], [], [], []
    ranks = len(per_rank)
    for i in range(count):
        local = [float(e["grad_sq_local"][i]) for e in per_rank]
        averaged = float(per_rank[0]["grad_sq_averaged"][i])
        batches = [float(e["grad_batch_local"][i]) for e in per_rank]
        if not all(math.isfinite(x) for x in local + [averaged]) or min(batches) <= 0:
            continue
        inverse = sum(1 / b for b in batches) / ranks
        small.append(sum(local) / ranks)
        big.append(averaged)
        b_small.append(1 / inverse)
        b_big.append(ranks / inverse)
    return small, big, b_small, b_big


def config_noise_scale(comm_events: Mapping[int, Mapping[str, Any]]) -> Any:
    """The configuration's ``noise_scale.NoiseScale``, or None where it has too few synchronisations."""
    found = synchronisations(comm_events)
    if found is None:
        return None
    from ddptop.analysis import noise_scale  # numpy: only where a summary is built

    return noise_scale.estimate(*found)


def over_words(kind: Any) -> str:
    """Which synchronisations the noise scale was measured over, for a configuration of ``kind``
    (``modelspec.ModelKind``)."""
    return ("the communication probe's hooked steps, a fresh batch each" if kind.own_batch
            else "the script's measured steps")


def record(noise: Any, over: str, synthetic: bool) -> GradientNoise:
    """The summary's record of a ``noise_scale.NoiseScale``."""
    interval = noise.b_noise.interval()
    resolved = bool(noise.resolved)
    return GradientNoise(
        b_noise=Estimate(value=float(noise.b_noise.value), ci=interval if resolved else None,
                         method=SYNC_BOOTSTRAP if resolved else None),
        resolved=resolved,
        at_least=None if resolved or interval is None or not math.isfinite(interval[0]) else float(interval[0]),
        true_sq=noise.true_sq.estimate(SYNC_BOOTSTRAP), trace=noise.trace.estimate(SYNC_BOOTSTRAP),
        syncs=noise.syncs, batch_local=noise.batch_small, batch_global=noise.batch_big, over=over,
        synthetic=synthetic)


def time_to_loss_rows(rows: Sequence[dict[str, Any]], speedups: Mapping[int, Any],
                      noise_by_size: Mapping[int, Any], batch_by_size: Mapping[int, float]) -> None:
    """Each row's speedup in time to the same loss against the table's reference (``time_to_loss_speedup``),
    from that world size's own noise scale where it is resolved, what one of its examples is worth against
    one of the reference's (``example_worth``) and both global batches. ``speedups`` are the throughput speedups
    (``stats.ScalingRows``): against the reference counted as its N ranks, as the table's speedup column."""
    from ddptop.analysis import noise_scale

    if not rows:
        return
    reference = rows[0]["world_size"]
    batch_ref = batch_by_size.get(reference) or 0
    for row in rows:
        n = row["world_size"]
        noise, speedup, batch_n = noise_by_size.get(n), speedups.get(n), batch_by_size.get(n) or 0
        if n == reference or noise is None or not noise.resolved or speedup is None or batch_ref <= 0 or batch_n <= 0:
            continue
        # the throughput speedup is N_ref (B_N / t_N) / (B_ref / t_ref): the step ratio it holds is speedup x B_ref / B_N
        figure = noise_scale.time_to_loss_speedup(_scaled(speedup, batch_ref / batch_n), noise.b_noise,
                                                  batch_ref, batch_n)
        row["time_to_loss_speedup"] = figure.estimate(TIME_TO_LOSS_METHOD).to_json()
        row["example_worth"] = example_worth(noise.b_noise.value, batch_ref, batch_n)
        row["global_batch"], rows[0]["global_batch"] = round(batch_n), round(batch_ref)


def example_worth(b_noise: float, batch_ref: float, batch_n: float) -> float:
    """What one example at the global batch ``batch_n`` is worth against one at ``batch_ref`` in progress to the
    same loss: E_min (1 + B / B_noise) examples are needed at batch B (without numpy: the report says it)."""
    return (1 + batch_ref / b_noise) / (1 + batch_n / b_noise)


def _scaled(figure: Any, factor: float) -> Any:
    from ddptop.analysis.figures import derive

    return derive(lambda x: x * factor, figure)


__all__ = ["ASSUMPTIONS", "BOOTSTRAP", "SYNC_BOOTSTRAP", "SYNTHETIC", "TIME_TO_LOSS_METHOD", "GradientNoise",
           "TOO_WIDE", "config_noise_scale", "example_worth", "over_words", "record", "synchronisations", "time_to_loss_rows"]
