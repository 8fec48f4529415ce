"""The probe's record of how a user's script synchronises its gradients (``bench_kernels.probe_sync``): every
model wrapped for data parallelism (DistributedDataParallel, FullyShardedDataParallel and fully_shard,
ZeroRedundancyOptimizer) with where it was made and its arguments, each measured step's micro-batches and
synchronisations, DDP's own timers, the script's own collectives; each hook failing open.

Quick: the probe installed in this process around DDP on a gloo group of one rank. Slow: a real `ddptop run --
script.py` whose probe hook is made to raise while the script trains (the script itself replaces it).
"""

from __future__ import annotations

import json
import os
import textwrap

import pytest

from bench_kernels import probe_sync
from ddptop.analysis import script_sync as sync_analysis
from tests.conftest import ddptop, processes_mentioning


class Probed:
    """The probe installed in this process, as the rank installs it."""

    def __init__(self, tmp_path, torch, **changes):
        from bench_kernels.script_probe import ScriptProbe
        from ddptop.protocol import wire
        from tests.test_script_probe import script_config

        self.writer = wire.EventWriter(str(tmp_path / "rank-0.jsonl"), 0, flush_interval=0.0)
        self.probe = ScriptProbe(torch, self.writer, script_config(**{"warmup": 2, "iters": 5, **changes}),
                                 world_size=1)

    def run(self, loop):
        from bench_kernels.script_probe import ProbeStop

        self.probe.install()
        try:
            loop()
        except ProbeStop:
            pass
        finally:
            self.probe.uninstall()
        self.probe.finish()
        end = self.probe.config_end("ddptop")
        self.writer.close()
        return end


def _accumulating(torch, no_sync: bool, micro_batches: int = 4):
    import contextlib

    from torch.nn.parallel import DistributedDataParallel as DDPClass

    def loop():
        model = DDPClass(torch.nn.Linear(8, 2), bucket_cap_mb=1, gradient_as_bucket_view=True)  # the site
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(100):
            for micro in range(micro_batches):
                with model.no_sync() if no_sync and micro < micro_batches - 1 else contextlib.nullcontext():
                    model(torch.randn(4, 8)).sum().backward()
            with torch.no_grad():
                model(torch.randn(2, 8))  # an evaluation: no micro-batch
            optimizer.step()
            optimizer.zero_grad()

    return loop


def test_the_probe_counts_micro_batches_and_syncs_and_records_where_and_how_ddp_was_made(tmp_path, one_rank_group):
    torch = one_rank_group
    from torch.nn.parallel import DistributedDataParallel as DDPClass

    init, forward = DDPClass.__init__, DDPClass.forward
    end = Probed(tmp_path, torch).run(_accumulating(torch, no_sync=False))
    (wrapper,) = end["script"]["wrappers"]
    line = next(i for i, text in enumerate(open(__file__, encoding="utf-8"), 1) if "# the site" in text)
    assert wrapper["site"] == f"{os.path.relpath(__file__)}:{line}" and wrapper["via"] is None
    assert wrapper["args"] == {"bucket_cap_mb": "1", "gradient_as_bucket_view": "True"}
    assert wrapper["sync_steps"] == [[4, 4, 5]] and wrapper["comm_hook"] is None
    assert wrapper["ddp_logging"]["iterations"] == 20 and wrapper["ddp_logging"]["backward_comm_s"] > 0
    assert end["script"]["collectives"] == 0 and end["note"] is None
    assert (DDPClass.__init__, DDPClass.forward) == (init, forward)  # uninstalled
    quiet = Probed(tmp_path, torch).run(_accumulating(torch, no_sync=True))
    (wrapper,) = quiet["script"]["wrappers"]
    assert wrapper["sync_steps"] == [[4, 1, 5]] and wrapper["ddp_logging"]["iterations"] == 5


def test_a_model_a_framework_wraps_is_placed_at_the_user_s_line_through_the_library_s(tmp_path, one_rank_group,
                                                                                     monkeypatch):
    """The Trainer's accelerate or Lightning makes the DDP model: the user's own line that led there is the
    site, the library's line the ``via`` (an installed package, here one in a site-packages folder of its own)."""
    import importlib
    import sys

    torch = one_rank_group
    library = tmp_path / "site-packages"
    (library / "trainerlib").mkdir(parents=True)
    (library / "trainerlib" / "__init__.py").write_text(textwrap.dedent("""
        import torch

        def fit(model, steps):
            model = torch.nn.parallel.DistributedDataParallel(model)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(steps):
                model(torch.randn(4, 8)).sum().backward()
                optimizer.step()
    """))
    monkeypatch.syspath_prepend(str(library))
    monkeypatch.setattr(probe_sync, "_LIBRARIES", (*probe_sync._LIBRARIES, str(library)))
    trainerlib = importlib.import_module("trainerlib")
    try:
        end = Probed(tmp_path, torch).run(lambda: trainerlib.fit(torch.nn.Linear(8, 2), 100))  # the user's line
    finally:
        sys.modules.pop("trainerlib", None)
    (wrapper,) = end["script"]["wrappers"]
    line = next(i for i, text in enumerate(open(__file__, encoding="utf-8"), 1) if "# the user's line" in text)
    assert (wrapper["site"], wrapper["via"]) == (f"{os.path.relpath(__file__)}:{line}", "trainerlib/__init__.py:5")
    shown = sync_analysis.seen_lines(end["script"])
    assert f"DistributedDataParallel at {os.path.relpath(__file__)}:{line} (through trainerlib/__init__.py:5)" in shown[0]


def test_a_probe_hook_that_raises_leaves_the_script_training_and_says_what_was_not_measured(
        tmp_path, one_rank_group, monkeypatch):
    from bench_kernels import probe_sync

    def broken(self, model):
        raise RuntimeError("injected")

    torch = one_rank_group
    monkeypatch.setattr(probe_sync.GradSync, "count_forward", broken)
    end = Probed(tmp_path, torch).run(_accumulating(torch, no_sync=False))
    assert end["iters"] == 5 and end["script"]["optimizer_steps"] == 7  # the script trained on to ddptop's stop
    assert "gradient synchronisations and micro-batches not counted from step 1 on: RuntimeError: injected" in end["note"]
    (wrapper,) = end["script"]["wrappers"]
    assert wrapper["sync_steps"] == []
    assert sync_analysis.synchronises(end["script"]) is None  # not counted: never taken for ranks that train alone


def test_a_ddp_model_the_probe_fails_to_record_is_said_and_never_read_as_no_model(tmp_path, one_rank_group,
                                                                                   monkeypatch):
    def broken(self, model, signature, args, kwargs):
        raise RuntimeError("injected")

    torch = one_rank_group
    monkeypatch.setattr(probe_sync.GradSync, "ddp_made", broken)
    end = Probed(tmp_path, torch).run(_accumulating(torch, no_sync=False))
    assert end["iters"] == 5 and end["script"]["wrappers"] == [] and end["script"]["wrappers_incomplete"] is True
    assert "a DistributedDataParallel model not recorded from step 1 on: RuntimeError: injected" in end["note"]
    assert sync_analysis.synchronises(end["script"]) is None


def test_the_script_s_own_collectives_are_counted_the_probe_s_are_not(tmp_path, one_rank_group):
    torch = one_rank_group
    import torch.distributed as dist

    def loop():
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(100):
            model(torch.ones(2, 4)).sum().backward()
            for p in model.parameters():
                dist.all_reduce(p.grad)  # gradients averaged by hand
            optimizer.step()
            optimizer.zero_grad()

    end = Probed(tmp_path, torch).run(loop)
    assert end["script"]["wrappers"] == [] and end["script"]["collectives"] == 2 * 5


MAX_BLOCKS = probe_sync.MAX_WRAPPERS + 2


def test_zero_and_fully_shard_are_recorded_where_made_and_their_modules_restored_after(tmp_path, one_rank_group):
    torch = one_rank_group

    def loop():
        from torch.distributed.fsdp import fully_shard
        from torch.distributed.optim import ZeroRedundancyOptimizer

        model = torch.nn.Linear(4, 2)
        optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, lr=0.1)
        blocks = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(MAX_BLOCKS)))
        for block in blocks:  # each block sharded by one line, then the whole: two records, not one a block
            fully_shard(block)
        fully_shard(blocks)
        for _ in range(100):
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()

    end = Probed(tmp_path, torch).run(loop)
    kinds = [w["kind"] for w in end["script"]["wrappers"]]
    assert kinds == [probe_sync.ZERO, probe_sync.FULLY_SHARD, probe_sync.FULLY_SHARD], kinds
    assert all(w["site"].startswith(f"{os.path.relpath(__file__)}:") for w in end["script"]["wrappers"])
    # more blocks than the probe keeps wrappers: one record of the loop's line, none missed
    assert [w.get("modules") for w in end["script"]["wrappers"]] == [None, MAX_BLOCKS, None]
    assert "wrappers_incomplete" not in end["script"]
    lines = sync_analysis.seen_lines(end["script"])
    assert lines[0].endswith("shards the optimizer's state; it synchronises no gradient itself"), lines
    assert f" on {MAX_BLOCKS} modules: ran no forward as the root in the measured steps" in lines[1], lines
    assert end["note"] is None and sync_analysis.synchronises(end["script"]) is True
    import torch.distributed.fsdp as fsdp
    from torch.distributed.optim import ZeroRedundancyOptimizer

    for restored in (fsdp.fully_shard, fsdp.FullyShardedDataParallel.__init__, ZeroRedundancyOptimizer.__init__):
        assert "bench_kernels" not in restored.__code__.co_filename


class CheckpointedBlocks:
    """Three blocks under activation checkpointing (each runs its forward again in the backward) and a head."""

    def __new__(cls, torch):
        from torch.utils.checkpoint import checkpoint

        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.blocks = torch.nn.ModuleList(torch.nn.Linear(8, 8) for _ in range(3))
                self.head = torch.nn.Linear(8, 2)

            def forward(self, x):
                for block in self.blocks:
                    x = checkpoint(block, x, use_reentrant=False)
                return self.head(x)

        return Net()


def _sharded(torch, kind: str, quiet: bool, micro_batches: int = 3, never: bool = False):
    """A loop that shards CheckpointedBlocks with FSDP (auto-wrapping each Linear) or fully_shard (each block,
    then the whole), runs ``micro_batches`` a step, synchronising on the last alone where ``quiet`` (on none
    where ``never``), and one forward without gradients (an evaluation) a step."""
    import contextlib

    def loop():
        from torch.distributed.fsdp import FullyShardedDataParallel, fully_shard
        from torch.distributed.fsdp.wrap import ModuleWrapPolicy

        net = CheckpointedBlocks(torch)
        if kind == sync_analysis.FSDP:
            model = FullyShardedDataParallel(net, device_id=torch.device("cpu"),  # the site
                                             auto_wrap_policy=ModuleWrapPolicy({torch.nn.Linear}))
        else:
            for block in net.blocks:
                fully_shard(block)
            model = fully_shard(net)  # the site
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(100):
            for micro in range(micro_batches):
                last = micro == micro_batches - 1 and not never
                if kind == sync_analysis.FULLY_SHARD:
                    model.set_requires_gradient_sync(last or not quiet)
                with model.no_sync() if kind == sync_analysis.FSDP and quiet and not last else contextlib.nullcontext():
                    model(torch.randn(4, 8)).sum().backward()
            with torch.no_grad():
                model(torch.randn(2, 8))
            optimizer.step()
            optimizer.zero_grad()

    return loop


@pytest.mark.parametrize("kind", [sync_analysis.FSDP, sync_analysis.FULLY_SHARD])
@pytest.mark.parametrize("quiet", [False, True], ids=["every-micro-batch", "once-a-step"])
def test_fsdp_s_micro_batches_and_syncs_are_counted_on_its_root_alone(tmp_path, one_rank_group, kind, quiet):
    """Each measured step's micro-batches and synchronisations, counted on the root: not the inner instances or
    blocks that run inside it, not the blocks' forwards run again under activation checkpointing, not a
    forward without gradients; the fix for syncing on every micro-batch in the words of the kind."""
    torch = one_rank_group
    end = Probed(tmp_path, torch, warmup=2, iters=5).run(_sharded(torch, kind, quiet))
    assert end["note"] is None, end["note"]
    wrappers = end["script"]["wrappers"]
    root = wrappers[-1]
    made = "FullyShardedDataParallel(net" if kind == sync_analysis.FSDP else "fully_shard(net)"
    line = next(i for i, text in enumerate(open(__file__, encoding="utf-8"), 1) if made in text and "# the site" in text)
    assert root["kind"] == kind and root["site"] == f"{os.path.relpath(__file__)}:{line}"
    assert root["sync_steps"] == [[3, 1 if quiet else 3, 5]], root
    if kind == sync_analysis.FSDP:  # the inner instances: one record of the line, the root among its modules
        assert len(wrappers) == 1 and root["modules"] == 5
    else:  # the blocks' line: one record, never the root
        assert len(wrappers) == 2 and wrappers[0]["modules"] == 3 and wrappers[0]["sync_steps"] == [[0, 0, 5]]
    entry = {"world_size": 2, "script": end["script"], "stats": {"sec_iter": {"p50": 0.1}}}
    sync = sync_analysis.grad_sync(entry, None)
    assert sync["kind"] == kind and sync["micro_batches"] == 3 and sync["synchronises"] is True
    said = sync_analysis.every_micro_batch_words(sync)
    if quiet:
        assert said is None
    else:
        fix = "set_requires_gradient_sync(False)" if kind == sync_analysis.FULLY_SHARD else "model.no_sync()"
        assert said.startswith(f"gradients synchronised on every micro-batch: 3 micro-batches a step") and fix in said
        assert f"({kind} made at {root['site']})" in said and "more memory" in said


def test_fsdp_whose_forwards_all_ran_without_synchronising_trains_alone(tmp_path, one_rank_group):
    """A fully_shard model whose every measured forward ran after set_requires_gradient_sync(False): no gradient
    reduced, said in the kind's words."""
    torch = one_rank_group
    end = Probed(tmp_path, torch).run(_sharded(torch, sync_analysis.FULLY_SHARD, quiet=True, never=True))
    seen = {**end["script"], "group_world_size": 2}
    assert sync_analysis.synchronises(seen) is False
    assert "its fully_shard model synchronised no gradient" in sync_analysis.alone_reason(seen)


def test_a_ddp_model_made_again_every_step_is_said_and_none_of_them_kept_alive(tmp_path, one_rank_group):
    torch = one_rank_group
    from torch.nn.parallel import DistributedDataParallel as DDPClass

    def loop():
        net = torch.nn.Linear(4, 2)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
        for _ in range(100):
            model = DDPClass(net)
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()
            del model

    run = Probed(tmp_path, torch, warmup=2, iters=10)
    end = run.run(loop)
    wrappers = end["script"]["wrappers"]
    assert len(wrappers) == 8 and end["script"]["wrappers_incomplete"] is True
    assert [w["rewrapped"] for w in wrappers] == [False] + [True] * 7
    assert run.probe.sync.by_id == {} and all(w.view is None for w in run.probe.sync.wrappers)
    lines = sync_analysis.seen_lines(end["script"])
    assert "wrapping a model another wrapper already holds" in lines[1] and "may have missed models wrapped" in lines[-1]


# -- real launches --------------------------------------------------------------------------------------------------

SHORT = ("--launches", "1", "--iters", "10", "--warmup", "2", "--telemetry-interval", "0")

# alone: a process group, no DDP; ddp / nosync: DDP, --accumulate micro-batches a step, the first ones inside
# no_sync() for nosync; shard: fully_shard, each micro-batch reducing; serial1: no process group at WORLD_SIZE 1;
# broken: a probe hook made to raise
SYNC_SCRIPT = """
    import contextlib
    import os
    import sys

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    mode, accumulate = sys.argv[1], int(sys.argv[2])
    if mode != "serial1" or os.environ["WORLD_SIZE"] != "1":
        dist.init_process_group("gloo")
    if mode == "broken":
        import bench_kernels.probe_sync as probe_sync

        def broken(self, model):
            raise RuntimeError("injected")

        probe_sync.GradSync.count_forward = broken
    net = torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10))
    wrap = mode != "alone" and dist.is_initialized()
    if mode == "shard":
        from torch.distributed.fsdp import fully_shard

        model = fully_shard(net)
    else:
        model = DDP(net, bucket_cap_mb=1) if wrap else net
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(100000):
        for micro in range(accumulate):
            quiet = mode == "nosync" and micro < accumulate - 1
            with model.no_sync() if quiet else contextlib.nullcontext():
                model(torch.randn(16, 64)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
"""


def run_script(tmp_path, name, sizes, mode, accumulate=1):
    """A real headless run of SYNC_SCRIPT at ``sizes``: each world size's summary entry, the report, and the
    line that makes its model (path:line)."""
    script = tmp_path / "sync_train.py"
    script.write_text(textwrap.dedent(SYNC_SCRIPT))
    run_dir = str(tmp_path / name)
    done = ddptop("run", "--headless", "--no-plots", "--out", run_dir, "--world-sizes", sizes, *SHORT, "--",
                  str(script), mode, str(accumulate), env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert processes_mentioning(run_dir) == []
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    made = "model = fully_shard(net)" if mode == "shard" else "model = DDP(net, bucket_cap_mb=1) if wrap else net"
    site = f"{script}:{next(i for i, line in enumerate(SYNC_SCRIPT.splitlines(), 1) if line.strip() == made)}"
    return {c["world_size"]: c for c in summary["configs"]}, ddptop("report", run_dir).stdout, site


@pytest.mark.slow
def test_a_probe_hook_that_raises_in_a_real_launch_leaves_the_script_training(tmp_path):
    configs, report, _ = run_script(tmp_path, "broken", "2", "broken")
    entry = configs[2]
    assert entry["status"] == "ok" and entry["ended_by"] == "ddptop" and entry["stats"]["n"] == 20
    assert any("gradient synchronisations and micro-batches not counted from step 1 on: RuntimeError: injected" in note
               for note in entry["probe_notes"]), entry["probe_notes"]


def test_a_tune_s_try_sets_its_keywords_on_the_script_s_own_ddp_call_and_records_the_script_s(tmp_path,
                                                                                              one_rank_group):
    """``ddptop tune -- train.py``: the probe gives the script's DDP call the try's keywords (its file untouched):
    the model is made with the try's bucket size, and what the report says the script wrote stays the script's."""
    torch = one_rank_group
    made = []

    def loop():
        from torch.nn.parallel import DistributedDataParallel as DDPClass

        model = DDPClass(torch.nn.Linear(8, 2), None, bucket_cap_mb=25)  # device_ids by position
        made.append(model.bucket_bytes_cap)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(100):
            model(torch.randn(4, 8)).sum().backward()
            optimizer.step()
            optimizer.zero_grad()

    end = Probed(tmp_path, torch, variant="bucket_cap_mb_10").run(loop)
    assert made == [10 * 1024 * 1024], made
    (wrapper,) = end["script"]["wrappers"]
    assert wrapper["args"] == {"bucket_cap_mb": "25"} and end["note"] is None
    assert end["script"]["tried_on"] == 1  # the DDP calls the try was set on
    as_written = []
    (tmp_path / "default").mkdir()
    Probed(tmp_path / "default", torch).run(lambda: as_written.append(
        torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 2), bucket_cap_mb=25).bucket_bytes_cap))
    assert as_written == [25 * 1024 * 1024]


def test_a_try_this_torch_s_ddp_does_not_take_fails_the_call_as_ddp_would_and_one_without_ddp_is_not_applied(
        tmp_path, one_rank_group):
    from bench_kernels.probe_sync import GradSync

    torch = one_rank_group
    notes: list[str] = []
    sync = GradSync(torch, notes, lambda: 0, {"no_such_keyword": True})
    sync.install()
    try:
        with pytest.raises(TypeError, match="unexpected keyword argument 'no_such_keyword'"):
            torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(2, 2))
    finally:
        sync.uninstall()
    assert sync.seen()["tried_on"] == 0 and notes == []

    def without_ddp():  # a script that makes no DDP model: the try is set on nothing
        model = torch.nn.Linear(4, 2)
        for _ in range(100):
            model(torch.ones(2, 4)).sum().backward()

    (tmp_path / "none").mkdir()
    end = Probed(tmp_path / "none", torch, variant="static_graph").run(without_ddp)
    assert end["script"]["tried_on"] == 0


def test_several_fsdp_roots_made_by_one_line_are_counted_apart_not_added(tmp_path, one_rank_group):
    """A generator and a discriminator sharded by one line (a loop, a helper): one micro-batch each a step is
    one micro-batch a step, not two that each synchronise."""
    torch = one_rank_group

    def loop():
        from torch.distributed.fsdp import fully_shard

        models = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 2)]
        for model in models:
            fully_shard(model)  # the site: two roots
        optimizer = torch.optim.SGD([p for m in models for p in m.parameters()], lr=0.1)
        for _ in range(100):
            made = models[0](torch.ones(2, 4))  # each model's forward once a step, each its own backward
            models[1](made.detach()).sum().backward()
            made.sum().backward()
            optimizer.step()
            optimizer.zero_grad()

    end = Probed(tmp_path, torch, warmup=2, iters=5).run(loop)
    (wrapper,) = end["script"]["wrappers"]
    assert wrapper["modules"] == 2 and wrapper["sync_steps"] == [[1, 1, 5]], wrapper


def test_a_group_made_without_a_backend_is_said_by_the_backend_of_the_device_it_trains_on():
    """``init_process_group()`` with no backend (accelerate's way) says "undefined" and maps each device to torch's
    default: the probe names the one of the script's device, gloo on the CPU."""
    pytest.importorskip("torch")
    import torch.distributed as dist

    from bench_kernels.script_probe import _group_backend

    dist.init_process_group(store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert dist.get_backend() == "undefined"  # what torch says of such a group
        assert _group_backend(dist, on_cuda=False) == "gloo"
    finally:
        dist.destroy_process_group()
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        assert _group_backend(dist, on_cuda=False) == "gloo"
    finally:
        dist.destroy_process_group()
