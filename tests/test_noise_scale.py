"""The gradient noise scale against a known answer: a linear model on a fixed dataset, whose per-example
gradients at fixed parameters give tr(Sigma) and |G|^2 exactly; data-parallel steps simulated as DDP takes
them (each rank's mean gradient over its own examples, then their average), and the estimator's interval
holding the true B_noise about as often as it says."""

import numpy as np
import pytest

from ddptop.analysis import gradient_noise, noise_scale, synthetic
from ddptop.analysis.figures import Measured


def _problem():
    found = synthetic.gradient_problem()
    return found.grads, found.trace, found.true_sq


_syncs = synthetic.synchronisations


def test_the_per_step_estimates_are_unbiased_for_the_true_trace_and_squared_gradient():
    grads, trace, true_sq = _problem()
    small, big = _syncs(grads, 4, 8, 20000, np.random.default_rng(1))
    est_trace, est_true = gradient_noise.per_step(small, big, np.full(len(small), 8.0), np.full(len(small), 32.0))
    assert est_trace.mean() == pytest.approx(trace, rel=0.03)
    assert est_true.mean() == pytest.approx(true_sq, rel=0.05)


@pytest.mark.parametrize("ranks", [2, 4])
def test_the_true_noise_scale_lies_inside_the_interval_at_two_and_four_ranks(ranks):
    grads, trace, true_sq = _problem()
    truth = trace / true_sq
    small, big = _syncs(grads, ranks, 16, 400, np.random.default_rng(ranks))
    found = noise_scale.estimate(small, big, 16, 16 * ranks, resamples=1000)
    assert found is not None and found.resolved and found.syncs == 400
    low, high = found.b_noise.interval()
    assert low <= truth <= high, (truth, found.b_noise.value, low, high)
    assert (found.batch_small, found.batch_big) == (16, 16 * ranks)


def test_the_interval_holds_the_truth_about_as_often_as_it_says():
    """Over 120 simulated runs of 200 synchronisations at N=2: 95% intervals cover in 88-100% of them (the
    binomial spread of 120 runs around 95%); benchmarks/noise_coverage.py runs more, at more shapes."""
    grads, trace, true_sq = _problem()
    truth = trace / true_sq
    rng = np.random.default_rng(7)
    covered = 0
    for run in range(120):
        small, big = _syncs(grads, 2, 16, 200, rng)
        found = noise_scale.estimate(small, big, 16, 32, resamples=400, seed=run)
        low, high = found.b_noise.interval()
        covered += low <= truth <= high
    assert 0.88 <= covered / 120 <= 1.0, covered


def test_too_few_synchronisations_or_no_larger_global_batch_give_no_estimate():
    assert noise_scale.estimate([1.0] * 3, [0.5] * 3, 8, 16) is None
    assert noise_scale.estimate([1.0] * 20, [0.5] * 20, 8, 8) is None


def test_a_gradient_not_told_from_zero_is_not_resolved():
    """Pure noise: |G|^2 = 0, so its mean estimate straddles 0 and B_noise has no upper bound."""
    rng = np.random.default_rng(3)
    grads = rng.normal(size=(4000, 8))
    grads -= grads.mean(axis=0)
    small, big = _syncs(grads, 2, 16, 200, rng)
    found = noise_scale.estimate(small, big, 16, 32, resamples=500)
    assert found is not None and not found.resolved


def test_time_to_loss_speedup_follows_the_steps_to_the_same_loss():
    # N=8 at a global batch of 2048 against N=1 at 256 with B_noise 600: each step 7.2x the examples/s of one
    # rank's, a step time 0.9x the reference's
    speedup = noise_scale.time_to_loss_speedup(1 / 0.9, 600.0, 256, 2048)
    assert speedup.value == pytest.approx((1 / 0.9) * (1 + 600 / 256) / (1 + 600 / 2048))
    assert gradient_noise.example_worth(600.0, 256, 2048) == pytest.approx((1 + 256 / 600) / (1 + 2048 / 600))
    # unbounded noise: every example counts, steps to the loss fall as the batch grows
    unbounded = noise_scale.time_to_loss_speedup(Measured(1.0, np.array([1.0, 1.0])),
                                                 Measured(float("inf"), np.array([np.inf, 1e9])), 256, 2048)
    assert unbounded.value == pytest.approx(8.0) and unbounded.interval()[1] == pytest.approx(8.0, rel=1e-3)
