"""Faults injected into real gloo runs, and signals sent to a real `ddptop run`: nothing measured is lost,
nothing started is left running."""

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from ddptop.report.store import load_summary
from tests.conftest import REPO, ddptop, processes_mentioning, run_sweep

pytestmark = pytest.mark.slow

# two configurations at N=2 (tiny CNN, then resnet18 at 32 px), so a fault in the first leaves one to run
TWO = ("--launches", "1", "--models", "tests.tiny_models:tiny_cnn,resnet18", "--batch-sizes", "2", "--world-sizes", "2",
       "--image-size", "32", "--num-classes", "10", "--warmup", "1", "--iters", "6", "--comm-iters", "0",
       "--no-collectives", "--telemetry-interval", "0")
FIRST, SECOND = "tests.tiny_models:tiny_cnn/ddp/bs2/n2/gloo", "resnet18/ddp/bs2/n2/gloo"


def _statuses(summary):
    return {c["config_id"]: c for c in summary["configs"]}


def _assert_nothing_left(run_dir):
    deadline = time.monotonic() + 10
    while processes_mentioning(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert processes_mentioning(run_dir) == []


# three rank faults in a row, one per batch size of the tiny CNN, then a batch that runs well: (fault, status, words)
IN_A_ROW = {2: ("hang", "failed", "hang: no event from any rank"), 3: ("kill", "failed", "SIGKILL"),
            4: ("oom", "oom", "injected out of memory")}


def test_rank_faults_in_a_row_each_end_their_configuration_and_the_sweep_goes_on(tmp_path):
    """A hang, a SIGKILL and an out of memory, each of a rank at its third step in a configuration of its own:
    each ends its configuration with its reason and the steps measured before it, and the sweep goes on in a
    fresh launch every time, to the last configuration, which runs well."""
    faults = [f"{kind}:rank={0 if kind == 'oom' else 1}:iter=3:config=/bs{batch}/" for batch, (kind, _, _)
              in IN_A_ROW.items()]
    done = run_sweep(str(tmp_path / "run"), "--launches", "1", "--models", "tests.tiny_models:tiny_cnn",
                     "--batch-sizes", "2,3,4,5", *TWO[6:], *(a for fault in faults for a in ("--inject", fault)),
                     # beside a busy process a rank's first configuration started 10 s after its hello (torch's
                     # compiler loaded, the model built and its FLOPs counted): a 4 s limit called that a hang,
                     # and 15 s left too little room on a slow VM for four launches in a row
                     "--hang-timeout", "30")
    assert done.returncode == 1, done.stderr + done.stdout
    configs = {c["batch_size"]: c for c in done.summary()["configs"]}
    for batch, (_, status, words) in IN_A_ROW.items():
        broken = configs[batch]
        assert broken["status"] == status, broken
        assert words in broken["reason"] + "".join(broken["log_tail"] or ()), broken
        assert broken["stats"]["n"] >= 3  # the steps before the fault, from the rank that lived at least
    assert configs[5]["status"] == "ok" and configs[5]["stats"]["n"] == 12
    assert [c["launch"] for c in configs.values()] == ["01-n2-gloo", "01-n2-gloo-retry1", "01-n2-gloo-retry2",
                                                       "01-n2-gloo-retry3"]
    _assert_nothing_left(done.run_dir)


def test_a_model_slower_to_build_than_the_hang_timeout_is_no_hang(tmp_path):
    """Building the model takes each of two ranks 15 s, the hang limit is 8 s (room for the silent stretches
    outside a setup, the matmul ceiling's say, on a slow VM): the ranks said they were setting up, so the
    watch gave them the startup grace; the configuration runs to its end (without the setup heartbeat this
    was called a hang after 8 s)."""
    done = run_sweep(str(tmp_path / "run"), "--launches", "1", "--models", "tests.tiny_models:slow_to_build",
                     "--batch-sizes", "2", *TWO[6:], "--hang-timeout", "8")
    assert done.returncode == 0, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["status"] == "ok" and config["stats"]["n"] == 2 * 6, config["reason"]
    assert config["setup_s"] >= 15


def test_on_failure_stop_ends_the_sweep_at_the_first_failure(tmp_path):
    done = run_sweep(str(tmp_path / "run"), *TWO, "--inject", "crash:rank=1:iter=2:config=tiny",
                     "--on-failure", "stop")
    assert done.returncode == 1
    configs = _statuses(done.summary())
    assert configs[FIRST]["status"] == "failed" and "injected crash" in configs[FIRST]["reason"]
    assert configs[SECOND]["status"] == "not_run" and "--on-failure stop" in configs[SECOND]["reason"]
    _assert_nothing_left(done.run_dir)


@contextlib.contextmanager
def _running(run_dir, iters):
    """A real `ddptop run` in the background; killed (and its agent with it) if the test fails first."""
    env = dict(os.environ, PYTHONPATH=REPO)
    args = [sys.executable, "-m", "ddptop", "run", "--headless", "--no-plots", "--out", run_dir, *TWO, "--iters",
            str(iters)]
    proc = subprocess.Popen(args, cwd=REPO, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        for leftover in processes_mentioning(run_dir):
            leftover.kill()


def _wait_for_samples(run_dir, config_id, timeout=90):
    """Until ``config_id`` has streamed measured steps from rank 0."""
    wanted = f'"config_id":"{config_id}","phase":"measure"'
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for root, _dirs, files in os.walk(run_dir):
            if "rank-0.jsonl" in files:
                with open(os.path.join(root, "rank-0.jsonl"), encoding="utf-8") as handle:
                    if wanted in handle.read():
                        return
        time.sleep(0.2)
    raise AssertionError(f"no measured step of {config_id} within {timeout} s")


def _alive(pid: int) -> bool:
    """A process that runs: one that ended but is not yet reaped (a zombie) has stopped."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _rank_pids(run_dir):
    """The ranks' process ids, from the hello each wrote to its events file."""
    pids = []
    for root, _dirs, files in os.walk(run_dir):
        for name in files:
            if name.startswith("rank-") and name.endswith(".jsonl"):
                with open(os.path.join(root, name), encoding="utf-8") as handle:
                    pids += [json.loads(line)["pid"] for line in handle if '"type":"hello"' in line]
    return pids


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP])
def test_a_signal_stops_everything_and_keeps_the_measurements(tmp_path, signum):
    run_dir = str(tmp_path / "run")
    with _running(run_dir, iters=100_000) as proc:
        _stop_with_signal(proc, run_dir, signum)


def _stop_with_signal(proc, run_dir, signum):
    _wait_for_samples(run_dir, FIRST)
    if signum == signal.SIGINT:  # while it runs: the ranks' own sockets listen on loopback only
        ranks = [psutil.Process(pid) for pid in _rank_pids(run_dir)]
        listening = {c.laddr.ip for p in ranks for c in p.net_connections("inet") if c.status == "LISTEN"}
        assert len(ranks) == 2 and listening == {"127.0.0.1"}
    rank_pids = _rank_pids(run_dir)
    sent = time.monotonic()
    proc.send_signal(signum)
    # the ranks are stopped within the grace period (and a margin for a slow VM); then the summary is saved,
    # whose time is the machine's, bounded only by the wait below
    while any(_alive(pid) for pid in rank_pids):
        assert time.monotonic() - sent < 15, f"ranks still running {time.monotonic() - sent:.0f} s after the signal"
        time.sleep(0.1)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 130, err
    assert "Traceback" not in err
    summary = load_summary(os.path.join(run_dir, "summary.json")).to_json()
    configs = _statuses(summary)
    assert summary["complete"] is True  # the sweep ended (stopped), and said so
    assert configs[FIRST]["status"] == "stopped" and configs[FIRST]["stats"]["n"] > 0
    assert configs[SECOND]["status"] == "not_run"
    _assert_nothing_left(run_dir)


def test_sigkill_of_ddptop_leaves_no_rank_and_report_rebuilds_the_summary(tmp_path):
    run_dir = str(tmp_path / "run")
    iters = 300  # the tiny model's steps finish in seconds; resnet18's take long enough to be cut
    with _running(run_dir, iters=iters) as proc:
        _wait_for_samples(run_dir, SECOND)
        proc.kill()
        proc.wait(timeout=10)
    # the torchrun agent was told to die with ddptop (PDEATHSIG), and its ranks die with the agent
    _assert_nothing_left(run_dir)
    assert not os.path.exists(os.path.join(run_dir, "summary.json"))
    done = ddptop("report", run_dir)
    assert done.returncode == 0, done.stderr
    summary = load_summary(os.path.join(run_dir, "summary.json")).to_json()
    configs = _statuses(summary)
    assert summary["complete"] is False
    assert configs[FIRST]["status"] == "ok" and configs[FIRST]["stats"]["n"] == 2 * iters
    # its writer is dead: interrupted, with the steps it kept (it used to stay "running" for ever)
    assert configs[SECOND]["status"] == "interrupted" and "died" in configs[SECOND]["reason"]
    assert 0 < configs[SECOND]["stats"]["n"] < 2 * iters
    with open(os.path.join(run_dir, "summary.md"), encoding="utf-8") as handle:
        assert "Incomplete" in handle.read()


def test_an_out_of_memory_that_ends_a_batch_sweep_s_launch_keeps_its_matmul_ceiling(tmp_path):
    """A batch sweep runs its batches in one launch and a real CUDA out of memory ends it: the device is fine,
    so rank 0 (alone, no peer to wait on) still measures the launch's ceilings, and every batch that ran keeps
    its MFU of measured ceiling (here torch's OutOfMemoryError, injected at batch 8 on the CPU)."""
    run = run_sweep(str(tmp_path / "run"), "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32",
                    "--batch-sizes", "2", "--batch-sweep", "--max-batch", "16", "--world-sizes", "1", "--launches", "1",
                    "--no-baseline", "--comm-iters", "0", "--no-collectives", "--warmup", "1", "--iters", "6",
                    "--no-trace", "--inject", "oom:config=bs8")
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    summary = run.figures()
    status = {c["batch_size"]: c["status"] for c in summary["configs"]}
    assert status == {2: "ok", 4: "ok", 8: "oom", 16: "not_run"}, status
    assert [c["dtype"] for c in summary["ceilings"]] == ["fp32"]
    for config in summary["configs"]:
        if config["status"] == "ok":
            assert 0 < config["flops"]["mfu_ceiling"] < 1, config["flops"]
    _assert_nothing_left(run.run_dir)
