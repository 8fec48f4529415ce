"""A summary that contradicts itself is found, by the figure's path and values (``ddptop.report.consistency``).

Each invariant is broken by hand in a recorded run's summary (tests/data/golden) or in a small summary, and
the violation must name the path and the values; the recorded runs, as saved and as rebuilt from their
events, contradict themselves nowhere. Where the code wrote a contradiction (the launch spread, a script's
shrinking step called within 2%, a fit under "no scaling to judge", a load table without a row), a test runs
the code that wrote it and checks what it writes now.
"""

from __future__ import annotations

import copy
import json
import math
import os
import shutil

import pytest

from ddptop.analysis import launches, scaling
from ddptop.report import build, consistency, store
from ddptop.report.consistency import check
from ddptop.report.schema import Summary
from tests.conftest import REPO
from tests.intervals_helpers import flat_shape
from tests.test_script_report import Plan, judged, script_entry

DATA = os.path.join(REPO, "tests", "data")
SAVED = ["golden/recorded-run.summary.json", "golden/recorded-cpu-run.summary.json", "h100/default/summary.json",
         "h100/oom/summary.json", "h100/spread-second-machine/summary.json", "h100/tune/summary.json"]
RECORDED = ["recorded-run", "recorded-cpu-run", "h100/default", "h100/oom", "h100/spread-second-machine",
            "h100/tune"]


def golden(name: str = "recorded-run") -> dict:
    """A recorded run's summary in the flat shape (a figure beside its ``_ci``) that summaries before version 3
    held: the check reads both, and a figure broken by hand is one number to change."""
    with open(os.path.join(DATA, "golden", f"{name}.summary.json"), encoding="utf-8") as handle:
        return flat_shape(json.load(handle))


def one(found: list[consistency.Violation], path: str) -> consistency.Violation:
    at = [v for v in found if v.path == path]
    assert len(at) == 1, "\n".join(v.format() for v in found) or "no violation"
    return at[0]


def formatted(found: list[consistency.Violation]) -> str:
    return "\n".join(v.format() for v in found)


# -- the recorded runs contradict themselves nowhere ------------------------------------------------------------


@pytest.mark.parametrize("path", SAVED)
def test_a_recorded_run_s_saved_summary_is_consistent(path):
    with open(os.path.join(DATA, path), encoding="utf-8") as handle:
        assert check(json.load(handle)) == [], path


@pytest.mark.parametrize("name", RECORDED)
def test_a_recorded_run_rebuilt_from_its_events_is_consistent(tmp_path, name):
    run = tmp_path / "RUN"
    shutil.copytree(os.path.join(DATA, name), run)
    summary, rebuilt = build.load_target(str(run), rebuild=True)
    assert rebuilt
    found = check(summary.to_json())
    assert found == [], formatted(found)


# -- 1. every figure inside its interval --------------------------------------------------------------------


def test_a_figure_outside_its_interval_is_named_with_its_value_and_interval():
    doc = golden()
    doc["scaling"][0]["rows"][1]["speedup"] = 1.5  # its interval: 1.08-1.29
    found = one(check(doc), "scaling[0].rows[1].speedup")
    assert found.invariant == consistency.INTERVALS and found.values["value"] == 1.5
    assert found.values["ci"] == pytest.approx([1.0757, 1.2880], rel=1e-3)
    line = found.format()
    assert "\n" not in line and line.startswith("scaling[0].rows[1].speedup: figure outside its 95% interval")
    assert "value=1.5" in line and "ci=[1.07569, 1.28797]" in line


def test_the_intervals_beside_a_figure_of_another_name_are_read_where_the_figure_is():
    doc = golden()
    stats = doc["configs"][2]["stats"]
    stats["sec_iter"]["p50"] = 0.5  # p50_ci is sec_iter.p50's
    stats["ex_sec_total"]["p50"] = 8.0  # ex_sec_total_p50_ci is ex_sec_total.p50's
    stats["ex_sec_replica"]["p50"] = 4.0
    paths = {v.path for v in check(doc) if v.invariant == consistency.INTERVALS}
    assert paths == {"configs[2].stats.sec_iter.p50", "configs[2].stats.ex_sec_total.p50",
                     "configs[2].stats.ex_sec_replica.p50"}


def test_an_interval_whose_figure_cannot_be_found_is_reported():
    doc = golden()
    doc["scaling"][0]["rows"][1]["goodput_ci"] = [1.0, 2.0]
    found = one(check(doc), "scaling[0].rows[1].goodput_ci")
    assert "no figure it belongs to" in found.message


def test_no_interval_is_fine_infinite_ends_are_fine_and_an_upside_down_one_is_not():
    doc = golden()
    row = doc["scaling"][0]["rows"][1]
    row["speedup_ci"], row["efficiency_ci"], row["karp_flatt_ci"] = None, [math.nan, math.nan], [0.1, math.inf]
    assert check(doc) == []
    row["relative_su_ci"] = [0.95, 0.75]
    found = one(check(doc), "scaling[0].rows[1].relative_su_ci")
    assert found.values == {"low": 0.95, "high": 0.75}


def test_an_interval_beside_no_figure_is_reported():
    doc = golden()
    doc["scaling"][0]["rows"][1]["speedup"] = None
    found = one(check(doc), "scaling[0].rows[1].speedup")
    assert "no figure inside it" in found.message


def _nested(record: dict, name: str) -> None:
    """``name`` and ``name_ci`` folded into one estimate record, as the summary writes them from version 3."""
    record[name] = {"value": record[name], "ci": record.pop(f"{name}_ci"), "level": 0.95, "method": "bootstrap"}


def test_the_nested_estimate_shape_is_read_as_the_flat_pair():
    doc = golden()
    row = doc["scaling"][0]["rows"][1]
    for name in ("speedup", "efficiency", "sec_iter"):
        _nested(row, name)
    assert check(doc) == []
    row["speedup"]["value"] = 0.9
    found = one(check(doc), "scaling[0].rows[1].speedup")
    assert found.values == {"value": 0.9, "ci": pytest.approx([1.0757, 1.2880], rel=1e-3)}
    row["speedup"]["value"] = None
    assert "no figure inside it" in one(check(doc), "scaling[0].rows[1].speedup").message


def test_the_launch_to_launch_spread_outside_its_own_interval_is_found():
    doc = golden("recorded-cpu-run")
    doc["uncertainty"]["launch_variance"].update(relative_sd=0.0, relative_sd_ci=[0.008, 0.095])
    found = one(check(doc), "uncertainty.launch_variance.relative_sd")
    assert found.values == {"value": 0.0, "ci": [0.008, 0.095]}


def test_the_launch_variance_the_code_writes_holds_its_figure_inside_its_interval():
    variance = launches.LaunchVariance(between_ss=0.002, within_share=0.004, df=4, configs=2, launches=6,
                                       resamples=400)
    assert check({"uncertainty": {"launch_variance": variance.to_json()}}) == []


# -- 2. verdict words against their figures -----------------------------------------------------------------


def _script_summary(text: str, ratio: float, ci: list[float], change: str) -> dict:
    less = {"median_s": 0.0076, "median_s_ci": [0.0070, 0.0082], "reference_world_size": 1, "levels": "launches",
            "ratio": ratio, "ratio_ci": ci, "min_effect": 0.02, "change": change, "per_example": False}
    return {"configs": [{"config_id": "script:/t.py/n2/gloo", "model": "script:/t.py", "mode": "ddp",
                         "world_size": 2, "step_less_wait": less, "verdict": {"kind": "compute-bound", "text": text}}]}


def test_within_two_percent_of_a_ratio_of_0_76_is_found():
    text = ("compute-bound: the step less its data wait is 0.76x N=1's (95% CI 0.69–0.82), within 2% of it; "
            "data wait 1.0% of the step, under 10%")
    found = check(_script_summary(text, 0.76, [0.69, 0.82], "faster"))
    violation = one(found, "configs[0].verdict.text")
    assert violation.invariant == consistency.VERDICTS and "within 2% of it" in violation.message
    assert violation.values["ratio"] == 0.76 and violation.values["ci"] == [0.69, 0.82]
    fine = text.replace("0.76x", "1.00x").replace("0.69–0.82", "0.99–1.01")
    assert check(_script_summary(fine, 1.0, [0.99, 1.01], "equivalent")) == []


def test_grew_needs_the_interval_above_one_and_fell_below():
    grew = ("waiting on the other ranks: the step less its data wait is 1.01x N=1's (95% CI 0.97–1.05), grown "
            "beyond noise (more than 2%)")
    doc = _script_summary(grew, 1.01, [0.97, 1.05], "within noise")
    doc["configs"][0]["verdict"]["kind"] = "waiting on the other ranks"
    messages = {v.path: v.message for v in check(doc)}
    assert "says it grew" in messages["configs[0].verdict.text"]
    assert "did not grow" in messages["configs[0].verdict.kind"]
    # the margin as change_words writes it: an interval above 1 but not above 1.02 has not grown by more than 2%
    margin = ("waiting on the other ranks: the step less its data wait is 1.01x N=1's (95% CI 1.005–1.015), grew "
              "beyond noise (by more than 2%)")
    assert "not above 1.02" in one(check(_script_summary(margin, 1.01, [1.005, 1.015], "slower")),
                                   "configs[0].verdict.text").message
    fell = "compute-bound: the step less its data wait is 1.10x N=1's (95% CI 1.05–1.15), shrank beyond noise"
    assert "says it fell" in one(check(_script_summary(fell, 1.1, [1.05, 1.15], "slower")),
                                 "configs[0].verdict.text").message


def test_a_sentence_whose_ratio_is_not_the_figure_s_is_found():
    text = "scaling within noise: the step less its data wait is 1.30x N=1's (95% CI 0.90–1.20)"
    found = one(check(_script_summary(text, 1.05, [0.9, 1.2], "within noise")), "configs[0].verdict.text")
    assert "not the figure's" in found.message


def test_a_change_word_that_its_interval_does_not_give_is_found():
    text = "compute-bound: the step less its data wait is 1.00x N=1's (95% CI 0.99–1.01), within 2% of it"
    found = one(check(_script_summary(text, 1.0, [0.99, 1.01], "slower")), "configs[0].step_less_wait.change")
    assert found.values["change"] == "slower" and found.values["interval_gives"] == "equivalent"


def test_the_verdict_the_code_writes_for_a_step_that_shrank_matches_its_ratio():
    entries = list(judged(script_entry(1, busy_s=0.010, wait_s=0.0001), script_entry(2, busy_s=0.0075, wait_s=0.0001)))
    assert entries[1]["step_less_wait"]["change"] == "faster" and entries[1]["verdict"]["kind"] == "compute-bound"
    found = [v for v in check({"configs": entries}) if v.invariant == consistency.VERDICTS]
    assert found == [], formatted(found)


def test_the_verdicts_the_code_writes_for_a_step_that_grew_or_held_match_their_ratios():
    for busy in (0.016, 0.010):
        entries = list(judged(script_entry(1, busy_s=0.010), script_entry(2, busy_s=busy)))
        found = check({"configs": entries, "scaling": scaling.scaling_tables(entries, Plan())})
        assert found == [], formatted(found)


def test_a_verdict_kind_its_figures_do_not_allow_is_found():
    doc = golden("recorded-cpu-run")
    entry = doc["configs"][3]  # balanced: exposed communication's interval across both thresholds
    ci = entry["communication"]["exposed_comm_fraction_ci"]
    entry["verdict"]["kind"] = "communication-bound"
    found = one(check(doc), "configs[3].verdict.kind")
    assert found.values["ci"] == ci and "does not clear 0.25" in found.message


def test_a_tuning_or_strategy_verdict_its_interval_does_not_give_is_found():
    row = {"variant": "amp", "config_id": "m/ddp/bs8/n1/gloo/amp", "step_ratio": 0.8, "step_ratio_ci": [0.7, 0.9],
           "speedup": 1.25, "speedup_ci": [1 / 0.9, 1 / 0.7], "verdict": "equivalent"}
    doc = {"tuning": [{"min_effect": 0.02, "rows": [row], "recommended": ["amp"]}],
           "strategies": [{"min_effect": 0.02, "rows": [{**row, "verdict": "slower"}]}]}
    paths = {v.path: v for v in check(doc)}
    assert paths["tuning[0].rows[0].verdict"].values["interval_gives"] == "faster"
    assert paths["strategies[0].rows[0].verdict"].values["interval_gives"] == "faster"
    assert paths["tuning[0].recommended"].values == {"variant": "amp", "verdict": "equivalent"}


def test_a_recommendation_that_says_more_than_the_efficiency_s_interval_is_found():
    doc = golden()  # "Efficiency falls below 70% already at N=2 (57%, 95% CI 54–64%)"
    doc["scaling"][0]["rows"][1]["efficiency_ci"] = [0.55, 0.75]
    found = one(check(doc), "scaling[0].rows[1].efficiency")
    assert "says below 70%" in found.message and found.values["ci"] == [0.55, 0.75]


def test_a_straggler_flagged_within_noise_and_a_best_split_or_a_worth_it_beyond_it_are_found():
    doc = golden()
    doc["configs"][2]["stats"]["straggler"]["flagged"] = True  # its ratio's interval: 0.94-1.07
    doc["core_budget"] = [{"best_config_id": "a", "ratio": 1.01, "ratio_ci": [0.99, 1.03]}]
    doc["devices_compared"] = [{"relative_su": 0.5, "relative_su_ci": [0.4, 0.6], "worth_it": None}]
    paths = {v.path for v in check(doc)}
    assert {"configs[2].stats.straggler.flagged", "core_budget[0].best_config_id",
            "devices_compared[0].worth_it"} <= paths


# -- 3. nothing fitted where there is nothing to judge ------------------------------------------------------


def test_a_fit_or_a_projection_under_no_scaling_to_judge_is_found():
    doc = golden("recorded-cpu-run")
    table = doc["scaling"][0]
    assert table["amdahl"] and table["projection"]["points"]
    assert check(doc) == []
    table["not_data_parallel"] = "not data-parallel: each rank trains alone (the script made no process group)"
    found = {v.path: v for v in check(doc) if v.invariant == consistency.NOTHING_TO_JUDGE}
    assert set(found) == {"scaling[0].amdahl", "scaling[0].projection"}
    assert found["scaling[0].amdahl"].values == {"why": "not_data_parallel"}


def test_a_fit_over_a_single_world_size_is_found():
    doc = golden()
    doc["scaling"][0]["rows"] = doc["scaling"][0]["rows"][:1]
    assert "scaling[0].amdahl" in {v.path for v in check(doc)}


def test_the_code_fits_nothing_where_it_says_there_is_no_scaling_to_judge():
    alone = {"process_group": False, "group_world_size": None, "launch_world_size": 2, "spawned": 0}
    entries = list(judged(script_entry(1, seen={**alone, "launch_world_size": 1}), script_entry(2, seen=alone)))
    (table,) = scaling.scaling_tables(entries, Plan())
    found = [v for v in check({"configs": entries, "scaling": [table]}) if v.invariant == consistency.NOTHING_TO_JUDGE]
    assert found == [], formatted(found)


# -- 4. totals are the per-rank figures times the ranks -----------------------------------------------------


def test_a_total_that_is_not_the_per_rank_figure_times_the_ranks_is_found():
    doc = golden()
    stats = doc["configs"][2]["stats"]
    stats["ex_sec_total"]["p90"] *= 1.01
    found = [v for v in check(doc) if v.path == "configs[2].stats.ex_sec_total.p90"]
    assert {v.message for v in found} == {"not the per-rank examples/s times the ranks",
                                          "not the global batch over the step"}
    assert found[0].values["ex_sec_replica"] == stats["ex_sec_replica"]["p90"] and found[0].values["factor"] == 2


def test_a_global_batch_that_is_not_the_batch_times_the_ranks_is_found():
    doc = golden()
    doc["configs"][2]["global_batch"] = 6
    found = one(check(doc), "configs[2].global_batch")
    assert found.values == {"global_batch": 6, "batch_size": 4, "world_size": 2}


def test_a_script_s_total_is_its_counted_global_batch_not_the_median_rank_s_times_n():
    entries = list(judged(script_entry(1), script_entry(2)))
    entry = entries[1]
    entry.update(batch_size=32, global_batch=63)  # one rank drew 31 a step
    p50 = entry["stats"]["sec_iter"]["p50"]
    entry["stats"].update(ex_sec_replica={"p50": 32 / p50}, ex_sec_total={"p50": 63 / p50})
    found = [v for v in check({"configs": entries}) if v.invariant == consistency.TOTALS]
    assert found == [], formatted(found)
    entry["stats"]["ex_sec_total"]["p50"] = 64 / p50
    assert "configs[1].stats.ex_sec_total.p50" in {v.path for v in check({"configs": entries})}


# -- 5. every configuration measured has a row or a note ----------------------------------------------------


def test_a_configuration_measured_without_a_row_is_found_unless_a_note_names_it():
    doc = golden()
    table = doc["scaling"][0]
    table["rows"] = table["rows"][:1]
    found = one(check(doc), "configs[2].config_id")
    assert found.invariant == consistency.COVERAGE and found.values == {"config_id": "resnet18/ddp/bs4/n2/gloo"}
    table["notes"] = ["resnet18/ddp/bs4/n2/gloo: left out, its steps were disturbed"]
    assert "configs[2].config_id" not in {v.path for v in check(doc)}


@pytest.mark.parametrize("model", [None, "script:train.py --lr 0.1"])
def test_a_configuration_measured_without_a_load_row_is_covered_by_the_note_that_names_it(model):
    """The note names a configuration as its rows would: a built-in by its model and batch, a script by its
    command alone (a script's second world size read no telemetry in its short window, and the check
    did not know the note's name for it)."""
    from ddptop.report import sections

    doc = golden("recorded-cpu-run")
    doc["configs"][1]["telemetry"] = None
    if model:
        doc["configs"][1]["model"] = model
    assert "configs[1].telemetry" not in {v.path for v in check(doc)}
    label = doc["configs"][1]["label"]
    shown = sections.text_report(Summary.from_json(doc))
    assert any(line.strip().startswith("No row for") and label in line for line in shown.splitlines()), shown


@pytest.mark.parametrize("table", ["communication", "compute"])
def test_a_configuration_a_rendered_table_drops_without_its_note_is_found(table, monkeypatch):
    """The compute vs communication and FLOP/s tables are made by the report alone: a table that left a
    configuration out without the note naming it (its note made to say nothing here) is found; with its note,
    every configuration of the recorded run is a row or named."""
    from ddptop.report import communication_tables, compute_tables

    doc = golden("recorded-cpu-run")
    assert [v for v in check(doc) if v.invariant == consistency.COVERAGE] == []
    module = communication_tables if table == "communication" else compute_tables
    monkeypatch.setattr(module, "unlisted_note", lambda *args: None)
    if table == "compute":  # the DataParallel row left out, as a table of DDP alone would
        doc["configs"][2]["flops"] = None
    found = [v for v in check(doc) if v.invariant == consistency.COVERAGE]
    assert found and all(consistency.ROWS_RENDERED[table] in v.message for v in found), formatted(found)


def test_a_variant_or_a_dataparallel_configuration_without_its_table_is_found():
    doc = golden("recorded-cpu-run")
    doc["dp_vs_ddp"] = []
    assert "configs[2].mode" in {v.path for v in check(doc)}


def test_the_last_configuration_measured_after_the_last_reading_keeps_a_load_row_or_a_note(tmp_path):
    run = tmp_path / "RUN"
    shutil.copytree(os.path.join(DATA, "recorded-run"), run)
    # the last configuration's measured window: config_end at t, measured for measure_s before it
    with open(run / "launches" / "02-n2-gloo" / "events" / "rank-0.jsonl", encoding="utf-8") as handle:
        end = [json.loads(line) for line in handle if '"config_end"' in line][-1]
    start = end["t"] - end["measure_s"]
    lines = (run / "telemetry.jsonl").read_text(encoding="utf-8").splitlines(keepends=True)
    (run / "telemetry.jsonl").write_text("".join(line for line in lines if json.loads(line)["t"] < start))
    summary, _ = build.load_target(str(run), rebuild=True)
    assert summary.configs[2].stats is not None
    found = check(summary.to_json())
    assert found == [], formatted(found)


# -- every summary saved is checked -----------------------------------------------------------------------------


def _broken_summary() -> Summary:
    doc = golden()
    doc["scaling"][0]["rows"][1]["speedup"] = 1.5
    return Summary.from_json(doc)


def test_saving_a_summary_that_contradicts_itself_raises_with_every_violation(tmp_path, monkeypatch):
    monkeypatch.setenv(store.CHECK_ENV, "1")
    with pytest.raises(consistency.InconsistentSummary) as raised:
        store.save_summary(_broken_summary(), str(tmp_path))
    assert [v.path for v in raised.value.violations] == ["scaling[0].rows[1].speedup"]
    message = str(raised.value)
    assert "contradicts itself in 1 place(s)" in message
    assert "scaling[0].rows[1].speedup: its value lay outside its interval, which was dropped" in message
    assert (tmp_path / "summary.json").exists()  # written first, to be read


def test_without_the_variable_a_summary_is_saved_unchecked(tmp_path, monkeypatch):
    monkeypatch.delenv(store.CHECK_ENV, raising=False)
    paths = store.save_summary(_broken_summary(), str(tmp_path))
    assert os.path.exists(paths["json"])


def test_the_test_session_checks_every_summary_its_subprocesses_write_too():
    assert os.environ.get(store.CHECK_ENV) == "1"


def test_a_summary_is_checked_unchanged():
    doc = golden()
    before = copy.deepcopy(doc)
    check(doc)
    assert doc == before


def test_an_interval_dropped_for_not_holding_its_value_is_found_unless_an_older_ddptop_wrote_it():
    doc = json.loads(json.dumps(golden_nested()))
    row = doc["scaling"][0]["rows"][1]
    row["speedup"] = {"value": 2.5, "ci": None, "level": 0.95,
                      "method": "block bootstrap within each launch: the value lay outside its interval, which was "
                                "dropped: [1.6, 1.9]"}
    found = one(check(doc), "scaling[0].rows[1].speedup")
    assert "was dropped" in found.message and found.values["value"] == 2.5
    row["speedup"]["method"] = "as recorded by an older ddptop: " + row["speedup"]["method"].split(": ", 1)[1]
    assert check(doc) == []


def test_a_median_s_estimate_is_the_percentile_beside_it():
    doc = golden_nested()
    doc["configs"][2]["stats"]["p50"]["value"] *= 1.001  # still inside its interval, no longer the p50 shown
    found = one(check(doc), "configs[2].stats.p50")
    assert "differs from sec_iter.p50" in found.message


def golden_nested(name: str = "recorded-run") -> dict:
    with open(os.path.join(DATA, "golden", f"{name}.summary.json"), encoding="utf-8") as handle:
        return json.load(handle)
