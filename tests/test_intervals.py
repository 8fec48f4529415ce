"""Intervals on the summary's figures: every headline figure has one around it, and a straggler is flagged
only when its steps are slower beyond noise."""

import random

from ddptop.analysis import intervals, stats
from ddptop.report import build
from ddptop.session import Session

RECORDED = "tests/data/recorded-run"


def test_every_headline_figure_of_a_summary_has_its_interval_around_it():
    session = Session.load(RECORDED)
    session.refresh(final=True)
    summary = build.build_summary(session)
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
        assert figures["straggler"]["ratio_ci"][0] <= figures["straggler"]["ratio_ci"][1]
