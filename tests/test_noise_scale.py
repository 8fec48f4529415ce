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
    assert noise_scale.worth(Measured(600.0), 256, 2048).value == pytest.approx((1 + 256 / 600) / (1 + 2048 / 600))
    assert noise_scale.worth(Measured(0.0), 256, 2048).value == pytest.approx(256 / 2048)  # no noise: B_ref / B_N
    assert noise_scale.worth(Measured(float("inf")), 256, 2048).value == 1.0  # unbounded: every example counts
    # unbounded noise: every example counts, steps to the loss fall as the batch grows
    unbounded = noise_scale.time_to_loss_speedup(Measured(1.0, np.array([1.0, 1.0])),
                                                 Measured(float("inf"), np.array([np.inf, 1e9])), 256, 2048)
    assert unbounded.value == pytest.approx(8.0) and unbounded.interval()[1] == pytest.approx(8.0, rel=1e-3)


def test_the_live_view_s_figure_is_the_summary_s_point_and_waits_for_enough_synchronisations():
    """``gradient_noise.so_far`` (no numpy, no interval) gives the value ``noise_scale.estimate`` reports, from
    the ranks' lists as the comm events carry them, and nothing below MIN_SYNCS."""
    grads, _, _ = _problem()
    rng = np.random.default_rng(3)
    picks = rng.integers(0, len(grads), size=(40, 2, 8))
    local = grads[picks].mean(axis=2)  # (syncs, ranks, features)
    averaged = np.sum(local.mean(axis=1) ** 2, axis=1).tolist()
    events = {rank: {"grad_sq_local": np.sum(local[:, rank] ** 2, axis=1).tolist(), "grad_sq_averaged": averaged,
                     "grad_batch_local": [8] * 40} for rank in range(2)}
    found = gradient_noise.synchronisations(gradient_noise.measured_pairs(events, {}), 2)
    summary = noise_scale.estimate(*found)
    assert gradient_noise.so_far(events, {}, 2) == pytest.approx(summary.b_noise.value, rel=1e-12)
    short = {rank: {k: v[: gradient_noise.MIN_SYNCS - 1] for k, v in event.items()} for rank, event in events.items()}
    assert gradient_noise.so_far(short, {}, 2) is None
    # a rank cut short: the others' synchronisations up to its last, which lock-step ranks share
    events[1] = {k: v[:-1] for k, v in events[1].items()}
    assert len(gradient_noise.synchronisations(gradient_noise.measured_pairs(events, {}), 2)[0]) == 39
    # a rank that sent nothing: the batch after the allreduce is not known, nothing is estimated
    assert gradient_noise.synchronisations(gradient_noise.measured_pairs({0: events[0]}, {}), 2) is None
    assert gradient_noise.synchronisations(gradient_noise.measured_pairs(events, {}), 4) is None


def test_unequal_batches_count_as_the_harmonic_mean_of_the_ranks():
    """Ranks of 4 and 12 examples average their means unweighted: the variance of the average is that of a
    batch of N / mean(1/b) examples, so the batches before and after are 1/mean(1/b) and N times it."""
    events = {0: {"grad_sq_local": [1.0] * 8, "grad_sq_averaged": [0.5] * 8, "grad_batch_local": [4] * 8},
              1: {"grad_sq_local": [1.0] * 8, "grad_sq_averaged": [0.5] * 8, "grad_batch_local": [12] * 8}}
    _, _, small, big = gradient_noise.synchronisations(gradient_noise.measured_pairs(events, {}), 2)
    assert small[0] == pytest.approx(6.0) and big[0] == pytest.approx(12.0)


def test_diff_says_two_runs_noise_scales_apart_only_where_their_intervals_do_not_overlap():
    from ddptop.report.diff import NOISE_APART, NOISE_WITHIN, noise_change
    from ddptop.report.schema import Config

    def config(value, low, high):
        return Config.from_json({"config_id": "c", "gradient_noise": {
            "b_noise": {"value": value, "ci": [low, high]}, "resolved": True, "syncs": 40}})

    assert noise_change("c", config(100, 90, 110), config(200, 180, 220))["verdict"] == NOISE_APART
    assert noise_change("c", config(100, 90, 110), config(105, 95, 115))["verdict"] == NOISE_WITHIN
    unresolved = Config.from_json({"config_id": "c", "gradient_noise": {"b_noise": {"value": 5.0}, "syncs": 40}})
    change = noise_change("c", config(100, 90, 110), unresolved)
    assert change["verdict"] is None and change["words_b"].startswith("not resolved")


def test_an_unbounded_share_of_the_replicates_keeps_the_upper_end_open():
    """Where |G|^2's resampled mean is not above 0 in more than 2.5% of the replicates, B_noise's upper end is
    infinite: the estimate is not resolved (dropping those replicates would close the interval too low)."""
    rng = np.random.default_rng(5)
    true_sq = rng.normal(0.3, 0.1, 2000)
    true_sq[:80] = -1.0  # 4% of the replicates with no positive |G|^2
    found = noise_scale.NoiseScale(noise_scale.derive(noise_scale._ratio, Measured(1.0, np.full(2000, 1.0)),
                                                      Measured(0.3, true_sq)),
                                   Measured(1.0, np.full(2000, 1.0)), Measured(0.3, true_sq), 40, 8.0, 16.0)
    assert found.b_noise_interval()[1] == float("inf") and not found.resolved


def test_a_negative_trace_estimate_is_a_noise_scale_of_zero_not_below():
    assert noise_scale._ratio(-2.0, 1.0) == 0.0
    assert list(noise_scale._ratio(np.array([-1.0, 2.0]), np.array([1.0, 1.0]))) == [0.0, 2.0]
