"""``ddptop tune -- train.py``: the script as written first, then the tries its run calls for (or those
named), set by the probe on the script's own calls (its file untouched), each in launches of its own
interleaved with the script as written, ranked by the interval of its ratio as the kernels' variants are; a
try the script or torch refuses is not applicable.

Quick: the plan (the script as written alone first, the tries one configuration a launch, interleaved; what is
refused beside a script). The choice, the patch and the probe's part: tests/test_script_tries.py and
tests/test_script_sync_probe.py. Slow: a real tune of a script whose graph changes from step to step, where
static_graph is refused; one whose tries are chosen from its first run (the loader's workers on its training
loader, no_sync, find_unused_parameters=False) with the patch that applies; one that fails as written.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import subprocess
import textwrap

import pytest

from ddptop.analysis import tuning
from ddptop.protocol import variants
from ddptop.run.options import PlanOptions
from ddptop.run.plan import PlanError, build_plan
from ddptop.telemetry.inventory import Inventory
from tests.conftest import ddptop, processes_mentioning
from tests.intervals_helpers import flat_shape
from tests.test_watch import opened_on_summary
from tests.tui_helpers import tune_standing

CPU = Inventory(problem="no GPU")


@pytest.fixture()
def in_script_folder(tmp_path, monkeypatch):
    (tmp_path / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_a_script_s_tune_runs_it_as_written_first_then_each_try_in_launches_of_its_own_interleaved(in_script_folder):
    plan = build_plan(PlanOptions(script=["train.py"], tune=True, launches=2), CPU, cpu_count=2)
    # the script as written alone until its first run: the tries are chosen from what it measured
    assert plan.world_sizes == (2,) and plan.variants == (variants.DEFAULT,) and plan.script_tune
    assert plan.script_tries == ()
    named = build_plan(PlanOptions(script=["train.py"], tune=True, launches=2, variants=["no_sync_4", "num_workers_2"]),
                       CPU, cpu_count=2)
    assert named.variants == (variants.DEFAULT,) and named.script_tries == ("no_sync_4", "num_workers_2")
    plan = dataclasses.replace(plan, variants=(variants.DEFAULT, *variants.SCRIPT_TUNE))  # as the sweep adds them
    launches = plan.launches()
    assert all(len(launch.configs) == 1 for launch in launches)  # a script runs once in a launch
    order = [launch.configs[0].variant for launch in launches]
    assert order == [*plan.variants, *reversed(plan.variants)]  # each early once and late once
    assert {c.config_id for c in plan.configs()} == {"train.py/n2/gloo", *(
        f"train.py/n2/gloo/{name}" for name in variants.SCRIPT_TUNE)}
    assert variants.script_ddp_arguments("bucket_cap_mb_10") == {"bucket_cap_mb": 10}
    assert variants.script_ddp_arguments("static_graph") == {"static_graph": True}
    assert variants.script_ddp_arguments(variants.DEFAULT) == {}


def test_a_try_the_probe_cannot_set_on_a_script_s_ddp_call_and_kernel_flags_are_refused(in_script_folder):
    for refused in ("fp16_compress_hook", "num_workers_x", "no_sync_1", "static_graph+bucket_cap_mb_10", "default"):
        with pytest.raises(PlanError, match=f"--variants {re.escape(refused)}: not a try of a script's own calls "
                                            r"\(those it can: bucket_cap_mb_10.*num_workers_K"):
            build_plan(PlanOptions(script=["train.py"], tune=True, variants=[refused]), CPU, cpu_count=2)
    on_cpu = build_plan(PlanOptions(script=["train.py"], tune=True, variants=["pin_memory", "static_graph"]), CPU,
                        cpu_count=2)
    assert on_cpu.script_tries == ("static_graph",) and on_cpu.not_tried == {"pin_memory": "pinned memory speeds "
                                                                             "copies to a GPU only"}
    with pytest.raises(PlanError, match="--world-sizes 1,2: a script's tune runs at one world size"):
        build_plan(PlanOptions(script=["train.py"], tune=True, world_sizes=[1, 2]), CPU, cpu_count=2)
    with pytest.raises(PlanError, match="--batch-sizes.*describe.*ddptop's own kernels"):
        build_plan(PlanOptions(script=["train.py"], tune=True, batch_sizes=[8]), CPU, cpu_count=2)
    with pytest.raises(PlanError, match="--variants.*describe"):  # a run of the script takes no variants
        build_plan(PlanOptions(script=["train.py"], variants=["static_graph"]), CPU, cpu_count=2)


def test_the_repeats_and_the_combination_of_a_script_s_tune_run_one_configuration_a_launch(in_script_folder):
    """A repeat of a disturbed launch and the faster tries set together run in launches of their own too: the
    script probe takes one configuration a launch."""
    from ddptop.run import sweep

    plan = build_plan(PlanOptions(script=["train.py"], tune=True, launches=2), CPU, cpu_count=2)
    plan = dataclasses.replace(plan, variants=(variants.DEFAULT, *variants.SCRIPT_TUNE))  # as the sweep adds them
    disturbed = {c.config_id: (True, True) for c in plan.configs()}  # every one quiet once and disturbed once
    repeats = sweep.repeat_launches(plan, disturbed)
    assert len(repeats) == len(plan.configs()) and all(len(launch.configs) == 1 for launch in repeats)
    kernels = build_plan(PlanOptions(tune=True, variants=["static_graph"]), CPU, cpu_count=2)
    (shared,) = sweep.repeat_launches(kernels, {c.config_id: (True, True) for c in kernels.configs()})
    assert len(shared.configs) == 2  # a kernel's launch runs its configurations one after the other


def test_a_script_s_tune_runs_it_at_the_threads_its_own_launch_gives_and_a_thread_try_in_a_launch_of_its_own(
        in_script_folder, monkeypatch):
    """On the CPU the script as written runs with the threads torchrun would give each rank (OMP_NUM_THREADS as
    the environment has it, else 1 with several ranks a node; --threads-per-rank says it), not ddptop's share of
    the cores; a thread try runs in a launch of its own at its count, alone or in the combination."""
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    wide = build_plan(PlanOptions(script=["train.py"], tune=True, world_sizes=[2]), CPU, cpu_count=8)
    assert wide.threads_for(2) == 1 and wide.threads_from == "torchrun's default with several ranks a node"
    assert build_plan(PlanOptions(script=["train.py"], world_sizes=[2]), CPU, cpu_count=8).threads_for(2) == 4
    alone = build_plan(PlanOptions(script=["train.py"], tune=True, world_sizes=[1]), CPU, cpu_count=8)
    assert alone.threads_for(1) == 8 and alone.threads_from.startswith("one rank a node")
    told = build_plan(PlanOptions(script=["train.py"], tune=True, world_sizes=[2], threads_per_rank=2), CPU,
                      cpu_count=8)
    assert told.threads_for(2) == 2 and told.threads_from == "--threads-per-rank 2"
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    plan = build_plan(PlanOptions(script=["train.py"], tune=True, world_sizes=[2], launches=2), CPU, cpu_count=8)
    assert plan.threads_for(2) == 3 and plan.threads_from == "OMP_NUM_THREADS=3 in the environment"
    assert json.loads(json.dumps(plan.to_json()))["threads_from"] == plan.threads_from
    plan = dataclasses.replace(plan, variants=(variants.DEFAULT, "threads_4", "static_graph",
                                               "threads_4+static_graph"))
    threads = {launch.configs[0].variant: plan.threads_for(2, launch.threads) for launch in plan.launches()}
    assert threads == {"default": 3, "threads_4": 4, "static_graph": 3, "threads_4+static_graph": 4}
    assert next(c for c in plan.configs() if c.variant == "threads_4").threads == 4
    # the collective benchmark runs in the script as written's launches, not in a thread try's
    assert {launch.configs[0].variant: plan.measures_collectives(launch) for launch in plan.launches()} == {
        "default": True, "threads_4": False, "static_graph": True, "threads_4+static_graph": False}
    # the combination, added to the default's launch as the runner adds it, runs at its own threads
    from ddptop.run import sweep

    default_launch = next(launch for launch in plan.launches() if launch.configs[0].variant == "default")
    together = next(c for c in plan.configs() if c.variant == "threads_4+static_graph")
    split = sweep.one_config_a_launch(plan, [dataclasses.replace(default_launch, configs=(default_launch.configs[0],
                                                                                          together))])
    assert [plan.threads_for(2, launch.threads) for launch in split] == [3, 4]
    # every launch of the tune binds each rank to its share of the cores (4 of 8 over 2 ranks): the script as
    # written at 3 threads, its loader's workers and the tries on the same CPUs; a run binds as many as its threads
    assert plan.bound_cores(2, 3) == 4 and plan.bound_cores(2, 4) == 4
    assert build_plan(PlanOptions(script=["train.py"], world_sizes=[2]), CPU, cpu_count=8).bound_cores(2, 1) == 1
    assert variants.script_change_lines(variants.variant("threads_4"), "train.py:9") == [
        "the launch: OMP_NUM_THREADS=4 torchrun ... (or torch.set_num_threads(4) at the script's start)"]
    # a run of the script (not a tune) keeps ddptop's share of the cores, whatever the environment says
    assert build_plan(PlanOptions(script=["train.py"], world_sizes=[2]), CPU, cpu_count=8).threads_for(2) == 4


def test_a_thread_try_the_script_overrode_with_its_own_count_is_not_applied():
    def entry(variant, threads):
        return {"config_id": f"script:t.py/n2/gloo/{variant}", "model": "script:t.py", "mode": "ddp",
                "batch_size": 0, "world_size": 2, "backend": "gloo", "variant": variant, "status": "ok",
                "stats": {"sec_iter": {"p50": 0.01}}, "script": {"wrappers": [], "threads": threads}}

    default = {**entry("default", 1), "config_id": "script:t.py/n2/gloo"}
    reps = {default["config_id"]: [0.01] * 50, entry("threads_4", 1)["config_id"]: [0.005] * 50}
    (table,) = tuning.tuning_tables([default, entry("threads_4", 1)], reps, {})
    row = next(r for r in table["rows"] if r["variant"] == "threads_4")
    assert row["verdict"] == f"{tuning.NOT_APPLIED_THREADS} (torch.set_num_threads(1))" and row["speedup"] is None
    (table,) = tuning.tuning_tables([default, entry("threads_4", 4)], reps, {})
    row = next(r for r in table["rows"] if r["variant"] == "threads_4")
    assert row["speedup"] is not None and row["paste"] == [
        "the launch: OMP_NUM_THREADS=4 torchrun ... (or torch.set_num_threads(4) at the script's start)"]


def test_a_try_set_on_no_ddp_call_is_said_not_applied_and_never_ranked():
    """A script that made no DistributedDataParallel model (FSDP, ZeRO, its own collectives) ran the try as
    written: it is not applied, has no ratio and is not recommended."""
    def entry(variant, tried_on):
        return {"config_id": f"script:t.py/n2/gloo/{variant}", "model": "script:t.py", "mode": "ddp",
                "batch_size": 0, "world_size": 2, "backend": "gloo", "variant": variant, "status": "ok",
                "stats": {"sec_iter": {"p50": 0.01}}, "script": {"wrappers": [], "tried_on": tried_on}}

    default = {**entry("default", None), "config_id": "script:t.py/n2/gloo"}
    reps = {default["config_id"]: [0.01] * 50, entry("static_graph", 0)["config_id"]: [0.005] * 50}
    (table,) = tuning.tuning_tables([default, entry("static_graph", 0)], reps, {})
    row = next(r for r in table["rows"] if r["variant"] == "static_graph")
    assert row["verdict"] == tuning.NOT_APPLIED and row["speedup"] is None and row["paste"] is None
    assert table["recommended"] == []


BRANCHY = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b, self.head = torch.nn.Linear(32, 64), torch.nn.Linear(64, 64), torch.nn.Linear(64, 4)

        def forward(self, x, step):
            x = torch.relu(self.a(x))
            if step % 2:  # a layer used on odd steps only: the graph changes from step to step
                x = torch.relu(self.b(x))
            return self.head(x)


    model = DDP(Net(), find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100000):
        model(torch.randn(16, 32), step).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.slow
def test_a_real_tune_of_a_script_ranks_its_tries_and_says_a_refused_one_is_not_applicable(tmp_path):
    script = tmp_path / "branchy.py"
    script.write_text(textwrap.dedent(BRANCHY))
    run_dir = str(tmp_path / "tune")
    done = ddptop("tune", "--headless", "--no-plots", "--out", run_dir, "--launches", "2", "--warmup", "3",
                  "--iters", "20", "--telemetry-interval", "0", "--variants", "static_graph,bucket_cap_mb_10", "--",
                  "branchy.py", cwd=str(tmp_path), env={"OMP_NUM_THREADS": "1"})
    # the refused try is an answer, not a fault: the script as written was measured
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert processes_mentioning(run_dir) == []
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))
    (table,) = summary["tuning"]
    rows = {r["variant"]: r for r in table["rows"]}
    assert set(rows) == {"default", "static_graph", "bucket_cap_mb_10"}
    assert rows["static_graph"]["status"] == "failed" and "graph has changed" in rows["static_graph"]["reason"]
    assert rows["bucket_cap_mb_10"]["status"] == "ok" and rows["bucket_cap_mb_10"]["speedup_ci"] is not None
    line = textwrap.dedent(BRANCHY).splitlines().index("model = DDP(Net(), find_unused_parameters=True)") + 1
    assert rows["bucket_cap_mb_10"]["paste"] == [f"branchy.py:{line}: DistributedDataParallel(..., bucket_cap_mb=10)"]
    for name in table["recommended"]:  # whatever is recommended cleared the script as written beyond the margin
        assert rows[name]["speedup_ci"][0] > 1 + table["min_effect"]
    assert "Tuning: branchy.py, its own batch at N=2 (gloo)" in done.stdout
    assert "static_graph=True" in done.stdout and "not applicable (below)" in done.stdout
    # what the script wrote is said as it wrote it, in every try
    entries = {c["variant"]: c for c in summary["configs"]}
    assert entries["bucket_cap_mb_10"]["script"]["wrappers"][0]["args"] == {"find_unused_parameters": "True"}
    # the Tune tab shows the script's tries as the kernels' variants
    _, standing = opened_on_summary(run_dir, "now", tune_standing)
    assert standing[0] == ("default", "ok") and ("static_graph", "failed") in standing and len(standing) == 3


STARVED = """
    import time

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    from torch.utils.data import DataLoader, Dataset

    dist.init_process_group("gloo")


    class Slow(Dataset):  # every example costs 2 ms of waiting (a read from slow storage)
        def __len__(self):
            return 100000

        def __getitem__(self, index):
            time.sleep(0.002)
            return torch.randn(32), index % 4


    net = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 4))
    model = DDP(net, find_unused_parameters=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(Slow(), batch_size=8, num_workers=0)
    evaluation = DataLoader(Slow(), batch_size=8, num_workers=0, drop_last=True, pin_memory=True)
    batches = iter(loader)
    while True:
        for _ in range(2):  # two micro-batches a step, each synchronising its gradients
            x, y = next(batches)
            torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.slow
def test_a_tune_chooses_its_tries_from_the_script_s_first_run_and_writes_the_change_as_a_patch(tmp_path):
    """A script that waits for its batches (num_workers=0 written in the call), synchronises on both of its
    micro-batches and sets find_unused_parameters=True with every parameter used: the tune tries the loader's
    workers on the training loader (not the evaluation one), no_sync and find_unused_parameters=False, says
    what it did not try and why, and gives each applied try its patch, which applies."""
    script = tmp_path / "starved.py"
    script.write_text(textwrap.dedent(STARVED))
    run_dir = str(tmp_path / "tune")
    done = ddptop("tune", "--headless", "--no-plots", "--out", run_dir, "--launches", "1", "--warmup", "2",
                  "--iters", "10", "--telemetry-interval", "0", "--", "starved.py", cwd=str(tmp_path),
                  env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert processes_mentioning(run_dir) == []
    with open(os.path.join(run_dir, "plan.json"), encoding="utf-8") as handle:
        plan = json.load(handle)
    source = textwrap.dedent(STARVED).splitlines()
    loader_line = next(i for i, text in enumerate(source, 1) if text.startswith("loader = DataLoader"))
    assert plan["script_loader"] == f"starved.py:{loader_line}"  # one loader made at that line: every one there
    # 2 cores, 2 ranks: one core each; both micro-batches synchronised; find_unused_parameters=True as written
    assert {"num_workers_1", "no_sync_2", "find_unused_parameters_false"} <= set(plan["tries_why"])
    assert plan["not_tried"]["pin_memory"] == "pinned memory speeds copies to a GPU only"
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))
    (table,) = summary["tuning"]
    rows = {r["variant"]: r for r in table["rows"]}
    assert {r["variant"] for r in table["tried"]} == set(plan["tries_why"])
    entries = {c["variant"]: c for c in summary["configs"]}
    assert entries["num_workers_1"]["script"]["loader_tried_on"] == 1  # its launch's training loader
    workers = {r["at"]: r["num_workers"] for r in entries["num_workers_1"]["script"]["loaders"]}
    assert workers[f"starved.py:{loader_line}"] == 1 and workers[f"starved.py:{loader_line + 1}"] == 0
    no_sync = entries["no_sync_2"]["script"]["wrappers"][0]
    assert no_sync["sync_steps"][0][:2] == [2, 1] and rows["no_sync_2"]["verdict"] != tuning.NOT_APPLIED
    # each applied try's change as a patch that applies to the script
    applied = tmp_path / "applied"
    applied.mkdir()
    (applied / "starved.py").write_text(textwrap.dedent(STARVED))
    row = rows["num_workers_1"]
    assert row["patch_folder"] == str(tmp_path)
    patched = subprocess.run(["patch", "-p1"], input=row["patch"], text=True, capture_output=True, cwd=applied)
    assert patched.returncode == 0, patched.stdout + patched.stderr
    assert "num_workers=1, drop_last" not in (applied / "starved.py").read_text()
    assert "batch_size=8, num_workers=1, persistent_workers=True)" in (applied / "starved.py").read_text()
    assert "Tried, from the script's first run: " in done.stdout and "Not tried: " in done.stdout
    best = table["recommended"][0] if table["recommended"] else None
    assert os.path.exists(os.path.join(run_dir, "tune.patch")) == bool(best and rows.get(best, {}).get("patch"))


DENSE = """
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    dist.init_process_group("gloo")
    {own_threads}
    model = DDP(torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 256)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    while True:
        model(torch.randn(128, 256)).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()
"""


@pytest.mark.slow
def test_a_cpu_script_run_at_one_thread_a_rank_gets_its_share_of_the_cores_tried_unless_it_sets_its_own(tmp_path):
    """OMP_NUM_THREADS=1 in the environment, one rank: the script as written runs at 1 thread, as its own launch
    would, and the tune tries the rank's share of the cores in a launch of its own, where the probe sees it;
    a script that calls torch.set_num_threads(1) itself keeps its count and the try is not applied."""
    def tune(name, own_threads, *flags):
        (tmp_path / name).write_text(textwrap.dedent(DENSE).format(own_threads=own_threads))
        run_dir = str(tmp_path / name.replace(".py", ""))
        done = ddptop("tune", "--headless", "--no-plots", "--out", run_dir, "--world-sizes", "1", "--launches", "1",
                      "--warmup", "2", "--iters", "10", "--telemetry-interval", "0", *flags, "--", name,
                      cwd=str(tmp_path), env={"OMP_NUM_THREADS": "1"})
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        with open(os.path.join(run_dir, "plan.json"), encoding="utf-8") as handle:
            plan = json.load(handle)
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
            summary = flat_shape(json.load(handle))
        return plan, summary

    plan, summary = tune("dense.py", "")
    if plan["cpu_cores"] < 2:
        pytest.skip("one usable core: a rank's share is the 1 thread it ran")
    share = plan["cpu_cores"]
    assert plan["threads_from"] == "OMP_NUM_THREADS=1 in the environment"
    assert f"threads_{share}" in plan["tries_why"] and "left cores idle" in plan["tries_why"][f"threads_{share}"]
    entries = {c["variant"]: c for c in summary["configs"]}
    assert entries["default"]["script"]["threads"] == 1 and entries[f"threads_{share}"]["script"]["threads"] == share
    (table,) = summary["tuning"]
    row = next(r for r in table["rows"] if r["variant"] == f"threads_{share}")
    assert row["speedup_ci"] is not None and row["paste"] == [
        f"the launch: OMP_NUM_THREADS={share} torchrun ... (or torch.set_num_threads({share}) at the script's start)"]
    _, summary = tune("own.py", "torch.set_num_threads(1)", "--variants", f"threads_{share}")
    (table,) = summary["tuning"]
    row = next(r for r in table["rows"] if r["variant"] == f"threads_{share}")
    assert row["verdict"] == f"{tuning.NOT_APPLIED_THREADS} (torch.set_num_threads(1))" and row["speedup"] is None


@pytest.mark.slow
def test_a_script_that_fails_as_written_fails_the_tune_before_any_try(tmp_path):
    (tmp_path / "broken.py").write_text("raise SystemExit('no data at /datasets/imagenet')\n")
    run_dir = str(tmp_path / "tune")
    done = ddptop("tune", "--headless", "--no-plots", "--out", run_dir, "--telemetry-interval", "0", "--",
                  "broken.py", cwd=str(tmp_path), env={"OMP_NUM_THREADS": "1"})
    assert done.returncode not in (0, 130), done.stdout[-2000:]
    assert "no data at /datasets/imagenet" in done.stdout + done.stderr
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    assert [c["variant"] for c in summary["configs"]] == ["default"]  # no try ran
    assert summary["configs"][0]["status"] == "failed"
    assert len(os.listdir(os.path.join(run_dir, "launches"))) == 1
    with open(os.path.join(run_dir, "plan.json"), encoding="utf-8") as handle:
        assert "the script as written did not run well" in json.load(handle)["not_tried"]["every try"]


def test_a_configuration_ended_before_its_last_planned_launch_keeps_what_its_launch_measured(tmp_path):
    """A script's tune that calls for no try ends the script as written after the first of its planned launches
    (a sweep stopped between launches too): its summary keeps what that launch's ranks said at their round's end
    (the probe's record of the script, memory, steps), not only what a last round would have said."""
    from ddptop.report import build
    from ddptop.run.session import Session
    from tests.test_live_marks import ITERS, WARMUP, ScriptRun

    run = ScriptRun(tmp_path, launches=2)
    seen = {"process_group": False, "threads": 2, "wrappers": [], "collectives": 0, "optimizer_steps": 25}
    try:
        run.start(1, 1)
        run.steps(1, "warmup", WARMUP, 0.2, 5)
        run.steps(1, "measure", ITERS, 1.0, 10)
        for writer in run.writers[1]:
            writer.emit("config_end", config_id=run.config(1), status="ok", iters=ITERS, warmup_iters=WARMUP,
                        measure_s=5.0, ended_by="ddptop", round=0, last=False, rounds=2, max_rss_bytes=123 << 20,
                        script=seen, t=run.at(10.05))
            writer.flush()
        run.session.mark(what="launch_end", launch=run.name(1), exit_code=0, status="ok")
        run.session.mark(what="config", config_id=run.config(1), status="ok",
                         reason="no try: nothing the first run measured calls for a try")
        (entry,) = build.build_summary(Session.load(run.run_dir)).to_json()["configs"]
    finally:
        run.close()
    assert entry["status"] == "ok" and entry["measured_iters"] == ITERS and entry["max_rss_bytes"] == 123 << 20
    assert entry["script"]["threads"] == 2 and entry["script"]["optimizer_steps"] == 25
