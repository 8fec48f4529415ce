"""``ddptop diff`` on summaries built from synthetic step times: A/A says "within noise", a 10% slower B is
"slower" and fails ``--fail-on-regression 5``; the JSON shape; rounds when a summary has them."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from ddptop.report import diff as diff_mod
from ddptop.report.schema import Summary
from tests.conftest import ddptop

CONFIGS = (("m/no_ddp/bs8/n1/gloo", 1, 0.080), ("m/ddp/bs8/n1/gloo", 1, 0.085), ("m/ddp/bs8/n2/gloo", 2, 0.120))


def _steps(rng: np.random.Generator, ranks: int, n: int, median: float, phi: float = 0.5) -> dict[str, list[float]]:
    """AR(1) step times (5% noise) shared 70% across the ranks, with a stall every 10th step."""
    noise = rng.standard_normal((ranks + 1, n + 50))
    x = np.empty_like(noise)
    x[:, 0] = noise[:, 0]
    for i in range(1, n + 50):
        x[:, i] = phi * x[:, i - 1] + math.sqrt(1 - phi * phi) * noise[:, i]
    z = math.sqrt(0.7) * x[0, 50:] + math.sqrt(0.3) * x[1:, 50:]
    stall = np.where(np.arange(n) % 10 == 3, 3.0, 1.0)
    return {str(r): list(median * (1 + 0.05 * z[r]) * stall) for r in range(ranks)}


def _diff(a: dict, b: dict, **options) -> dict:
    """diff_summaries of two summary documents, read as a saved summary is."""
    return diff_mod.diff_summaries(Summary.from_json(a), Summary.from_json(b), **options)


def summary(rng: np.random.Generator, slower: float = 1.0, n: int = 300, rounds: int = 0) -> dict:
    configs, rows = [], []
    for config_id, world, median in CONFIGS:
        samples = _steps(rng, world, n, median * slower)
        ordered = np.sort(np.concatenate([np.asarray(v) for v in samples.values()]))
        entry = {
            "config_id": config_id, "label": config_id, "status": "ok", "world_size": world,
            "samples": samples,
            "stats": {"sec_iter": {p: float(np.percentile(ordered, q)) for p, q in
                                   (("p50", 50), ("p75", 75), ("p90", 90), ("p95", 95), ("p99", 99))}},
        }
        if rounds:
            entry["rounds_of_steps"] = {r: [i * rounds // n for i in range(n)] for r in samples}
        configs.append(entry)
        if "/ddp/" in config_id:
            rows.append({"config_id": config_id, "label": config_id, "speedup": float(world),
                         "efficiency": 1.0})
    return {"schema": "ddptop.summary", "schema_version": 2, "name": "synthetic", "run_dir": "synthetic",
            "environment": {"host": "h"}, "plan": {"iters": n}, "configs": configs,
            "scaling": [{"rows": rows}], "overhead": {}}


def _write(tmp_path, name: str, data: dict) -> str:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return str(path)


def test_a_a_is_within_noise_for_every_configuration():
    for trial in range(3):
        a = summary(np.random.default_rng(100 + trial))
        b = summary(np.random.default_rng(200 + trial))
        result = _diff(a, b, resamples=500)
        assert [r["verdict"] for r in result["configs"]] != []
        for row in result["configs"]:
            assert row["verdict"] in ("within noise", "equivalent"), row
            assert abs(row["ratio"] - 1) < 0.05
        assert result["regressions"] == []


def test_ten_percent_slower_fails_the_regression_gate(tmp_path):
    a = _write(tmp_path, "a", summary(np.random.default_rng(1)))
    b = _write(tmp_path, "b", summary(np.random.default_rng(2), slower=1.10))
    done = ddptop("diff", a, b, "--fail-on-regression", "5")
    assert done.returncode == 1, done.stderr
    assert "slower" in done.stdout and "Regressions:" in done.stdout and "Failing: 3" in done.stdout
    # the same regression under a laxer gate passes; without a gate diff only reports
    assert ddptop("diff", a, b, "--fail-on-regression", "20").returncode == 0
    assert ddptop("diff", a, b).returncode == 0
    # A/A through the command line: exit 0 under the gate
    again = _write(tmp_path, "again", summary(np.random.default_rng(3)))
    same = ddptop("diff", a, again, "--fail-on-regression", "5", "--format", "json")
    assert same.returncode == 0, same.stderr
    assert all(r["verdict"] in ("within noise", "equivalent") for r in json.loads(same.stdout)["configs"])


def test_json_shape_and_bad_input(tmp_path):
    a = _write(tmp_path, "a", summary(np.random.default_rng(5)))
    b = _write(tmp_path, "b", summary(np.random.default_rng(6), slower=0.85))
    done = ddptop("diff", a, b, "--format", "json", "--min-effect", "0.03", "--fail-on-regression", "5")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    assert result["min_effect"] == 0.03 and result["confidence"] == 0.95 and "bootstrap" in result["method"]
    assert result["regressions"] == [] and result["fail_on_regression"] == {"pct": 5.0, "failing": []}
    for row in result["configs"]:
        assert set(row) >= {"config_id", "verdict", "ratio", "ratio_ci", "p50_a", "p50_b", "p50_change",
                            "samples_a", "samples_b", "min_effect", "launches_a", "launches_b", "levels", "disturbed"}
        assert row["verdict"] == "faster"
        low, high = row["ratio_ci"]
        assert low <= row["ratio"] <= high < 0.97
    md = ddptop("diff", a, b, "--format", "md")
    assert md.returncode == 0 and "verdict" in md.stdout and "| --- |" in md.stdout.replace("|---|", "| --- |")
    assert ddptop("diff", a, b, "--fail-on-regression", "-1").returncode == 2
    assert ddptop("diff", a, b, "--min-effect", "1.5").returncode == 2
    deprecated = ddptop("diff", a, b, "--alpha", "0.05")
    assert deprecated.returncode == 0 and "deprecated" in deprecated.stderr


def test_launches_are_used_when_present_and_missing_samples_are_not_comparable():
    a = summary(np.random.default_rng(7))
    b = summary(np.random.default_rng(8))
    for entry in a["configs"] + b["configs"]:  # each configuration's steps from two launches, half each
        n = len(entry["samples"]["0"])
        entry["launches"] = [{"launch": "l0", "used": True}, {"launch": "l1", "used": True}]
        entry["launch_of_steps"] = {r: [[0, n // 2], [1, n - n // 2]] for r in entry["samples"]}
    result = _diff(a, b, resamples=300)
    assert all(row["launches_a"] == row["launches_b"] == 2 for row in result["configs"])
    assert result["launch_variance"]["estimated"] and all(row["levels"] == "launches" for row in result["configs"])
    del b["configs"][0]["samples"]
    result = _diff(a, b, resamples=300)
    assert result["configs"][0]["verdict"] == "not comparable" and result["configs"][0]["ratio"] is None
    assert result["configs"][1]["verdict"] != "not comparable"
    text = diff_mod.diff_text(result)
    assert "not comparable" in text and "B/A" in text and "two levels" in text


def test_summaries_without_launches_compare_within_launch_and_say_so():
    result = _diff(summary(np.random.default_rng(7)), summary(np.random.default_rng(8)),
                                     resamples=300)
    assert not result["launch_variance"]["estimated"]
    assert "within-launch only" in diff_mod.diff_text(result)


@pytest.mark.parametrize("threshold, expected", [(0.0, 3), (0.08, None), (0.2, 0)])
def test_regressions_threshold(threshold, expected):
    """A configuration fails the gate when it is slower by more than the threshold beyond noise: the low end
    of its ratio's interval past it, not the point ratio (10% slower with a low end at 9% fails 8%, one
    with a low end at 6% does not)."""
    a = summary(np.random.default_rng(9))
    b = summary(np.random.default_rng(10), slower=1.10)
    result = _diff(a, b, resamples=500)
    failing = [r["config_id"] for r in diff_mod.regressions(result, threshold)]
    if expected is not None:
        assert len(failing) == expected
    else:
        assert all(r["ratio"] - 1 > threshold for r in result["configs"])  # every point ratio is past 8%
        assert failing == [r["config_id"] for r in result["configs"] if r["ratio_ci"][0] - 1 > threshold]
        assert len(failing) < 3


def test_a_disturbed_side_is_named_beside_the_verdict():
    a, b = summary(np.random.default_rng(7)), summary(np.random.default_rng(8))
    b["configs"][0]["validity"] = {"disturbed": True, "reasons": ["other processes used 1.4 cores"]}
    result = _diff(a, b)
    assert result["configs"][0]["disturbed"] == {"b": ["other processes used 1.4 cores"]}
    assert not result["configs"][1]["disturbed"]
    assert "B disturbed: other processes used 1.4 cores" in diff_mod.diff_text(result)


def test_a_plan_key_that_prints_the_same_on_both_sides_does_not_differ():
    from ddptop.report.diff import differing_keys

    built_here = {"backends": ("gloo",), "world_sizes": (1, 2), "device": "cpu"}
    read_from_json = {"backends": ["gloo"], "world_sizes": [1, 2], "device": "cpu"}
    assert differing_keys(built_here, read_from_json) == []
    assert differing_keys(built_here, {**read_from_json, "world_sizes": [1, 4]}) == [
        {"key": "world_sizes", "a": [1, 2], "b": [1, 4]}]


def _recorded_before(summary: dict) -> dict:
    """A script's summary as an older ddptop wrote it: its model and ids by the script's absolute path."""
    text = json.dumps(summary)
    typed = summary["configs"][0]["model"]
    return json.loads(text.replace(f'"{typed}', f'"script:{summary["plan"]["script"][0]}'))


def test_two_checkouts_of_one_script_pair_by_its_name_and_arguments(tmp_path, monkeypatch):
    """The same script copied into two folders, run from each: its configurations pair in ``ddptop diff`` (by
    the script as typed and its arguments, not its absolute path), also as an older ddptop recorded them, and
    another argument is another configuration."""
    from ddptop.report import build
    from tests.test_script_report import script_run_in

    def saved(folder: str, *args: str) -> dict:
        summary, _ = build.load_target(script_run_in(tmp_path / folder, monkeypatch, *args), rebuild=True)
        return summary.to_json()

    a, b = saved("a", "--flag", "1"), saved("b", "--flag", "1")
    assert a["plan"]["script"][0] != b["plan"]["script"][0]
    for pair in ((a, b), (_recorded_before(a), _recorded_before(b)), (a, _recorded_before(b))):
        diff = _diff(*pair)
        assert (diff["only_a"], diff["only_b"]) == ([], []), diff["only_a"]
        assert [r["config_id"] for r in diff["configs"]] == ["script:train.py --flag 1/n1/gloo",
                                                              "script:train.py --flag 1/n2/gloo"]
        assert [r["verdict"] for r in diff["configs"]] == ["equivalent", "equivalent"]
        assert len(diff["scaling"]) == 2
    other = _diff(a, saved("c", "--flag", "2"))
    assert not other["configs"] and len(other["only_a"]) == 2
    done = ddptop("diff", _write(tmp_path, "a", _recorded_before(a)), _write(tmp_path, "b", b))
    assert done.returncode == 0, done.stderr
    assert "Only in" not in done.stdout and "script:train.py --flag 1/n2/gloo" in done.stdout, done.stdout


def test_diff_json_keeps_the_launch_spread_beside_its_interval():
    """An output, not a summary: each figure and its ``_ci`` side by side (docs/summary-schema.md)."""
    from ddptop.report import build

    summary, _ = build.load_target(str(Path(__file__).parent / "data" / "recorded-cpu-run"))
    spread = diff_mod.diff_summaries(summary, summary, resamples=200)["launch_variance"]
    assert spread["estimated"] and isinstance(spread["relative_sd"], float)
    low, high = spread["relative_sd_ci"]
    assert low <= spread["relative_sd"] <= high and spread["relative_sd_method"].startswith("moment estimate")
