"""``ddptop tune -- train.py``: tries of DDP's keyword arguments set by the probe on the script's own DDP call
(its file untouched), each in launches of its own interleaved with the script as written, ranked by the
interval of its ratio as the kernels' variants are; a try the script or torch refuses is not applicable.

Quick: the plan (the tries, one configuration a launch, interleaved; what is refused beside a script). The
probe's part (the keywords set on the call, the script's own recorded): tests/test_script_sync_probe.py. Slow:
one real tune of a script whose graph changes from step to step, where static_graph is refused.
"""

from __future__ import annotations

import json
import os
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


def test_a_script_s_tune_tries_ddp_s_keywords_each_in_launches_of_its_own_interleaved(in_script_folder):
    plan = build_plan(PlanOptions(script=["train.py"], tune=True, launches=2), CPU, cpu_count=2)
    assert plan.world_sizes == (2,) and plan.variants == (variants.DEFAULT, *variants.SCRIPT_TUNE)
    launches = plan.launches()
    assert all(len(launch.configs) == 1 for launch in launches)  # a script runs once in a launch
    order = [launch.configs[0].variant for launch in launches]
    assert order == [*plan.variants, *reversed(plan.variants)]  # each early once and late once
    assert {c.config_id for c in plan.configs()} == {"script:train.py/n2/gloo", *(
        f"script:train.py/n2/gloo/{name}" for name in variants.SCRIPT_TUNE)}
    assert variants.script_ddp_arguments("bucket_cap_mb_10") == {"bucket_cap_mb": 10}
    assert variants.script_ddp_arguments("static_graph") == {"static_graph": True}
    assert variants.script_ddp_arguments(variants.DEFAULT) == {}


def test_a_try_the_probe_cannot_set_on_a_script_s_ddp_call_and_kernel_flags_are_refused(in_script_folder):
    with pytest.raises(PlanError, match="--variants fp16_compress_hook: not tried on a script.*it can: bucket_cap_mb_10"):
        build_plan(PlanOptions(script=["train.py"], tune=True, variants=["fp16_compress_hook"]), CPU, cpu_count=2)
    with pytest.raises(PlanError, match="--batch-sizes.*describe.*ddptop's own kernels"):
        build_plan(PlanOptions(script=["train.py"], tune=True, batch_sizes=[8]), CPU, cpu_count=2)
    with pytest.raises(PlanError, match="--variants.*describe"):  # a run of the script takes no variants
        build_plan(PlanOptions(script=["train.py"], variants=["static_graph"]), CPU, cpu_count=2)


def test_the_repeats_and_the_combination_of_a_script_s_tune_run_one_configuration_a_launch(in_script_folder):
    """A repeat of a disturbed launch and the faster tries set together run in launches of their own too: the
    script probe takes one configuration a launch."""
    from ddptop.run import sweep

    plan = build_plan(PlanOptions(script=["train.py"], tune=True, launches=2), CPU, cpu_count=2)
    disturbed = {c.config_id: (True, True) for c in plan.configs()}  # every one quiet once and disturbed once
    repeats = sweep.repeat_launches(plan, disturbed)
    assert len(repeats) == len(plan.configs()) and all(len(launch.configs) == 1 for launch in repeats)
    kernels = build_plan(PlanOptions(tune=True, variants=["static_graph"]), CPU, cpu_count=2)
    (shared,) = sweep.repeat_launches(kernels, {c.config_id: (True, True) for c in kernels.configs()})
    assert len(shared.configs) == 2  # a kernel's launch runs its configurations one after the other


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
