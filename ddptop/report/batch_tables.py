"""Throughput per batch size (a batch sweep: the best batch, the first out of memory) as a report block
(``analysis/scaling.py`` makes the figures; ``report/sections.py`` places the block)."""

from __future__ import annotations

from ddptop import units
from ddptop.protocol.modelspec import display_name
from ddptop.report.blocks import Block, Caption, Part, Table
from ddptop.report.cells import TOKENS_HEADER
from ddptop.report.schema import BatchTable, Summary

BATCH_HEADER = ("batch", "global batch", "sec/iter (p50)", "ex/sec (all ranks)", "status")


def _batch_header(table: BatchTable) -> tuple[str, ...]:
    return BATCH_HEADER[:4] + ((TOKENS_HEADER,) if table.best_tok_sec_total is not None else ()) + BATCH_HEADER[4:]


def _batch_rows(table: BatchTable) -> list[tuple[str, ...]]:
    tokens = table.best_tok_sec_total is not None
    return [
        (
            str(r.batch_size),
            str(r.global_batch),
            units.estimate(r.sec_iter, units.seconds),
            units.estimate(r.ex_sec_total, lambda v: units.number(v, 1)),
            *((units.estimate(r.tok_sec_total, lambda v: units.number(v, 0)),)
              if tokens else ()),
            r.status + (" <- best" if r.batch_size == table.best_batch and r.status == "ok" else ""),
        )
        for r in table.rows
    ]


def _batch_title(table: BatchTable) -> str:
    strategy = f" {table.strategy}" if table.strategy != "ddp" else ""  # --strategies: each its own sweep
    place = (f", {table.device}" if table.device else "") + (f", {table.threads} threads per rank" if table.threads
                                                             else "")
    title = f"Throughput per batch size: {display_name(table.model)}{strategy} at N={table.world_size} ({table.backend}{place})"
    if table.best_batch is not None:
        tokens = (f", {units.number(table.best_tok_sec_total, 0)} tok/s" if table.best_tok_sec_total is not None
                  else "")
        title += f"; best {table.best_batch} per rank ({units.number(table.best_ex_sec_total, 1)} ex/s{tokens})"
    if table.first_oom_batch is not None:
        title += f"; out of memory from {table.first_oom_batch}"
    return title


def batch_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.batch_throughput:
        parts += [Caption(_batch_title(table)), Table(_batch_header(table), _batch_rows(table))]
    return Block(None, parts)
