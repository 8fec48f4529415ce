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
    """A script's run directory written stage by stage: N=1 (one rank), its events and the node's telemetry
    at the times a test gives (seconds after ``T0``)."""

    T0 = 1_800_000_000.0

    def __init__(self, tmp_path, world_sizes=(1,)) -> None:
        plan = build_plan(PlanOptions(script=[TRAIN, "--workers", "0"], world_sizes=list(world_sizes),
                                      iters=ITERS, warmup=WARMUP, launches=1),
                          Inventory(problem="test"), cpu_count=2)
        self.session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
        self.run_dir = self.session.run_dir
        self.launches = list(plan.launches())
        self.writers: dict[int, list[EventWriter]] = {}
        self.names: dict[int, str] = {}
        self.configs = {launch.world_size: launch.configs[0].config_id for launch in self.launches}
        self.telemetry = open(os.path.join(self.run_dir, layout.TIMELINE_FILE), "a", encoding="utf-8")

    def at(self, seconds: float) -> float:
        return self.T0 + seconds

    def start(self, world_size: int, when: float) -> None:
        number, launch = next((n, l) for n, l in enumerate(self.launches, 1) if l.world_size == world_size)
        name = self.names[world_size] = f"{number:02d}-{launch.launch_key}"
        self.session.mark(what="launch_start", launch=name, world_size=world_size, backend=launch.backend,
                          configs=[self.configs[world_size]])
        path = rundir.launch_dir(self.run_dir, number, launch.launch_key, 0)
        self.writers[world_size] = [EventWriter(os.path.join(path, "events", f"rank-{r}.jsonl"), r, 0.0)
                                    for r in range(world_size)]
        for rank, writer in enumerate(self.writers[world_size]):
            writer.emit("hello", world_size=world_size, host=os.uname().nodename, pid=os.getpid() + 1000 + rank,
                        device="cpu", local_rank=rank, t=self.at(when))
            writer.emit("config_start", config_id=self.configs[world_size], warmup=WARMUP, iters=ITERS,
                        command=[TRAIN], t=self.at(when))
        self.flush(world_size)

    def steps(self, world_size: int, phase: str, count: int, step_s: float, when: float) -> None:
        for writer in self.writers[world_size]:
            writer.emit("samples", config_id=self.configs[world_size], phase=phase, first_iter=0,
                        sec=[step_s] * count, t=self.at(when))
        self.flush(world_size)

    def end(self, world_size: int, when: float, measure_s: float) -> None:
        for writer in self.writers[world_size]:
            writer.emit("config_end", config_id=self.configs[world_size], status="ok", iters=ITERS,
                        warmup_iters=WARMUP, measure_s=measure_s, ended_by="ddptop", t=self.at(when))
        self.flush(world_size)
        self.session.mark(what="launch_end", launch=self.names[world_size], exit_code=0, status="ok")

    def flush(self, world_size: int) -> None:
        for writer in self.writers[world_size]:
            writer.flush()

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
            await pilot.press("q")
        return lines, per_rank

    try:
        lines, per_rank = asyncio.run(look())
    finally:
        run.close()
    for shown in (lines, per_rank):
        assert "waiting for the first steps" in shown[0], shown
        text = "\n".join(shown)
        assert "0.0000s" not in text and "rank(s)" not in text and "step(s) per column" not in text, text
        assert all(not line.strip() for line in shown[1:]), shown  # no axis, no empty plot
