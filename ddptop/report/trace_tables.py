"""The report's part for the profiler traces: where each configuration's step time went, from its trace.

Each figure is a share of the step, the median over every kept traced step of every rank with the range
(lowest to highest step) beside it: a handful of steps gives a spread, not a 95% interval. On a GPU the
figures are the device's (kernels, copies, NCCL); on the CPU they are the host's (the training thread's ops,
gloo's worker threads), labelled so. The traced exposed communication is set beside the no_sync() estimate
and DDP's own overlap, with one word on whether they agree.
"""

from __future__ import annotations

import os
from typing import Any

from ddptop import units
from ddptop.analysis import traces
from ddptop.protocol.modelspec import with_batch
from ddptop.report.blocks import Block, Caption, Items, Note, Pairs, Table
from ddptop.report.schema import Config, Summary, Trace

TRACE_HEADER = ("configuration", "on", "steps", "idle", "host wait", "compute", "comm", "overlap", "exposed comm",
                "memcpy", "traced/measured", "size/step")
TRACE_NOTE = (
    "share of the step, median over every traced step of every rank (lowest–highest step in brackets). GPU: idle = "
    "no kernel or copy on any stream; host wait = idle while nothing was queued (the next launch came after the "
    "GPU ran dry); compute/comm/memcpy = the union of computation, NCCL and Memcpy/Memset intervals; overlap = "
    "the share of communication under computation; exposed = communication not under computation. Host (gloo on "
    "the CPU): idle = the training thread outside any op (waiting on gloo, Python); comm = gloo's worker threads "
    "in flight; overlap = the share of that under the training thread's ops. traced/measured = the traced steps' "
    "median over the measured p50 (the profiler's cost).")
OPEN_NOTE = ("Open a trace in https://ui.perfetto.dev (Open trace file; .gz is read as is) or chrome://tracing; "
             "files under {run}/traces/.")


def _share(found: traces.Spread | None) -> str:
    if found is None:
        return units.DASH
    text = units.percent(found.median)
    low, high = units.percent(found.low), units.percent(found.high)
    return text if low == high else f"{text} ({low}–{high})"  # the same to the percent: no spread worth a range


Traced = list[tuple[Config, Trace]]  # the traced configurations, each with its trace


def _with_trace(summary: Summary) -> Traced:
    return [(entry, entry.trace) for entry in summary.configs if entry.trace is not None]


def _on_gpu(trace: Trace) -> bool:
    """The breakdown is the device's (CUDA kernels), not the host's."""
    return trace.breakdown is not None and trace.breakdown.device == "cuda"


def trace_rows(traced: Traced) -> list[tuple[str, ...]]:
    rows: list[tuple[str, ...]] = []
    for entry, trace in traced:
        gpu = _on_gpu(trace)
        ratio = trace.cost_ratio
        rows.append((
            f"{entry.label} {with_batch(entry.model, entry.batch_size)}",
            "GPU" if gpu else "host",
            f"{trace.steps}x{traces.broken_down_over(trace)[0]}",
            _share(traces.figure(trace, "idle_s")),
            _share(traces.figure(trace, "idle_host_wait_s")),
            _share(traces.figure(trace, "compute_s")),
            _share(traces.figure(trace, "communication_s")),
            _share(traces.overlap_share(trace)),
            _share(traces.figure(trace, "exposed_communication_s")),
            _share(traces.figure(trace, "memory_s")),
            units.number(ratio, 2, "x") if ratio is not None else units.DASH,
            units.binary_bytes(trace.bytes_per_step),
        ))
    return rows


def agreement(entry: Config, trace: Trace) -> str | None:
    """One line setting the traced exposed communication and overlap beside the no_sync() estimate and DDP's
    own figure: whether the trace's range meets the estimate's 95% interval."""
    comm = entry.communication
    exposed = traces.figure(trace, "exposed_communication_s")
    if comm is None or exposed is None or comm.exposed_comm_fraction is None or entry.world_size < 2:
        return None
    estimate = comm.exposed_comm_fraction.ci or [comm.exposed_comm_fraction.value] * 2
    meets = exposed.low <= estimate[1] and exposed.high >= estimate[0]
    said = (f"exposed communication: no_sync() {units.estimate(comm.exposed_comm_fraction, units.percent)}"
            f", trace {_share(exposed)}")
    logging = comm.ddp_logging
    if logging is not None and logging.backward_comm_s and logging.backward_compute_comm_overlap_s is not None:
        said += f"; overlap: DDP's own {units.percent(logging.backward_compute_comm_overlap_s / logging.backward_comm_s)}"
        overlap = traces.overlap_share(trace)
        if overlap:
            said += f", trace {_share(overlap)}"
    said += (" — they agree" if meets else
             " — they differ (the trace's few steps ran in one launch, under the profiler; the estimate is the measure)")
    return said


def breakdown_line(trace: Trace) -> str:
    """The breakdown in one line: idle (and host wait), compute, communication and its overlap, copies."""
    gpu = _on_gpu(trace)
    parts = [f"{'GPU' if gpu else 'host thread'} idle {_share(traces.figure(trace, 'idle_s'))}"]
    if gpu:
        parts.append(f"waiting for the host {_share(traces.figure(trace, 'idle_host_wait_s'))}")
        parts.append(f"compute {_share(traces.figure(trace, 'compute_s'))}")
    comm = traces.figure(trace, "communication_s")
    if comm is not None and traces.communicates(trace):
        parts.append(f"{'NCCL' if gpu else 'gloo'} {_share(comm)}, {_share(traces.overlap_share(trace))} of it "
                     f"under {'compute' if gpu else 'the ops'}, exposed {_share(traces.figure(trace, 'exposed_communication_s'))}")
    memory = traces.figure(trace, "memory_s")
    if memory is not None and memory.high > 0:
        parts.append(f"memcpy {_share(memory)}")
    count, what = traces.broken_down_over(trace)
    return "; ".join(parts) + f" (of the step, {trace.steps} steps x {count} {what}{'s' if count > 1 else ''})"


def detail_lines(trace: Trace, run_dir: str | None, top: int = 5, with_breakdown: bool = True) -> list[str]:
    """A traced configuration in lines: its breakdown, the top kernels (host ops on the CPU), the collectives,
    any note, the cost, and its files (under ``run_dir`` when given)."""
    breakdown = trace.breakdown
    what = "kernel" if _on_gpu(trace) else "op"
    lines = [breakdown_line(trace)] if breakdown is not None and with_breakdown else []
    if breakdown is not None:
        lines += [f"{k.name[:90]}: {k.count}x, {units.milliseconds(k.total_s)} total, "
                  f"{units.percent(k.share)} of {what} time" for k in breakdown.kernels[:top]]
        collectives = ", ".join(f"{c.name} {c.count}x {units.milliseconds(c.total_s)}" for c in breakdown.collectives)
        if collectives:
            lines.append(f"collectives: {collectives}")
    lines += [f"note: {note}" for note in trace.notes]
    if trace.cost_ratio is not None:
        lines.append(f"cost: traced steps {units.number(trace.cost_ratio, 2, 'x')} the measured p50, "
                     f"{units.binary_bytes(trace.bytes_per_step)} of trace per step")
    for found in trace.files:
        path = os.path.join(run_dir, found.path) if run_dir else found.path
        lines.append(f"rank {found.rank}: {path} ({units.binary_bytes(found.size_bytes)})")
    return lines


def kernel_items(traced: Traced, top: int = 3) -> list[tuple[str, str, list[str]]]:
    """The top kernels (GPU) or top-level ops (host) of each traced configuration, and where its files are."""
    items = []
    for entry, trace in traced:
        gpu = _on_gpu(trace)
        lines = detail_lines(trace, None, top, with_breakdown=False)  # the table above has the breakdown
        items.append((entry.config_id, "top kernels" if gpu else "top host ops", lines))
    return items


def trace_block(summary: Summary) -> Block:
    traced = _with_trace(summary)
    if not traced:
        return Block()
    parts: list[Any] = [Table(TRACE_HEADER, trace_rows(traced), first_left=True), Note(TRACE_NOTE)]
    pairs = [(entry.config_id, line) for entry, trace in traced if (line := agreement(entry, trace))]
    if pairs:
        parts.append(Pairs(pairs))
    parts.append(Items(kernel_items(traced)))
    parts.append(Caption(OPEN_NOTE.format(run=summary.run_dir or "RUN_DIR")))
    return Block("Where the step's time goes (profiler trace after the measured steps)", parts)
