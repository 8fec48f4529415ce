"""A user's training script that goes wrong, run by the real `ddptop run -- script.py` (docs/scripts.md, "Bad
input and faults"): each fault ends its configuration with a reason that says what happened, the sweep goes on,
and nothing the launch started outlives it.

Quick: the words for a rank that ended its script by itself while its peers went on. Slow (real torchrun
launches with gloo, small scripts, N = 1 and 2): a script that raises at N = 2 only; one whose steps ddptop
cannot see; ranks that reach their end at different steps (one returns, one waits); DataLoader workers of a
script ended by ddptop and by Ctrl-C; a script that trains in processes of its own (mp.spawn), and one that
ends before its first training step: both failed, as nothing was measured.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time

import pytest

from ddptop.protocol.wire import EventWriter
from ddptop.run import rundir
from ddptop.run.failure_reasons import script_ended_apart, script_ended_early
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.run.session import Session
from ddptop.telemetry.inventory import Inventory
from tests.conftest import REPO, Finished, ddptop, processes_mentioning

# one launch per world size, few steps, no telemetry: each run is launching and tearing down, mostly
SHORT = ("--launches", "1", "--iters", "10", "--warmup", "1", "--telemetry-interval", "0")
# "it did not hang": far above a run's seconds here, below what the startup grace (120 s) would take
NO_HANG_S = 100


def run_script(run_dir: str, *args: str) -> Finished:
    """A real headless `ddptop run [flags] -- script ARGS` (conftest's run_sweep puts --no-plots last: here it
    would be the script's)."""
    done = ddptop("run", "--headless", "--no-plots", "--out", run_dir, *args)
    return Finished(done.returncode, done.stdout, done.stderr, run_dir)


def _configs(done) -> dict[int, dict]:
    return {c["world_size"]: c for c in done.summary()["configs"]}


def _nothing_left(*names: str) -> None:
    """No process whose command line names any of ``names`` (a rank, a loader worker, a spawned process)."""
    deadline = time.monotonic() + 10
    while any(processes_mentioning(n) for n in names) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert [p.cmdline() for n in names for p in processes_mentioning(n)] == []


def _script(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return str(path)


def test_a_rank_that_ended_its_script_by_itself_is_said_first():
    ends = {1: {"status": "ok", "ended_by": "script", "warmup_iters": 1, "iters": 2},
            0: {"status": "failed"}}
    words = script_ended_apart(ends)
    assert words.startswith("the script ended by itself on rank 1 after 3 steps while its other ranks went on")
    assert "uneven data across ranks" in words
    assert script_ended_apart({0: {"status": "ok", "ended_by": "ddptop", "iters": 5}, 1: {"status": "failed"}}) is None
    assert script_ended_apart({}) is None


def test_a_script_that_ended_before_its_first_step_is_said_in_its_own_words():
    """Nothing measured: its exit code and last line, or that it trains in processes of its own (mp.spawn)."""
    first = {"status": "ok", "ended_by": "script", "warmup_iters": 0, "iters": 0, "script": {"spawned": 0}}
    words = script_ended_early({0: first, 1: first}, 2, 0, "Unable to locate sufficient 2 gpus. Exiting.")
    assert words == ("the script ended before its first training step (exit code 0): nothing measured; its last "
                     "output: Unable to locate sufficient 2 gpus. Exiting.")
    trained = {"status": "ok", "ended_by": "script", "warmup_iters": 1, "iters": 4}
    assert script_ended_early({0: trained, 1: first}, 2, 0).startswith(
        "the script ended before its first training step on rank 1 (exit code 0)")
    spawned = dict(first, script={"spawned": 1})
    assert script_ended_early({0: spawned}, 1, 0).startswith(
        "the script trains in processes of its own: nothing measured (exit code 0); it called "
        "torch.multiprocessing.spawn")
    warmed = {"status": "ok", "ended_by": "script", "warmup_iters": 1, "iters": 0, "script": {"spawned": 0}}
    assert script_ended_early({0: warmed}, 1, 0, "done") == (
        "the script ended after 1 warm-up step, before its first measured step (exit code 0): nothing measured; "
        "let it train longer (its own step or epoch count) or lower --warmup; its last output: done")
    stopped = {"status": "ok", "ended_by": "ddptop", "warmup_iters": 1, "iters": 10}
    assert script_ended_early({0: trained, 1: stopped}, 2, 0) is None and script_ended_early({}, 1) is None


@pytest.mark.parametrize("warmed", [0, 2])
def test_a_session_never_calls_a_script_that_ended_before_its_first_measured_step_ok(tmp_path, warmed):
    """The ranks' own ends say ok (the script returned, before its first step or after ``warmed`` warm-up
    steps); the configuration waits for the sweep's word (failed, with the script's last output) instead of
    ending ok with nothing measured."""
    plan = build_plan(PlanOptions(script=[_script(tmp_path, "ends_first.py", ENDS_FIRST)], world_sizes=[1],
                                  iters=10, warmup=1, launches=1), Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    (launch,) = plan.launches()
    (config,) = launch.configs
    path = rundir.launch_dir(session.run_dir, 1, launch.launch_key, 0)
    writer = EventWriter(os.path.join(path, "events", "rank-0.jsonl"), 0, 0.0)
    writer.emit("config_start", config_id=config.config_id, warmup=1, iters=10)
    writer.emit("config_end", config_id=config.config_id, status="ok", iters=0, warmup_iters=warmed, ended_by="script",
                script={"spawned": 0})
    writer.close()
    session.refresh()
    assert session.configs[config.config_id].status == "running"
    session.close()


# DDP over gloo on a tiny model: trains at N = 1, raises its own error at its third step at N = 2
RAISES_AT_TWO = """
    import os

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(1000):
        if os.environ["WORLD_SIZE"] == "2" and step == 2:
            raise ValueError("bad shard")
        model(torch.ones(8, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    dist.destroy_process_group()
"""


@pytest.mark.slow
def test_a_script_that_raises_fails_its_configuration_with_its_own_error_and_the_sweep_goes_on(tmp_path):
    """No DataLoader either: the probe sees no batch, and the summary is made all the same."""
    script = _script(tmp_path, "raises_at_two.py", RAISES_AT_TWO)
    done = run_script(str(tmp_path / "run"), "--world-sizes", "1,2", *SHORT, "--", script)
    assert done.returncode == 1, done.stderr + done.stdout
    configs = _configs(done)
    assert configs[1]["status"] == "ok" and configs[1]["stats"]["n"] == 10
    assert configs[1]["script"]["group_backend"] == "gloo"  # its own init_process_group("gloo"), as the probe saw it
    failed = configs[2]
    assert failed["status"] == "failed" and "ValueError: bad shard" in failed["reason"], failed["reason"]
    assert failed["stats"]["n"] >= 1  # its steps before the error are kept
    assert any("ValueError: bad shard" in line for line in failed["log_tail"])
    assert "ValueError: bad shard" in done.stdout and "Traceback" not in done.stderr
    _nothing_left(script)


# a script whose update ddptop cannot see: it draws batches and updates its weights by hand, then waits
NO_VISIBLE_STEP = """
    import time

    import torch
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Linear(4, 1)
    for (x,) in DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8):
        model(x).sum().backward()
        with torch.no_grad():
            for parameter in model.parameters():
                parameter -= 0.01 * parameter.grad
    while True:
        time.sleep(0.1)
"""


@pytest.mark.slow
def test_a_script_whose_steps_ddptop_cannot_see_ends_after_the_hang_timeout_and_says_why(tmp_path):
    """Past its setup (it drew a batch) the script is held to --hang-timeout, not the startup grace."""
    script = _script(tmp_path, "no_visible_step.py", NO_VISIBLE_STEP)
    started = time.monotonic()
    done = run_script(str(tmp_path / "run"), "--world-sizes", "1", *SHORT, "--hang-timeout", "5", "--", script)
    assert time.monotonic() - started < NO_HANG_S
    assert done.returncode == 1, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    reason = config["reason"]
    assert config["status"] == "failed" and reason.startswith("hang: no training step seen from the script"), reason
    assert "optimizer step post-hook" in reason and "ddptop_probe.step" in reason
    _nothing_left(script)


# rank 1 has half rank 0's batches (no DistributedSampler); then it returns, or it waits ("evaluates") on its own
UNEVEN = """
    import sys
    import time

    import torch
    import torch.distributed as dist
    from torch.utils.data import DataLoader, TensorDataset

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    batches = 6 if rank == 0 else 3
    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for (x,) in DataLoader(TensorDataset(torch.randn(8 * batches, 4)), batch_size=8):
        model(x).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
    if sys.argv[1:] == ["--then-wait"] and rank == 1:
        time.sleep(600)  # its evaluation, while rank 0 waits in a collective for it
    dist.destroy_process_group()
"""


@pytest.mark.slow
@pytest.mark.parametrize("then, words", [
    ("returns", "the script ended by itself on rank 1 after 3 steps while its other ranks went on"),
    ("waits", "hang: no event from any rank for"),
])
def test_ranks_that_reach_their_end_at_different_steps_never_hang_the_launch(tmp_path, then, words):
    """The steps before are kept; the reason says which rank ended by itself (its peer's 'connection closed'
    follows), or the hang watch ends the launch after --hang-timeout."""
    script = _script(tmp_path, "uneven.py", UNEVEN)
    started = time.monotonic()
    done = run_script(str(tmp_path / "run"), "--world-sizes", "2", *SHORT, "--hang-timeout", "10", "--", script,
                     *(["--then-wait"] if then == "waits" else []))
    assert time.monotonic() - started < NO_HANG_S
    assert done.returncode == 1, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["status"] == "failed" and words in config["reason"], config["reason"]
    assert config["stats"]["n"] >= 2  # rank 1's measured steps at least
    _nothing_left(script)


@pytest.mark.slow
def test_a_script_ended_by_ddptop_leaves_no_loader_worker_behind(tmp_path):
    script = str(tmp_path / "train.py")  # a path of this test's own: its processes are told from any other's
    shutil.copy(os.path.join(REPO, "examples", "train.py"), script)
    done = run_script(str(tmp_path / "run"), "--world-sizes", "1", *SHORT, "--", script, "--workers", "2",
                     "--batch-size", "4")
    assert done.returncode == 0, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["status"] == "ok" and config["ended_by"] == "ddptop" and config["stats"]["n"] == 10
    _nothing_left(script, str(tmp_path / "run"))


@pytest.mark.slow
def test_ctrl_c_during_a_script_exits_130_and_leaves_no_process(tmp_path):
    """SIGINT to ddptop while the script's steps (two loader workers a rank) stream: what was measured is kept,
    the configuration is stopped, and neither rank nor worker is left."""
    script = str(tmp_path / "train.py")
    shutil.copy(os.path.join(REPO, "examples", "train.py"), script)
    run_dir = str(tmp_path / "run")
    proc = subprocess.Popen([sys.executable, "-m", "ddptop", "run", "--headless", "--no-plots", "--out", run_dir,
                             "--world-sizes", "2", "--launches", "1", "--iters", "100000", "--warmup", "1",
                             "--telemetry-interval", "0", "--", script, "--workers", "2", "--batch-size", "4",
                             "--epochs", "1000"],
                            cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 120
        while not _measured(run_dir):
            assert time.monotonic() < deadline and proc.poll() is None, "no measured step came"
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=NO_HANG_S)
        assert proc.returncode == 130, err
        assert "Traceback" not in err
        (config,) = json.load(open(os.path.join(run_dir, "summary.json"), encoding="utf-8"))["configs"]
        assert config["status"] == "stopped" and config["stats"]["n"] > 0, (config["reason"], config["log_tail"])
        _nothing_left(script, run_dir)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for leftover in processes_mentioning(run_dir) + processes_mentioning(script):
            leftover.kill()


def _measured(run_dir: str) -> bool:
    for root, _dirs, files in os.walk(run_dir):
        if "rank-0.jsonl" in files:
            with open(os.path.join(root, "rank-0.jsonl"), encoding="utf-8") as handle:
                if '"phase":"measure"' in handle.read():
                    return True
    return False


# training in processes of its own: each trains a few steps where the probe does not run
SPAWNS = """
    import torch
    import torch.multiprocessing as mp


    def train(index):
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        for _ in range(5):
            model(torch.ones(8, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()


    if __name__ == "__main__":
        mp.spawn(train, nprocs=2)
"""


@pytest.mark.slow
def test_a_script_that_trains_in_processes_it_spawns_fails_its_configuration_and_says_so(tmp_path):
    """The probe counts the spawn, the count reaches config_end (the summary's script), the run ends by itself;
    nothing was measured, so the configuration is no ok one and ddptop exits 1."""
    script = _script(tmp_path, "spawns.py", SPAWNS)
    started = time.monotonic()
    done = run_script(str(tmp_path / "run"), "--world-sizes", "1", *SHORT, "--hang-timeout", "30", "--", script)
    assert time.monotonic() - started < NO_HANG_S, done.stdout
    assert done.returncode == 1, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["ended_by"] == "script" and config["script"]["spawned"] == 1, config
    assert config["script"]["optimizer_steps"] == 0  # the spawned processes' steps are out of its sight
    assert config["status"] == "failed", config["status"]
    assert "trains in processes of its own: nothing measured" in config["reason"], config["reason"]
    assert "trains in processes of its own: nothing measured" in done.stdout  # the headless line
    _nothing_left(script)


# a script that cannot train here and says so, then leaves with exit code 0 (as PyTorch's FSDP2 example does
# without two GPUs)
ENDS_FIRST = """
    import sys

    print("Unable to locate sufficient 2 gpus to run this example. Exiting.")
    sys.exit(0)
"""


@pytest.mark.slow
def test_a_script_that_ends_before_its_first_training_step_fails_its_configuration(tmp_path):
    """Not ok with nothing measured: failed, its exit code and its last words in the reason (the headless line
    says them), its output in the log tail, and ddptop exits 1."""
    script = _script(tmp_path, "ends_first.py", ENDS_FIRST)
    done = run_script(str(tmp_path / "run"), "--world-sizes", "1,2", *SHORT, "--", script)
    assert done.returncode == 1, done.stderr + done.stdout
    for config in _configs(done).values():
        reason = config["reason"]
        assert config["status"] == "failed" and "ended before its first training step" in reason, reason
        assert "exit code 0" in reason and "Unable to locate sufficient 2 gpus" in reason, reason
        assert any("Unable to locate sufficient 2 gpus" in line for line in config["log_tail"]), config["log_tail"]
    lines = [line for line in done.stdout.splitlines() if line.startswith("[")]  # the headless lines
    assert len(lines) == 2 and all("] failed: the script ended before its first training step" in line
                                   and "Unable to locate" in line for line in lines), done.stdout
    _nothing_left(script)
