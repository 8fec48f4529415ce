"""watch and view: the TUI over a run directory that another process writes, or wrote."""

import asyncio
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from ddptop.tui.panels import ConfigTable

from ddptop.tui.app import DdptopApp, SummaryApp, SummaryScreen
from ddptop.run.snapshot import RunPhase
from ddptop.live.recorded_run import RecordedRun
from ddptop.report.schema import Summary

from .conftest import REPO, ddptop, ddptop_process, wait_path
from .tui_helpers import summary_text

RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")


def statuses(app) -> list[str]:
    table = app.query_one("#configs", ConfigTable)
    return [str(table.get_cell(key, "status")) for key in table.rows]


@pytest.mark.slow
@pytest.mark.smoke
def test_watch_follows_a_headless_run_to_its_final_summary(tmp_path):
    run_dir = tmp_path / "run"
    writer = ddptop_process(
        "run", "--headless", "--out", str(run_dir), "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32",
        "--num-classes", "10", "--batch-sizes", "4", "--warmup", "2", "--iters", "600", "--no-baseline",
        "--world-sizes", "1", "--bucket-cap-mb", "25,1",  # two configurations in one launch
        "--comm-iters", "0", "--no-collectives", "--launches", "1", "--no-plots", env={"DDPTOP_FAKE_NVML": "dgx1"},
    )
    try:
        wait_path(run_dir / "plan.json", timeout=120)
        seen_lines, seen_statuses, shown = asyncio.run(follow(str(run_dir)))
        output, _ = writer.communicate(timeout=300)
    finally:
        writer.kill()
    assert writer.returncode == 0, output
    # it followed the run while it ran, not only its end
    assert any(f"watching pid {writer.pid}" in line for line in seen_lines)
    assert any("running 1M/1P" in line for line in seen_lines)
    # the first word: a busy machine adds its mark, "!", to a running configuration's status
    assert ["running", "pending"] in [[status.split()[0] for status in row] for row in seen_statuses]
    # and at the end shows the writer's own final summary, the one on disk
    with open(run_dir / "summary.json", encoding="utf-8") as handle:
        assert shown == json.load(handle)
    assert shown["complete"] and [c["status"] for c in shown["configs"]] == ["ok", "ok"]


async def follow(run_dir: str):
    app = DdptopApp.for_recorded(run_dir, fps=8, open_summary="when_done")
    seen_lines, seen_statuses = [], []
    async with app.run_test(size=(120, 40)) as pilot:
        deadline = time.monotonic() + 300
        while not isinstance(app.screen, SummaryScreen):
            assert time.monotonic() < deadline, "the summary never opened"
            seen_lines.append(str(app.query_one("#status-line").render()))
            seen_statuses.append(statuses(app))
            await pilot.pause(0.2)
        text = await summary_text(app, pilot)
        assert "Sweep complete" in text and "Saved:" in text
        shown = app.screen.summary.to_json()
        await pilot.press("escape")
        # "ok", or "ok ! other processes used 0.9 cores" where a busy machine disturbed a launch: said, still ok
        assert [s.split()[0] for s in statuses(app)] == ["ok", "ok"], statuses(app)
        assert "finished" in str(app.query_one("#status-line").render())
        await pilot.press("n")  # only the writer may skip: said, not done
        await pilot.pause()
        assert any("Only looking" in str(n.message) for n in app._notifications)
        await pilot.press("q")
    return seen_lines, seen_statuses, shown


def opened_on_summary(run_dir: str, open_summary: str, then) -> tuple[str, object]:
    """The app over a run directory opens on its summary screen: its text, and what ``then`` reads after Esc."""

    async def drive():
        app = DdptopApp.for_recorded(run_dir, open_summary=open_summary)
        async with app.run_test(size=(140, 40)) as pilot:
            text = await summary_text(app, pilot)
            assert isinstance(app.screen, SummaryScreen)
            await pilot.press("escape")
            after = await then(app, pilot)
            await pilot.press("q")
        return text, after

    return asyncio.run(drive())


def test_view_of_a_recorded_run_opens_on_its_summary_and_goes_back_to_the_tables():
    async def tables_and_topology(app, pilot):
        table_statuses = statuses(app)
        await pilot.press("3")
        return table_statuses, str(app.query_one("#topology").render())

    text, (table_statuses, topology) = opened_on_summary(RECORDED, "now", tables_and_topology)
    # the recorded run has no summary.json: built from its events, and said so
    assert "Sweep complete" in text and "Scaling: resnet18" in text and "saved no final summary" in text
    assert table_statuses == ["ok", "ok", "ok"] and "NV2" in topology
    assert not os.path.exists(os.path.join(RECORDED, "summary.json"))  # a viewer writes nothing


def test_view_of_a_lone_summary_shows_tables_chart_and_topology(tmp_path):
    run_dir = str(tmp_path / "run")  # a copy: report saves its rebuild beside the events
    shutil.copytree(RECORDED, run_dir)
    done = ddptop("report", run_dir, "--format", "json")
    summary = json.loads(done.stdout)

    async def drive():
        app = SummaryApp(Summary.from_json(summary), {"json": str(tmp_path / "summary.json")})
        async with app.run_test(size=(140, 60)) as pilot:
            text = await summary_text(app, pilot)
            await pilot.press("escape")  # nothing behind it: leaves
            await pilot.pause()
        return text, app.return_value

    text, code = asyncio.run(drive())
    assert "Scaling: resnet18" in text and "GPU0" in text and "NV1" in text and code == 0


def rewrite_runner(run_dir: str, edit) -> None:
    """Edit the list of runner.jsonl events of a copied run in place."""
    path = os.path.join(run_dir, "runner.jsonl")
    with open(path, encoding="utf-8") as handle:
        events = edit([json.loads(line) for line in handle])
    with open(path, "w", encoding="utf-8") as handle:
        handle.writelines(json.dumps(e) + "\n" for e in events)


def stalled_copy(tmp_path) -> str:
    """The recorded run as it would be if its ddptop had died mid-sweep: no sweep_end, its pid gone."""
    run_dir = str(tmp_path / "stalled")
    shutil.copytree(RECORDED, run_dir)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()

    def died(events):
        events[0].update(pid=dead.pid, host=os.uname().nodename)
        return [e for e in events if (e.get("data") or {}).get("what") != "sweep_end"]

    rewrite_runner(run_dir, died)
    return run_dir


def test_watch_of_a_run_whose_writer_died_says_so_and_shows_what_was_measured(tmp_path):
    run_dir = stalled_copy(tmp_path)
    recorded = RecordedRun(run_dir)
    assert recorded.state() == RunPhase.WRITER_GONE

    async def status_line(app, _pilot):
        return str(app.query_one("#status-line").render())

    text, line = opened_on_summary(run_dir, "when_done", status_line)
    assert "Sweep incomplete" in text and "saved no final summary" in text and "Scaling: resnet18" in text
    assert "is gone: no more data" in line
    assert not os.path.exists(os.path.join(run_dir, "summary.json"))


def test_a_summary_saved_mid_run_is_not_taken_for_the_final_one(tmp_path):
    run_dir = str(tmp_path / "run")
    shutil.copytree(RECORDED, run_dir)
    # its writer: alive (this very process)
    rewrite_runner(run_dir, lambda events: [dict(events[0], pid=os.getpid(), host=os.uname().nodename,
                                                 t=time.time()), *events[1:]])
    recorded = RecordedRun(run_dir)
    assert recorded.state() == RunPhase.FINISHED and recorded.writer_alive() is True
    interim = ddptop("report", run_dir, "--format", "json")  # saves a rebuilt (complete) summary; make it interim
    data = json.loads(interim.stdout)
    data["complete"] = False
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    assert recorded.final_summary() is None  # the writer is still saving: wait for its final summary
    data["complete"] = True
    with open(os.path.join(run_dir, "summary.json"), "w", encoding="utf-8") as handle:
        json.dump(data, handle)
    assert recorded.final_summary().to_json() == data and recorded.paths["json"].endswith("summary.json")


def test_watch_and_view_need_a_run_and_a_terminal(tmp_path):
    for args, message in (
        (("watch", str(tmp_path)), "is not a ddptop run directory"),
        (("watch", str(tmp_path / "nothing")), "is not a directory"),
        (("view", str(tmp_path / "nothing.json")), "neither a run directory nor a summary file"),
        (("watch", RECORDED), "watch needs a terminal; for text, run: ddptop report"),
        (("view", RECORDED), "view needs a terminal"),
        (("watch", RECORDED, "--fps", "0"), "--fps must be positive"),
    ):
        done = ddptop(*args)
        assert done.returncode == 2 and done.stderr.count("\n") == 1 and message in done.stderr, (args, done.stderr)
