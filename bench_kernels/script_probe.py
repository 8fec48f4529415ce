"""A user's training script, unchanged, measured as a rank of a ddptop launch.

    python -m torch.distributed.run --nproc-per-node N -m bench_kernels.script_probe --spec launch.json -- train.py ARGS...
    python -m torch.distributed.run --nproc-per-node N -m bench_kernels.script_probe --spec launch.json -- -m pkg.mod ARGS...

The rank reads its launch spec (one configuration: ``configs[0]``), says ``hello`` and ``config_start`` as
``bench_kernels.ddp`` does, then runs the script as ``__main__`` in this same process (``sys.argv`` the script
and its arguments, its folder first on ``sys.path``, as ``python train.py`` does), so torchrun's environment
(RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, ...) is the script's. Before it starts, the probe hooks public torch
API only:

- a training step ends at the optimizer's step (``torch.optim.optimizer.register_optimizer_step_post_hook``):
  the post-hook of the optimizer that stepped first in the run (others stepping between are part of the same
  step). Where CUDA is in use the step's end is taken after ``torch.cuda.synchronize()``, as ddptop's kernel
  does: the host no longer runs ahead into the next step while the GPU finishes this one, so a script whose
  host work overlapped the GPU's runs a little slower measured than alone;
- every wait for a batch of a ``torch.utils.data.DataLoader`` is timed (``DataLoader.__iter__`` replaced by one
  that wraps the iterator the original returns), the start of each pass over a loader included;
- each step's examples are the leading dimension of the first tensor of every batch drawn since the step
  before (``bench_kernels.batches.batch_tensors``), so gradient accumulation counts every micro-batch;
- ``torch.multiprocessing.spawn`` and ``start_processes`` are counted: a script that starts its own processes
  trains in them, out of the probe's sight;
- every model wrapped for data parallelism (DDP, FSDP, ZeRO) where it is made, each measured step's micro-batches
  and gradient synchronisations, DDP's own timers and the script's own collectives (``bench_kernels.probe_sync``);
  on a DDP model in a group of two ranks or more, a comm hook that takes the gradient's norm before and after
  each allreduce around the script's own hook, streamed beside the step (``bench_kernels.probe_noise``).

``ddptop_probe`` (the repository's top-level module) lets a script mark its steps and batches itself where the
hooks cannot see them: marks of its own win over the optimizer's. The probe's step times run from one step's
end to the next, with its own work between steps (streaming, flushing, the ranks' agreement) left out, and
stream as ``samples`` events with ``data_wait``, ``examples`` and ``tokens`` beside ``sec``.

After the plan's warm-up (``warmup`` steps; ``DEFAULT_WARMUP`` for auto; at least one, as the first step holds
the script's own setup) and measured steps (``iters``; for auto the kernel's precision rule, agreed between
blocks by one small all_reduce where the script's process group has the launch's size; a time budget's count)
the post-hook raises ``ProbeStop`` at the same step on every rank, so none is left inside a collective; with
``script_to_end`` the script runs to its own end instead. If the probe's own code fails, it turns itself off
and the script trains on untouched; ``config_end`` says what was lost.

Running the script and what it leaves behind is ``bench_kernels.script_target``; its batches and steps as
recorded (the timed loader iterator, explicit mode's step, the stream of steps) ``bench_kernels.probe_steps``.
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
import traceback
import weakref
from collections.abc import Callable, Iterable
from typing import Any

import ddptop_probe
from bench_kernels.errors import error_fields, one_line
from bench_kernels.hello import bind_cores, hello_fields
from bench_kernels.rank_process import (STOPS_RECEIVED, die_with_parent, events_writer,
                                       raise_on_stop_signals, read_launch_spec, report_unwritable)
from bench_kernels.script_loaders import LoaderWatch
from bench_kernels.script_stop import SCRIPT_ENDED, MeasuredSteps
from bench_kernels.probe_sync import GradSync
from bench_kernels.probe_steps import ExplicitStep, StepStream, TimedBatches, batch_examples, non_negative
from bench_kernels.script_trace import ScriptTrace
from bench_kernels.script_target import (PROGRAM, Target, exit_code, exit_quietly, parse_command, release_loaders, run_target,
                                         script_traceback)
from bench_kernels.timing import LIMITS, Measured, config_end_fields, failed_end_fields
from ddptop.protocol.config_fields import config_fields
from ddptop.protocol.devices import apply_rank_device
from ddptop.protocol.launchspec import LaunchSpec, RunConfig
from ddptop.protocol.layout import trace_file
from ddptop.protocol.variants import script_ddp_arguments, variant
from ddptop.protocol.precision import relative_half_width
from ddptop.protocol.storage import describe_os_error
from ddptop.protocol.vocab import STOPPED_EXIT, Phase
from ddptop.protocol.wire import ENDED_BY_DDPTOP, ENDED_BY_SCRIPT, EventsUnwritable, EventWriter

DEFAULT_WARMUP = 5  # warm-up steps for --warmup auto: a script's steps cannot be run again to find a steady one
# Seconds between the rank's writes of its events, at least: a script pays for each write between its steps (a
# JSON event and an os.write, about 250 µs with the caches cold after a step), 25 µs a step of 10 ms when written
# every 0.1 s, the launch's usual interval; about 5 µs at this one (benchmarks/probe_cost.py).
SCRIPT_FLUSH_INTERVAL = 0.5
_clock = time.perf_counter


class ProbeStop(BaseException):
    """Raised at the end of the last planned step to end the script there: a BaseException, so that the script's
    own ``except Exception`` lets it through."""


class ScriptStopped(BaseException):
    """SIGTERM or SIGINT arrived while the script ran (torchrun shutting the group down): a BaseException for
    the same reason as ``ProbeStop``."""


class ScriptProbe:
    """What the probe hooks in the script's process and what it makes of it: step boundaries, batch waits and
    examples, the warm-up and measured phases, when to end the script, and what it saw of the script."""

    def __init__(self, torch: Any, writer: EventWriter, cfg: RunConfig, world_size: int,
                 trace_to: tuple[str, str] | None = None) -> None:
        self.torch = torch
        self.tensor = torch.Tensor
        self.cuda_in_use = torch.cuda.is_initialized
        self.writer = writer
        self.cfg = cfg
        self.world_size = world_size  # the launch's
        self.started = time.perf_counter()
        self.last_end = self.started  # the previous step's end (the first step runs from the script's start)
        round_index = cfg.round if cfg.rounds > 1 else None
        self.warmup_steps = max(1, DEFAULT_WARMUP if cfg.warmup is None else cfg.warmup)
        self.warmup = StepStream(writer, cfg.config_id, Phase.WARMUP, self.warmup_steps, round_index)
        self.measure = StepStream(writer, cfg.config_id, Phase.MEASURE, None, round_index)
        self.measuring = False
        self.measure_started = 0.0
        self.stopping = False  # the planned steps are done: every later step boundary ends the script again
        # the step in progress: what its batches waited and held
        self.wait_s = 0.0
        self.examples = 0
        self.uncounted = False
        self.said_uncounted = False
        self.batches_seen = False  # a timed iterator gave a batch in this run: waits and examples are known
        self.drew_batch = False  # the script drew its first batch: past its setup (said once, for the hang watch)
        self.timing_batches = True  # off once timing or counting a batch failed
        self.off: str | None = None  # why the probe turned itself off (the script ran on untouched)
        self.notes: list[str] = []
        # what the probe saw of the script
        self.marker: weakref.ref[Any] | None = None  # the optimizer whose step ends a training step
        self.explicit = False
        self.optimizer_steps = 0
        self.spawned = 0
        self.process_group: bool | None = None  # at the first step
        self.group_world_size: int | None = None
        self.group_backend: str | None = None  # what the script's own init_process_group chose, not the launch's
        self.device_name: str | None = None
        self.probe_s = 0.0  # the probe's own work: at step ends and around each batch
        # its loaders and its wrappers for data parallelism; ddptop tune's try: keywords set on the script's own
        # training loader and DDP call, no_sync over its micro-batches
        tried = variant(cfg.variant)
        self.loaders = LoaderWatch(torch, self.notes, tried.loader_kwargs, cfg.loader_site)
        self.sync = GradSync(torch, self.notes, self._step_number, script_ddp_arguments(cfg.variant),
                             tried.no_sync_every)
        self.rule = MeasuredSteps(torch, cfg, world_size, self.measure, self.notes, self.sync)  # when to stop
        self.trace_to = trace_to  # (the run's folder, the trace file in it) where this launch traces its steps
        self.trace: ScriptTrace | None = None  # the profiler over steps after the measured ones, while it runs
        self.trace_mark = 0.0  # the previous traced step's end
        self._undo: list[Callable[[], None]] = []

    # -- installing -----------------------------------------------------------------------------------------
    def install(self) -> None:
        from torch.optim.optimizer import register_optimizer_step_post_hook

        handle = register_optimizer_step_post_hook(self.after_optimizer_step)
        self._undo.append(handle.remove)
        self.loaders.install()
        self._undo.append(self.loaders.uninstall)
        self._time_loaders()
        self._count_spawns()
        self.sync.install()
        self._undo.append(self.sync.uninstall)
        ddptop_probe.register(self)
        self._undo.append(functools.partial(ddptop_probe.register, None))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _time_loaders(self) -> None:
        from torch.utils.data import DataLoader

        original = DataLoader.__dict__["__iter__"]

        @functools.wraps(original)
        def timed_iter(loader: Any) -> Any:
            if not self.timing_batches:
                return original(loader)
            start = time.perf_counter()
            iterator = original(loader)  # starting a pass (its workers, say) is a wait for data too
            self.wait_s += time.perf_counter() - start
            return TimedBatches(iterator, self, self.loaders.record_of(loader))

        DataLoader.__iter__ = timed_iter  # type: ignore[method-assign]
        self._undo.append(functools.partial(setattr, DataLoader, "__iter__", original))

    def _count_spawns(self) -> None:
        import torch.multiprocessing as multiprocessing

        for name in ("spawn", "start_processes"):
            original = getattr(multiprocessing, name, None)
            if original is None:
                continue

            def counted(*args: Any, _original: Callable[..., Any] = original, **kwargs: Any) -> Any:
                self.spawned += 1
                return _original(*args, **kwargs)

            setattr(multiprocessing, name, functools.wraps(original)(counted))
            self._undo.append(functools.partial(setattr, multiprocessing, name, original))

    # -- what ddptop_probe offers the script ----------------------------------------------------------------
    def batches(self, iterable: Iterable[Any]) -> Iterable[Any]:
        if self.off is not None:
            return iterable
        iterator = iter(iterable)
        return iterator if isinstance(iterator, TimedBatches) else TimedBatches(iterator, self)

    def step(self, examples: int | None, tokens: float | None) -> Any:
        if self.off is not None:
            return contextlib.nullcontext()
        return ExplicitStep(self, examples, tokens)

    # -- batches --------------------------------------------------------------------------------------------
    def batch_drawn(self, asked: float, drawn: float, batch: Any, loader: dict[str, Any] | None = None) -> None:
        """A batch asked for at ``asked`` came at ``drawn`` (perf_counter) from ``loader`` (its record, where it
        is a DataLoader's): the step's wait and examples. A failure here turns the timing and counting of
        batches off, never the batch."""
        try:
            self.wait_s += drawn - asked
            self.batches_seen = True
            if loader is not None:
                loader["batches"] += 1
            examples = batch_examples(batch, self.tensor)
            if examples is None:
                if not self.said_uncounted:
                    self.said_uncounted = True
                    self.notes.append(f"examples not counted: a batch of type {type(batch).__name__} holds no "
                                      "tensor with a leading dimension")
                self.uncounted = True
            else:
                self.examples += examples
            if not self.drew_batch:
                self._past_setup()
        except Exception as exc:  # noqa: BLE001 - the probe fails open: the script keeps its batch
            self.timing_batches = False
            self.batches_seen = False
            self.notes.append(f"batch waits and examples not measured from step {self._step_number()} on: "
                              f"timing a batch of type {type(batch).__name__} failed: {one_line(exc)}")
        self.probe_s += _clock() - drawn

    def _past_setup(self) -> None:
        """The script drew its first batch: a heartbeat that is no setup, written at once, so that the hang watch
        holds it to --hang-timeout from here rather than the startup grace its setup has (a script whose steps
        ddptop cannot see ends after the timeout, not after minutes). Once a run; within its first step, a
        warm-up step."""
        self.drew_batch = True
        if self.process_group is None:  # before its first step
            self.writer.emit("heartbeat", config_id=self.cfg.config_id,
                             doing="the script's first step: it drew a batch, no optimizer step yet")
            self.writer.flush()

    # -- step ends ------------------------------------------------------------------------------------------
    def after_optimizer_step(self, optimizer: Any, _args: Any, _kwargs: Any) -> None:
        self.optimizer_steps += 1
        if self.explicit or self.off is not None:
            return
        marker = self.marker() if self.marker is not None else None
        if marker is None:  # the first to step, or the next once that one is gone (a script that makes a new one)
            self.marker = weakref.ref(optimizer)
        elif marker is not optimizer:
            return  # another optimizer of the same step
        self.end_step(None, None)

    def end_step(self, examples: int | None, tokens: float | None) -> None:
        """A training step ended: record it, and end the script where the plan's steps are done (``ProbeStop``).
        A failure of the probe's own turns it off and lets the script go on."""
        if self.off is not None:
            return
        if self.stopping:
            raise ProbeStop("the planned steps are done")  # the script went on past the stop: end it again
        if self.trace is not None:
            if self._traced_step():
                self.stopping = True
                raise ProbeStop("the planned and traced steps are done")
            return
        try:
            stop = self._record(examples, tokens)
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self.off = f"the probe failed at step {self._step_number()} and stopped measuring: {one_line(exc)}"
            self.timing_batches = False
            self.sync.noise.stop()  # nothing reads the gradient norms from here
            print(f"{PROGRAM}: {self.off}; the script runs on untouched", file=sys.stderr, flush=True)
            return
        if stop and not self._start_trace():
            self.stopping = True
            raise ProbeStop("the planned steps are done")

    def _step_number(self) -> int:
        return len(self.warmup.recorded) + len(self.measure.recorded) + 1

    def _record(self, examples: int | None, tokens: float | None) -> bool:
        if self.cuda_in_use():
            self.torch.cuda.synchronize()  # the step's end on the GPU, not the host's
        ended = _clock()
        seconds = ended - self.last_end
        if examples is not None:
            examples = non_negative(examples, int)
        elif self.batches_seen and not self.uncounted:
            examples = self.examples
        data_wait = self.wait_s if self.batches_seen else None
        tokens = non_negative(tokens, float) if tokens is not None else None
        self.wait_s, self.examples, self.uncounted = 0.0, 0, False
        first = self.process_group is None
        if first:
            self._first_step()
        self.sync.step_ended(self.measuring)
        grad_sq = self.sync.noise.step_pair()  # taken every step: a warm-up step's are let go
        if self.measuring:
            self.measure.add_step(seconds, data_wait, examples, tokens, grad_sq if examples else None)
            stop = self.rule.enough(self.measure_started)
        else:
            self.warmup.add_step(seconds, data_wait, examples, tokens)
            stop = len(self.warmup.recorded) >= self.warmup_steps and self._start_measuring()
        if first and self.warmup.pending:  # the first step reaches the file at once: the setup is over
            self.warmup.send()
            self.writer.flush()
        self.last_end = _clock()  # the probe's own work is no part of the next step
        self.probe_s += self.last_end - ended
        return stop

    def _start_trace(self) -> bool:
        """The measured steps are done (on every rank at this step): profile the next steps where this launch
        traces (``bench_kernels.script_trace``), DDP's timers read first so that none of the traced steps is in
        them. Whether the script goes on."""
        if self.trace_to is None or self.cfg.trace_steps <= 0:
            return False
        self.sync.finish()
        device = "cuda" if self.cuda_in_use() else "cpu"
        self.trace = ScriptTrace(self.torch, os.path.join(*self.trace_to), self.cfg.trace_steps, device, self._heard)
        self.trace_mark = _clock()
        if self.trace.start():
            return True
        self._trace_written()
        return False

    def _traced_step(self) -> bool:
        """A traced step ended: whether the window is done (its event written)."""
        assert self.trace is not None
        if self.cuda_in_use():
            self.torch.cuda.synchronize()
        ended = _clock()
        done = self.trace.step_ended(ended - self.trace_mark)
        self.trace_mark = _clock()  # the measured steps' end (last_end) stays where it was
        if done:
            self._trace_written()
        return done

    def _trace_written(self) -> None:
        assert self.trace is not None and self.trace_to is not None
        self.writer.emit("trace", config_id=self.cfg.config_id, path=self.trace_to[1], **self.trace.fields())
        self.writer.flush()
        self.trace = None

    def _heard(self, doing: str) -> None:  # the hang watch hears the rank through every traced step
        self.writer.emit("heartbeat", config_id=self.cfg.config_id, doing=doing, trace=True)
        self.writer.flush()

    def _start_measuring(self) -> bool:
        """The warm-up is over: how many steps to measure. Whether none are (the script ends now)."""
        self.warmup.close()
        self.measuring = True
        self.sync.measuring_started()
        self.measure_started = time.perf_counter()
        return self.rule.begin(self.warmup.recorded)

    def _first_step(self) -> None:
        dist = self.torch.distributed
        self.process_group = bool(dist.is_available() and dist.is_initialized())
        self.group_world_size = dist.get_world_size() if self.process_group else None
        self.group_backend = _group_backend(dist, self.torch.cuda.is_initialized()) if self.process_group else None
        if self.torch.cuda.is_initialized():
            self.device_name = self.torch.cuda.get_device_name(self.torch.cuda.current_device())

    # -- the end ------------------------------------------------------------------------------------------------
    def send_pending(self) -> None:
        """What was measured and not sent yet (the script failed or was stopped): queued for the writer."""
        self.warmup.send()
        self.measure.send()

    def finish(self) -> None:
        """The script ended: the phase it ended in is over, its count what ran, its last steps sent; a trace it
        ended inside keeps the steps it traced."""
        (self.measure if self.measuring else self.warmup).close()
        if self.trace is not None:
            self.trace.cut_short()
            self._trace_written()

    def seen(self) -> dict[str, Any]:
        """What the probe saw of the script (config_end's ``script``)."""
        return {
            "process_group": self.process_group,
            "group_world_size": self.group_world_size,
            "launch_world_size": self.world_size,
            "group_backend": self.group_backend,
            "optimizer_steps": self.optimizer_steps,
            "spawned": self.spawned,
            "step_marks": "explicit" if self.explicit else "optimizer" if self.marker is not None else None,
            "device_name": self.device_name,
            "probe_s": self.probe_s,
            "threads": self.torch.get_num_threads(),  # after the script ran: its own set_num_threads shows here
            **self.loaders.seen(),
            **self.sync.seen(),
        }

    def note(self) -> str | None:
        notes = ([self.off] if self.off else []) + self.notes
        return "; ".join(notes) or None

    def config_end(self, ended_by: str) -> dict[str, Any]:
        """The ``config_end`` of a script that ended (by ddptop's stop or its own), its figures as the kernel's."""
        cfg, torch = self.cfg, self.torch
        measured = self.measure.recorded
        ended_early = ended_by == ENDED_BY_SCRIPT
        reason = SCRIPT_ENDED if ended_early or cfg.script_to_end else self.rule.stop_reason
        looks = self.rule.looks
        warmup_end = self.measure_started if self.measuring else self.last_end
        steps = Measured(
            iters=len(measured),
            warmup_s=warmup_end - self.started,
            measure_s=self.last_end - self.measure_started if self.measuring else 0.0,
            warmup_iters=len(self.warmup.recorded),
            stop_reason=reason,
            precision_reached=looks.width if looks is not None and not ended_early else relative_half_width(measured),
            unstable=looks is not None and reason in LIMITS,
            peak_memory_bytes=torch.cuda.max_memory_allocated() if torch.cuda.is_initialized() else None,
        )
        return {**config_end_fields(cfg, steps, cfg.round, cfg.round >= cfg.rounds - 1),
                "ended_by": ended_by, "note": self.note(), "script": self.seen()}


def main(argv: list[str] | None = None) -> int:
    spec_path, target = parse_command(sys.argv[1:] if argv is None else argv)
    spec = read_launch_spec(spec_path, PROGRAM)
    if spec is None:
        return 2
    if len(spec.configs) != 1:
        print(f"{PROGRAM}: a script's launch runs one configuration, this one lists {len(spec.configs)}",
              file=sys.stderr)
        return 2
    die_with_parent()
    rank = int(os.environ.get("RANK", "0"))
    binding = bind_cores(spec, int(os.environ.get("LOCAL_RANK", "0")))  # before torch starts its threads
    raise_on_stop_signals(ScriptStopped, only_here=True)  # the script's loader workers fork from this process
    try:
        writer = events_writer(spec, rank, max(spec.flush_interval, SCRIPT_FLUSH_INTERVAL))
    except OSError as exc:  # its events file cannot even be opened (the directory removed, read-only)
        report_unwritable(rank, describe_os_error(exc, exc.filename or spec.events_dir))
        return 1
    try:
        return _run(spec, target, writer, rank, binding)
    except EventsUnwritable as exc:  # a full disk, a quota, the directory read-only or gone: say so where it can be read
        report_unwritable(rank, str(exc))
        with contextlib.suppress(Exception):
            writer.close()
        return 1


def _group_backend(dist: Any, on_cuda: bool) -> str:
    """The backend of the script's default group for the tensors it trains on. A group made without a backend
    (``init_process_group()``, as accelerate does) says "undefined" and maps each device to torch's default for
    it ("cpu:gloo,cuda:nccl"): the one of the device the script uses, or the whole map where it has no entry."""
    backend = str(dist.get_backend())
    if backend != "undefined" or not hasattr(dist, "get_backend_config"):
        return backend
    config = str(dist.get_backend_config())
    by_device = dict(pair.split(":", 1) for pair in config.split(",") if ":" in pair)
    return by_device.get("cuda" if on_cuda else "cpu") or config


def _run(spec: LaunchSpec, target: Target, writer: EventWriter, rank: int, binding: tuple[str, list[int] | None]) -> int:
    cfg = spec.configs[0]
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    started = time.time()
    probe: ScriptProbe | None = None
    ended_by: str | None = None
    failure: BaseException | None = None
    try:
        import torch

        if spec.threads_per_rank:
            torch.set_num_threads(spec.threads_per_rank)
        # the script chooses and starts its device: the probe names it without starting CUDA
        device = torch.device("cuda", apply_rank_device(local_rank)) if spec.device == "cuda" else torch.device("cpu")
        writer.emit("hello", **hello_fields(torch, spec, device, rank, world_size, local_rank, binding,
                                            name_device=False))
        writer.emit("config_start", **config_fields(cfg), world_size=world_size, warmup=cfg.warmup, iters=cfg.iters,
                    time_budget=cfg.time_budget, precision=cfg.precision if cfg.adaptive else None, round=cfg.round,
                    rounds=cfg.rounds, notes=[], command=target.command)
        # the last event until its first batch or step: the hang watch gives the script's setup the startup grace
        writer.emit("heartbeat", config_id=cfg.config_id, doing="the script's setup, until its first step", setup=True)
        writer.flush()
        traced = cfg.trace_steps > 0 and spec.run_dir and cfg.round >= cfg.rounds - 1  # the last launch traces
        probe = ScriptProbe(torch, writer, cfg, world_size,
                            (spec.run_dir, trace_file(cfg.config_id, rank)) if traced and spec.run_dir else None)
        probe.install()
        try:
            run_target(target)
            ended_by = ENDED_BY_SCRIPT
        finally:
            probe.uninstall()
    except ProbeStop:
        ended_by = ENDED_BY_DDPTOP
    except SystemExit as exc:
        if exc.code in (None, 0):
            ended_by = ENDED_BY_SCRIPT
        else:
            failure = exc
    except ScriptStopped:  # what was measured is sent; close writes it
        return _stopped(writer, probe)
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an event, then a non-zero exit
        failure = exc
    if failure is not None and STOPS_RECEIVED:
        # the group's stop reached the script's own processes too: a DataLoader worker killed by the same
        # SIGTERM raises in the rank ("worker ... is killed by signal"), in place of or while unwinding from
        # ScriptStopped. The rank was stopped; that error is the stop's doing, not the script's
        return _stopped(writer, probe)
    if failure is not None or probe is None:
        return _failed(writer, cfg.config_id, probe, failure)
    release_loaders()
    probe.finish()
    if writer.failed is not None:  # the probe stopped measuring when its writes failed: say why, as the kernel does
        raise writer.failed
    writer.emit("config_end", **probe.config_end(ended_by or ENDED_BY_SCRIPT))
    writer.emit("bye", wall_s=time.time() - started)
    writer.close()
    dist = torch.distributed
    if dist.is_available() and dist.is_initialized():  # a script ended by ddptop did not get to destroy its group
        with contextlib.suppress(Exception):
            dist.destroy_process_group()
    return 0


def _stopped(writer: EventWriter, probe: ScriptProbe | None) -> int:
    """SIGTERM or SIGINT ended the script: what was measured is sent (close writes it), no config_end, and the
    exit code of a stopped rank, as the kernel's."""
    if probe is not None:
        probe.send_pending()
    writer.close()
    return STOPPED_EXIT


def _failed(writer: EventWriter, config_id: str, probe: ScriptProbe | None, failure: BaseException | None) -> int:
    """The script (or the rank's setup before it) raised: an error event with its own exception, the
    configuration ended as failed, and the exit code it would have had alone."""
    assert failure is not None
    if probe is not None:
        probe.send_pending()
    failure = script_traceback(failure, globals())
    fields = error_fields(failure)
    writer.emit("error", config_id=config_id, **fields)
    end = {"note": probe.note(), "script": probe.seen()} if probe is not None else {}
    writer.emit("config_end", **failed_end_fields(config_id, fields["oom"]), **end)
    writer.flush(durable=True)
    if isinstance(failure, SystemExit):
        code = exit_code(failure)
    else:
        traceback.print_exception(failure)
        code = 1
    writer.close()
    return code


if __name__ == "__main__":
    code = main()
    if code == 0:
        exit_quietly()
    sys.exit(code)
