"""The gradient noise scale from what data parallelism synchronises, and what it means for scaling in time to
the same loss.

McCandlish, Kaplan, Amodei et al., "An Empirical Model of Large-Batch Training" (2018): with G the true
gradient and Sigma the per-example gradient covariance, the simple noise scale is B_noise = tr(Sigma) / |G|^2;
the optimizer steps to a given loss go as S = S_min (1 + B_noise / B) at batch B (with the learning rate
retuned for each batch), and the examples as E = E_min (1 + B / B_noise).

Each synchronisation of DDP holds two estimates of the same gradient: every rank's local one over its batch
b = B_small (before the allreduce) and the average over all N ranks, B_big = N b (after it). For a gradient
averaged over B examples drawn independently, E|g_B|^2 = |G|^2 + tr(Sigma) / B, so the two squared norms give
unbiased estimates (the paper's appendix A.1), per synchronisation:

    |G|^2    ~ (B_big |g_big|^2 - B_small |g_small|^2) / (B_big - B_small)
    tr(Sigma) ~ (|g_small|^2 - |g_big|^2) / (1 / B_small - 1 / B_big)

with |g_small|^2 the mean over the ranks of each one's local squared norm. Each is noisy, |G|^2's can be
negative: B_noise is the ratio of their means over the measured synchronisations (the mean of per-step ratios
is biased), and its 95% interval comes from a circular block bootstrap of the synchronisations (the pairs of
per-step estimates resampled together, the block length from their dependence), as the step times' are. Where
|G|^2's interval reaches 0 the noise scale is not resolved: it is then unbounded above, and said so.

The time-to-loss speedup of N ranks against the reference's, ``(t_ref / t_N) (1 + B_noise / B_ref) / (1 + B_noise
/ B_N)`` for the global batches B_ref and B_N, is a model (the learning rate retuned at each batch, the noise
scale of this window of training, curvature ignored), said as one wherever it is shown.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any
from dataclasses import dataclass

import numpy as np

from ddptop.analysis import uncertainty
from ddptop.analysis.figures import Measured, derive

from ddptop.analysis import gradient_noise
# declared where the live view reads them, without numpy
from ddptop.analysis.gradient_noise import MIN_SYNCS, per_step


@dataclass(frozen=True)
class NoiseScale:
    """B_noise with its replicates, and the means it is the ratio of, over ``syncs`` synchronisations of a
    local batch of ``batch_small`` examples (mean) into a global one of ``batch_big``."""

    b_noise: Measured
    trace: Measured  # tr(Sigma), per example
    true_sq: Measured  # |G|^2
    syncs: int
    batch_small: float
    batch_big: float

    def b_noise_interval(self) -> list[float] | None:
        """B_noise's 95% percentile interval with the replicates whose |G|^2 mean was not above 0 kept, as the
        infinite noise scale they stand for (dropping them would pull the upper end down), widened to hold the
        value; its upper end is infinite where more than 2.5% of them are. None without replicates."""
        if self.b_noise.replicates is None:
            return None
        reps = np.asarray(self.b_noise.replicates, dtype=float)
        reps = reps[~np.isnan(reps)]
        if len(reps) == 0:
            return None
        low, high = np.quantile(reps, [0.025, 0.975], method="inverted_cdf")
        return [float(min(low, self.b_noise.value)), float(max(high, self.b_noise.value))]

    @property
    def resolved(self) -> bool:
        """Whether B_noise is bounded: |G|^2 told from 0 (its interval's low end above 0) and B_noise's upper
        end finite; else it has no upper bound, and only its lower end says anything."""
        interval, found = self.true_sq.interval(), self.b_noise_interval()
        return (interval is not None and not math.isnan(interval[0]) and interval[0] > 0 and found is not None
                and math.isfinite(found[1]) and self.b_noise.value > 0)


def estimate(small_sq: Sequence[float], big_sq: Sequence[float], b_small: Sequence[float] | float,
             b_big: Sequence[float] | float, resamples: int = uncertainty.RESAMPLES, seed: int = 0
             ) -> NoiseScale | None:
    """The noise scale over the synchronisations given in order (each a squared norm before and after the
    allreduce, and the batches behind them); None where fewer than ``MIN_SYNCS`` were given or a batch is not
    larger after the allreduce than before."""
    small, big = np.asarray(small_sq, dtype=float), np.asarray(big_sq, dtype=float)
    count = len(small)
    if count < MIN_SYNCS or len(big) != count:
        return None
    bs = np.broadcast_to(np.asarray(b_small, dtype=float), (count,))
    bb = np.broadcast_to(np.asarray(b_big, dtype=float), (count,))
    if np.any(bb <= bs) or np.any(bs <= 0):
        return None
    trace, true_sq = per_step(small, big, bs, bb)
    block = max(uncertainty.block_length(trace), uncertainty.block_length(true_sq))
    picks = _circular_blocks(count, block, resamples, seed)
    trace_m = Measured(float(trace.mean()), trace[picks].mean(axis=1))
    true_m = Measured(float(true_sq.mean()), true_sq[picks].mean(axis=1))
    b_noise = derive(_ratio, trace_m, true_m)
    return NoiseScale(b_noise, trace_m, true_m, count, float(bs.mean()), float(bb.mean()))


def halves(small_sq: Sequence[float], big_sq: Sequence[float], b_small: Sequence[float], b_big: Sequence[float],
           resamples: int = uncertainty.RESAMPLES) -> tuple[NoiseScale, NoiseScale] | None:
    """The noise scale over the first and over the second half of the synchronisations (each estimated apart),
    where each half has ``MIN_SYNCS`` or more: whether it moved over the window measured (it grows as the loss
    falls, so a figure of one window is not one of the whole training)."""
    middle = len(small_sq) // 2
    if middle < MIN_SYNCS:
        return None
    parts = [estimate(small_sq[part], big_sq[part], b_small[part], b_big[part], resamples, seed)
             for seed, part in ((1, slice(None, middle)), (2, slice(middle, None)))]
    return (parts[0], parts[1]) if parts[0] is not None and parts[1] is not None else None


def _ratio(trace: float | np.ndarray, true_sq: float | np.ndarray) -> float | np.ndarray:
    """tr(Sigma) / |G|^2, the ratio of the means: tr(Sigma) clamped at 0 (a variance, whose estimate the noise
    can take below it), infinite where |G|^2's mean is not above 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        found = np.where(np.asarray(true_sq) > 0, np.maximum(np.asarray(trace), 0.0) / np.asarray(true_sq), np.inf)
    return float(found) if np.ndim(found) == 0 else found


def _circular_blocks(count: int, block: int, resamples: int, seed: int) -> np.ndarray:
    """Indices of ``resamples`` circular block bootstrap series of ``count`` synchronisations."""
    rng = np.random.default_rng(seed)
    blocks = math.ceil(count / block)
    starts = rng.integers(0, count, size=(resamples, blocks))
    index = (starts[:, :, None] + np.arange(block)[None, None, :]) % count
    return index.reshape(resamples, blocks * block)[:, :count]


def time_to_loss_speedup(step_ratio: Measured | float, b_noise: Measured | float, batch_ref: float,
                         batch_n: float) -> Measured:
    """The speedup in time to the same loss of a global batch ``batch_n`` at a step time ``t_N`` against the
    reference's ``batch_ref`` at ``t_ref``: ``step_ratio`` is t_ref / t_N. A model: see the module."""
    return derive(_time_to_loss, step_ratio, b_noise, batch_ref, batch_n)


def worth(b_noise: Measured, batch_ref: float, batch_n: float) -> Measured:
    """What one example at the global batch ``batch_n`` is worth against one at ``batch_ref`` in progress to the
    same loss, E_min (1 + B / B_noise) examples being needed at batch B: (B_noise + B_ref) / (B_noise + B_N),
    1 for an unbounded noise scale; with its interval from B_noise's replicates."""
    return derive(_worth, b_noise, batch_ref, batch_n)


def _worth(b_noise: float | np.ndarray, batch_ref: float, batch_n: float) -> float | np.ndarray:
    noise = np.asarray(b_noise, dtype=float)
    with np.errstate(invalid="ignore"):
        found = np.where(np.isinf(noise), 1.0, (noise + batch_ref) / (noise + batch_n))
    return float(found) if np.ndim(found) == 0 else found


def _time_to_loss(step_ratio: float | np.ndarray, b_noise: float | np.ndarray, batch_ref: float,
                  batch_n: float) -> float | np.ndarray:
    noise = np.asarray(b_noise, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):  # an unbounded noise scale: steps go as 1 / B
        worth = np.where(np.isinf(noise), batch_n / batch_ref, (1 + noise / batch_ref) / (1 + noise / batch_n))
    found = step_ratio * worth
    return float(found) if np.ndim(found) == 0 else found


def time_to_loss_rows(rows: Sequence[dict[str, Any]], speedups: Mapping[int, Any],
                      noise_by_size: Mapping[int, Any], batch_by_size: Mapping[int, float]) -> None:
    """Each row's speedup in time to the same loss against the table's reference (``time_to_loss_speedup``),
    from that world size's own noise scale where it is resolved, what one of its examples is worth against
    one of the reference's (``example_worth``) and both global batches. ``speedups`` are the throughput speedups
    (``stats.ScalingRows``): against the reference counted as its N ranks, as the table's speedup column."""
    if not rows:
        return
    reference = rows[0]["world_size"]
    batch_ref = batch_by_size.get(reference) or 0
    for row in rows:
        n = row["world_size"]
        noise, speedup, batch_n = noise_by_size.get(n), speedups.get(n), batch_by_size.get(n) or 0
        if n == reference or noise is None or not noise.resolved or speedup is None or batch_ref <= 0 or batch_n <= 0:
            continue
        # the throughput speedup is N_ref (B_N / t_N) / (B_ref / t_ref): speedup x B_ref / B_N is N_ref t_ref / t_N,
        # the step ratio counted as the speedup column counts it
        figure = time_to_loss_speedup(_scaled(speedup, batch_ref / batch_n), noise.b_noise,
                                                  batch_ref, batch_n)
        row["time_to_loss_speedup"] = figure.estimate(gradient_noise.TIME_TO_LOSS_METHOD).to_json()
        row["example_worth"] = worth(noise.b_noise, batch_ref, batch_n).estimate(
            gradient_noise.TIME_TO_LOSS_METHOD).to_json()
        row["global_batch"], rows[0]["global_batch"] = round(batch_n), round(batch_ref)


def _scaled(figure: Any, factor: float) -> Any:
    return derive(lambda x: x * factor, figure)
