"""The kernel's parts that run without torchrun: the step loop, the time budget, the bucket timer's
arithmetic, DDP's logging data, the CPU memory cap, and the communication probe on a one-rank gloo group."""

from __future__ import annotations

import gc
import math
import weakref

import pytest

from bench_kernels.comm_probe import merge_intervals, probe_communication
from bench_kernels.ddp_logging import ddp_logging_times
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
    # and the loss's log-probabilities, the size of the output (3 per example), which cross-entropy keeps
    assert activation_bytes(model, inputs, with_loss=True) == 10 * (8 + 8 + 3 + 3) * 4
    assert model.training  # the counting pass leaves the model as it found it
    assert all(not m._forward_hooks for m in model.modules())


def test_a_step_past_the_cpu_cap_is_out_of_memory():
    torch = pytest.importorskip("torch")
    model = torch.nn.Sequential(torch.nn.Linear(256, 256))
    inputs = torch.randn(512, 256)
    grad_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    need = step_memory_bytes(grad_bytes, inputs.numel() * 4, activation_bytes(model, inputs, with_loss=True))
    check_cpu_memory_cap(model, inputs, grad_bytes, math.ceil(need / MIB))
    with pytest.raises(torch.OutOfMemoryError, match="under the memory cap: a step needs about 2 MiB, the cap is 1"):
        check_cpu_memory_cap(model, inputs, grad_bytes, 1)


# -- the communication probe on a one-rank group ---------------------------------------------------------------



def test_the_probe_times_buckets_on_a_second_wrapper_after_releasing_the_first(tmp_path, one_rank_group):
    from bench_kernels.training import build_training
    from ddptop.protocol.launchspec import RunConfig
    from ddptop.protocol.vocab import Mode, Scaling

    cfg = RunConfig(config_id="c", model="tests.tiny_models:tiny_cnn", mode=Mode.DDP, batch_size=2, global_batch=2,
                    world_size=1, nnodes=1, backend="gloo", device="cpu", scaling=Scaling.WEAK, image_size=32,
                    num_classes=10, warmup=1, iters=2, time_budget=None, bucket_cap_mb=25.0, amp=None,
                    channels_last=False, comm_iters=3)
    workload = build_training(cfg, one_rank_group.device("cpu"), local_rank=0, rank=0)
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


def test_the_bucket_hook_takes_the_squared_gradient_norm_on_either_side_of_the_allreduce(one_rank_group):
    """One synchronisation a step: the sum over buckets of each bucket's squared norm is the whole gradient's,
    as the bare model's own backward gives it; on one rank the average is the local gradient itself."""
    import torch
    import torch.distributed as dist

    from bench_kernels.comm_probe import BucketTimer
    from bench_kernels.gradient_norms import GradientNorms

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 512), torch.nn.ReLU(),
                                torch.nn.Linear(512, 3))
    inputs, targets = torch.randn(8, 64), torch.randint(0, 3, (8,))
    torch.nn.functional.cross_entropy(model(inputs), targets).backward()
    expected = sum(float(p.grad.double().square().sum()) for p in model.parameters())
    model.zero_grad(set_to_none=True)
    ddp = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.5)  # several buckets
    timer = BucketTimer(dist, torch, torch.device("cpu"), "gloo")
    timer.norms = GradientNorms(torch)
    ddp.register_comm_hook(None, timer.hook)
    for _ in range(2):
        timer.begin_step()
        torch.nn.functional.cross_entropy(ddp(inputs), targets).backward()
        ddp.zero_grad(set_to_none=True)
    timer.finish()
    assert timer.steps[-1]["buckets"] > 1  # DDP rebuilds its buckets at the cap after its first step
    assert len(timer.synchronisations) == 2
    local, averaged = timer.synchronisations[-1]
    # float32 sums against a float64 reference: alike to a few parts in 10^5
    assert local == pytest.approx(expected, rel=1e-4) and averaged == pytest.approx(local, rel=1e-6)


# -- adaptive measurement: until precise, warm-up until steady, rounds ------------------------------------------

from bench_kernels.timing import (  # noqa: E402
    MAX_ITERS,
    MAX_TIME,
    PRECISION,
    STEADY,
    StopRule,
    measure_until_precise,
    warm_up_until_steady,
)


class _Clock:
    """A fake ``time.perf_counter``: each fake step advances it by that step's time, so the loops run on a
    synthetic series instantly and the step times they record are exactly the series."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def fake_clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr("bench_kernels.timing.time.perf_counter", clock)
    return clock


def _series_step(clock, series):
    """A step that takes the next value of ``series`` seconds on the fake clock."""
    values = iter(series)
    taken = []

    def step():
        seconds = next(values)
        taken.append(seconds)
        clock.now += seconds

    return step, taken


def _noisy(n, spread, seed=7):
    import random

    rng = random.Random(seed)
    return [0.1 * (1 + spread * (rng.random() - 0.5) * 2) for _ in range(n)]


def test_a_quiet_series_stops_early_on_precision(tmp_path, fake_clock):
    _, writer = _writer(tmp_path)
    step, taken = _series_step(fake_clock, _noisy(1000, 0.01))
    rule = StopRule(precision=0.05, min_iters=10, max_iters=200, max_time=1000.0)
    timing = measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 10))
    assert timing.stop_reason == PRECISION
    assert len(taken) == len(timing.samples) == 15  # min_iters, then one more block that stays precise
    assert timing.half_width is not None and timing.half_width <= 0.05
    assert timing.agreed_half_width == timing.half_width  # alone: its own


def test_a_noisy_series_runs_to_max_iters_and_is_unstable(tmp_path, fake_clock):
    path, writer = _writer(tmp_path, flush_interval=3600)
    step, taken = _series_step(fake_clock, _noisy(1000, 0.9))  # each step 0.01..0.19 s
    rule = StopRule(precision=0.001, min_iters=10, max_iters=37, max_time=1000.0)
    timing = measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 10))
    assert timing.stop_reason == MAX_ITERS and len(taken) == 37  # the last block shortened to the limit
    assert timing.half_width > 0.001
    events = _samples(path)
    assert sum(len(e["sec"]) for e in events) == 37 and events[-1]["of"] == 37  # the projection ends exact


def test_the_time_limit_stops_within_a_step_and_wins_over_min_iters(tmp_path, fake_clock):
    _, writer = _writer(tmp_path)
    step, taken = _series_step(fake_clock, [1.0] * 100)
    rule = StopRule(precision=0.05, min_iters=50, max_iters=100, max_time=7.5)
    timing = measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 50))
    assert timing.stop_reason == MAX_TIME
    assert len(taken) == 8  # 5, then blocks cut to the time left: 3 more reach 8 s >= 7.5 s


def test_every_rank_takes_the_widest_half_width_so_all_stop_at_the_same_step(tmp_path, fake_clock):
    _, writer = _writer(tmp_path)
    looks = []

    def agree(values):  # another rank, still imprecise until 25 steps are measured
        looks.append(list(values))
        other = [math.inf if len(looks) * 5 < 25 else 0.0, 0.0, 0.0]
        return [max(a, b) for a, b in zip(values, other)]

    step, taken = _series_step(fake_clock, _noisy(1000, 0.01))
    rule = StopRule(precision=0.05, min_iters=10, max_iters=200, max_time=1000.0)
    timing = measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 10), agree)
    assert timing.stop_reason == PRECISION and len(taken) == 30  # precise everywhere at 25 and again at 30
    assert len(looks) == 6 and looks[0][0] == math.inf  # below min_iters this rank has no precision yet
    assert all(look[1] >= 0 for look in looks)  # its elapsed time is shared too


def test_the_agreement_never_runs_inside_a_timed_step(tmp_path, fake_clock):
    _, writer = _writer(tmp_path)
    in_step = False
    seen_inside = []

    def step():
        nonlocal in_step
        in_step = True
        fake_clock.now += 0.1
        in_step = False

    def agree(values):
        seen_inside.append(in_step)
        return values

    rule = StopRule(precision=0.5, min_iters=10, max_iters=30, max_time=1000.0)
    measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 10), agree)
    assert seen_inside and not any(seen_inside)


def test_the_warm_up_ends_when_a_falling_step_time_levels_off(tmp_path, fake_clock):
    path, writer = _writer(tmp_path, flush_interval=3600)
    falling = [1.0, 0.9, 0.8, 0.6, 0.5, 0.4, 0.3, 0.25, 0.2] + [0.1] * 100  # levels off at 0.1 from step 9
    step, taken = _series_step(fake_clock, falling)
    timing = warm_up_until_steady(step, 3, 0.05, 50, 1000.0, SampleStream(writer, "c", "warmup", 50))
    assert timing.stop_reason == STEADY
    # windows' medians 0.9, 0.5, 0.25, 0.1, 0.1: the fifth is the first not lower than the fourth
    assert len(taken) == len(timing.samples) == 15
    assert _samples(path)[-1]["of"] == 15


def test_the_warm_up_needs_two_windows_and_stops_at_its_limits(tmp_path, fake_clock):
    _, writer = _writer(tmp_path)
    step, taken = _series_step(fake_clock, [0.1] * 100)
    assert warm_up_until_steady(step, 3, 0.05, 50, 1000.0, SampleStream(writer, "c", "warmup", 50)).stop_reason \
        == STEADY
    assert len(taken) == 6  # flat from the start: still two windows to compare
    step, taken = _series_step(fake_clock, [1.0 / (i + 1) for i in range(100)])  # falls all the way
    timing = warm_up_until_steady(step, 3, 0.05, 10, 1000.0, SampleStream(writer, "c", "warmup", 10))
    assert (timing.stop_reason, len(taken)) == ("max_warmup", 10)  # the last window cut to the limit
    step, taken = _series_step(fake_clock, [1.0 / (i + 1) for i in range(100)])
    assert warm_up_until_steady(step, 3, 0.05, 50, 0.5, SampleStream(writer, "c", "warmup", 50)).stop_reason \
        == MAX_TIME


def test_launches_rotate_the_order_of_their_configurations():
    from ddptop.run.plan_records import rotated

    configs = ["A", "B", "C"]
    assert [rotated(configs, r) for r in range(4)] == [
        ["A", "B", "C"], ["B", "C", "A"], ["C", "A", "B"], ["A", "B", "C"]]
    assert rotated([], 2) == [] and rotated(["A"], 5) == ["A"]


def test_a_configuration_over_its_launches_sums_them_and_is_unstable_if_one_was():
    from ddptop.run.config_state import combine_round_ends

    quiet = dict(iters=10, warmup_s=1.0, measure_s=2.0, warmup_iters=6, stop_reason=PRECISION,
                 precision_reached=0.01, unstable=False, peak_memory_bytes=5)
    limit = dict(iters=20, warmup_s=0.5, measure_s=4.0, warmup_iters=3, stop_reason=MAX_TIME,
                 precision_reached=0.09, unstable=True, peak_memory_bytes=7)
    whole = combine_round_ends([quiet, limit])
    assert (whole["iters"], whole["warmup_iters"], whole["warmup_s"], whole["measure_s"]) == (30, 9, 1.5, 6.0)
    assert whole["stop_reason"] == MAX_TIME and whole["unstable"] and whole["peak_memory_bytes"] == 7
    assert whole["precision_reached"] == 0.09
    calm = combine_round_ends([quiet, quiet])
    assert calm["stop_reason"] == PRECISION and not calm["unstable"]


def test_samples_carry_their_round_only_when_there_are_rounds(tmp_path):
    path, writer = _writer(tmp_path, flush_interval=3600)
    run_steps(lambda: None, 2, SampleStream(writer, "c", "measure", 2))
    run_steps(lambda: None, 2, SampleStream(writer, "c", "measure", 2, round_index=1))
    first, second = _samples(path)
    assert "round" not in first and second["round"] == 1


# -- what the kernel writes of rounds and precision, as the session reads it ---------------------------------

def test_the_session_keeps_each_step_s_launch_and_ends_the_configuration_after_its_last_launch(tmp_path):
    import os

    from ddptop.run import rundir
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    plan = build_plan(PlanOptions(models=["resnet18"], world_sizes=[2], batch_sizes=[4], launches=2),
                      Inventory(problem="test"), cpu_count=2)
    (config,) = plan.configs()
    assert [(launch.replicate, launch.configs[0].round) for launch in plan.launches()] == [(0, 0), (1, 1)]
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), "launches"))
    cid = config.config_id
    writers: list[EventWriter] = []

    def launch(name):
        events = os.path.join(session.run_dir, "launches", name, "events")
        os.makedirs(events)
        writers[:] = [EventWriter(os.path.join(events, f"rank-{r}.jsonl"), r, 0.0) for r in range(2)]

    def both(kind, **fields):
        for writer in writers:
            writer.emit(kind, config_id=cid, **fields)
            writer.flush()
        session.refresh()

    common = dict(status="ok", rounds=2, stop_reason="precision", precision_target=0.05, warmup_s=0.1,
                  measure_s=1.0, analysis_s=None)
    launch("01-n2-gloo")
    both("config_start", warmup=None, iters=None, round=0, rounds=2, flops_per_step=1000)
    both("samples", phase="warmup", first_iter=0, of=50, sec=[0.3, 0.2, 0.2], round=0)
    both("samples", phase="measure", first_iter=0, of=10, sec=[0.1] * 10, round=0)
    state = session.configs[cid]
    assert state.progress() == pytest.approx(0.5 * 13 / 13)  # half the launches: the first one's steps all seen
    both("config_end", round=0, last=False, iters=10, warmup_iters=3, precision_reached=0.01, unstable=False,
         **common)
    assert state.status == "running" and state.progress() == pytest.approx(0.5)
    assert state.ended_round(0) and not state.ended_round(1)
    launch("02-n2-gloo")
    both("config_start", warmup=None, iters=None, round=1, rounds=2, flops_per_step=None)
    both("samples", phase="measure", first_iter=0, of=12, sec=[0.2] * 12, round=1)
    both("config_end", round=1, last=True, iters=12, warmup_iters=3, precision_reached=0.2, unstable=True,
         **{**common, "stop_reason": "max_iters"})
    assert state.status == "ok" and state.progress() == 1.0
    assert state.rounds_of_steps() == {0: [0] * 10 + [1] * 12, 1: [0] * 10 + [1] * 12}
    names = ["01-n2-gloo"] * 10 + ["02-n2-gloo"] * 12
    assert state.launches_of_steps() == {0: names, 1: names}
    assert state.launch_names() == ["01-n2-gloo", "02-n2-gloo"]
    assert [w[0] for w in state.launch_windows()] == ["01-n2-gloo", "02-n2-gloo"]
    # the configuration's end adds up its launches; the FLOPs counted in the first launch are kept
    assert (state.end[0]["iters"], state.end[0]["warmup_iters"], state.end[0]["stop_reason"]) == (22, 6, "max_iters")
    assert state.info["flops_per_step"] == 1000
    assert (state.unstable, state.precision_reached, state.warmup_used) == (True, 0.2, 6)
    shown = session.snapshot().configs[0]
    assert (shown.unstable, shown.precision_reached, shown.warmup_used) == (True, 0.2, 6)

    from ddptop.headless import _status_text

    assert _status_text(shown).endswith("unstable (±20.0%)")


def test_a_recorded_run_with_rounds_inside_one_launch_is_not_summed_twice(tmp_path):
    """Runs recorded when rounds shared a launch ended with a configuration end that already summed them."""
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.config_state import ConfigState
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    (config, *_) = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4], launches=2),
                           Inventory(problem="test"), cpu_count=2).configs()
    state = ConfigState(config)
    session = Session.__new__(Session)
    session.configs, session.last_event_t, session.last_started = {config.config_id: state}, None, None
    session.launches = {}
    base = dict(type="config_end", rank=0, t=1.0, config_id=config.config_id, status="ok", rounds=2)
    session._apply(dict(base, round=0, last=False, iters=10), "01-n1-gloo")
    session._apply(dict(base, round=1, last=False, iters=12), "01-n1-gloo")
    session._apply(dict(base, round=1, last=True, iters=22), "01-n1-gloo")
    assert state.end[0]["iters"] == 22 and state.status == "ok"


def test_steps_without_a_round_are_round_zero_and_an_end_without_last_ends_the_configuration():
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.config_state import ConfigState
    from ddptop.telemetry.inventory import Inventory

    (config, *_) = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4]),
                              Inventory(problem="test"), cpu_count=2).configs()
    state = ConfigState(config)
    state.add_samples(0, [0.1, 0.1])
    state.add_samples(0, [0.1], 0)
    state.add_samples(0, [0.2, 0.2], 2)
    assert state.round_starts == {0: [(3, 2)]}  # only the change of round is kept
    assert state.rounds_of_steps() == {0: [0, 0, 0, 2, 2]}


def test_stopping_on_precision_gives_an_interval_that_meets_the_target(tmp_path, fake_clock):
    """The rank's cheap estimate decides when to stop; the summary's bootstrap interval is what a user reads.
    Over autocorrelated, skewed series the second must meet the target in most runs (no lucky early stop)."""
    import numpy as np

    from ddptop.analysis import uncertainty

    rng = np.random.default_rng(3)
    ratios = []
    for trial in range(40):
        phi, sd = (0.0, 0.05) if trial % 2 else (0.5, 0.15)
        noise = np.zeros(600)
        for i in range(1, 600):
            noise[i] = phi * noise[i - 1] + rng.normal(0, sd)
        (tmp_path / str(trial)).mkdir()
        _, writer = _writer(tmp_path / str(trial))
        step, _ = _series_step(fake_clock, list(0.05 * np.exp(noise)))
        rule = StopRule(precision=0.05, min_iters=10, max_iters=600, max_time=1e9)
        timing = measure_until_precise(step, rule, SampleStream(writer, "c", "measure", 10))
        assert timing.stop_reason == PRECISION
        estimate, _ = uncertainty.median_estimate({0: timing.samples}, resamples=400)
        ratios.append(estimate.rel_half_width() / rule.precision)
    print(f"bootstrap half-width / target at the stop: median {np.median(ratios):.2f}, "
          f"90th percentile {np.quantile(ratios, 0.9):.2f}")
    assert np.median(ratios) <= 1.0 and np.quantile(ratios, 0.9) <= 1.5


def test_newer_torch_keywords_are_used_only_where_torch_has_them():
    """The declared floor (torch>=2.1) lacks torch.amp.GradScaler and init_process_group(device_id=)."""
    import types

    import torch

    from bench_kernels.training import accepts, grad_scaler

    assert accepts(torch.distributed.init_process_group, "backend")
    assert not accepts(lambda backend: None, "device_id")
    made = []
    old_torch = types.SimpleNamespace(amp=types.SimpleNamespace(),
                                      cuda=types.SimpleNamespace(amp=types.SimpleNamespace(
                                          GradScaler=lambda: made.append("cuda.amp") or "old")))
    assert grad_scaler(old_torch) == "old" and made == ["cuda.amp"]
    new_torch = types.SimpleNamespace(amp=types.SimpleNamespace(GradScaler=lambda device: f"generic {device}"))
    assert grad_scaler(new_torch) == "generic cuda"
