"""The estimate record: one figure with its interval, its level and how both were obtained.

Every figure of the summary that has an interval is one ``Estimate``: it refuses a value outside its interval,
reads the flat shape that analysis writes and summaries before version 3 held (``speedup`` beside
``speedup_ci``), and writes itself nested. The launch-to-launch spread's estimate and interval come from one
method, so a spread clamped at 0 lies inside its own interval.
"""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest

from ddptop.analysis import launches
from ddptop.records import Estimate, SchemaError, estimates_in
from ddptop.report import store
from ddptop.report.launch_tables import launch_spread_line
from ddptop.report.schema import BOOTSTRAP, OVER_LAUNCHES, ScalingRow, StepFigures, Summary
from tests.intervals_helpers import flat_shape
from tests.summary_golden import RECORDED, golden_path


def test_an_estimate_refuses_a_value_outside_its_interval():
    with pytest.raises(SchemaError, match="outside its interval"):
        Estimate(value=0.0, ci=[0.008, 0.095])
    assert Estimate(value=0.05, ci=[0.008, 0.095]).includes(0.05)
    assert Estimate(value=1.0, ci=[1.0, 1.0]).ci == [1.0, 1.0]  # exact: the reference's speedup


def test_an_interval_of_nan_is_no_interval():
    found = Estimate(value=2.0, ci=[math.nan, math.nan])
    assert found.ci is None and found.low is None and not found.includes(2.0)


def test_the_flat_shape_is_read_into_one_record_and_written_back_nested():
    row = ScalingRow.from_json({"world_size": 2, "speedup": 1.8, "speedup_ci": [1.6, 1.9], "config_id": "c"})
    assert row.speedup == Estimate(value=1.8, ci=[1.6, 1.9], method=BOOTSTRAP)
    written = row.to_json()
    assert "speedup_ci" not in written
    assert written["speedup"] == {"value": 1.8, "ci": [1.6, 1.9], "level": 0.95, "method": BOOTSTRAP}
    assert ScalingRow.from_json(json.loads(json.dumps(written))) == row


def test_a_median_kept_beside_its_percentiles_is_one_estimate():
    stats = StepFigures.from_json({"n": 10, "sec_iter": {"p50": 0.1, "p90": 0.12}, "p50_ci": [0.09, 0.11],
                                   "p50_levels": "launches"})
    assert stats.p50 == Estimate(value=0.1, ci=[0.09, 0.11], method=OVER_LAUNCHES)
    assert stats.sec_iter.p50 == 0.1 and "p50_ci" not in stats.to_json()


def test_a_flat_figure_outside_its_interval_keeps_its_value_without_that_interval_and_says_why():
    # the constructor refuses it; read from the flat shape, the summary is not lost over it, the interval is
    row = ScalingRow.from_json({"speedup": 2.5, "speedup_ci": [1.6, 1.9]}, "rows")
    assert row.speedup.value == 2.5 and row.speedup.ci is None and row.speedup.dropped
    assert row.speedup.method == f"{BOOTSTRAP}: the value lay outside its interval, which was dropped: [1.6, 1.9]"


def _spread_of(between_ss: float, within_share: float, df: int) -> launches.LaunchVariance:
    return launches.LaunchVariance(between_ss=between_ss, within_share=within_share, df=df, configs=df,
                                   launches=2 * df)


def test_a_spread_clamped_at_zero_lies_inside_its_interval_and_says_it_was_clamped():
    # the launches differ less than their steps' noise explains: the moment estimate is clamped at 0
    variance = _spread_of(between_ss=0.0004, within_share=0.001, df=2)
    low, high = variance.relative_sd_interval()
    assert variance.relative_sd == 0.0
    assert low <= variance.relative_sd <= high
    assert "clamped at 0" in variance.relative_sd_method()
    found = Estimate(value=variance.relative_sd, ci=[low, high], method=variance.relative_sd_method())
    assert found.low == 0.0


def test_a_spread_that_was_estimated_lies_inside_its_interval_without_a_clamp():
    rng = np.random.default_rng(3)
    for _ in range(50):
        df = int(rng.integers(1, 12))
        within = float(rng.uniform(0, 0.01))
        variance = _spread_of(between_ss=within + float(rng.uniform(0, 0.2)), within_share=within, df=df)
        low, high = variance.relative_sd_interval()
        assert low <= variance.relative_sd <= high, (df, within, variance.between_ss)
        assert "clamped" not in variance.relative_sd_method()


def _older_summary(tmp_path, relative_sd: float, ci: list[float]) -> str:
    """The recorded CPU run's summary as version 2 wrote it: flat pairs, and the launch spread given."""
    with open(golden_path("recorded-cpu-run", "summary.json"), encoding="utf-8") as handle:
        document = json.load(handle)
    flat = flat_shape(document)
    flat["schema_version"] = 2
    flat["uncertainty"]["launch_variance"].update(relative_sd=relative_sd, relative_sd_ci=ci)
    flat["uncertainty"]["launch_variance"].pop("relative_sd_method", None)
    path = os.path.join(tmp_path, "summary.json")
    with open(path, "w", encoding="utf-8") as handle:
        json.dump(flat, handle)
    return path


def test_a_summary_written_before_the_record_reads_into_the_same_figures(tmp_path):
    path = _older_summary(tmp_path, relative_sd=4.9501039539332865, ci=[2.0148513196987423, 37.137490944954614])
    older = store.load_summary(path)
    current = store.load_summary(golden_path("recorded-cpu-run", "summary.json"))
    values = {p: (e.value, e.ci) for p, e in estimates_in(older)}
    assert values == {p: (e.value, e.ci) for p, e in estimates_in(current)}
    assert len(values) > 40


def test_an_older_spread_outside_its_own_interval_is_read_without_that_interval_and_says_why(tmp_path):
    # what ddptop wrote before: "Launch-to-launch spread 0.0% (0.8%-9.5%)"
    summary = store.load_summary(_older_summary(tmp_path, relative_sd=0.0, ci=[0.008, 0.095]))
    spread = summary.uncertainty.launch_variance.relative_sd
    assert spread.value == 0.0 and spread.ci is None
    assert spread.dropped and spread.method.startswith("as recorded by an older ddptop")
    line = launch_spread_line(summary)
    assert "spread 0.0% of the step time" in line and "0.8" not in line


@pytest.mark.parametrize("name", RECORDED)
def test_every_estimate_of_a_recorded_run_holds_its_value(name):
    summary = store.load_summary(golden_path(name, "summary.json"))
    found = list(estimates_in(summary))
    assert found and all(e.ci is None or e.ci[0] <= e.value <= e.ci[1] for _, e in found)
    assert all(e.method for _, e in found if e.ci is not None)


def test_each_figure_says_how_it_was_obtained_a_launch_s_own_one_level_a_clamped_one_its_clamp():
    """With the launch-to-launch spread estimated, the configuration's figures are bootstrapped over launches;
    a launch's own median stays within that launch; a figure of a clamped estimator says its clamp; a
    telemetry share says it is Student's t."""
    from ddptop.records import CLAMPED_AT_0, CLAMPED_TO_01, ONE_LAUNCH, STUDENT_T

    summary = Summary.from_json({
        "uncertainty": {"launch_variance": {"estimated": True, "relative_sd": 0.05, "relative_sd_ci": [0.01, 0.1]}},
        "configs": [{"config_id": "c", "stats": {"n": 10, "sec_iter": {"p50": 0.1}, "p50_ci": [0.09, 0.11]},
                     "launches": [{"launch": "01", "p50": 0.1, "p50_ci": [0.095, 0.105]}],
                     "communication": {"exposed_comm_s": 0.0, "exposed_comm_s_ci": [0.0, 0.001]},
                     "telemetry": {"gpu_idle": {"share": 0.3, "share_ci": [0.2, 0.4]}}}],
        "scaling": [{"rows": [], "amdahl": {"serial_fraction": 0.0, "serial_fraction_ci": [0.0, 0.02],
                                            "points": 1}}]})
    (entry,) = summary.configs
    assert entry.stats.p50.method == OVER_LAUNCHES
    assert entry.launches[0].p50.method == ONE_LAUNCH
    assert entry.communication.exposed_comm_s.method == OVER_LAUNCHES + CLAMPED_AT_0
    assert entry.telemetry.gpu_idle.share.method == STUDENT_T
    assert summary.scaling[0].amdahl.serial_fraction.method == OVER_LAUNCHES + CLAMPED_TO_01
    # written and read again: the same words, not relabelled twice
    again = Summary.from_json(json.loads(json.dumps(summary.to_json())))
    assert [(p, e.method) for p, e in estimates_in(again)] == [(p, e.method) for p, e in estimates_in(summary)]
