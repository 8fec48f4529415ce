"""The analysis formulas against the figures of the documents they come from and against synthetic data with a
known answer."""

import math
import random

import pytest

from bench_kernels.collectives import message_sizes, parse_size
from ddptop.analysis import formulas
from ddptop.run.plan import PlanError, PlanOptions, build_plan
from ddptop.protocol.bandwidth import busbw_factor
from ddptop.telemetry.inventory import Inventory

# torchvision's resnet18 with 1000 classes, as in the course notebook "Problem 2 - Data Parallelism in Pytorch"
RESNET18_PARAMS = 11_689_512


def test_ring_allreduce_volume_matches_the_notebooks_figures():
    grad_bytes = RESNET18_PARAMS * 4
    # the notebook: 2(N-1)K/N parameters, times 4 bytes, over 2^30: 0.044 GB at N=2 and 0.065 GB at N=4
    assert round(formulas.allreduce_bytes(grad_bytes, 2) / formulas.GIB, 3) == 0.044
    assert round(formulas.allreduce_bytes(grad_bytes, 4) / formulas.GIB, 3) == 0.065
    assert formulas.allreduce_bytes(grad_bytes, 1) == 0  # nothing to exchange alone


def test_busbw_factors_are_nccl_tests_factors():
    assert busbw_factor("allreduce", 8) == pytest.approx(1.75)
    assert busbw_factor("allgather", 8) == pytest.approx(0.875)
    assert busbw_factor("reduce_scatter", 4) == pytest.approx(0.75)
    assert busbw_factor("broadcast", 8) == 1.0
    assert formulas.ring_factor(2) == 1.0


def test_comm_estimate_from_t1_reproduces_the_notebooks_table():
    # The notebook (2.3): batch 32 per GPU, 1 GPU 16.10 s per epoch, 2 GPUs 41.32 s -> communication 33.27 s.
    # Per step, with S1 steps per epoch at N=1 and S1/2 at N=2 (weak scaling):
    steps_1 = 1563
    per_step = formulas.comm_estimate_from_t1(41.32 / (steps_1 / 2), 16.10 / steps_1, 32, 32)
    assert per_step * steps_1 / 2 == pytest.approx(33.27, abs=0.01)
    # strong scaling: each rank does half the work, so compute is t1/2
    assert formulas.comm_estimate_from_t1(0.6, 1.0, 16, 32) == pytest.approx(0.1)


def test_epoch_transfer_counts_every_gradient_value_per_step():
    # "Benchmarking Distributed Training and Inference on NVIDIA's A6000 GPUs": N / (B * k) synchronisations
    # per epoch, each of every trainable parameter
    result = formulas.epoch_transfer(RESNET18_PARAMS * 4, RESNET18_PARAMS, 50_000, 32 * 2, 2)
    assert result["steps_per_epoch"] == math.ceil(50_000 / 64)
    assert result["grad_values_per_epoch"] == 782 * RESNET18_PARAMS
    assert result["grad_bytes_per_epoch"] == 782 * RESNET18_PARAMS * 4
    assert result["ring_bytes_per_rank_per_epoch"] == 782 * RESNET18_PARAMS * 4 * 1.0


@pytest.mark.parametrize("serial", [0.0, 0.05, 0.3])
def test_amdahl_fit_recovers_a_known_serial_fraction(serial):
    compute = 1.0
    points = []
    for n in (1, 2, 3, 4, 6, 8):
        time_n = compute * (serial + (1 - serial) / n)  # strong scaling under Amdahl's law
        points.append((n, compute / time_n))
    fit = formulas.amdahl_fit(points)
    assert fit["serial_fraction"] == pytest.approx(serial, abs=1e-12)
    assert fit["rmse_speedup"] == pytest.approx(0, abs=1e-9)
    for n, speedup in points[1:]:
        assert formulas.karp_flatt(speedup, n) == pytest.approx(serial, abs=1e-12)


def test_amdahl_fit_with_noise_stays_close():
    rng = random.Random(3)
    points = [(n, formulas.amdahl_speedup(0.08, n) * rng.uniform(0.98, 1.02)) for n in (2, 4, 8, 16)]
    fit = formulas.amdahl_fit(points)
    assert abs(fit["serial_fraction"] - 0.08) < 0.01
    assert fit["max_speedup"] == pytest.approx(1 / fit["serial_fraction"])


def test_amdahl_is_fitted_only_where_one_rank_was_measured():
    """From a base of N=2 the speedups assume perfect scaling up to it: a fit would count that made-up point
    (a tune at one world size printed "serial fraction 0.0%")."""
    import json
    import os

    from ddptop.analysis import scaling
    from ddptop.run.plan_records import Plan

    from .conftest import REPO
    from .intervals_helpers import flat_shape

    with open(os.path.join(REPO, "tests", "data", "golden", "recorded-cpu-run.summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))  # the configurations as analysis reads them
    plan, entries = Plan.from_json(summary["plan"]), summary["configs"]
    (whole,) = scaling.scaling_tables(entries, plan)
    assert whole["rows"][0]["world_size"] == 1 and whole["amdahl"]["points"] == 1
    (from_two,) = scaling.scaling_tables([e for e in entries if e["world_size"] > 1], plan)
    assert from_two["rows"][0]["world_size"] == 2 and from_two["amdahl"] is None


def test_amdahl_fit_needs_more_than_one_rank():
    assert formulas.amdahl_fit([(1, 1.0)]) is None
    assert formulas.karp_flatt(1.0, 1) is None
    superlinear = formulas.amdahl_fit([(2, 2.2), (4, 4.5)])
    assert superlinear["serial_fraction"] == 0.0 and superlinear["raw_serial_fraction"] < 0


def test_cost_per_million_examples():
    # 4 GPUs at 1000 examples/s: a million examples take 1000 s = 0.2778 h, times 4 GPUs at 2.50 per GPU-hour
    assert formulas.cost_per_million(4, 1000.0, 2.5) == pytest.approx(1000 / 3600 * 4 * 2.5)
    assert formulas.cost_per_million(4, 0.0, 2.5) is None


def test_message_sizes_and_size_parsing():
    assert parse_size("1KiB") == 1024 and parse_size("16MiB") == 16 << 20 and parse_size("1G") == 1 << 30
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError):
        parse_size("lots")
    assert message_sizes(1024, 8192) == [1024, 2048, 4096, 8192]


CPU = Inventory(problem="no GPU")


def test_plan_sweeps_buckets_and_batches():
    plan = build_plan(PlanOptions(bucket_cap_mb=[25, 1], world_sizes=[2], baseline=False), CPU, cpu_count=2)
    assert [c.config_id for c in plan.configs()] == [
        "resnet18/ddp/bs16/n2/gloo/bucket25", "resnet18/ddp/bs16/n2/gloo/bucket1"]
    assert {c.bucket_cap_mb for c in plan.configs()} == {25.0, 1.0}
    plan = build_plan(PlanOptions(batch_sweep=True, batch_sizes=[4], max_batch=40), CPU, cpu_count=2)
    assert plan.batch_sizes == (4, 8, 16, 32)
    assert plan.comm_iters == 5 and plan.collectives == ("allreduce",)
    assert plan.collective_spec()["max_bytes"] == 16 << 20


@pytest.mark.parametrize(
    "options, message",
    [
        (PlanOptions(max_batch=64), "--max-batch only applies with --batch-sweep"),
        (PlanOptions(batch_sweep=True, batch_sizes=[64], max_batch=8), "smaller than the first batch size"),
        (PlanOptions(collectives=["alltoall"]), "unknown collective 'alltoall'"),
        (PlanOptions(coll_max_bytes="huge"), "is not a size"),
        (PlanOptions(coll_min_bytes="2MiB", coll_max_bytes="1MiB"), "0 < min <= max"),
        (PlanOptions(memory_cap_mb=0), "--memory-cap-mb must be positive"),
        (PlanOptions(efficiency_threshold=1.5), "--efficiency-threshold"),
        (PlanOptions(comm_iters=-1), "--comm-iters cannot be negative"),
        (PlanOptions(bucket_cap_mb=[25, -1]), "--bucket-cap-mb must be positive"),
    ],
)
def test_bad_analysis_options_are_one_line_errors(options, message):
    with pytest.raises(PlanError, match=message):
        build_plan(options, CPU, cpu_count=2)


def test_data_parallel_runs_in_a_single_process_launch():
    plan = build_plan(PlanOptions(world_sizes=[2, 4], compare_dp=True, batch_sizes=[8]), CPU, cpu_count=4)
    launches = plan.launches()
    assert [(l.world_size, [c.config_id for c in l.configs]) for l in launches][0] == (
        1, ["resnet18/dp/bs8/n2/gloo", "resnet18/dp/bs8/n4/gloo"])
    dp = launches[0].configs[1]
    assert dp.processes == 1 and dp.global_batch == 32 and dp.label == "DP/4P"
    assert plan.threads_per_rank[1] == 4  # the one process gets the cores the N ranks would share
    with pytest.raises(PlanError, match="--compare-dp needs a world size above 1"):
        build_plan(PlanOptions(world_sizes=[1], compare_dp=True), CPU, cpu_count=2)
