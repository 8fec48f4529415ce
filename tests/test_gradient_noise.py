"""The gradient noise scale measured on real ranks: a workload whose answer is known, trained under ddptop with
gloo at N=2 and 4, the true value inside each interval; and the figure in every output, nowhere it was not
measured."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from ddptop.analysis import gradient_noise
from ddptop.analysis.synthetic import gradient_problem
from ddptop.report.build import load_target

from .conftest import REPO

SYNCS = 600  # hooked steps a configuration: enough that B_noise's interval is a few tenths of it wide at N=2


@pytest.fixture(scope="module")
def known_answer_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("noise") / "run"
    picks = tmp_path_factory.mktemp("picks")
    done = subprocess.run(
        [sys.executable, "-m", "ddptop", "run", "--headless", "--out", str(run_dir), "--models",
         "tests.noise_models:least_squares", "--batch-sizes", "4", "--world-sizes", "1,2,4", "--warmup", "2",
         "--iters", "10", "--comm-iters", str(SYNCS), "--no-collectives", "--no-baseline", "--no-plots",
         "--launches", "1"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO, "NOISE_PICKS": str(picks)}, capture_output=True,
        text=True, stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    return run_dir, done.stdout, picks


@pytest.mark.slow
def test_each_synchronisation_s_norms_are_those_of_the_batches_the_ranks_drew(known_answer_run):
    """The squared norms the ranks sent are, synchronisation by synchronisation, those of the mean per-example
    gradient of the batch each rank drew and of their average: what the estimate is made of, measured exactly."""
    run_dir, _, picks = known_answer_run
    grads = gradient_problem().grads
    for n in (2, 4):
        drawn = [[[int(i) for i in line.split()] for line in (picks / f"n{n}-rank{r}.txt").read_text().splitlines()]
                 for r in range(n)]
        # the hooked steps' batches are the last drawn (before them: the measured steps' one batch)
        local = np.array([[grads[batch].mean(axis=0) for batch in rank[-SYNCS:]] for rank in drawn])
        events = [json.loads(line) for r in range(n) for line in _rank_events(run_dir, n, r)]
        comm = {e["rank"]: e for e in events if e.get("type") == "comm"}
        for r in range(n):
            assert comm[r]["grad_sq_local"] == pytest.approx(np.sum(local[r] ** 2, axis=1), rel=1e-9)
            assert comm[r]["grad_batch_local"] == [4] * SYNCS
        averaged = np.sum(local.mean(axis=0) ** 2, axis=1)
        assert comm[0]["grad_sq_averaged"] == pytest.approx(averaged, rel=1e-9)


def _rank_events(run_dir, world_size: int, rank: int) -> list[str]:
    (path,) = [p for p in run_dir.glob(f"launches/*/events/rank-{rank}.jsonl")
               if any('"world_size": %d' % world_size in line or f'"world_size":{world_size}' in line
                      for line in p.read_text().splitlines()[:3])]
    return path.read_text().splitlines()


@pytest.mark.slow
def test_the_true_noise_scale_lies_inside_the_interval_at_two_and_four_ranks(known_answer_run):
    run_dir, printed, _ = known_answer_run
    truth = gradient_problem().b_noise
    summary = json.loads((run_dir / "summary.json").read_text())
    by_size = {c["world_size"]: c for c in summary["configs"] if c["mode"] == "ddp"}
    assert "gradient_noise" not in by_size[1]  # nothing to compare a lone rank's gradient with
    for n in (2, 4):
        noise = by_size[n]["gradient_noise"]
        low, high = noise["b_noise"]["ci"]
        assert noise["resolved"] and noise["syncs"] == SYNCS
        assert (noise["batch_local"], noise["batch_global"]) == (4, 4 * n)
        assert low <= truth <= high, f"N={n}: {truth:.2f} outside {low:.2f}-{high:.2f}"
        assert noise["b_noise"]["method"] == gradient_noise.B_NOISE_METHOD
    # the time-to-loss column and sentence, and the model's assumptions, where the figure is
    rows = summary["scaling"][0]["rows"]
    assert "time_to_loss_speedup" not in rows[0] and all("time_to_loss_speedup" in r for r in rows[1:])
    assert "In time to the same loss: at N=4" in printed and gradient_noise.ASSUMPTIONS in printed


@pytest.mark.slow
def test_a_run_with_its_noise_scale_reads_in_every_output(known_answer_run, tmp_path):
    from ddptop.tui.summary_check import check_everywhere

    run_dir, _, _ = known_answer_run
    summary, _ = load_target(str(run_dir))
    check_everywhere(summary, str(run_dir), str(tmp_path / "plots"))
    rebuilt, _ = load_target(str(run_dir), rebuild=True)
    assert [c.gradient_noise for c in rebuilt.configs] == [c.gradient_noise for c in summary.configs]


@pytest.mark.slow
def test_a_real_script_s_noise_scale_rises_as_its_loss_falls_and_gives_the_time_to_loss(tmp_path):
    """examples/train.py, unchanged, at N=1 and 2 over 12 epochs (its loss falls from 0.8 after one to 0.14):
    the noise scale of its measured steps, the time-to-loss column, and B_noise higher over the second half of
    the synchronisations than over the first, beyond the noise (McCandlish et al.'s observation)."""
    run_dir = tmp_path / "run"
    done = subprocess.run(
        [sys.executable, "-m", "ddptop", "run", "--headless", "--out", str(run_dir), "--world-sizes", "1,2",
         "--launches", "1", "--iters", "600", "--no-plots", "--", "examples/train.py", "--epochs", "12"],
        cwd=REPO, env={**os.environ, "PYTHONPATH": REPO}, capture_output=True, text=True,
        stdin=subprocess.DEVNULL, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    summary = json.loads((run_dir / "summary.json").read_text())
    (two,) = [c for c in summary["configs"] if c["world_size"] == 2]
    noise = two["gradient_noise"]
    assert noise["resolved"] and noise["syncs"] == 600 and noise["over"] == "the script's measured steps"
    assert (noise["batch_local"], noise["batch_global"]) == (32, 64)
    assert noise["drift"] == gradient_noise.ROSE, noise
    (row,) = [r for r in summary["scaling"][0]["rows"] if r["world_size"] == 2]
    assert row["time_to_loss_speedup"]["ci"] and 0 < row["example_worth"]["value"] < 1 and row["example_worth"]["ci"]
    assert "In time to the same loss: at N=2" in done.stdout and "It rose over the window" in done.stdout


@pytest.mark.parametrize("wrappers, said", [
    ([{"kind": "FullyShardedDataParallel"}], "not measured under FullyShardedDataParallel"),
    ([{"kind": "DistributedDataParallel", "sync_steps": [[2, 2, 30]]}], "no step synchronised exactly once"),
    ([{"kind": "DistributedDataParallel", "sync_steps": [[2, 1, 30]]}], None),
])
def test_a_script_without_a_noise_scale_says_why_where_the_probe_saw_it(wrappers, said):
    from ddptop.report.scaling_tables import _noise_not_measured
    from ddptop.report.schema import Config

    entry = Config.from_json({"config_id": "train.py/n2/gloo", "world_size": 2, "script": {"wrappers": wrappers}})
    found = _noise_not_measured(entry)
    assert (found is None) if said is None else (said in found)
