"""What ``ddptop tune -- train.py`` tries on a script and how: the tries chosen from the script's first run
(``analysis.script_tries``), their names (``protocol.variants``), the probe setting them on the script's own
training loader and over its micro-batches (``bench_kernels.script_loaders``, ``script_sync``), and the change
written against the script's source (``analysis.script_patch``: a patch that ``patch -p1`` applies, or the
flag to give).

Quick: the choice from recorded facts, the patch on real files, and the probe installed in this process around
a real DataLoader and DDP on a gloo group of one rank. The real tunes are in tests/test_script_tune.py.
"""

from __future__ import annotations

import ast
import subprocess

import pytest

from ddptop.analysis import script_patch, script_tries
from ddptop.protocol import variants
from tests.test_script_sync_probe import Probed, _accumulating


def _facts(**changes):
    values = dict(world_size=2, device="cpu", cores_per_rank=4, step_s=0.1, data_wait_share=0.5, seen={},
                  threads_per_rank=4)
    values.update(changes)
    return script_tries.Facts(**values)


def _loader(at="train.py:40", workers=0, batches=100, **settings):
    return {"at": at, "num_workers": workers, "pin_memory": False, "persistent_workers": False,
            "prefetch_factor": None if workers == 0 else 2, "made": 1, "first": 0, "batches": batches, **settings}


def _ddp(args=None, sync_steps=((1, 1, 20),), comm_ms=None, overlap_ms=0.0, static=None):
    found = {"kind": "DistributedDataParallel", "site": "train.py:50", "via": None, "args": args or {},
             "sync_steps": [list(s) for s in sync_steps]}
    if comm_ms is not None:
        found["ddp_logging"] = {"backward_comm_s": comm_ms / 1e3, "backward_compute_comm_overlap_s": overlap_ms / 1e3}
    if static is not None:
        found["can_set_static_graph"] = static
    return found


def test_the_names_of_a_script_s_tries_parse_and_set_their_calls():
    workers = variants.variant("num_workers_4")
    assert workers.loader_kwargs == {"num_workers": 4, "persistent_workers": True} and variants.is_script_only(workers)
    assert variants.variant("no_sync_3").no_sync_every == 3
    assert variants.variant("find_unused_parameters_false").ddp_kwargs == {"find_unused_parameters": False}
    for unknown in ("num_workers_0", "no_sync_1", "prefetch_factor_x", "num_workers_"):
        with pytest.raises(ValueError, match="a script's also: .*num_workers_K"):
            variants.variant(unknown)
    # one value of a keyword in a combination: the first (the faster) of two tries that set it
    assert variants.combinable(["num_workers_4", "num_workers_2", "persistent_workers", "no_sync_4",
                                "gradient_as_bucket_view"]) == ["num_workers_4", "no_sync_4", "gradient_as_bucket_view"]
    both = variants.variant("num_workers_2+static_graph")
    assert variants.script_change_lines(both, "train.py:50", "train.py:40") == [
        "train.py:50: DistributedDataParallel(..., static_graph=True)",
        "train.py:40: DataLoader(..., num_workers=2, persistent_workers=True)"]
    assert variants.script_change_lines(variants.variant("no_sync_4"), "train.py:50") == [
        "train.py:50: run the forward and backward of the first 3 of every 4 micro-batches inside "
        "`with model.no_sync():` (the last one synchronises)"]
    assert "num_workers_4" not in variants.DEFAULT_TUNE  # never a kernel's variant


def test_an_input_bound_step_gets_the_training_loader_s_settings_up_to_the_cores_a_rank_has():
    choice = script_tries.choose(_facts(seen={"loaders": [_loader()]}))
    assert list(choice.tries) == ["num_workers_2", "num_workers_4"] and choice.loader_site == "train.py:40"
    assert "waited for their batches 50% of their time" in choice.tries["num_workers_2"]
    assert choice.not_tried["pin_memory"] == "pinned memory speeds copies to a GPU only"
    # a loader with workers: keep them, prefetch more; on a GPU, pin its batches
    gpu = script_tries.choose(_facts(device="cuda", seen={"loaders": [_loader(workers=2)]}))
    assert set(gpu.tries) == {"num_workers_4", "persistent_workers", "prefetch_factor_4", "pin_memory"}
    full = script_tries.choose(_facts(cores_per_rank=2, seen={"loaders": [_loader(workers=2, persistent_workers=True,
                                                                                  prefetch_factor=4)]}))
    assert not [t for t in full.tries if variants.variant(t).loader_kwargs]
    assert full.not_tried["num_workers"] == "the loader has 2 workers already, each rank 2 cores"


def test_a_step_that_does_not_wait_for_data_gets_no_loader_try_and_is_told_why():
    choice = script_tries.choose(_facts(data_wait_share=0.03, seen={"loaders": [_loader()]}))
    assert not choice.tries.keys() & {"num_workers_2", "num_workers_4"}
    assert "3% of their time, under 10%" in choice.not_tried[script_tries.LOADER]
    none = script_tries.choose(_facts(seen={"loaders": []}))
    assert none.not_tried[script_tries.LOADER].startswith("no DataLoader made the steps' batches")
    assert none.loader_site == ""


def test_the_training_loader_is_the_one_the_steps_drew_from_named_by_its_place_where_another_shares_its_line():
    train = _loader(batches=300)
    evaluation = _loader(batches=20, first=1, num_workers=0, prefetch_factor=None, pin_memory=True)
    found = script_tries.training_loader({"loaders": [evaluation, train]})
    assert found is not None and found[0] is train
    assert found[1] == "train.py:40#num_workers=0,pin_memory=False,persistent_workers=False"
    assert script_tries.training_loader({"loaders": [train]})[1] == "train.py:40"  # alone at its line: every one made there
    assert script_tries.training_loader({"loaders": [_loader(batches=0)]}) is None


def test_ddp_s_settings_are_tried_where_its_exposed_communication_is_a_share_of_the_step():
    ddp = _ddp(args={"find_unused_parameters": "True", "bucket_cap_mb": "100"}, sync_steps=[(4, 4, 20)], comm_ms=20)
    choice = script_tries.choose(_facts(data_wait_share=0.0, seen={"wrappers": [ddp]}))
    # syncs on all 4 micro-batches: no_sync; the script's own True: off; bucket sizes other than its own
    assert set(choice.tries) == {"find_unused_parameters_false", "no_sync_4", "bucket_cap_mb_10",
                                 "gradient_as_bucket_view", "static_graph"}
    assert "exposed communication was 20% of the step" in choice.tries["bucket_cap_mb_10"]
    quiet = script_tries.choose(_facts(data_wait_share=0.0, seen={"wrappers": [_ddp(comm_ms=2, overlap_ms=1.5)]}))
    assert not quiet.tries and "0% of the step (its timers), under 5%" in quiet.not_tried[script_tries.DDP_SETTINGS]
    dynamic = script_tries.choose(_facts(data_wait_share=0.0, seen={"wrappers": [_ddp(comm_ms=30, static=False)]}))
    assert "static_graph" not in dynamic.tries and "cannot be static" in dynamic.not_tried["static_graph"]
    assert "no_sync" not in dynamic.not_tried  # one micro-batch a step: nothing to say
    once = script_tries.choose(_facts(data_wait_share=0.0, seen={"wrappers": [_ddp(sync_steps=[(4, 1, 20)])]}))
    assert once.not_tried[script_tries.NO_SYNC] == "the script synchronises 1 time over 4 micro-batches already"
    alone = script_tries.choose(_facts(world_size=1, data_wait_share=0.0, seen={"wrappers": [_ddp(comm_ms=30)]}))
    assert alone.not_tried[script_tries.DDP_SETTINGS] == "one rank has no gradients to exchange"


def test_a_script_without_ddp_gets_no_ddp_try_and_named_tries_are_tried_as_named():
    fsdp = {"kind": "fully_shard", "site": "train.py:9", "args": {}, "sync_steps": [[4, 4, 10]]}
    choice = script_tries.choose(_facts(data_wait_share=0.0, seen={"wrappers": [fsdp]}))
    assert not choice.tries and "no DistributedDataParallel model (it made fully_shard)" in choice.not_tried[
        script_tries.DDP_SETTINGS]
    asked = script_tries.choose(_facts(data_wait_share=0.0, seen={"loaders": [_loader()]}), ["static_graph",
                                                                                             "num_workers_1"])
    assert asked.tries == {"static_graph": "asked for (--variants)", "num_workers_1": "asked for (--variants)"}
    assert asked.loader_site == "train.py:40"  # found for the loader's try, though its wait did not call for one


SCRIPT = '''\
import argparse

from torch.utils.data import DataLoader

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
parser.add_argument("-p", "--pin", dest="pinned", action="store_true")
args = parser.parse_args()
extra = {}
loader = DataLoader(range(8), batch_size=2,
                    num_workers=args.workers, pin_memory=args.pinned,
                    prefetch_factor=None)
evaluation = DataLoader(range(8), **extra)
bare = DataLoader()
'''


def test_a_literal_or_missing_keyword_is_patched_and_one_from_a_flag_says_the_flag(tmp_path):
    folder = tmp_path / "job"
    folder.mkdir()
    (folder / "train.py").write_text(SCRIPT)
    change = script_patch.script_change(str(tmp_path), [
        ("job/train.py:10#0", {"num_workers": 4, "pin_memory": True, "prefetch_factor": 4, "persistent_workers": True},
         script_patch.LOADER_NAMES),
        ("job/train.py:13", {"persistent_workers": True}, script_patch.LOADER_NAMES),
        ("job/train.py:14", {"num_workers": 2}, ())])
    assert change is not None and change.folder == str(folder)
    assert change.lines == ["num_workers=args.workers (line 11): pass --workers 4",
                            "pin_memory=args.pinned (line 11): pass --pin",
                            "persistent_workers=True: the call passes **kwargs, which may hold persistent_workers; "
                            "set it there"]
    applied = tmp_path / "applied"
    applied.mkdir()
    (applied / "train.py").write_text(SCRIPT)
    done = subprocess.run(["patch", "-p1"], input=change.patch, text=True, capture_output=True, cwd=applied)
    assert done.returncode == 0, done.stdout + done.stderr
    patched = (applied / "train.py").read_text()
    ast.parse(patched)
    assert "prefetch_factor=4, persistent_workers=True)" in patched and "DataLoader(num_workers=2)" in patched
    assert "num_workers=args.workers" in patched  # the flag's expression stays: its value is given on the command line
    assert (folder / "train.py").read_text() == SCRIPT  # the script itself untouched
    assert script_patch.script_change(str(tmp_path), [("job/missing.py:3", {"num_workers": 1}, ())]) is None
    assert script_patch.script_change(str(tmp_path), [("job/train.py:2", {"num_workers": 1}, ())]) is None  # no call


def test_the_loader_s_try_is_set_on_the_training_loader_alone_and_its_batches_counted(tmp_path, one_rank_group):
    torch = one_rank_group
    from torch.utils.data import DataLoader

    made = {}

    def loader(name, **settings):  # one helper line makes the training and the evaluation loader
        made[name] = DataLoader(list(range(64)), batch_size=4, **settings)
        return made[name]

    def loop():
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        train, evaluation = loader("train"), loader("eval", pin_memory=True)  # settings of its own
        for _ in range(50):
            for batch in train:
                model(batch.float().unsqueeze(1)).sum().backward()
                optimizer.step()
            for _ in evaluation:
                pass

    import inspect

    line = inspect.getsourcelines(loader)[1] + 1
    site = f"{__file__.rsplit('/', 1)[-1]}:{line}"
    seen = Probed(tmp_path, torch).run(loop)["script"]
    record = next(r for r in seen["loaders"] if r["batches"] > 0 and r["first"] == 0)
    assert record["at"].endswith(site) and record["num_workers"] == 0 and record["made"] == 1
    target = script_tries.training_loader(seen)[1]  # two loaders made at that line: named by its settings too
    assert target == f"{record['at']}#num_workers=0,pin_memory=False,persistent_workers=False"
    (tmp_path / "try").mkdir()
    end = Probed(tmp_path / "try", torch, variant="prefetch_factor_3", loader_site=target).run(
        lambda: None)
    assert end["script"]["loader_tried_on"] == 0  # no loader made: not applied
    (tmp_path / "refused").mkdir()
    with pytest.raises(ValueError, match="prefetch_factor"):  # refused as the script's own call would be
        Probed(tmp_path / "refused", torch, variant="prefetch_factor_3", loader_site=target).run(loop)
    (tmp_path / "applied").mkdir()
    end = Probed(tmp_path / "applied", torch, variant="num_workers_1", loader_site=target).run(loop)
    assert made["train"].num_workers == 1 and made["train"].persistent_workers
    assert made["eval"].num_workers == 0  # the other loader of that line keeps the script's settings
    assert end["script"]["loader_tried_on"] == 1


def test_the_no_sync_try_synchronises_once_over_the_step_s_micro_batches(tmp_path, one_rank_group):
    torch = one_rank_group
    end = Probed(tmp_path, torch, variant="no_sync_4").run(_accumulating(torch, no_sync=False))
    (wrapper,) = end["script"]["wrappers"]
    assert wrapper["sync_steps"] == [[4, 1, 5]] and end["script"]["tried_on"] == 1
    (tmp_path / "written").mkdir()
    written = Probed(tmp_path / "written", torch).run(_accumulating(torch, no_sync=False))
    assert written["script"]["wrappers"][0]["sync_steps"] == [[4, 4, 5]]
    assert "tried_on" not in written["script"]


TRAINER_SCRIPT = '''\
import argparse

from transformers import Trainer, TrainingArguments

parser = argparse.ArgumentParser()
parser.add_argument("--workers", type=int, default=0)
a = parser.parse_args()
args = TrainingArguments(output_dir="out", per_device_train_batch_size=8,
                         dataloader_num_workers=a.workers)
Trainer(model=None, args=args).train()
'''


def test_a_try_of_the_calls_the_hugging_face_trainer_makes_is_a_setting_of_the_script_s_training_arguments(tmp_path):
    script = tmp_path / "lm.py"
    script.write_text(TRAINER_SCRIPT)
    lines, change = script_patch.trainer_change(str(tmp_path), str(script), {
        "num_workers": 2, "persistent_workers": True, "gradient_as_bucket_view": True})
    assert lines == ["lm.py:8: TrainingArguments(..., dataloader_num_workers=2, dataloader_persistent_workers=True)",
                     "  gradient_as_bucket_view: not a TrainingArguments setting"]
    assert change is not None and change.lines == ["dataloader_num_workers=a.workers (line 9): pass --workers 2"]
    applied = tmp_path / "applied"
    applied.mkdir()
    (applied / "lm.py").write_text(TRAINER_SCRIPT)
    done = subprocess.run(["patch", "-p1"], input=change.patch, text=True, capture_output=True, cwd=applied)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "dataloader_num_workers=a.workers, dataloader_persistent_workers=True)" in (applied / "lm.py").read_text()
    assert script_patch.made_by_trainer("accelerate/data_loader.py:441")
    assert not script_patch.made_by_trainer("train.py:40")
    # the row of a tune of such a script: the library's line, then the script's TrainingArguments
    from ddptop.analysis import tuning

    entry = {"config_id": "script:lm.py/n2/gloo/num_workers_2", "model": "script:lm.py", "mode": "ddp",
             "batch_size": 0, "world_size": 2, "backend": "gloo", "variant": "num_workers_2", "status": "ok",
             "loader_site": "accelerate/data_loader.py:441", "script": {"wrappers": [], "loader_tried_on": 2}}
    row = tuning._row(entry, None, script_dir=str(tmp_path), script_file=str(script))
    assert row["paste"][:2] == ["accelerate/data_loader.py:441: DataLoader(..., num_workers=2, persistent_workers=True)",
                                "lm.py:8: TrainingArguments(..., dataloader_num_workers=2, "
                                "dataloader_persistent_workers=True)"]
    assert row["patch"] and row["patch_folder"] == str(tmp_path)


def test_a_try_that_failed_before_drawing_a_batch_stays_in_its_script_s_table():
    """A script's batch is what it drew: a try that failed at its first step drew none, and is still a row of the
    one table of that script's tries (not a table of its own, nor left out)."""
    from ddptop.analysis import tuning

    def entry(variant, status, batch):
        return {"config_id": f"script:t.py/n2/gloo/{variant}", "model": "script:t.py", "mode": "ddp",
                "batch_size": batch, "world_size": 2, "backend": "gloo", "variant": variant, "status": status,
                "stats": {"sec_iter": {"p50": 0.01}} if status == "ok" else None, "script": {"wrappers": []}}

    entries = [{**entry("default", "ok", 16), "config_id": "script:t.py/n2/gloo"}, entry("bucket_cap_mb_10", "ok", 16),
               entry("static_graph", "failed", 0)]
    (table,) = tuning.tuning_tables(entries, {}, {})
    assert [r["variant"] for r in table["rows"]][0] == "default"
    assert {r["variant"] for r in table["rows"]} == {"default", "bucket_cap_mb_10", "static_graph"}


def test_a_training_loader_a_library_made_again_from_the_script_s_own_is_changed_at_the_script_s_line(tmp_path):
    """Lightning makes the training loader again from the one train_dataloader() returns (its own wrapper of
    DataLoader.__init__ on the way), and accelerate's prepare() wraps the script's: the try is set where the
    library makes it, the change is the script's own call."""
    (tmp_path / "fit.py").write_text("from torch.utils.data import DataLoader\n"
                                     "loader = DataLoader(range(8), num_workers=0)\n"
                                     "evaluation = DataLoader(range(8), pin_memory=True)\n"
                                     "trainer.fit(model)\n")
    made_again = _loader(at="lightning/fabric/utilities/data.py:257", batches=300, first=1, library=True,
                         **{"from": "fit.py:4"})
    own = _loader(at="lightning/fabric/utilities/data.py:325", batches=0, library=True, **{"from": "fit.py:2"})
    evaluation = _loader(at="lightning/fabric/utilities/data.py:325", batches=0, first=1, library=True,
                         pin_memory=True, **{"from": "fit.py:3"})
    seen = {"loaders": [own, evaluation, made_again]}
    assert script_tries.training_loader(seen)[1] == "lightning/fabric/utilities/data.py:257"
    assert script_tries.script_loader_lines(seen) == ["fit.py:2"]
    assert script_patch.loader_call(str(tmp_path), "fit.py:2") and not script_patch.loader_call(str(tmp_path), "fit.py:4")
    assert script_tries.script_loader_lines({"loaders": [own]}) == []  # the steps' loader is the script's: no library
    from ddptop.analysis import tuning

    def entry(variant, loaders):
        return {"config_id": f"script:fit.py/n2/gloo/{variant}", "model": "script:fit.py", "mode": "ddp",
                "batch_size": 0, "world_size": 2, "backend": "gloo", "variant": variant, "status": "ok",
                "loader_site": made_again["at"] + "#1", "stats": {"sec_iter": {"p50": 0.01}},
                "script": {"wrappers": [], "loaders": loaders, "loader_tried_on": 1}}

    default = {**entry("default", seen["loaders"]), "config_id": "script:fit.py/n2/gloo", "loader_site": ""}
    (table,) = tuning.tuning_tables([default, entry("num_workers_1", [])], {}, {}, script_dir=str(tmp_path))
    row = table["rows"][1]
    assert row["paste"][1] == ("fit.py:2: DataLoader(..., num_workers=1, persistent_workers=True) (the script's own, "
                               "which the library makes again)")
    assert "-loader = DataLoader(range(8), num_workers=0)" in row["patch"]
    assert "+loader = DataLoader(range(8), num_workers=1, persistent_workers=True)" in row["patch"]


def test_a_patch_is_written_only_against_a_call_of_its_kind_and_across_folders_from_their_common_one(tmp_path):
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "wrap.py").write_text("model = torch.compile(NativeDDP(net))\nopt = SGD(params, lr=0.1)\n")
    (tmp_path / "train.py").write_text("loader = DataLoader(data)\n")
    change = script_patch.script_change(str(tmp_path / "models"), [
        ("wrap.py:1", {"static_graph": True}, script_patch.DDP_NAMES),
        ("../train.py:1", {"num_workers": 2}, script_patch.LOADER_NAMES)])
    assert change is not None and change.folder == str(tmp_path)  # both files' common folder
    assert "+model = torch.compile(NativeDDP(net, static_graph=True))" in change.patch  # the DDP alias, not compile
    assert "a/models/wrap.py" in change.patch and "a/train.py" in change.patch
    applied = tmp_path / "copy"
    (applied / "models").mkdir(parents=True)
    (applied / "models" / "wrap.py").write_text((tmp_path / "models" / "wrap.py").read_text())
    (applied / "train.py").write_text("loader = DataLoader(data)\n")
    done = subprocess.run(["patch", "-p1"], input=change.patch, text=True, capture_output=True, cwd=applied)
    assert done.returncode == 0, done.stdout + done.stderr
    # a line that holds no call of its kind (the file edited since the run): no patch of another call
    assert script_patch.script_change(str(tmp_path), [("models/wrap.py:2", {"num_workers": 2},
                                                       script_patch.LOADER_NAMES)]) is None


def test_a_tune_that_measured_no_try_says_why_in_its_answer():
    from ddptop.report.schema import TuneTable
    from ddptop.report.tuning_tables import tune_answer

    table = TuneTable.from_json({"model": "script:t.py", "rows": [{"variant": "default", "status": "failed"}],
                                 "not_tried": [{"what": variants.NO_TRY,
                                                "why": "the script as written did not run well (exit 1)"}]})
    assert tune_answer(table) == ["No try was measured: the script as written did not run well (exit 1)."]


def test_only_a_try_the_script_or_torch_refused_reads_not_applicable():
    """A try stopped by Ctrl-C, or never run after it, is said as such: 'not applicable' is a refusal alone."""
    from ddptop.report.schema import TuneRow
    from ddptop.protocol.modelspec import KINDS, Kind
    from ddptop.report.tuning_tables import TUNE_HEADER, _tune_cells

    def verdict(status):
        return _tune_cells(TuneRow.from_json({"variant": "static_graph", "what": "static_graph=True",
                                              "status": status}), KINDS[Kind.SCRIPT])[TUNE_HEADER.index("verdict")]

    assert verdict("failed") == "not applicable (below)" and verdict("oom") == "not applicable (below)"
    assert verdict("stopped") == "stopped (below)" and verdict("not_run") == "not_run (below)"


def test_a_cpu_rank_s_threads_are_tried_at_its_share_of_the_cores_where_its_launch_gave_it_another_count():
    idle = script_tries.choose(_facts(data_wait_share=0.0, threads_per_rank=1, cores_per_rank=4,
                                      threads_from="torchrun's default with several ranks a node", seen={"threads": 1}))
    assert idle.tries == {"threads_4": "each rank ran 1 thread (torchrun's default with several ranks a node), which "
                                       "left cores idle: its share of the cores ddptop may use is 4"}
    crowded = script_tries.choose(_facts(data_wait_share=0.0, threads_per_rank=8, cores_per_rank=2))
    assert "oversubscribed" in crowded.tries["threads_2"] and script_tries.THREADS not in crowded.not_tried
    even = script_tries.choose(_facts(data_wait_share=0.0, threads_per_rank=4, cores_per_rank=4))
    assert not any(name.startswith("threads_") for name in even.tries)
    assert even.not_tried[script_tries.THREADS] == "each rank ran its share of the cores already: 4 threads"
    # the script set its own count over the launch's: its choice, not tried
    own = script_tries.choose(_facts(data_wait_share=0.0, threads_per_rank=1, cores_per_rank=4, seen={"threads": 2}))
    assert not own.tries.get("threads_4") and "torch.set_num_threads(2)" in own.not_tried[script_tries.THREADS]
    assert script_tries.choose(_facts(device="cuda", threads_per_rank=0)).not_tried[script_tries.THREADS] == (
        "the ranks train on GPUs")
    threads = variants.variant("threads_4")
    assert threads.threads == 4 and variants.is_script_only(threads) and variants.applies_to_script(threads)
    assert variants.combinable(["threads_4", "threads_2", "num_workers_2"]) == ["threads_4", "num_workers_2"]
    with pytest.raises(ValueError):
        variants.variant("threads_0")


def test_a_script_whose_ranks_each_train_alone_is_told_so_where_ddp_s_settings_are_not_tried():
    """accelerate under torchrun on the CPU without cpu=True: a process group of the launch's size, no model
    wrapped, no collective: the tune says the ranks train alone before it says no DDP was made."""
    alone = {"process_group": True, "group_world_size": 2, "launch_world_size": 2, "wrappers": [], "collectives": 0}
    choice = script_tries.choose(_facts(data_wait_share=0.0, seen=alone))
    assert choice.not_tried[script_tries.DDP_SETTINGS].startswith("not data-parallel: the ranks train alone")
    assert choice.not_tried[script_tries.DDP_SETTINGS].endswith(
        "the script made no DistributedDataParallel model (it made no model for data parallelism)")


def test_static_graph_is_never_tried_or_combined_with_micro_batches_under_no_sync():
    """DDP's static graph under no_sync(): its first backward fails, and a torch past that stops all-reducing
    gradients. A script that accumulates under no_sync() gets no static_graph try, and the tune never sets
    static_graph together with its own no_sync_k try."""
    accumulating = {"wrappers": [_ddp(sync_steps=((4, 1, 20),), comm_ms=30.0)], "process_group": True}
    choice = script_tries.choose(_facts(data_wait_share=0.0, step_s=0.1, seen=accumulating))
    assert "static_graph" not in choice.tries and "bucket_cap_mb_10" in choice.tries
    assert choice.not_tried["static_graph"] == script_tries.STATIC_WITH_NO_SYNC
    every = {"wrappers": [_ddp(sync_steps=((4, 4, 20),), comm_ms=30.0)], "process_group": True}
    both = script_tries.choose(_facts(data_wait_share=0.0, step_s=0.1, seen=every)).tries
    assert {"static_graph", "no_sync_4"} <= set(both)  # each alone is a fair try
    assert variants.combinable(["static_graph", "no_sync_4", "bucket_cap_mb_10"]) == [
        "static_graph", "bucket_cap_mb_10"]
    assert variants.combinable(["no_sync_4", "static_graph", "gradient_as_bucket_view"]) == [
        "no_sync_4", "gradient_as_bucket_view"]


def test_a_thread_try_s_synchronisation_figures_carry_its_own_thread_count():
    from ddptop.analysis import script_sync

    entry = {"world_size": 2, "threads": 4, "script": {"wrappers": [_ddp()]}, "stats": {"sec_iter": {"p50": 0.1}}}
    assert script_sync.grad_sync(entry, None, threads={2: 1})["threads_per_rank"] == 4
    assert script_sync.grad_sync({**entry, "threads": 0}, None, threads={2: 1})["threads_per_rank"] == 1


def test_no_sync_is_not_tried_on_a_script_whose_ddp_sets_static_graph():
    static = {"wrappers": [_ddp(args={"static_graph": "True"}, sync_steps=((4, 4, 20),), comm_ms=30.0)],
              "process_group": True}
    choice = script_tries.choose(_facts(data_wait_share=0.0, step_s=0.1, seen=static))
    assert not any(name.startswith("no_sync_") for name in choice.tries)
    assert choice.not_tried[script_tries.NO_SYNC] == (f"the script sets static_graph=True (at train.py:50); "
                                                      f"{script_tries.STATIC_BREAKS}")
