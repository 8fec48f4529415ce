"""Every summary in every output: the check (``report.outputs`` and ``tui.summary_check``) on every run in
tests/data, a fault of a chart found by it, a view that raises never silent, the summary screen in a real
terminal, and a script's configurations named by its file."""

import asyncio
import json
import os
import shutil
import sys
import time

import pytest

from ddptop.errors import EXIT_OK, EXIT_VIEW_FAILED
from ddptop.protocol.layout import PLAN_FILE, UI_ERROR_LOG
from ddptop.report import build, chart_data, outputs, sections
from ddptop.tui import summary_check

from .conftest import REPO, ddptop_process, wait_path
from .test_tui import Tmux, in_repo, needs_tmux  # noqa: F401,F811 - in_repo is a fixture

DATA = os.path.join(REPO, "tests", "data")
SHIM = os.path.join(REPO, "tests", "fault_shim")


def recorded_summaries() -> list[str]:
    """Every run directory in tests/data and every summary file outside one (the golden ones)."""
    found = []
    for folder, dirs, files in os.walk(DATA):
        if PLAN_FILE in files:
            found.append(os.path.relpath(folder, REPO))
            dirs.clear()  # its own summary.json is the run's
        else:
            found += [os.path.relpath(os.path.join(folder, f), REPO) for f in files if f.endswith("summary.json")]
    return sorted(found)


def test_the_recorded_runs_include_each_kind_of_summary():
    """The runs the check below opens: a GPU node's (the recorded H100's, in the flat shape of an older
    ddptop), the CPU's with a projection, a tune, a batch sweep to out of memory, a script's run and tune."""
    names = recorded_summaries()
    assert {"tests/data/h100/default", "tests/data/h100/tune", "tests/data/h100/oom", "tests/data/recorded-cpu-run",
            "tests/data/recorded-run", "tests/data/script-run", "tests/data/script-tune"} <= set(names), names
    with open(os.path.join(DATA, "h100", "default", "summary.json"), encoding="utf-8") as handle:
        assert json.load(handle)["schema_version"] == 2  # the flat shape: figures beside their X_ci
    projected, _ = build.load_target(os.path.join(DATA, "recorded-cpu-run"))
    assert any(t.projection and t.projection.points for t in projected.scaling)


@pytest.mark.parametrize("target", recorded_summaries())
def test_every_recorded_run_opens_in_every_output(target, tmp_path, in_repo):
    summary, _ = build.load_target(target)
    summary_check.check_everywhere(summary, target, plots_dir=str(tmp_path / "plots"))


def test_a_figure_handed_to_a_chart_as_a_number_fails_the_check_naming_the_summary_and_the_output(monkeypatch):
    """What reached the summary screen's chart before: an estimate record where plotext takes a number. The
    check draws the chart with a real plotext figure and builds it, so it fails there, by name."""
    summary, _ = build.load_target(os.path.join(DATA, "recorded-cpu-run"))
    monkeypatch.setattr(chart_data, "ys", lambda points: [chart_data.Plotted(p.x, p.y) for p in points])
    with pytest.raises(outputs.UnrenderableSummary) as caught:
        outputs.check(summary, "tests/data/recorded-cpu-run")
    assert caught.value.output == "speedup chart (plotext)" and caught.value.where == "tests/data/recorded-cpu-run"
    assert "TypeError" in str(caught.value) and "Traceback" in caught.value.trace


def test_a_table_without_speedups_draws_no_line_rather_than_failing_the_chart():
    """A script whose examples were not counted has step times but no speedup: plotext fails to build a chart
    with a labelled empty line (the check found it on summaries the suite builds), so no line is drawn."""
    summary, _ = build.load_target(os.path.join(DATA, "recorded-cpu-run"))
    for table in summary.scaling:
        for row in table.rows:
            row.speedup = row.efficiency = None
    assert [s.measured for s in chart_data.speedup_series(summary)] == [[] for _ in summary.scaling]
    outputs.check(summary, "recorded-cpu-run without speedups")


def test_a_summary_screen_that_raises_is_a_finding_of_the_check(monkeypatch):
    from ddptop.tui import screens

    def fail(self):
        raise ValueError("drawn wrong")

    summary, _ = build.load_target(os.path.join(DATA, "recorded-run"))
    monkeypatch.setattr(screens.SummaryScreen, "on_mount", fail)
    with pytest.raises(outputs.UnrenderableSummary) as caught:
        asyncio.run(summary_check.check_screens(summary, "recorded-run"))
    assert caught.value.output == "summary screen at 80x24" and "ValueError: drawn wrong" in caught.value.trace


def test_a_view_failure_is_logged_in_the_run_said_in_one_line_and_exits_3(tmp_path, capsys):
    from ddptop.tui.view_failure import report

    trace = "Traceback (most recent call last):\n  File \"x.py\", line 1\nTypeError: must be real number\n"
    assert report(trace, str(tmp_path), "the live view") == EXIT_VIEW_FAILED == 3
    assert (tmp_path / UI_ERROR_LOG).read_text() == trace
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("ddptop: the live view failed (TypeError: must be real number)") and UI_ERROR_LOG in line
    # a folder that cannot take it: a file of its own, still said
    report(trace, str(tmp_path / "missing" / "folder"), "the summary view")
    (line,) = capsys.readouterr().err.splitlines()
    path = line.split("its traceback is in ")[1]
    assert open(path, encoding="utf-8").read() == trace
    os.remove(path)


# -- a real terminal -------------------------------------------------------------------------------------------


def _exit_code(path) -> str:
    wait_path(path, timeout=120)
    return path.read_text().strip()


@needs_tmux
def test_view_of_a_run_with_a_projection_shows_its_chart_in_a_terminal_and_q_exits_0(tmp_path):
    """`ddptop view` of the recorded CPU run (a projection beyond the node): the summary screen with its
    speedup chart and projection, 160x50 and 80x24 (the chart on g), and q ends it with 0."""
    for size in ((160, 50), (80, 24)):
        done = tmp_path / f"exit-{size[0]}"
        tmux = Tmux(f"cd {REPO} && {sys.executable} -m ddptop view tests/data/recorded-cpu-run; echo EXIT=$? > {done}; "
                    "sleep 30", size=size)
        try:
            screen = tmux.wait_for("Sweep complete", timeout=90)
            if size[0] < 120:
                tmux.keys("g")
                screen = tmux.wait_for("speedup vs N", timeout=30)
            assert "projected" in screen and "speedup vs N" in screen, screen
            tmux.keys("q")
            assert _exit_code(done) == f"EXIT={EXIT_OK}"
        finally:
            tmux.kill()


@needs_tmux
def test_a_view_that_raises_exits_3_with_one_line_and_its_traceback_in_the_run(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "recorded-cpu-run"), run)
    done = tmp_path / "exit"
    tmux = Tmux(f"cd {REPO} && DDPTOP_TEST_FAULT=summary-screen PYTHONPATH={SHIM}:{REPO} {sys.executable} -m ddptop "
                f"view {run} 2> {tmp_path}/stderr; echo EXIT=$? > {done}; sleep 30")
    try:
        assert _exit_code(done) == f"EXIT={EXIT_VIEW_FAILED}"
    finally:
        tmux.kill()
    # Textual draws on stderr too: the line is the last, after the terminal is given back
    line = (tmp_path / "stderr").read_text().splitlines()[-1]
    assert "ddptop: the summary view failed (TypeError: must be real number, not Estimate" in line
    assert str(run / UI_ERROR_LOG) in line or UI_ERROR_LOG in line
    assert "Traceback" in (run / UI_ERROR_LOG).read_text()


FAKE_GPU_RUN = ("--models", "resnet18", "--batch-sizes", "4", "--world-sizes", "1,2", "--image-size", "32",
                "--num-classes", "10", "--warmup", "2", "--iters", "8", "--launches", "1", "--comm-iters", "4",
                "--no-plots")


@pytest.mark.slow
@needs_tmux
def test_run_on_a_simulated_gpu_node_ends_on_its_summary_screen_with_the_projection(tmp_path):
    """README's command on a node of simulated GPUs, in a terminal: the sweep, then the summary screen with its
    speedup chart and the projection beyond the node; q exits 0 and summary.json is there."""
    run = tmp_path / "run"
    done = tmp_path / "exit"
    tmux = Tmux(f"cd {REPO} && DDPTOP_FAKE_NVML=dgx1 {sys.executable} -m ddptop run --out {run} "
                f"{' '.join(FAKE_GPU_RUN)}; echo EXIT=$? > {done}; sleep 30")
    try:
        screen = tmux.wait_for("Sweep complete", timeout=400)
        time.sleep(1)  # the chart beside it draws after the text
        screen = tmux.screen()
        assert "speedup vs N" in screen and "projected" in screen, screen
        tmux.keys("q")
        assert _exit_code(done) == f"EXIT={EXIT_OK}"
        after = tmux.screen(scrollback=300)
    finally:
        tmux.kill()
    assert "Scaling: resnet18" in after and "Projected beyond this node" in after
    with open(run / "summary.json", encoding="utf-8") as handle:
        assert any(t.get("projection") for t in json.load(handle)["scaling"])


@pytest.mark.slow
@needs_tmux
def test_a_live_view_that_raises_saves_the_summary_prints_the_tables_and_exits_3(tmp_path):
    run = tmp_path / "run"
    done = tmp_path / "exit"
    tmux = Tmux(f"cd {REPO} && DDPTOP_TEST_FAULT=summary-screen PYTHONPATH={SHIM}:{REPO} DDPTOP_FAKE_NVML=dgx1 "
                f"{sys.executable} -m ddptop run --out {run} {' '.join(FAKE_GPU_RUN)} --no-collectives; "
                f"echo EXIT=$? > {done}; sleep 30")
    try:
        assert _exit_code(done) == f"EXIT={EXIT_VIEW_FAILED}"
        after = tmux.screen(scrollback=400)
    finally:
        tmux.kill()
    assert "Scaling: resnet18" in after, after  # the closing tables still print
    said = " ".join(after.split())
    assert "the live view failed (TypeError: must be real number, not Estimate" in said and "the summary is saved" in said
    assert "Traceback" in (run / UI_ERROR_LOG).read_text()
    with open(run / "summary.json", encoding="utf-8") as handle:
        assert [c["status"] for c in json.load(handle)["configs"]] == ["ok", "ok", "ok"]


@pytest.mark.slow
@needs_tmux
def test_watch_of_a_headless_run_ends_on_its_summary_screen_in_a_terminal(tmp_path):
    run = tmp_path / "run"
    writer = ddptop_process("run", "--headless", "--out", str(run), *FAKE_GPU_RUN, env={"DDPTOP_FAKE_NVML": "dgx1"})
    done = tmp_path / "exit"
    try:
        wait_path(run / PLAN_FILE, timeout=120)
        tmux = Tmux(f"cd {REPO} && {sys.executable} -m ddptop watch {run}; echo EXIT=$? > {done}; sleep 30")
        try:
            screen = tmux.wait_for("Sweep complete", timeout=400)
            time.sleep(1)
            screen = tmux.screen()
            assert "speedup vs N" in screen and "projected" in screen, screen
            tmux.keys("q")
            assert _exit_code(done) == f"EXIT={EXIT_OK}"
        finally:
            tmux.kill()
        output, _ = writer.communicate(timeout=300)
    finally:
        writer.kill()
    assert writer.returncode == 0, output


# -- a script's configurations by its file ---------------------------------------------------------------------


def _with_long_command(summary_path: str, tmp_path) -> tuple[str, str]:
    """The recorded script run as if its command had run past 200 characters (timm's runs to 230)."""
    with open(summary_path, encoding="utf-8") as handle:
        text = handle.read()
    model = json.loads(text)["configs"][0]["model"]
    long = model + " --data-dir /datasets/imagenet/train --checkpoint-hist 1 --output /scratch/experiments/" \
        + "x" * 40 + " --log-interval 50"
    assert len(long) > 200
    path = tmp_path / "summary.json"
    path.write_text(text.replace(json.dumps(model), json.dumps(long)))
    return str(path), long


def _without_command(text: str) -> str:
    """The text but for the lines that give the command whole: the script's ``command:`` and Markdown's plan."""
    return "\n".join(line for line in text.splitlines() if "command:" not in line and "- models: " not in line)


def test_a_script_is_named_by_its_file_and_its_command_widens_nothing_but_its_own_line(tmp_path):
    """A 200-character command: the text report, Markdown and CSV are those of the same run with its short
    command, line for line, but for the one line that gives the command; every figure is in them."""
    from ddptop.report import csv_table

    short, _ = build.load_target(os.path.join(DATA, "script-run", "summary.json"))
    path, command = _with_long_command(os.path.join(DATA, "script-run", "summary.json"), tmp_path)
    long, _ = build.load_target(path)
    for render in (sections.text_report, sections.markdown, csv_table.csv_text):
        assert _without_command(render(long)) == _without_command(render(short)), render
    report = sections.text_report(long)
    assert f"command: {command[len('script:'):]}" in report and report.count("--checkpoint-hist") == 1
    assert "Scaling: train.py (gloo)" in report and "[" not in report.split("Scaling:")[0].splitlines()[-1]
    table = [line for line in report.splitlines() if line.strip().startswith("1M/")]
    for row in long.scaling[0].rows:
        assert any(f"{row.sec_iter.value:.4f}" in line and f"{row.ex_sec_total.value:.1f}" in line for line in table)
    assert "--checkpoint-hist" not in csv_table.csv_text(long)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_the_summary_screen_of_a_long_script_command_shows_every_figure(size, tmp_path, in_repo):
    from ddptop.tui.app import SummaryApp
    from ddptop.tui.screens import SummaryScreen

    from .tui_helpers import summary_text

    async def shown(target: str) -> str:
        summary, _ = build.load_target(target)
        app = SummaryApp(summary, {"json": "summary.json"})
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            assert isinstance(app.screen, SummaryScreen)
            return await summary_text(app, pilot)

    path, _ = _with_long_command(os.path.join(DATA, "script-run", "summary.json"), tmp_path)
    long = asyncio.run(shown(path))
    assert _without_command(long) == _without_command(asyncio.run(shown(os.path.join(DATA, "script-run",
                                                                                   "summary.json"))))
    summary, _ = build.load_target(path)
    for row in summary.scaling[0].rows:
        assert f"{row.sec_iter.value:.4f}" in long


def test_a_script_run_recorded_by_an_older_ddptop_rebuilds_with_its_steps(tmp_path):
    """A run whose ids named the script by its spec with its arguments (plan.json without ``script_named``):
    its events are found by those ids, its configurations measured as recorded, not pending."""
    run = tmp_path / "run"
    shutil.copytree(os.path.join(DATA, "script-run"), run)
    plan = json.loads((run / "plan.json").read_text())
    model = plan.pop("script_named") and plan["models"][0]
    (run / "plan.json").write_text(json.dumps(plan, indent=2))
    for path in run.rglob("*.jsonl"):
        path.write_text(path.read_text().replace('"train.py/n', json.dumps(model)[:-1] + '/n'))
    summary, _ = build.load_target(str(run), rebuild=True)
    assert [c.config_id for c in summary.configs] == [f"{model}/n1/gloo", f"{model}/n2/gloo"]
    assert all(c.status == "ok" and c.stats is not None and c.stats.n > 0 for c in summary.configs)
    assert "Scaling: train.py (gloo)" in sections.text_report(summary)  # tables name it by its file all the same


def test_the_chart_axis_keeps_the_points_readable_beside_intervals_many_times_their_size():
    """The recorded CPU run's intervals reach a speedup of 104 at N=2 (few steps a launch): the axis stops at
    twice its points and N (8), so the points and the perfect line are not squashed to the floor."""
    summary, _ = build.load_target(os.path.join(DATA, "recorded-cpu-run"))
    series = chart_data.speedup_series(summary)
    largest = chart_data.world_sizes(series)[-1]
    top = chart_data.axis_top(series, largest)
    points = max([largest] + [p.y for s in series for p in (*s.measured, *s.projected)])
    assert chart_data.highest(series) > 5 * points and points < top <= 2.2 * points
    # intervals that fit are drawn whole: the axis reaches their top
    narrow, _ = build.load_target(os.path.join(DATA, "recorded-run"))
    found = chart_data.speedup_series(narrow)
    assert chart_data.axis_top(found, chart_data.world_sizes(found)[-1]) >= chart_data.highest(found)
