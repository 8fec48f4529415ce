"""ddptop tune's answer as a report block: each DDP variant against DDP as written, the recommendation, and
what torch.compile and NCCL did (``analysis/tuning.py`` makes the figures; ``report/sections.py`` places
the block)."""

from __future__ import annotations

import os

from ddptop import units
from ddptop.protocol import precision, variants
from ddptop.protocol.modelspec import PATCH, ModelKind, display_name, model_kind
from ddptop.report.blocks import Block, Caption, Note, Part, Table, Verbatim
from ddptop.report.schema import NcclChoice, Summary, TuneRow, TuneTable

TUNE_HEADER = ("variant", "sec/iter (p50)", "ex/s vs default", "step p95", "verdict", "peak memory",
               "what changes in the maths")


def _tune_cells(row: TuneRow, kind: ModelKind) -> tuple[str, ...]:
    written = variants.as_written(row.variant)
    speedup = ("1.00" if written else
               units.estimate(row.speedup, lambda v: units.number(v, 2, "x")))
    # the reason: "Not measured in full"; a try set on the user's own calls that they (or torch) refused is not
    # applicable to them
    refused = kind.answer == PATCH and not written and row.status in ("failed", "oom")
    verdict = row.verdict if row.status == "ok" else f"{'not applicable' if refused else row.status} (below)"
    if row.status == "ok" and row.reason:  # dropped by the search: after how many launches
        verdict += f", {row.reason.partition(':')[0]}"
    memory = (units.binary_bytes(row.peak_memory_bytes) if row.peak_memory_bytes is not None
              else units.binary_bytes(row.max_rss_bytes) + " RSS" if row.max_rss_bytes is not None else units.DASH)
    return (row.what if not written else f"default: {kind.as_written}"
            + (", again" if row.variant == variants.AGAIN else ""),
            units.estimate(row.sec_iter, units.seconds), speedup, units.estimate(row.sec_iter_p95, units.seconds),
            verdict, memory, row.math or "nothing")


def tail_note(rows: list[TuneRow]) -> str | None:
    """Why a row's step p95 is missing: too few steps for its interval (``precision.tail_steps``)."""
    short = [row.p95_steps for row in rows if row.sec_iter_p95 is None and row.p95_steps is not None]
    if not short:
        return None
    from_steps = precision.tail_steps()
    return (f"step p95: 95% of the steps took less; shown with its interval from {from_steps} steps a "
            f"configuration on; {'a row' if len(short) == 1 else 'rows'} without one measured {min(short)}"
            f"{'' if len(set(short)) == 1 else f'–{max(short)}'} (more --iters or --launches).")


def tune_answer(table: TuneTable) -> list[str]:
    """The recommendation under a tuning table: only what beats the default beyond noise, in those words."""
    by_name = {row.variant: row for row in [*table.rows, *table.combination]}
    best = [by_name[name] for name in table.recommended if name in by_name]
    kind = model_kind(table.model)
    written = kind.as_written
    if len(table.rows) < 2 and not table.combination:  # a script's tune that measured no try
        why = next((t.get("why") for t in table.not_tried if t.get("what") == variants.NO_TRY), None)
        return [f"No try was measured: {why or 'none was called for or asked (why below)'}."]
    if not best:
        kept = f"{kind.yours} as written"
        return [f"Nothing beats the default beyond noise (a change is called past ±{units.percent(table.min_effect)}"
                f"): keep {kept}."]
    def times(row: TuneRow) -> str:
        return units.estimate(row.speedup, lambda v: units.number(v, 2, "x"))

    top = best[0]
    together = next((row for row in table.combination if variants.JOIN in row.variant), None)
    against = f"the examples/s of {written} measured beside it" if top is together else "the default's examples/s"
    lines = [f"Set {top.what}: {times(top)} {against}."
             + (f" It changes the arithmetic: {top.math}." if top.math else "")]
    if together is not None and together is not top:
        lines.append(f"Set together ({together.what}) they were {together.verdict} against {written} "
                     f"measured again beside them: {times(together)}.")
    if len(best) > 1:
        alone = "" if together is not None else " Each was measured alone, not together."
        lines.append("Also faster beyond noise: " + "; ".join(f"{row.what} {times(row)}" for row in best[1:])
                     + f".{alone}")
    return lines


def tries_notes(table: TuneTable) -> list[str]:
    """A script's tune: why each try was tried (what the script's first run measured), and what was not."""
    lines = []
    if table.tried:
        lines.append("Tried, from the script's first run: " + "; ".join(
            f"{t.get('variant')} ({t.get('why')})" for t in table.tried) + ".")
    if table.not_tried:
        lines.append("Not tried: " + "; ".join(f"{t.get('what')} ({t.get('why')})" for t in table.not_tried) + ".")
    return lines


def compile_notes(table: TuneTable) -> list[str]:
    """torch.compile's cost, apart from its step time: the first step of each launch (which compiles), and
    whether the compiled backward still lets DDP's allreduces overlap it."""
    notes = []
    for row in [*table.rows, *table.combination]:
        cost = row.compiled
        if cost is None:
            continue
        firsts = ", ".join(units.seconds(s, 1, unit=True) for s in cost.first_step_s)
        line = (f"{row.what}: the first step, which compiles, took {firsts} (one per launch; not in the step "
                "time above; Inductor's cache on disk makes a later launch compile faster)")
        if cost.graphs == 0:
            line += ("; Dynamo captured no graph, so the model ran eagerly (a model whose forward is torch's own, "
                     "a bare nn.Sequential, is not compiled inside DDP)")
        elif cost.graphs is not None:
            line += f"; {cost.graphs} graph(s), {cost.graph_breaks or 0} graph break(s)"
        if cost.bucketing == "kept":
            line += (f"; the backward split at {cost.compiled_buckets} bucket(s) as DDP's {cost.ddp_buckets}: each "
                     "allreduce can still overlap the backward")
        elif cost.bucketing == "lost":
            line += (f"; the backward split at only {cost.compiled_buckets} bucket(s) for DDP's {cost.ddp_buckets}: "
                     "allreduces wait for more of the backward than in eager DDP")
        notes.append(line + ".")
    return notes


def nccl_notes(table: TuneTable) -> list[str]:
    """What NCCL says it used for the allreduces of each variant's launches (its TUNING log), beside what an
    NCCL variant asked for: NCCL may ignore a setting it cannot honour for a size or a topology."""
    notes = []
    for row in [*table.rows, *table.combination]:
        allreduces = [c for c in row.nccl or [] if c.collective == "AllReduce"]
        if not allreduces:
            continue
        total = sum(c.count for c in allreduces)
        def sizes(c: NcclChoice) -> str:
            low, high = units.binary_bytes(c.min_bytes), units.binary_bytes(c.max_bytes)
            return low if low == high else f"{low}–{high}"

        used = "; ".join(f"{c.algorithm}/{c.protocol} {units.percent(c.count / total)} ({sizes(c)})"
                         for c in allreduces[:4])
        line = f"{row.what}: NCCL's log shows its {total:,} allreduces ran {used}"
        asked = dict(variants.variant(row.variant).env) if row.variant != variants.AGAIN else {}
        for variable, field in (("NCCL_ALGO", "algorithm"), ("NCCL_PROTO", "protocol")):
            wanted = asked.get(variable)
            if wanted and any(getattr(c, field) != wanted.upper() for c in allreduces):
                line += f"; not all with {variable}={wanted}, which was asked"
        notes.append(line + " (every allreduce of the launches that measured it).")
    return notes


def tuning_block(summary: Summary) -> Block:
    parts: list[Part] = []
    for table in summary.tuning:
        kind = model_kind(table.model)
        batch = f"batch {table.batch_size} per rank" if kind.own_batch else "its own batch"
        against = (f"each try, set on its own calls by ddptop, against {kind.as_written}" if kind.answer == PATCH
                   else f"each variant against {kind.as_written}")
        parts += [Caption(f"Tuning: {display_name(table.model)}, {batch} at N={table.world_size} "
                          f"({table.backend}); {against}, 95% intervals"),
                  Table(TUNE_HEADER, [_tune_cells(row, kind) for row in table.rows], first_left=True)]
        if table.combination:
            parts += [Caption(f"The faster ones set together, against {kind.as_written} "
                              "measured again beside them in launches of their own"),
                      Table(TUNE_HEADER, [_tune_cells(row, kind) for row in table.combination], first_left=True)]
        parts += [Note(line) for line in tune_answer(table)]
        short = tail_note([*table.rows, *table.combination])
        parts += [Note(line) for line in compile_notes(table) + nccl_notes(table) + ([short] if short else [])]
        if table.skipped:
            parts.append(Note("Not measured on this device: " + "; ".join(
                f"{s.get('variant')} ({s.get('why')})" for s in table.skipped) + "."))
        parts += [Note(line) for line in tries_notes(table)]
        best = best_row(table)
        if best is not None and best.paste:
            lines = list(best.paste)
            if best.patch:
                name = os.path.join(summary.run_dir or ".", patch_name(summary, table))
                lines.append(f"the rest as a patch, {name}: in {best.patch_folder}, patch -p1 < {name}")
            parts.append(Verbatim("".join(f"    {line}\n" for line in lines)))
    return Block(None, parts)


def best_row(table: TuneTable) -> TuneRow | None:
    """The row recommended first, if any."""
    return next((row for row in [*table.rows, *table.combination]
                 if table.recommended and row.variant == table.recommended[0]), None)


def patch_name(summary: Summary, table: TuneTable) -> str:
    """The file of a script's tune's patch in the run directory: one per world size tuned."""
    return "tune.patch" if len(summary.tuning) == 1 else f"tune-n{table.world_size}.patch"
