"""Compute vs communication, collectives, bucket sweeps, diff and plots on real gloo process groups (the batch
sweep to out of memory is tests/test_strategies.py's sweep)."""

import glob
import json
import os
import struct
import xml.etree.ElementTree as ElementTree

import pytest

from ddptop.analysis import formulas
from tests.conftest import CPU_SWEEP_COMMUNICATION, ddptop, run_sweep

pytestmark = pytest.mark.slow

# resnet18 at 32 px, N = 1 and 2: small enough for two cores, big enough (44.6 MiB of gradients) to need buckets
SMALL = ("--models", "resnet18", "--batch-sizes", "4", "--world-sizes", "1,2", "--image-size", "32",
         "--num-classes", "10", "--warmup", "2", "--iters", "8", "--comm-iters", "4", "--telemetry-interval", "0.25",
         "--launches", "1")  # the counts below are one launch's; telemetry as in the shared sweep, run A


@pytest.fixture(scope="module")
def run_a(cpu_sweep):
    """The bucket A/B of PyTorch's DDP benchmark: A with the default 25 MiB buckets and every collective. It is
    the suite's shared sweep (tests/conftest.py), which is run with these options, so that one run serves
    test_sweep.py, test_telemetry.py and these tests."""
    assert CPU_SWEEP_COMMUNICATION[:2] == SMALL[14:16] == ("--comm-iters", "4")  # the counts below rely on it
    return cpu_sweep


@pytest.fixture(scope="module")
def run_b(tmp_path_factory):
    """B with 1 MiB buckets, no collective benchmark, and DataParallel beside DDP."""
    run_dir = str(tmp_path_factory.mktemp("deeper") / "b")
    return run_sweep(run_dir, *SMALL, "--bucket-cap-mb", "1", "--no-collectives", "--compare-dp")


def _config(summary, config_id):
    return next(c for c in summary["configs"] if c["config_id"] == config_id)


def test_compute_and_communication_are_measured_per_configuration(run_a):
    assert run_a.returncode == 0, run_a.stderr + run_a.stdout
    summary = run_a.figures()
    n2 = _config(summary, "resnet18/ddp/bs4/n2/gloo")
    comm = n2["communication"]
    assert comm["nosync_samples"] == 4 * 2  # every rank's no_sync steps
    assert 0 < comm["compute_s"] and comm["step_s"] == n2["stats"]["sec_iter"]["p50"]
    assert comm["exposed_comm_s"] == pytest.approx(max(0.0, comm["step_s"] - comm["compute_s"]))
    assert comm["allreduce_bytes_per_rank"] == n2["grad_bytes"] * formulas.ring_factor(2)
    logging = comm["ddp_logging"]  # this torch has DDP's logging data: all four averages are there
    for key in ("forward_compute_s", "backward_compute_s", "backward_comm_s"):
        assert 0 < logging[key] < 10
    buckets = comm["buckets"]
    assert buckets["steps"] == 4 * 2
    assert buckets["bytes_per_step"] == n2["grad_bytes"]  # every gradient byte went through the hook once
    assert buckets["count"] == len(logging["bucket_sizes"])
    assert 0 < buckets["in_flight_s"] <= buckets["sum_s"]
    achieved = buckets["achieved"]
    assert achieved["busbw_gbs"] == pytest.approx(n2["grad_bytes"] / buckets["in_flight_s"] / 1e9)
    # the no-DDP baseline has no communication to split
    assert _config(summary, "resnet18/no_ddp/bs4/n1/gloo")["communication"] is None
    row = next(r for t in summary["scaling"] for r in t["rows"] if r["world_size"] == 2)
    baseline = _config(summary, "resnet18/no_ddp/bs4/n1/gloo")["stats"]["sec_iter"]["p50"]
    assert row["comm_estimate_from_t1_s"] == pytest.approx(row["sec_iter"] - baseline)
    assert row["karp_flatt"] == pytest.approx(formulas.karp_flatt(row["speedup"], 2))
    assert summary["scaling"][0]["amdahl"]["points"] == 1
    assert "Compute vs communication" in run_a.stdout and "exposed comm" in run_a.stdout


def test_collective_benchmark_reports_algbw_and_busbw(run_a):
    summary = run_a.figures()
    tables = {t["op"]: t for t in summary["collectives"]}
    assert sorted(tables) == ["allgather", "allreduce", "broadcast", "reduce_scatter"]
    for op, table in tables.items():
        assert table["world_size"] == 2 and table["backend"] == "gloo"
        sizes = sorted({r["bytes"] for r in table["rows"]})
        assert sizes[0] == 1024 and sizes[-1] == 64 * 1024 and len(sizes) == 7
        placements = {r["inplace"] for r in table["rows"]}
        assert placements == ({True, False} if op in ("allgather", "reduce_scatter") else {True})
        for row in table["rows"]:
            assert row["ranks"] == 2 and row["samples"] == 8
            assert row["algbw_gbs"] == pytest.approx(row["bytes"] / row["time_s"] / 1e9)
            assert row["busbw_gbs"] == pytest.approx(row["algbw_gbs"] * formulas.busbw_factor(op, 2))
    # the kernel's allreduce figure sits next to what DDP's buckets reached
    achieved = _config(summary, "resnet18/ddp/bs4/n2/gloo")["communication"]["buckets"]["achieved"]
    assert achieved["collective_bytes"] == 64 * 1024 and achieved["collective_busbw_gbs"] > 0
    # no collectives at N=1: there is nothing to exchange
    assert all(t["world_size"] > 1 for t in summary["collectives"])


def test_bucket_cap_changes_the_buckets(run_a, run_b):
    assert run_b.returncode == 0, run_b.stderr + run_b.stdout
    big = _config(run_a.summary(), "resnet18/ddp/bs4/n2/gloo")["communication"]["buckets"]
    small = _config(run_b.summary(), "resnet18/ddp/bs4/n2/gloo")["communication"]["buckets"]
    # 44.6 MiB in 25 MiB buckets vs 1 MiB ones (a bucket holds whole tensors; the largest are 9 MiB)
    assert big["count"] <= 3 and small["count"] >= 8
    assert big["bytes_per_step"] == small["bytes_per_step"]
    assert run_b.summary()["collectives"] == []


def test_data_parallel_runs_beside_ddp(run_b):
    summary = run_b.figures()
    dp = _config(summary, "resnet18/dp/bs4/n2/gloo")
    # one process: a launch of world size 1 (the first, or one more where a busy machine disturbed it)
    assert dp["status"] == "ok" and dp["label"] == "DP/2P" and dp["launch"].split("-")[1] == "n1"
    assert dp["stats"]["n"] == 8  # one rank reports, driving both "devices"
    assert dp["global_batch"] == 8 and dp["communication"] is None
    (row,) = summary["dp_vs_ddp"]
    ddp = _config(summary, "resnet18/ddp/bs4/n2/gloo")["stats"]["sec_iter"]["p50"]
    assert row["ddp_speedup_over_dp"] == pytest.approx(dp["stats"]["sec_iter"]["p50"] / ddp)
    assert all(r["config_id"] != dp["config_id"] for t in summary["scaling"] for r in t["rows"])
    assert "DataParallel vs DDP" in run_b.stdout


def _png_size(path):
    with open(path, "rb") as handle:
        head = handle.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR"
    return struct.unpack(">II", head[16:24])


def test_plots_are_valid_images(run_a):
    plots = os.path.join(run_a.run_dir, "plots")
    names = sorted(os.path.basename(p) for p in glob.glob(os.path.join(plots, "*")))
    for stem in ("speedup", "efficiency", "comm_split", "busbw"):
        assert f"{stem}.png" in names and f"{stem}.svg" in names
        width, height = _png_size(os.path.join(plots, f"{stem}.png"))
        assert width > 300 and height > 200
        root = ElementTree.parse(os.path.join(plots, f"{stem}.svg")).getroot()
        assert root.tag.endswith("svg")
        assert os.stat(os.path.join(plots, f"{stem}.png")).st_mode & 0o077 == 0
    # the speedup chart names its perfect-scaling line; the text is in the SVG
    with open(os.path.join(plots, "speedup.svg"), encoding="utf-8") as handle:
        assert "perfect scaling" in handle.read()
    # every measured figure drawn with its 95% interval: the parts of a step, and each bus bandwidth
    for stem, intervals in (("speedup", ('id="ci-speedup-', 'id="ci-efficiency-')),
                            ("comm_split", ('id="ci-compute"', 'id="ci-step"')), ("busbw", ('id="ci-busbw-',))):
        with open(os.path.join(plots, f"{stem}.svg"), encoding="utf-8") as handle:
            drawn = handle.read()
        assert all(interval in drawn for interval in intervals), stem
    assert f"Plots: {plots}/" in run_a.stdout


def test_diff_of_two_real_runs(run_a, run_b):
    done = ddptop("diff", run_a.run_dir, run_b.run_dir, "--format", "json")
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    changed = {d["key"]: (d["a"], d["b"]) for d in result["plan"]}
    assert changed["bucket_cap_mb"] == ([25.0], [1.0])
    assert changed["collectives"] == (["allreduce", "allgather", "reduce_scatter", "broadcast"], [])
    ids = [r["config_id"] for r in result["configs"]]
    assert ids == ["resnet18/no_ddp/bs4/n1/gloo", "resnet18/ddp/bs4/n1/gloo", "resnet18/ddp/bs4/n2/gloo"]
    a, b = run_a.figures(), run_b.figures()
    for row in result["configs"]:
        p50_a = _config(a, row["config_id"])["stats"]["sec_iter"]["p50"]
        p50_b = _config(b, row["config_id"])["stats"]["sec_iter"]["p50"]
        assert row["p50_change"] == pytest.approx(p50_b / p50_a - 1)
        low, high = row["ratio_ci"]
        assert low <= row["ratio"] <= high and row["verdict"] in ("faster", "slower", "within noise", "equivalent")
    text = ddptop("diff", run_a.run_dir, os.path.join(run_b.run_dir, "summary.json")).stdout
    assert "bucket_cap_mb" in text and "p50 change" in text and "verdict" in text
    # a run against itself: every change is zero and within noise
    assert result["only_b"] == ["resnet18/dp/bs4/n2/gloo"] and result["only_a"] == []
    same = json.loads(ddptop("diff", run_a.run_dir, run_a.run_dir, "--format", "json").stdout)
    assert same["plan"] == [] and all(r["ratio"] == 1 and r["verdict"] != "slower" for r in same["configs"])
