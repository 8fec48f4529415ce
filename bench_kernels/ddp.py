"""DDP training-step benchmark, run inside torchrun workers.

    python -m torch.distributed.run --nproc-per-node N -m bench_kernels.ddp --spec launch.json

``launch.json`` (written by ddptop's sweep; ``ddptop.protocol.launchspec`` defines it) lists the
configurations to run in this one process group, so the cost of starting Python, importing torch and forming
the group is paid once per world size. For each configuration every rank builds the model (random weights),
wraps it in DistributedDataParallel (or DataParallel, or nothing for the ``no_ddp`` baseline), and times
training steps on one fixed synthetic batch: zero_grad, forward, loss, backward (DDP's gradient allreduce
happens here), optimizer step, and on GPU ``torch.cuda.synchronize()``; ``time.perf_counter()`` around exactly
that. A warm-up first (``warmup`` steps, or until the step time stops falling), then the measured steps
(``iters``, a time budget, or until the median is precise; every rank stops after the same step, agreed by a
small all_reduce between blocks of steps). Samples stream to the rank's events file between steps, never
inside one. After the measured steps of a DDP configuration the communication probe runs (``comm_iters``
steps per phase). A configuration measured in K > 1 launches (``rounds`` K, the launch being its round
``round``) runs one round here; its last launch also runs the communication probe, and each launch's
config_end carries its own round's figures (the session adds them up). After the last round a few steps run
under the profiler (``trace_steps``; bench_kernels.trace), after the probe's read of DDP's averages and before
its phases: the trace is written to the run's traces/ folder and a ``trace`` event says what only the rank
knows of it (ddptop breaks the file down: ``ddptop.analysis.trace_breakdown``). At the end of the launch the
collective benchmark (bench_kernels.collectives) runs in the same process group when the spec asks for it,
and rank 0 measures the matmul ceilings when the spec asks for them (bench_kernels.ceiling).

This module is the worker's orchestration: the process (signals, exit), the process group, the configurations'
lifecycle, failures. The parts it runs live beside it, each readable alone:
- ``bench_kernels.hello``: the rank's CPU binding and its hello (host, device, versions);
- ``bench_kernels.training``: the model spec's workload, its wrapper, the optimizer, the batch and the step;
- ``bench_kernels.timing``: the step loop, sample streaming, the time-budget arithmetic and one round's
  measurement (``measure_round``, its ``Measured``);
- ``bench_kernels.config_events``: what config_start says of a configuration (``timing``: config_end);
- ``bench_kernels.comm_probe``: DDP's logging data, the ``no_sync()`` phase and the bucket-timing comm hook;
- ``bench_kernels.flops``: the FLOPs of a configuration's step by op kind;
- ``bench_kernels.ceiling``: the matmul ceiling, rank 0's after the launch's last measured step;
- ``bench_kernels.memory_cap``: ``--memory-cap-mb`` (the GPU allocator limit, the CPU step's counted memory);
- ``bench_kernels.trace``: the profiler trace of a configuration, written for ddptop to break down;
- ``bench_kernels.errors``: the error event's fields (out of memory or not, DDP's unused-parameter fix);
- ``bench_kernels.rank_process``: what every rank program shares (its spec, its events file, signals,
  its exit), with ``bench_kernels.script_probe``.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import gc
import os
import sys
import time
import traceback
from typing import Any

from bench_kernels.comm_probe import probe_communication
from bench_kernels.ddp_logging import ddp_logging_mark, ddp_logging_times
from bench_kernels.config_events import config_start_fields
from bench_kernels.faults import SLOW, fire, parse_fault
from bench_kernels.errors import error_fields, is_oom, unused_parameter_hint
from bench_kernels.ceiling import matmul_ceilings
from bench_kernels.flops import training_step_flops
from bench_kernels.hello import bind_cores, hello_fields
from bench_kernels.memory_cap import CountedStepMemory, MemoryCapExceeded, limit_gpu_memory
from bench_kernels.rank_process import (die_with_parent, events_writer, exit_without_teardown, raise_on_stop_signals,
                                       read_launch_spec, report_unwritable)
from bench_kernels.timing import (Agree, InjectedFault, Measured, SampleStream, alone, config_end_fields, failed_end_fields,
                                  max_over_group, measure_round)
from bench_kernels.compiled import first_step
from bench_kernels.trace import trace_steps
from bench_kernels.training import Training, accepts, build_training, devices_used, eager_ddp
from ddptop.protocol import variants
from ddptop.protocol.devices import apply_rank_device
from ddptop.protocol.launchspec import LaunchSpec, RunConfig
from ddptop.protocol.storage import describe_os_error
from ddptop.protocol.layout import trace_file
from ddptop.protocol.vocab import STOPPED_EXIT, Mode, Phase
from ddptop.protocol.wire import EventsUnwritable


class Terminated(Exception):
    """SIGTERM/SIGINT arrived (torchrun shutting the group down); leave through the normal flush path."""


class AnalysisFailed(Exception):
    """A rank's communication analysis failed after its configuration ended (reported already): the group
    must end, since the other ranks may be waiting for this one inside a collective."""


class Worker:
    """One rank: joins the process group, then runs the launch spec's configurations one after another,
    reporting each through its events file."""

    def __init__(self, spec: LaunchSpec) -> None:
        self.spec = spec
        self.rank = int(os.environ.get("RANK", "0"))
        self.world_size = int(os.environ.get("WORLD_SIZE", "1"))
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.writer = events_writer(spec, self.rank)
        self.faults = [parse_fault(text) for text in spec.inject]
        self.said_bf16 = False  # the bf16 emulation line is in the rank's log
        self.binding: tuple[str, list[int] | None] = ("not bound", None)  # bind_cores' answer, for the hello

    # -- setup -------------------------------------------------------------------------------------------
    def start(self) -> None:
        import torch
        import torch.distributed as dist

        self.torch = torch
        self.dist = dist
        if self.spec.threads_per_rank:
            torch.set_num_threads(self.spec.threads_per_rank)
        if self.spec.device == "cuda":
            index = apply_rank_device(self.local_rank)  # a MIG instance of its own: cuda:0 of a narrowed view
            torch.cuda.set_device(index)
            self.device = torch.device("cuda", index)
        else:
            self.device = torch.device("cpu")
        self._join_process_group()
        self._say_hello()
        self._freeze_what_lasts()

    def _freeze_what_lasts(self) -> None:
        """Load torch._dynamo now (every optimizer and DDP's constructor import it anyway: 2 s here, which the
        first configuration's setup time used to carry) and move the objects that live as long as the rank
        (torch's modules, some 340k) out of the collector's reach. A full collection walked them all, 0.27 s
        here, at the end of every configuration (``_release_memory``) and whenever the collector ran on its
        own between steps; frozen, it walks only what the configurations allocate."""
        import torch._dynamo  # noqa: F401 - loaded for the freeze below

        gc.collect()
        gc.freeze()

    def measure_ceilings(self) -> None:
        """Rank 0 measures the matmul ceilings, when the launch asks, after the launch's last measured step: the
        matmuls hold a GPU at its power cap for seconds (630-670 W on an H100, its clocks limited), and a step
        measured right after them in the same launch ran slower than in the launches without them. The other ranks
        wait meanwhile (on the CPU, no teardown of theirs runs beside the measurement)."""
        if not self.spec.measure_ceiling:
            return
        if self.rank == 0:
            for ceiling in matmul_ceilings(self.torch, self.device, self.spec.configs):
                self.writer.emit("ceiling", **ceiling)
            self.writer.flush()
        if self.world_size > 1:
            self.dist.barrier()

    def ceilings_after_failure(self) -> None:
        """The launch's matmul ceilings after a failure that left the device usable (an out of memory), its
        memory released first; one that fails too costs the ceilings alone."""
        self._release_memory()
        try:
            self.measure_ceilings()
        except Exception:  # noqa: BLE001 - the failure before it is what the launch reports
            traceback.print_exc()

    def _join_process_group(self) -> None:
        from datetime import timedelta

        kwargs: dict[str, Any] = {
            "backend": self.spec.backend,
            "timeout": timedelta(seconds=self.spec.collective_timeout),
        }
        if self.device.type == "cuda" and accepts(self.dist.init_process_group, "device_id"):
            kwargs["device_id"] = self.device  # binds NCCL to this GPU eagerly (a keyword of newer torch)
        if self.device.type == "cuda" and self.spec.memory_cap_mb:
            # a process alone in its group may drive every GPU it sees (DataParallel): cap them all
            capped = range(self.torch.cuda.device_count()) if self.world_size == 1 else [self.device.index]
            for index in capped:
                limit_gpu_memory(self.torch.device("cuda", index), self.spec.memory_cap_mb)
        self.dist.init_process_group(**kwargs)

    def _say_hello(self) -> None:
        self.writer.emit("hello", **hello_fields(self.torch, self.spec, self.device, self.rank, self.world_size,
                                                 self.local_rank, self.binding))
        self.writer.flush()

    # -- one configuration ---------------------------------------------------------------------------------
    def run_config(self, cfg: RunConfig, round_index: int = 0) -> None:
        """One round of one configuration: build, warm up, measure; after its last round also the
        communication probe, and the config_end that ends the configuration."""
        if cfg.mode in (Mode.NO_DDP, Mode.DP) and self.world_size != 1:
            raise ValueError(f"the {cfg.mode} configuration runs in a single process")
        last = round_index >= cfg.rounds - 1
        setup_start = time.perf_counter()
        # a large model of the user's can take longer to build than --hang-timeout: the watch gives it more
        self._setting_up(cfg, "building the model, counting its FLOPs, wrapping it")
        training = build_training(cfg, self.device, self.local_rank, self.rank)
        flops = training_step_flops(self.torch, cfg, training) if round_index == 0 else None  # by op kind
        self._slow_down(cfg, training)
        # the peak from here on: DataParallel's FLOP count runs the whole global batch on its first GPU, which
        # no step does (each replica takes its share)
        self._reset_peak_memory(cfg)
        self._config_start(cfg, training, time.perf_counter() - setup_start, round_index, flops)
        if variants.variant(cfg.variant).compile:  # said after config_start: the view shows it running meanwhile
            self._setting_up(cfg, "compiling the first step")
            compiled = first_step(training.step_through(training.net), eager_ddp(training.net))
            self.writer.emit("compiled", config_id=cfg.config_id, **compiled)
            self.writer.flush()
            self._reset_peak_memory(cfg)  # the compiler's own allocations are no part of a step
        # the CPU's per-rank memory is counted (no allocator peak there); under a cap, before any step
        memory = CountedStepMemory(training, self.spec.memory_cap_mb) if self.device.type == "cpu" else None
        if memory is not None:
            memory.refuse_past_cap(cfg, self.device, self._on_fullest_rank, self.world_size)
        measured = self._measure(cfg, training, round_index)
        counted = memory.after_steps() if memory is not None else None
        if counted is not None:
            measured = dataclasses.replace(measured, counted_memory=counted)
        # read now: what the analysis below allocates (a second DDP wrapper's buckets) is no part of the step
        measured = dataclasses.replace(measured, peak_memory_bytes=self._peak_memory(cfg))
        # The configuration ends on every rank before its analysis starts, so a failure there (out of memory
        # building the second wrapper, say) cannot change the measured steps' status, nor make a batch sweep
        # skip the larger batches.
        self._config_end(cfg, measured, round_index, last)
        probe = last and cfg.mode == Mode.DDP and cfg.comm_iters > 0
        traced = True
        if last and cfg.trace_steps > 0 and self.spec.run_dir:
            if probe:  # DDP's own averages end at the measured steps: read them before any traced step runs
                training.logging_read = ddp_logging_times(training.net, since=training.logging_mark)
                training.logging_taken = True
            traced = self._trace(cfg, training)
        if probe and traced:
            self._probe_communication(cfg, training, round_index)
        del training
        self._release_memory()
        if self.world_size > 1:
            self.dist.barrier()  # configurations start together on every rank

    def _on_fullest_rank(self, need: float) -> float:
        """The largest of every rank's ``need``: each rank asks, so all refuse a step under the cap or none."""
        if self.world_size == 1:
            return need
        largest = self.torch.tensor([need], dtype=self.torch.float64)
        self.dist.all_reduce(largest, op=self.dist.ReduceOp.MAX)
        return float(largest.item())

    def refuse(self, cfg: RunConfig, refusal: MemoryCapExceeded) -> None:
        """End a configuration the memory cap refused on every rank before its first step (``MemoryCapExceeded``) as
        out of memory, and free it; the launch goes on."""
        print(f"bench_kernels.ddp: {cfg.config_id}: {refusal}", file=sys.stderr, flush=True)
        self.report_error(cfg.config_id, refusal)
        refusal.__traceback__ = None  # its frames hold the refused model: freed below, not with the exception
        self._release_memory()
        if self.world_size > 1:
            self.dist.barrier()  # the next configuration starts together on every rank, as after a measured one

    def _setting_up(self, cfg: RunConfig, doing: str) -> None:
        self.writer.emit("heartbeat", config_id=cfg.config_id, doing=doing, setup=True)
        self.writer.flush()

    def _config_start(self, cfg: RunConfig, training: Training, setup_s: float, round_index: int,
                      flops: dict[str, Any] | None = None) -> None:
        notes = self._precision_notes(cfg, say=True)
        self.writer.emit("config_start", **config_start_fields(self.torch, self.device, cfg, training, self.world_size,
                                                               setup_s, round_index, flops, notes))
        self.writer.flush()

    def _precision_notes(self, cfg: RunConfig, say: bool = False) -> list[str]:
        """What makes the configuration's dtype not what it says: bf16 on a GPU without bf16 tensor cores
        runs, emulated, at about fp32's speed. torch.cuda.is_bf16_supported(including_emulation=False) is
        true from compute capability 8.0 on, for the current device (torch/cuda/__init__.py; ``start`` made
        it this rank's); without the keyword (older torch) it has no emulation to count. The notes go with
        config_start into the summary; with ``say`` the rank also writes one line to its log, once, where
        ddptop's live view shows the launch's log."""
        if cfg.amp != "bf16" or self.device.type != "cuda":
            return []
        check = self.torch.cuda.is_bf16_supported
        native = check(including_emulation=False) if accepts(check, "including_emulation") else check()
        if native:
            return []
        note = ("bf16 is emulated on this GPU (no bf16 tensor cores below compute capability 8.0): these are not "
                "bf16 step times")
        if say and not getattr(self, "said_bf16", False):
            self.said_bf16 = True
            print(f"bench_kernels.ddp: warning: {note}", file=sys.stderr, flush=True)
        return [note]

    def _measure(self, cfg: RunConfig, training: Training, round_index: int) -> Measured:
        """The round's warm-up and measured steps (``bench_kernels.timing.measure_round``), with the process
        group's agreement and, for the probe, DDP's own averages marked between the two."""

        def warmed_up() -> None:
            if cfg.mode == Mode.DDP and cfg.comm_iters > 0:  # where DDP's own averages are to start from
                training.logging_mark = ddp_logging_mark(training.net)

        return measure_round(training.step_through(training.net), cfg, round_index, self.writer, self.device.type,
                             self._agreement(cfg), self._largest_on_any_rank,
                             self._injected_fault(cfg.config_id) if round_index == 0 else None, warmed_up)

    def _agreement(self, cfg: RunConfig) -> Agree:
        """How the ranks of this configuration agree on when to stop: a MAX all_reduce of a few figures over
        the process group, between blocks of steps (never inside a timed step); a single process alone."""
        if self.world_size == 1 or cfg.mode in (Mode.NO_DDP, Mode.DP):
            return alone
        return max_over_group(self.torch, self.device)

    def _largest_on_any_rank(self, iters: int) -> int:
        """Every rank must run the same number of steps, or DDP deadlocks: they all take the largest."""
        if self.world_size == 1:
            return iters
        agreed = self.torch.tensor([iters], device=self.device)
        self.dist.all_reduce(agreed, op=self.dist.ReduceOp.MAX)
        return int(agreed.item())

    def _reset_peak_memory(self, cfg: RunConfig) -> None:
        """Start the allocator's peak again on every GPU the configuration uses (what is allocated stays in)."""
        if self.device.type == "cuda":
            for device in devices_used(cfg, self.device):
                self.torch.cuda.reset_peak_memory_stats(device)

    def _peak_memory(self, cfg: RunConfig) -> int | None:
        """The most device memory the configuration's step held: over every GPU of a DataParallel one."""
        if self.device.type != "cuda":
            return None
        return max(self.torch.cuda.max_memory_allocated(d) for d in devices_used(cfg, self.device))

    def _probe_communication(self, cfg: RunConfig, training: Training, round_index: int) -> None:
        """The communication probe, after the configuration's end: its failure is reported as the analysis's
        (``phase`` "analysis"), never as the configuration's. Alone, the rank goes on to the next
        configuration; in a group the peers may be waiting inside a collective, so the group ends
        (``AnalysisFailed``) and the sweep relaunches what is left."""
        iters = cfg.comm_iters
        stream = SampleStream.for_round(self.writer, cfg, Phase.NOSYNC, iters, round_index)
        start = time.perf_counter()
        try:
            fields = probe_communication(training, cfg, self.local_rank, stream, iters, self.faults_for(cfg))
        except Terminated:
            raise
        except Exception as exc:  # noqa: BLE001 - out of memory, or anything else: the analysis is lost, not the steps
            self.report_error(cfg.config_id, exc, phase=Phase.ANALYSIS)
            training.net = None
            if self.world_size > 1:
                raise AnalysisFailed(cfg.config_id) from exc
            return
        self.writer.emit("comm", config_id=cfg.config_id, analysis_s=time.perf_counter() - start, **fields)
        self.writer.flush()

    def _trace(self, cfg: RunConfig, training: Training) -> bool:
        """The configuration's profiler trace (``bench_kernels.trace``), after its end: a failure costs the
        trace and the probe after it, reported as the analysis's. One inside a traced step ends the group as
        the probe's does (the peers may be waiting in a collective). Whether the step may still run."""
        relative = trace_file(cfg.config_id, self.rank)

        def progress(doing: str) -> None:  # no event otherwise until the trace's own: the hang watch hears the rank
            self.writer.emit("heartbeat", config_id=cfg.config_id, doing=doing)
            self.writer.flush()

        try:
            fields = trace_steps(self.torch, training.step_through(training.net),
                                 os.path.join(self.spec.run_dir or "", relative), cfg.trace_steps, self.device.type,
                                 progress)
        except Terminated:
            raise
        except Exception as exc:  # noqa: BLE001 - TracedStepFailed, or the profiler itself failing to start
            self.report_error(cfg.config_id, exc, phase=Phase.ANALYSIS)
            if self.world_size > 1:
                raise AnalysisFailed(cfg.config_id) from exc
            return False
        if fields.get("note"):
            print(f"bench_kernels.ddp: {cfg.config_id}: {fields['note']}", file=sys.stderr, flush=True)
        self.writer.emit("trace", config_id=cfg.config_id, path=relative, **fields)
        self.writer.flush()
        return True

    def faults_for(self, cfg: RunConfig) -> list[Any]:
        """Injected faults (a testing aid) aimed at this rank's communication analysis of ``cfg``."""
        return [f for f in self.faults
                if f.at_step and f.phase == Phase.ANALYSIS and f.matches(cfg.config_id, self.rank)]

    def _slow_down(self, cfg: RunConfig, training: Training) -> None:
        """An injected ``slow`` fault (a testing aid) aimed at this rank in ``cfg``: every step from here on.
        DDP's alone: a rank alone has no peer to hold back."""
        if cfg.mode != Mode.DDP:
            return
        for fault in self.faults:
            if fault.kind == SLOW and fault.matches(cfg.config_id, self.rank):
                training.slow_down(fault.factor)
                return

    def _config_end(self, cfg: RunConfig, measured: Measured, round_index: int, last: bool) -> None:
        """The end of one round (``last`` false: a later launch measures the configuration again), or of its
        last round, which ends the configuration; each carries that round's figures alone."""
        self.writer.emit("config_end", **config_end_fields(cfg, measured, round_index, last))
        self.writer.flush()

    def _release_memory(self) -> None:
        """Free the configuration just run before the next one is built (its model, batch and buckets)."""
        gc.collect()
        if self.device.type == "cuda":
            self.torch.cuda.empty_cache()

    def _injected_fault(self, config_id: str) -> InjectedFault | None:
        """The fault (a testing aid, --inject) this rank should suffer in this configuration's measured steps."""
        for fault in self.faults:
            if fault.at_step and fault.phase == Phase.MEASURE and fault.matches(config_id, self.rank):
                return InjectedFault(fault.iteration, functools.partial(fire, fault, self.torch))
        return None

    # -- the launch's collective benchmark ----------------------------------------------------------------
    def run_collectives(self) -> None:
        from bench_kernels.collectives import run_collectives

        def emit(**fields: Any) -> None:
            self.writer.emit("collective", **fields)
            self.writer.flush()

        run_collectives(self.torch, self.dist, self.device, self.spec.collectives.to_json(), emit, self.spec.backend)

    # -- errors ---------------------------------------------------------------------------------------------
    def report_error(self, config_id: str | None, exc: BaseException, phase: Phase | None = None) -> None:
        """An error event; for a configuration still running, its end as failed (or oom). An error in a
        ``phase`` after the configuration ended (the analysis) says which, and ends nothing."""
        fields = error_fields(exc, unused_parameter_hint(exc))
        self.writer.emit("error", config_id=config_id, **fields, **({"phase": phase} if phase else {}))
        if config_id is not None and phase is None:
            self.writer.emit("config_end", **failed_end_fields(config_id, fields["oom"]))
        self.writer.flush(durable=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.ddp", description=__doc__.splitlines()[0])
    parser.add_argument("--spec", required=True, help="launch spec JSON written by ddptop")
    args = parser.parse_args(argv)
    spec = read_launch_spec(args.spec, "bench_kernels.ddp")
    if spec is None:
        return 2
    die_with_parent()
    if spec.device == "cpu":  # Kineto's start and stop lines, and its "gpuGetDeviceCount failed", in every CPU trace
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    binding = bind_cores(spec, int(os.environ.get("LOCAL_RANK", "0")))  # before torch starts its threads
    raise_on_stop_signals(Terminated)
    try:
        worker = Worker(spec)
    except OSError as exc:  # its events file cannot even be opened (the directory removed, read-only)
        where = exc.filename or spec.events_dir
        report_unwritable(os.environ.get("RANK", "0"), describe_os_error(exc, where))
        return 1
    worker.binding = binding
    try:
        return _run(worker, spec)
    except EventsUnwritable as exc:  # a full disk, a quota, the directory read-only or gone: say so where it can be read
        report_unwritable(worker.rank, str(exc))
        with contextlib.suppress(Exception):
            worker.writer.close()
        return 1


def _run(worker: "Worker", spec: LaunchSpec) -> int:
    config_id: str | None = None
    started = time.time()
    try:
        worker.start()
        refused: list[RunConfig] = []
        for cfg in spec.configs:  # one round each: the sweep puts the rounds in separate launches
            if any(cfg.cannot_fit_after(r) for r in refused):
                continue  # cannot fit either: not started here (a batch sweep ends it as not run)
            config_id = cfg.config_id
            try:
                worker.run_config(cfg, cfg.round)
            except MemoryCapExceeded as refusal:  # refused alike on every rank, before any step
                worker.refuse(cfg, refusal)
                refused.append(cfg)
            config_id = None
        if spec.collectives and worker.world_size > 1:
            worker.run_collectives()
        worker.measure_ceilings()  # after every measured step of the launch
    except Terminated:  # the phase in progress has sent its samples; close writes them
        worker.writer.close()
        return STOPPED_EXIT
    except AnalysisFailed:  # reported, and its configuration ended before: end the group
        traceback.print_exc()
        worker.writer.close()
        return 1
    except EventsUnwritable:
        raise
    except BaseException as exc:  # noqa: BLE001 - every failure becomes an event, then a non-zero exit
        if worker.writer.failed is not None:  # the events file failed first; this is its echo
            raise worker.writer.failed from exc
        worker.report_error(config_id, exc)
        traceback.print_exc()
        if is_oom(exc) and worker.world_size == 1:
            # a batch too large ends a batch sweep's launch: the device is fine, and its ceilings are measured
            # still (no peer to wait on), else every configuration of the sweep loses its MFU of measured ceiling
            exc.__traceback__ = None  # its frames hold the step's tensors: freed before the matmuls
            worker.ceilings_after_failure()
        worker.writer.close()
        return 1
    worker.writer.emit("bye", wall_s=time.time() - started)
    worker.writer.close()
    with contextlib.suppress(Exception):
        worker.dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    if code == 0:
        exit_without_teardown()
    sys.exit(code)
