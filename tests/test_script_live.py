"""A user's training script watched live (``ddptop run -- train.py``): its examples/s from the examples its ranks
drew, the share of its steps spent waiting for batches (per configuration and per rank), the command it runs,
how it ended, and its own prints in the Logs panel, in the TUI (``watch``'s view of a run directory) and the
headless lines."""

import asyncio
import io
import os
import textwrap

import pytest
from rich.console import Console

from ddptop.analysis import script_steps
from ddptop.headless import HeadlessView
from ddptop.live.live_run import create_live_run
from ddptop.protocol import layout
from ddptop.protocol.wire import EventWriter
from ddptop.run import rundir
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.run.session import Session
from ddptop.telemetry.inventory import Inventory
from ddptop.tui.app import DdptopApp
from ddptop.tui.panels import ConfigTable, LogPanel, RankTable

from .conftest import REPO
from .test_tui import layout_problems
from .tui_helpers import first_frame, wait_for

TRAIN = os.path.join(REPO, "examples", "train.py")
COMMAND = [TRAIN, "--workers", "0", "--transform-ms", "2"]
ITERS = 20
# n1: 32 examples and 4096 tokens a step of 50 ms, 10 ms of it waiting for its batch (20%)
# n2: 32 examples a rank in steps of 40 ms; rank 0 waits 2 ms (5%), rank 1 20 ms (50%): starved of data
N1_STEP, N2_STEP = 0.05, 0.04
N2_WAITS = {0: 0.002, 1: 0.02}


def _script_run(tmp_path) -> str:
    """A script's run directory as ddptop writes it, with no torch: N=1 ended by the script itself with a probe
    note, N=2 running (12 of its 20 steps), each rank's stdout and stderr in torchrun's log layout."""
    plan = build_plan(PlanOptions(script=COMMAND, world_sizes=[1, 2], iters=ITERS, warmup=1, launches=1),
                      Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    for number, launch in enumerate(plan.launches(), 1):
        (config,) = launch.configs
        name = f"{number:02d}-{launch.launch_key}"
        session.mark(what="launch_start", launch=name, world_size=launch.world_size, backend=launch.backend,
                     configs=[config.config_id])
        path = rundir.launch_dir(session.run_dir, number, launch.launch_key, 0)
        writers = [EventWriter(os.path.join(path, "events", f"rank-{r}.jsonl"), r, 0.0)
                   for r in range(launch.world_size)]
        for rank, writer in enumerate(writers):
            writer.emit("hello", world_size=launch.world_size, host=os.uname().nodename, pid=os.getpid(),
                        device="cpu", local_rank=rank)
            writer.emit("config_start", config_id=config.config_id, warmup=1, iters=ITERS, command=COMMAND)
            logs = os.path.join(layout.logs_dir(path), "none_abc", "attempt_0", str(rank))
            os.makedirs(logs)
            with open(os.path.join(logs, "stdout.log"), "w", encoding="utf-8") as handle:
                handle.write(f"epoch 0 loss 2.30 from rank {rank} OUT-MARK-{launch.world_size}\n")
            with open(os.path.join(logs, "stderr.log"), "w", encoding="utf-8") as handle:
                handle.write(f"warning from rank {rank} ERR-MARK-{launch.world_size}\n")
            if launch.world_size == 1:
                writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=0,
                            sec=[N1_STEP] * ITERS, data_wait=[0.01] * ITERS, examples=[32] * ITERS,
                            tokens=[4096] * ITERS)
                writer.emit("config_end", config_id=config.config_id, status="ok", iters=ITERS, ended_by="script",
                            note="batch timing off from step 7: a batch the probe could not read",
                            script={"process_group": True, "group_backend": "nccl"})  # init_process_group("nccl")
            else:
                writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=0,
                            sec=[N2_STEP] * 12, data_wait=[N2_WAITS[rank]] * 12, examples=[32] * 12)
            writer.close()
        if launch.world_size == 1:
            session.mark(what="launch_end", launch=name, exit_code=0, status="ok")
    session.refresh()
    session.close()
    return session.run_dir


@pytest.fixture
def script_run(tmp_path):
    return _script_run(tmp_path)


def test_the_live_figures_equal_the_summary_s_over_the_same_steps(script_run):
    """The live tally, caught up a step at a time, gives what ``observed_batch`` and ``data_wait_share`` give."""
    session = Session.load(script_run)
    running = session.configs[next(c for c in session.order if c.endswith("/n2/gloo"))]
    tally = script_steps.LiveStepValues()
    samples = {rank: [] for rank in running.samples}
    values = {name: {rank: [] for rank in per_rank} for name, per_rank in running.step_values.items()}
    for step in range(len(running.samples[0])):
        for rank in samples:
            samples[rank].append(running.samples[rank][step])
            for name, per_rank in running.step_values.items():
                values[name][rank].append(per_rank[rank][step])
        tally.catch_up(samples, values)
    assert tally.observed_batch() == script_steps.observed_batch(running.step_values)
    assert tally.data_wait_shares() == pytest.approx(script_steps.data_wait_share(running.samples,
                                                                                 running.step_values))
    assert script_steps.starved_rank(tally.data_wait_shares()) == 1 and tally.tokens_per_step() is None
    (figures,) = [c.script for c in session.snapshot().configs if c.config_id == running.spec.config_id]
    assert figures.ex_per_s == pytest.approx(64 / N2_STEP) and figures.data_wait == pytest.approx(0.275)
    session.close()


def test_watching_a_script_shows_its_rates_data_wait_command_and_logs(script_run):
    """``ddptop watch`` of a script's run directory at 160x50: ex/s and tok/s from the examples it drew, the
    data-wait share per configuration and per rank (the starved rank marked), the command on the status line,
    the ranks' stdout and stderr and how the ended configuration ended in the Logs panel."""

    async def run():
        app = DdptopApp.for_recorded(script_run, fps=8)
        async with app.run_test(size=(160, 50)) as pilot:
            await first_frame(pilot)
            table = app.query_one("#configs", ConfigTable)
            n1, n2 = table.rows
            await wait_for(pilot, lambda: str(table.get_cell(n2, "exs")) != "-", timeout=30)
            cells = {row: {key: str(table.get_cell(row, key)) for key in ("bs", "exs", "toks", "wait")}
                     for row in (n1, n2)}
            header = [label for _, label, _ in table.columns]
            status = str(app.query_one("#status-line").render())
            await pilot.press("2")
            ranks = app.query_one("#ranks", RankTable)
            await wait_for(pilot, lambda: ranks.row_count == 2, timeout=30)
            rank_cells = {row: (str(ranks.get_cell(row, "wait")), str(ranks.get_cell(row, "mark")))
                          for row in ranks.rows}
            await pilot.press("4")
            logs = app.query_one("#logs-view", LogPanel)
            await wait_for(pilot, lambda: "OUT-MARK-2" in "\n".join(logs.lines), timeout=30)
            log_text = "\n".join(logs.lines)
            await pilot.press("q")
        return cells, header, status, rank_cells, log_text

    cells, header, status, rank_cells, log_text = asyncio.run(run())
    assert cells[sorted(cells)[0]] == {"bs": "32", "exs": "640", "toks": "81920", "wait": "20%"}
    assert cells[sorted(cells)[1]] == {"bs": "32", "exs": "1600", "toks": "-", "wait": "28%"}
    assert "data wait" in header and "tok/s" in header and "comm" not in header
    assert "running 1M/2P train.py --workers 0 --transform-ms 2" in status
    assert rank_cells == {"0": ("5%", ""), "1": ("50%", "starved of data")}
    for marker in ("[0 out] epoch 0 loss 2.30 from rank 0 OUT-MARK-2", "[1 out] epoch 0 loss 2.30 from rank 1",
                   "[1 err] warning from rank 1 ERR-MARK-2", "02-n2-gloo: train.py --workers 0 --transform-ms 2"):
        assert marker in log_text, log_text
    assert ("1M/1P train.py --workers 0 --transform-ms 2: the script ended itself; batch timing off from step 7"
            in log_text)


def test_a_script_at_80x24_keeps_ex_s_and_data_wait_and_nothing_runs_together(script_run):
    async def run():
        app = DdptopApp.for_recorded(script_run, fps=8)
        async with app.run_test(size=(80, 24)) as pilot:
            await first_frame(pilot)
            table = app.query_one("#configs", ConfigTable)
            await wait_for(pilot, lambda: str(table.get_cell(table.rows[1], "exs")) != "-", timeout=30)
            await pilot.pause(0.2)
            shown = [key for key, _, _ in table.columns]
            found = {"overview": layout_problems(app)}
            status = str(app.query_one("#status-line").render())
            await pilot.press("2")
            await pilot.pause(0.2)
            ranks = [key for key, _, _ in app.query_one("#ranks", RankTable).columns]
            found["ranks"] = layout_problems(app)
            await pilot.press("q")
        return shown, ranks, found, status

    shown, ranks, found, status = asyncio.run(run())
    assert found == {"overview": [], "ranks": []}
    assert {"status", "p50", "exs", "wait"} <= set(shown) and {"wait", "mark"} <= set(ranks)
    assert "running 1M/2P train.py --workers 0" in status  # the command, cut to what the line leaves


def test_the_headless_line_of_a_script_gives_its_examples_per_second(script_run):
    console = Console(file=io.StringIO(), width=200)
    session = Session.load(script_run)
    HeadlessView(session, console).render()
    session.close()
    (line,) = console.file.getvalue().splitlines()  # the one ended configuration
    assert line.startswith("[train.py/n1/gloo] ok"), line
    assert " 640.0 ex/s" in line and "81920 tok/s" in line and "data wait 20%" in line and " 0.0 ex/s" not in line
    assert line.endswith("backend nccl (the script's; launched for gloo)")  # its own group's, the launch's beside


PRINTING = textwrap.dedent("""
    import os, runpy, sys
    # no flush: the launcher runs every rank with PYTHONUNBUFFERED=1
    print("SCRIPT-STDOUT-MARK rank", os.environ["RANK"])
    print("SCRIPT-STDERR-MARK rank", os.environ["RANK"], file=sys.stderr)
    sys.argv = [{train!r}, "--workers", "0", "--transform-ms", "2", "--epochs", "100"]
    runpy.run_path({train!r}, run_name="__main__")
""")


@pytest.mark.slow
def test_a_script_s_prints_reach_the_logs_panel_while_it_runs_and_stay_in_the_run_dir(tmp_path):
    """A real sweep of a script that prints a marker to stdout and stderr on every rank: both show in the Logs
    panel while its configuration still runs (not only once its process ended), and stay in the launch's logs."""
    script = tmp_path / "printing.py"
    script.write_text(PRINTING.format(train=TRAIN))
    options = PlanOptions(script=[str(script)], world_sizes=[2], iters=2000, warmup=1, launches=1)
    live = create_live_run(options, str(tmp_path / "run"), telemetry_interval=0.5, plots=False)

    async def run():
        app = DdptopApp.for_live(live, fps=4)
        async with app.run_test(size=(160, 50)) as pilot:
            await pilot.press("4")
            logs = app.query_one("#logs-view", LogPanel)
            wanted = ("[0 out] SCRIPT-STDOUT-MARK rank 0", "[1 out] SCRIPT-STDOUT-MARK rank 1",
                      "[0 err] SCRIPT-STDERR-MARK rank 0", "[1 err] SCRIPT-STDERR-MARK rank 1")
            await wait_for(pilot, lambda: all(w in "\n".join(logs.lines) for w in wanted), timeout=240)
            running = [c.status for c in live.session.snapshot().configs]
            await pilot.press("q")
            await wait_for(pilot, lambda: not app.is_running, timeout=120)
        return running

    running = asyncio.run(run())
    assert running == ["running"]  # seen before the script's end: its ranks' buffers were not flushed by an exit
    launch = os.path.join(live.session.run_dir, "launches", "01-n2-gloo")
    found = {(rank, stream): open(path, encoding="utf-8").read()
             for rank, streams in rundir.worker_logs(launch).items() for stream, path in streams.items()}
    assert "SCRIPT-STDOUT-MARK rank 1" in found[(1, "stdout")] and "SCRIPT-STDERR-MARK rank 0" in found[(0, "stderr")]
