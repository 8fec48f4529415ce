"""Threads, ranks and the GPU: the thread sweep's plan and launches, the thread curve, the best split of the
cores and the CPU against the GPUs (``ddptop.analysis.threads``), their report parts, and one real sweep of
--threads 1,2 --devices cpu,cuda on this CPU-only machine."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from ddptop.analysis import threads
from ddptop.report import sections
from ddptop.report.schema import CoreBudget, Summary
from ddptop.run.binding import launch_binding
from ddptop.run.plan_records import Plan
from ddptop.run.plan import PlanError, PlanOptions, build_plan
from ddptop.telemetry.inventory import GpuInfo, Inventory
from tests.conftest import run_sweep
from tests.intervals_helpers import flat_shape

NO_GPU = Inventory(problem="NVML unavailable: test")


def one_gpu() -> Inventory:
    return Inventory(gpus=(GpuInfo(0, "NVIDIA H100 80GB HBM3", "GPU-00000000", 80 << 30),))


# -- the plan ------------------------------------------------------------------------------------------------


def test_a_thread_sweep_runs_every_split_that_fits_the_cores_each_in_its_own_launch():
    plan = build_plan(PlanOptions(threads=[1, 2], batch_sizes=[8]), NO_GPU, cpu_count=2)
    assert plan.cpu_grid == ((1, 1), (1, 2), (2, 1))  # 2 ranks x 2 threads would need 4 cores
    once = plan.launches()[:3]
    assert [(l.world_size, l.threads, l.launch_key) for l in once] == [
        (1, 1, "n1-gloo-t1"), (1, 2, "n1-gloo-t2"), (2, 1, "n2-gloo-t1")]
    ids = [c.config_id for l in once for c in l.configs]
    assert ids == ["resnet18/ddp/bs8/n1/gloo/t1", "resnet18/no_ddp/bs8/n1/gloo/t2", "resnet18/ddp/bs8/n1/gloo/t2",
                   "resnet18/ddp/bs8/n2/gloo/t1"]  # the baseline once, beside the most threads at N=1
    assert all(c.threads == l.threads for l in once for c in l.configs)
    assert [c.label for c in once[1].configs] == ["no ddp x2t", "1M/1Px2t"]
    # every launch of a replicate, in reverse in the next (1 2 ... 2 1), as the world sizes are
    assert [l.launch_key for l in plan.launches()[3:6]] == ["n2-gloo-t1", "n1-gloo-t2", "n1-gloo-t1"]
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan


def test_each_rank_of_a_thread_launch_is_bound_to_its_own_threads_cores():
    plan = build_plan(PlanOptions(threads=[1, 2]), NO_GPU, cpu_count=2)
    found = launch_binding(plan, 1, 2)
    if len(os.sched_getaffinity(0)) >= 2:
        assert [len(cores) for cores in found["rank_cores"]] == [2]
    assert [len(cores) for cores in launch_binding(plan, 2, 1)["rank_cores"]] == [1, 1]


def test_devices_on_a_gpu_node_add_the_cpu_split_after_the_gpus_sweep():
    plan = build_plan(PlanOptions(devices=["cpu", "cuda"], threads=[1, 2, 4, 8, 16], models=["resnet18"]),
                      one_gpu(), cpu_count=16)
    assert (plan.device, plan.devices, plan.backends) == ("cuda", ("cpu", "cuda"), ("nccl",))
    assert plan.cpu_grid == ((1, 1), (1, 2), (1, 4), (1, 8), (1, 16))
    once = plan.launches()[:6]
    assert [l.launch_key for l in once] == ["n1-nccl", "n1-gloo-cpu-t1", "n1-gloo-cpu-t2", "n1-gloo-cpu-t4",
                                            "n1-gloo-cpu-t8", "n1-gloo-cpu-t16"]
    gpu, cpu = once[0].configs[-1], once[1].configs[0]
    assert (gpu.device, gpu.config_id) == ("cuda", "resnet18/ddp/bs32/n1/nccl")
    assert (cpu.device, cpu.config_id, cpu.batch_size) == ("cpu", "resnet18/ddp/bs32/n1/gloo/cpu/t1", 32)
    assert launch_binding(plan, 1, 1, "cpu").get("rank_cores") is not None  # the CPU part is bound to cores
    ids = [c.config_id for c in plan.configs()]
    assert len(ids) == len(set(ids))


def test_devices_without_a_gpu_are_the_cpu_part_and_say_why():
    plan = build_plan(PlanOptions(devices=["cpu", "cuda"]), NO_GPU, cpu_count=2)
    assert (plan.device, plan.devices, plan.cpu_grid) == ("cpu", ("cpu",), ())
    assert plan.devices_skipped == {"cuda": "no GPU is usable: NVML unavailable: test"}


def test_devices_without_threads_split_the_cores_evenly_at_each_world_size():
    plan = build_plan(PlanOptions(devices=["cpu", "cuda"], world_sizes=[1]), one_gpu(), cpu_count=16)
    assert plan.cpu_grid == ((1, 16),)


@pytest.mark.parametrize("options, message", [
    (dict(threads=[3]), "--threads 3: each count must be 1 to the 2 usable cores"),
    (dict(threads=[0]), "--threads 0: each count must be 1 to the 2 usable cores"),
    (dict(threads=[2], world_sizes=[1, 2]), "--world-sizes 2 with --threads 2: 4 cores, more than the 2 usable"),
    (dict(threads=[1], threads_per_rank=1), "--threads sweeps the threads per rank: drop --threads-per-rank"),
    (dict(devices=["cpu"]), "--devices compares the CPU with the GPUs: cpu,cuda (got cpu; one device: --device)"),
    (dict(devices=["cpu", "tpu"]), "--devices compares the CPU with the GPUs: cpu,cuda (got cpu,tpu; one device: "
                                   "--device)"),
    (dict(devices=["cpu", "cuda"], device="cpu"), "--device and --devices together: --devices cpu,cuda already "
                                                  "names both"),
    (dict(threads=[1], nnodes=2), "--threads and --devices measure one node: drop --nnodes"),
])
def test_invalid_thread_and_device_plans_are_one_line(options, message):
    with pytest.raises(PlanError) as caught:
        build_plan(PlanOptions(**options), NO_GPU, cpu_count=2)
    assert str(caught.value) == message


# -- the analysis --------------------------------------------------------------------------------------------


class _Plan:
    scaling = "weak"
    device = "cpu"
    threads_per_rank = {1: 16, 2: 8}
    cores_per_rank = None
    su_core_weight = 1.0
    su_gpu_weight = 2.0
    efficiency_threshold = 0.7
    price_per_gpu_hour = None
    epoch_examples = 1000
    internode_gbps = 25.0
    cpu_cores = 16
    devices: tuple[str, ...] = ()
    devices_skipped: dict[str, str] = {}


def _entry(n: int, t: int, p50: float, device: str = "cpu", batch: int = 8) -> dict:
    suffix = f"/{device}/t{t}" if t else ""
    unit = "G" if device == "cuda" else "P"
    return {"config_id": f"m/ddp/bs{batch}/n{n}/gloo{suffix}", "label": f"1M/{n}{unit}" + (f"x{t}t" if t else ""),
            "model": "m", "mode": "ddp", "batch_size": batch, "global_batch": batch * n, "world_size": n,
            "backend": "gloo" if device == "cpu" else "nccl", "device": device, "scaling": "weak",
            "bucket_cap_mb": 25.0, "threads": t, "status": "ok", "stats": {"sec_iter": {"p50": p50}}}


def _replicates(entries: list[dict], spread: float) -> dict[str, np.ndarray]:
    """Each configuration's p50 replicates: normal around its p50 with a relative spread (seeded)."""
    rng = np.random.default_rng(7)
    return {e["config_id"]: e["stats"]["sec_iter"]["p50"] * (1 + spread * rng.standard_normal(2000)) for e in entries}


def test_the_thread_curve_has_speedup_efficiency_and_amdahl_from_one_thread():
    # a step with serial fraction 0.1: T(t) = 1.0 * (0.1 + 0.9 / t)
    entries = [_entry(1, t, 0.1 + 0.9 / t) for t in (1, 2, 4, 8)]
    (table,) = threads.thread_tables(entries, _Plan(), _replicates(entries, 0.01))
    rows = {r["threads"]: r for r in table["rows"]}
    assert rows[4]["speedup"] == pytest.approx(1 / 0.325)
    assert rows[8]["efficiency"] == pytest.approx(1 / 0.2125 / 8)
    assert rows[8]["karp_flatt"] == pytest.approx(0.1)
    assert table["amdahl"]["serial_fraction"] == pytest.approx(0.1)
    low, high = table["amdahl"]["serial_fraction_ci"]
    assert low < 0.1 < high and high - low < 0.05
    assert rows[8]["speedup_ci"][0] < rows[8]["speedup"] < rows[8]["speedup_ci"][1]
    assert rows[2]["cores"] == 2 and rows[1]["speedup"] == 1.0
    # efficiency 91%, 77%, 59%: clearly above 70% to t=4, clearly below at 8
    assert table["recommendation"].startswith("Efficiency drops below 70% beyond t=4 (59%")
    assert "request 4 threads" in table["recommendation"]


def test_one_thread_count_makes_no_thread_table():
    assert threads.thread_tables([_entry(1, 2, 0.5), _entry(2, 2, 0.6)], _Plan()) == []


def test_the_best_split_is_named_beyond_noise_or_within_it():
    entries = [_entry(1, 2, 0.50), _entry(2, 1, 0.80), _entry(1, 1, 0.9)]  # ex/s: 16, 20, 8.9
    (clear,) = threads.core_budget(entries, _Plan(), _replicates(entries, 0.01))
    assert clear["best_config_id"] == "m/ddp/bs8/n2/gloo/cpu/t1"
    assert clear["ratio"].value == pytest.approx(20 / 16)
    assert clear["answer"].startswith("Best split of the 16 cores for m: 2 ranks x 1 thread, 20 (")
    assert "the next best (1 rank x 2 threads), beyond noise." in clear["answer"]
    (noisy,) = threads.core_budget(entries, _Plan(), _replicates(entries, 0.3))
    assert noisy["best_config_id"] is None and noisy["measured_highest"] == "m/ddp/bs8/n2/gloo/cpu/t1"
    assert "2 ranks x 1 thread and 1 rank x 2 threads cannot be told apart" in noisy["answer"]
    assert "within noise" in noisy["answer"]


def _devices_plan() -> _Plan:
    plan = _Plan()
    plan.device, plan.devices = "cuda", ("cpu", "cuda")
    plan.threads_per_rank = {1: 16}
    return plan


def test_the_gpu_is_worth_it_when_each_example_costs_fewer_service_units():
    cpu, gpu = _entry(1, 16, 1.0), _entry(1, 0, 0.05, device="cuda")
    (table,) = threads.devices_compared([cpu, gpu], _devices_plan(), _replicates([cpu, gpu], 0.01))
    assert table["gpu_speedup"].value == pytest.approx(20.0)
    # GPU: (1 x 16 cores + 2 x 1 GPU) x 0.05 s; CPU: 16 cores x 1.0 s, per example alike
    assert table["relative_su"].value == pytest.approx(18 * 0.05 / 16)
    assert table["worth_it"] is True
    assert table["answer"].startswith("m: the GPUs (1M/1G) give 20.00x (")
    assert "(1M/1G against 1M/1Px16t, 1 SU per core-hour, 2 per GPU-hour)" in table["answer"]
    assert table["answer"].endswith("worth it, 17.78x cheaper per example, beyond noise.")
    assert table["cpu"]["su_hours_per_million"] == pytest.approx(16 * 1.0 / 8 * 1e6 / 3600)


def test_the_gpu_is_not_worth_it_or_within_noise():
    cpu, gpu = _entry(1, 16, 1.0), _entry(1, 0, 1.5, device="cuda")
    (dear,) = threads.devices_compared([cpu, gpu], _devices_plan(), _replicates([cpu, gpu], 0.01))
    assert dear["worth_it"] is False and "not worth it, 1.69x dearer per example, beyond noise." in dear["answer"]
    gpu = _entry(1, 0, 16 / 18, device="cuda")  # the same service units per example
    (even,) = threads.devices_compared([cpu, gpu], _devices_plan(), _replicates([cpu, gpu], 0.05))
    assert even["worth_it"] is None and "neither cheaper nor dearer beyond noise (within noise)" in even["answer"]


def test_speedup_is_fastest_against_fastest_and_cost_cheapest_against_cheapest():
    # the CPU at 16 threads is fastest (ex/s 8 against 5.3 at one thread) but at one thread cheapest per example
    cpu_fast, cpu_cheap = _entry(1, 16, 1.0), _entry(1, 1, 1.5)
    gpu = _entry(1, 0, 0.1, device="cuda")
    entries = [cpu_fast, cpu_cheap, gpu]
    (table,) = threads.devices_compared(entries, _devices_plan(), _replicates(entries, 0.01))
    assert table["cpu"]["config_id"] == cpu_fast["config_id"] and table["gpu_speedup"].value == pytest.approx(10.0)
    assert table["cpu_cheapest"]["config_id"] == cpu_cheap["config_id"]
    # GPU: (16 + 2) x 0.1 s; CPU at one thread: 1 x 1.5 s, per example alike
    assert table["relative_su"].value == pytest.approx(1.8 / 1.5)
    assert table["worth_it"] is False
    text = sections.text_report(Summary.from_json({"name": "t", "devices_compared": [table]}))
    rows = [line.split() for line in text.splitlines() if line.startswith(("  cpu ", "  cuda "))]
    assert [row[:2] for row in rows] == [["cpu", "fastest"], ["cpu", "cheapest"], ["cuda", "fastest,"]]
    assert rows[0][2:5] == ["1", "x", "16"] and rows[1][2:5] == ["1", "x", "1"]


def test_a_zero_core_weight_gives_no_cost_ratio_instead_of_dividing_by_zero():
    plan = _devices_plan()
    plan.su_core_weight = 0.0
    cpu, gpu = _entry(1, 16, 1.0), _entry(1, 0, 0.05, device="cuda")
    (table,) = threads.devices_compared([cpu, gpu], plan, _replicates([cpu, gpu], 0.01))
    assert table["relative_su"] is None and table["worth_it"] is None
    assert table["answer"].endswith("the CPU is charged nothing (0 SU per core-hour, 2 per GPU-hour), so there is "
                                    "no cost to compare.")


def test_strong_scaling_compares_the_devices_at_one_global_batch():
    plan = _devices_plan()
    plan.scaling, plan.threads_per_rank = "strong", {1: 16, 2: 8}
    entries = []
    for n, t, p50, device in ((1, 16, 1.0, "cpu"), (2, 8, 0.6, "cpu"), (1, 0, 0.1, "cuda"), (2, 0, 0.06, "cuda")):
        entry = _entry(n, t, p50, device=device, batch=64 // n)
        entry.update(scaling="strong", global_batch=64)
        entries.append(entry)
    (table,) = threads.devices_compared(entries, plan)
    assert (table["batch_size"], table["batch_meaning"]) == (64, "global")
    assert table["cpu"]["world_size"] == 2 and table["cuda"]["world_size"] == 2


def test_without_a_gpu_the_cpu_part_is_given_and_why():
    plan = _Plan()
    plan.devices, plan.devices_skipped = ("cpu",), {"cuda": "no GPU is usable: NVML unavailable: test"}
    (table,) = threads.devices_compared([_entry(1, 2, 0.5)], plan)
    assert table["cuda"] is None and table["gpu_speedup"] is None
    assert table["answer"] == ("m: the CPU part alone (1 rank x 2 threads, 16 examples/s); GPUs not measured: no GPU "
                               "is usable: NVML unavailable: test.")


def test_the_report_parts_show_each_answer():
    cpu, gpu = _entry(1, 16, 1.0), _entry(1, 0, 0.05, device="cuda")
    curve = [_entry(1, t, 0.1 + 0.9 / t) for t in (1, 2)] + [_entry(2, 1, 1.0)]
    reps = _replicates([cpu, gpu, *curve], 0.01)
    summary = Summary.from_json({"name": "t", "threads": threads.thread_tables(curve, _Plan(), reps),
                                 "core_budget": threads.core_budget(curve, _Plan(), reps),
                                 "devices_compared": threads.devices_compared([cpu, gpu], _devices_plan(), reps)})
    text = sections.text_report(summary)
    assert "Threads: m, 1 rank, batch 8 per rank (gloo); speedup over 1 thread, 95% intervals" in text
    assert "Best split of the 16 cores for m: 2 ranks x 1 thread" in text
    lines = text.splitlines()
    grid = lines[lines.index("  ranks  1 thr  2 thr") + 1:][:2]
    assert [line.split() for line in grid] == [["1", "8", "15"], ["2", "16", "?"]]  # 2 x 2 fits 16 cores, not run
    assert "CPU against GPU: m, batch 8 per rank" in text and "worth it" in text
    md = sections.markdown(summary)
    for title in ("## CPU against GPU", "## Threads per rank", "## Core budget: ranks x threads"):
        assert title in md
    # what a run ends with: the three answers, after the whole report and before where it was saved
    closing = sections.closing_text(summary, {"json": "s.json", "md": "s.md", "csv": "s.csv"}).splitlines()
    answers = closing[closing.index("Answers") + 1:-1]
    assert [line.split(":")[0] for line in answers] == ["  Threads (m, 1 rank)", "  Best split of the 16 cores for m",
                                                         "  m"]
    assert closing[-1] == "Summary: s.json  s.md  s.csv"


# -- one real sweep ------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_real_thread_sweep_with_devices_on_the_cpu(tmp_path):
    run_dir = str(tmp_path / "run")
    run_sweep(run_dir, "--threads", "1,2", "--devices", "cpu,cuda", "--models", "resnet18", "--batch-sizes", "4",
              "--image-size", "32", "--num-classes", "10", "--warmup", "2", "--iters", "8", "--launches", "2",
              "--no-trace", "--comm-iters", "0", "--no-collectives", plots=True)
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))  # each figure beside its _ci, as the analysis made them
    assert summary["plan"]["cpu_grid"] == [[1, 1], [1, 2], [2, 1]]
    (curve,) = summary["threads"]
    assert [r["threads"] for r in curve["rows"]] == [1, 2]
    assert all(r["speedup_ci"] and r["efficiency_ci"] for r in curve["rows"][1:])
    (budget,) = summary["core_budget"]
    assert sorted((c["world_size"], c["threads"]) for c in budget["cells"]) == [(1, 1), (1, 2), (2, 1)]
    assert budget["answer"].startswith("Best split of the 2 cores for resnet18: ")
    (compared,) = summary["devices_compared"]
    assert compared["cuda"] is None and "GPUs not measured: no GPU is usable" in compared["answer"]
    # each launch's ranks got as many cores as their threads, and torch was told so
    for name, setup in summary["environment"]["launch_setup"].items():
        threads_of = int(name.rsplit("-t", 1)[1])
        for rank in setup["ranks"].values():
            assert len(rank["cores"]) == threads_of
        with open(os.path.join(run_dir, "launches", name, "launch.json"), encoding="utf-8") as handle:
            assert json.load(handle)["threads_per_rank"] == threads_of
    assert os.path.exists(os.path.join(run_dir, "plots", "threads.png"))
    with open(os.path.join(run_dir, "summary.md"), encoding="utf-8") as handle:
        md = handle.read()
    assert "## Threads per rank" in md and "## Core budget: ranks x threads" in md and "## CPU against GPU" in md


# -- the launches around the sweep: repeats, ceilings, collectives -------------------------------------------


def test_a_repeat_of_a_disturbed_thread_launch_keeps_its_threads_and_device():
    from ddptop.run.sweep import repeat_launches

    plan = build_plan(PlanOptions(devices=["cpu", "cuda"], threads=[1, 4], world_sizes=[1]), one_gpu(), cpu_count=16)
    judged = {"resnet50/ddp/bs32/n1/gloo/cpu/t1": (True, True), "resnet50/ddp/bs32/n1/gloo/cpu/t4": (True, False),
              "resnet50/ddp/bs32/n1/nccl": (True, True)}
    again = {launch.launch_key: launch for launch in repeat_launches(plan, judged)}
    assert sorted(again) == ["n1-gloo-cpu-t1", "n1-nccl"]
    cpu = again["n1-gloo-cpu-t1"]
    assert (cpu.device, cpu.threads, [c.config_id for c in cpu.configs]) == (
        "cpu", 1, ["resnet50/ddp/bs32/n1/gloo/cpu/t1"])
    assert (again["n1-nccl"].device, again["n1-nccl"].threads) == ("", 0)
    # a shape none of whose launches was quiet gets no repeat: the t1 launch alone, disturbed throughout
    assert repeat_launches(plan, {"resnet50/ddp/bs32/n1/gloo/cpu/t1": (False, True)}) == []


def test_each_device_measures_its_ceiling_once_the_cpu_with_the_most_threads_of_one_rank():
    from ddptop.run.sweep import ceiling_launches

    assert ceiling_launches(build_plan(PlanOptions(threads=[1, 2]), NO_GPU, cpu_count=2)) == {"cpu": ("n1-gloo-t2", 0)}
    assert ceiling_launches(build_plan(PlanOptions(), NO_GPU, cpu_count=2)) == {"cpu": ("n1-gloo", 0)}
    plan = build_plan(PlanOptions(devices=["cpu", "cuda"], threads=[1, 4, 16]), one_gpu(), cpu_count=16)
    assert ceiling_launches(plan) == {"cuda": ("n1-nccl", 0), "cpu": ("n1-gloo-cpu-t16", 0)}
    # no launch of one rank: the launch whose ranks have the most threads
    plan = build_plan(PlanOptions(threads=[1, 2], world_sizes=[2, 4]), NO_GPU, cpu_count=8)
    assert ceiling_launches(plan) == {"cpu": ("n2-gloo-t2", 0)}


def test_the_collective_benchmark_runs_once_per_world_size_and_not_in_the_cpu_part():
    plan = build_plan(PlanOptions(threads=[1, 2], world_sizes=[1, 2]), NO_GPU, cpu_count=4)
    runs = {launch.launch_key: plan.measures_collectives(launch) for launch in plan.launches()}
    assert runs["n2-gloo-t2"] and not runs["n2-gloo-t1"]
    gpus = build_plan(PlanOptions(devices=["cpu", "cuda"], world_sizes=[1]), one_gpu(), cpu_count=16)
    assert [plan_launch.launch_key for plan_launch in gpus.launches() if gpus.measures_collectives(plan_launch)
            ][:1] == ["n1-nccl"]
    assert not any(gpus.measures_collectives(launch) for launch in gpus.launches() if launch.device == "cpu")


@pytest.mark.parametrize("options, message", [
    (dict(threads=[1, 2], strategies=["zero1"]), "--strategies and --threads are measured one at a time: run them "
                                                 "as two sweeps"),
    (dict(devices=["cpu", "cuda"], variants=["amp_bf16"]), "--variants and --devices are measured one at a time: "
                                                           "run them as two sweeps"),
    (dict(threads=[1], compare_dp=True), "--compare-dp and --threads are measured one at a time: run them as two "
                                         "sweeps"),
    (dict(threads=[1, 2]), "--threads sweeps CPU ranks: add --device cpu, or --devices cpu,cuda for the GPUs "
                           "beside"),
])
def test_what_a_thread_sweep_does_not_combine_with_is_one_line(options, message):
    with pytest.raises(PlanError) as caught:
        build_plan(PlanOptions(**options), one_gpu(), cpu_count=16)
    assert str(caught.value) == message


def test_the_cpu_part_measures_fp32_and_its_world_sizes_in_one_scaling_table():
    from ddptop.analysis.scaling import scaling_tables

    plan = build_plan(PlanOptions(devices=["cpu", "cuda"], amp="bf16", world_sizes=[1, 2]),
                      Inventory(gpus=tuple(GpuInfo(i, "H100", f"GPU-{i}", 80 << 30) for i in range(2))), cpu_count=16)
    assert plan.cpu_grid == ((1, 16), (2, 8))
    cpu = [c for c in plan.configs() if c.device == "cpu"]
    assert {c.amp for c in cpu} == {None} and {c.amp for c in plan.configs() if c.device == "cuda"} == {"bf16"}
    entries = [dict(c.to_json(), label=c.label, status="ok", stats={"sec_iter": {"p50": 0.1 * c.world_size}})
               for c in plan.configs()]
    tables = scaling_tables(entries, plan)
    assert sorted((t.get("device", ""), [r["world_size"] for r in t["rows"]]) for t in tables) == [
        ("", [1, 2]), ("cpu", [1, 2])]
    cpu_table = next(t for t in tables if t.get("device") == "cpu")
    assert [r["cores"] for r in cpu_table["rows"]] == [16, 16]  # each rank charged its own threads


def test_the_core_budget_grid_marks_a_split_that_needs_more_cores_than_there_are():
    from ddptop.report.blocks import Table
    from ddptop.report.thread_tables import _grid

    cells = [{"world_size": n, "threads": t, "ex_sec_total": ex} for n, t, ex in ((1, 1, 59.0), (1, 2, 104.0),
                                                                                 (2, 1, 84.0))]
    caption, table = _grid(CoreBudget.from_json({"cells": cells, "cores": 2}))
    assert isinstance(table, Table) and table.header == ("ranks", "1 thr", "2 thr")
    assert list(table.rows) == [("1", "59", "104"), ("2", "84", "-")]
    assert _grid(CoreBudget.from_json({"cells": cells[:2], "cores": 2})) == []  # one row of ranks: the list is the grid
