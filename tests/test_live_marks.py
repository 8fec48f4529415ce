"""What the live view says of a configuration before its figures are final: the step chart before the first
measured step, the status cell's marks and the line under the table that says what they mean, and a
disturbance judged by the summary's own rule over the summary's own window (or said to be "so far").

The run directories are written here as ddptop writes them (a user's script's plan, no torch), stage by stage,
with the telemetry records of a node busy during the warm-up and quiet while the steps are measured."""

import asyncio
import json
import os

from ddptop.control import RecordedControl
from ddptop.protocol import layout
from ddptop.protocol.wire import EventWriter
from ddptop.run import rundir
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.run.session import Session
from ddptop.telemetry.inventory import Inventory
from ddptop.tui.app import DdptopApp
from ddptop.tui.panels import StepChart

from .conftest import REPO
from .tui_helpers import first_frame, wait_for

TRAIN = os.path.join(REPO, "examples", "train.py")
WARMUP, ITERS = 20, 5


class ScriptRun:
    """A script's run directory written stage by stage: its launches (numbered from 1, as the plan orders them:
    each world size in turn, ``launches`` times), their ranks' events and the node's telemetry at the times a
    test gives (seconds after ``T0``)."""

    T0 = 1_800_000_000.0

    def __init__(self, tmp_path, launches: int = 1, world_sizes=(1,)) -> None:
        plan = build_plan(PlanOptions(script=[TRAIN, "--workers", "0"], world_sizes=list(world_sizes),
                                      iters=ITERS, warmup=WARMUP, launches=launches),
                          Inventory(problem="test"), cpu_count=2)
        self.session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
        self.run_dir = self.session.run_dir
        self.launches = list(plan.launches())
        self.config_id = self.launches[0].configs[0].config_id
        self.writers: dict[int, list[EventWriter]] = {}
        self.telemetry = open(os.path.join(self.run_dir, layout.TIMELINE_FILE), "a", encoding="utf-8")

    def at(self, seconds: float) -> float:
        return self.T0 + seconds

    def name(self, number: int) -> str:
        return f"{number:02d}-{self.launches[number - 1].launch_key}"

    def config(self, number: int) -> str:
        return self.launches[number - 1].configs[0].config_id

    def rounds(self, number: int) -> tuple[int, int]:
        """(this launch's round of its configuration, the configuration's rounds)."""
        config = self.config(number)
        mine = [n for n, launch in enumerate(self.launches, 1) if launch.configs[0].config_id == config]
        return mine.index(number), len(mine)

    def start(self, number: int, when: float) -> None:
        launch = self.launches[number - 1]
        self.session.mark(what="launch_start", launch=self.name(number), world_size=launch.world_size,
                          backend=launch.backend, configs=[self.config(number)])
        path = rundir.launch_dir(self.run_dir, number, launch.launch_key, 0)
        self.writers[number] = [EventWriter(os.path.join(path, "events", f"rank-{r}.jsonl"), r, 0.0)
                                for r in range(launch.world_size)]
        round_index, rounds = self.rounds(number)
        for rank, writer in enumerate(self.writers[number]):
            writer.emit("hello", world_size=launch.world_size, host=os.uname().nodename,
                        pid=os.getpid() + 1000 + 10 * number + rank, device="cpu", local_rank=rank, t=self.at(when))
            writer.emit("config_start", config_id=self.config(number), warmup=WARMUP, iters=ITERS, command=[TRAIN],
                        round=round_index, rounds=rounds, t=self.at(when))
            writer.flush()

    def steps(self, number: int, phase: str, count: int, step_s: float, when: float) -> None:
        for writer in self.writers[number]:
            writer.emit("samples", config_id=self.config(number), phase=phase, first_iter=0, sec=[step_s] * count,
                        round=self.rounds(number)[0], t=self.at(when))
            writer.flush()

    def end(self, number: int, when: float, measure_s: float) -> None:
        round_index, rounds = self.rounds(number)
        for writer in self.writers[number]:
            writer.emit("config_end", config_id=self.config(number), status="ok", iters=ITERS, warmup_iters=WARMUP,
                        measure_s=measure_s, ended_by="ddptop", round=round_index, last=round_index == rounds - 1,
                        rounds=rounds, t=self.at(when))
            writer.flush()
        self.session.mark(what="launch_end", launch=self.name(number), exit_code=0, status="ok")

    def fail(self, number: int, reason: str) -> None:
        """The launch died: ddptop ends its configuration as failed, with ``reason``."""
        self.session.mark(what="launch_end", launch=self.name(number), exit_code=1, status="failed")
        self.session.mark(what="config", config_id=self.config(number), status="failed", reason=reason)

    def reading(self, when: float, other_cpu_cores: float) -> None:
        """One telemetry record: the host's CPU taken by other processes in the second before ``when``."""
        record = {"v": 1, "type": "telemetry", "t": self.at(when), "rank": -1, "gpus": [], "ranks": [],
                  "host": {"cpu": 50.0, "mem_used": 1 << 30, "mem_total": 8 << 30, "mem_available": 7 << 30,
                           "own_cpu_cores": 1.0, "other_cpu_cores": other_cpu_cores, "steal_cores": 0.0,
                           "swap_in": 0, "swap_out": 0}}
        if when == 0:
            record["info"] = {"fake": False, "nvml": "test", "interval": 1.0, "gpus": []}
        self.telemetry.write(json.dumps(record) + "\n")
        self.telemetry.flush()

    def close(self) -> None:
        for writers in self.writers.values():
            for writer in writers:
                writer.close()
        self.telemetry.close()
        self.session.close()


def _chart_text(app) -> list[str]:
    chart = app.query_one("#chart", StepChart)
    return ["".join(segment.text for segment in line) for line in chart._lines]


def test_the_step_chart_waits_for_the_first_steps_instead_of_drawing_an_empty_axis(tmp_path):
    """N=1 at 80% of its way (its 20 warm-up steps done, none of its 5 measured steps yet): the chart says it
    waits for the first steps; no axis of 0.0000s, no caption of 0 ranks and 0 steps a column."""
    run = ScriptRun(tmp_path)
    run.reading(0, 0.0)
    run.start(1, 1)
    run.steps(1, "warmup", WARMUP, 0.05, 2)
    run.session.refresh()
    (config,) = run.session.snapshot().configs
    assert config.status == "running" and config.progress == 0.8 and config.sample_count == 0

    async def look():
        app = DdptopApp.for_recorded(run.run_dir, fps=8)
        async with app.run_test(size=(80, 24)) as pilot:
            await first_frame(pilot)
            await wait_for(pilot, lambda: bool(_chart_text(app)), timeout=30)
            lines = _chart_text(app)
            app.save_screenshot(str(tmp_path / "waiting.svg"))
            await pilot.press("c")  # every rank's dots: the same wait
            await pilot.pause(0.3)
            app.query_one("#chart", StepChart).update_from(app.last_snapshot)
            per_rank = _chart_text(app)
            await pilot.press("c")
            # its first measured steps: drawn at the next frame, not at the chart's next redraw a few seconds on
            run.steps(1, "measure", 2, 0.05, 3)
            await wait_for(pilot, lambda: app.last_snapshot.session.configs[0].sample_count == 2, timeout=30)
            app.query_one("#chart", StepChart).update_from(app.last_snapshot)
            drawn = _chart_text(app)
            await pilot.press("q")
        return lines, per_rank, drawn

    try:
        lines, per_rank, drawn = asyncio.run(look())
    finally:
        run.close()
    assert "median and p10-p90" in drawn[0] and "0.0525s│" in "\n".join(drawn), drawn  # 0.05 s steps, on an axis
    for shown in (lines, per_rank):
        assert "waiting for the first steps" in shown[0], shown
        text = "\n".join(shown)
        assert "0.0000s" not in text and "rank(s)" not in text and "step(s) per column" not in text, text
        assert all(not line.strip() for line in shown[1:]), shown  # no axis, no empty plot


def _shown_validity(control: RecordedControl):
    """The live view's validity of the only configuration, from a snapshot taken as a frame takes it."""
    (config,) = control.take_snapshot().session.configs
    return config.validity


def _judged_live_and_final(tmp_path, warmup_busy: float, measured_busy: float):
    """N=1: 20 warm-up steps (1 s to 5 s) with other processes taking ``warmup_busy`` cores, then 5 measured
    steps of a second (5 s to 10 s, rank 0's measure_s) taking ``measured_busy``; a reading every second. The
    live view's validity at each stage (the watcher reads the files as they grow) and the summary's."""
    run = ScriptRun(tmp_path)
    control = RecordedControl.of(run.run_dir)
    seen = {}
    try:
        run.reading(0, 0.0)
        run.start(1, 1)
        for second in (2, 3, 4, 5):
            run.reading(second, warmup_busy)
        run.steps(1, "warmup", WARMUP, 0.2, 5)
        seen["warm-up"] = _shown_validity(control)
        for second in (6, 7, 8):
            run.reading(second, measured_busy)
        run.steps(1, "measure", 3, 1.0, 8)
        seen["measuring"] = _shown_validity(control)
        for second in (9, 10):
            run.reading(second, measured_busy)
        run.steps(1, "measure", 2, 1.0, 10)
        run.end(1, 10.05, measure_s=5.0)
        seen["ended"] = _shown_validity(control)
        run.reading(11, warmup_busy)  # the node's next reading, after the window: no part of it
        seen["after"] = _shown_validity(control)
        from ddptop.report import build

        (entry,) = build.build_summary(Session.load(run.run_dir)).configs
    finally:
        run.close()
    return seen, entry.validity


def test_a_busy_warm_up_leaves_no_mark_where_the_summary_finds_the_measured_steps_quiet(tmp_path):
    """The case a user met: other processes took 1.9 cores while N=1 warmed up and 0.02 while its steps were
    measured. The summary judges the measured steps (quiet); the live view judges the same window by the same
    rule, so it never marks N=1 disturbed: not while it warms up, not "so far", not once it ended."""
    seen, final = _judged_live_and_final(tmp_path, warmup_busy=1.9, measured_busy=0.02)
    assert final.disturbed is False and final.reasons == []
    assert seen["after"] is not None and not seen["after"].disturbed and not seen["after"].so_far
    assert seen["warm-up"] is None  # nothing measured yet: nothing judged
    assert seen["measuring"] is not None and seen["measuring"].so_far and not seen["measuring"].disturbed
    assert seen["ended"] is not None and not seen["ended"].disturbed


def test_a_busy_measured_window_is_marked_so_far_then_as_the_summary_says(tmp_path):
    """Other processes took 1.9 cores while the steps were measured: "so far" while they run, then the summary's
    own verdict and reason once its window closed (the reading after it read)."""
    seen, final = _judged_live_and_final(tmp_path, warmup_busy=0.02, measured_busy=1.9)
    assert final.disturbed is True and final.reasons == ["other processes used 1.9 cores"]
    assert seen["warm-up"] is None
    assert seen["measuring"].disturbed and seen["measuring"].so_far
    assert seen["after"].disturbed and not seen["after"].so_far
    assert list(seen["after"].reasons) == final.reasons


def test_a_configuration_measured_again_is_judged_afresh_in_its_further_launch_and_at_last_as_the_summary(tmp_path):
    """Two launches of N=1: other processes took 1.9 cores while the first measured it, none while the second
    did. Live: disturbed so far in the first; nothing while the second warms up (its first launch's readings are
    no part of the new window); quiet so far in the second; at the end the summary's verdict, which uses the
    quiet launch."""
    run = ScriptRun(tmp_path, launches=2)
    control = RecordedControl.of(run.run_dir)
    seen = {}
    try:
        run.reading(0, 0.0)
        run.start(1, 1)
        run.reading(2, 0.02)
        run.steps(1, "warmup", WARMUP, 0.05, 2)
        for second in (3, 4, 5):
            run.reading(second, 1.9)
        run.steps(1, "measure", ITERS, 0.6, 5)
        run.end(1, 5.05, measure_s=3.0)
        run.reading(6, 0.02)
        seen["first"] = _shown_validity(control)
        run.start(2, 7)
        run.reading(8, 0.02)
        run.steps(2, "warmup", WARMUP, 0.05, 8)
        seen["second warm-up"] = _shown_validity(control)
        for second in (9, 10, 11):
            run.reading(second, 0.02)
        run.steps(2, "measure", ITERS, 0.6, 11)
        seen["second"] = _shown_validity(control)
        run.end(2, 11.05, measure_s=3.0)
        run.reading(12, 0.02)
        seen["ended"] = _shown_validity(control)
        from ddptop.report import build

        (entry,) = build.build_summary(Session.load(run.run_dir)).configs
    finally:
        run.close()
    assert [u.disturbed for u in entry.launches] == [True, False] and entry.validity.disturbed is False
    assert seen["first"].disturbed and seen["first"].so_far
    assert seen["second warm-up"] is None
    assert not seen["second"].disturbed and seen["second"].so_far
    assert not seen["ended"].disturbed and not seen["ended"].so_far


def _screen(app) -> list[str]:
    return [strip.text for strip in app.screen._compositor.render_strips()]


def _status_cells(app) -> dict[str, str]:
    from ddptop.tui.panels import ConfigTable

    table = app.query_one("#configs", ConfigTable)
    return {str(table.get_cell(row, "label")): str(table.get_cell(row, "status")) for row in table.rows}


FAILURE = "rank 1 exited with code -11 (SIGSEGV) before its first measured step"


def test_the_status_marks_are_short_and_said_in_words_under_the_table_at_80x24(tmp_path):
    """A watcher at 80x24 while N=1 is measured on a node where other processes take 1.9 cores, then N=2 fails:
    the status cells hold a word and a mark ("running !", "ok !", "failed"), never a cut word; the line under
    the table says what each mark means and why, "so far" while the steps still run."""
    run = ScriptRun(tmp_path, world_sizes=(1, 2))
    run.reading(0, 0.0)
    run.start(1, 1)
    run.reading(2, 0.02)
    run.steps(1, "warmup", WARMUP, 0.05, 2)
    seen = {}

    async def watch():
        app = DdptopApp.for_recorded(run.run_dir, fps=8)
        async with app.run_test(size=(80, 24)) as pilot:
            await first_frame(pilot)
            for second in (3, 4, 5):
                run.reading(second, 1.9)
            run.steps(1, "measure", 3, 1.0, 5)
            await wait_for(pilot, lambda: _status_cells(app).get("1M/1P") == "running !", timeout=30)
            await pilot.pause(0.3)
            seen["running"] = (_status_cells(app), _screen(app))
            run.reading(6, 1.9)
            run.steps(1, "measure", 2, 1.0, 6)
            run.end(1, 6.05, measure_s=4.0)
            run.reading(7, 0.02)
            run.start(2, 8)
            run.fail(2, FAILURE)
            await wait_for(pilot, lambda: _status_cells(app).get("1M/2P") == "failed", timeout=30)
            await pilot.pause(0.3)
            seen["ended"] = (_status_cells(app), _screen(app))
            app.save_screenshot(str(tmp_path / "marks.svg"))
            await pilot.press("q")

    try:
        asyncio.run(watch())
    finally:
        run.close()
    cells, screen = seen["running"]
    assert cells == {"1M/1P": "running !", "1M/2P": "pending"}
    text = "\n".join(screen)
    assert "…" not in text and "othe" not in "".join(line for line in screen if line.lstrip().startswith("1M/1P"))
    assert "! 1M/1P disturbed while measured: other processes used 1.9 cores (so far)" in text, text
    cells, screen = seen["ended"]
    assert cells == {"1M/1P": "ok !", "1M/2P": "failed"}
    text = "\n".join(screen)
    assert "…" not in text, text
    assert "! 1M/1P disturbed while measured: other processes used 1.9 cores" in text, text
    assert "(so far)" not in text
    # the failure's reason, whole: wrapped under the table where it does not fit on one line
    notes = " ".join(line.strip() for line in screen)
    assert f"1M/2P failed: {FAILURE}" in notes, text
