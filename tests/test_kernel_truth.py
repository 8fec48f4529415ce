"""The kernels' GPU paths made right by construction, checked where a CPU can check them.

What only runs on CUDA (CUDA events in the bucket timer, DataParallel's replicas under autocast, the
allocator's peak over several GPUs) is checked through stand-ins that record what the code asks of torch:
the test fails if the hook ever waits for the device, or reads its events before the step's end. What the
CPU can run, it runs: DDP's logging sample rate and broadcast_buffers on a real one-rank gloo group, and an
out-of-memory in the communication analysis of a real sweep.
"""

import json
import os
from types import SimpleNamespace

import pytest

from bench_kernels.comm_probe import BucketTimer
from bench_kernels.faults import FaultSpecError, parse_fault
from ddptop.protocol.vocab import Mode
from tests.conftest import run_sweep, tiny_config as config




# -- the bucket timer on CUDA, through a stand-in torch ------------------------------------------------------------


class StandInCuda:
    """torch.cuda as the bucket timer uses it: events on a simulated device clock, and a record of every
    device context entered and every wait for the device (which the hook must never do)."""

    def __init__(self):
        self.clock_ms = 0.0
        self.contexts = []
        self.waits = 0
        self.events = []
        outer = self

        class Event:
            def __init__(self, enable_timing=False):
                assert enable_timing
                self.at = None
                outer.events.append(self)

            def record(self, stream=None):
                self.at = outer.clock_ms

            def elapsed_time(self, other):
                assert self.at is not None and other.at is not None, "an event read before it was recorded"
                return other.at - self.at

        class Device:
            def __init__(self, device):
                self.device = device

            def __enter__(self):
                outer.contexts.append(self.device)

            def __exit__(self, *exc):
                return False

        class Stream:
            def synchronize(self):
                outer.waits += 1

        self.Event, self.device = Event, Device
        self.current_stream = lambda: Stream()
        self.synchronize = lambda *a: setattr(outer, "waits", outer.waits + 1)


class StandInFuture:
    def __init__(self, value):
        self.value_ = value
        self.callbacks = []

    def then(self, callback):
        self.callbacks.append(callback)
        return self

    def value(self):
        return [self.value_]


def test_the_cuda_bucket_timer_never_waits_inside_the_hook_and_reads_events_after_the_step():
    cuda = StandInCuda()
    torch = SimpleNamespace(cuda=cuda)
    futures = []
    dist = SimpleNamespace(get_world_size=lambda: 2, all_reduce=lambda buffer, async_op: SimpleNamespace(
        get_future=lambda: futures.append(StandInFuture(buffer)) or futures[-1]))
    device = SimpleNamespace(type="cuda", index=3)
    timer = BucketTimer(dist, torch, device)

    class Buffer:
        def numel(self):
            return 1000

        def element_size(self):
            return 4

        def div_(self, n):
            return self

    bucket = SimpleNamespace(buffer=Buffer)
    timer.begin_step()  # the step's origin at device time 0
    cuda.clock_ms = 10.0
    timer.hook(None, bucket)  # bucket 1 handed over at 10 ms
    cuda.clock_ms = 12.0
    timer.hook(None, bucket)  # bucket 2 at 12 ms
    cuda.clock_ms = 30.0
    futures[0].callbacks[0](futures[0])  # the callbacks run (on gloo's thread, or inline for NCCL)
    cuda.clock_ms = 45.0
    futures[1].callbacks[0](futures[1])
    assert cuda.waits == 0, "the hook waited for the device: backward would be serialised behind each bucket"
    assert cuda.contexts == [device, device, device]  # the step origin and both callbacks ran on our GPU
    assert timer.intervals == []  # nothing read yet: the events may not have happened
    timer.finish()  # after the step's synchronize
    assert timer.steps == [{"busy_s": pytest.approx(0.035), "sum_s": pytest.approx(0.053), "buckets": 2,
                            "bytes": 8000}]


def test_the_cpu_bucket_timer_keeps_wall_clock_times():
    dist = SimpleNamespace(get_world_size=lambda: 1, all_reduce=lambda buffer, async_op: SimpleNamespace(
        get_future=lambda: StandInFuture(buffer)))
    timer = BucketTimer(dist, SimpleNamespace(), SimpleNamespace(type="cpu"))
    buffer = SimpleNamespace(numel=lambda: 10, element_size=lambda: 4, div_=lambda n: None)
    timer.begin_step()
    future = timer.hook(None, SimpleNamespace(buffer=lambda: buffer))
    future.callbacks[0](future)
    timer.finish()
    assert timer.steps[0]["buckets"] == 1 and timer.steps[0]["bytes"] == 40 and timer.steps[0]["busy_s"] >= 0


# -- DDP's logging averages and broadcast_buffers, on a real one-rank group ----------------------------------------




def test_ddp_logging_describes_every_step_and_broadcast_buffers_reaches_ddp(one_rank_group):
    from bench_kernels.training import build_training

    torch = one_rank_group
    workload = build_training(config(broadcast_buffers=False), torch.device("cpu"), local_rank=0, rank=0)
    assert workload.net.broadcast_buffers is False
    step = workload.step_through(workload.net)
    for _ in range(15):
        step()
    # DDP samples its runtime stats for the first 10 iterations, then one in 100 unless told otherwise:
    # told to sample every iteration, its last sampled iteration is the 15th
    assert workload.net._get_ddp_logging_data()["iteration"] > 10
    default = build_training(config(), torch.device("cpu"), local_rank=0, rank=0)
    assert default.net.broadcast_buffers is True  # DDP's own default, what training scripts run


# -- DataParallel under autocast, and every GPU it uses --------------------------------------------------------------


def test_the_replicas_forward_sets_the_autocast_dtype_itself():
    torch = pytest.importorskip("torch")
    from bench_kernels.training import AutocastForward

    layer = torch.nn.Linear(4, 4)
    wrapped = AutocastForward(layer, torch.bfloat16)
    assert isinstance(wrapped, torch.nn.Module) and wrapped.module is layer
    # parallel_apply re-enters autocast without a dtype (fp16 on CUDA); the replica's own forward sets bf16
    # again inside it. On the CPU the same holds with the CPU's autocast.
    with torch.autocast(device_type="cpu", dtype=torch.float16, enabled=True):
        assert wrapped(torch.randn(2, 4)).dtype == torch.bfloat16


def test_dataparallel_counts_every_gpu_it_drives():
    from bench_kernels.training import devices_used, dp_devices

    cuda = SimpleNamespace(type="cuda", index=0)
    assert dp_devices(config(mode=Mode.DP, world_size=4), cuda) == [0, 1, 2, 3]
    assert [d.index for d in devices_used(config(mode=Mode.DP, world_size=4), cuda)] == [0, 1, 2, 3]
    assert devices_used(config(), cuda) == [cuda]  # DDP: its own GPU only
    assert dp_devices(config(mode=Mode.DP, world_size=4), SimpleNamespace(type="cpu")) is None


# -- an out-of-memory in the analysis, in a real sweep -----------------------------------------------------------------


def test_fault_phases_are_checked():
    assert parse_fault("oom:phase=analysis:config=n1").phase == "analysis"
    assert parse_fault("crash").phase == "measure"
    with pytest.raises(FaultSpecError, match="phase must be one of measure, analysis"):
        parse_fault("oom:phase=warmup")


@pytest.mark.slow
@pytest.mark.smoke
def test_an_oom_in_the_communication_analysis_keeps_the_measured_steps(tmp_path):
    """The analysis builds a second DDP wrapper; running out of memory there used to end the configuration
    as oom (and make a batch sweep skip the larger batches). Its steps now stand, the failure is named, and
    the next configuration runs."""
    done = run_sweep(str(tmp_path / "run"), "--models", "tests.tiny_models:tiny_cnn", "--batch-sizes", "2",
                     "--world-sizes", "1", "--image-size", "32", "--num-classes", "10", "--warmup", "1",
                     "--iters", "6", "--comm-iters", "3", "--no-collectives", "--telemetry-interval", "0",
                     "--bucket-cap-mb", "25,1", "--inject", "oom:phase=analysis:config=bucket25", "--launches", "1")
    configs = {c["config_id"]: c for c in done.summary()["configs"]}
    hit = configs["tests.tiny_models:tiny_cnn/ddp/bs2/n1/gloo/bucket25"]
    assert hit["status"] == "ok" and hit["stats"]["n"] == 6, hit
    assert "injected out of memory" in hit["analysis_error"] and hit["reason"] is None
    after = configs["tests.tiny_models:tiny_cnn/ddp/bs2/n1/gloo/bucket1"]
    assert after["status"] == "ok" and after["communication"]["buckets"]["steps"] == 3
    assert "communication analysis failed: out of memory" in done.stdout
    # a real run's verdict, printed and saved (one rank: compute only, with its share of the ceiling)
    assert after["verdict"]["kind"] == "compute-bound" and "of the measured matmul ceiling" in after["verdict"]["text"]
    assert "Why it is not faster" in done.stdout and after["verdict"]["text"] in done.stdout
    # the sweep's first launch measured the CPU's matmul ceiling; the share of it is FLOPs / p50 / ceiling
    summary = done.summary()
    (ceiling,) = summary["ceilings"]
    assert ceiling["dtype"] == "fp32" and ceiling["flops_per_s"] > 0
    flops = after["flops"]
    assert flops["per_step"] > 0 and flops["mfu_ceiling"]["value"] == pytest.approx(
        flops["per_step"] / after["stats"]["sec_iter"]["p50"] / ceiling["flops_per_s"])
    events = [json.loads(line) for line in open(os.path.join(
        done.run_dir, "launches", sorted(os.listdir(os.path.join(done.run_dir, "launches")))[0],
        "events", "rank-0.jsonl"))]
    kinds = [e["type"] for e in events if e["type"] in ("config_end", "comm", "error")
             and e.get("config_id", "").endswith("bucket25")]
    assert kinds == ["config_end", "error"]  # ended before its analysis failed; nothing ended it again
    # the ceiling is measured after the launch's last measured step, so that no step runs after its matmuls
    order = [e["type"] for e in events]
    assert order.count("ceiling") == 1 and order[0] == "hello" and order[-1] == "bye"
    assert order.index("ceiling") > max(i for i, kind in enumerate(order) if kind in ("config_end", "samples"))


def test_bf16_without_tensor_cores_is_said_and_gloo_gpu_collectives_are_refused():
    from bench_kernels.ddp import Worker
    from ddptop.run.options import PlanOptions
    from ddptop.run.plan import PlanError, build_plan
    from ddptop.telemetry.inventory import GpuInfo, Inventory

    worker = Worker.__new__(Worker)
    worker.device = SimpleNamespace(type="cuda")
    for native, expected in ((True, []), (False, ["bf16 is emulated"])):
        calls = []

        def is_bf16_supported(including_emulation=True, native=native):
            calls.append(including_emulation)
            return native or including_emulation

        worker.torch = SimpleNamespace(cuda=SimpleNamespace(is_bf16_supported=is_bf16_supported))
        notes = worker._precision_notes(config(amp="bf16"))
        assert [n[:16] for n in notes] == expected and calls == [False]  # asked without emulation
    assert worker._precision_notes(config(amp="fp16")) == []

    from ddptop.analysis.step_bound import verdict
    assert verdict({"stats": {"n": 5}, "mode": "ddp", "world_size": 1, "notes": ["bf16 is emulated"]})["text"] \
        .endswith("; bf16 is emulated")

    gpus = Inventory(gpus=tuple(GpuInfo(i, "NVIDIA A100-SXM4-80GB", f"GPU-{i}", 80 << 30) for i in range(2)))
    with pytest.raises(PlanError, match="gloo runs only allreduce and broadcast on GPUs"):
        build_plan(PlanOptions(backend=["gloo"], collectives=["allreduce", "reduce_scatter"]), gpus, cpu_count=4)
    assert build_plan(PlanOptions(backend=["nccl"], collectives=["reduce_scatter"]), gpus, cpu_count=4)


def test_a_ceiling_that_cannot_be_measured_loses_only_the_ceiling(monkeypatch, capsys):
    import bench_kernels.ceiling as ceiling

    def out_of_memory(*args):
        raise MemoryError("CUDA out of memory")

    monkeypatch.setattr(ceiling, "matmul_ceiling", out_of_memory)
    assert ceiling.matmul_ceilings(SimpleNamespace(), SimpleNamespace(type="cpu"), (config(),)) == []
    assert "matmul ceiling in fp32 not measured: MemoryError: CUDA out of memory" in capsys.readouterr().err


def test_the_ceilings_cover_every_dtype_of_the_launch_not_only_its_first_configuration(monkeypatch):
    """A tune measures DDP as written (fp32) and its amp_bf16 variant in one launch: both dtypes get a ceiling,
    whichever configuration comes first."""
    import bench_kernels.ceiling as ceiling

    measured = []

    def one_ceiling(torch, device, dtype):
        measured.append(dtype)
        return {"dtype": dtype, "flops_per_s": 1e12, "sizes": [], "method": "best square matmul"}

    monkeypatch.setattr(ceiling, "matmul_ceiling", one_ceiling)
    torch, device = SimpleNamespace(get_num_threads=lambda: 2), SimpleNamespace(type="cpu")
    for first, then in ((None, "bf16"), ("bf16", None)):
        measured.clear()
        found = ceiling.matmul_ceilings(torch, device, (config(amp=first), config(amp=then)))
        assert sorted(measured) == ["bf16", "fp32"] and sorted(c["dtype"] for c in found) == ["bf16", "fp32"]
