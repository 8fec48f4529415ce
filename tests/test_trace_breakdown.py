"""The step breakdown of a torch.profiler trace (ddptop.analysis.trace_breakdown, and over ranks
ddptop.analysis.traces.combine), on hand-written traces whose every figure is known, and on a real CPU trace
of a two-rank gloo run (tests/data/traces).

The hand traces give times in microseconds, as Kineto does; the figures come back in seconds, which
``in_us`` turns back into microseconds (to the nanosecond) so that each expectation reads as the trace does.
The expectations read the results as JSON (``to_json``): the shape a rank's event carried in runs recorded
before ddptop broke the files down itself, and the summary's.
"""

import gzip
import json
import os
import random

import pytest

from ddptop.analysis import trace_breakdown as tb
from ddptop.analysis import traces
from ddptop.analysis.trace_breakdown import RankBreakdown
from ddptop.analysis.trace_file import TraceUnreadable, read_trace

TRACES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "traces")
PID = 1  # the rank's process
GPU_PID = 0  # Kineto's pid for GPU 0


def breakdown(trace: dict, device: str, **options) -> dict:
    """One rank's breakdown, as JSON."""
    return tb.breakdown(trace, device, **options).to_json()


def combine(per_rank: list[dict]) -> dict:
    """The ranks' breakdowns (as JSON, as a recorded rank's event carried them) put together, as JSON."""
    return traces.combine([RankBreakdown.from_json(rank) for rank in per_rank]).to_json()


def in_us(row: dict) -> dict:
    """A step's figures in microseconds (to the nanosecond), its number as is."""
    return {key: value if key == "step" or value is None else round(value * 1e6, 3) for key, value in row.items()}


def op(name, ts, dur, tid=1, cat="cpu_op", pid=PID):
    return {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def step(number, ts, dur, cat="user_annotation"):
    return op(f"ProfilerStep#{number}", ts, dur, cat=cat)


def launch(correlation, ts, name="cudaLaunchKernel", cat="cuda_runtime", tid=1):
    return {"ph": "X", "cat": cat, "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": 0.5,
            "args": {"correlation": correlation}}


def gpu(name, correlation, ts, dur, stream=7, cat="kernel"):
    return {"ph": "X", "cat": cat, "name": name, "pid": GPU_PID, "tid": stream, "ts": ts, "dur": dur,
            "args": {"device": 0, "stream": stream, "correlation": correlation, "External id": correlation}}


NOISE = [  # what every trace carries and the breakdown ignores
    {"ph": "M", "name": "thread_name", "pid": PID, "tid": 5, "ts": 0, "args": {"name": "thread 5 (pt_gloo_runloop)"}},
    {"ph": "s", "id": 1, "pid": PID, "tid": 1, "ts": 3, "cat": "fwdbwd", "name": "fwdbwd"},
    {"ph": "f", "id": 1, "pid": PID, "tid": 1, "ts": 31, "cat": "fwdbwd", "name": "fwdbwd", "bp": "e"},
    {"ph": "i", "s": "g", "name": "Record Window End", "pid": "", "tid": "", "ts": 400},
    {"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans", "tid": "PyTorch Profiler", "ts": -50,
     "dur": 500, "args": {"Op count": 0}},
]


def gpu_trace() -> dict:
    """Step 1 (kept) and step 2 (the last, dropped) of a CUDA rank, in microseconds.

    Step 1's GPU time: gemm [10, 40) on stream 7 and [12, 18) on stream 21, an NCCL kernel [20, 50) on
    stream 13 (launched inside nccl:all_reduce, itself inside nccl:all_reduce_coalesced), a memcpy [60, 65)
    launched at 55, after the GPU had gone idle at 50; an NCCL AllGather [70, 80) launched at 6 (no nccl: op
    around it on its thread, one on another), which the GPU started late; a memset [80, 82); relu [100, 115),
    inside step 2's span but launched at 90, inside step 1's. Not counted: a zero-length kernel, a kernel
    without launch that would fill [85, 90), a gpu_user_annotation over the whole step, a kernel launched
    before every step.
    """
    events = [
        step(1, 0, 100), step(2, 100, 100),
        op("nccl:all_reduce_coalesced", 1.0, 2.5, cat="user_annotation"),
        op("nccl:all_reduce", 1.5, 1.5, cat="user_annotation"),
        op("nccl:all_gather", 5, 3, tid=2, cat="user_annotation"),
        launch(1, 0.5), gpu("gemm", 1, 10, 30),
        launch(2, 2.0), gpu("ncclDevKernel_Generic", 2, 20, 30, stream=13),
        launch(3, 4.0), gpu("gemm", 3, 12, 6, stream=21),
        launch(4, 6.0), gpu("ncclKernel_AllGather_RING_LL_Sum_int8", 4, 70, 10, stream=13),
        launch(5, 7.0, name="cudaMemsetAsync"), gpu("Memset (Device)", 5, 80, 2, cat="gpu_memset"),
        launch(6, 55.0, name="cudaMemcpyAsync"),
        gpu("Memcpy HtoD (Pageable -> Device)", 6, 60, 5, cat="gpu_memcpy"),
        launch(7, 90.0, name="cuLaunchKernel", cat="cuda_driver"), gpu("relu", 7, 100, 15),
        launch(8, 8.0), gpu("zero_length", 8, 30, 0),
        gpu("orphan", 9, 85, 5),
        gpu("nccl:all_reduce", 2, 0, 100, stream=13, cat="gpu_user_annotation"),
        launch(11, 150.0), gpu("step2_kernel", 11, 150, 10),
        launch(12, -10.0), gpu("before_steps", 12, -5, 4),
    ]
    return {"schemaVersion": 1, "traceEvents": events + NOISE}


def host_trace() -> dict:
    """Steps 1 and 2 (kept; step 2 spelled as older torch did, cat cpu_op) and 3 (dropped) of a gloo rank.

    The training thread (tid 1): step 1 holds aten::zeros [-4, 2) (half before the step), the forward
    [5, 25) with nested ops, a backward op [30, 60) with nested ops, the optimizer [80, 90); step 2 the
    forward [110, 130) and the optimizer [190, 205) (past the step's end). gloo's threads (5, 6):
    broadcast [20, 22), all_reduce [45, 70) and [50, 85), [150, 160), [195, 210), [250, 260). Neither an op
    of another thread (2) nor another process's gloo op over everything is this rank's training thread's.
    """
    events = [
        step(1, 0, 100), step(2, 100, 100, cat="cpu_op"), step(3, 200, 100),
        op("aten::zeros", -4, 6),
        op("DistributedDataParallel.forward", 5, 20, cat="user_annotation"),
        op("aten::linear", 6, 14), op("aten::addmm", 7, 12),
        op("autograd::engine::evaluate_function: AddmmBackward0", 30, 30),
        op("AddmmBackward0", 31, 28), op("c10d::allreduce_", 40, 2),
        op("Optimizer.step#SGD.step", 80, 10, cat="user_annotation"),
        op("DistributedDataParallel.forward", 110, 20, cat="user_annotation"), op("aten::linear", 111, 18),
        op("Optimizer.step#SGD.step", 190, 15, cat="user_annotation"),
        op("DistributedDataParallel.forward", 210, 20, cat="user_annotation"),
        op("aten::copy_", 60, 20, tid=2),  # another thread's (a data loader's): not the training thread's time
        op("gloo:broadcast", 20, 2, tid=6, cat="user_annotation"),
        op("gloo:all_reduce", 45, 25, tid=5, cat="user_annotation"),
        op("gloo:all_reduce", 50, 35, tid=6, cat="user_annotation"),
        op("gloo:all_reduce", 150, 10, tid=5, cat="user_annotation"),
        op("gloo:all_reduce", 195, 15, tid=6, cat="user_annotation"),
        op("gloo:all_reduce", 250, 10, tid=5, cat="user_annotation"),
        op("gloo:all_reduce", 0, 300, pid=2, cat="user_annotation"),
    ]
    return {"schemaVersion": 1, "traceEvents": events + NOISE}


# -- the GPU breakdown --------------------------------------------------------------------------------------


def test_a_gpu_step_is_the_union_over_streams_split_into_compute_communication_memory_and_overlap():
    result = breakdown(gpu_trace(), "cuda")
    assert result["device"] == "cuda" and result["note"] is None
    assert [in_us(row) for row in result["steps"]] == [{
        "step": 1,
        "window_s": 115.0,  # [0, 115): relu, launched in step 1, runs past its span
        "busy_s": 72.0,  # [10, 50) + [60, 65) + [70, 82) + [100, 115)
        "idle_s": 43.0,
        "compute_s": 45.0,  # gemm [10, 40) (with [12, 18) inside) + relu [100, 115)
        "communication_s": 40.0,  # [20, 50) + [70, 80)
        "memory_s": 7.0,  # memcpy [60, 65) + memset [80, 82)
        "overlap_s": 20.0,  # gemm and NCCL at once: [20, 40)
        "exposed_communication_s": 20.0,
        "idle_host_wait_s": 38.0,  # [0, 10) before the first kernel, [50, 60) memcpy launched at 55, [82, 100)
        "idle_other_s": 5.0,  # [65, 70): the AllGather was queued since 6
    }]


def test_one_process_driving_two_gpus_gets_a_row_per_gpu_so_an_idle_replica_shows_idle():
    """DataParallel: one process launches on GPU 0 (the gather and the loss too) and on its replica, GPU 1.
    GPU 0 runs [10, 90) of the step [0, 100) and GPU 1 only [10, 30): over both GPUs together the step would
    read 80% busy; each GPU's own row says GPU 1 idled 80 of its 100 us."""
    def on_gpu(device, name, correlation, ts, dur):
        event = gpu(name, correlation, ts, dur)
        event["pid"], event["args"]["device"] = device, device
        return event

    events = [step(1, 0, 100), step(2, 100, 100),
              launch(1, 1.0), on_gpu(0, "gemm", 1, 10, 80),
              launch(2, 2.0), on_gpu(1, "gemm", 2, 10, 20)]
    result = breakdown({"traceEvents": events}, "cuda")
    rows = {row["gpu"]: in_us(row) for row in result["steps"]}
    assert [row["step"] for row in result["steps"]] == [1, 1] and set(rows) == {0, 1}
    assert (rows[0]["window_s"], rows[0]["busy_s"], rows[0]["idle_s"]) == (100.0, 80.0, 20.0)
    assert (rows[1]["window_s"], rows[1]["busy_s"], rows[1]["idle_s"]) == (100.0, 20.0, 80.0)
    idle = combine([result])["figures"]["idle_s"]
    assert (idle["low"], idle["high"], idle["n"]) == (pytest.approx(0.2), pytest.approx(0.8), 2)
    one_gpu = breakdown(gpu_trace(), "cuda")["steps"]
    assert "gpu" not in one_gpu[0]  # a rank of one GPU keeps the row it always had


def test_idle_is_the_hosts_when_the_next_kernel_came_after_the_gap_began_and_other_when_it_was_queued():
    def split(memcpy_launch_at: float) -> tuple[float, float]:
        trace = gpu_trace()
        for event in trace["traceEvents"]:
            if event.get("cat") == "cuda_runtime" and event["args"]["correlation"] == 6:
                event["ts"] = memcpy_launch_at
        row = in_us(breakdown(trace, "cuda")["steps"][0])
        assert row["idle_host_wait_s"] + row["idle_other_s"] == row["idle_s"] == 43.0
        return row["idle_host_wait_s"], row["idle_other_s"]

    assert split(55.0) == (38.0, 5.0)  # launched after the GPU went idle at 50: the GPU waited for the host
    assert split(50.0) == (38.0, 5.0)  # launched as the gap began: the host's still
    assert split(49.0) == (28.0, 15.0)  # queued before the gap: [50, 60) waited on something else


def test_the_top_kernels_sum_durations_over_streams_with_memcpy_and_memset_and_both_nccl_namings():
    kernels = breakdown(gpu_trace(), "cuda")["kernels"]
    total = 98.0  # every counted event's duration, summed (not unioned): 36 + 30 + 15 + 10 + 5 + 2
    expected = [
        ("gemm", "computation", 2, 36.0), ("ncclDevKernel_Generic", "communication", 1, 30.0),
        ("relu", "computation", 1, 15.0), ("ncclKernel_AllGather_RING_LL_Sum_int8", "communication", 1, 10.0),
        ("Memcpy HtoD (Pageable -> Device)", "memory", 1, 5.0), ("Memset (Device)", "memory", 1, 2.0),
    ]
    assert [(k["name"], k["kind"], k["count"], round(k["total_s"] * 1e6, 3)) for k in kernels] == expected
    assert kernels[0]["mean_s"] == pytest.approx(18e-6, rel=1e-12)
    assert [k["share"] for k in kernels] == pytest.approx([t / total for *_, t in expected], rel=1e-12)
    assert [k["name"] for k in breakdown(gpu_trace(), "cuda", top=2)["kernels"]] == ["gemm", "ncclDevKernel_Generic"]


def test_a_collective_is_named_by_the_innermost_nccl_op_around_its_launch_on_the_launching_thread():
    """Not by the kernel's name: ncclDevKernel_Generic is the all_reduce; the AllGather kernel's launch has no
    nccl: op around it on its own thread (thread 2's nccl:all_gather around it in time is another thread's)."""
    collectives = breakdown(gpu_trace(), "cuda")["collectives"]
    assert [(c["name"], c["count"], round(c["total_s"] * 1e6, 3)) for c in collectives] == [
        ("nccl:all_reduce", 1, 30.0), ("unknown", 1, 10.0)]


def test_the_last_step_is_dropped_unless_asked_to_keep_it():
    kept = breakdown(gpu_trace(), "cuda", drop_last=False)
    assert [row["step"] for row in kept["steps"]] == [1, 2]
    assert in_us(kept["steps"][1]) == {
        "step": 2, "window_s": 100.0, "busy_s": 10.0, "idle_s": 90.0, "compute_s": 10.0, "communication_s": 0.0,
        "memory_s": 0.0, "overlap_s": 0.0, "exposed_communication_s": 0.0, "idle_host_wait_s": 90.0,
        "idle_other_s": 0.0}
    assert "step2_kernel" in [k["name"] for k in kept["kernels"]]
    assert "step2_kernel" not in [k["name"] for k in breakdown(gpu_trace(), "cuda")["kernels"]]


def test_a_kernel_the_gpu_clock_puts_before_its_step_widens_the_window():
    """Clock skew between CPU and GPU can put a kernel before its launch: the window reaches back to it."""
    trace = {"traceEvents": [step(1, 0, 100), step(2, 100, 100), launch(1, 1.0), gpu("gemm", 1, -3, 10)]}
    assert in_us(breakdown(trace, "cuda")["steps"][0]) == {
        "step": 1, "window_s": 103.0, "busy_s": 10.0, "idle_s": 93.0, "compute_s": 10.0, "communication_s": 0.0,
        "memory_s": 0.0, "overlap_s": 0.0, "exposed_communication_s": 0.0, "idle_host_wait_s": 93.0,
        "idle_other_s": 0.0}


def test_the_order_of_the_events_in_the_file_changes_nothing():
    for trace, device in ((gpu_trace(), "cuda"), (host_trace(), "cpu")):
        expected = breakdown(trace, device)
        for seed in range(5):
            shuffled = {**trace, "traceEvents": list(trace["traceEvents"])}
            random.Random(seed).shuffle(shuffled["traceEvents"])
            assert breakdown(shuffled, device) == expected


def test_a_cuda_run_whose_trace_holds_no_gpu_event_says_so_and_never_reads_all_idle():
    result = breakdown(host_trace(), "cuda")
    assert result["device"] == "cuda"
    assert result["note"] == "the trace holds no GPU kernel (CUPTI recorded none): no device breakdown"
    assert [in_us(row) for row in result["steps"]] == [
        {"step": number, "window_s": 100.0, **{key: None for key in tb.FIGURES if key != "window_s"}}
        for number in (1, 2)]
    assert result["kernels"] == [] and result["collectives"] == []


def test_gpu_events_make_a_gpu_breakdown_whatever_the_device_said():
    assert breakdown(gpu_trace(), "cpu") == breakdown(gpu_trace(), "cuda")


# -- the host (CPU) breakdown -------------------------------------------------------------------------------


def test_a_cpu_step_is_the_training_threads_busy_time_and_gloos_time_on_its_own_threads():
    result = breakdown(host_trace(), "cpu")
    assert result["device"] == "cpu" and result["note"] is None
    host_only = {"memory_s": None, "idle_host_wait_s": None, "idle_other_s": None}
    assert [in_us(row) for row in result["steps"]] == [
        {"step": 1, "window_s": 100.0,
         "busy_s": 62.0, "idle_s": 38.0, "compute_s": 62.0,  # [0, 2) clipped + [5, 25) + [30, 60) + [80, 90)
         "communication_s": 42.0,  # broadcast [20, 22) + all_reduce [45, 70) and [50, 85) on two threads
         "overlap_s": 22.0,  # [20, 22) + [45, 60) + [80, 85)
         "exposed_communication_s": 20.0, **host_only},
        {"step": 2, "window_s": 100.0,
         "busy_s": 30.0, "idle_s": 70.0, "compute_s": 30.0,  # [110, 130) + [190, 200) clipped
         "communication_s": 15.0,  # [150, 160) + [195, 200) clipped
         "overlap_s": 5.0, "exposed_communication_s": 10.0, **host_only},
    ]
    for row in result["steps"]:
        assert row["busy_s"] + row["idle_s"] == pytest.approx(row["window_s"], rel=1e-12)


def test_the_host_top_ops_are_the_training_threads_outermost_ops_and_the_collectives_gloos():
    result = breakdown(host_trace(), "cpu")
    expected = [  # over steps 1 and 2, clipped to each step: 92 in all, the steps' busy time
        ("DistributedDataParallel.forward", 2, 40.0), ("autograd::engine::evaluate_function: AddmmBackward0", 1, 30.0),
        ("Optimizer.step#SGD.step", 2, 20.0), ("aten::zeros", 1, 2.0),
    ]
    kernels = result["kernels"]
    assert [(k["name"], k["count"], round(k["total_s"] * 1e6, 3)) for k in kernels] == expected
    assert {k["kind"] for k in kernels} == {"host"}
    assert [k["mean_s"] for k in kernels] == pytest.approx([20e-6, 30e-6, 10e-6, 2e-6], rel=1e-12)
    assert [k["share"] for k in kernels] == pytest.approx([t / 92 for *_, t in expected], rel=1e-12)
    assert [(c["name"], c["count"], round(c["total_s"] * 1e6, 3)) for c in result["collectives"]] == [
        ("gloo:all_reduce", 4, 85.0), ("gloo:broadcast", 1, 2.0)]  # by start: [195, 210) is step 2's, whole


def test_a_trace_without_a_step_to_keep_says_why():
    no_step = {"traceEvents": [op("aten::mm", 0, 10)]}
    one_step = {"traceEvents": [step(7, 0, 10), op("aten::mm", 0, 10)]}
    for device in ("cpu", "cuda"):
        result = breakdown(no_step, device)
        assert result["steps"] == [] and result["note"] == "the trace holds no ProfilerStep span: no step to break down"
        result = breakdown(one_step, device)
        assert result["steps"] == [] and "dropped as the last" in result["note"]
    assert [row["step"] for row in breakdown(one_step, "cpu", drop_last=False)["steps"]] == [7]


def test_a_device_other_than_cuda_or_cpu_is_refused():
    with pytest.raises(ValueError, match="mps"):
        breakdown(gpu_trace(), "mps")


def test_the_interval_helpers_merge_touching_and_nested_intervals_and_intersect_by_a_sweep():
    assert tb.union([(5, 7), (0, 2), (2, 3), (1, 2), (6, 6)]) == [(0, 3), (5, 7)]
    assert tb.intersection([(0, 3), (5, 7)], [(2, 6), (7, 9)]) == [(2, 3), (5, 6)]
    assert tb.intersection([(0, 10)], []) == []


def test_a_breakdown_read_back_from_its_json_is_the_same():
    """What a recorded rank's event carried reads back as the breakdown it was (a run recorded before
    ddptop broke the files down itself is reported from it where its files are gone)."""
    dataparallel = {"traceEvents": gpu_trace()["traceEvents"] + [
        dict(e, args=dict(e["args"], device=1)) for e in gpu_trace()["traceEvents"] if e.get("cat") == "kernel"]}
    for trace, device in ((gpu_trace(), "cuda"), (host_trace(), "cpu"), (host_trace(), "cuda"), (dataparallel, "cuda")):
        found = tb.breakdown(trace, device)
        assert RankBreakdown.from_json(json.loads(json.dumps(found.to_json()))) == found


# -- over ranks ---------------------------------------------------------------------------------------------


def _step(number, window, busy, compute, communication, memory, overlap, host_wait, other):
    return {"step": number, "window_s": window, "busy_s": busy, "idle_s": window - busy, "compute_s": compute,
            "communication_s": communication, "memory_s": memory, "overlap_s": overlap,
            "exposed_communication_s": communication - overlap, "idle_host_wait_s": host_wait,
            "idle_other_s": other}


def _kernel(name, kind, count, total, share):
    return {"name": name, "kind": kind, "count": count, "total_s": total, "mean_s": total / count, "share": share}


def test_combine_gives_each_figure_as_a_share_of_its_window_over_every_rank_and_step():
    rank0 = {"device": "cuda", "note": None,
             "steps": [_step(1, 2.0, 1.0, 0.8, 0.4, 0.2, 0.1, 0.6, 0.4),
                       _step(2, 4.0, 3.0, 2.0, 2.0, 0.0, 1.0, 1.0, 0.0)],
             "kernels": [_kernel("gemm", "computation", 2, 1.0, 0.5),  # the top two of 2.0 s of kernels
                         _kernel("nccl", "communication", 1, 0.5, 0.25)],
             "collectives": [{"name": "nccl:all_reduce", "count": 2, "total_s": 0.4},
                             {"name": "unknown", "count": 1, "total_s": 0.1}]}
    rank1 = {"device": "cuda", "note": None,
             "steps": [_step(1, 1.0, 0.5, 0.5, 0.0, 0.0, 0.0, 0.25, 0.25),
                       _step(2, 2.0, 1.0, 1.0, 0.5, 0.0, 0.5, 1.0, 0.0)],
             "kernels": [_kernel("gemm", "computation", 1, 0.5, 1.0)],
             "collectives": [{"name": "nccl:all_reduce", "count": 1, "total_s": 0.5}]}
    rank2 = breakdown(host_trace(), "cuda")  # CUPTI recorded nothing: windows of 100 µs alone
    combined = combine([rank0, rank1, rank2])
    assert combined["device"] == "cuda" and combined["steps"] == 6
    assert combined["notes"] == [tb.NO_GPU_EVENT_NOTE]
    expected = {  # (median, low, high, n) of the fractions of the windows 2, 4, 1 and 2 (rank 2's: None)
        "busy_s": (0.5, 0.5, 0.75, 4), "idle_s": (0.5, 0.25, 0.5, 4), "compute_s": (0.5, 0.4, 0.5, 4),
        "communication_s": (0.225, 0.0, 0.5, 4), "memory_s": (0.0, 0.0, 0.1, 4), "overlap_s": (0.15, 0.0, 0.25, 4),
        "exposed_communication_s": (0.075, 0.0, 0.25, 4), "idle_host_wait_s": (0.275, 0.25, 0.5, 4),
        "idle_other_s": (0.1, 0.0, 0.25, 4),
        "window_s": (1.5, 1e-4, 4.0, 6),  # seconds: 2, 4, 1, 2 and rank 2's 100 µs twice
    }
    for key, (median, low, high, n) in expected.items():
        figure = combined["figures"][key]
        spread = (figure["median"], figure["low"], figure["high"])
        assert spread == pytest.approx((median, low, high), rel=1e-12), key
        assert figure["n"] == n, key
    assert combined["overlap_share"] == pytest.approx({"median": 0.5, "low": 0.25, "high": 1.0, "n": 3}, rel=1e-12)
    kernels = combined["kernels"]  # the shares are of 2.5 s: rank 0's 2.0 (its rows show 1.5) and rank 1's 0.5
    assert [(k["name"], k["kind"], k["count"]) for k in kernels] == [
        ("gemm", "computation", 3), ("nccl", "communication", 1)]
    assert [(k["total_s"], k["mean_s"], k["share"]) for k in kernels] == [
        pytest.approx((1.5, 0.5, 0.6), rel=1e-12), pytest.approx((0.5, 0.5, 0.2), rel=1e-12)]
    collectives = combined["collectives"]
    assert [(c["name"], c["count"]) for c in collectives] == [("nccl:all_reduce", 3), ("unknown", 1)]
    assert [c["total_s"] for c in collectives] == pytest.approx([0.9, 0.1], rel=1e-12)


def test_combine_of_host_breakdowns_has_no_figure_a_host_cannot_give():
    combined = combine([breakdown(host_trace(), "cpu")] * 2)
    assert combined["device"] == "cpu" and combined["steps"] == 4 and combined["notes"] == []
    assert combined["figures"]["memory_s"] is None and combined["figures"]["idle_other_s"] is None
    assert combined["figures"]["busy_s"] == pytest.approx({"median": 0.46, "low": 0.3, "high": 0.62, "n": 4})
    assert combined["overlap_share"] == pytest.approx({"median": (22 / 42 + 5 / 15) / 2, "low": 1 / 3,
                                                       "high": 22 / 42, "n": 4})
    assert [(k["name"], k["count"]) for k in combined["kernels"]][:1] == [("DistributedDataParallel.forward", 4)]
    assert combined["kernels"][0]["share"] == pytest.approx(40 / 92)


# -- reading ------------------------------------------------------------------------------------------------


def test_read_trace_reads_a_gzip_trace_and_a_plain_one(tmp_path):
    trace = gpu_trace()
    packed = tmp_path / "rank0.pt.trace.json.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as file:
        json.dump(trace, file)
    plain = tmp_path / "rank0.pt.trace.json"
    plain.write_text(json.dumps(trace), encoding="utf-8")
    assert read_trace(str(packed)) == read_trace(str(plain)) == trace
    assert breakdown(read_trace(str(packed)), "cuda") == breakdown(trace, "cuda")


def test_a_broken_trace_file_raises_trace_unreadable_in_one_line(tmp_path):
    packed = gzip.compress(json.dumps(gpu_trace()).encode())
    cases = {
        "truncated.json.gz": packed[: len(packed) // 2],
        "not-gzip.json.gz": b"{\"traceEvents\": []}",
        "not-json.json": b"{\"traceEvents\": [",
        "no-events.json": b"{\"schemaVersion\": 1}",
        "a-list.json": b"[]",
    }
    for name, content in cases.items():
        (tmp_path / name).write_bytes(content)
    for name in [*cases, "missing.json.gz"]:
        path = str(tmp_path / name)
        with pytest.raises(TraceUnreadable) as raised:
            read_trace(path)
        message = str(raised.value)
        assert isinstance(raised.value, ValueError)
        assert message.startswith(path) and "\n" not in message, message


# -- a real trace -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("rank", [0, 1])
def test_a_real_gloo_trace_breaks_down_into_steps_that_add_up(rank):
    """Two ranks of a small MLP under gloo on CPU (torch.profiler, ProfilerStep#1 to #4): steps 1-3 kept."""
    result = breakdown(read_trace(os.path.join(TRACES, f"gloo-rank{rank}.pt.trace.json.gz")), "cpu")
    assert result["device"] == "cpu" and result["note"] is None
    assert [row["step"] for row in result["steps"]] == [1, 2, 3]
    for row in result["steps"]:
        assert row["busy_s"] + row["idle_s"] == pytest.approx(row["window_s"], rel=1e-9)
        assert 0 < row["busy_s"] < row["window_s"] and row["communication_s"] > 0
        assert 0 <= row["overlap_s"] <= min(row["communication_s"], row["busy_s"])
    assert [(c["name"], c["count"]) for c in result["collectives"]] == [("gloo:all_reduce", 6)]  # 2 buckets x 3 steps
    assert "DistributedDataParallel.forward" in [k["name"] for k in result["kernels"]]
    assert sum(k["share"] for k in result["kernels"]) <= 1.0 + 1e-12


def test_combine_over_the_real_gloo_ranks():
    ranks = [breakdown(read_trace(os.path.join(TRACES, f"gloo-rank{r}.pt.trace.json.gz")), "cpu") for r in (0, 1)]
    combined = combine(ranks)
    assert combined["device"] == "cpu" and combined["steps"] == 6
    assert combined["figures"]["busy_s"]["n"] == 6 and combined["overlap_share"]["n"] == 6
    busy, idle = combined["figures"]["busy_s"], combined["figures"]["idle_s"]
    assert busy["low"] + idle["high"] == pytest.approx(1.0, rel=1e-9)  # the least busy step is the most idle
    assert combined["collectives"][0]["name"] == "gloo:all_reduce" and combined["collectives"][0]["count"] == 12
