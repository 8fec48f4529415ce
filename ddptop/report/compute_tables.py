"""Compute as report blocks: achieved FLOP/s and MFU against the datasheet and the measured ceiling
(``analysis/compute.py``), and what bounds each configuration's step (``analysis/step_bound.py``);
``report/sections.py`` places the blocks."""

from __future__ import annotations

from ddptop import units
from ddptop.protocol.modelspec import display_name
from ddptop.report.blocks import Block, Lines, Note, Pairs, Table
from ddptop.report.cells import config_name, not_measured, unlisted_note
from ddptop.report.schema import Config, Summary


def _tflops(value: float | None) -> str:
    return units.DASH if value is None else units.number(value / 1e12, 3)


COMPUTE_HEADER = ("config", "dtype", "GFLOPs/step", "TFLOP/s per device", "all devices", "MFU (datasheet)",
                  "of measured ceiling")


def compute_rows(summary: Summary) -> list[tuple[str, ...]]:
    """Per configuration with a FLOP count: what it achieved and the share of the two peaks."""
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        flops = entry.flops
        if not flops:
            continue
        rows.append((
            config_name(entry),
            flops.dtype or units.DASH,
            units.number((flops.per_step or 0) / 1e9, 2),
            units.estimate(flops.achieved_per_device, _tflops),
            _tflops(flops.achieved_total),
            units.estimate(flops.mfu_datasheet, units.percent),
            units.estimate(flops.mfu_ceiling, units.percent),
        ))
    return rows


def _peaks_note(summary: Summary) -> str:
    sources = sorted({e.flops.datasheet_source for e in summary.configs if e.flops and e.flops.datasheet_source})
    ceilings = "; ".join(f"{units.number(c.flops_per_s / 1e12, 3)} TFLOP/s {c.dtype} on "
                         f"{c.device_name or 'this device'}" for c in summary.ceilings)
    return ("FLOPs per step counted by torch.utils.flop_counter on one forward and backward of the rank's batch; "
            f"datasheet: {', '.join(sources) or 'none'}; measured ceiling (best square matmul, after the sweep's "
            f"first launch's steps): {ceilings or 'not measured'}.")


def flops_notes(summary: Summary) -> list[str]:
    """What the FLOP counts of the compute table are not: given by a workload, missing ops torch's counter
    has no formula for (the figures then a lower bound), or not counted at all, per model."""
    lines: dict[str, str] = {}
    for entry in summary.configs:
        flops = entry.flops
        if flops and flops.source == "workload":
            lines.setdefault(entry.model, f"{display_name(entry.model)}: FLOPs per step given by its workload (flops(batch)), "
                                          "not counted")
        elif flops and flops.uncounted_ops:
            lines.setdefault(entry.model, f"{display_name(entry.model)}: ops without a FLOP formula, counted as 0 (FLOP/s and MFU "
                                          f"are lower bounds; give the workload flops(batch)): "
                                          f"{', '.join(flops.uncounted_ops[:6])}")
        elif not flops and entry.flops_note:
            lines.setdefault(entry.model, f"{display_name(entry.model)}: no FLOP count ({entry.flops_note})")
    return list(lines.values())


def compute_block(summary: Summary) -> Block:
    rows = compute_rows(summary)
    notes = flops_notes(summary)
    if not rows:
        return Block("Compute: FLOPs not counted", [Lines(notes)]) if notes else Block()
    missing = unlisted_note(summary.configs, {e.config_id for e in summary.configs if e.flops}, _without_flops)
    return Block("Compute: achieved FLOP/s and model FLOPs utilisation",
                 [Table(COMPUTE_HEADER, rows, first_left=True), Note(_peaks_note(summary)),
                  *([Lines(notes)] if notes else []), *([Note(missing)] if missing else [])])


def _without_flops(entry: Config) -> str:
    """Why a configuration has no row in the compute table."""
    return not_measured(entry) or f"no FLOP count{': ' + entry.flops_note if entry.flops_note else ''}"


def verdict_pairs(summary: Summary) -> list[tuple[str, str]]:
    """Per configuration: what bounds its step (``analysis/step_bound.py``)."""
    return [(entry.config_id, entry.verdict.text) for entry in summary.configs if entry.verdict]


def verdict_block(summary: Summary) -> Block:
    pairs = verdict_pairs(summary)
    return Block("Why it is not faster (per configuration):", [Pairs(pairs)]) if pairs else Block()
