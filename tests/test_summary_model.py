"""The typed summary (``ddptop.report.schema``): every recorded run rebuilt gives its saved JSON, Markdown,
CSV and terminal report byte for byte (``tests/summary_golden.py`` wrote them); a document read and written
again is the same; keys it does not model are kept; a part of the wrong shape is refused by name; and a
misspelt field is the type checker's error."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ddptop.report import store
from ddptop.report.schema import Config, ScalingRow, Summary
from tests.conftest import REPO
from tests.summary_golden import RECORDED, golden_path, rendered


@pytest.mark.parametrize("name", RECORDED)
def test_rebuilt_summary_files_are_byte_for_byte_the_recorded_ones(name: str) -> None:
    for file, text in rendered(name).items():
        with open(golden_path(name, file), encoding="utf-8") as handle:
            assert text == handle.read(), f"{name}: {file} changed"


# -- the typed model: what it reads, keeps and refuses --------------------------------------------------------


def _golden_document(name: str) -> dict:
    with open(golden_path(name, "summary.json"), encoding="utf-8") as handle:
        return json.load(handle)


@pytest.mark.parametrize("name", RECORDED)
def test_a_summary_read_and_written_again_is_the_same_document(name: str) -> None:
    document = _golden_document(name)
    summary = Summary.from_json(document)
    assert json.dumps(summary.to_json(), indent=2) == json.dumps(document, indent=2)  # keys, order, values
    last = max(i for i, c in enumerate(summary.configs) if c.stats is not None)  # a batch out of memory has none
    config = summary.configs[last]
    assert config.stats is not None and config.stats.sec_iter.p50 == document["configs"][last]["stats"]["sec_iter"]["p50"]
    row = summary.scaling[0].rows[-1]
    found = document["scaling"][0]["rows"][-1]["speedup"]
    assert row.speedup == row.figure("speedup") and row.speedup is not None
    assert (row.speedup.value, row.speedup.ci, row.speedup.level) == (found["value"], found["ci"], found["level"])


def test_keys_it_does_not_model_are_kept_in_their_place() -> None:
    document = {"config_id": "c", "from_a_newer_ddptop": {"x": 1}, "model": "m", "stats": None}
    config = Config.from_json(document)
    assert config.model == "m" and config.stats is None
    assert list(config.to_json().items()) == list(document.items())
    config.measured_iters = 12  # a field set after reading is written after the keys that were read
    assert list(config.to_json()) == ["config_id", "from_a_newer_ddptop", "model", "stats", "measured_iters"]


def test_a_record_made_in_code_writes_every_field_in_declaration_order() -> None:
    row = ScalingRow(world_size=2, speedup=1.8, config_id="c")
    written = row.to_json()
    assert list(written)[:4] == ["world_size", "sec_iter", "ex_sec_total", "speedup"] and written["speedup"] == 1.8
    assert "not_saved" not in Summary().to_json()  # written only when a full disk kept something out


@pytest.mark.parametrize("where, value, said", [
    (("configs", 0, "stats"), [1, 2], "configs[0].stats is not a JSON object but a list"),
    (("scaling", 0, "rows"), {"a": 1}, "scaling[0].rows is not a JSON list but an object"),
    (("configs", 1, "launches", 0), "l0", "configs[1].launches[0] is not a JSON object but a string"),
    (("environment", "gpus"), True, "environment.gpus is not a JSON list but a boolean"),
])
def test_a_part_of_the_wrong_shape_is_refused_in_one_line_that_names_it(tmp_path, where, value, said) -> None:
    document = _golden_document("recorded-run")
    place = document
    for key in where[:-1]:
        place = place[key]
    place[where[-1]] = value
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(document))
    with pytest.raises(store.SummaryError) as refused:
        store.load_summary(str(path))
    assert str(refused.value) == f"{path} is damaged: summary.{said}"


def test_a_mistyped_field_is_found_by_the_type_checker(tmp_path) -> None:
    """The reason for the typed model: a misspelt figure is a checker's error, not a user's KeyError."""
    pytest.importorskip("mypy")
    probe = tmp_path / "probe.py"
    probe.write_text("from ddptop.report.schema import Summary\n\n\n"
                     "def first_speedup(summary: Summary) -> float | None:\n"
                     "    return summary.scaling[0].rows[0].spedup\n")
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary", "--follow-imports=silent", str(probe)],
                          cwd=REPO, capture_output=True, text=True, env=dict(os.environ, MYPYPATH=REPO))
    assert done.returncode == 1 and '"ScalingRow" has no attribute "spedup"' in done.stdout, done.stdout


def test_diff_compares_a_version_1_summary_with_a_current_run(tmp_path) -> None:
    """``ddptop diff`` of a summary saved by an older ddptop (schema version 1: earlier key names) and a run
    saved now: the old one is upgraded on reading and every configuration is compared."""
    from ddptop.report import keys
    from tests.conftest import ddptop

    old = _golden_document("recorded-cpu-run")
    old["schema_version"] = 1
    for table in old["scaling"]:
        for row in table["rows"]:
            for place, renamed in ((row, keys.ROW_RENAMED), (row.get("epoch") or {}, keys.EPOCH_RENAMED)):
                for new, earlier in renamed.items():
                    if new in place:
                        place[earlier] = place.pop(new)
    assert "seed002_comm_estimate_s" in json.dumps(old)
    old_path, new_path = tmp_path / "old.json", tmp_path / "new.json"
    old_path.write_text(json.dumps(old))
    new_path.write_text(json.dumps(_golden_document("recorded-cpu-run")))
    done = ddptop("diff", str(old_path), str(new_path), "--format", "json")
    assert done.returncode == 0, done.stderr
    compared = json.loads(done.stdout)
    assert [row["config_id"] for row in compared["configs"]] == [c["config_id"] for c in old["configs"]]
    assert all(row["ratio"] == pytest.approx(1.0) for row in compared["configs"] if row["ratio"] is not None)
