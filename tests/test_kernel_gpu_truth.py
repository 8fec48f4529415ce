"""The kernels' GPU-only paths, checked on the CPU through what they ask of torch.

What runs only on CUDA (CUDA events in the bucket timer, DataParallel's replicas under autocast, the
allocator's peak on every GPU) is checked through stand-ins for ``torch.cuda`` or by the same mechanism
on the CPU (autocast's dtype is per thread on both devices). What the CPU can run, it runs: DDP's logging
averages on a real one-rank gloo group, ``broadcast_buffers`` from the flag to DistributedDataParallel, and
an out-of-memory in the communication analysis of a real two-rank torchrun launch.
"""

import json
import os
import socket
import subprocess
import sys
import threading
import time
import warnings
import weakref
from types import SimpleNamespace

import pytest

from bench_kernels.comm_probe import BucketTimer
from ddptop.protocol.launchspec import LaunchSpec, RunConfig
from ddptop.protocol.vocab import Mode, Status
from tests.conftest import REPO, tiny_config as config




# -- the bucket timer under gloo on a GPU ------------------------------------------------------------------------


class DeviceTimeline:
    """torch.cuda as the bucket timer uses it, on a simulated device: an event recorded on a stream completes
    when the device reaches it there. The default stream is busy until ``backlog_ms`` (the backward kernels
    queued behind a bucket); a stream of the timer's own is idle."""

    def __init__(self):
        self.clock_ms = 0.0
        self.backlog_ms = 0.0
        self.streams = []
        self.waits = 0
        outer = self

        class Stream:
            def __init__(self, device=None):
                self.device = device
                outer.streams.append(self)

            def synchronize(self):
                outer.waits += 1

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at = None

            def record(self, stream=None):
                busy_until = outer.backlog_ms if stream is None else 0.0  # None: the current (default) stream
                self.at = max(outer.clock_ms, busy_until)

            def elapsed_time(self, other):
                return other.at - self.at

        class Context:
            def __init__(self, device):
                self.device = device

            def __enter__(self):
                return self

            def __exit__(self, *exc):
                return False

        self.Stream, self.Event, self.device = Stream, Event, Context
        self.synchronize = lambda *a: setattr(outer, "waits", outer.waits + 1)


class Future:
    def __init__(self, value):
        self.value_, self.callbacks = value, []

    def then(self, callback):
        self.callbacks.append(callback)
        return self

    def value(self):
        return [self.value_]


def _timer(backend):
    cuda = DeviceTimeline()
    futures = []
    dist = SimpleNamespace(get_world_size=lambda: 2, all_reduce=lambda buffer, async_op: SimpleNamespace(
        get_future=lambda: futures.append(Future(buffer)) or futures[-1]))
    timer = BucketTimer(dist, SimpleNamespace(cuda=cuda), SimpleNamespace(type="cuda", index=1), backend)
    bucket = SimpleNamespace(buffer=lambda: SimpleNamespace(numel=lambda: 250, element_size=lambda: 4,
                                                            div_=lambda n: None))
    return cuda, futures, timer, bucket


def test_under_gloo_a_bucket_arrives_when_gloo_is_done_not_after_the_backward_queued_behind_it():
    """Gloo's callback runs on its own thread with the default stream current, and backward keeps queueing
    kernels there; an event on it would complete only after them. The timer stamps on an idle stream."""
    cuda, futures, timer, bucket = _timer("gloo")
    timer.begin_step()  # device time 0
    cuda.clock_ms = 10.0
    timer.hook(None, bucket)  # the bucket is ready at 10 ms
    cuda.clock_ms, cuda.backlog_ms = 25.0, 60.0  # gloo done at 25 ms; backward queued until 60 ms
    futures[0].callbacks[0](futures[0])
    timer.finish()
    assert timer.steps[0]["busy_s"] == pytest.approx(0.015)  # 10..25 ms, not 10..60
    assert len(cuda.streams) == 1 and cuda.waits == 0


def test_under_nccl_the_arrival_is_recorded_on_the_callback_s_current_stream():
    """NCCL's future is CUDA-aware: torch runs the callback with pool streams made to wait for the allreduce
    (torch/futures/__init__.py), so the current stream is the right one and the timer makes no stream."""
    cuda, futures, timer, bucket = _timer("nccl")
    timer.begin_step()
    cuda.clock_ms = 10.0
    timer.hook(None, bucket)
    cuda.clock_ms = 25.0
    futures[0].callbacks[0](futures[0])
    timer.finish()
    assert timer.steps[0]["busy_s"] == pytest.approx(0.015) and cuda.streams == [] and cuda.waits == 0


def test_the_probe_builds_its_timer_for_the_configuration_s_backend(monkeypatch):
    import bench_kernels.comm_probe as probe

    made = []
    monkeypatch.setattr(probe, "BucketTimer", lambda dist, torch, device, backend: made.append(backend) or
                        SimpleNamespace(hook=None))
    monkeypatch.setattr(probe, "wrap_in_ddp", lambda *a, **k: SimpleNamespace(register_comm_hook=lambda *a: None))
    training = SimpleNamespace(net=object(), device=SimpleNamespace(type="cpu"), model=None,
                               workload=SimpleNamespace(find_unused_parameters=False))
    probe.rewrap_with_bucket_timer(training, config(backend="gloo"), 0)
    assert made == ["gloo"]


# -- the first wrapper is gone before the second is built --------------------------------------------------------


def test_the_measured_wrapper_is_freed_before_the_hooked_one_is_built(monkeypatch, one_rank_group):
    import gc

    import bench_kernels.comm_probe as probe
    from bench_kernels.training import build_training, wrap_in_ddp

    workload = build_training(config(), one_rank_group.device("cpu"), local_rank=0, rank=0)
    workload.step_through(workload.net)()
    first = weakref.ref(workload.net)
    alive_at_second = []

    def second(*args, **options):
        gc.collect()
        alive_at_second.append(first() is not None)
        return wrap_in_ddp(*args, **options)

    monkeypatch.setattr(probe, "wrap_in_ddp", second)
    probe.rewrap_with_bucket_timer(workload, config(), 0)
    assert alive_at_second == [False]  # its buckets were freed before the second wrapper allocated its own


# -- what a configuration reports, in what order, on every GPU it uses ---------------------------------------------


def _orchestration(monkeypatch, cfg, gpus=4, run_dir=None):
    """A Worker whose parts only say when they run, over a stand-in torch.cuda with ``gpus`` GPUs whose
    allocator peaks are 100, 200, 300, ... bytes."""
    import bench_kernels.ddp as ddp
    from bench_kernels.timing import Measured

    log = []
    cuda = SimpleNamespace(
        reset_peak_memory_stats=lambda device: log.append(("reset", device.index)),
        max_memory_allocated=lambda device: log.append(("peak", device.index)) or 100 * (device.index + 1),
        device_count=lambda: gpus, empty_cache=lambda: None)
    worker = ddp.Worker.__new__(ddp.Worker)
    worker.world_size, worker.rank, worker.local_rank, worker.faults = 1, 0, 0, []
    worker.spec = SimpleNamespace(memory_cap_mb=None, run_dir=run_dir)
    worker.device, worker.torch = SimpleNamespace(type="cuda", index=0), SimpleNamespace(cuda=cuda)
    monkeypatch.setattr(ddp, "build_training",
                        lambda *a: log.append("build") or SimpleNamespace(net=None, logging_mark=None, logging_read=None,
                                                                       logging_taken=False))
    monkeypatch.setattr(ddp, "training_step_flops", lambda *a: log.append("flops"))
    worker._setting_up = lambda *a: log.append("setting up")
    worker._config_start = lambda *a: log.append("config_start")
    worker._measure = lambda *a: log.append("measure") or Measured(5, 0.1, 0.5)
    worker._config_end = lambda cfg, measured, *a, **k: log.append(("config_end", measured.peak_memory_bytes))
    worker._probe_communication = lambda *a: log.append("analysis")
    worker._release_memory = lambda: log.append("release")
    worker.run_config(cfg)
    return log


def test_dataparallel_s_peak_covers_its_steps_on_every_gpu_it_drives(monkeypatch):
    """The peak starts after the FLOP count (which runs the whole global batch on the first GPU) and is read
    on each of DataParallel's GPUs right after the measured steps."""
    log = _orchestration(monkeypatch, config(mode=Mode.DP, world_size=3, comm_iters=0))
    assert log == ["setting up", "build", "flops", ("reset", 0), ("reset", 1), ("reset", 2), "config_start", "measure",
                   ("peak", 0), ("peak", 1), ("peak", 2), ("config_end", 300), "release"]


def test_ddp_s_configuration_ends_with_its_peak_before_the_analysis_starts(monkeypatch):
    log = _orchestration(monkeypatch, config())
    assert log == ["setting up", "build", "flops", ("reset", 0), "config_start", "measure", ("peak", 0), ("config_end", 100),
                   "analysis", "release"]


def test_the_trace_runs_after_ddp_s_averages_are_read_and_before_the_analysis(monkeypatch):
    """DDP's averages must be the measured steps' alone: read before any traced step, the probe after."""
    import bench_kernels.ddp as ddp

    monkeypatch.setattr(ddp, "ddp_logging_times", lambda *a, **k: {"read": True})
    traced = []
    monkeypatch.setattr(ddp.Worker, "_trace",
                        lambda self, cfg, training: traced.append((training.logging_taken, training.logging_read)) or True)
    log = _orchestration(monkeypatch, config(trace_steps=3), run_dir="/runs/r")
    assert traced == [(True, {"read": True})] and log[-2:] == ["analysis", "release"]


def test_a_single_process_caps_every_gpu_it_may_drive(monkeypatch):
    import bench_kernels.ddp as ddp

    capped = []
    monkeypatch.setattr(ddp, "limit_gpu_memory", lambda device, cap: capped.append((device.index, cap)))
    worker = ddp.Worker.__new__(ddp.Worker)
    worker.spec = SimpleNamespace(backend="nccl", collective_timeout=60.0, memory_cap_mb=512.0)
    worker.device = SimpleNamespace(type="cuda", index=0)
    worker.torch = SimpleNamespace(cuda=SimpleNamespace(device_count=lambda: 3),
                                   device=lambda kind, index: SimpleNamespace(type=kind, index=index))
    worker.dist = SimpleNamespace(init_process_group=lambda **kwargs: None)
    worker.world_size = 1  # the no-DDP baseline and DataParallel: one process, any visible GPU
    worker._join_process_group()
    assert capped == [(0, 512.0), (1, 512.0), (2, 512.0)]
    capped.clear()
    worker.world_size, worker.device = 4, SimpleNamespace(type="cuda", index=2)  # a DDP rank: its own GPU
    worker._join_process_group()
    assert capped == [(2, 512.0)]


# -- an out-of-memory in the analysis of a real two-rank launch ---------------------------------------------------


def _free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.slow  # a real torchrun process group of two ranks
def test_an_oom_in_the_analysis_of_a_group_keeps_every_rank_s_measured_steps(tmp_path):
    """Two ranks; rank 0 runs out of memory where its analysis builds the second wrapper (an injected fault).
    The group must end (rank 1 may be waiting in a collective), but both ranks ended the configuration ok,
    with its steps, before; the analysis failure is reported as the analysis's."""
    events = tmp_path / "events"
    events.mkdir()  # the sweep makes it before the launch
    spec = LaunchSpec(launch_id="01-n2-gloo", events_dir=str(events), device="cpu", backend="gloo",
                      threads_per_rank=1, flush_interval=0.0, inject=("oom:phase=analysis",),
                      configs=(config(config_id="a/n2", world_size=2, global_batch=4, iters=4),
                               config(config_id="b/n2", world_size=2, global_batch=4, iters=4)))
    path = tmp_path / "launch.json"
    path.write_text(spec.dumps())
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo")
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1", "--nproc-per-node=2",
                           "--master-addr=127.0.0.1", f"--master-port={_free_port()}",
                           "-m", "bench_kernels.ddp", "--spec", str(path)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode != 0  # the group ended after the analysis failed
    by_rank = {rank: [json.loads(line) for line in open(events / f"rank-{rank}.jsonl")] for rank in (0, 1)}
    for rank, lines in by_rank.items():
        ends = [e for e in lines if e["type"] == "config_end"]
        assert [(e["config_id"], e["status"], e["iters"]) for e in ends] == [("a/n2", Status.OK, 4)], (rank, ends)
        measured = [s for e in lines if e["type"] == "samples" and e["phase"] == "measure" for s in e["sec"]]
        assert len(measured) == 4
    (error,) = [e for e in by_rank[0] if e["type"] == "error"]
    assert error["phase"] == "analysis" and error["oom"] is True and error["config_id"] == "a/n2"
    assert "injected out of memory" in error["message"]


# -- DDP's own averages describe the measured steps ------------------------------------------------------------------


SLOW_STEPS, SLOW_S, FAST_S = 3, 0.1, 0.004


def slow_warmup_model(num_classes: int = 10):
    """A model whose first SLOW_STEPS forward passes take SLOW_S (a warm-up's first steps), then FAST_S."""
    import torch

    from tests.tiny_models import tiny_cnn

    class SlowFirst(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.body, self.calls, self.forward_s = tiny_cnn(num_classes), 0, []

        def forward(self, x):
            began = time.perf_counter()
            self.calls += 1
            time.sleep(SLOW_S if self.calls <= SLOW_STEPS else FAST_S)
            out = self.body(x)
            self.forward_s.append(time.perf_counter() - began)
            return out

    return SlowFirst()


def test_ddp_s_averages_are_the_measured_steps_not_the_warm_up(tmp_path, one_rank_group):
    """DDP averages every step it recorded since the wrapper's first, and records a step at the next one's
    forward. Marked after the warm-up and read after the measured steps, the forward average is the measured
    steps', where DDP's own average over every step is pulled up by the slow warm-up. No bound on the time
    itself (a loaded machine stretches every step): the model times its own forwards, and DDP's measured
    average holds the measured forwards (at least their mean) and lies below its average over every step."""
    from bench_kernels.ddp_logging import ddp_logging_times
    from bench_kernels.ddp import Worker
    from bench_kernels.training import build_training

    torch = one_rank_group
    cfg = config(model="tests.test_kernel_gpu_truth:slow_warmup_model", warmup=SLOW_STEPS, iters=8)
    worker = Worker(LaunchSpec(launch_id="x", events_dir=str(tmp_path), device="cpu", backend="gloo",
                               threads_per_rank=1, configs=(cfg,)))
    worker.torch, worker.dist, worker.device = torch, torch.distributed, torch.device("cpu")
    workload = build_training(cfg, worker.device, local_rank=0, rank=0)
    worker._measure(cfg, workload, 0)
    assert workload.logging_mark is not None and workload.logging_mark["iteration"] == SLOW_STEPS
    every_step = ddp_logging_times(workload.net)["forward_compute_s"]
    measured = ddp_logging_times(workload.net, since=workload.logging_mark)
    assert measured["iterations"] == 8
    own = workload.model.forward_s  # the model's own forward times, one per call: the warm-up's, then the measured
    assert len(own) == SLOW_STEPS + 8 and min(own[:SLOW_STEPS]) >= SLOW_S
    measured_own = sum(own[SLOW_STEPS:]) / 8
    assert measured_own <= measured["forward_compute_s"] < every_step
    assert measured["backward_compute_s"] > 0


def test_without_a_mark_ddp_s_averages_are_read_as_before():
    from bench_kernels.ddp_logging import ddp_logging_mark, ddp_logging_times

    class Net:  # a torch whose DDP cannot record every step: no window, the averages as DDP gives them
        def _get_ddp_logging_data(self):
            return {"avg_forward_compute_time": 3_000_000, "iteration": 40}

    assert ddp_logging_mark(Net()) is None
    assert ddp_logging_times(Net(), since=None) == {"forward_compute_s": 0.003, "iteration": 40}


# -- DataParallel under autocast --------------------------------------------------------------------------------------


def test_dataparallel_s_replicas_get_a_torch_dtype_for_their_autocast(monkeypatch):
    """torch.autocast takes a torch.dtype; given the name "bfloat16", entering it raises a TypeError
    (torch.set_autocast_dtype), so every replica's forward failed under --amp."""
    torch = pytest.importorskip("torch")
    from bench_kernels import training

    made = []
    monkeypatch.setattr(torch.nn, "DataParallel", lambda module, device_ids: made.append((module, device_ids)))
    model = torch.nn.Linear(4, 4)
    training.wrap(model, config(mode=Mode.DP, world_size=2, amp="bf16"), SimpleNamespace(type="cuda"), 0)
    ((inner, device_ids),) = made
    assert device_ids == [0, 1] and inner.module is model
    assert inner.dtype is torch.bfloat16 and inner.device_type == "cuda"
    made.clear()
    training.wrap(model, config(mode=Mode.DP, world_size=2), SimpleNamespace(type="cuda"), 0)
    assert made[0][0] is model  # no --amp: the model itself


def test_a_replica_thread_keeps_the_dtype_only_through_the_wrapper():
    """What parallel_apply does in torch 2.14: each replica runs in a new thread inside
    ``torch.amp.autocast(device_type, enabled=autocast_enabled)``, no dtype, so the thread's default dtype
    (per thread: fp16 for CUDA, bf16 for the CPU) replaces the caller's. The same on the CPU: asked for fp16,
    a bare replica runs bf16; the wrapper's forward sets fp16 again."""
    torch = pytest.importorskip("torch")
    from bench_kernels.training import AutocastForward

    layer = torch.nn.Linear(4, 4)
    ran = {}

    def replica(name, module, enabled):
        with torch.amp.autocast("cpu", enabled=enabled):
            ran[name] = module(torch.randn(2, 4)).dtype

    with torch.autocast("cpu", dtype=torch.float16):
        enabled = torch.is_autocast_enabled("cpu")
        for name, module in (("bare", layer), ("wrapped", AutocastForward(layer, torch.float16, "cpu"))):
            thread = threading.Thread(target=replica, args=(name, module, enabled))
            thread.start()
            thread.join()
    assert ran == {"bare": torch.bfloat16, "wrapped": torch.float16}


# -- broadcast_buffers from the flag to DistributedDataParallel ----------------------------------------------------


def test_no_broadcast_buffers_goes_from_the_flag_through_plan_and_launch_spec_to_ddp(tmp_path, one_rank_group):
    from ddptop.cli import _plan_options, build_parser
    from ddptop.run.plan_records import Plan
    from ddptop.run.plan import build_plan
    from ddptop.telemetry.inventory import Inventory

    from bench_kernels.training import build_training

    def configs(*flags):
        options = _plan_options(build_parser().parse_args(["run", "--world-sizes", "1", *flags]))
        plan = Plan.from_json(json.loads(json.dumps(build_plan(options, Inventory(problem="no GPU"),
                                                               cpu_count=2).to_json())))  # plan.json
        spec = LaunchSpec(launch_id="x", events_dir=str(tmp_path), device="cpu", backend="gloo",
                          threads_per_rank=1,
                          configs=tuple(RunConfig.from_json(c.to_json()) for c in plan.configs()))
        return LaunchSpec.loads(spec.dumps()).configs  # launch.json, as the rank reads it

    off = [c for c in configs("--no-broadcast-buffers") if c.mode == Mode.DDP]
    assert off and all(c.broadcast_buffers is False for c in off)
    assert all(c.broadcast_buffers is True for c in configs())  # DDP's own default
    cfg = dict(off[0].to_json(), model="tests.tiny_models:tiny_cnn", image_size=32, num_classes=10)
    net = build_training(RunConfig.from_json(cfg), one_rank_group.device("cpu"), 0, 0).net
    assert net.broadcast_buffers is False and net._get_ddp_logging_data()["broadcast_buffers"] == 0


# -- bf16 emulated, and what gloo cannot run on a GPU -----------------------------------------------------------


def test_bf16_emulation_is_said_once_in_the_rank_s_log(capsys):
    from bench_kernels.ddp import Worker

    worker = Worker.__new__(Worker)
    worker.device = SimpleNamespace(type="cuda")
    worker.torch = SimpleNamespace(cuda=SimpleNamespace(
        is_bf16_supported=lambda including_emulation=True: including_emulation))  # a V100: emulation only
    notes = [worker._precision_notes(config(amp="bf16"), say=True) for _ in range(2)]
    assert notes[0] == notes[1] and notes[0][0].startswith("bf16 is emulated on this GPU")
    assert capsys.readouterr().err.count("bench_kernels.ddp: warning: bf16 is emulated") == 1


def test_gloo_s_gpu_collectives_are_refused_in_one_line():
    from bench_kernels.collectives import refusal

    for op in ("allgather", "reduce_scatter"):
        reason = refusal(op, "gloo", "cuda")
        assert reason.startswith(f"{op} not measured: gloo runs only allreduce and broadcast on GPU tensors")
        assert "\n" not in reason and "--backend nccl" in reason
        assert refusal(op, "nccl", "cuda") is None and refusal(op, "gloo", "cpu") is None
    assert refusal("allreduce", "gloo", "cuda") is None and refusal("broadcast", "gloo", "cuda") is None


def test_the_kernel_leaves_out_what_gloo_cannot_run_on_a_gpu_and_runs_the_rest(one_rank_group, capsys):
    from bench_kernels.collectives import run_collectives

    torch, dist = one_rank_group, one_rank_group.distributed
    spec = {"ops": ["allgather", "reduce_scatter"], "min_bytes": 1024, "max_bytes": 1024, "iters": 2, "warmup": 1}
    emitted = []
    run_collectives(torch, dist, SimpleNamespace(type="cuda"), spec, lambda **row: emitted.append(row), "gloo")
    assert emitted == []  # nothing allocated on the GPU, nothing timed
    err = capsys.readouterr().err
    assert "allgather not measured" in err and "reduce_scatter not measured" in err
    with warnings.catch_warnings():  # on the CPU both run, through torch's current names (no deprecation)
        warnings.simplefilter("error", FutureWarning)
        run_collectives(torch, dist, torch.device("cpu"), spec, lambda **row: emitted.append(row), "gloo")
    assert sorted({(r["op"], r["inplace"]) for r in emitted}) == [
        ("allgather", False), ("allgather", True), ("reduce_scatter", False), ("reduce_scatter", True)]
