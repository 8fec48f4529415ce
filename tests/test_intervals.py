"""Intervals on the summary's figures: every headline figure has one around it, and a straggler is flagged
only when its steps are slower beyond noise."""

import random

import pytest

from ddptop import units
from ddptop.analysis import intervals, stats
from ddptop.report import build
from ddptop.report.schema import Amdahl, ScalingTable, Summary
from ddptop.run.session import Session
from tests.intervals_helpers import flat_shape

RECORDED = "tests/data/recorded-run"


def test_every_headline_figure_of_a_summary_has_its_interval_around_it():
    session = Session.load(RECORDED)
    session.refresh(final=True)
    summary = flat_shape(build.build_summary(session).to_json())
    assert summary["uncertainty"]["confidence"] == 0.95 and "block bootstrap" in summary["uncertainty"]["method"]
    for entry in summary["configs"]:
        low, high = entry["stats"]["p50_ci"]
        assert low <= entry["stats"]["sec_iter"]["p50"] <= high
    table = summary["scaling"][0]
    figures = ("sec_iter", "ex_sec_total", "speedup", "efficiency", "relative_cost", "relative_su")
    for row in table["rows"]:
        for key in figures:
            low, high = row[f"{key}_ci"]
            assert low <= row[key] <= high, key
    assert table["rows"][0]["speedup_ci"] == [1.0, 1.0]  # the reference's speedup is 1 by definition
    low, high = table["ddp_overhead_at_reference_ci"]
    assert low <= table["ddp_overhead_at_reference"] <= high
    assert "serial_fraction_ci" in table["amdahl"]


def test_amdahl_fit_outside_what_the_law_allows_is_said_not_to_fit(tmp_path):
    """A speedup below 1 fits a serial fraction above 100%; bounded to 100% it would read "speedup can never
    pass 1.0", a law the data contradict. The text says the law does not fit, with the unbounded fraction and
    its interval (for one N > 1 that is the Karp-Flatt metric's), and the plot draws no Amdahl curve."""
    from ddptop.analysis import formulas
    from ddptop.report import plots, scaling_tables

    session = Session.load(RECORDED)
    session.refresh(final=True)
    summary = build.build_summary(session)
    table = summary.scaling[0]
    fit, two = table.amdahl, table.rows[1]
    assert fit.raw_serial_fraction.value == pytest.approx(two.karp_flatt.value)
    assert fit.raw_serial_fraction.ci == pytest.approx(two.karp_flatt.ci)
    inside = " ".join(scaling_tables.model_lines(table))
    assert "Amdahl fit over 1 world size above 1" in inside and "does not fit" not in inside

    for speedup, words in ((0.89, "the speedup is below 1"), (2.2, "the speedup is above N (superlinear)")):
        misfit = formulas.amdahl_fit([(2, speedup)])
        misfit["raw_serial_fraction_ci"] = [misfit["raw_serial_fraction"] - 0.05, misfit["raw_serial_fraction"] + 0.05]
        said = " ".join(scaling_tables.model_lines(ScalingTable.from_json({"amdahl": misfit, "rows": []})))
        assert "Amdahl's law does not fit over 1 world size above 1" in said and words in said, said
        assert "can never pass" not in said and "reaches" not in said
        fitted = units.with_interval(misfit["raw_serial_fraction"], misfit["raw_serial_fraction_ci"],
                                     lambda v: units.percent(v, 1))
        assert f"fitted serial fraction {fitted}" in said and "(" in fitted
    edge = formulas.amdahl_fit([(2, 0.99)])
    edge["raw_serial_fraction_ci"] = [0.9, 1.1]
    assert "cannot be ruled out" in " ".join(scaling_tables.model_lines(ScalingTable.from_json({"amdahl": edge, "rows": []})))

    plt = plots._pyplot()
    (tmp_path / "fits").mkdir()
    (tmp_path / "misfit").mkdir()
    plots._speedup(plt, summary, str(tmp_path / "fits"))
    assert 'id="amdahl-' in (tmp_path / "fits" / "speedup.svg").read_text(encoding="utf-8")
    table.amdahl = Amdahl.from_json(formulas.amdahl_fit([(2, 0.89)]))
    plots._speedup(plt, summary, str(tmp_path / "misfit"))
    assert 'id="amdahl-' not in (tmp_path / "misfit" / "speedup.svg").read_text(encoding="utf-8")


def _straggler_stats(samples):
    medians = {rank: stats.median(values) for rank, values in samples.items()}
    return {"straggler": stats.straggler(medians), "sec_iter": {"p50": stats.median([v for s in samples.values()
                                                                                    for v in s])}}


def test_a_straggler_is_flagged_only_beyond_noise():
    rng = random.Random(5)
    # four ranks: with two, the ranks' median sits halfway and no rank ever reads 5% above it
    steady = {r: [0.100 + rng.gauss(0, 0.001) for _ in range(200)] for r in range(3)}
    steady[3] = [0.110 + rng.gauss(0, 0.001) for _ in range(200)]  # 10% slower, quiet: a straggler
    noisy = {r: [0.100 * rng.lognormvariate(0, 0.4) for _ in range(30)] for r in range(3)}
    noisy[3] = [0.112 * rng.lognormvariate(0, 0.4) for _ in range(30)]  # slower, but inside the noise
    for samples, flagged in ((steady, True), (noisy, False)):
        figures = _straggler_stats(samples)
        assert figures["straggler"]["flagged"]  # by the medians alone, both look like stragglers
        intervals._straggler(figures, samples, "c")
        assert figures["straggler"]["flagged"] is flagged, figures["straggler"]
        assert figures["straggler"]["ratio"].low <= figures["straggler"]["ratio"].high


def test_throughput_per_batch_carries_its_interval_in_the_table_and_the_plot(tmp_path):
    """The batch-size table and plot: each measured batch with its 95% interval; a batch whose interval could
    not be had gets no bar (not a zero-length one, which would read as certainty), and the rest keep theirs."""
    import copy
    import math

    from ddptop.analysis import scaling
    from ddptop.report import plots, sections

    session = Session.load(RECORDED)
    session.refresh(final=True)
    summary = flat_shape(build.build_summary(session).to_json())
    ddp = next(e for e in summary["configs"] if e["mode"] == "ddp" and e["world_size"] == 2)
    batches = []
    for factor in (1, 2, 4):  # the same measurement standing for three batch sizes: what is checked is the path
        entry = copy.deepcopy(ddp)
        entry["batch_size"] *= factor
        entry["global_batch"] *= factor
        entry["stats"]["ex_sec_total_p50_ci"] = [factor * v for v in entry["stats"]["ex_sec_total_p50_ci"]]
        batches.append(entry)
    batches[1]["stats"]["p50_ci"] = batches[1]["stats"]["ex_sec_total_p50_ci"] = None  # too short to resample
    (table,) = scaling.batch_throughput(batches)
    rows = table["rows"]
    for row in (rows[0], rows[2]):
        low, high = row["ex_sec_total_ci"]
        assert low < row["ex_sec_total"] < high
    assert rows[1]["ex_sec_total_ci"] is None
    assert rows[0]["ex_sec_total_ci"] == ddp["stats"]["ex_sec_total_p50_ci"]  # the configuration's own, as shown
    only = Summary.from_json({"batch_throughput": [table]})
    text = sections.text_of("batch_throughput", only)
    first = next(line for line in text.splitlines() if line.split()[:1] == [str(rows[0]["batch_size"])])
    assert f"({rows[0]['ex_sec_total_ci'][0]:.1f}–{rows[0]['ex_sec_total_ci'][1]:.1f})" in first

    from ddptop.records import Estimate
    from ddptop.report import chart_data

    points = chart_data.points_of([(r.batch_size, r.ex_sec_total) for r in only.batch_throughput[0].rows])
    below, above = chart_data.error_bars(points)
    assert math.isnan(below[1]) and math.isnan(above[1])
    nan = float("nan")  # an interval the bootstrap could not fill is no interval either
    assert chart_data.error_bars(chart_data.points_of([(1.0, Estimate(value=1.0, ci=[nan, nan])),
                                                       (2.0, Estimate(value=2.0))])) is None
    assert below[0] == pytest.approx(rows[0]["ex_sec_total"] - rows[0]["ex_sec_total_ci"][0])
    plt = plots._pyplot()
    plots._batch_throughput(plt, only, str(tmp_path))
    drawn = (tmp_path / "batch_throughput.svg").read_text(encoding="utf-8")
    assert 'id="ci-throughput-' in drawn


def test_a_tune_s_step_p95_has_its_interval_only_from_the_steps_it_needs():
    """Two launches of a configuration: a p95 and its two-level interval once its steps (a step of every rank
    counting once) reach precision.tail_steps, and only the count below it; the tune's table shows the p95 or
    says why it is missing."""
    from ddptop.analysis import launches
    from ddptop.protocol import precision
    from ddptop.report import tuning_tables
    from ddptop.report.schema import TuneTable

    rng = random.Random(5)

    def entry(config_id, per_launch):
        samples = {str(r): [0.1 * (1 + 0.05 * rng.gauss(0, 1)) for _ in range(2 * per_launch)] for r in range(2)}
        pooled = sorted(v for values in samples.values() for v in values)
        return {"config_id": config_id, "samples": samples,
                "stats": {"sec_iter": {"p50": pooled[len(pooled) // 2], "p95": pooled[int(0.95 * (len(pooled) - 1))]}},
                "launches": [{"launch": "01", "used": True}, {"launch": "02", "used": True}],
                "launch_of_steps": {r: [[0, per_launch], [1, per_launch]] for r in samples}}

    enough, short = entry("a", precision.tail_steps() // 2), entry("b", precision.tail_steps() // 2 - 1)
    variance, _ = launches.estimates(intervals.fit_launches([enough, short]))
    intervals.add_tail_intervals([enough, short], variance)
    assert enough["stats"]["p95_steps"] == precision.tail_steps()
    low, high = enough["stats"]["sec_iter_p95_ci"]
    assert low <= enough["stats"]["sec_iter_p95"] <= high
    assert short["stats"]["p95_steps"] == precision.tail_steps() - 2 and "sec_iter_p95" not in short["stats"]
    rows = [{"variant": v, "what": v, "status": "ok", "sec_iter": 0.1, "sec_iter_ci": [0.09, 0.11],
             "verdict": "within noise",
             **{k: e["stats"].get(k) for k in ("sec_iter_p95", "sec_iter_p95_ci", "p95_steps")}}
            for v, e in (("default", enough), ("static_graph", short))]
    table = TuneTable.from_json({"model": "resnet18", "batch_size": 8, "world_size": 2, "backend": "gloo",
                                 "rows": rows, "recommended": []})
    from ddptop.protocol.modelspec import model_kind

    cells = [tuning_tables._tune_cells(row, model_kind(table.model)) for row in table.rows]
    p95 = tuning_tables.TUNE_HEADER.index("step p95")
    assert cells[0][p95] == units.estimate(table.rows[0].sec_iter_p95, units.seconds) and "(" in cells[0][p95]
    assert cells[1][p95] == units.DASH
    assert tuning_tables.tail_note(table.rows) == (
        "step p95: 95% of the steps took less; shown with its interval from 100 steps a configuration on; a row "
        "without one measured 98 (more --iters or --launches).")
