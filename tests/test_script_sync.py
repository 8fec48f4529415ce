"""Why a user's script scales as it does, from how it synchronised its gradients (what the probe recorded:
tests/test_script_sync_probe.py): ``ddptop.analysis.script_sync``, ``step_bound.script_verdict``, the scaling
table and the report.

Quick: verdicts on synthetic entries: ranks that train alone, gradients synchronised on every micro-batch, waiting
on the other ranks only where DDP's timers saw its exposed communication grow, compute that grew, what was not
measured, N=1 without a process group as the serial baseline; the summary's records.

Slow (real `ddptop run -- script.py` with gloo): a script that makes a process group and never wraps its model; DDP
with four micro-batches a step, without and with no_sync(), and fully_shard with four, each reducing; a script
that skips init_process_group at WORLD_SIZE 1.
"""

from __future__ import annotations

import json

import pytest

from ddptop.analysis import scaling, script_steps, script_sync, step_bound
from ddptop.report import blocks, consistency_verdicts, scaling_tables, script_tables
from ddptop.report.schema import Summary
from tests.test_script_report import Plan, judged, script_entry
from tests.test_script_sync_probe import run_script
from tests.conftest import written

SITE = "/home/user/train.py:42"
DDP = script_sync.DDP


def rank_seen(n, micro=1, syncs=1, steps=90, comm=None, overlap=0.0, wrappers=True, collectives=0, group=True,
              launches=1):
    """One rank's ``config_end.script`` per launch as the probe writes it, put together over the launches as
    build does: a DDP model made at SITE whose measured steps each ran ``micro`` forwards, ``syncs`` of them
    synchronising; DDP's timers (``comm``, ``overlap``: seconds a step) where given."""
    ends = []
    for _ in range(launches):
        ddp = {"kind": DDP, "site": SITE, "args": {"bucket_cap_mb": "25"}, "rewrapped": False,
               "sync_steps": [[micro, syncs, steps // launches]], "comm_hook": None,
               "ddp_logging": None if comm is None else {
                   "forward_compute_s": 0.001, "backward_compute_s": 0.002, "backward_comm_s": comm / max(syncs, 1),
                   "backward_compute_comm_overlap_s": overlap / max(syncs, 1),
                   "iterations": syncs * (steps // launches)}}
        ends.append({"process_group": group, "group_world_size": n if group else None, "launch_world_size": n,
                     "optimizer_steps": steps // launches, "spawned": 0, "step_marks": "optimizer", "loaders": [],
                     "collectives": collectives, "wrappers": [ddp] if wrappers else []})
    return script_steps.seen_over_launches(ends)


def sync_entry(n, busy_s=0.010, comm=None, **seen):
    """A script entry at N whose ranks saw ``seen`` (``comm``: each rank's exposed communication a step)."""
    per_rank = {str(r): rank_seen(n, comm=None if comm is None else comm[r], **seen) for r in range(n)}
    entry = script_entry(n, busy_s=busy_s, launches=1, steps=90, seen=per_rank["0"])
    entry["script_per_rank"] = per_rank
    return entry


def verdicts(*entries, threads=None):
    from ddptop.analysis import script_figures

    script_figures.add_script_figures(list(entries), resamples=400, threads=threads)
    for entry in entries:
        entry["verdict"] = step_bound.verdict(entry)
    return entries


# -- the ranks train alone ----------------------------------------------------------------------------------------


def test_ranks_in_a_group_of_the_launch_s_size_that_wrap_no_model_train_alone_and_are_not_called_scaling():
    """A process group of 2 and a DistributedSampler, but no DDP: no gradient is synchronised. N=2 is not
    data-parallel, never 'waiting on the other ranks' however much its step grew; N=1 is a rank alone."""
    one = sync_entry(1, busy_s=0.010, wrappers=False)
    two = sync_entry(2, busy_s=0.021, wrappers=False)
    verdicts(one, two, threads={1: 2, 2: 1})
    assert two["verdict"]["kind"] == step_bound.NOT_DATA_PARALLEL
    assert "the ranks train alone" in two["verdict"]["text"] and "no model wrapped" in two["verdict"]["text"]
    assert "waiting on the other ranks" not in two["verdict"]["text"]
    assert one["verdict"]["kind"] == step_bound.COMPUTE
    (table,) = scaling.scaling_tables([one, two], Plan())
    assert table["not_data_parallel_at"] == [2] and table["amdahl"] is None
    assert table["not_data_parallel"].startswith("not data-parallel at N=2: the ranks train alone")
    # N=2's step and examples/s are measured; no speedup or efficiency of one training over its ranks (there is none)
    n2 = table["rows"][1]
    assert n2["sec_iter"] and n2["ex_sec_total"] and table["rows"][0]["speedup"] == 1.0
    assert all(n2[key] is None for key in ("speedup", "efficiency", "relative_cost", "relative_su"))
    summary = Summary.from_json(written({"configs": [one, two], "scaling": [table]}))
    assert scaling_tables._scaling_title(summary.scaling[0]).startswith("Not scaling (N=2 not data-parallel): ")
    cells = scaling_tables._scaling_cells(summary.scaling[0].rows[1])
    assert cells[3:7] == ("-",) * 4 and cells[1] != "-", cells
    text = blocks.text(script_tables.script_block(summary))
    assert "no model wrapped for data parallelism" in text


def test_collectives_of_its_own_or_a_ddp_model_that_syncs_are_not_called_training_alone():
    by_hand = rank_seen(2, wrappers=False, collectives=40)
    assert script_sync.synchronises(by_hand) is True and script_steps.data_parallel_problem(by_hand) is None
    assert script_steps.data_parallel_problem(rank_seen(2)) is None
    never = rank_seen(2, micro=4, syncs=0)  # every forward inside no_sync()
    assert "every forward ran inside no_sync()" in script_steps.data_parallel_problem(never)
    uncounted = rank_seen(2, micro=0, syncs=0)  # DDP's forwards not seen (compiled, a forward of its own)
    assert script_sync.synchronises(uncounted) is None and script_steps.data_parallel_problem(uncounted) is None
    older = {"process_group": True, "group_world_size": 2, "launch_world_size": 2}  # a probe before wrappers
    assert script_steps.data_parallel_problem(older) is None
    missed = {**rank_seen(2, wrappers=False), "wrappers_incomplete": True}  # a wrapper may have gone unrecorded
    assert script_sync.synchronises(missed) is None and script_steps.data_parallel_problem(missed) is None


# -- N=1 without a process group ----------------------------------------------------------------------------------


def test_n1_without_a_process_group_is_the_serial_baseline_and_a_larger_n_that_synchronises_scales():
    """Many scripts skip init_process_group at WORLD_SIZE 1: N=1 is then the serial baseline, not 'not
    data-parallel', and N=2, which formed its group and synchronised every step, is a scaling measurement."""
    one = sync_entry(1, wrappers=False, group=False)
    two = sync_entry(2, busy_s=0.010, comm=[0.0004, 0.0005])
    verdicts(one, two)
    assert script_steps.data_parallel_problem(one["script"]) is None
    assert one["verdict"]["kind"] == step_bound.COMPUTE and two["verdict"]["kind"] != step_bound.NOT_DATA_PARALLEL
    (table,) = scaling.scaling_tables([one, two], Plan())
    assert "not_data_parallel" not in table and table["no_ddp_note"] == scaling.SERIAL_BASELINE
    summary = Summary.from_json(written({"configs": [one, two], "scaling": [table]}))
    title = scaling_tables._scaling_title(summary.scaling[0])
    assert title.startswith("Scaling: ") and "not data-parallel" not in title
    assert two["grad_sync"]["reference_exposed_comm_s"] == 0.0  # the serial baseline exposes no communication


# -- gradients synchronised on every micro-batch --------------------------------------------------------------------


def test_four_micro_batches_each_synchronising_are_said_with_the_cost_and_the_fix_at_the_constructor_s_line():
    one = sync_entry(1, micro=4, syncs=4, comm=[0.0002])
    two = sync_entry(2, micro=4, syncs=4, comm=[0.004, 0.0045])
    verdicts(one, two)
    text = two["verdict"]["text"]
    assert "gradients synchronised on every micro-batch: 4 micro-batches a step" in text, text
    assert f"DistributedDataParallel made at {SITE}" in text
    assert "wrap the first 3 micro-batches' forward and backward in model.no_sync()" in text
    assert "DDP's timers: its backward communication 4.2 ms a step, 4.2 ms of it exposed (39% of the step)" in text
    assert "every micro-batch" not in one["verdict"]["text"]  # one rank: nothing to synchronise with
    details = script_tables.seen_details(Summary.from_json({"configs": [two]}).configs[0])
    assert (f"DistributedDataParallel at {SITE} (bucket_cap_mb=25): 4 syncs over 4 micro-batches a step (90 steps)"
            in details), details


def test_a_script_that_already_uses_no_sync_is_never_told_to():
    two = sync_entry(2, micro=4, syncs=1, comm=[0.001, 0.0012])
    verdicts(sync_entry(1, micro=4, syncs=1, comm=[0.0001]), two)
    assert two["grad_sync"]["every_micro_batch"] is False and "no_sync" not in two["verdict"]["text"]
    details = script_tables.seen_details(Summary.from_json({"configs": [two]}).configs[0])
    assert any("1 sync over 4 micro-batches a step" in line for line in details), details


# -- what grew: waiting, compute, or not measured -----------------------------------------------------------------


def test_waiting_on_the_other_ranks_only_where_ddp_s_exposed_communication_grew():
    one = sync_entry(1, busy_s=0.010, comm=[0.0001])
    two = sync_entry(2, busy_s=0.016, comm=[0.0058, 0.0062])
    verdicts(one, two)
    assert two["grad_sync"]["comm_grew"] is True
    assert two["verdict"]["kind"] == step_bound.WAITING
    assert "DDP's exposed communication" in two["verdict"]["text"]
    assert "6.0 ms a step against 0.1 ms at N=1" in two["verdict"]["text"]


def test_a_step_that_grew_while_its_exposed_communication_did_not_is_compute_with_the_threads_said():
    """The Trainer's case on 2 cores: 2 threads a rank at N=1, 1 at N=2; the step grew, DDP's communication
    did not: compute per rank grew, never 'waiting on the other ranks'."""
    one = sync_entry(1, busy_s=0.010, comm=[0.0001])
    two = sync_entry(2, busy_s=0.018, comm=[0.0002, 0.0003])
    verdicts(one, two, threads={1: 2, 2: 1})
    assert two["grad_sync"]["comm_grew"] is False
    assert two["verdict"]["kind"] == step_bound.COMPUTE
    text = two["verdict"]["text"]
    assert text.startswith("compute grew with N: the step less its data wait is 1.") and "x N=1's" in text, text
    assert "DDP's exposed communication (backward allreduce less its overlap with compute, its own timers) 0.2 ms a " \
           "step against 0.1 ms at N=1: not what grew" in text
    assert "each rank ran 2 threads at N=1 and 1 at N=2" in text and "waiting on the other ranks" not in text


def test_a_grown_step_without_ddp_s_timers_is_said_not_to_be_measured():
    one, two = sync_entry(1, busy_s=0.010), sync_entry(2, busy_s=0.018)  # DDP, its timers not read
    verdicts(one, two, threads={1: 2, 2: 1})
    assert two["verdict"]["kind"] == step_bound.UNKNOWN
    text = two["verdict"]["text"]
    assert text.startswith("not measured whether the ranks wait on each other or their compute grew"), text
    assert "waiting on the other ranks:" not in text and "2 threads at N=1" in text
    # an older summary, its probe saw no wrapper: not measured either
    old_one, old_two = judged(script_entry(1, busy_s=0.010), script_entry(2, busy_s=0.018))
    assert old_two["verdict"]["kind"] == step_bound.UNKNOWN and "grad_sync" not in old_two


def test_a_waiting_verdict_without_grown_communication_is_a_contradiction():
    one = sync_entry(1, busy_s=0.010, comm=[0.0001])
    two = sync_entry(2, busy_s=0.018, comm=[0.0002, 0.0003])
    verdicts(one, two)
    two["verdict"] = {"kind": step_bound.WAITING, "text": "waiting on the other ranks: made up"}
    found = []
    consistency_verdicts._kind(two, "configs[1]", {}, found)
    assert any("exposed communication did not grow" in v.message for v in found), found


# -- the summary's records ----------------------------------------------------------------------------------------


def test_the_wrappers_merge_over_launches_and_round_trip_through_the_summary():
    seen = rank_seen(2, micro=4, syncs=4, steps=60, comm=0.004, launches=2)
    (wrapper,) = seen["wrappers"]
    assert wrapper["sync_steps"] == [[4, 4, 60]] and len(wrapper["exposed_comm_s"]) == 2
    assert wrapper["exposed_comm_s"][0] == pytest.approx(0.004)
    entry = sync_entry(2, micro=4, syncs=4, comm=[0.004, 0.004])
    verdicts(sync_entry(1, micro=4, syncs=4, comm=[0.0001]), entry)
    written = json.loads(json.dumps(Summary.from_json({"configs": [entry]}).to_json()))
    assert json.loads(json.dumps(Summary.from_json(written).to_json())) == written
    assert Summary.from_json(written).configs[0].script.wrappers[0].site == SITE


def test_the_compute_vs_communication_table_has_a_script_s_row_from_ddp_s_timers():
    """A script's row beside the kernels': its step, no no_sync step, DDP's exposed communication (median and
    range over ranks) with its share, DDP's own columns; a configuration that synchronised nothing is named under
    the table with why."""
    from ddptop.report import communication_tables

    alone = sync_entry(2, wrappers=False)
    alone["config_id"] = alone["config_id"].replace("n2", "n2alone")
    entries = verdicts(sync_entry(1, micro=2, syncs=2, comm=[0.0002]), sync_entry(2, micro=2, syncs=2,
                                                                                   comm=[0.004, 0.005]), alone)
    summary = Summary.from_json({"configs": list(entries)})
    block = communication_tables.communication_block(summary)
    (table,) = [part for part in block.parts if isinstance(part, blocks.Table)]
    row = table.rows[1]
    cell = dict(zip(table.header, row))
    assert cell["no_sync p50"] == "-" and cell["buckets in flight"] == "-" and cell["DDP busbw"] == "-"
    assert cell["exposed comm"].startswith("DDP 4.5 ms (4.0–5.0 ms), ") and cell["DDP comm"] == "2.0 ms"
    assert cell["step p50"] == f"{entries[1]['stats']['sec_iter']['p50'] * 1e3:.1f} ms"
    notes = [part.text for part in block.parts if isinstance(part, blocks.Note)]
    assert any(note.startswith("A script's row: no no_sync p50") for note in notes)
    assert any("No row for" in note and "no gradient synchronised" in note for note in notes), notes


def test_a_script_whose_traced_steps_left_the_gpu_waiting_for_the_host_is_host_bound_as_a_kernel_is():
    """Its profiler trace (after the measured steps) shows the GPU idle in every traced step, waiting for the host:
    the same rule and words as a kernel's; the same trace on the CPU, or one the profiler slowed, says nothing."""
    from tests.test_traces import kineto_trace, traced

    def with_trace(device, step_s=0.0007):
        (one,) = verdicts(sync_entry(1))
        one.update(device=device, trace=traced({0: kineto_trace(3, 4, 100.0, 60.0)}, "cuda",
                                               rank0={"step_s": [step_s] * 3}).to_json())
        one["stats"]["sec_iter"]["p50"] = 0.0007
        return step_bound.verdict(one)

    said = with_trace("cuda")
    assert said["kind"] == step_bound.HOST, said
    assert said["text"].startswith("host-bound: the GPU sat idle 43% of the step (every one of 3 traced steps"), said
    assert with_trace("cpu")["kind"] == step_bound.COMPUTE
    assert with_trace("cuda", step_s=0.0014)["kind"] == step_bound.COMPUTE  # traced at 2x: not the measured steps'


def test_a_summary_without_wrappers_is_written_back_as_it_was():
    (entry,) = judged(script_entry(2))
    doc = written({"configs": [entry]})
    assert Summary.from_json(doc).to_json()["configs"][0].keys() == doc["configs"][0].keys()
    assert "wrappers" not in Summary.from_json(doc).to_json()["configs"][0]["script"]


# -- real launches --------------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_script_with_a_process_group_and_no_ddp_trains_alone(tmp_path):
    configs, report, _ = run_script(tmp_path, "alone", "1,2", "alone")
    assert configs[2]["verdict"]["kind"] == step_bound.NOT_DATA_PARALLEL, configs[2]["verdict"]
    assert "the ranks train alone" in configs[2]["verdict"]["text"]
    assert configs[1]["verdict"]["kind"] != step_bound.NOT_DATA_PARALLEL
    assert "waiting on the other ranks" not in report and "Not scaling (N=2 not data-parallel)" in report, report


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ddp", "shard"])
def test_accumulating_four_micro_batches_each_synchronising_is_told_the_fix_at_its_line(tmp_path, mode):
    configs, report, site = run_script(tmp_path, "every", "2", mode, accumulate=4)
    text = configs[2]["verdict"]["text"]
    assert "gradients synchronised on every micro-batch: 4 micro-batches a step" in text, text
    if mode == "ddp":
        assert f"DistributedDataParallel made at {site}" in text and "model.no_sync()" in text
        assert f"DistributedDataParallel at {site} (bucket_cap_mb=1): 4 syncs over 4 micro-batches a step" in report
        assert configs[2]["grad_sync"]["exposed_comm_s"] is not None  # DDP's own timers read
    else:  # fully_shard: counted on its root, no timers of its own (not said as measured)
        assert f"fully_shard made at {site}" in text and "set_requires_gradient_sync(False)" in text, text
        assert f"fully_shard at {site}: 4 syncs over 4 micro-batches a step" in report, report
        assert "exposed_comm_s" not in configs[2]["grad_sync"]


@pytest.mark.slow
def test_ddp_accumulating_inside_no_sync_is_not_told_to_use_it(tmp_path):
    configs, report, _ = run_script(tmp_path, "quiet", "2", "nosync", accumulate=4)
    assert configs[2]["grad_sync"]["syncs"] == 1 and configs[2]["grad_sync"]["micro_batches"] == 4
    assert "every micro-batch" not in configs[2]["verdict"]["text"] and "1 sync over 4 micro-batches" in report


@pytest.mark.slow
def test_a_script_without_a_process_group_at_world_size_1_scales_from_its_serial_baseline(tmp_path):
    configs, report, _ = run_script(tmp_path, "serial", "1,2", "serial1")
    assert configs[1]["script"]["process_group"] is False
    assert all(c["verdict"]["kind"] != step_bound.NOT_DATA_PARALLEL for c in configs.values()), configs
    assert "not data-parallel" not in report and "Not scaling" not in report, report
    assert "serial baseline" in report


