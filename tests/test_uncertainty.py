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
from ddptop.analysis.synthetic import ar1
from ddptop.protocol import precision
from ddptop.records import Estimate

BASE = 0.100  # seconds
SIM_RESAMPLES = 400
STALL_EVERY = 10
NORMAL_75 = 0.6744897501960817  # standard normal quantile at 0.75


def _normal_quantile(p: float) -> float:
    from statistics import NormalDist

    return NormalDist().inv_cdf(p)


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
    e = Estimate(value=2.0, ci=[1.9, 2.2])
    assert e.rel_half_width() == pytest.approx(0.075)
    assert e.includes(2.1) and not e.includes(2.3)
    assert e.ci == [1.9, 2.2]
    assert Estimate(value=0.0, ci=[-1.0, 1.0]).rel_half_width() is None
    assert Estimate(value=2.0).rel_half_width() is None
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
    assert 2 * short <= long


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


# -- known truth --------------------------------------------------------------------------------------------

SERIES = 500


@pytest.mark.parametrize("kind", ["ar1", "stalls", "lognormal"])
def test_the_interval_covers_the_true_median(kind):
    rng = np.random.default_rng({"ar1": 10, "stalls": 11, "lognormal": 12}[kind])
    hits, short_hits, short = 0, 0, 0
    widths = []
    for i in range(SERIES):
        n, phi, ranks = _draw(rng)
        samples, truth = synthetic(kind, rng, n, phi, ranks)
        est, _ = u.median_estimate(samples, resamples=SIM_RESAMPLES, seed=i)
        hits += est.includes(truth)
        widths.append(est.rel_half_width())
        if n < 60:
            short += 1
            short_hits += est.includes(truth)
    coverage = hits / SERIES
    print(f"\n{kind}: 95% interval covers the true median in {coverage:.1%} of {SERIES} series "
          f"(n 30-400, phi 0.3-0.7, 1-4 ranks; n < 60: {short_hits / short:.1%} of {short}); "
          f"median relative half-width {np.median(widths):.2%}")
    assert coverage >= 0.92


def test_a_a_comparisons_rarely_call_a_change():
    rng = np.random.default_rng(20)
    calls, equivalent = 0, 0
    for i in range(SERIES):
        n, phi, ranks = _draw(rng)
        kind = ("ar1", "stalls", "lognormal")[i % 3]
        a, _ = synthetic(kind, rng, n, phi, ranks)
        b, _ = synthetic(kind, rng, n, phi, ranks)
        result = u.compare(a, b, resamples=SIM_RESAMPLES, seed=2 * i)
        calls += result.verdict in ("slower", "faster")
        equivalent += result.verdict == "equivalent"
    print(f"\nA/A: a change called in {calls / SERIES:.1%} of {SERIES} pairs (min_effect 2%), "
          f"'equivalent' in {equivalent / SERIES:.1%}")
    assert calls / SERIES <= 0.05


POWER_STEPS = 200  # 2 ranks, AR(1) phi 0.5, 5% noise: the ratio's relative half-width is about 2%


def test_power_to_see_a_five_percent_shift():
    rng = np.random.default_rng(21)
    called, widths, trials = 0, [], 200
    for i in range(trials):
        a, _ = synthetic("ar1", rng, POWER_STEPS, 0.5, 2)
        b, _ = synthetic("ar1", rng, POWER_STEPS, 0.5, 2, scale=1.05)
        result = u.compare(a, b, resamples=SIM_RESAMPLES, seed=2 * i)
        called += result.verdict == "slower"
        widths.append(result.ratio.rel_half_width())
    width = float(np.median(widths))
    print(f"\npower: a 5% slower B called 'slower' in {called / trials:.1%} of {trials} pairs at n={POWER_STEPS} "
          f"steps x 2 ranks (ratio's relative half-width {width:.2%})")
    assert 0.015 <= width <= 0.025
    assert called / trials >= 0.90


def test_a_step_change_widens_the_interval():
    rng = np.random.default_rng(22)
    steady, _ = synthetic("ar1", rng, 200, 0.3, 1)
    changed = {0: [v * (1.1 if i >= 100 else 1.0) for i, v in enumerate(steady[0])]}
    plain, _ = u.median_estimate(steady, resamples=1000)
    shifted, _ = u.median_estimate(changed, resamples=1000)
    assert shifted.rel_half_width() > 1.5 * plain.rel_half_width()


def _drifting(rng: np.random.Generator, rounds: int, per_round: int, ranks: int, drift: float):
    samples: dict[int, list[float]] = {r: [] for r in range(ranks)}
    labels: dict[int, list[int]] = {r: [] for r in range(ranks)}
    for k in range(rounds):
        level = 1 + drift * rng.standard_normal()
        z = ar1(rng, per_round, 0.5, ranks)
        for r in range(ranks):
            samples[r] += list(BASE * level * (1 + 0.05 * z[r]))
            labels[r] += [k] * per_round
    return samples, labels


def test_rounds_widen_the_interval_and_cover_drift():
    drift = 0.03  # each round's level: 3% standard deviation around the process's
    rng = np.random.default_rng(23)
    big = rng.standard_normal(2_000_000)
    truth = float(np.median(BASE * (1 + drift * big) * (1 + 0.05 * rng.standard_normal(len(big)))))
    trials, covered, covered_flat, wider = 200, 0, 0, 0
    for i in range(trials):
        samples, labels = _drifting(rng, 8, 50, 2, drift)
        with_rounds, _ = u.median_estimate(samples, labels, resamples=SIM_RESAMPLES, seed=i)
        without, _ = u.median_estimate(samples, resamples=SIM_RESAMPLES, seed=i)
        covered += with_rounds.includes(truth)
        covered_flat += without.includes(truth)
        wider += with_rounds.rel_half_width() > without.rel_half_width()
    print(f"\nrounds (8 x 50 steps, 3% drift between rounds): covered {covered / trials:.1%} with rounds, "
          f"{covered_flat / trials:.1%} without; wider with rounds in {wider / trials:.1%}")
    assert wider / trials >= 0.9
    assert covered / trials >= 0.92 and covered > covered_flat


def test_propagated_speedup_covers_the_true_speedup():
    rng = np.random.default_rng(24)
    hits = 0
    for i in range(SERIES):
        n, phi, _ = _draw(rng)
        one, truth_one = synthetic("lognormal", rng, n, phi, 1)
        four, truth_four = synthetic("ar1", rng, n, phi, 4, scale=1.3)
        e1, r1 = u.median_estimate(one, resamples=SIM_RESAMPLES, seed=2 * i)
        e4, r4 = u.median_estimate(four, resamples=SIM_RESAMPLES, seed=2 * i + 1)
        speedup = u.propagate(lambda t1, tn: 4 * t1 / tn, r1, r4, value=4 * e1.value / e4.value)
        hits += speedup.includes(4 * truth_one / truth_four)
    print(f"\npropagate: the speedup interval covers the true speedup in {hits / SERIES:.1%} of {SERIES} runs")
    assert hits / SERIES >= 0.92


TAIL_SERIES = 200
Z95 = 1.6448536269514722  # standard normal quantile at 0.95


def test_the_step_p95_s_interval_covers_the_true_p95_from_the_steps_it_needs():
    """The p95 beside a tune's examples/s: the same block bootstrap for the 0.95 quantile, on AR(1) series of
    100-400 steps (the fewest ``precision.tail_steps`` allows), 1-4 ranks."""
    rng = np.random.default_rng(21)
    truth = BASE * (1 + 0.05 * Z95)
    hits, widths = 0, []
    for i in range(TAIL_SERIES):
        n = int(round(math.exp(rng.uniform(math.log(precision.tail_steps()), math.log(400)))))
        samples, _ = synthetic("ar1", rng, n, float(rng.uniform(0.3, 0.7)), int(rng.integers(1, 5)))
        reps = u.median_replicates(samples, resamples=SIM_RESAMPLES, seed=i, q=precision.TAIL)
        est = u.estimate(reps, u.pooled_median(samples, precision.TAIL))
        hits += est.includes(truth)
        widths.append(est.rel_half_width())
    coverage = hits / TAIL_SERIES
    print(f"\np95: 95% interval covers the true p95 in {coverage:.1%} of {TAIL_SERIES} series (n 100-400, phi 0.3-0.7, "
          f"1-4 ranks); median relative half-width {np.median(widths):.2%}")
    assert coverage >= 0.90
    assert precision.tail_steps() == 100 and precision.tail_steps(0.99) == 500 and precision.tail_steps(0.5) == 10


def test_the_bootstrap_s_row_quantile_is_numpy_s_with_the_padding_left_out():
    rng = np.random.default_rng(3)
    rows = rng.random((40, 37))
    rows[rng.random(rows.shape) < 0.3] = np.nan  # rounds and ranks of unequal length pad with NaN
    rows[0, 1:] = np.nan  # one value left
    for q in (0.05, 0.5, 0.75, 0.95, 0.99):
        np.testing.assert_allclose(u._row_quantiles(rows, q), np.nanquantile(rows, q, axis=1), rtol=1e-12, atol=0)
