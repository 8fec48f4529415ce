"""What ddptop reports for a user's training script: its batch and scaling as observed, its wait for data with
intervals, the rank the others wait for, its verdict, and the flags for a script that is not data-parallel or
trains in processes of its own.

Entries are made the way ``report/build.py`` makes a script's (``samples`` and ``step_values`` per rank, the
launches and their run lengths, ``script`` as the probe saw it), with synthetic steps of a known data wait; one
slow test runs examples/train.py for real at N=1,2.
"""

from __future__ import annotations

import csv
import io
import json
import os
import random

import numpy
import pytest

from ddptop.analysis import scaling, script_figures, script_steps, stats, step_bound, step_change
from ddptop.report import blocks, csv_table, scaling_tables, script_tables
from ddptop.records import Estimate
from ddptop.report.schema import Summary
from tests.conftest import REPO, ddptop, processes_mentioning, written

TRAIN = os.path.join(REPO, "examples", "train.py")
MODEL = "script:" + TRAIN
RESAMPLES = 400  # enough for the intervals' ends to settle in a test


def script_entry(world_size=2, batch=32, wait_s=0.001, busy_s=0.010, launches=3, steps=30, noise=0.02,
                 rank_wait=None, seen=None, examples=True, seed=0):
    """A script's summary entry: every rank's steps of ``busy_s`` plus its data wait (``wait_s``, or
    ``rank_wait[rank]``), each step jittered by ``noise`` (relative), over ``launches`` launches."""
    rng = random.Random(f"{world_size}/{seed}")
    samples, waits, counted = {}, {}, {}
    for rank in range(world_size):
        wait = (rank_wait or {}).get(rank, wait_s)
        rank_waits = [wait * (1 + noise * rng.gauss(0, 1)) for _ in range(steps * launches)]
        # DDP evens the ranks out: each step lasts the slowest rank's wait plus the busy time
        slowest = max((rank_wait or {}).values(), default=wait_s) if rank_wait else wait
        samples[str(rank)] = [max(slowest, w) + busy_s * (1 + noise * rng.gauss(0, 1)) for w in rank_waits]
        waits[str(rank)] = rank_waits
        counted[str(rank)] = [batch if examples else None] * (steps * launches)
    per_rank = batch if examples else 0
    pooled = sorted(v for values in samples.values() for v in values)
    return {
        "config_id": f"{MODEL}/n{world_size}/gloo", "model": MODEL, "mode": "ddp", "label": f"1M/{world_size}P",
        "world_size": world_size, "backend": "gloo", "device": "cpu", "scaling": "weak", "bucket_cap_mb": 25.0,
        "variant": "default", "batch_size": per_rank, "global_batch": per_rank * world_size, "status": "ok",
        "stats": {"n": len(pooled), "sec_iter": {"p50": stats.median(pooled)}},
        "samples": samples, "step_values": {"data_wait": waits, "examples": counted},
        "launches": [{"launch": f"0{i}-n{world_size}-gloo", "used": True} for i in range(launches)],
        "launch_of_steps": {str(rank): [[i, steps] for i in range(launches)] for rank in range(world_size)},
        "script": seen or {"process_group": True, "group_world_size": world_size, "launch_world_size": world_size,
                           "optimizer_steps": steps * launches, "spawned": 0, "step_marks": "optimizer",
                           "loaders": [{"num_workers": 0, "pin_memory": False, "persistent_workers": False,
                                        "prefetch_factor": None}]},
        "ended_by": "ddptop", "probe_notes": [], "command": [TRAIN, "--workers", "0"],
    }


def judged(*entries):
    """The entries with their script figures and verdicts, as build_summary adds them."""
    script_figures.add_script_figures(list(entries), resamples=RESAMPLES)
    for entry in entries:
        entry["verdict"] = step_bound.verdict(entry)
    return entries


class Plan:
    scaling, device, threads_per_rank, cores_per_rank = "weak", "cpu", {1: 1, 2: 1, 4: 1}, None
    su_core_weight, su_gpu_weight, efficiency_threshold = 1.0, 2.0, 0.7
    price_per_gpu_hour, epoch_examples, internode_gbps = None, 1_000_000, 25.0


# -- the batch as observed ----------------------------------------------------------------------------------------


def test_the_scaling_observed_is_weak_strong_or_said_to_have_changed():
    assert script_steps.observed_scaling({1: (32, 32), 2: (32, 64)}).kind == script_steps.WEAK
    strong = script_steps.observed_scaling({1: (64, 64), 2: (32, 64), 4: (16, 64)})
    assert strong.kind == script_steps.STRONG and "global batch 64 at every N" in strong.text
    changed = script_steps.observed_scaling({1: (32, 32), 2: (20, 40)})
    assert changed.kind == script_steps.CHANGED
    assert "32 at N=1, 20 at N=2" in changed.text and "neither weak nor strong" in changed.text
    unknown = script_steps.observed_scaling({1: (32, 32), 2: None})
    assert unknown.kind == script_steps.UNKNOWN and "N=2" in unknown.text


def test_a_script_s_world_sizes_land_in_one_table_whatever_batch_each_drew():
    entries = [script_entry(1, batch=32), script_entry(2, batch=20)]
    (table,) = scaling.scaling_tables(entries, Plan())
    assert [r["world_size"] for r in table["rows"]] == [1, 2]
    assert table["scaling"] == script_steps.CHANGED and [r["batch_per_rank"] for r in table["rows"]] == [32, 20]
    assert table["no_ddp_sec_iter"] is None and table["no_ddp_note"] == scaling.NO_DDP_BASELINE
    # the throughput counts what each N drew: 40 examples a step at N=2 against 32 at N=1
    assert table["rows"][1]["ex_sec_total"] == pytest.approx(40 / table["rows"][1]["sec_iter"])


def test_the_table_s_title_says_the_batch_as_observed_and_a_line_says_there_is_no_no_ddp_row():
    entries = [script_entry(1), script_entry(2)]
    doc = {"configs": entries, "scaling": scaling.scaling_tables(entries, Plan())}
    (table,) = Summary.from_json(doc).scaling
    title = scaling_tables._scaling_title(table)
    assert title.startswith("Scaling: train.py (gloo), batch as observed: 32 examples per rank per step at every N")
    assert "weak scaling, as observed" in title and "no-DDP" not in title
    text = "\n".join(p.text for p in scaling_tables.scaling_block(Summary.from_json(doc)).parts if hasattr(p, "text"))
    assert "A script has no no-DDP baseline: speedup is against the smallest N measured." in text


def test_examples_not_counted_leave_ex_s_unknown_and_said_never_a_division_by_zero():
    entries = [script_entry(1, examples=False), script_entry(2, examples=False)]
    (table,) = scaling.scaling_tables(entries, Plan())
    assert all(r["ex_sec_total"] is None and r["speedup"] is None and r["efficiency"] is None for r in table["rows"])
    assert table["scaling"] == script_steps.UNKNOWN and table["amdahl"] is None
    assert "Examples per step unknown" in table["recommendation"]
    rows = stats.scaling_rows([stats.ScalingPoint(1, 0.1, 0, 1, 0), stats.ScalingPoint(2, 0.1, 0, 2, 0)]).rows
    assert [r["speedup"] for r in rows] == [None, None]


# -- the data wait and the verdict ----------------------------------------------------------------------------


def test_input_bound_when_the_data_wait_is_high_beyond_noise_with_the_loader_advice():
    one, two = judged(script_entry(1, wait_s=0.040, busy_s=0.010), script_entry(2, wait_s=0.040, busy_s=0.010))
    for entry in (one, two):
        wait = entry["data_wait"]
        assert wait["share"].value == pytest.approx(0.8, abs=0.02) and wait["share"].low > step_bound.INPUT_BOUND_SHARE
        assert wait["levels"] == "launches" and wait["launches"] == 3
        assert entry["verdict"]["kind"] == step_bound.INPUT
        assert "num_workers > 0" in entry["verdict"]["text"] and "pin_memory=True" in entry["verdict"]["text"]


def test_a_low_data_wait_is_said_under_the_threshold_and_is_not_input_bound():
    (entry,) = judged(script_entry(1, wait_s=0.0002, busy_s=0.010))
    assert entry["data_wait"]["share"].high < step_bound.INPUT_BOUND_SHARE
    assert entry["verdict"]["kind"] == step_bound.COMPUTE and "under 10%" in entry["verdict"]["text"]


def test_a_noisy_data_wait_is_neither_input_bound_nor_said_to_be_minor():
    """Waits that come in bursts (a worker's batch every few steps) over two launches that disagree: the share's
    interval straddles the threshold, and the verdict says so."""
    entry = script_entry(1, wait_s=0.0, busy_s=0.010, launches=2, steps=12, noise=0.3)
    waits = entry["step_values"]["data_wait"]["0"]
    for i in range(0, 12, 4):  # the first launch: a long wait every fourth step; the second: none
        waits[i] = 0.012
        entry["samples"]["0"][i] += 0.012
    (entry,) = judged(entry)
    low, high = entry["data_wait"]["share"].ci
    assert low <= step_bound.INPUT_BOUND_SHARE <= high
    assert entry["verdict"]["kind"] != step_bound.INPUT and "within noise" in entry["verdict"]["text"]


def test_advice_goes_by_the_loader_the_script_used():
    single = {"loaders": [{"num_workers": 1, "pin_memory": True, "persistent_workers": False, "prefetch_factor": 2}]}
    advice = script_steps.loader_advice(single)
    assert "more than its single worker" in advice and "persistent_workers=True" in advice
    assert "prefetch_factor" in advice and "pin_memory" not in advice
    assert "num_workers=..." in script_steps.loader_advice({})  # nothing seen: every knob, none claimed


def test_a_step_less_its_wait_that_grows_with_n_is_not_called_waiting_without_a_measure_of_the_waiting():
    """What grew (the ranks waiting on each other, or compute) is told by DDP's timers (tests/test_script_sync.py);
    without them the verdict says it was not measured."""
    one, two = judged(script_entry(1, busy_s=0.010), script_entry(2, busy_s=0.016))
    less = two["step_less_wait"]
    assert less["change"] == "slower" and less["ratio"].low > 1 + less["min_effect"]
    assert less["ratio"].value == pytest.approx(1.6, rel=0.03)
    assert two["verdict"]["kind"] == step_bound.UNKNOWN
    assert f"the step less its data wait is {less['ratio'].value:.2f}x N=1's" in two["verdict"]["text"]
    assert "waiting on the other ranks" not in two["verdict"]["text"]
    assert one["verdict"]["kind"] == step_bound.COMPUTE


def test_a_step_that_does_not_grow_is_compute_bound_and_noise_is_called_noise():
    _, same = judged(script_entry(1, busy_s=0.010), script_entry(2, busy_s=0.010))
    assert same["step_less_wait"]["change"] == "equivalent" and same["verdict"]["kind"] == step_bound.COMPUTE
    _, noisy = judged(script_entry(1, busy_s=0.010, noise=0.5, steps=6, launches=2),
                      script_entry(2, busy_s=0.011, noise=0.5, steps=6, launches=2, seed=1))
    assert noisy["step_less_wait"]["change"] == "within noise"
    assert noisy["verdict"]["text"].startswith("scaling within noise")


def test_a_step_less_wait_that_shrank_is_said_to_have_shrunk_never_to_be_within_the_margin():
    """0.76x N=1's with an interval far below 1 - 2%: the verdict and the table say it shrank, as the numbers do."""
    _, two = judged(script_entry(1, busy_s=0.010, wait_s=0.0002), script_entry(2, busy_s=0.0076, wait_s=0.0002))
    less = two["step_less_wait"]
    assert less["ratio"].value == pytest.approx(0.76, rel=0.03) and less["ratio"].high < 1 - less["min_effect"]
    text = two["verdict"]["text"]
    assert "within 2%" not in text and "shrank beyond noise (by more than 2%)" in text, text
    assert two["verdict"]["kind"] == step_bound.COMPUTE  # not grown: the ranks do not wait on each other
    summary = Summary.from_json({"configs": [dict(two)]})
    assert "(shrank)" in script_tables._against_reference(summary.configs[0])


@pytest.mark.parametrize(("interval", "words", "short"), [
    ([1.05, 1.20], "grew beyond noise (by more than 2%)", "grew"),
    ([0.69, 0.82], "shrank beyond noise (by more than 2%)", "shrank"),
    ([0.99, 1.01], "within 2% of it", "within ±2%"),
    ([1.01, 1.03], "whether it changed by more than 2% cannot be told from noise", "within noise"),
    ([0.90, 1.10], "whether it changed by more than 2% cannot be told from noise", "within noise"),
    (None, "no interval to tell a change from noise", "no interval"),
])
def test_a_ratio_s_change_is_worded_from_its_interval_alone(interval, words, short):
    assert step_change.change_words(interval, 0.02) == words
    assert step_change.change_words(interval, 0.02, short=True) == short


def test_a_step_less_wait_within_noise_says_so_and_not_within_the_margin():
    entry = {"ratio": Estimate(value=1.0, ci=[0.9, 1.1]), "min_effect": 0.02, "change": "within noise",
             "reference_world_size": 1}
    one = {**script_entry(2), "step_less_wait": entry, "data_wait": None}
    text = step_bound.script_verdict(one)["text"]
    assert text.startswith("scaling within noise") and "cannot be told from noise" in text and "within 2%" not in text


def test_strong_scaling_compares_the_step_per_example_a_rank_draws():
    """Half the batch per rank at N=2 in half the time: the step per example did not grow."""
    _, two = judged(script_entry(1, batch=64, busy_s=0.020), script_entry(2, batch=32, busy_s=0.010))
    assert two["step_less_wait"]["per_example"] is True and two["step_less_wait"]["change"] == "equivalent"


def test_the_rank_with_slow_input_is_named_from_its_data_wait_only_beyond_noise():
    (slow,) = judged(script_entry(2, rank_wait={0: 0.001, 1: 0.012}))
    found = slow["data_wait"]["straggler"]
    assert found["rank"] == 1 and found["flagged"] and found["excess_share"].low >= script_figures.WAIT_STRAGGLER_SHARE
    assert found["others_busy_longer_s"].value > 0  # rank 0 waits for it in the allreduce
    assert slow["straggler"] == {"rank": 1, "evidence": "data wait"}
    (even,) = judged(script_entry(2, rank_wait={0: 0.001, 1: 0.0011}))
    assert not even["data_wait"]["straggler"]["flagged"] and even.get("straggler") is None


def test_a_script_without_a_process_group_is_not_data_parallel_and_its_rows_not_called_scaling():
    alone = {"process_group": False, "group_world_size": None, "launch_world_size": 2, "spawned": 0}
    entries = [script_entry(1, seen={**alone, "launch_world_size": 1}), script_entry(2, seen=alone)]
    judged(*entries)
    assert entries[1]["verdict"]["kind"] == step_bound.NOT_DATA_PARALLEL
    assert entries[1]["verdict"]["text"].startswith("not data-parallel: each rank trains alone")
    (table,) = scaling.scaling_tables(entries, Plan())
    assert table["recommendation"].startswith("No scaling to judge: not data-parallel at N=2")
    assert entries[0]["verdict"]["kind"] != step_bound.NOT_DATA_PARALLEL  # N=1 alone: the serial baseline
    doc = Summary.from_json({"configs": entries, "scaling": [table]})
    assert scaling_tables._scaling_title(doc.scaling[0]).startswith("Not scaling (N=2 not data-parallel):")
    # a group of its own size on every rank is each rank alone too
    own = {"process_group": True, "group_world_size": 1, "launch_world_size": 2}
    assert "its process group has 1 rank, the launch 2" in script_steps.data_parallel_problem(own)


def test_a_table_that_is_not_data_parallel_fits_projects_and_models_nothing():
    """'No scaling to judge' stands alone: no Amdahl fit, no Karp-Flatt, no projection beyond the node, no
    gradients synchronised per epoch, in summary.json's table as in the report, with intervals or without."""
    alone = {"process_group": False, "group_world_size": None, "launch_world_size": 2, "spawned": 0}
    entries = [script_entry(1, seen={**alone, "launch_world_size": 1}), script_entry(2, seen=alone)]
    for entry in entries:  # what a projection and the epoch's figures would be made of
        entry.update(grad_bytes=4_000_000, params=1_000_000, communication={"compute_s": 0.009})
    judged(*entries)
    replicates = {e["config_id"]: numpy.array([e["stats"]["sec_iter"]["p50"] * (1 + 0.01 * k) for k in (-1, 0, 1)])
                  for e in entries}
    for found in (scaling.scaling_tables(entries, Plan()), scaling.scaling_tables(entries, Plan(), replicates)):
        (table,) = found
        assert table["recommendation"].startswith("No scaling to judge")
        assert table["amdahl"] is None and table["projection"] is None
        assert all(r["karp_flatt"] is None and r.get("karp_flatt_ci") is None and r["epoch"] is None
                   for r in table["rows"])
        summary = Summary.from_json(written({"configs": entries, "scaling": [table]}))
        text = blocks.text(scaling_tables.scaling_block(summary))
        assert "No scaling to judge" in text
        assert not any(word in text for word in ("Amdahl", "Projected", "can never pass", "Per epoch")), text
    # the same rows from ranks that train together are fitted: the refusal, not the rows, leaves the fit out
    together = [script_entry(1), script_entry(2)]
    for entry in together:
        entry.update(grad_bytes=4_000_000, params=1_000_000, communication={"compute_s": 0.009})
    (table,) = scaling.scaling_tables(judged(*together), Plan())
    assert table["amdahl"] is not None and table["projection"] is not None


def test_a_script_that_spawns_its_own_processes_says_the_probe_sees_none_of_their_steps():
    seen = {"process_group": True, "group_world_size": 2, "launch_world_size": 2, "spawned": 1}
    (entry,) = judged(script_entry(2, seen=seen))
    assert script_steps.SPAWNED in entry["verdict"]["text"]
    details = script_tables.seen_details(Summary.from_json({"configs": [entry]}).configs[0])
    assert script_steps.SPAWNED in details and "ended by ddptop after the planned steps" in details


NCCL_SEEN = {"process_group": True, "group_world_size": 2, "launch_world_size": 2, "spawned": 0,
             "group_backend": "nccl"}


def test_the_backend_of_the_script_s_own_group_is_said_where_it_is_not_the_launch_s():
    """A script that calls init_process_group("nccl") in a launch for gloo: its tables, what the probe saw and
    the step-time block say nccl, the script's, and the launch's beside it; a group of the launch's backend
    is said once, as before."""
    both = "nccl (the script's; launched for gloo)"
    entries = judged(script_entry(1, seen=dict(NCCL_SEEN, group_world_size=1, launch_world_size=1)),
                     script_entry(2, seen=NCCL_SEEN))
    summary = Summary.from_json({"configs": list(entries), "scaling": scaling.scaling_tables(list(entries), Plan())})
    (table,) = summary.scaling
    assert both in scaling_tables._scaling_title(table)
    assert both in scaling_tables.benchmark_text(summary)
    assert f"process group: {both}" in script_tables.seen_details(summary.configs[1])
    assert script_steps.backend_words("gloo", "gloo") == "gloo" and script_steps.backend_words("gloo", None) == "gloo"
    assert script_steps.backend_words("nccl", "undefined") == "nccl"  # no backend named: the device's default
    same = judged(script_entry(1), script_entry(2, seen=dict(NCCL_SEEN, group_backend="gloo")))
    plain = Summary.from_json({"configs": list(same), "scaling": scaling.scaling_tables(list(same), Plan())})
    assert "the script's" not in scaling_tables._scaling_title(plain.scaling[0])
    assert not any("process group:" in line for line in script_tables.seen_details(plain.configs[1]))


def test_the_report_the_csv_and_the_json_carry_the_script_s_figures():
    entries = list(judged(script_entry(1, wait_s=0.040), script_entry(2, wait_s=0.040)))
    entries[1]["probe_notes"] = ["examples not counted: a batch of type dict holds no tensor"]
    doc = {"configs": entries, "scaling": scaling.scaling_tables(entries, Plan()),
           "plan": {"threads_per_rank": {"1": 1, "2": 1}}}
    summary = Summary.from_json(written(doc))
    assert summary.configs[1].data_wait.share == entries[1]["data_wait"]["share"]
    assert summary.configs[1].script.loaders[0]["num_workers"] == 0
    assert Summary.from_json(summary.to_json()).to_json() == summary.to_json()  # read and written alike
    text = blocks.text(script_tables.script_block(summary))
    assert f"command: {TRAIN}" in text and "the probe lost: examples not counted" in text
    # the script as typed where ddptop started, not the absolute path its ranks were given
    for entry in entries:
        entry["model"] = "script:examples/train.py --workers 0"
    doc["plan"].update(script=[TRAIN, "--workers", "0"], script_dir=REPO)
    typed = blocks.text(script_tables.script_block(Summary.from_json(written(doc))))
    assert f"  command: examples/train.py --workers 0 (in {REPO})" in typed.splitlines(), typed
    first = next(csv.DictReader(io.StringIO(csv_table.csv_text(summary))))
    assert float(first["data_wait_share"]) == pytest.approx(entries[0]["data_wait"]["share"].value)
    assert float(first["data_wait_share_low"]) > step_bound.INPUT_BOUND_SHARE
    assert first["observed_batch_per_rank"] == "32" and first["observed_scaling"] == "weak"


# -- names a user reads --------------------------------------------------------------------------------------------


def script_run_in(directory, monkeypatch, *args, world_sizes=(1, 2)) -> str:
    """A script's run directory as ``ddptop run -- train.py ARGS`` started in ``directory`` writes it, with no
    torch: train.py copied there, one launch per world size, 10 measured steps a rank, ended by ddptop."""
    import shutil

    from ddptop.protocol.wire import EventWriter
    from ddptop.run import rundir
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    directory.mkdir(parents=True, exist_ok=True)
    shutil.copy(TRAIN, directory / "train.py")
    monkeypatch.chdir(directory)
    plan = build_plan(PlanOptions(script=["train.py", *args], world_sizes=list(world_sizes), iters=10, warmup=1,
                                  launches=1), Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(directory / "run"), plan.name))
    for number, launch in enumerate(plan.launches(), 1):
        (config,) = launch.configs
        name, size = f"{number:02d}-{launch.launch_key}", launch.world_size
        session.mark(what="launch_start", launch=name, world_size=size, backend=launch.backend,
                     configs=[config.config_id])
        path = rundir.launch_dir(session.run_dir, number, launch.launch_key, 0)
        for rank in range(size):
            writer = EventWriter(os.path.join(path, "events", f"rank-{rank}.jsonl"), rank, 0.0)
            writer.emit("hello", world_size=size, host=os.uname().nodename, pid=os.getpid(), device="cpu", local_rank=rank)
            writer.emit("config_start", config_id=config.config_id, warmup=1, iters=10, command=list(plan.script))
            writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=0, sec=[0.02] * 10,
                        data_wait=[0.001] * 10, examples=[8] * 10)
            seen = {"process_group": True, "group_world_size": size, "launch_world_size": size,
                    "group_backend": "gloo", "optimizer_steps": 11, "spawned": 0, "step_marks": "optimizer"}
            writer.emit("config_end", config_id=config.config_id, status="ok", iters=10, warmup_iters=1,
                        ended_by="ddptop", script=seen)
            writer.close()
        session.mark(what="launch_end", launch=name, exit_code=0, status="ok")
    session.refresh()
    session.close()
    return session.run_dir


def test_headless_lines_and_tables_name_the_script_as_typed_not_by_its_absolute_path(tmp_path, monkeypatch):
    """`ddptop run -- train.py --flag 1`: the lines and tables name the script by its file, train.py; the
    command as typed is the report's `command:` line; the absolute path the ranks ran is in the plan alone."""
    from rich.console import Console

    from ddptop.headless import HeadlessView
    from ddptop.report import build, sections
    from ddptop.run.session import Session

    run_dir = script_run_in(tmp_path, monkeypatch, "--flag", "1")
    console = Console(file=io.StringIO(), width=300)
    session = Session.load(run_dir)
    HeadlessView(session, console).render()
    assert session.plan.script[0] == str(tmp_path / "train.py")
    session.close()
    lines = console.file.getvalue().splitlines()
    assert [line.split("]")[0] for line in lines] == ["[train.py/n1/gloo", "[train.py/n2/gloo"]
    summary, _ = build.load_target(run_dir, rebuild=True)
    report = sections.text_report(summary)
    assert "Benchmark: train.py, the batch as the script drew it" in report
    assert "Scaling: train.py (gloo), batch as observed" in report
    assert [line.strip().startswith("command: train.py --flag 1") for line in report.splitlines()
            if "command:" in line or str(tmp_path / "train.py") in line] == [True], report
    (table,) = summary.scaling
    assert table.series_label() == "train.py"  # the plots' legend


# -- a real script ------------------------------------------------------------------------------------------------


def _verdicts(tmp_path, name, *script_args):
    run_dir = str(tmp_path / name)
    done = ddptop("run", "--headless", "--no-plots", "--out", run_dir, "--world-sizes", "1,2", "--iters", "8",
                  "--warmup", "2", "--launches", "1", "--", TRAIN, "--workers", "0", "--steps", "1000", *script_args,
                  timeout=300, env={"OMP_NUM_THREADS": "1"})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert processes_mentioning(run_dir) == []
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        configs = json.load(handle)["configs"]
    report = ddptop("report", run_dir).stdout
    assert "The script: data wait and what the probe saw" in report and "A script has no no-DDP baseline" in report
    return {c["world_size"]: c["verdict"] for c in configs}, report


@pytest.mark.slow
def test_examples_train_with_a_slow_transform_is_input_bound_and_with_a_fast_one_is_not(tmp_path):
    """Each example costs 20 ms of sleep on one worker-less loader: the ranks wait for data most of the step.
    With no transform and a wider model the same script waits little (its DataLoader's own collation)."""
    slow, report = _verdicts(tmp_path, "slow", "--batch-size", "4", "--transform-ms", "20")
    assert {n: v["kind"] for n, v in slow.items()} == {1: step_bound.INPUT, 2: step_bound.INPUT}, report
    assert "num_workers > 0" in slow[2]["text"]
    fast, report = _verdicts(tmp_path, "fast", "--batch-size", "8", "--hidden", "2048", "--transform-ms", "0")
    assert all(v["kind"] != step_bound.INPUT for v in fast.values()), report


# -- counts over a configuration's launches -----------------------------------------------------------------------


def _two_launch_run(tmp_path, steps=(30, 30), notes=("batch timing off from step 7", None)) -> str:
    """A script's run directory at N=2 measured in two launches (``--launches 2``), each rank's probe ending
    each launch with what it saw: ``steps[i]`` optimizer steps and ``notes[i]`` in launch i."""
    from ddptop.protocol.wire import EventWriter
    from ddptop.run import rundir
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    plan = build_plan(PlanOptions(script=[TRAIN], world_sizes=[2], iters=10, warmup=1, launches=2),
                      Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    for number, launch in enumerate(plan.launches(), 1):
        (config,) = launch.configs
        name = f"{number:02d}-{launch.launch_key}"
        session.mark(what="launch_start", launch=name, world_size=2, backend=launch.backend, configs=[config.config_id])
        path = rundir.launch_dir(session.run_dir, number, launch.launch_key, 0)
        for rank in range(2):
            writer = EventWriter(os.path.join(path, "events", f"rank-{rank}.jsonl"), rank, 0.0)
            writer.emit("hello", world_size=2, host=os.uname().nodename, pid=os.getpid(), device="cpu", local_rank=rank)
            writer.emit("config_start", config_id=config.config_id, warmup=1, iters=10, command=[TRAIN],
                        round=number - 1, rounds=2)
            writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=0, sec=[0.02] * 10,
                        data_wait=[0.001] * 10, examples=[8] * 10, round=number - 1)
            seen = {"process_group": True, "group_world_size": 2, "launch_world_size": 2,
                    "optimizer_steps": steps[number - 1], "spawned": 0, "step_marks": "optimizer", "loaders": []}
            writer.emit("config_end", config_id=config.config_id, status="ok", iters=10, round=number - 1,
                        last=number == 2, rounds=2, ended_by="ddptop", script=seen,
                        **({"note": notes[number - 1]} if notes[number - 1] else {}))
            writer.close()
        session.mark(what="launch_end", launch=name, exit_code=0, status="ok")
    session.refresh()
    session.close()
    return session.run_dir


def test_a_configuration_s_optimizer_steps_and_probe_notes_are_counted_over_all_its_launches(tmp_path):
    """Two launches of 30 optimizer steps each: the configuration saw 60, said with each launch's count; a note
    the probe made in the first launch only is the configuration's too."""
    from ddptop.report import build

    summary, _ = build.load_target(_two_launch_run(tmp_path), rebuild=True)
    (entry,) = summary.configs
    assert entry.script.optimizer_steps == 60 and entry.script.optimizer_steps_per_launch == [30, 30]
    assert all(seen.optimizer_steps == 60 for seen in entry.script_per_rank.values())
    assert entry.probe_notes == ["batch timing off from step 7"]
    details = script_tables.seen_details(entry)
    assert "steps marked by the optimizer step, 60 optimizer steps seen over 2 launches (30, 30)" in details
    written = json.loads(json.dumps(summary.to_json()))
    assert json.loads(json.dumps(Summary.from_json(written).to_json())) == written  # read and written alike


def test_one_launch_s_optimizer_steps_are_said_without_a_list_of_launches():
    seen = script_steps.seen_over_launches([{"optimizer_steps": 30, "spawned": 0, "process_group": True}])
    assert seen == {"optimizer_steps": 30, "spawned": 0, "process_group": True}
    entry = Summary.from_json({"configs": [script_entry(2, seen={**seen, "step_marks": "optimizer"})]}).configs[0]
    assert "steps marked by the optimizer step, 30 optimizer steps seen" in script_tables.seen_details(entry)


def test_a_launch_that_was_not_data_parallel_or_spawned_is_the_configuration_s_too():
    alone = {"process_group": False, "group_world_size": None, "launch_world_size": 2, "optimizer_steps": 5,
             "spawned": 1}
    fine = {"process_group": True, "group_world_size": 2, "launch_world_size": 2, "optimizer_steps": 7, "spawned": 0}
    seen = script_steps.seen_over_launches([alone, fine])
    assert script_steps.data_parallel_problem(seen) == script_steps.data_parallel_problem(alone)
    assert seen["spawned"] == 1 and seen["optimizer_steps"] == 12 and seen["optimizer_steps_per_launch"] == [5, 7]


def test_a_script_configuration_not_measured_is_named_under_the_data_wait_table():
    measured, lost = judged(script_entry(1), script_entry(2))
    lost.update(stats=None, status="failed", data_wait=None, step_less_wait=None)
    text = blocks.text(script_tables.script_block(Summary.from_json({"configs": [measured, lost]})))
    assert "No row for 1M/2P train.py (not measured: failed)." in text, text  # a script's batch is its own
