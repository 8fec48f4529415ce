"""Confidence intervals of step-time figures, checked against synthetic series whose true median is known.

The series imitate what a benchmark sees: AR(1) noise (phi 0.3-0.7), ranks sharing most of their noise (DDP
keeps them in lockstep), periodic stalls (every 10th step 3x slower, at a random phase), lognormal steps,
round-to-round drift and a step change. The simulation loops use 400 bootstrap resamples instead of the
default 2000 to stay fast; the interval's ends move by well under its width between the two. Each loop prints
its measured figure (run pytest with -s to see them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddptop.analysis import uncertainty as u
from ddptop.protocol import precision

BASE = 0.100  # seconds
SIM_RESAMPLES = 400
STALL_EVERY = 10
NORMAL_75 = 0.6744897501960817  # standard normal quantile at 0.75


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


def ar1(rng: np.random.Generator, n: int, phi: float, ranks: int = 1, shared: float = 0.7) -> np.ndarray:
    """(ranks, n) standard-normal AR(1) series; ``shared`` of each rank's variance is common to all ranks."""
    burn = 50
    noise = rng.standard_normal((ranks + 1, n + burn))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    scale = math.sqrt(1 - phi * phi)
    for i in range(1, n + burn):
        x[:, i] = phi * x[:, i - 1] + scale * noise[:, i]
    x = x[:, burn:]
    return math.sqrt(shared) * x[0] + math.sqrt(1 - shared) * x[1:]


def synthetic(kind: str, rng: np.random.Generator, n: int, phi: float, ranks: int, scale: float = 1.0):
    """Step times by rank and the true median of the process that made them."""
    z = ar1(rng, n, phi, ranks)
    if kind == "ar1":
        steps, truth = BASE * (1 + 0.05 * z), BASE
    elif kind == "lognormal":
        steps, truth = BASE * np.exp(0.1 * z), BASE
    elif kind == "stalls":
        stalled = (np.arange(n) + rng.integers(STALL_EVERY)) % STALL_EVERY == 0
        steps = BASE * (1 + 0.05 * z) * np.where(stalled, 3.0, 1.0)
        # the stalls sit far above the median: (1 - 1/k) P(normal part <= m) = 1/2
        truth = BASE * (1 + 0.05 * _normal_quantile(0.5 / (1 - 1 / STALL_EVERY)))
    else:
        raise ValueError(kind)
    return {r: list(steps[r] * scale) for r in range(ranks)}, truth * scale


def _draw(rng: np.random.Generator) -> tuple[int, float, int]:
    n = int(round(math.exp(rng.uniform(math.log(30), math.log(400)))))  # 30-400 steps, log-uniform
    return n, float(rng.uniform(0.3, 0.7)), int(rng.integers(1, 5))


# -- the API ------------------------------------------------------------------------------------------------


def test_estimate_api():
    e = u.Estimate(2.0, 1.9, 2.2)
    assert e.rel_half_width() == pytest.approx(0.075)
    assert e.contains(2.1) and not e.contains(2.3)
    assert e.to_ci() == [1.9, 2.2]
    assert u.Estimate(0.0, -1.0, 1.0).rel_half_width() is None
    reps = np.linspace(0.0, 1.0, 1001)
    interval = u.estimate(reps, 0.5)
    assert interval.low == pytest.approx(0.025) and interval.high == pytest.approx(0.975)
    assert isinstance(u.METHOD, str) and u.CONFIDENCE == 0.95 and u.RESAMPLES == 2000


def test_median_estimate_is_the_pooled_median_and_reproducible():
    rng = np.random.default_rng(1)
    samples, _ = synthetic("ar1", rng, 120, 0.5, 3)
    est, reps = u.median_estimate(samples)
    assert est.value == pytest.approx(float(np.median(np.concatenate([samples[r] for r in samples]))))
    assert est.low < est.value < est.high and len(reps) == u.RESAMPLES
    again, _ = u.median_estimate(samples)
    assert again == est
    # string rank keys (as in summary.json) and a rank cut short by a fault are accepted
    ragged = {str(r): v[: 120 - 10 * r] for r, v in samples.items()}
    cut, _ = u.median_estimate(ragged, resamples=500)
    assert cut.low < cut.value < cut.high


def test_constant_and_tiny_series():
    est, _ = u.median_estimate({0: [0.1] * 20}, resamples=200)
    assert est.low == est.value == est.high == 0.1
    one, _ = u.median_estimate({0: [0.2]}, resamples=50)
    assert one.value == 0.2
    with pytest.raises(ValueError):
        u.median_estimate({0: []})


def test_block_length_grows_with_dependence():
    rng = np.random.default_rng(2)
    short = np.median([u.block_length(ar1(rng, 400, 0.1)[0]) for _ in range(20)])
    long = np.median([u.block_length(ar1(rng, 400, 0.8)[0]) for _ in range(20)])
    assert short <= 3 < long


def test_propagate_and_compare_shapes():
    a = np.full(100, 2.0)
    b = np.linspace(1.0, 3.0, 100)
    e = u.propagate(lambda x, y: y / x, a, b, value=1.0)
    assert e.low == pytest.approx(0.5, abs=0.03) and e.high == pytest.approx(1.5, abs=0.03)
    with pytest.raises(ValueError):
        u.propagate(lambda x, y: y / x, a, b[:50], value=1.0)
    rng = np.random.default_rng(3)
    samples, _ = synthetic("ar1", rng, 200, 0.5, 2)
    same = u.compare(samples, samples, resamples=500)
    assert same.ratio.value == 1.0 and same.verdict in ("within noise", "equivalent")
    slower = u.compare(samples, {r: [v * 1.2 for v in s] for r, s in samples.items()}, resamples=500)
    assert slower.verdict == "slower" and slower.ratio.low > 1.02 and slower.min_effect == 0.02


# -- the cheap precision a rank computes --------------------------------------------------------------------


def test_precision_is_standard_library_and_agrees_with_the_bootstrap():
    assert precision.relative_half_width([0.1] * 5) is None
    assert precision.relative_half_width([0.1] * 40) == 0.0
    rng = np.random.default_rng(4)
    ratios = []
    for n, phi in [(100, 0.3), (200, 0.5), (400, 0.7), (400, 0.3), (150, 0.7)]:
        for _ in range(8):
            samples, _ = synthetic("ar1", rng, n, phi, 1)
            est, _ = u.median_estimate(samples, resamples=SIM_RESAMPLES)
            cheap = u.relative_half_width(samples[0])
            ratios.append(cheap / est.rel_half_width())
    typical = float(np.median(ratios))
    print(f"\nbatch-medians / bootstrap relative half-width: median {typical:.2f}, "
          f"10-90% {np.percentile(ratios, 10):.2f}-{np.percentile(ratios, 90):.2f}")
    assert 0.5 <= typical <= 2.0
    assert np.mean([(0.5 <= r <= 2.0) for r in ratios]) >= 0.8
