"""Partial measurements are figures too: a configuration cut short keeps its steps' statistics, and one
whose ddptop died is ``interrupted``, not ``running`` forever."""

import json
import os
import subprocess
import sys
import time

from ddptop.run import rundir
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.protocol import layout, storage
from ddptop.protocol.wire import EventWriter
from ddptop.report import build, problem_tables, sections
from ddptop.run.session import RUNNER_RANK, Session
from ddptop.telemetry.inventory import Inventory

from .conftest import ddptop


def _dead_pid() -> int:
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _run_whose_writer_died(tmp_path) -> tuple[str, list]:
    """A run directory as a ddptop killed with -9 leaves it: no sweep_end, a config mid-way, its steps on disk."""
    plan = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4], iters=100, warmup=1),
                      Inventory(problem="test"), cpu_count=2)
    run_dir = rundir.create_run_dir(str(tmp_path / "run"), plan.name)
    storage.write_json(os.path.join(run_dir, layout.PLAN_FILE), plan.to_json())
    runner = EventWriter(os.path.join(run_dir, layout.RUNNER_FILE), RUNNER_RANK, 0.0)
    runner.emit("hello", world_size=0, host=os.uname().nodename, pid=_dead_pid(), device="-")
    configs = plan.configs()
    runner.emit("mark", data={"what": "launch_start", "launch": "01-n1-gloo", "world_size": 1, "backend": "gloo",
                              "configs": [c.config_id for c in configs]})
    runner.close()
    events = layout.events_path(rundir.launch_dir(run_dir, 1, "n1-gloo", 0), 0)
    writer = EventWriter(events, 0, 0.0)
    writer.emit("hello", world_size=1, host=os.uname().nodename, pid=_dead_pid(), device="cpu")
    writer.emit("config_start", config_id=configs[0].config_id, warmup=1, iters=100)
    time.sleep(0.3)  # the files' own timestamps are all that tells how long the sweep ran
    writer.emit("samples", config_id=configs[0].config_id, phase="measure", first_iter=0,
                sec=[0.001 + 0.0001 * (i % 5) for i in range(40)])
    writer.close()
    return run_dir, configs


def test_a_run_whose_ddptop_died_reports_interrupted_with_the_steps_it_kept(tmp_path):
    run_dir, configs = _run_whose_writer_died(tmp_path)
    session = Session.load(run_dir)
    session.refresh(final=True)
    summary = build.build_summary(session)
    first, second = summary.configs[0], summary.configs[1]
    assert first.status == "interrupted" and "died" in first.reason
    assert first.stats.n == 40 and 0.001 <= first.stats.sec_iter.p50 <= 0.0015
    assert second.status == "not_run"
    assert summary.overhead.sweep_wall_s >= 0.3  # from the files' own timestamps
    assert not summary.complete

    text = sections.text_report(summary)
    assert "interrupted, 40 steps kept" in text  # the benchmark row shows its percentiles and that it was cut
    assert "[running" not in text and "running (" not in text

    done = ddptop("report", run_dir)  # what a user types after kill -9
    assert done.returncode == 0, done.stderr
    assert "interrupted" in done.stdout and "Sweep wall time 0.0 s" not in done.stdout


def test_a_stopped_configuration_shows_its_kept_steps_in_every_report(tmp_path):
    run_dir, configs = _run_whose_writer_died(tmp_path)
    session = Session.load(run_dir)
    session.refresh(final=True)
    summary = build.build_summary(session)
    entry = summary.configs[0]
    entry.status, entry.reason = "stopped", "stopped by the user"
    problems = problem_tables.problems_text(summary)
    assert "stopped (40 steps kept: p50 0.0012 s" in problems and "ex/s" in problems
    markdown = sections.markdown(summary)
    assert "stopped, 40 steps kept" in markdown
    json.dumps(summary.to_json())  # still plain JSON
