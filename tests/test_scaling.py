"""The scaling tables the live view shows are the saved summary's, and are rebuilt only when their inputs move."""

from __future__ import annotations

import copy
import json
import os
import shutil

import pytest

from ddptop.analysis import formulas, scaling
from ddptop.report import build, keys, store
from ddptop.report.schema import ScalingTable
from ddptop.live import live_scaling
from ddptop.run.session import Session
from tests.conftest import REPO

RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")

from .intervals_helpers import without_intervals


N2 = "resnet18/ddp/bs4/n2/gloo"


@pytest.fixture
def session():
    """The recorded run, its N=2 configuration given the no_sync steps and comm-hook figures it lacks."""
    loaded = Session.load(RECORDED)
    loaded.refresh(final=True)
    state = loaded.configs[N2]
    with loaded.lock:
        state.nosync = {0: [0.10, 0.11, 0.12], 1: [0.10, 0.13]}
        state.comm = {
            rank: {"bucket_comm_s": [0.02, 0.03], "bucket_sum_s": [0.04, 0.05], "hooked_step_s": [0.16, 0.17],
                   "bucket_bytes": [state.info["grad_bytes"]] * 2, "buckets": [2, 2], "ddp_logging": None}
            for rank in (0, 1)
        }
        state.revision += 1
    return loaded


def test_live_rows_equal_the_saved_summarys_rows(session):
    saved = build.build_summary(session).to_json()
    live = live_scaling.SessionScaling(session)
    rows = live.rows()
    # the live view does not bootstrap: its rows are the saved ones without their intervals
    assert {k: row.to_json() for k, row in rows.items()} == without_intervals(scaling.rows_by_config(saved["scaling"]))
    assert set(rows) == {"resnet18/ddp/bs4/n1/gloo", N2}
    n2 = rows[N2]
    assert n2.exposed_comm_fraction.value == pytest.approx(1 - 0.11 / n2.sec_iter.value)
    assert n2.bucket_comm_s == pytest.approx(0.025)
    assert n2.comm_estimate_from_t1_s.value > 0 and n2.bandwidth_from_t1_gbs > 0
    # the fit too; the saved recommendation weighs the intervals, the live one (never shown) cannot
    assert [without_intervals({**ScalingTable.from_json(t).to_json(), "recommendation": None})
            for t in live.tables] == [
        without_intervals({**t, "recommendation": None}) for t in saved["scaling"]]
    assert live_scaling.live_scaling(session) == rows  # the session-wide cache gives the same


def test_unchanged_inputs_are_not_recomputed(session, monkeypatch):
    calls = []
    fit = formulas.amdahl_fit
    monkeypatch.setattr(formulas, "amdahl_fit", lambda points: calls.append(points) or fit(points))
    live = live_scaling.SessionScaling(session)
    first = live.rows()
    assert len(calls) == 1
    assert live.rows() is first
    tables_rows = live.scaling.rows([live_scaling.live_entry(s) for s in session.ordered_states()])
    assert live.scaling.rows([live_scaling.live_entry(s) for s in session.ordered_states()]) is tables_rows  # equal inputs
    assert live.rows() is first  # and the typed rows are not made again
    assert len(calls) == 1
    assert live_scaling.live_scaling(session) is live_scaling.live_scaling(session)
    assert len(calls) == 2  # once for the session's own cache


def test_a_changed_p50_or_communication_figure_recomputes(session):
    live = scaling.LiveScaling(session.plan)
    entries = [live_scaling.live_entry(s) for s in session.ordered_states()]
    first = live.rows(entries)
    slower = copy.deepcopy(entries)
    n2 = next(e for e in slower if e["config_id"] == N2)
    n2["stats"]["sec_iter"]["p50"] *= 2
    second = live.rows(slower)
    assert second is not first
    assert second[n2["config_id"]]["speedup"] == pytest.approx(first[n2["config_id"]]["speedup"] / 2)
    n2["communication"]["exposed_comm_fraction"] = 0.5
    third = live.rows(slower)
    assert third is not second and third[n2["config_id"]]["exposed_comm_fraction"] == 0.5


def test_new_samples_reach_the_live_rows(session):
    live = live_scaling.SessionScaling(session)
    first = live.rows()
    state = session.configs[N2]
    with session.lock:
        state.add_samples(0, [10.0] * 1000)  # as the session's ingest does: samples, then a revision bump
        state.revision += 1
    second = live.rows()
    assert second is not first
    assert second[state.spec.config_id].sec_iter.value == pytest.approx(10.0)


def _as_v1(document: dict) -> dict:
    old = copy.deepcopy(document)
    old["schema_version"] = 1
    for table in old["scaling"]:
        for row in table["rows"]:
            for v2, v1 in keys.ROW_RENAMED.items():
                row[v1] = row.pop(v2)
            if row["epoch"]:
                for v2, v1 in keys.EPOCH_RENAMED.items():
                    row["epoch"][v1] = row["epoch"].pop(v2)
    return old


def test_a_version_1_summary_loads_as_the_current_version(session, tmp_path):
    current = without_intervals(json.loads(json.dumps(build.build_summary(session).to_json())))  # version 1 had none
    assert current["schema_version"] == store.SCHEMA_VERSION == 3
    row = current["scaling"][0]["rows"][-1]
    assert "comm_estimate_from_t1_s" in row and "grad_bytes_per_epoch" in row["epoch"]
    old = _as_v1(current)
    assert "seed002_comm_estimate_s" in old["scaling"][0]["rows"][-1]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(old))
    assert store.load_summary(str(path)).to_json() == current
    # a run directory holding a version 1 summary reads the same way
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    (run / store.SUMMARY_JSON).write_text(json.dumps(old))
    loaded, rebuilt = build.load_target(str(run))
    assert not rebuilt and loaded.to_json() == current


def test_an_unknown_summary_version_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"schema": store.SCHEMA, "schema_version": 4}))
    with pytest.raises(store.SummaryError, match="schema version 4"):
        store.load_summary(str(path))


def test_the_session_wide_cache_does_not_keep_a_session_alive(session):
    import gc
    import weakref

    probe = Session.load(session.run_dir)
    assert live_scaling.live_scaling(probe)  # rows made, and the session cached

    gone = weakref.ref(probe)
    del probe
    gc.collect()
    assert gone() is None
