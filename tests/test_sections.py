"""ddptop.report.sections: one list of the report's parts for the terminal, Markdown and the summary screen,
and a summary saved under schema version 1 (the earlier key names) rendering as its version 2 upgrade."""

from __future__ import annotations

import copy
import json
import os

import pytest
from rich.text import Text

from ddptop import units
from ddptop.report import (blocks, build, cells, communication_tables, compute_tables, csv_table, environment_tables,
                           keys, launch_tables, load_tables, problem_tables, sections, store)
from ddptop.report.schema import Summary

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")

from .intervals_helpers import without_intervals


def _estimate(value: float) -> dict:
    return {"value": value, "ci": None, "level": 0.95, "method": None}


def _with_new_keys(summary: dict) -> dict:
    """The recorded run's summary with every section filled and the renamed figures under their new names."""
    summary = copy.deepcopy(summary)
    for table in summary["scaling"]:
        for row in table["rows"]:
            for new, old in keys.RENAMED.items():
                row.pop(old, None)
                if isinstance(row.get("epoch"), dict):
                    row["epoch"].pop(old, None)
            row["comm_estimate_from_t1_s"] = _estimate(0.0123) if row["world_size"] > 1 else None
            row["bandwidth_from_t1_gbs"] = 1.5 if row["world_size"] > 1 else None
            row["epoch"] = {"epoch_examples": 50_000, "steps_per_epoch": 782, "grad_bytes_per_epoch": 3.6e10,
                            "grad_values_per_epoch": 9e9, "ring_bytes_per_rank_per_epoch": 1.8e10}
    for entry in summary["configs"]:
        entry["communication"] = {"step_s": 0.2, "compute_s": _estimate(0.15), "exposed_comm_s": _estimate(0.05),
                                  "exposed_comm_fraction": _estimate(0.25), "allreduce_bytes_per_rank": 46758048}
    summary["configs"][-1]["status"], summary["configs"][-1]["reason"] = "failed", "rank 1 exited with 1"
    summary["nodes"] = [{"node_rank": 0, "host": "a", "pid": 1, "role": "runner", "launches": []}]
    return summary


def _as_v1(summary: dict) -> dict:
    """The same summary as schema version 1 saved it."""
    summary = copy.deepcopy(summary)
    summary["schema_version"] = 1
    for table in summary["scaling"]:
        for row in table["rows"]:
            for place in (row, row.get("epoch") or {}):
                for new, old in keys.RENAMED.items():
                    if new in place:
                        place[old] = place.pop(new)
    return summary


@pytest.fixture(scope="module")
def document() -> dict:
    """The summary as its JSON document, to change parts of."""
    built, _ = build.load_target(RECORDED, rebuild=True)
    return _with_new_keys(built.to_json())


@pytest.fixture(scope="module")
def summary(document) -> Summary:
    return Summary.from_json(document)


def test_text_and_markdown_list_the_same_sections_in_the_same_order(summary):
    text_keys = [s.key for s, _ in sections.shown(summary, "text")]
    markdown_keys = [s.key for s, _ in sections.shown(summary, "markdown")]
    assert {"communication", "load", "problems", "nodes"} <= set(text_keys)
    # the terminal leads with the topology (as PyTorch's DDP benchmark does); Markdown adds environment and plan
    assert text_keys[0] == "topology"
    assert text_keys[1:] == [k for k in markdown_keys if k not in ("environment", "plan", "topology")]
    # and the documents themselves follow that order
    markdown = sections.markdown(summary)
    at = [markdown.index(f"\n## {sections.BY_KEY[k].title}\n") for k in markdown_keys]
    assert at == sorted(at)
    text = sections.text_report(summary)
    at = [text.index(block.strip().splitlines()[0]) for _, block in sections.shown(summary, "text") if block.strip()]
    assert at == sorted(at)


def test_the_closing_text_is_the_report_then_where_the_files_are(summary):
    paths = {"json": "s.json", "md": "s.md", "csv": "s.csv", "plots": "plots"}
    closing = sections.closing_text(summary, paths)
    assert closing == sections.text_report(summary) + "Summary: s.json  s.md  s.csv\nPlots: plots/ (PNG and SVG)\n"


def test_a_version_1_summary_and_its_upgrade_render_identical_reports(document, tmp_path):
    document = without_intervals(document)  # version 1 had no intervals
    old = _as_v1(document)
    assert "comm_estimate_from_t1_s" not in str(old) and keys.ROW_RENAMED["comm_estimate_from_t1_s"] in str(old)
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(old))
    upgraded = store.load_summary(str(path))
    assert upgraded.schema_version == store.SCHEMA_VERSION == 3
    current_document = json.loads(json.dumps(document))
    assert upgraded.to_json() == current_document
    current = Summary.from_json(current_document)
    assert sections.text_report(upgraded) == sections.text_report(current)
    assert sections.markdown(upgraded) == sections.markdown(current)
    assert csv_table.csv_text(upgraded) == csv_table.csv_text(current)
    text = sections.text_report(upgraded)
    assert "12.3 ms" in text and "t(N)-t(1) est." in text  # the estimate, under the method's name
    assert "33.5 GiB (gradient bytes × steps)" in text
    header, *rows = csv_table.csv_text(upgraded).splitlines()
    column = header.split(",").index("comm_estimate_from_t1_s")
    assert "0.0123" in [row.split(",")[column] for row in rows]


def test_no_earlier_key_name_is_written(summary):
    for rendered in (sections.text_report(summary), sections.markdown(summary), csv_table.csv_text(summary)):
        assert "seed" not in rendered.lower()


def _screen_as_it_was(summary: Summary, with_topology: bool) -> Text:
    """The summary screen's text before it used ``screen_sections``, kept to hold the two to the same bytes."""
    out = Text()
    body = sections.text_of("scaling", summary).rstrip() or "No scaling table: no configuration finished."
    out.append(body + "\n\n")
    deeper = "\n".join(part for part in (
        sections.text_of(key, summary) for key in (
            "communication", "stragglers", "compute", "verdict", "dp_vs_ddp", "batch_throughput", "collectives"))
        if part)
    if deeper:
        out.append(deeper + "\n")
    load = sections.text_of("load", summary)
    if load:
        out.append(load + "\n")
    problems = problem_tables.problems_text(summary)
    if problems:
        out.append("Not measured in full:\n", style="bold yellow")
        out.append(problems + "\n\n")
    out.append(launch_tables.overhead_line(summary) + "\n\n")
    if with_topology:
        out.append(environment_tables.topology_text(summary))
    return out


def _screen(summary: Summary, with_topology: bool) -> Text:
    out = Text()
    for heading, body, style in sections.screen_sections(summary, with_topology):
        if heading is not None:
            out.append(heading, style=style)
        out.append(body)
    return out


@pytest.mark.parametrize("with_topology", [False, True])
def test_screen_sections_draw_what_the_summary_screen_drew(summary, document, with_topology):
    empty = Summary.from_json({**document, "scaling": [], "configs": []})
    for case in (summary, empty):
        expected, got = _screen_as_it_was(case, with_topology), _screen(case, with_topology)
        assert got.plain == expected.plain
        assert got.spans == expected.spans
    assert "No scaling table" in _screen(empty, with_topology).plain
    headings = [(heading, style) for heading, _, style in sections.screen_sections(summary, with_topology) if heading]
    assert headings == [("Not measured in full:\n", "bold yellow")]


def test_the_step_time_block_says_its_ex_sec_is_per_rank_and_the_scaling_table_of_all_ranks(summary):
    """One run, two ex/sec: the percentile block's is one rank's (batch per rank over the step), the scaling
    table's all ranks'; each header says which, in the terminal and in summary.md alike."""
    text = sections.text_of("benchmark", summary)
    header = next(line for line in text.splitlines() if "sec/iter" in line)
    assert header.count("sec/iter") == 4 and header.count("ex/sec per rank") == 4, header
    assert "\n".join(sections.markdown_of("benchmark", summary)).count("ex/sec per rank") == 4
    two = next(e for e in summary.configs if e.world_size == 2 and e.mode == "ddp")
    row = next(line for line in text.splitlines() if f"-- {two.label:>8s}:" in line)
    per_rank = f"{units.rate(two.batch_size / two.stats.sec_iter.p50)}/s"
    # the figure is one rank's, and it ends where its header does
    assert row.index(per_rank) + len(per_rank) == header.index("ex/sec per rank") + len("ex/sec per rank")
    assert "ex/sec (all ranks)" in sections.text_of("scaling", summary)


def test_the_load_table_has_a_row_or_a_note_for_every_configuration(document):
    """A configuration without a telemetry reading in its measured window, and one not measured, are named
    under the load table with why they have no row (their note was stored, never printed)."""
    document = copy.deepcopy(document)
    quiet, lost = document["configs"][1], document["configs"][-1]
    quiet["telemetry"] = None
    quiet["validity"] = {"disturbed": False, "reasons": [], "readings": 0,
                         "notes": ["not checked: no telemetry reading during the measured steps"]}
    lost.update(stats=None, telemetry=None, validity=None, status="failed")
    summary = Summary.from_json(document)
    text = blocks.text(load_tables.load_block(summary))
    names = [cells.config_name(e) for e in summary.configs]
    listed = [name for name in names if any(line.strip().startswith(name) for line in text.splitlines())]
    assert listed == [names[0]] + names[2:-1]  # the rows: every configuration with its figures
    assert (f"{names[1]} (not checked: no telemetry reading during the measured steps)" in text
            and f"{names[-1]} (not measured: failed)" in text), text
    # one that failed before its first measured step, its launch read all the same: no row of a window it never had
    failed = copy.deepcopy(document)
    failed["configs"][-1].update(stats=None, status="failed", telemetry=document["configs"][0]["telemetry"])
    text = blocks.text(load_tables.load_block(Summary.from_json(failed)))
    assert not any(line.strip().startswith(names[-1]) for line in text.splitlines())
    assert f"{names[-1]} (not measured: failed)" in text, text
    # with no configuration read at all, the block still says why each has no row
    for entry in document["configs"]:
        entry["telemetry"] = None
    text = blocks.text(load_tables.load_block(Summary.from_json(document)))
    assert all(name in text for name in names), text


def test_the_communication_and_compute_tables_name_every_configuration_they_have_no_row_for(document):
    document = copy.deepcopy(document)
    plain, one, two = document["configs"]
    plain["communication"] = None  # no DDP: nothing synchronised
    two.update(stats=None, communication=None, status="failed")
    flops = {"per_step": 2e9, "dtype": "fp32", "achieved_per_device": 1e10, "achieved_total": 1e10}
    plain["flops"], one["flops"], two["flops"] = flops, None, None
    one["flops_note"] = "the counter failed: no formula"
    summary = Summary.from_json(document)
    names = [cells.config_name(e) for e in summary.configs]
    text = blocks.text(communication_tables.communication_block(summary))
    assert (f"No row for {names[0]} (no DDP: no gradients synchronised); {names[2]} (not measured: failed)."
            in text), text
    text = blocks.text(compute_tables.compute_block(summary))
    assert (f"No row for {names[1]} (no FLOP count: the counter failed: no formula); {names[2]} "
            "(not measured: failed)." in text), text
