"""One computation per figure: ``figures.derive`` applies a formula to the point and to its replicates together,
and the scaling and thread tables take every figure of a row from it."""

import numpy as np
import pytest

from ddptop.analysis import formulas, stats, uncertainty
from ddptop.analysis.figures import Measured, derive, put


def test_a_derived_figure_is_its_formula_over_the_point_and_over_the_replicates_of_one_resample():
    rng = np.random.default_rng(3)
    t1 = Measured(0.2, 0.2 + rng.normal(0, 0.01, 500))
    t2 = Measured(0.25, 0.25 + rng.normal(0, 0.01, 500))
    speedup = derive(lambda a, b: 2 * a / b, t1, t2)
    assert speedup.value == 2 * 0.2 / 0.25
    assert np.array_equal(speedup.replicates, 2 * t1.replicates / t2.replicates)  # replicate i with replicate i
    low, high = speedup.interval()
    assert (low, high) == tuple(uncertainty.estimate(2 * t1.replicates / t2.replicates, speedup.value).ci)
    assert low <= speedup.value <= high
    # a figure of a figure: efficiency from the speedup, the same resamples all the way
    efficiency = derive(formulas.efficiency, speedup, 2)
    assert efficiency.interval() == [low / 2, high / 2]
    record = efficiency.estimate()
    assert record.value == efficiency.value and record.ci == [low / 2, high / 2] and record.method


def test_an_input_without_replicates_gives_a_figure_without_an_interval():
    figure = derive(formulas.throughput, 64, Measured(0.5, None))
    assert figure.value == 128 and figure.replicates is None and figure.interval() is None
    assert figure.estimate().ci is None and figure.estimate().method is None
    row: dict = {}
    put(row, "ex_sec_total", figure)
    assert row == {"ex_sec_total": 128, "ex_sec_total_ci": None}


def test_every_figure_of_a_scaling_row_and_its_interval_come_from_one_formula():
    """Speedup, efficiency, relative cost and SU, Karp-Flatt: each interval is its formula over the speedup's
    replicates, so no interval can disagree with its value (the fault that let a point and its interval part)."""
    rng = np.random.default_rng(5)
    reps = {n: t * (1 + rng.normal(0, 0.02, 400)) for n, t in ((1, 0.10), (2, 0.12), (4, 0.15))}
    points = [stats.ScalingPoint(n, t, 16 * n, n, 0, reps[n]) for n, t in ((1, 0.10), (2, 0.12), (4, 0.15))]
    figures = stats.scaling_rows(points)
    for row in figures.rows:
        n = row["world_size"]
        speedup = figures.speedups[n]
        assert row["speedup"] == speedup.value == 1 * (16 * n / row["sec_iter"]) / (16 / 0.10)
        assert row["efficiency_ci"] == derive(formulas.efficiency, speedup, n).interval()
        assert row["relative_cost_ci"] == derive(formulas.relative_cost, n, speedup).interval()
        for key in ("sec_iter", "ex_sec_total", "speedup", "efficiency", "relative_cost", "relative_su"):
            low, high = row[f"{key}_ci"]
            assert low <= row[key] <= high, key
        if n > 1:
            karp = figures.karp_flatt[n]
            assert karp.value == pytest.approx(formulas.karp_flatt(row["speedup"], n))
    assert figures.karp_flatt[1] is None
    # no replicates (the live view): the same values, no interval key
    plain = stats.scaling_rows([stats.ScalingPoint(p.world_size, p.sec_iter, p.global_batch, p.cores, 0)
                                for p in points])
    assert [r["speedup"] for r in plain.rows] == [r["speedup"] for r in figures.rows]
    assert not any(k.endswith("_ci") for r in plain.rows for k in r)
