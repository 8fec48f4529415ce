"""The TUI: snapshots of a recorded run (deterministic), Pilot driving real sweeps, and tmux as a person."""

import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import time

import pytest
from rich.console import Console
from ddptop.tui.panels import ConfigTable

from ddptop.control import display_path
from ddptop.errors import EXIT_INTERRUPTED, EXIT_OK
from ddptop.live.live_run import LiveRun, create_live_run
from ddptop.run.plan import PlanOptions
from ddptop.tui.app import DdptopApp, SummaryScreen

from .conftest import REPO, processes_mentioning, wait_path
from .tui_helpers import first_frame, open_summary, screen_text, settled, summary_text, wait_for

RECORDED = os.path.join("tests", "data", "recorded-run")  # relative: paths on screen stay the same anywhere
H100 = os.path.join("tests", "data", "h100", "default")  # a real GPU's steps: resnet50 bs32 on one H100, N=1


@pytest.fixture
def in_repo(monkeypatch):
    monkeypatch.chdir(REPO)


# -- snapshots of a recorded run (8 fake GPUs, 3 configurations) ---------------------------------------------


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_main_screen_snapshot(snap_compare, in_repo, size):
    assert snap_compare(DdptopApp.for_recorded(RECORDED), terminal_size=size, run_before=settled)


@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_summary_screen_snapshot(snap_compare, in_repo, size):
    assert snap_compare(DdptopApp.for_recorded(RECORDED), terminal_size=size, run_before=open_summary)


@pytest.mark.parametrize("size", [(80, 24), (120, 40), (200, 60)])
@pytest.mark.parametrize("screen", ["overview", "ranks", "topology", "summary"])
def test_every_screen_at_every_size_snapshot(snap_compare, in_repo, screen, size):
    """The four screens at 80x24, 120x40 and 200x60: what the layout scan below checks, kept as pictures."""

    async def show(pilot):
        await settled(pilot)
        if screen == "summary":
            await pilot.press("r")
            await wait_for(pilot, lambda: bool(pilot.app.screen.query("#summary-tables")), timeout=30, step=0.02)
            await pilot.pause(0.3)
        else:
            await pilot.press({"overview": "1", "ranks": "2", "topology": "3"}[screen])

    assert snap_compare(DdptopApp.for_recorded(RECORDED), terminal_size=size, run_before=show)


def test_recorded_run_fills_every_panel(in_repo):
    asyncio.run(recorded_run_fills_every_panel())


async def recorded_run_fills_every_panel():
    app = DdptopApp.for_recorded(RECORDED)
    async with app.run_test(size=(160, 50)) as pilot:
        await first_frame(pilot)
        gpus = app.query_one("#gpus")
        configs = app.query_one("#configs")
        assert gpus.row_count == 8 and "(FAKE)" in str(gpus.get_cell("0", "name"))
        assert [str(configs.get_cell(k, "status")) for k in configs.rows] == ["ok", "ok", "ok"]
        assert str(configs.get_cell("resnet18/ddp/bs4/n1/gloo", "speedup")) == "1.00"
        assert "FAKE GPUs" in str(app.query_one("#status-line").render())
        await pilot.press("3")
        assert "NV2" in str(app.query_one("#topology").render())
        await pilot.press("question_mark")
        assert "command palette" in await screen_text(app, pilot, "#help")
        await pilot.press("escape", "r")
        text = await summary_text(app, pilot)
        assert isinstance(app.screen, SummaryScreen)
        assert "Scaling: resnet18" in text and "Load during measured steps" in text


def test_screenshot_key_and_palette_commands(in_repo, tmp_path):
    async def drive():
        app = DdptopApp.for_recorded(RECORDED)
        app.screenshot_dir = str(tmp_path)
        async with app.run_test(size=(100, 30)) as pilot:
            await pilot.press("t")
            await pilot.pause()
            titles = [command.title for command in app.get_system_commands(app.screen)]
        return titles

    titles = asyncio.run(drive())
    shots = list(tmp_path.glob("*.svg"))
    assert len(shots) == 1 and "<svg" in shots[0].read_text()[:2000]
    for title in ("Stop and quit", "Save summary now", "Skip configuration", "SVG screenshot", "Show logs panel"):
        assert title in titles


# -- Pilot driving real sweeps ---------------------------------------------------------------------------------

TINY = PlanOptions(
    models=["resnet18"], batch_sizes=[4], world_sizes=[1, 2], image_size=32, num_classes=10, warmup=2, iters=6,
    launches=1, comm_iters=0, collectives=[],  # the view of a sweep, not of its communication analysis
)


def live_run(tmp_path, options=TINY) -> LiveRun:
    return create_live_run(options, str(tmp_path / "run"), telemetry_interval=0.25, plots=False)


@pytest.mark.slow
@pytest.mark.smoke
def test_tui_runs_a_real_sweep_to_the_summary_screen(tmp_path):
    asyncio.run(tui_runs_a_real_sweep_to_the_summary_screen(tmp_path))


async def tui_runs_a_real_sweep_to_the_summary_screen(tmp_path):
    live = live_run(tmp_path)
    app = DdptopApp.for_live(live, fps=8)
    async with app.run_test(size=(120, 40)) as pilot:
        table = app.query_one("#configs", ConfigTable)
        # the first word: a busy machine adds "! other processes used ..." to a running configuration's status
        await wait_for(pilot, lambda: any(str(table.get_cell(k, "status")).split()[0] == "running" for k in table.rows))
        await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen))
        statuses = [str(table.get_cell(k, "status")) for k in table.rows]
        # "ok", or "ok ! other processes used 1.0 cores" where a busy machine disturbed a launch: said, still ok
        assert len(statuses) == 3 and all(s.split()[0] == "ok" for s in statuses), statuses
        assert str(table.get_cell("resnet18/ddp/bs4/n2/gloo", "speedup")) != "-"
        text = await summary_text(app, pilot)
        assert "Sweep complete" in text and "ranks" in text
        assert f"Saved: {display_path(live.paths['json'])}, and beside it summary.md, summary.csv" in text
        host = str(app.query_one("#host").render())
        assert "Host CPU" in host
        await pilot.press("q")
    assert app.return_value == EXIT_OK
    assert os.path.exists(os.path.join(live.session.run_dir, "summary.json"))


@pytest.mark.slow
def test_quit_while_running_stops_the_ranks_and_saves(tmp_path):
    asyncio.run(quit_while_running_stops_the_ranks_and_saves(tmp_path))


async def quit_while_running_stops_the_ranks_and_saves(tmp_path):
    live = live_run(tmp_path, PlanOptions(**{**TINY.__dict__, "iters": 400, "baseline": False}))
    app = DdptopApp.for_live(live, fps=8)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_for(pilot, lambda: live.session.ordered_states()[0].sample_count() >= 3)
        await pilot.press("q")
        await wait_for(pilot, lambda: not app.is_running, timeout=60)
    assert app.return_value == EXIT_INTERRUPTED
    summary = live.summary
    assert summary.configs[0].status == "stopped" and summary.configs[0].stats.n >= 3
    assert not processes_mentioning(live.session.run_dir)


# -- tmux, as a person -------------------------------------------------------------------------------------------


class Tmux:
    """One detached tmux session on a server of its own (``-L``): the screen read as text, keys sent, killed.

    A server per session, so that one test's server shutting down (its last session killed) can never take
    the next test's new session with it.
    """

    def __init__(self, command: str, size=(160, 50)) -> None:
        self.name = f"ddptop-test-{os.getpid()}-{time.monotonic_ns()}"
        self.base = ["tmux", "-L", self.name]
        # Importing readline (pytest's debugger support does) exports COLUMNS=80 and LINES=24 into this
        # process's C environment, which tmux would pass on, and Textual sizes itself by them before the pty:
        # the program in the pane must see the pane's size, as in a person's terminal.
        command = f"unset COLUMNS LINES; {command}"
        subprocess.run(
            [*self.base, "new-session", "-d", "-s", self.name, "-x", str(size[0]), "-y", str(size[1]), command],
            check=True,
        )

    def screen(self, scrollback: int = 0) -> str:
        """What the pane shows, with ``scrollback`` lines above it (a long report scrolls its start away)."""
        history = ["-S", f"-{scrollback}"] if scrollback else []
        shown = subprocess.run([*self.base, "capture-pane", "-p", *history, "-t", self.name], capture_output=True,
                               text=True)
        return shown.stdout if shown.returncode == 0 else f"(tmux capture-pane failed: {shown.stderr.strip()})"

    def wait_for(self, text: str, timeout: float = 180.0) -> str:
        deadline = time.monotonic() + timeout
        while text not in (shown := self.screen()):
            assert time.monotonic() < deadline, f"{text!r} never appeared:\n{shown}"
            time.sleep(0.3)
        return shown

    def keys(self, *keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", self.name, *keys], check=True)

    def kill(self) -> None:
        subprocess.run([*self.base, "kill-server"], capture_output=True)


def ddptop_command(run_dir, *args: str, then: str = "", model: str = "resnet18") -> str:
    return (
        f"cd {REPO} && DDPTOP_FAKE_NVML=dgx1 PYTHONPATH={REPO} {sys.executable} -m ddptop --out {run_dir} "
        f"--models {model} --image-size 32 --num-classes 10 --batch-sizes 4 --warmup 2 --launches 1 --no-plots "
        f"{' '.join(args)}{then}"
    )


needs_tmux = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")


@pytest.mark.slow
@needs_tmux
def test_ddptop_in_tmux_shows_gpus_configurations_and_summary(tmp_path):
    tmux = Tmux(ddptop_command(tmp_path / "run", "--iters", "6", "--comm-iters", "0", "--no-collectives",
                               then=f"; echo EXIT=$? > {tmp_path}/exit; sleep 30"))
    try:
        first = tmux.wait_for("Host CPU")  # the first telemetry reading is on screen
        assert "V100-SXM2-16GB (FAKE)" in first and "Host CPU" in first and "FAKE GPUs" in first
        assert "resnet18" in first and "no ddp" in first
        summary = tmux.wait_for("Sweep complete")
        assert "Scaling: resnet18" in summary and "speedup vs N" in summary and "Saved:" in summary
        tmux.keys("q")
        wait_path(tmp_path / "exit")
        assert (tmp_path / "exit").read_text().strip() == "EXIT=0"
        after = tmux.screen(scrollback=300)
        assert "Summary: " in after and "Scaling: resnet18" in after  # printed to the terminal on exit
    finally:
        tmux.kill()


@needs_tmux
def test_the_recommendation_reads_whole_at_80x24_in_tmux(in_repo):
    """A person over SSH in an 80x24 terminal: the summary's recommendation is there, wrapped, not cut."""
    from ddptop.report import build

    summary, _rebuilt = build.load_target(RECORDED, False)  # built from the events, nothing written
    sentence = summary.scaling[0].recommendation
    assert len(sentence) > 80  # wider than the window: it has to wrap to be read whole
    tmux = Tmux(f"cd {REPO} && DDPTOP_FAKE_NVML=dgx1 {sys.executable} -m ddptop view {RECORDED}", size=(80, 24))
    try:
        screen = tmux.wait_for("Sweep complete", timeout=60)
        assert max(len(line) for line in screen.splitlines()) <= 80
        assert " ".join(sentence.split()) in " ".join(screen.split())
    finally:
        tmux.kill()


@pytest.mark.slow
@needs_tmux
def test_terminal_going_away_stops_the_ranks_and_saves_what_was_measured(tmp_path):
    run_dir = tmp_path / "run"
    tmux = Tmux(ddptop_command(run_dir, "--iters", "400", "--no-baseline"), size=(100, 30))
    try:
        tmux.wait_for("running 1M/1P")
        events = run_dir / "launches" / "01-n1-gloo" / "events" / "rank-0.jsonl"
        deadline = time.monotonic() + 120
        while not (events.exists() and '"phase":"measure"' in events.read_text()):
            assert time.monotonic() < deadline, "no measured step"
            time.sleep(0.3)
    finally:
        tmux.kill()  # the terminal goes away: ddptop gets SIGHUP
    wait_path(run_dir / "summary.json", timeout=90)  # the ranks' stop grace, then the summary, on a slow VM
    with open(run_dir / "summary.json", encoding="utf-8") as handle:
        configs = json.load(handle)["configs"]
    assert configs[0]["status"] == "stopped" and configs[0]["stats"]["n"] > 0
    assert configs[1]["status"] == "not_run"
    deadline = time.monotonic() + 15
    while processes_mentioning(str(run_dir)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not processes_mentioning(str(run_dir))


def test_braille_chart_puts_extremes_on_the_edges():
    from ddptop.tui.format import braille_chart

    plot = braille_chart([[1.0, 2.0, 3.0], [2.0, 2.0, 2.0]], width=10, height=3)
    rows = plot.rows
    assert (plot.low, plot.high) == (1.0, 3.0) and len(rows) == 3 and all(len(r.plain) == 10 for r in rows)
    assert rows[2].plain[0] != " " and rows[0].plain[-1] != " "  # 1.0 bottom left, 3.0 top right
    assert rows[0].plain[0] == " " and rows[2].plain[-1] == " "
    assert plot.above == plot.below == 0 and not plot.top_row  # too few steps for quartiles: all on the axis
    empty = braille_chart([[]], width=4, height=2)
    assert [r.plain for r in empty.rows] == ["    ", "    "]


def test_braille_chart_colours_every_dot_by_its_series_and_nothing_else():
    from ddptop.tui.format import SERIES_STYLES, braille_chart

    # series 0 high and series 1 low, interleaved in time: every dot of the top row is series 0's colour
    fast = [1.0 + 0.01 * (i % 3) for i in range(40)]
    slow = [2.0 - 0.01 * (i % 2) for i in range(40)]
    rows = braille_chart([fast, slow], width=12, height=4).rows
    for row, colour in ((rows[0], SERIES_STYLES[1]), (rows[-1], SERIES_STYLES[0])):
        for offset, char in enumerate(row.plain):
            style = str(row.get_style_at_offset(Console(), offset))
            assert (colour in style) == (char != " "), (offset, char, style)
    assert not any(r.plain.strip() for r in rows[1:-1])  # nothing between the two bands


def test_a_finished_run_on_screen_repaints_nothing(in_repo, monkeypatch):
    """Idle cost: once a finished run is drawn, no more snapshots are read and no panel is refreshed (a
    refresh is what makes Textual render a widget again and write its cells to the terminal)."""
    asyncio.run(finished_run_repaints_nothing(settles=True))
    # and where frames go on (a run that could still change), unchanged panels are not refreshed either
    monkeypatch.setattr("ddptop.tui.app.FINAL_PHASES", ())
    asyncio.run(finished_run_repaints_nothing(settles=False))


def _count_refreshes(app) -> dict:
    refreshed = {}
    for name in ("status-line", "gpus", "host", "configs", "chart", "ranks", "logs-view"):
        panel = app.query_one(f"#{name}")
        refreshed[name] = 0

        def counting(*args, _name=name, _refresh=panel.refresh, **kwargs):
            refreshed[_name] += 1
            return _refresh(*args, **kwargs)

        panel.refresh = counting
    return refreshed


async def finished_run_repaints_nothing(settles: bool):
    app = DdptopApp.for_recorded(RECORDED, fps=20.0)  # many frames a second, were any taken
    async with app.run_test(size=(160, 50)) as pilot:
        await first_frame(pilot)
        await wait_for(pilot, lambda: app.settled if settles else app.frames_shown >= 4, timeout=30, step=0.05)
        await pilot.pause(0.5)  # the layout passes the last frame started
        refreshed = _count_refreshes(app)
        frames = app.frames_shown
        await pilot.pause(3.0)  # 60 frame periods
        assert (app.frames_shown == frames) if settles else (app.frames_shown >= frames + 20)
        assert refreshed == {name: 0 for name in refreshed}, refreshed
        await pilot.press("2")  # a key still works on what is drawn
        assert app.query_one("TabbedContent").active == "ranks-tab"


def test_the_step_chart_shows_a_rolling_median_over_its_p10_p90_band():
    """Two ranks, 1,000 steps each, 10 ms slower from step 600 on: the median line steps up where the steps
    did, and each column's band spans its p10-p90 rows."""
    from ddptop.tui.format import MEDIAN_ON_BAND_STYLE, band_chart

    series = [[0.100 + 0.002 * ((i * 7 + rank) % 5) + (0.010 if i >= 600 else 0.0) for i in range(1000)]
              for rank in range(2)]
    plot = band_chart(series, 50, 8)
    rows = plot.rows
    assert plot.per_column == 20 and plot.low == pytest.approx(0.100) and plot.high == pytest.approx(0.118)
    assert plot.above == plot.below == 0  # a step up that lasts is no outlier: the axis spans both levels

    def median_row(column):
        return next(r for r, row in enumerate(rows) if row.plain[column] != " ")

    assert median_row(5) > median_row(45)  # lower on screen = a smaller step time, before step 600
    assert median_row(5) - median_row(45) >= 3  # 10 ms of an 18 ms range, on 8 rows
    banded = [r for r, row in enumerate(rows) if any(s.start <= 45 < s.end and s.style == MEDIAN_ON_BAND_STYLE for s in row.spans)]
    assert banded and min(banded) <= median_row(45) <= max(banded)


def _upper_fence(steps):
    """Tukey's upper fence of the steps, with the standard library's quartiles (linear interpolation)."""
    from ddptop.tui import format as fmt

    q1, median, q3 = statistics.quantiles(steps, n=4, method="inclusive")
    return q3 + fmt.FENCE_IQRS * max(q3 - q1, fmt.FENCE_MIN_SPREAD * median)


def _steady_steps(count):
    """Steps of about 30 ms, five levels 0.3 ms apart in a fixed order (no randomness)."""
    return [0.030 + 0.0003 * ((i * 7) % 5) for i in range(count)]


def test_the_band_chart_axis_ends_at_the_fence_and_each_outlier_is_a_mark_in_its_column():
    """One step per column, as a chart wider than the steps so far draws them: three steps 2.5x as slow and
    one 0.3x as fast. The axis spans the others; each outlier is a mark in its own column, in a row beyond
    the axis, and nothing of it is drawn between; the median of the rest uses the rows between."""
    from ddptop.tui.format import ABOVE, BELOW, OUTLIER_STYLE, band_chart

    width, height = 150, 12
    series = _steady_steps(width)
    slow, fast = (20, 75, 130), 100
    for i in slow:
        series[i] *= 2.5
    series[fast] *= 0.3
    usual = [v for i, v in enumerate(series) if i not in (*slow, fast)]
    plot = band_chart([series], width, height)
    assert plot.per_column == 1 and plot.top_row and plot.bottom_row
    assert (plot.low, plot.high) == (min(usual), max(usual))  # the band of the rest, not the outliers
    assert (plot.above, plot.largest, plot.below, plot.smallest) == (len(slow), max(series), 1, series[fast])
    assert [c for c, char in enumerate(plot.rows[0].plain) if char != " "] == list(slow)
    assert [c for c, char in enumerate(plot.rows[-1].plain) if char != " "] == [fast]
    assert set(plot.rows[0].plain) == {ABOVE, " "} and set(plot.rows[-1].plain) == {BELOW, " "}
    assert all(s.style == OUTLIER_STYLE for s in plot.rows[0].spans + plot.rows[-1].spans)
    data = [row.plain for row in plot.rows[1:-1]]
    assert all(row[c] == " " for row in data for c in (*slow, fast))
    median_rows = {r for r, row in enumerate(data) if row.strip()}
    levels = len(set(usual))
    assert median_rows >= {0, len(data) - 1} and len(median_rows) == levels  # bottom to top, a row per level


def test_the_per_rank_dots_keep_a_slower_rank_on_the_axis_and_mark_a_rank_s_spikes_in_its_colour():
    """Rank 1 is 30% slower throughout: that is a straggler, on the axis. Rank 0 has two 3x spikes: marks of
    rank 0's colour above the axis, and the axis ends below them."""
    from ddptop.tui.format import ABOVE, SERIES_STYLES, braille_chart

    width = 40
    fast = _steady_steps(2 * width)
    fast[10] *= 3
    fast[61] *= 3
    slow = [v * 1.3 for v in _steady_steps(2 * width)]
    plot = braille_chart([fast, slow], width, 8)
    assert plot.above == 2 and plot.largest == max(fast) and plot.below == 0
    assert plot.high == max(slow) and plot.low == min(fast)  # both ranks' usual steps span the axis
    assert [c for c, char in enumerate(plot.rows[0].plain) if char == ABOVE] == [10 // 2, 61 // 2]
    assert {s.style for s in plot.rows[0].spans} == {SERIES_STYLES[0]}


def test_the_step_chart_in_ascii_marks_outliers_with_carets(monkeypatch):
    from ddptop.tui import format as fmt

    monkeypatch.setattr(fmt, "ASCII", True)
    series = _steady_steps(60)
    series[30] *= 3
    series[40] *= 0.2
    for plot in (fmt.band_chart([series], 60, 8), fmt.braille_chart([series], 30, 8)):
        assert plot.rows[0].plain.strip() == "^" and plot.rows[-1].plain.strip() == "v"
        assert all(row.plain.isascii() for row in plot.rows)


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
def test_real_gpu_steps_leave_the_median_readable_and_their_outliers_marked(in_repo, size):
    """`ddptop view` of the H100 run, whose steps have rare slow spikes (p99 near 3x the median). The axis ends
    at the steps' upper fence, not at the largest spike; the median's dots range over most of the chart's
    rows, not along its bottom; a row of marks over the axis, labelled with the largest step, stands for the
    steps beyond it, and the title counts them."""
    from rich.style import Style

    from ddptop.tui import format as fmt
    from ddptop.tui.panels.chart import LABEL_WIDTH

    async def run():
        app = DdptopApp.for_recorded(H100, open_summary="now")  # as `ddptop view` opens it
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen), timeout=30, step=0.05)
            await pilot.press("escape")
            await settled(pilot)
            chart = app.query_one("#chart")
            lines = [chart.render_line(y) for y in range(chart.size.height)]
            return lines, app.last_snapshot.session.current(), chart.size.width

    lines, config, width = asyncio.run(run())
    steps = [v for tail in config.tails.values() for v in tail]
    fence = _upper_fence(steps)
    beyond = [v for v in steps if v > fence]
    assert beyond and max(steps) > 2 * statistics.median(steps)  # the run has what the chart must handle
    per_column = -(-len(steps) // (width - LABEL_WIDTH - 1))
    legend = f"sec/iter, {config.heading} ({config.status}): median and p10-p90"
    assert lines[0].text.rstrip() == (
        f"{legend} of {len(config.tails)} rank(s), {per_column} step(s) per column; "
        f"▲ {len(beyond)} steps above the axis, largest {max(steps):.4f}s (c: per rank)" if size[0] >= 160
        else f"{legend}; ▲ {len(beyond)} above, {max(steps):.4f}s (c)")
    marks, top, *between, bottom = [line.text for line in lines[1:]]
    assert marks[:LABEL_WIDTH + 1] == f"{max(steps):.4f}s".rjust(LABEL_WIDTH) + fmt.AXIS_BREAK
    assert set(marks[LABEL_WIDTH + 1:]) == {"▲", " "}
    outlier_colour = Style.parse(fmt.OUTLIER_STYLE).color
    assert all(s.style.color == outlier_colour for s in lines[1] if "▲" in s.text)
    high, low = (float(line[:LABEL_WIDTH].strip().rstrip("s")) for line in (top, bottom))
    assert high <= round(fence, 4) and low == pytest.approx(min(steps), abs=0.002)
    data = [line[LABEL_WIDTH + 1:] for line in (top, *between, bottom)]
    median_rows = [r for r, row in enumerate(data) for char in row if "\u2800" < char <= "\u28ff"]
    assert len(set(median_rows)) >= len(data) * 2 // 3  # the median moves over the chart's height
    assert median_rows.count(len(data) - 1) < len(median_rows) / 4  # not along its bottom row


def test_the_chart_key_switches_to_every_rank_and_back(in_repo):
    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(120, 40)) as pilot:
            await first_frame(pilot)
            chart = app.query_one("#chart")
            assert "median and p10-p90 of 2 rank(s)" in str(chart.render_line(0).text)
            await pilot.press("c")
            assert chart.render_line(0).text.rstrip().endswith(": rank 0 rank 1 (c: median and band)")
            await pilot.press("c")
            assert "median" in str(chart.render_line(0).text)

    asyncio.run(run())


def test_the_chart_fills_its_new_size_after_a_resize_with_no_frame_to_follow(in_repo):
    """A settled run takes no more snapshots: a resize alone must redraw the chart at its new size (the
    chart drawn at a stale height was a snapshot that failed now and then on a busy machine)."""

    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(120, 40)) as pilot:
            await settled(pilot)
            chart = app.query_one("#chart")

            def axis_rows():
                return sum("\u2502" in chart.render_line(y).text for y in range(chart.size.height))

            # every row under the title carries the axis (on a busy machine the last layout may land a moment
            # after the run settled: waited for, with no new frame either)
            await wait_for(pilot, lambda: axis_rows() == chart.size.height - 1, timeout=30, step=0.05)
            frames = app.frames_shown
            await pilot.resize_terminal(120, 50)
            await wait_for(pilot, lambda: chart.size.height > 20 and axis_rows() == chart.size.height - 1,
                           timeout=30, step=0.05)
            assert app.frames_shown == frames  # no new frame: the chart redrew from what it had

    asyncio.run(run())


def test_shift_t_cycles_the_colour_themes_and_no_color_is_honoured(in_repo, monkeypatch):
    async def run(expect_no_color):
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(100, 30)) as pilot:
            await first_frame(pilot)
            assert app.no_color is expect_no_color
            seen = [app.theme]
            for _ in range(3):
                await pilot.press("T")
                seen.append(app.theme)
            assert len(set(seen)) == 4 and set(seen) <= set(app.available_themes)

    asyncio.run(run(False))
    monkeypatch.setenv("NO_COLOR", "1")  # Textual then draws through its monochrome filter
    asyncio.run(run(True))


@pytest.mark.parametrize("size", [(160, 50), (80, 24)])
def test_one_world_size_gives_the_summary_the_whole_width_and_names_the_saved_files(in_repo, size):
    """`ddptop view` of the H100 run (N=1 alone): a speedup chart would be one point at 1.00, so there is
    none, nor a key for it, and the text has the screen's width; the Saved line names summary.json by a path
    that opens it from here, then the files beside it, each there."""

    async def run():
        app = DdptopApp.for_recorded(H100, open_summary="now")  # as `ddptop view` opens it
        async with app.run_test(size=size) as pilot:
            text = await summary_text(app, pilot)
            # the footer composes its keys a moment after the screen (later still on a busy machine)
            await wait_for(pilot, lambda: bool(app.screen.query("FooterKey")), timeout=30, step=0.05)
            screen = app.screen
            keys = [key.description for key in screen.query("FooterKey")]
            return (text, len(screen.query("#speedup-chart")), screen.query_one("#summary-text").size.width,
                    screen.size.width, keys)

    text, charts, text_width, screen_width, keys = asyncio.run(run())
    assert {row.world_size for table in _h100_summary().scaling for row in table.rows} == {1}
    assert charts == 0 and text_width == screen_width
    assert "Back" in keys and "Chart/tables" not in keys
    (saved,) = [line for line in text.splitlines() if line.startswith("Saved: ")]
    json_path = os.path.join(H100, "summary.json")
    first, beside = saved.removeprefix("Saved: ").split(", and beside it ")
    assert first == display_path(json_path) and os.path.isfile(first)
    assert beside and all(os.path.exists(os.path.join(H100, name)) for name in beside.split(", "))


def _h100_summary():
    from ddptop.report import store

    return store.load_summary(os.path.join(H100, "summary.json"))


def test_the_summary_chart_moves_behind_a_key_in_a_narrow_terminal(in_repo):
    async def run(size):
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=size) as pilot:
            await open_summary(pilot)
            await pilot.pause(0.2)
            chart, text = app.screen.query_one("#speedup-chart"), app.screen.query_one("#summary-text")
            shown = (chart.display, text.display)
            await pilot.press("g")
            await pilot.pause(0.1)
            return shown, (chart.display, text.display), text.size.width

    beside, still_beside, _ = asyncio.run(run((160, 50)))
    assert beside == still_beside == (True, True)
    narrow, chart_only, _ = asyncio.run(run((80, 24)))
    assert narrow == (False, True) and chart_only == (True, False)  # the tables get the whole width, then the chart


def test_a_cells_own_colour_reaches_the_screen():
    """A bar's colour is the Text's own style, not a span: rich's Text.render drops such a style, and the
    GPU bars and status words were once drawn without colour."""
    from ddptop.tui.format import bar
    from ddptop.tui.lines import LineTable, text_segments

    segments = text_segments(bar(92, 8))
    assert [s.style.color.name for s in segments if s.text.strip()] == ["red"]
    table = LineTable([("util", "util", 13)])
    table.set_row("0", {"util": bar(5, 8)})
    line = table._line(table._cells["0"])
    assert any(s.style is not None and s.style.color is not None and s.style.color.name == "green" for s in line)


# -- layout at every size: no text meets other text, no table value cut -------------------------------------------

LAYOUT_SIZES = [(80, 24), (120, 40), (200, 60)]


def _is_text(char: str) -> bool:
    """A character that belongs to words or numbers: not a space, a box-drawing line or a block (borders,
    bars, scrollbars)."""
    return not char.isspace() and not 0x2500 <= ord(char) <= 0x259F


def layout_problems(app) -> list[str]:
    """Where two widgets side by side can run their texts together, and tables wider than their window with
    nothing saying so. Read from the screen as composed, cell by cell.

    Two widgets touch at a column boundary; if the left one has text in its edge column on any row and the
    right one in its edge column on any row, a change of data can make them meet (a chart's axis labels
    move with the data): no space or border guards them.
    """
    from textual.scrollbar import ScrollBar, ScrollBarCorner

    from ddptop.tui.lines import LineTable

    screen = app.screen
    lines = [strip.text for strip in screen._compositor.render_strips()]
    width, height = screen.size
    edges: dict[tuple[int, int, int], list] = {}  # (left widget, right widget, column) -> [left text?, right text?, row]
    for y in range(height):
        owners = [screen.get_widget_at(x, y)[0] for x in range(width)]
        for x in range(1, min(width, len(lines[y]))):
            left, right = owners[x - 1], owners[x]
            if left is right or isinstance(left, (ScrollBar, ScrollBarCorner)) or isinstance(
                    right, (ScrollBar, ScrollBarCorner)):
                continue
            edge = edges.setdefault((id(left), id(right), x), [False, False, y, left, right])
            edge[0] |= _is_text(lines[y][x - 1])
            edge[1] |= _is_text(lines[y][x])
    problems = [
        f"column {x} from row {y}: {type(left).__name__}#{left.id} and {type(right).__name__}#{right.id} touch with "
        f"text on both edges: {lines[y].rstrip()!r}"
        for (_, _, x), (left_text, right_text, y, left, right) in edges.items() if left_text and right_text
    ]
    for table in screen.query(LineTable):
        if table.display and table.size.width and table.virtual_size.width > table.scrollable_content_region.width:
            problems.append(f"{table.id}: {table.virtual_size.width} columns wide in "
                            f"{table.scrollable_content_region.width}: a value cut at the edge")
    for scroller, hint in getattr(screen, "_scroll_hints", ()):
        if scroller.virtual_size.width > scroller.scrollable_content_region.width and not hint.has_class("shown"):
            problems.append("a summary table wider than its window with no hint that it scrolls")
    return problems


def test_the_summary_text_is_cut_into_prose_keyed_lines_and_tables():
    from rich.text import Text

    from ddptop.tui.screens import KEYED, PROSE, TABLE, text_blocks

    text = Text("Scaling: one sentence\n      N  sec/iter  speedup\n      1    0.0886     1.00\n"
                "  a/ddp/n1  compute only (one rank)\n  a/ddp/n2  no verdict: not told apart\n"
                "  X     = Self\n  SYS   = Connection traversing PCIe\n  wrapped prose, indented\n")
    assert [(kind, indent, block.plain) for kind, indent, block in text_blocks(text)] == [
        (PROSE, 0, "Scaling: one sentence"),
        (TABLE, 0, "      N  sec/iter  speedup\n      1    0.0886     1.00"),
        (KEYED, 2, "a/ddp/n1  compute only (one rank)\na/ddp/n2  no verdict: not told apart\n"
                   "X     = Self\nSYS   = Connection traversing PCIe"),
        (PROSE, 2, "wrapped prose, indented"),
        (PROSE, 0, ""),
    ]


def test_saved_files_are_one_sentence_that_wraps(tmp_path, monkeypatch):
    """The first file by a path that opens it from the working directory, the others beside it by name where
    they share its directory; each by its path where they do not."""
    from ddptop.tui.screens import saved_paths

    run = tmp_path / "run"
    (run / "plots").mkdir(parents=True)
    shared = [str(run / "summary.json"), str(run / "summary.md"), str(run / "plots")]
    apart = [str(tmp_path / "fallback" / "summary.json"), str(run / "plots")]
    assert saved_paths(shared) == f"{run / 'summary.json'}, and beside it summary.md, plots/"
    assert saved_paths(apart) == f"{apart[0]}, {run / 'plots'}/"
    assert saved_paths([]) == "nothing"
    monkeypatch.chdir(tmp_path)  # below the working directory: the relative path, as typed from here
    assert saved_paths(shared) == f"{os.path.join('run', 'summary.json')}, and beside it summary.md, plots/"
    monkeypatch.chdir(run)
    assert saved_paths(shared) == "summary.json, and beside it summary.md, plots/"


def test_a_keyed_sentence_wraps_beside_its_key_in_a_narrow_window(in_repo):
    """'Why it is not faster' at 80 columns: each verdict wraps under itself, its configuration keeps the left
    column, and nothing scrolls sideways."""
    from ddptop.tui.screens import KeyedLines

    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(80, 24)) as pilot:
            await settled(pilot)
            await pilot.press("r")
            await summary_text(app, pilot)
            (why,) = [w for w in app.screen.query(KeyedLines) if "no verdict" in w.text.plain]
            app.screen.query_one("#summary-text").scroll_to_widget(why, animate=False, top=True)
            await pilot.pause(0.3)
            strips = app.screen._compositor.render_strips()
            region = why.content_region
            assert why.parent.id == "summary-tables"  # in the text's own column, not in a sideways scroller
            return [strips[y].text[region.x:region.right] for y in range(region.y, region.bottom)]

    lines = asyncio.run(run())
    key = "resnet18/ddp/bs4/n2/gloo"
    (start,) = [i for i, line in enumerate(lines) if line.startswith(key)]
    column = len(key) + 2 + 3  # the longest key, resnet18/no_ddp/..., is 3 longer; then the gap
    continued = []
    for line in lines[start + 1:]:
        if line[:column].strip():
            break
        continued.append(line[column:].strip())
    assert continued  # it wrapped, under itself
    verdict = " ".join([lines[start][column:].strip(), *continued])
    assert verdict == "no verdict: compute and communication were not told apart (no no_sync steps)"


@pytest.mark.parametrize(("width", "narrow"), [(80, True), (SummaryScreen.CHART_BESIDE, False)])
def test_the_summary_is_laid_out_for_the_window_from_its_first_frame(in_repo, monkeypatch, width, narrow):
    """The layout is chosen before the screen is first drawn, not on the resize that follows: over a slow link
    the wide layout (chart beside the text, overlapping it at 80 columns) was on screen until then."""
    at_mount: list[bool] = []
    mounted = SummaryScreen.on_mount

    def on_mount(screen):
        at_mount.append(screen.has_class("narrow"))  # before any Resize has reached the screen
        mounted(screen)

    monkeypatch.setattr(SummaryScreen, "on_mount", on_mount)

    async def run():
        app = DdptopApp.for_recorded(RECORDED, open_summary="now")
        async with app.run_test(size=(width, 30)) as pilot:
            await wait_for(pilot, lambda: bool(at_mount), timeout=30, step=0.05)
            await pilot.pause(0.2)
            return app.screen.has_class("narrow")

    assert asyncio.run(run()) is narrow
    assert at_mount == [narrow]


@pytest.mark.parametrize("size", LAYOUT_SIZES)
def test_no_text_overlaps_and_no_table_value_is_cut_at_any_size(in_repo, size):
    """The main, ranks, topology and summary screens of the recorded run (8 fake GPUs), scanned cell by cell."""

    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        found = {}
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            for key, name in (("1", "overview"), ("2", "ranks"), ("3", "topology")):
                await pilot.press(key)
                await pilot.pause(0.1)
                found[name] = layout_problems(app)
            await pilot.press("r")
            await wait_for(pilot, lambda: bool(app.screen.query("#summary-tables")), timeout=30, step=0.05)
            await pilot.pause(0.3)
            found["summary"] = layout_problems(app)
        return found

    found = asyncio.run(run())
    assert found == {"overview": [], "ranks": [], "topology": [], "summary": []}


def test_w_shows_every_column_and_the_table_scrolls_sideways(in_repo):
    """At 80 columns the tables drop columns (their header ends with +N); w brings every one back, a table
    wider than the window takes the focus with Tab and scrolls with the arrow keys, and w again drops them."""
    from ddptop.tui.lines import LineTable

    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(80, 24)) as pilot:
            await settled(pilot)
            await pilot.press("escape")  # from the summary to the overview
            await pilot.pause(0.2)
            tables = {t.id: t for t in app.screen.query(LineTable) if t.display}
            before = {name: t.hidden for name, t in tables.items()}
            await pilot.press("w")
            await pilot.pause(0.2)
            every = {name: t.hidden for name, t in tables.items()}
            focusable = {name: (t.can_focus, t.virtual_size.width > t.scrollable_content_region.width)
                         for name, t in tables.items()}
            for _ in range(6):  # Tab along the focus chain to a table that is wider than its window
                await pilot.press("tab")
                focused = app.focused
                if isinstance(focused, LineTable) and focused.virtual_size.width > focused.size.width:
                    break
            await pilot.press("right", "right")
            await pilot.pause(0.1)
            scrolled = (app.focused.id, app.focused.scroll_x) if isinstance(app.focused, LineTable) else None
            await pilot.press("w")
            await pilot.pause(0.2)
            after = {name: t.hidden for name, t in tables.items()}
            back = [t.scroll_x for t in tables.values()]
            left_focused = isinstance(app.focused, LineTable)
            await pilot.press("r")  # w on the summary screen is for the sweep's tables behind it
            await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen), timeout=30, step=0.05)
            await pilot.press("w")
            await pilot.pause(0.2)
            from_summary = {name: t.hidden for name, t in tables.items()}
            await pilot.press("escape")
            await pilot.resize_terminal(250, 40)  # where some tables fit: those leave the focus chain
            await pilot.pause(0.3)
            wide = {name: (t.can_focus, t.virtual_size.width > t.scrollable_content_region.width)
                    for name, t in tables.items()}
        return before, every, focusable, scrolled, after, back, left_focused, from_summary, wide

    before, every, focusable, scrolled, after, back, left_focused, from_summary, wide = asyncio.run(run())
    assert before["gpus"] > 0 and before["configs"] > 0
    assert every == {name: 0 for name in before}
    assert all(can for can, _ in focusable.values())  # at 80 columns every one is wider than the window
    assert all(can == wider for can, wider in wide.values()), wide  # Tab skips a table that fits
    assert not all(can for can, _ in wide.values())  # and at 250 columns some do
    assert not left_focused and from_summary == every
    assert scrolled is not None and scrolled[1] > 0, scrolled
    assert after == before and back == [0] * len(back)


def test_every_nodes_telemetry_is_shown_grouped_by_node(in_repo, tmp_path):
    """A multi-node run directory: node 1's sampler wrote telemetry-node1.jsonl beside node 0's timeline.
    The view reads both: the GPU panel groups the GPUs by node (one summary line for a node when they do not
    fit), and the host line has a line per node."""
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    shutil.copy(run / "telemetry.jsonl", run / "telemetry-node1.jsonl")

    async def run_view(size):
        app = DdptopApp.for_recorded(str(run))
        async with app.run_test(size=size) as pilot:
            await wait_for(pilot, lambda: app.last_snapshot is not None and app.last_snapshot.telemetry.nodes,
                           timeout=30, step=0.05)
            await pilot.pause(0.2)
            await settled(pilot)
            return list(app.query_one("#gpus").rows), str(app.query_one("#host").render())

    rows, host = asyncio.run(run_view((200, 60)))
    assert rows == [f"{node}:{gpu}" for node in (0, 1) for gpu in range(8)]  # 16 rows fit in 60 lines
    assert "node 0" in host and "node 1" in host
    rows, _ = asyncio.run(run_view((120, 40)))
    assert rows == [f"0:{gpu}" for gpu in range(8)] + ["1:*"]  # node 1 as one line


def test_the_gpu_panel_shows_mig_mode_and_its_instances(in_repo, tmp_path):
    """A run on a100-mig (telemetry taken by the monitor over the simulated node under the real pynvml): the
    GPU's line says MIG where its utilisation would be and names its instances in its notes; each instance
    gets a line with its own memory where the panel has the rows (at 160x50), none where it has not."""
    from ddptop.telemetry.fake.nvml import FakeNvml
    from ddptop.telemetry.monitor import Monitor

    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    (run / "telemetry.jsonl").unlink()
    monitor = Monitor(0.05, str(run / "telemetry.jsonl"), FakeNvml("a100-mig", steady=True)).open()
    for _ in range(3):
        monitor.sample_once()
    monitor.stop()

    async def run_view(size):
        app = DdptopApp.for_recorded(str(run))
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            gpus = app.query_one("#gpus")
            return {key: {column: str(gpus.get_cell(key, column)) for column in ("name", "util", "memgib", "notes")}
                    for key in gpus.rows}

    rows = asyncio.run(run_view((160, 50)))
    assert list(rows) == ["0"] + [f"0/mig{slot}" for slot in range(7)]
    assert rows["0"]["notes"].startswith("MIG 7× 1g.5gb") and rows["0"]["util"].strip() == "N/A (MIG)"
    assert all(rows[f"0/mig{slot}"]["memgib"] == "0.0/4.8" for slot in range(7))
    assert rows["0/mig0"]["name"].strip() == "MIG 0 GI 7" and rows["0/mig0"]["util"].strip() == "1g.5gb"
    rows = asyncio.run(run_view((80, 24)))  # no room for seven more lines: the GPU's own line says it
    assert list(rows) == ["0"] and rows["0"]["notes"].startswith("MIG 7× 1g.5gb")


@needs_tmux
@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
def test_ascii_draws_every_screen_in_ascii(in_repo, size):
    """--ascii in tmux: the summary (and its chart), every tab and the help, not one character past ASCII,
    with the figures still there."""
    tmux = Tmux(f"cd {REPO} && DDPTOP_FAKE_NVML=dgx1 {sys.executable} -m ddptop view {RECORDED} --ascii",
                size=size)
    screens = {}
    try:
        screens["summary"] = tmux.wait_for("Sweep complete", timeout=60)
        if size[0] >= 120:  # the chart beside the tables, drawn once laid out
            screens["summary"] = tmux.wait_for("speedup vs N", timeout=30)
        for name, keys in (("chart", "g"), ("overview", "Escape"), ("ranks", "2"), ("topology", "3"),
                           ("logs", "4"), ("help", "?"), ("palette", "Escape C-p"), ("commands", "s u m"),
                           ("themes", "BSpace BSpace BSpace t h e m e Enter")):
            if name == "chart" and size[0] >= 120:
                continue  # beside the tables already
            for key in keys.split():
                tmux.keys(key)
                time.sleep(0.3)
            time.sleep(0.8)
            screens[name] = tmux.screen()
    finally:
        tmux.kill()
    outside = {name: sorted({c for c in text if not c.isascii()}) for name, text in screens.items()}
    assert outside == {name: [] for name in screens}
    assert "speedup vs N" in screens.get("chart", screens["summary"]) and "+-" in screens["overview"]
    assert "#" in screens["overview"] and "1.14" in screens["overview"]  # bars of '#', the speedup
    assert "Search for commands..." in screens["palette"] and "Summary screen" in screens["commands"]
    assert "Search for themes..." in screens["themes"]


@pytest.mark.slow
@needs_tmux
def test_ascii_keeps_the_headless_progress_and_tables_in_ascii(tmp_path):
    """--headless --ascii on a terminal: rich's progress bars, the per-configuration lines and the closing
    tables, not one character past ASCII."""
    tmux = Tmux(ddptop_command(tmp_path / "run", "--headless", "--ascii", "--iters", "400", "--world-sizes", "1",
                               "--comm-iters", "0", "--no-collectives", then="; echo EXIT=$?; sleep 30",
                               model="tests.tiny_models:tiny_cnn"), size=(120, 40))
    try:
        while_running = tmux.wait_for("%", timeout=120)  # a progress bar is drawn
        tmux.wait_for("EXIT=", timeout=240)
        ended = tmux.screen(scrollback=400)
    finally:
        tmux.kill()
    assert "EXIT=0" in ended and "sec/iter" in ended  # the closing tables were printed
    outside = {name: sorted({c for c in text if not c.isascii()}) for name, text in
               (("running", while_running), ("ended", ended))}
    assert outside == {"running": [], "ended": []}


@needs_tmux
def test_a_256_colour_terminal_gets_256_colour_codes_only(in_repo):
    """TERM=xterm-256color without COLORTERM (most SSH sessions): every colour is sent as one of the 256,
    none as 24-bit RGB the terminal would render wrong, and the load colours stay apart."""
    import re

    tmux = Tmux(f"unset COLORTERM; export TERM=xterm-256color; cd {REPO} && DDPTOP_FAKE_NVML=dgx1 "
                f"{sys.executable} -m ddptop view {RECORDED}", size=(120, 40))
    try:
        tmux.wait_for("Sweep complete", timeout=60)
        tmux.keys("Escape")
        tmux.wait_for("Host CPU", timeout=30)
        shown = subprocess.run([*tmux.base, "capture-pane", "-e", "-p", "-t", tmux.name], capture_output=True,
                               text=True, check=True).stdout
    finally:
        tmux.kill()
    assert not re.search(r"[34]8;2;", shown)  # no 24-bit colour
    foregrounds = set(re.findall(r"38;5;(\d+)", shown))
    assert len(foregrounds) >= 5, foregrounds  # text, dim, and the bars' green, yellow and red at least
