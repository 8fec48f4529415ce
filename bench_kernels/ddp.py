"""DDP training-step benchmark, run inside torchrun workers.

    python -m torch.distributed.run --nproc-per-node N -m bench_kernels.ddp --spec launch.json

``launch.json`` (written by ddptop's sweep; ``ddptop.protocol.launchspec`` defines it) lists the
configurations to run in this one process group, so the cost of starting Python, importing torch and forming
the group is paid once per world size. For each configuration every rank builds the model (random weights),
wraps it in DistributedDataParallel (or not, for the ``no_ddp`` baseline), and times ``warmup`` + ``iters``
training steps on one fixed synthetic batch: zero_grad, forward, loss, backward (DDP's gradient allreduce
happens here), optimizer step, and on GPU ``torch.cuda.synchronize()``; ``time.perf_counter()`` around exactly
that. Samples stream to the rank's events file between steps, never inside one.

After the measured steps of a DDP configuration come two short analysis phases (``comm_iters`` steps each):
the same step inside ``no_sync()`` (no gradient allreduce: what remains is compute), and the same step with a
comm hook that timestamps every bucket's allreduce from launch to completion. DDP's own averages
(``_get_ddp_logging_data()``) are read first, from the measured steps. At the end of the launch the
collective benchmark (bench_kernels.collectives) runs in the same process group when the spec asks for it.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import math
import os
import platform
import signal
import socket
import sys
import time
import traceback
from importlib import metadata
from typing import Any

from bench_kernels.faults import fire, parse_fault
from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError, RunConfig
from ddptop.protocol.layout import events_name
from ddptop.protocol.vocab import Mode, Status
from ddptop.protocol.wire import EventWriter

MAX_BUDGET_ITERS = 1_000_000


class Terminated(Exception):
    """SIGTERM/SIGINT arrived (torchrun shutting the group down); leave through the normal flush path."""


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this worker if its torchrun agent dies, so no orphan keeps a GPU busy."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the agent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except OSError:
        pass


def _on_signal(signum: int, _frame: Any) -> None:
    raise Terminated(signal.Signals(signum).name)


def _version(package: str) -> str | None:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return None


class SampleStream:
    """Collects one phase's step times and emits them in batches, at most every flush interval."""

    def __init__(self, writer: EventWriter, config_id: str, phase: str, total: int) -> None:
        self.writer, self.config_id, self.phase, self.total = writer, config_id, phase, total
        self.pending: list[float] = []
        self.sent = 0
        self.all: list[float] = []

    def add(self, seconds: float) -> None:
        self.pending.append(seconds)
        self.all.append(seconds)
        if time.monotonic() - self.writer.last_flush >= self.writer.flush_interval:
            self.send()
            self.writer.flush()

    def send(self) -> None:
        if self.pending:
            self.writer.emit(
                "samples",
                config_id=self.config_id,
                phase=self.phase,
                first_iter=self.sent,
                of=self.total,
                sec=self.pending,
            )
            self.sent += len(self.pending)
            self.pending = []


class Worker:
    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        path = os.path.join(spec.events_dir, events_name(self.rank))
        self.writer = EventWriter(path, self.rank, spec.flush_interval)
        self.stream: SampleStream | None = None
        self.faults = [parse_fault(text) for text in spec.inject]

    # -- setup -------------------------------------------------------------------------------------------
    def start(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        threads = self.spec.threads_per_rank
        if threads:
            torch.set_num_threads(threads)
        if self.spec.device == "cuda":
            torch.cuda.set_device(self.local_rank)
            self.device = torch.device("cuda", self.local_rank)
        else:
            self.device = torch.device("cpu")
        from datetime import timedelta

        kwargs: dict[str, Any] = {
            "backend": self.spec.backend,
            "timeout": timedelta(seconds=self.spec.collective_timeout),
        }
        if self.device.type == "cuda":
            kwargs["device_id"] = self.device  # binds NCCL to this GPU eagerly
            cap = self.spec.memory_cap_mb
            if cap:  # a smaller GPU, for real: the caching allocator refuses past this share
                total = torch.cuda.get_device_properties(self.device).total_memory
                torch.cuda.set_per_process_memory_fraction(min(1.0, cap * 2**20 / total), self.device)
        dist.init_process_group(**kwargs)
        cuda = self.device.type == "cuda"
        self.writer.emit(
            "hello",
            world_size=self.world_size,
            local_rank=self.local_rank,
            launch=self.spec.launch_id,
            host=socket.gethostname(),
            pid=os.getpid(),
            device=str(self.device),
            device_name=torch.cuda.get_device_name(self.device) if cuda else platform.processor() or "cpu",
            backend=self.spec.backend,
            threads=torch.get_num_threads(),
            cuda_visible_devices=os.environ.get("CUDA_VISIBLE_DEVICES"),
            versions={
                "python": platform.python_version(),
                "torch": torch.__version__,
                "torchvision": _version("torchvision"),
                "cuda": torch.version.cuda,
                "cudnn": torch.backends.cudnn.version() if cuda else None,
                "nccl": ".".join(map(str, torch.cuda.nccl.version())) if cuda else None,
            },
        )
        self.writer.flush()

    # -- one configuration ---------------------------------------------------------------------------------
    def run_config(self, cfg: RunConfig) -> None:
        torch = self.torch
        from bench_kernels.models import build_model

        self.net = None
        config_id = cfg.config_id
        if cfg.mode in (Mode.NO_DDP, Mode.DP) and self.world_size != 1:
            raise ValueError(f"the {cfg.mode} configuration runs in a single process")
        setup_start = time.perf_counter()
        torch.manual_seed(1234 + self.rank)
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)
        model = build_model(cfg.model, cfg.num_classes, cfg.image_size).to(self.device)
        memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
        model = model.to(memory_format=memory_format)
        params = [p for p in model.parameters() if p.requires_grad]
        n_params = sum(p.numel() for p in params)
        grad_bytes = sum(p.numel() * p.element_size() for p in params)
        if cfg.mode == Mode.DDP:
            from torch.nn.parallel import DistributedDataParallel

            net = DistributedDataParallel(
                model,
                device_ids=[self.local_rank] if self.device.type == "cuda" else None,
                bucket_cap_mb=cfg.bucket_cap_mb,
            )
        elif cfg.mode == Mode.DP:
            # One process scatters the batch over N devices, replicates the model every step and gathers the
            # outputs (seeds 002 and 004). Without CUDA, DataParallel is a pass-through: one process does the
            # N ranks' work on the cores they would have shared.
            devices = list(range(cfg.world_size)) if self.device.type == "cuda" else None
            net = torch.nn.DataParallel(model, device_ids=devices)
        else:
            net = model
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        batch = cfg.global_batch if cfg.mode == Mode.DP else cfg.batch_size
        size = cfg.image_size
        inputs = torch.randn(batch, 3, size, size, device=self.device).contiguous(memory_format=memory_format)
        targets = torch.randint(0, cfg.num_classes, (batch,), device=self.device)
        loss_fn = torch.nn.CrossEntropyLoss()
        amp = cfg.amp
        amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(amp) if amp else None
        scaler = torch.amp.GradScaler("cuda") if amp == "fp16" else None
        synchronize = torch.cuda.synchronize if self.device.type == "cuda" else None
        device = self.device
        self.net = net  # the analysis phases swap in a DDP wrapper with a timing hook

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            autocast = (
                torch.autocast(device_type="cuda", dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
            )
            with autocast:
                loss = loss_fn(self.net(inputs), targets)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if synchronize is not None:
                synchronize(device)

        setup_s = time.perf_counter() - setup_start
        warmup = int(cfg.warmup)
        self.writer.emit(
            "config_start",
            config_id=config_id,
            model=cfg.model,
            mode=cfg.mode,
            batch_size=batch,
            world_size=self.world_size,
            params=n_params,
            grad_bytes=grad_bytes,
            warmup=warmup,
            iters=cfg.iters,
            time_budget=cfg.time_budget,
            setup_s=setup_s,
        )
        self.writer.flush()

        cap = self.spec.memory_cap_mb
        if cap and self.device.type == "cpu":
            check_memory_cap(torch, model, inputs, params, cap)

        warmup_s = self._timed_loop(step, config_id, "warmup", warmup)
        iters = self._measured_iterations(cfg)
        measure_s = self._timed_loop(step, config_id, "measure", iters)
        comm_iters = int(cfg.comm_iters or 0)
        analysis_s = None
        if cfg.mode == Mode.DDP and comm_iters > 0:
            analysis_start = time.perf_counter()
            self._communication_phases(model, step, cfg, comm_iters)
            analysis_s = time.perf_counter() - analysis_start

        peak_memory = torch.cuda.max_memory_allocated(self.device) if self.device.type == "cuda" else None
        self.writer.emit(
            "config_end",
            config_id=config_id,
            status=Status.OK,
            iters=iters,
            warmup_s=warmup_s,
            measure_s=measure_s,
            analysis_s=analysis_s,
            peak_memory_bytes=peak_memory,
            max_rss_bytes=_max_rss_bytes(),
        )
        self.writer.flush()
        del net, model, optimizer, inputs, targets, params
        self.net = None
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.empty_cache()
        if self.world_size > 1:
            self.dist.barrier()  # configurations start together on every rank

    def _communication_phases(self, model: Any, step: Any, cfg: RunConfig, iters: int) -> None:
        """Compute alone (no_sync), then every bucket's allreduce timed through a comm hook."""
        config_id = cfg.config_id
        logging_data = ddp_logging_times(self.net)
        ddp = self.net

        def step_without_sync() -> None:
            with ddp.no_sync():
                step()

        self._timed_loop(step_without_sync, config_id, "nosync", iters)
        # A second wrapper carries the hook, so the measured steps above ran exactly as a user's would.
        # Dropping the first one removes its autograd hooks before the second registers its own.
        self.net = ddp = None
        gc.collect()
        from torch.nn.parallel import DistributedDataParallel

        timer = BucketTimer(self.dist, self.torch, self.device)
        ddp = DistributedDataParallel(
            model,
            device_ids=[self.local_rank] if self.device.type == "cuda" else None,
            bucket_cap_mb=cfg.bucket_cap_mb,
        )
        ddp.register_comm_hook(None, timer.hook)
        self.net = ddp
        for _ in range(max(2, cfg.warmup)):  # the first steps rebuild buckets; not representative
            step()
        timer.intervals, timer.steps = [], []
        hooked = []
        for _ in range(iters):
            timer.begin_step()
            start = time.perf_counter()
            step()
            hooked.append(time.perf_counter() - start)
        timer.finish()
        self.writer.emit(
            "comm",
            config_id=config_id,
            ddp_logging=logging_data,
            bucket_comm_s=[s["busy_s"] for s in timer.steps],
            bucket_sum_s=[s["sum_s"] for s in timer.steps],
            buckets=[s["buckets"] for s in timer.steps],
            bucket_bytes=[s["bytes"] for s in timer.steps],
            hooked_step_s=hooked,
        )
        self.writer.flush()

    def _fault_for(self, config_id: str) -> Any:
        """The injected fault (a testing aid, --inject) this rank should suffer in this configuration."""
        for fault in self.faults:
            if fault.matches(config_id, self.rank):
                return fault
        return None

    def _timed_loop(self, step: Any, config_id: str, phase: str, count: int) -> float:
        """Run ``count`` steps, each timed alone; return the phase's wall time."""
        stream = self.stream = SampleStream(self.writer, config_id, phase, count)
        clock = time.perf_counter
        fault = self._fault_for(config_id) if phase == "measure" else None
        phase_start = clock()
        for index in range(count):
            if fault is not None and index == fault.iteration:
                stream.send()  # what was measured before the fault is kept
                self.writer.flush()
                fire(fault, self.torch)
            start = clock()
            step()
            stream.add(clock() - start)  # streaming happens here, after the step's clock stopped
        elapsed = clock() - phase_start
        stream.send()
        self.writer.flush()
        self.warmup_samples = stream.all if phase == "warmup" else getattr(self, "warmup_samples", [])
        self.stream = None
        return elapsed

    def _measured_iterations(self, cfg: RunConfig) -> int:
        budget = cfg.time_budget
        if not budget:
            return int(cfg.iters)
        samples = sorted(self.warmup_samples)
        typical = samples[len(samples) // 2] if samples else 1.0
        iters = min(MAX_BUDGET_ITERS, max(1, math.ceil(budget / max(typical, 1e-6))))
        if self.world_size > 1:  # every rank must run the same number of steps, or DDP deadlocks
            agreed = self.torch.tensor([iters], device=self.device)
            self.dist.all_reduce(agreed, op=self.dist.ReduceOp.MAX)
            iters = int(agreed.item())
        return iters

    # -- errors ---------------------------------------------------------------------------------------------
    def report_error(self, config_id: str | None, exc: BaseException) -> None:
        if self.stream is not None:
            self.stream.send()  # keep every sample measured before the fault
        oom = _is_oom(exc)
        self.writer.emit(
            "error",
            config_id=config_id,
            error_type=type(exc).__name__,
            message=str(exc)[:2000],
            traceback="".join(traceback.format_exception(exc))[-8000:],
            oom=oom,
        )
        if config_id is not None:
            self.writer.emit("config_end", config_id=config_id, status=Status.OOM if oom else Status.FAILED)
        self.writer.flush(durable=True)


class BucketTimer:
    """A DDP comm hook that allreduces each bucket (averaging, as DDP's default does) and records when it
    was handed over and when its result arrived. Per step: the time any bucket was in flight (intervals
    merged), their sum, the bucket count and the bytes reduced."""

    def __init__(self, dist: Any, torch: Any, device: Any) -> None:
        self.dist, self.torch, self.device = dist, torch, device
        self.intervals: list[tuple[float, float, int]] = []
        self.steps: list[dict[str, Any]] = []

    def begin_step(self) -> None:
        if self.intervals:
            self.steps.append(_merge(self.intervals))
        self.intervals = []

    def finish(self) -> None:
        self.begin_step()

    def hook(self, _state, bucket):  # no annotations: DDP insists that a present one is dist.GradBucket
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        cuda = self.device.type == "cuda"
        start = time.perf_counter()
        future = self.dist.all_reduce(buffer.div_(self.dist.get_world_size()), async_op=True).get_future()

        def done(fut: Any) -> Any:
            if cuda:  # a CUDA future completes when the work is queued; the stream says when it ran
                self.torch.cuda.current_stream().synchronize()
            self.intervals.append((start, time.perf_counter(), nbytes))
            return fut.value()[0]

        return future.then(done)


def _merge(intervals: list[tuple[float, float, int]]) -> dict[str, Any]:
    ordered = sorted(intervals)
    busy, current_start, current_end = 0.0, ordered[0][0], ordered[0][1]
    for start, end, _ in ordered[1:]:
        if start > current_end:
            busy += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    busy += current_end - current_start
    return {
        "busy_s": busy,
        "sum_s": sum(end - start for start, end, _ in ordered),
        "buckets": len(ordered),
        "bytes": sum(nbytes for *_, nbytes in ordered),
    }


DDP_LOGGING_TIMES = (
    "avg_forward_compute_time",
    "avg_backward_compute_time",
    "avg_backward_comm_time",
    "avg_backward_compute_comm_overlap_time",
)


def ddp_logging_times(net: Any) -> dict[str, Any] | None:
    """DDP's own per-iteration averages (nanoseconds in torch, seconds here), where this torch has them."""
    getter = getattr(net, "_get_ddp_logging_data", None)
    if getter is None:
        return None
    try:
        data = getter()
    except Exception:  # noqa: BLE001 - a private API: absent or changed means "not available"
        return None
    result: dict[str, Any] = {}
    for key in DDP_LOGGING_TIMES:
        value = data.get(key)
        if isinstance(value, (int, float)) and value > 0:
            result[key.removeprefix("avg_").removesuffix("_time") + "_s"] = value / 1e9
    for key in ("bucket_cap_bytes", "num_buckets_reduced", "iteration"):
        if isinstance(data.get(key), int):
            result[key] = data[key]
    sizes = data.get("rebuilt_bucket_sizes") or data.get("bucket_sizes")
    if isinstance(sizes, str) and sizes.strip():
        try:
            result["bucket_sizes"] = [int(v) for v in sizes.split(",")]
        except ValueError:
            pass
    return result or None


def check_memory_cap(torch: Any, model: Any, inputs: Any, params: list[Any], cap_mb: float) -> None:
    """CPU stand-in for a device with ``cap_mb`` of memory, so out-of-memory is reachable and repeatable.

    The CPU allocator gives no reliable per-step peak, so the need is counted instead: weights, gradients and
    momentum (3x the parameter bytes), the input batch, and every layer's output for the whole batch (what
    autograd keeps for the backward pass). The outputs are counted on a two-example forward pass and scaled,
    so a batch far past the cap is refused without being allocated. Past the cap this raises the same
    OutOfMemoryError a GPU would, and the configuration ends as "oom".
    """
    per_probe = 0

    def count(_module: Any, _inputs: Any, output: Any) -> None:
        nonlocal per_probe
        outputs = output if isinstance(output, (tuple, list)) else (output,)
        for tensor in outputs:
            if isinstance(tensor, torch.Tensor):
                per_probe += tensor.numel() * tensor.element_size()

    probe = inputs[:2]
    leaves = [m for m in model.modules() if not list(m.children())]
    handles = [m.register_forward_hook(count) for m in leaves]
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            model(probe)
    finally:
        model.train(was_training)
        for handle in handles:
            handle.remove()
    batch = inputs.shape[0]
    activations = per_probe * batch / probe.shape[0]
    need = 3 * sum(p.numel() * p.element_size() for p in params) + inputs.numel() * inputs.element_size() + activations
    if need > cap_mb * 2**20:
        error = getattr(torch, "OutOfMemoryError", MemoryError)
        raise error(
            f"out of memory under the memory cap: a step needs about {need / 2**20:.0f} MiB, "
            f"the cap is {cap_mb:g} MiB"
        )


def _is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return "out of memory" in str(exc).lower()


def _max_rss_bytes() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    except (ImportError, OSError):
        return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.ddp", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="launch spec JSON written by ddptop")
    args = parser.parse_args(argv)
    try:
        spec = LaunchSpec.read(args.spec)
    except LaunchSpecError as exc:  # before any event file exists: torchrun's log is where this shows
        print(f"bench_kernels.ddp: {exc}", file=sys.stderr)
        return 2
    _die_with_parent()
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    worker = Worker(spec)
    config_id: str | None = None
    started = time.time()
    try:
        worker.start()
        for cfg in spec.configs:
            config_id = cfg.config_id
            worker.run_config(cfg)
            config_id = None
        collectives = spec.collectives.to_json() if spec.collectives else None
        if collectives and worker.world_size > 1:
            from bench_kernels.collectives import run_collectives

            def emit(**fields: Any) -> None:
                worker.writer.emit("collective", **fields)
                worker.writer.flush()

            run_collectives(worker.torch, worker.dist, worker.device, collectives, emit)
    except Terminated:
        if worker.stream is not None:
            worker.stream.send()
        worker.writer.close()
        return 143
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an event, then a non-zero exit
        worker.report_error(config_id, exc)
        traceback.print_exc()
        worker.writer.close()
        return 1
    worker.writer.emit("bye", wall_s=time.time() - started)
    worker.writer.close()
    with contextlib.suppress(Exception):
        worker.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
