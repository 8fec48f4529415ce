"""How precisely a series of step times pins down its median: the batch-medians method, standard library only.

A rank can call :func:`relative_half_width` every few steps to decide whether it has measured enough. Step times
are not independent (drift, warm caches, periodic stalls), so the usual ``s / sqrt(n)`` would be far too
optimistic. The batch-means method of simulation output analysis handles that: split the series into ``k``
contiguous batches, take each batch's median, and treat the ``k`` batch medians as roughly independent (they
are, once a batch is longer than the series' memory). The half-width of the Student-t interval over the batch
medians, relative to the series' median, is the precision. ``ddptop.analysis.uncertainty`` gives the full
block-bootstrap interval of a finished run; this is its cheap counterpart (within a factor of two of it on
autocorrelated series, see tests/test_uncertainty.py).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

MIN_BATCHES = 5
MAX_BATCHES = 20
MIN_STEPS = 10  # below this there is no honest precision to report
TAIL = 0.95  # the tail quantile a tune shows beside its examples/s (the step's p95)
TAIL_STEPS = 5  # a tail quantile's interval needs this many steps beyond it (tail_steps)


def tail_steps(q: float = TAIL) -> int:
    """The training steps a ``q`` quantile's interval needs: TAIL_STEPS of them beyond it (p95: 100). With
    fewer, a resampled p95 is the slowest step or two again and again, and its interval says nothing true."""
    return math.ceil(TAIL_STEPS / (1 - q) - 1e-9)


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t with ``df`` degrees of freedom (Cornish-Fisher expansion about the normal
    quantile; within 0.3% of the exact value for df >= 4, the smallest this module uses)."""
    if df < 1:
        raise ValueError("t quantile needs df >= 1")
    z = statistics.NormalDist().inv_cdf(p)
    v = float(df)
    return (
        z
        + (z**3 + z) / (4 * v)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * v**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * v**3)
        + (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / (92160 * v**4)
    )


def batch_count(n: int) -> int:
    """Batches for ``n`` steps: about sqrt(n), between 5 and 20, so that batches grow with the series."""
    return max(MIN_BATCHES, min(MAX_BATCHES, math.isqrt(n)))


def batch_medians(values: Sequence[float], batches: int) -> list[float]:
    """Medians of ``batches`` contiguous batches whose lengths differ by at most one."""
    n = len(values)
    bounds = [n * i // batches for i in range(batches + 1)]
    return [statistics.median(values[bounds[i] : bounds[i + 1]]) for i in range(batches)]


def half_width(values: Sequence[float], confidence: float = 0.95) -> float | None:
    """Half-width of the batch-medians t-interval for the series' median; None below MIN_STEPS steps."""
    n = len(values)
    if n < MIN_STEPS:
        return None
    k = batch_count(n)
    medians = batch_medians(list(values), k)
    spread = statistics.stdev(medians)
    return t_quantile(0.5 + confidence / 2, k - 1) * spread / math.sqrt(k)


def relative_half_width(values: Sequence[float], confidence: float = 0.95) -> float | None:
    """The half-width of the median's interval relative to the median (0.02: +-2%); None when there are fewer
    than MIN_STEPS steps or the median is 0."""
    width = half_width(values, confidence)
    if width is None:
        return None
    middle = statistics.median(values)
    return width / abs(middle) if middle != 0 else None
