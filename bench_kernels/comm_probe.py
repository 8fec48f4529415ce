"""The communication probe: what a DDP step spends on its gradient allreduce, after the measured steps.

Three readings of one configuration, in this order:
1. DDP's own per-iteration averages (``_get_ddp_logging_data()``), read from the measured steps' wrapper;
2. the ``nosync`` phase: the same step inside ``no_sync()``, no gradient allreduce, so what remains is
   compute (its samples stream like the measured ones);
3. the hooked steps: the same step through a second DDP wrapper whose comm hook timestamps every bucket's
   allreduce from launch to completion and, at N >= 2, takes each bucket's gradient norm before and after it
   (``bench_kernels.gradient_norms``; a fresh batch is drawn before each of these steps, outside its time).
Apart from the worker because the probe owns the wrapper swap, and because none of it is the measurement
the configuration's step time comes from.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Sequence
from typing import Any

from bench_kernels.faults import Fault, fire
from bench_kernels.gradient_norms import GradientNorms
from bench_kernels.timing import SampleStream, run_steps
from bench_kernels.sources import to_channels_last
from bench_kernels.training import Training, wrap_in_ddp
from bench_kernels.ddp_logging import ddp_logging_times
from ddptop.protocol.launchspec import RunConfig



def probe_communication(
    training: Training, cfg: RunConfig, local_rank: int, nosync_stream: SampleStream, iters: int,
    faults: Sequence[Fault] = (),
) -> dict[str, Any]:
    """Run the probe's phases (``iters`` steps each) on a configuration whose measured steps are done; return the
    fields of the ``comm`` event. ``training.net`` is the hooked wrapper afterwards. ``faults`` (a testing
    aid) fire where the second wrapper is built, the analysis's largest allocation."""
    # read before the trace's steps where the configuration has one (``Worker.run_config``)
    logging_data = (training.logging_read if training.logging_taken
                    else ddp_logging_times(training.net, since=training.logging_mark))
    measure_without_sync(training, nosync_stream, iters)
    timer = rewrap_with_bucket_timer(training, cfg, local_rank, faults)
    # the new wrapper's own warm-up, the model being warm already: the configuration's fixed count (2 at least),
    # or 2 after an auto warm-up
    warmup = max(2, cfg.warmup) if cfg.warmup is not None else 2
    hooked_step_s = time_hooked_steps(training.step_through(training.net), timer, iters, warmup=warmup,
                                      between=lambda: draw_batch(training, cfg))
    fields: dict[str, Any] = {
        "ddp_logging": logging_data,
        "bucket_comm_s": [s["busy_s"] for s in timer.steps],
        "bucket_sum_s": [s["sum_s"] for s in timer.steps],
        "buckets": [s["buckets"] for s in timer.steps],
        "bucket_bytes": [s["bytes"] for s in timer.steps],
        "hooked_step_s": hooked_step_s,
    }
    if timer.norms is not None:  # one synchronisation a step, over this rank's batch
        fields.update(grad_sq_local=[local for local, _ in timer.synchronisations],
                      grad_sq_averaged=[averaged for _, averaged in timer.synchronisations],
                      grad_batch_local=[training.batch_size] * len(timer.synchronisations))
    return fields


def draw_batch(training: Training, cfg: RunConfig) -> None:
    """A new batch from the workload in place of the one the measured steps reused, between hooked steps: the
    gradient noise scale compares batches drawn afresh, not the same few again (the step's time is the same)."""
    batch = training.workload.make_batch(training.batch_size, training.device)
    training.batch = to_channels_last(batch) if cfg.channels_last else batch
    if training.device.type == "cuda":  # its kernels done before the step's time starts
        import torch

        torch.cuda.synchronize(training.device)


def measure_without_sync(training: Training, stream: SampleStream, iters: int) -> None:
    """The ``nosync`` phase: the measured wrapper's step inside ``no_sync()``, so no gradient is allreduced."""
    ddp = training.net
    step = training.step_through(ddp)

    def step_without_sync() -> None:
        with ddp.no_sync():
            step()

    run_steps(step_without_sync, iters, stream)


def rewrap_with_bucket_timer(training: Training, cfg: RunConfig, local_rank: int,
                             faults: Sequence[Fault] = ()) -> BucketTimer:
    """Replace ``training.net`` with a new DDP wrapper of the same model that carries a BucketTimer hook.

    Why a second wrapper: DDP takes a comm hook only before its first backward pass, and the measured steps
    must run without one, exactly as a user's would. The first wrapper is released before the second is
    built, so its autograd hooks and gradient buckets are gone before the second registers its own.
    """
    import torch
    import torch.distributed as dist

    training.net = None
    gc.collect()
    if training.device.type == "cuda":
        torch.cuda.empty_cache()  # the first wrapper's bucket buffers go back before the second allocates its own
    for fault in faults:
        fire(fault, torch)
    timer = BucketTimer(dist, torch, training.device, cfg.backend)
    if cfg.world_size > 1:
        timer.norms = GradientNorms(torch)
    training.net = wrap_in_ddp(training.model, cfg, training.device, local_rank, with_hook=False,
                               find_unused=training.workload.find_unused_parameters)
    training.net.register_comm_hook(None, timer.hook)
    return timer


def time_hooked_steps(step: Any, timer: BucketTimer, iters: int, warmup: int,
                      between: Any = None) -> list[float]:
    """Each hooked step's wall time, after ``warmup`` steps the timer forgets (the first steps of a new wrapper
    rebuild its buckets: not representative). ``between`` runs before each timed step, outside its time."""
    for _ in range(warmup):
        step()
    timer.reset()
    step_times = []
    for _ in range(iters):
        if between is not None:
            between()
        timer.begin_step()
        start = time.perf_counter()
        step()
        step_times.append(time.perf_counter() - start)
    timer.finish()
    return step_times


class BucketTimer:
    """A DDP comm hook that allreduces each bucket (averaging, as DDP's default does) and records when it
    was handed over and when its result arrived. Per step: the time any bucket was in flight (intervals
    merged), their sum, the bucket count and the bytes reduced.

    On the CPU both ends are wall-clock times. On CUDA the hook never waits for the device: with NCCL the
    allreduce's future completes as soon as the work is enqueued, so a synchronize in the hook or its
    callback would hold backward behind every bucket and time a schedule with no overlap. Instead a CUDA
    event is recorded at hook entry (on the stream backward runs on: the bucket is ready there) and another
    in the callback, which torch runs with a stream that waits for the allreduce's kernels (torch.futures
    ``Future.then``); both are read after the step's own synchronize (``begin_step``/``finish``), as offsets
    from an event recorded when the step began.

    Under gloo (``backend`` other than nccl) on CUDA the future carries no device: its callback runs on gloo's
    own thread, whose current device is cuda:0 (hence the device context) and whose current stream is the
    default one. Gloo has made that stream wait for its copy back to the GPU (``AsyncWork::synchronize``),
    but the stream also holds every backward kernel queued behind the bucket, so an event there would arrive
    late by that backlog. The arrival is stamped on an idle stream of the timer's own instead: when gloo's
    host-side allreduce ended (the copy back of the result, one bucket over PCIe, is not in it).
    """

    def __init__(self, dist: Any, torch: Any, device: Any, backend: str = "nccl") -> None:
        self.dist, self.torch, self.device = dist, torch, device
        self.cuda = device.type == "cuda"
        self.stamp_stream = torch.cuda.Stream(device=device) if self.cuda and backend != "nccl" else None
        self.intervals: list[tuple[float, float, int]] = []  # (handed over, arrived, bytes) of this step
        self.pending: list[tuple[Any, Any, int]] = []  # CUDA: (start event, end event, bytes) of this step
        self.origin: Any = None  # CUDA: the event the step's offsets are measured from
        self.steps: list[dict[str, Any]] = []
        self.norms: GradientNorms | None = None  # the gradient norms on either side of the allreduce, where taken
        self.synchronisations: list[tuple[float, float]] = []  # their squared norms (local, averaged), in order

    def reset(self) -> None:
        """Forget everything recorded so far (the new wrapper's first steps)."""
        self.intervals, self.pending, self.steps, self.origin = [], [], [], None
        self.synchronisations = []
        if self.norms is not None:
            self.norms.take()

    def _event(self, stream: Any = None) -> Any:
        """A timing event recorded on ``stream`` (None: the current stream of the current device)."""
        event = self.torch.cuda.Event(enable_timing=True)
        event.record(stream)
        return event

    def begin_step(self) -> None:
        """Close the step before (its events are complete: the step ended in a synchronize) and start one."""
        self._close_step()
        if self.cuda:
            with self.torch.cuda.device(self.device):
                self.origin = self._event()

    def finish(self) -> None:
        self._close_step()
        self.origin = None

    def _close_step(self) -> None:
        self._collect()
        if self.intervals:
            self.steps.append(merge_intervals(self.intervals))
        self.intervals = []
        if self.norms is not None:
            self.synchronisations.extend(self.norms.take())

    def _collect(self) -> None:
        """CUDA: turn the step's recorded events into intervals (milliseconds from the origin, in seconds)."""
        if not self.pending:
            return
        if self.origin is not None:
            for start, end, nbytes in self.pending:
                self.intervals.append((self.origin.elapsed_time(start) / 1e3, self.origin.elapsed_time(end) / 1e3,
                                       nbytes))
        self.pending = []

    def hook(self, _state, bucket):  # no annotations: DDP insists that a present one is dist.GradBucket
        buffer = bucket.buffer()
        nbytes = buffer.numel() * buffer.element_size()
        norms = self.norms
        if norms is not None:
            norms.before(bucket.index(), buffer)  # the local gradient, before div_ averages it in place
        if not self.cuda:
            start = time.perf_counter()
            future = self.dist.all_reduce(buffer.div_(self.dist.get_world_size()), async_op=True).get_future()

            def arrived(fut: Any) -> Any:
                self.intervals.append((start, time.perf_counter(), nbytes))
                if norms is not None:
                    norms.after(fut.value())
                return fut.value()[0]

            return future.then(arrived)
        torch, device = self.torch, self.device
        handed_over = self._event()  # on the current (backward) stream, where the bucket became ready
        future = self.dist.all_reduce(buffer.div_(self.dist.get_world_size()), async_op=True).get_future()

        def done(fut: Any) -> Any:
            # gloo completes CUDA futures on its own thread, whose current device is cuda:0: set ours. NCCL
            # runs this inline, on a pool stream made to wait for the allreduce (torch/futures: "the callback
            # will be invoked with some dedicated streams set as current"); gloo on the stamp stream.
            with torch.cuda.device(device):
                self.pending.append((handed_over, self._event(self.stamp_stream), nbytes))
                if norms is not None:
                    norms.after(fut.value())  # queued on the stream made to wait for the allreduce
            return fut.value()[0]

        return future.then(done)


def merge_intervals(intervals: list[tuple[float, float, int]]) -> dict[str, Any]:
    """One step's bucket allreduces: ``busy_s`` while any was in flight, ``sum_s`` of their durations, their
    count and bytes."""
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
