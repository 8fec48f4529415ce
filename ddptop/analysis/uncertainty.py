"""Confidence intervals for step-time figures, valid for autocorrelated step times; numpy only.

Step times are not independent: caches warm up, clocks drift, a background job stalls every k-th step, and
one slow step tends to follow another. Resampling single steps would make an interval far too narrow, so
the median is bootstrapped in blocks of consecutive steps:

- **What is resampled.** Steps are indexed by their position in the run (step i of every rank is the same
  training step; DDP keeps the ranks in lockstep, so their times are strongly correlated). A replicate picks
  blocks of consecutive step indices and takes those steps *of every rank together*, then the pooled median
  of all ranks' resampled steps (the percentiles pool the ranks too). Ranks of unequal length (a fault cut
  one short) are not truncated: a step index that a rank never reached contributes that rank's nothing, so
  every measured step counts and the cross-rank dependence is kept.
- **Blocks.** Circular block bootstrap (Politis and Romano 1992): blocks start anywhere and wrap around the
  end, so first and last steps weigh the same as the others. The block length is twice Politis and White's
  (2004) automatic choice for the circular bootstrap (with Patton, Politis and White's 2009 correction),
  computed on the series that matters for a median, the sign of each step against the median (averaged over
  ranks). Blocks still cut the dependence at their joins, which makes the bootstrap's spread too small when
  steps are correlated; the replicates are widened by sqrt(long-run variance / Bartlett variance at the
  block length) of that sign series (the long-run variance from a flat-top kernel, and at least what the
  bias-corrected lag-1 autocorrelation implies: a short run underestimates its own dependence).
- **Rounds.** When the same configuration was measured in several rounds, a replicate first draws whole
  rounds with replacement (a cluster bootstrap) and then blocks within each drawn round, so round-to-round
  drift widens the interval instead of hiding in it.
- **Interval.** Percentile interval of the replicates (it respects ratios and other monotone maps, which the
  derived figures need), expanded for small samples as Hesterberg (2015) recommends: the replicates' spread
  about their median is scaled by sqrt(m/(m-1)) * t(m-1)/z where m is the number of independent units the
  bootstrap saw (blocks or the effective sample size, whichever is fewer; or rounds), which matters when a
  short, strongly correlated run has few blocks.
- **A tail quantile** (the p95 beside a tune's examples/s) is bootstrapped the same way, its block length read
  from the steps' signs against that quantile, and expanded as if it had no more independent units than the
  steps beyond it (effective sample size x 0.05 for the p95): without that its interval covered 90% on
  autocorrelated series, with it 94%. It gets an interval only from ``precision.tail_steps`` steps on (five
  beyond it), since with fewer the resampled p95 is the slowest step or two again and again.
- **Derived figures** (speedup, efficiency, a ratio of two runs) come from applying the same formula to the
  replicates of independent measurements (``figures.derive``; :func:`propagate` where the point was computed
  before).

An interval is given as the summary's record of a figure, ``records.Estimate`` (``figures.estimate``, the
replicates' percentile interval): the one estimate type of ddptop.

Coverage, A/A false alarms and power on synthetic AR(1), stalling, lognormal and drifting series are measured
by tests/test_uncertainty.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

import numpy as np

from ddptop.analysis import step_change
# a figure's interval from its replicates (``figures.estimate``), said here too: callers say uncertainty.estimate
from ddptop.analysis.figures import CONFIDENCE, Measured, derive, estimate  # noqa: F401
# the verdict words, said here too: callers that compare say uncertainty.FASTER
from ddptop.analysis.step_change import EQUIVALENT, FASTER, NOT_COMPARABLE, SLOWER, WITHIN_NOISE  # noqa: F401
from ddptop.protocol import precision
from ddptop.records import BOOTSTRAP, Estimate, paired, value_of

RESAMPLES = 2000
METHOD = (
    "circular block bootstrap of the pooled median (blocks of consecutive steps resampled jointly over ranks, "
    "Politis-White block length, whole rounds resampled first when there are rounds), small-sample expanded "
    "percentile interval"
)
BLOCK_SCALE = 2.0  # blocks twice Politis-White's length: that length minimises the variance's error, not
# the interval's; twice it covered better on short autocorrelated series (tests/test_uncertainty.py)
CHUNK_ELEMENTS = 4_000_000  # resampled values held at once; bounds memory for long runs


# -- block length -------------------------------------------------------------------------------------------


def _flat_top(s: np.ndarray) -> np.ndarray:
    s = np.abs(s)
    return np.where(s <= 0.5, 1.0, np.where(s <= 1.0, 2.0 * (1.0 - s), 0.0))


def _autocovariances(x: np.ndarray, lags: int) -> np.ndarray:
    n = len(x)
    x = x - x.mean()
    return np.array([float(x[: n - k] @ x[k:]) / n for k in range(lags + 1)])


def _bandwidth(rho: np.ndarray, n: int, k_n: int, m_max: int) -> int:
    """Politis' rule: 2 x the first lag after which k_n autocorrelations in a row are insignificant."""
    threshold = 2.0 * math.sqrt(math.log10(n) / n)
    m_hat = m_max
    for m in range(1, m_max + 1):
        window = rho[m + 1 : m + 1 + k_n]
        if len(window) == k_n and np.all(np.abs(window) < threshold):
            m_hat = m
            break
    return min(2 * m_hat, m_max)


def dependence(series: Sequence[float] | np.ndarray) -> tuple[int, float, float]:
    """The block length for a circular block bootstrap of ``series`` and the factor by which that bootstrap's
    spread falls short, from the series' autocovariances.

    Block length: BLOCK_SCALE times Politis and White's (2004) automatic choice for the circular block
    bootstrap (as corrected by Patton, Politis and White 2009), at least 1 and at most n/3. Shortfall: the circular block bootstrap's
    variance of a mean is the Bartlett-kernel long-run variance with bandwidth b, biased low by about
    sum |k| gamma(k) / b when steps are correlated (badly so for a short run, whose blocks are short); the
    factor is sqrt(flat-top long-run variance / Bartlett long-run variance), at least 1 and at most 3.
    """
    x = np.asarray(series, dtype=float)
    n = len(x)
    if n < 8 or float(np.var(x)) <= 0:
        return 1, 1.0, float(n)
    k_n = max(5, math.ceil(math.sqrt(math.log10(n))))
    m_max = min(math.ceil(math.sqrt(n)) + k_n, n - 1)
    b_max = max(1, math.ceil(min(3 * math.sqrt(n), n / 3)))
    acov = _autocovariances(x, m_max)
    big_m = _bandwidth(acov / acov[0], n, k_n, m_max)
    lags = np.arange(-big_m, big_m + 1)
    weights = _flat_top(lags / big_m) if big_m > 0 else np.ones(1)
    r = acov[np.abs(lags)]
    g = float(np.sum(weights * np.abs(lags) * r))
    spectrum = float(np.sum(weights * r))
    if spectrum <= 0:
        return 1, 1.0, float(n)
    b = (2.0 * g**2 / (4.0 / 3.0 * spectrum**2)) ** (1.0 / 3.0) * n ** (1.0 / 3.0) if g != 0 else 1.0
    block = int(min(max(1, math.ceil(BLOCK_SCALE * b)), b_max))
    within = np.arange(-(block - 1), block) if block > 1 else np.zeros(1, dtype=int)
    within = within[np.abs(within) <= m_max]
    bartlett = float(np.sum((1 - np.abs(within) / block) * acov[np.abs(within)]))
    # A short series underestimates its own autocorrelation (by about (1 + 3 rho)/n at lag 1, Kendall 1954):
    # the long-run variance is at least what the bias-corrected lag-1 autocorrelation of an AR(1) implies.
    rho1 = min(float(acov[1] / acov[0]) + (1 + 3 * float(acov[1] / acov[0])) / n, 0.95)
    if rho1 > 0:
        spectrum = max(spectrum, float(acov[0]) * (1 + rho1) / (1 - rho1))
    shortfall = math.sqrt(spectrum / bartlett) if bartlett > 0 else 3.0
    effective = n * float(acov[0]) / spectrum if spectrum > 0 else float(n)
    return block, min(max(shortfall, 1.0), 3.0), min(effective, float(n))


def block_length(series: Sequence[float] | np.ndarray) -> int:
    """Politis-White automatic block length for the circular block bootstrap of ``series``."""
    return dependence(series)[0]


# -- the data as the bootstrap sees it ---------------------------------------------------------------------


def _groups(
    samples_by_rank: Mapping[int, Sequence[float]], rounds_by_rank: Mapping[int, Sequence[int]] | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The steps as a (rounds, ranks, step index) array padded with NaN, each round's length, and every step.

    Without rounds there is one round. Within a round, a rank's steps keep their order: the j-th step of
    round k on rank r and on rank s are the same training step.
    """
    ranks = sorted(samples_by_rank, key=int)
    per_rank = {r: np.asarray(samples_by_rank[r], dtype=float) for r in ranks}
    per_rank = {r: v for r, v in per_rank.items() if len(v)}
    if not per_rank:
        raise ValueError("no step times")
    labels: dict[int, np.ndarray] = {}
    # keyed by rank, or by the rank's string where the rounds were read back from JSON
    by_rank: Mapping[Any, Sequence[int]] | None = rounds_by_rank
    for r, values in per_rank.items():
        if by_rank is None or (by_rank.get(r) is None and by_rank.get(str(r)) is None):
            labels[r] = np.zeros(len(values), dtype=int)
        else:
            found = by_rank.get(r)
            if found is None:
                found = by_rank.get(str(r))
            given = np.asarray(found, dtype=int)
            if len(given) != len(values):
                raise ValueError(f"rank {r}: {len(given)} round indices for {len(values)} steps")
            labels[r] = given
    rounds = sorted({int(k) for v in labels.values() for k in np.unique(v)})
    lengths = np.array([max(int(np.sum(labels[r] == k)) for r in per_rank) for k in rounds])
    data = np.full((len(rounds), len(per_rank), int(lengths.max())), np.nan)
    for ri, r in enumerate(per_rank):
        for ki, k in enumerate(rounds):
            chosen = per_rank[r][labels[r] == k]
            data[ki, ri, : len(chosen)] = chosen
    pooled = np.concatenate(list(per_rank.values()))
    return data, lengths, pooled


def _sign_series(data: np.ndarray, lengths: np.ndarray, q: float = 0.5) -> np.ndarray:
    """Per step index, the ranks' mean sign against their round's ``q`` quantile (the median: 0.5), rounds one
    after another: the series whose dependence a quantile's bootstrap must keep."""
    parts = []
    for k, length in enumerate(lengths):
        block = data[k, :, :length]
        middle = np.nanmedian(block) if q == 0.5 else np.nanquantile(block, q)
        with np.errstate(invalid="ignore"):
            signs = np.sign(block - middle)
        parts.append(np.nanmean(np.where(np.isnan(block), np.nan, signs), axis=0))
    return np.concatenate(parts)


def _row_medians(flat: np.ndarray) -> np.ndarray:
    """Median of every row, ignoring NaN (the padding).

    By sorting rather than np.median: numpy's sort of short rows is vectorised, its partition with two kth
    (what np.median does) is not, and the bootstrap takes this median thousands of times. The result is
    np.median's to the bit (the middle value, or the two middle values' sum halved)."""
    ordered = np.sort(flat, axis=1)  # NaN sort last
    missing = np.isnan(flat)
    if not missing.any():
        n = flat.shape[1]
        return (ordered[:, (n - 1) // 2] + ordered[:, n // 2]) / 2
    counts = flat.shape[1] - missing.sum(axis=1)
    rows = np.arange(len(flat))
    low = ordered[rows, np.maximum(counts - 1, 0) // 2]
    high = ordered[rows, np.maximum(counts, 1) // 2]
    return (low + high) / 2


def _row_quantiles(flat: np.ndarray, q: float) -> np.ndarray:
    """The ``q`` quantile of every row, ignoring NaN, by numpy's default (linear) interpolation: np.nanquantile's
    value to rounding, from one sort of all rows (np.nanquantile goes row by row, ten times slower here)."""
    ordered = np.sort(flat, axis=1)  # NaN sort last
    counts = flat.shape[1] - np.isnan(flat).sum(axis=1)
    position = np.maximum(counts - 1, 0) * q
    below = np.floor(position).astype(int)
    above = np.minimum(below + 1, np.maximum(counts - 1, 0))
    rows = np.arange(len(flat))
    low, high = ordered[rows, below], ordered[rows, above]
    return low + (high - low) * (position - below)


def _expansion(units: int, confidence: float) -> float:
    """Hesterberg's small-sample expansion of a percentile interval: sqrt(m/(m-1)) t(m-1)/z."""
    if units < 2:
        return 1.0
    p = 0.5 + confidence / 2
    z = NormalDist().inv_cdf(p)
    df = units - 1
    t = precision.t_quantile(p, df) if df >= 4 else _t_small(p, df)
    return math.sqrt(units / df) * t / z


def _t_small(p: float, df: int) -> float:
    """Quantile ``p`` of t with 1-3 degrees of freedom, where the expansion in ``precision`` is poor."""
    if df == 1:
        return math.tan(math.pi * (p - 0.5))
    if df == 2:
        a = 4 * p * (1 - p)
        return (2 * p - 1) * math.sqrt(2 / a)
    # df == 3: solve the CDF by bisection
    def cdf(t: float) -> float:
        x = t / math.sqrt(3)
        return 0.5 + (math.atan(x) + x / (1 + x * x)) / math.pi

    lo, hi = 0.0, 100.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


# -- the bootstrap -----------------------------------------------------------------------------------------


def median_replicates(
    samples_by_rank: Mapping[int, Sequence[float]],
    rounds_by_rank: Mapping[int, Sequence[int]] | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
    q: float = 0.5,
) -> np.ndarray:
    """Bootstrap replicates of the pooled median step time (see the module's docstring for the method); of its
    ``q`` quantile instead where given (the p95: 0.95), by the same blocks, its dependence read from the steps'
    signs against that quantile (``precision.tail_steps`` says how many steps a tail quantile needs).

    The replicates are already expanded for small samples (so that intervals and anything propagated from
    them carry it); ``confidence`` only sets that expansion.
    """
    data, lengths, pooled = _groups(samples_by_rank, rounds_by_rank)
    rounds, ranks, longest = data.shape
    signs = _sign_series(data, lengths, q)
    block, shortfall, effective = dependence(signs)
    rng = np.random.default_rng(seed)
    out = np.empty(resamples)
    per_replicate = rounds * ranks * longest
    chunk = max(1, CHUNK_ELEMENTS // max(per_replicate, 1))
    blocks = math.ceil(longest / block)
    position = np.arange(longest)
    block_of, offset = position // block, position % block
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        if rounds > 1:
            chosen = rng.integers(0, rounds, size=(count, rounds))
        else:
            chosen = np.zeros((count, 1), dtype=int)
        own = lengths[chosen]  # (count, rounds): the length of each drawn round
        starts = np.floor(rng.random((count, rounds, blocks)) * own[..., None]).astype(int)
        index = (starts[..., block_of] + offset) % own[..., None]  # (count, rounds, longest)
        values = data[chosen[..., None], :, index]  # (count, rounds, longest, ranks)
        values[position >= own[..., None]] = np.nan
        flat = values.reshape(count, -1)
        out[start : start + count] = _row_medians(flat) if q == 0.5 else _row_quantiles(flat, q)
    units = rounds if rounds > 1 else max(1, min(int(lengths[0]) // block, int(effective)))
    if q != 0.5:  # a tail quantile rests on the few steps beyond it: no more units than those (two at least, where
        units = max(2, min(units, int(min(q, 1 - q) * effective)))  # the interval then spans nearly every step)
    factor = _expansion(units, confidence) * shortfall
    if factor != 1.0:
        centre = float(np.median(out))
        out = centre + (out - centre) * factor
        # a quantile lies within the data: the widening may not carry it past the fastest or slowest step
        out = np.clip(out, np.nanmin(data), np.nanmax(data))
    return out


@dataclass(frozen=True)
class SumReplicates:
    """Bootstrap replicates of two sums taken over the same resampled steps, per rank (``sum_replicates``):
    a share of the step (time waiting for data over step time) is a ratio of such sums, which a median cannot
    give when the waits come in bursts (a loader's workers: most steps wait nothing, every k-th a lot)."""

    ranks: tuple[int, ...]
    parts: np.ndarray  # (resamples, ranks): each replicate's sum of the part (the data wait) per rank
    wholes: np.ndarray  # (resamples, ranks): the same steps' sum of the whole (the step time)
    factor: float  # small-sample expansion and the blocks' shortfall, applied to any figure made of the sums
    units: int  # independent units the bootstrap saw: launches, or blocks within the one launch

    def share(self, ranks: Sequence[int] | None = None) -> np.ndarray:
        """Replicates of sum(part) / sum(whole) over ``ranks`` (every rank by default), widened, within [0, 1]."""
        columns = [self.ranks.index(r) for r in ranks] if ranks is not None else list(range(len(self.ranks)))
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = self.parts[:, columns].sum(axis=1) / self.wholes[:, columns].sum(axis=1)
        return np.clip(widened(raw, self.factor), 0.0, 1.0)

    def difference(self, rank: int) -> np.ndarray:
        """Replicates of ``rank``'s share less the other ranks' pooled share, widened (raw draws, one each)."""
        others = [r for r in self.ranks if r != rank]
        column = self.ranks.index(rank)
        rest = [self.ranks.index(r) for r in others]
        with np.errstate(divide="ignore", invalid="ignore"):
            raw = (self.parts[:, column] / self.wholes[:, column]
                   - self.parts[:, rest].sum(axis=1) / self.wholes[:, rest].sum(axis=1))
        return np.clip(widened(raw, self.factor), -1.0, 1.0)


def widened(replicates: np.ndarray, factor: float) -> np.ndarray:
    """Replicates spread about their median by ``factor`` (the expansion ``median_replicates`` applies)."""
    finite = replicates[np.isfinite(replicates)]
    if factor == 1.0 or not len(finite):
        return replicates
    centre = float(np.median(finite))
    return centre + (replicates - centre) * factor


def sum_replicates(
    parts_by_rank: Mapping[int, Sequence[float]],
    wholes_by_rank: Mapping[int, Sequence[float]],
    rounds_by_rank: Mapping[int, Sequence[int]] | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
    confidence: float = CONFIDENCE,
) -> SumReplicates:
    """Bootstrap replicates of each rank's sums of two per-step series given in parallel (a part of each step
    and the step), resampled as ``median_replicates`` resamples steps: whole rounds (launches) first when
    there are several, then circular blocks of step indices taken of every rank together; the block length
    from the per-step share (part over whole, averaged over ranks)."""
    parts, lengths, _ = _groups(parts_by_rank, rounds_by_rank)
    wholes, _, _ = _groups(wholes_by_rank, rounds_by_rank)
    rounds, ranks, longest = wholes.shape
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = parts / wholes
    series = np.concatenate([np.nanmean(ratio[k, :, :length], axis=0) for k, length in enumerate(lengths)])
    block, shortfall, effective = dependence(np.nan_to_num(series))
    rng = np.random.default_rng(seed)
    out_parts, out_wholes = np.empty((resamples, ranks)), np.empty((resamples, ranks))
    chunk = max(1, CHUNK_ELEMENTS // max(rounds * ranks * longest, 1))
    blocks = math.ceil(longest / block)
    position = np.arange(longest)
    block_of, offset = position // block, position % block
    for start in range(0, resamples, chunk):
        count = min(chunk, resamples - start)
        chosen = rng.integers(0, rounds, size=(count, rounds)) if rounds > 1 else np.zeros((count, 1), dtype=int)
        own = lengths[chosen]
        starts = np.floor(rng.random((count, rounds, blocks)) * own[..., None]).astype(int)
        index = (starts[..., block_of] + offset) % own[..., None]
        outside = position >= own[..., None]  # (count, rounds, longest): past a drawn round's own length
        for data, out in ((parts, out_parts), (wholes, out_wholes)):
            values = data[chosen[..., None], :, index]  # (count, rounds, longest, ranks)
            values[outside] = np.nan
            out[start : start + count] = np.nansum(values, axis=(1, 2))
    units = rounds if rounds > 1 else max(1, min(int(lengths[0]) // block, int(effective)))
    return SumReplicates(tuple(sorted(int(r) for r in parts_by_rank if len(parts_by_rank[r]))), out_parts,
                         out_wholes, _expansion(units, confidence) * shortfall, units)


def pooled_median(samples_by_rank: Mapping[int, Sequence[float]], q: float = 0.5) -> float:
    """The median of every rank's steps pooled (their ``q`` quantile where given)."""
    values = [v for r in samples_by_rank for v in samples_by_rank[r]]
    if not values:
        raise ValueError("no step times")
    return quantile(values, q)


def quantile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile of ``values`` (numpy's linear interpolation); np.median's own value at 0.5, as every
    median of ddptop has been, to the bit."""
    pooled = np.asarray(values, dtype=float)
    return float(np.median(pooled) if q == 0.5 else np.quantile(pooled, q))


def median_estimate(
    samples_by_rank: Mapping[int, Sequence[float]],
    rounds_by_rank: Mapping[int, Sequence[int]] | None = None,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> tuple[Estimate, np.ndarray]:
    """The pooled median with its interval, and the replicates (for :func:`propagate`)."""
    replicates = median_replicates(samples_by_rank, rounds_by_rank, resamples, seed)
    return estimate(replicates, pooled_median(samples_by_rank)), replicates


def propagate(
    fn: Callable[..., np.ndarray], *replicates: np.ndarray, value: float, confidence: float = CONFIDENCE
) -> Estimate:
    """The interval of a figure derived from independent measurements whose point ``value`` was computed
    already: ``fn`` applied element-wise to their replicate arrays (same length) by ``figures.derive``, the
    one computation of a figure from its inputs, gives the figure's replicates."""
    arrays = [np.asarray(r, dtype=float) for r in replicates]
    if len({len(a) for a in arrays}) > 1:
        raise ValueError("replicate arrays differ in length")
    derived = derive(fn, *(Measured(math.nan, a) for a in arrays), value=value)
    return estimate(derived.replicates, value, confidence)


# -- comparing two runs ------------------------------------------------------------------------------------



@dataclass(frozen=True)
class Comparison:
    ratio: Estimate  # b / a of the pooled medians (> 1: b is slower)
    verdict: str
    min_effect: float


def step_ratio(a: np.ndarray, b: np.ndarray, value: float) -> Estimate:
    """B's step time over A's, with its interval from their (independent) replicates: above 1, B is slower."""
    return propagate(lambda x, y: y / x, a, b, value=value)


def verdict(ratio: Estimate, min_effect: float) -> str:
    """A change is called only when the interval lies beyond the margin; inside it: equivalent (no interval:
    within noise)."""
    low, high = ratio.ci or (math.nan, math.nan)
    return step_change.classify_change(low, high, min_effect)


def row_ratio(ours: Mapping[str, Any], theirs: Mapping[str, Any], replicates: Mapping[str, np.ndarray]
              ) -> Estimate | None:
    """Our step time over theirs (two table rows at the same global batch, each with ``config_id`` and
    ``sec_iter``), with its interval from each configuration's replicates; None when either lacks them."""
    a, b = replicates.get(theirs["config_id"]), replicates.get(ours["config_id"])
    if a is None or b is None or not value_of(ours["sec_iter"]) or not value_of(theirs["sec_iter"]):
        return None
    return step_ratio(a, b, ours["sec_iter"].value / theirs["sec_iter"].value)


def speedup_of(ratio: Estimate, min_effect: float) -> dict[str, Any]:
    """A row's examples/s over its reference's (the step-time ratio's inverse) with its interval, and the
    verdict."""
    return {"speedup": paired(1 / ratio.value, step_change.inverse(ratio.ci), BOOTSTRAP),
            "verdict": verdict(ratio, min_effect)}


def compare(
    a_by_rank: Mapping[int, Sequence[float]],
    b_by_rank: Mapping[int, Sequence[float]],
    a_rounds: Mapping[int, Sequence[int]] | None = None,
    b_rounds: Mapping[int, Sequence[int]] | None = None,
    min_effect: float = step_change.DEFAULT_MIN_EFFECT,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Comparison:
    """Ratio b/a of the pooled medians with its interval (independent bootstraps of A and B), and the verdict:
    "slower" when the interval's low end is above 1 + min_effect, "faster" when its high end is below
    1 - min_effect, "equivalent" when it lies inside [1 - min_effect, 1 + min_effect], else "within noise"."""
    if min_effect < 0:
        raise ValueError("min_effect must be >= 0")
    reps_a = median_replicates(a_by_rank, a_rounds, resamples, seed)
    reps_b = median_replicates(b_by_rank, b_rounds, resamples, seed + 1)
    value_a, value_b = pooled_median(a_by_rank), pooled_median(b_by_rank)
    value = value_b / value_a if value_a > 0 else math.nan
    ratio = propagate(lambda a, b: b / a, reps_a, reps_b, value=value)
    return Comparison(ratio=ratio, verdict=verdict(ratio, min_effect), min_effect=min_effect)


def relative_half_width(values: Sequence[float]) -> float | None:
    """Cheap precision of a series' median (batch medians, no bootstrap); see ``ddptop.protocol.precision``."""
    return precision.relative_half_width(list(values))
