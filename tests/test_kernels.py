"""The kernel's parts that run without torchrun: the step loop, the time budget, the bucket timer's
arithmetic, DDP's logging data, the CPU memory cap, and the communication probe on a one-rank gloo group."""

from __future__ import annotations

import gc
import math
import weakref

import pytest

from bench_kernels.comm_probe import ddp_logging_times, merge_intervals, probe_communication
from bench_kernels.memory_cap import MIB, activation_bytes, check_cpu_memory_cap, step_memory_bytes
from bench_kernels.timing import MAX_BUDGET_ITERS, InjectedFault, SampleStream, budget_iterations, run_steps
from ddptop.protocol.wire import EventFileReader, EventWriter


def _writer(tmp_path, flush_interval=0.0):
    path = str(tmp_path / "rank-0.jsonl")
    return path, EventWriter(path, 0, flush_interval)


def _samples(path):
    return [e for e in EventFileReader(path).read_rest() if e["type"] == "samples"]


# -- the step loop ---------------------------------------------------------------------------------------------

def test_every_step_is_timed_alone_and_streamed_in_order(tmp_path):
    path, writer = _writer(tmp_path, flush_interval=3600)  # one batch at the end of the phase
    calls = []
    timing = run_steps(lambda: calls.append(1), 5, SampleStream(writer, "c", "measure", 5))
    assert len(calls) == 5 and len(timing.samples) == 5
    assert all(s >= 0 for s in timing.samples) and timing.wall_s >= sum(timing.samples)
    (event,) = _samples(path)  # flushed at the end of the phase
    assert (event["config_id"], event["phase"], event["first_iter"], event["of"]) == ("c", "measure", 0, 5)
    assert event["sec"] == timing.samples


def test_samples_are_sent_between_steps_at_the_flush_interval(tmp_path):
    path, writer = _writer(tmp_path, flush_interval=0.0)  # every step is past the interval
    seen_on_disk = []
    stream = SampleStream(writer, "c", "warmup", 3)
    run_steps(lambda: seen_on_disk.append(len(_samples(path))), 3, stream)
    assert seen_on_disk == [0, 1, 2]  # each step's time was on disk before the next step began
    assert [e["first_iter"] for e in _samples(path)] == [0, 1, 2]


def test_an_injected_fault_fires_before_its_step_with_the_earlier_samples_on_disk(tmp_path):
    path, writer = _writer(tmp_path, flush_interval=3600)
    steps = []

    def fire():
        assert sum(len(e["sec"]) for e in _samples(path)) == 2
        raise RuntimeError("injected")

    with pytest.raises(RuntimeError, match="injected"):
        run_steps(lambda: steps.append(1), 6, SampleStream(writer, "c", "measure", 6), InjectedFault(2, fire))
    assert len(steps) == 2


class _Terminated(BaseException):
    """As the worker's signal handler raises it: not an Exception."""


@pytest.mark.parametrize("error", [MemoryError, _Terminated])
def test_a_failing_or_stopped_step_still_sends_what_was_measured(tmp_path, error):
    path, writer = _writer(tmp_path, flush_interval=3600)
    count = 0

    def step():
        nonlocal count
        count += 1
        if count == 4:
            raise error("out of memory")

    with pytest.raises(error):
        run_steps(step, 10, SampleStream(writer, "c", "measure", 10))
    writer.flush()  # what the worker does after reporting the error, or closing on a signal
    assert sum(len(e["sec"]) for e in _samples(path)) == 3


def test_the_time_budget_is_filled_at_the_warmup_median():
    assert budget_iterations(1.0, [0.5, 0.1, 0.1]) == 10  # the median, not the slow first step
    assert budget_iterations(0.25, [0.1, 0.1]) == 3  # rounded up: at least the budget
    assert budget_iterations(1e-9, [1.0]) == 1
    assert budget_iterations(2.0, []) == 2  # no warm-up: one second a step
    assert budget_iterations(10.0, [0.0]) == MAX_BUDGET_ITERS


# -- the bucket timer and DDP's logging data -------------------------------------------------------------------

def test_bucket_intervals_merge_into_time_in_flight():
    step = merge_intervals([(3.0, 4.0, 10), (0.0, 1.0, 100), (0.5, 2.0, 1000)])
    assert step["busy_s"] == pytest.approx(3.0)  # 0..2 and 3..4
    assert step["sum_s"] == pytest.approx(1.0 + 1.0 + 1.5)
    assert (step["buckets"], step["bytes"]) == (3, 1110)


def test_ddp_logging_times_are_seconds_and_absent_when_unavailable():
    class Net:
        def _get_ddp_logging_data(self):
            return {"avg_forward_compute_time": 2_000_000, "avg_backward_comm_time": 0, "iteration": 7,
                    "rebuilt_bucket_sizes": "100, 200", "bucket_cap_bytes": "x"}

    assert ddp_logging_times(Net()) == {"forward_compute_s": 0.002, "iteration": 7, "bucket_sizes": [100, 200]}
    assert ddp_logging_times(object()) is None

    class Broken:
        def _get_ddp_logging_data(self):
            raise RuntimeError("changed in this torch")

    assert ddp_logging_times(Broken()) is None


# -- the CPU memory cap ----------------------------------------------------------------------------------------

def test_a_step_needs_weights_gradients_momentum_input_and_activations():
    assert step_memory_bytes(grad_bytes=100, input_bytes=20, activation_bytes=7.5) == 327.5


def test_activations_are_counted_on_two_examples_and_scaled_to_the_batch():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    model.train()
    inputs = torch.randn(10, 4)
    # per example, float32: 8 (linear) + 8 (relu) + 3 (linear) outputs
    assert activation_bytes(model, inputs) == 10 * (8 + 8 + 3) * 4
    assert model.training  # the counting pass leaves the model as it found it
    assert all(not m._forward_hooks for m in model.modules())


def test_a_step_past_the_cpu_cap_is_out_of_memory():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256))
    inputs = torch.randn(512, 256)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    need = step_memory_bytes(grad_bytes, inputs.numel() * 4, activation_bytes(model, inputs))
    check_cpu_memory_cap(model, inputs, grad_bytes, math.ceil(need / MIB))
    with pytest.raises(torch.OutOfMemoryError, match="under the memory cap: a step needs about 2 MiB, the cap is 1"):
        check_cpu_memory_cap(model, inputs, grad_bytes, 1)


# -- the communication probe on a one-rank group ---------------------------------------------------------------

@pytest.fixture
def one_rank_group():
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch
    finally:
        dist.destroy_process_group()


def test_the_probe_times_buckets_on_a_second_wrapper_after_releasing_the_first(tmp_path, one_rank_group):
    from bench_kernels.workload import build_workload
    from ddptop.protocol.launchspec import RunConfig
    from ddptop.protocol.vocab import Mode, Scaling

    cfg = RunConfig(config_id="c", model="tests.tiny_models:tiny_cnn", mode=Mode.DDP, batch_size=2, global_batch=2,
                    world_size=1, nnodes=1, backend="gloo", device="cpu", scaling=Scaling.WEAK, image_size=32,
                    num_classes=10, warmup=1, iters=2, time_budget=None, bucket_cap_mb=25.0, amp=None,
                    channels_last=False, comm_iters=3)
    workload = build_workload(cfg, one_rank_group.device("cpu"), local_rank=0, rank=0)
    measured = weakref.ref(workload.net)
    workload.step_through(workload.net)()
    path, writer = _writer(tmp_path)
    fields = probe_communication(workload, cfg, 0, SampleStream(writer, "c", "nosync", 3), 3)
    gc.collect()
    assert measured() is None and workload.net is not None  # only the hooked wrapper is left
    assert sum(len(e["sec"]) for e in _samples(path) if e["phase"] == "nosync") == 3
    assert len(fields["hooked_step_s"]) == 3
    assert fields["bucket_bytes"] == [workload.grad_bytes] * 3  # every gradient byte through the hook once
    assert all(0 <= busy <= total for busy, total in zip(fields["bucket_comm_s"], fields["bucket_sum_s"]))
