"""The strategy comparison and the memory frontier as report blocks (``analysis/strategy_figures.py`` makes the
figures; ``report/sections.py`` places the blocks). Narrow on purpose: the strategy table reads whole at 80
columns."""

from __future__ import annotations

from ddptop import units
from ddptop.analysis.strategy_figures import COUNTED
from ddptop.protocol.modelspec import display_name
from ddptop.report.blocks import Block, Caption, Note, Part, Table
from ddptop.report.schema import Estimate, value_of, StrategyRow, StrategyTable, Summary

STRATEGY_HEADER = ("strategy", "ex/s", "vs DDP", "verdict", "memory/rank")
LARGEST_HEADER = ("strategy", "largest batch", "ex/s", "memory/rank")
BREAKDOWN_HEADER = ("strategy", "parameters", "gradients", "optimizer", "gathered", "inputs+outputs")
FRONTIER_HEADER = ("strategy", "batch", "memory/rank", "ex/s", "")
COUNTED_NOTE = ("Memory per rank is counted on the CPU (no allocator peak there): the parameters, gradients and "
                "optimizer state this rank holds (local shards), FSDP2's gathered parameters and unreduced "
                "gradients at the backward's peak, the input batch and the layer outputs; DDP's gradient buckets "
                "(one more copy of the gradients for DDP and ZeRO-1) are not counted.")
PEAK_NOTE = "Memory per rank is the allocator's peak over the measured steps (torch.cuda.max_memory_allocated)."


def _rate(found: Estimate | None) -> str:
    return units.estimate(found, units.rate)


def _largest(row: StrategyRow) -> tuple[str, ...]:
    fits = "" if row.largest_batch_fits else " (no OOM)"
    return (row.strategy, f"{row.largest_batch}{fits}", _rate(row.largest_ex_sec_total),
            units.binary_bytes(row.largest_memory_bytes))


def _cells(row: StrategyRow) -> tuple[str, ...]:
    vs = units.estimate(row.speedup, lambda v: units.number(v, 2))
    verdict = ("reference" if row.verdict == "the reference" else row.verdict) if row.status == "ok" else row.status
    return (row.strategy, _rate(row.ex_sec_total), vs, verdict,
            units.binary_bytes(row.memory_bytes))


def _breakdown(row: StrategyRow) -> tuple[str, ...] | None:
    held = row.memory_breakdown
    if not held:
        return None
    outputs = (held.get("inputs") or 0) + (held.get("activations") or 0)
    return (row.strategy, *(units.binary_bytes(held.get(k)) for k in ("parameters", "gradients", "optimizer_state",
                                                                       "gathered")), units.binary_bytes(outputs))


def _title(table: StrategyTable) -> str:
    cap = f", memory cap {table.memory_cap_mb:g} MiB" if table.memory_cap_mb else ""
    return (f"Strategies: {display_name(table.model)} at N={table.world_size} ({table.backend}), batch {table.batch_size} per rank"
            f"{cap}; examples/s of all ranks, 95% intervals")


def strategy_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.strategies:
        parts += [Caption(_title(table)), Table(STRATEGY_HEADER, [_cells(r) for r in table.rows], first_left=True)]
        if table.answer:
            parts.append(Note(table.answer))
        counted = any(r.memory_kind == COUNTED for r in table.rows)
        breakdown = [cells for cells in map(_breakdown, table.rows) if cells]
        if breakdown:
            parts += [Caption(f"Memory per rank by kind, batch {table.batch_size}"),
                      Table(BREAKDOWN_HEADER, breakdown, first_left=True)]
        if any(r.memory_bytes is not None for r in table.rows):
            parts.append(Note(COUNTED_NOTE if counted else PEAK_NOTE))
        if any(r.largest_batch is not None and r.largest_batch != table.batch_size for r in table.rows):
            parts += [Caption("The largest batch each strategy measured (a batch sweep: the largest that fits, "
                              "the next one out of memory)"),
                      Table(LARGEST_HEADER, [_largest(r) for r in table.rows if r.largest_batch is not None],
                            first_left=True)]
    return Block("Strategies: DDP, ZeRO-1, FSDP2", parts) if parts else Block()


def _bar(value: float, top: float, width: int = 20) -> str:
    return "#" * max(1, round(width * value / top)) if top > 0 else ""


def frontier_block(summary: Summary) -> Block:
    """Memory per rank against examples/s, every measured batch of every strategy: a table with a bar of the
    examples/s, in order of memory (the frontier reads from the top: the least memory for the examples/s)."""
    parts: list[Part] = []
    for table in summary.strategies:
        points = sorted((p for p in table.frontier if p.memory_bytes is not None and p.ex_sec_total),
                        key=lambda p: (p.memory_bytes or 0))
        if len(points) < 2:
            continue
        top = max(value_of(p.ex_sec_total) or 0 for p in points)
        best = 0.0
        rows = []
        for point in points:
            ahead = (value_of(point.ex_sec_total) or 0) > best  # more examples/s than any point holding less memory
            best = max(best, value_of(point.ex_sec_total) or 0)
            rows.append((point.strategy, str(point.batch_size), units.binary_bytes(point.memory_bytes),
                         _rate(point.ex_sec_total),
                         _bar(value_of(point.ex_sec_total) or 0, top).ljust(20) + (" *" if ahead else "  ")))
        parts += [Caption(f"Memory frontier: {display_name(table.model)} at N={table.world_size}, by memory per rank"),
                  Table(FRONTIER_HEADER, rows, first_left=True),
                  Note("* on the frontier: more examples/s than every point that holds less memory per rank.")]
    return Block("Memory frontier", parts) if parts else Block()
