"""Real torchrun process groups on the CPU (gloo), checked against the raw events they wrote."""

import csv
import glob
import json
import os
import stat

import numpy as np
import pytest

from ddptop.analysis.stats import PERCENTILES
from tests.conftest import ddptop, processes_mentioning, run_sweep

pytestmark = pytest.mark.slow

# Small inputs for the tests.tiny_models factories, world size 2: the fastest real process group there is.
TINY = ("--batch-sizes", "2", "--world-sizes", "2", "--image-size", "32", "--num-classes", "10",
        "--launches", "1")  # one launch each, unless a test asks for more


def raw_samples(run_dir: str, config_id: str, launches: set[str] | None = None) -> dict[int, list[float]]:
    """Read the ranks' events files directly, independent of ddptop's session code: of every launch, or of
    ``launches`` alone (the ones a configuration's figures use)."""
    by_rank: dict[int, list[float]] = {}
    for path in glob.glob(os.path.join(run_dir, "launches", "*", "events", "rank-*.jsonl")):
        if launches is not None and os.path.basename(os.path.dirname(os.path.dirname(path))) not in launches:
            continue
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                event = json.loads(line)
                if event["type"] == "samples" and event["config_id"] == config_id and event["phase"] == "measure":
                    by_rank.setdefault(event["rank"], []).extend(event["sec"])
    return by_rank


def test_sweep_completes_with_every_configuration(cpu_sweep):
    assert cpu_sweep.returncode == 0, cpu_sweep.stderr + cpu_sweep.stdout
    summary = cpu_sweep.figures()
    assert summary["schema"] == "ddptop.summary" and summary["schema_version"] == 3
    assert summary["complete"] is True
    ids = [c["config_id"] for c in summary["configs"]]
    assert ids == ["resnet18/no_ddp/bs4/n1/gloo", "resnet18/ddp/bs4/n1/gloo", "resnet18/ddp/bs4/n2/gloo"]
    for config in summary["configs"]:
        assert config["status"] == "ok", config
        assert config["stats"]["n"] == 8 * config["world_size"]
        assert config["params"] > 11_000_000
    versions = summary["environment"]["versions"]
    assert versions["torch"] and versions["torchvision"]
    assert summary["environment"]["nvml"] != "ok" or summary["environment"]["gpus"]


def test_percentiles_and_speedup_match_hand_computation(cpu_sweep):
    summary = cpu_sweep.figures()
    p50 = {}
    for config in summary["configs"]:
        # a launch a load burst disturbed is measured again and left out of the figures: the used ones alone
        used = {unit["launch"] for unit in config["launches"] if unit["used"]}
        by_rank = raw_samples(cpu_sweep.run_dir, config["config_id"], used)
        assert sorted(by_rank) == list(range(config["world_size"]))
        pooled = [s for rank in sorted(by_rank) for s in by_rank[rank]]
        expected = {f"p{q}": float(np.percentile(pooled, q)) for q in PERCENTILES}
        got = config["stats"]["sec_iter"]
        assert got == pytest.approx(expected, rel=1e-12)
        assert [got[f"p{q}"] for q in PERCENTILES] == sorted(got.values())
        assert config["stats"]["ex_sec_total"]["p50"] == pytest.approx(
            config["batch_size"] * config["world_size"] / expected["p50"]
        )
        for rank, samples in by_rank.items():
            assert config["stats"]["rank_medians"][str(rank)] == pytest.approx(float(np.median(samples)))
        p50[(config["mode"], config["world_size"])] = expected["p50"]

    (table,) = summary["scaling"]
    assert table["scaling"] == "weak" and table["reference_world_size"] == 1
    rows = {row["world_size"]: row for row in table["rows"]}
    speedup = 2 * p50[("ddp", 1)] / p50[("ddp", 2)]  # weak scaling: S = N * t1 / tN
    assert rows[2]["speedup"] == pytest.approx(speedup)
    assert rows[2]["efficiency"] == pytest.approx(speedup / 2)
    assert rows[2]["relative_cost"] == pytest.approx(2 / speedup)
    # Two CPU ranks share the machine's cores: the cores charged stay constant, so relative SU = 1 / S.
    assert rows[2]["relative_su"] == pytest.approx(1 / speedup)
    assert table["ddp_overhead_at_reference"] == pytest.approx(p50[("ddp", 1)] / p50[("no_ddp", 1)] - 1)


def test_tables_files_and_overhead(cpu_sweep):
    out = cpu_sweep.stdout
    assert "Benchmark: resnet18 with batch size 4" in out
    for label in ("no ddp:", "1M/1P:", "1M/2P:"):
        assert label in out
    assert "Scaling: resnet18" in out and "relative SU" in out
    summary = cpu_sweep.figures()
    overhead = summary["overhead"]
    assert 0 < overhead["fraction_outside_iterations"] < 1
    # the two planned launches (N = 1 and 2), and a further one of any a load burst disturbed
    launched = {unit["launch"] for config in summary["configs"] for unit in config["launches"]}
    assert overhead["iterations_s"] > 0 and len(overhead["launches"]) == len(launched) >= 2
    assert all(l["status"] == "ok" and l["exit_code"] == 0 for l in overhead["launches"])
    with open(os.path.join(cpu_sweep.run_dir, "summary.csv"), encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    assert [r["config_id"] for r in rows] == [c["config_id"] for c in summary["configs"]]
    assert float(rows[2]["speedup"]) == pytest.approx(summary["scaling"][0]["rows"][1]["speedup"])
    markdown = open(os.path.join(cpu_sweep.run_dir, "summary.md"), encoding="utf-8").read()
    assert "| N | sec/iter (p50) |" in markdown and "1M/2P" in markdown
    mode = stat.S_IMODE(os.stat(cpu_sweep.run_dir).st_mode)
    assert mode == 0o700
    for path in glob.glob(os.path.join(cpu_sweep.run_dir, "*.json*")):
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600, path


def test_no_process_outlives_the_sweep(cpu_sweep):
    assert processes_mentioning(cpu_sweep.run_dir) == []


def test_report_re_renders_and_rebuilds_from_events(cpu_sweep):
    saved = ddptop("report", cpu_sweep.run_dir)
    assert saved.returncode == 0, saved.stderr
    assert "Benchmark: resnet18 with batch size 4" in saved.stdout
    table_lines = [l for l in cpu_sweep.stdout.splitlines() if "p50:" in l]
    assert table_lines and all(line in saved.stdout for line in table_lines)

    before = cpu_sweep.summary()
    rebuilt = ddptop("report", cpu_sweep.run_dir, "--rebuild", "--format", "json")
    assert rebuilt.returncode == 0, rebuilt.stderr
    after = json.loads(rebuilt.stdout)
    assert [c["stats"] for c in after["configs"]] == [c["stats"] for c in before["configs"]]
    assert after["scaling"] == before["scaling"]
    csv_out = ddptop("report", os.path.join(cpu_sweep.run_dir, "summary.json"), "--format", "csv")
    assert csv_out.stdout.splitlines()[0].startswith("config_id,model,mode")


@pytest.mark.smoke
def test_a_failing_rank_costs_one_configuration_not_the_sweep(tmp_path):
    run_dir = str(tmp_path / "faults")
    done = run_sweep(
        run_dir,
        "--models", "tests.tiny_models:crash_on_rank1,tests.tiny_models:tiny_cnn,tests.tiny_models:oom_on_rank1",
        *TINY,
        "--warmup", "2",
        "--iters", "6",
    )
    assert done.returncode == 1, done.stderr + done.stdout
    configs = {c["model"].split(":")[1]: c for c in done.summary()["configs"]}
    crashed = configs["crash_on_rank1"]
    assert crashed["status"] == "failed"
    assert "RuntimeError: injected failure on rank 1" in crashed["reason"]
    assert any("injected failure" in line for line in crashed["log_tail"])
    assert crashed["stats"]["n"] > 0  # the steps measured before the fault are kept
    assert configs["tiny_cnn"]["status"] == "ok"
    # the rest of the sweep ran in a fresh launch (the configuration may have run once more after it, in a launch
    # of its own, where a busy machine disturbed its first: its "launch" is then that one)
    started = [json.loads(line)["data"] for line in open(os.path.join(run_dir, "runner.jsonl"), encoding="utf-8")
               if '"launch_start"' in line]
    retry = [m for m in started if m["launch"] == crashed["launch"] + "-retry1"]
    assert len(retry) == 1 and configs["tiny_cnn"]["config_id"] in retry[0]["configs"], started
    assert configs["tiny_cnn"]["launch"] != crashed["launch"]
    oom = configs["oom_on_rank1"]
    assert oom["status"] == "oom" and oom["reason"].startswith("out of memory")
    assert "Not measured in full" in done.stdout
    assert processes_mentioning(run_dir) == []


def test_time_budget_sizes_the_measurement_from_the_warmup(tmp_path):
    run_dir = str(tmp_path / "budget")
    done = run_sweep(
        run_dir,
        "--models", "tests.tiny_models:tiny_cnn",
        *TINY,
        "--warmup", "3",
        "--time-budget", "0.5",
    )
    assert done.returncode == 0, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    iters = config["measured_iters"]
    assert iters > 3  # a tiny model's step is far below 0.5 s
    # Both ranks agreed on one step count (else DDP would deadlock) and every step was recorded.
    assert {len(v) for v in config["samples"].values()} == {iters}
    assert config["stats"]["n"] == 2 * iters


# -- adaptive measurement and rounds on real process groups ------------------------------------------------------

QUICK = ("--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0")


def test_iters_auto_stops_early_once_precise_and_records_its_precision(tmp_path):
    # a loose target on a step a busy machine barely moves: the tiny CNN alone (1 ms) once spent 200 steps
    # between batch medians of 1 and 3 ms on this shared VM, and never held ±50% twice in a row
    run_dir = str(tmp_path / "auto")
    done = run_sweep(run_dir, "--models", "tests.tiny_models:steady_cnn", *TINY, *QUICK, "--iters", "auto",
                     "--precision", "0.5", "--max-iters", "200")
    assert done.returncode == 0, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["status"] == "ok" and config["stop_reason"] == "precision" and config["unstable"] is False
    assert 10 <= config["measured_iters"] < 200 and config["measured_iters"] % 5 == 0  # blocks of 5
    assert config["precision_target"] == 0.5 and 0 < config["precision_reached"] <= 0.5
    assert config["warmup_iters"] >= 6  # --warmup auto: at least two windows of 3
    # the ranks stopped after the same step, every one of them recorded
    assert {len(v) for v in config["samples"].values()} == {config["measured_iters"]}
    assert "rounds_of_steps" not in config


def test_an_unreachable_precision_ends_at_max_iters_unstable(tmp_path):
    run_dir = str(tmp_path / "unstable")
    done = run_sweep(run_dir, "--models", "tests.tiny_models:tiny_cnn", *TINY, *QUICK, "--iters", "auto",
                     "--precision", "0.001", "--max-iters", "30", "--warmup", "2")
    assert done.returncode == 0, done.stderr + done.stdout
    (config,) = done.summary()["configs"]
    assert config["status"] == "ok" and config["stop_reason"] == "max_iters" and config["unstable"] is True
    assert config["measured_iters"] == 30 and config["warmup_iters"] == 2
    assert config["precision_reached"] > 0.001
    assert {len(v) for v in config["samples"].values()} == {30}
    assert "unstable (±" in done.stdout  # the headless line of the configuration


def test_launches_interleave_the_configurations_and_keep_each_step_s_launch(tmp_path):
    run_dir = str(tmp_path / "launches")
    done = run_sweep(run_dir, "--models", "tests.tiny_models:tiny_cnn", *TINY, *QUICK, "--bucket-cap-mb", "25,1",
                     "--launches", "2", "--iters", "auto", "--max-iters", "20", "--max-time-per-config", "4")
    assert done.returncode == 0, done.stderr + done.stdout
    summary = done.summary()
    configs = summary["configs"]
    assert [c["config_id"].rsplit("/", 1)[1] for c in configs] == ["bucket25", "bucket1"]
    for config in configs:
        assert config["status"] == "ok" and config["rounds"] == 2
        assert [u["launch"] for u in config["launches"]] == ["01-n2-gloo", "02-n2-gloo"]
        for rank, runs in config["launch_of_steps"].items():
            assert [index for index, _ in runs] == [0, 1]
            assert sum(count for _, count in runs) == len(config["samples"][rank]) == config["measured_iters"]
        assert sum(u["steps"] for u in config["launches"]) == config["stats"]["n"]
        assert config["stats"]["p50_levels"] == "launches"
    assert summary["uncertainty"]["launch_variance"]["df"] == 2
    # the second launch ran the configurations in the rotated order, each as its round 1
    starts = []
    for launch in ("01-n2-gloo", "02-n2-gloo"):
        with open(os.path.join(run_dir, "launches", launch, "events", "rank-0.jsonl"), encoding="utf-8") as handle:
            starts += [(e["round"], e["config_id"].rsplit("/", 1)[1]) for e in map(json.loads, handle)
                       if e["type"] == "config_start"]
    assert starts == [(0, "bucket25"), (0, "bucket1"), (1, "bucket1"), (1, "bucket25")]
