"""Communication as report blocks: compute against communication per step (``analysis/communication.py``),
the stragglers it finds (``analysis/stragglers.py``) and the collective benchmark's bandwidth;
``report/sections.py`` places the blocks."""

from __future__ import annotations

from ddptop import units
from ddptop.protocol.vocab import Mode
from ddptop.report.blocks import Block, Caption, Items, Note, Part, Table
from ddptop.report.cells import config_name, not_measured, unlisted_note
from ddptop.analysis.script_sync import DDP, micro_batches_run
from ddptop.report.schema import (Achieved, Buckets, CollectiveTable, Config, DdpLogging, Estimate, Straggler,
                                  ScalingRow, StragglerEvidence, Summary, WrapperSeen, ci_of, value_of)

COMM_HEADER = (
    "config", "step p50", "no_sync p50", "exposed comm", "DDP fwd", "DDP bwd", "DDP comm", "DDP overlap",
    "buckets in flight", "t(N)-t(1) est.", "allreduce/rank", "DDP busbw", "kernel busbw",
)


def communication_rows(summary: Summary) -> list[tuple[str, ...]]:
    estimates = summary.scaling_rows()
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        comm = entry.communication
        if not comm:
            script_row = _script_row(entry, estimates.get(entry.config_id))
            if script_row is not None:
                rows.append(script_row)
            continue
        logging = comm.ddp_logging or DdpLogging()
        buckets = comm.buckets or Buckets()
        achieved = buckets.achieved or Achieved()
        exposed = units.estimate(comm.exposed_comm_s, units.milliseconds)
        if comm.exposed_comm_fraction is not None:
            exposed += f", {units.percent(comm.exposed_comm_fraction.value)}"
        if comm.exposed_comm_s and comm.exposed_comm_s.low == 0.0:
            exposed += " (within noise of none)"
        estimate = estimates.get(entry.config_id)
        rows.append(
            (
                config_name(entry)
                + (f" bucket {entry.bucket_cap_mb:g}" if len(summary.plan.bucket_caps()) > 1 else ""),
                units.milliseconds(comm.step_s),
                units.milliseconds(value_of(comm.compute_s)),
                exposed,
                units.milliseconds(logging.forward_compute_s),
                units.milliseconds(logging.backward_compute_s),
                units.milliseconds(logging.backward_comm_s),
                units.milliseconds(logging.backward_compute_comm_overlap_s),
                units.milliseconds(buckets.in_flight_s),
                units.milliseconds(value_of(estimate.comm_estimate_from_t1_s) if estimate else None),
                units.binary_bytes(comm.allreduce_bytes_per_rank) if entry.world_size > 1 else units.DASH,
                units.gbps(achieved.busbw_gbs) + _of_link(achieved.link_share, achieved.link),
                units.gbps(achieved.collective_busbw_gbs),
            )
        )
    return rows


def _main_ddp(entry: Config) -> WrapperSeen | None:
    """The script's DDP model that ran the most micro-batches in the measured steps, as the analysis chose it."""
    ddp = [w for w in (entry.script.wrappers or []) if w.kind == DDP] if entry.script else []
    return max(ddp, key=lambda w: micro_batches_run(w.sync_steps), default=None)


def _script_row(entry: Config, estimate: ScalingRow | None) -> tuple[str, ...] | None:
    """A script's row, where DDP's timers measured its communication: no no_sync() step (a script's steps cannot
    be run again), its exposed communication from DDP's own timers (median over ranks and launches, their range
    in brackets), no comm hook of ddptop's (the script's own would be replaced), no bandwidth."""
    sync, main = entry.grad_sync, _main_ddp(entry)
    if not entry.kind.comm_from_ddp_timers or sync is None or sync.exposed_comm_s is None or sync.synchronises is False or not main:
        return None
    logging = main.ddp_logging or DdpLogging()
    exposed = units.milliseconds(sync.exposed_comm_s)
    spread = sync.exposed_comm_range_s
    if spread and spread[0] != spread[1]:
        exposed += f" ({units.milliseconds(spread[0]).removesuffix(' ms')}–{units.milliseconds(spread[1])})"
    if sync.exposed_comm_share is not None:
        exposed += f", {units.percent(sync.exposed_comm_share)}"
    step = entry.stats.sec_iter.p50 if entry.stats else None
    return (config_name(entry), units.milliseconds(step), units.DASH, "DDP " + exposed,
            units.milliseconds(logging.forward_compute_s), units.milliseconds(logging.backward_compute_s),
            units.milliseconds(logging.backward_comm_s), units.milliseconds(logging.backward_compute_comm_overlap_s),
            units.DASH, units.milliseconds(value_of(estimate.comm_estimate_from_t1_s) if estimate else None),
            units.DASH, units.DASH, units.DASH)


def _of_link(share: float | None, link: str | None) -> str:
    """" (61% of NVLink)" after a busbw: the share of the link's peak it ran over, when there is one."""
    return f" ({units.percent(share)} of {link})" if share is not None else ""


COMM_NOTE = (
    "exposed comm = step - no_sync step (95% interval in brackets); DDP columns are DDP's own averages; buckets in flight = time any "
    "gradient bucket's allreduce was running (comm hook); t(N)-t(1) est. = t(N) minus the N=1 time scaled to "
    "the rank's work; busbw = bytes x 2(N-1)/N / time, the kernel's at DDP's bucket size, with its share of "
    "the peak of the link it ran over (NVLink, or PCIe) where there is one."
)
SCRIPT_COMM_NOTE = (
    "A script's row: no no_sync p50 (its steps cannot be run again); exposed comm \"DDP\" = DDP's own timers, "
    "backward communication less its overlap with compute times the syncs a step, the median over ranks and "
    "launches (their range in brackets), and its share of the step; DDP columns: its averages per iteration of "
    "its model with the most micro-batches (one forward and backward: a micro-batch), the last launch's."
)


def _without_split(entry: Config) -> str:
    """Why a configuration has no row in the compute/communication table."""
    unmeasured = not_measured(entry)
    if unmeasured:
        return unmeasured
    if entry.kind.comm_from_ddp_timers:
        sync = entry.grad_sync
        if sync is not None and sync.synchronises is False:
            return "no gradient synchronised"
        return "no DDP model with its own timers (FSDP, ZeRO or none)"
    if entry.mode == Mode.NO_DDP:
        return "no DDP: no gradients synchronised"
    if entry.mode == Mode.DP:
        return "DataParallel: no DDP communication to split its step by"
    return "no compute/communication split"


def communication_block(summary: Summary) -> Block:
    rows = communication_rows(summary)
    if not rows:
        return Block()
    scripts = {e.config_id for e in summary.configs if not e.communication and _script_row(e, None) is not None}
    listed = scripts | {e.config_id for e in summary.configs if e.communication}
    missing = unlisted_note(summary.configs, listed, _without_split)
    parts: list[Part] = [Table(COMM_HEADER, rows, first_left=True), Note(COMM_NOTE)]
    parts += [Note(SCRIPT_COMM_NOTE)] if scripts else []
    return Block("Compute vs communication (per step)", parts + ([Note(missing)] if missing else []))


def _times(ratio: Estimate | None) -> str:
    return units.estimate(ratio, lambda v: units.number(v, 2, "x"))


def _steps(evidence: StragglerEvidence) -> str:
    return f"{evidence.steps} steps a rank" + (": too few to tell" if evidence.too_few_steps else "")


def straggler_figures(straggler: Straggler) -> tuple[str, list[str]]:
    """The straggler named (``analysis/stragglers.py``), and the figures that name it or clear every rank."""
    rank, unconfirmed = straggler.rank, straggler.unconfirmed
    if rank is not None:
        head = f"rank {rank} is the straggler ({straggler.evidence})"
    elif unconfirmed and len(unconfirmed) > 1:
        first, second = unconfirmed[:2]
        head = (f"no straggler named: the {first.evidence} points at rank {first.rank}, the "
                f"{second.evidence} at rank {second.rank}")
    elif unconfirmed:
        found = unconfirmed[0]
        other = "allreduce wait" if found.evidence == "no_sync compute" else "no_sync compute"
        head = (f"no straggler named: the {found.evidence} points at rank {found.rank}, the {other} does "
                f"not confirm it beyond noise (measured at another time: a passing load can slow one rank in one)")
    else:
        head = "no straggler beyond noise"
    figures = []
    compute = straggler.compute
    if compute:
        figures.append(f"compute alone (no_sync, {_steps(compute)}): rank {compute.rank} "
                       f"{_times(compute.ratio)} the other ranks'")
    wait = straggler.allreduce_wait
    if wait:
        longer = units.estimate(wait.others_wait_s, units.milliseconds)
        figures.append(f"allreduce wait ({_steps(wait)}): the other ranks wait {longer} a step longer than "
                       f"rank {wait.rank}")
    steps = straggler.step_time
    if steps and (compute or wait or rank is not None):
        figures.append(f"step time: rank {steps.rank} {_times(steps.ratio)} the "
                       f"other ranks'" + (" (alike: DDP keeps the ranks in step)" if (compute or wait) and
                                           units.interval_includes(ci_of(steps.ratio), 1.0) else ""))
    if rank is not None and not compute:
        figures.append("each rank's compute was not timed alone (no no_sync steps: --comm-iters 0, or the "
                       "communication analysis failed)")
    return head, figures


def stragglers_found(summary: Summary) -> list[tuple[str, str, list[str]]]:
    """(configuration, head, figures) for each configuration of two ranks or more that has a straggler named,
    or the communication analysis's figures that show none beyond noise."""
    found = []
    for entry in summary.configs:
        straggler = entry.straggler
        if straggler and (straggler.rank is not None or straggler.compute or straggler.allreduce_wait):
            found.append((entry.config_id, *straggler_figures(straggler)))
    return found


STRAGGLER_NOTE = (
    "DDP's allreduce keeps the ranks in step, so a slow rank stretches every rank's step alike: the straggler "
    "shows in each rank's compute timed alone inside no_sync() and in how long the others wait for it in the "
    "allreduce (95% intervals in brackets)."
)


def stragglers_block(summary: Summary) -> Block:
    found = stragglers_found(summary)
    if not found:
        return Block()
    return Block("Stragglers (per configuration)", [Items(found), Note(STRAGGLER_NOTE)])


COLLECTIVE_HEADER = ("size", "placement", "time p50", "algbw", "busbw")


def _collective_rows(table: CollectiveTable) -> list[tuple[str, ...]]:
    return [
        (
            units.binary_bytes(r.bytes),
            "in place" if r.inplace else "out of place",
            units.microseconds(r.time_s),
            units.gbps(r.algbw_gbs),
            units.estimate(r.busbw_gbs, units.gbps),
        )
        for r in table.rows
    ]


def _collective_title(table: CollectiveTable) -> str:
    peak = ""
    if table.peak_busbw_gbs:
        peak = f"; peak busbw {units.gbps(table.peak_busbw_gbs)} at {units.binary_bytes(table.peak_at_bytes)}"
        if table.link_share is not None:
            peak += (f", {units.percent(table.link_share)} of the {units.gbps(table.link_peak_gbs)} "
                     f"{table.link} peak")
        elif table.link_why:
            peak += f" ({table.link_why})"
    return (
        f"Collective {table.op} at N={table.world_size} ({table.backend}), "
        f"busbw = algbw x {units.significant(table.busbw_factor)}{peak}"
    )


def collectives_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.collectives:
        parts += [Caption(_collective_title(table)), Table(COLLECTIVE_HEADER, _collective_rows(table))]
    return Block(None, parts)
