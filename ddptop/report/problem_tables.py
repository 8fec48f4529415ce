"""What the report says was not as planned: the configurations not measured in full, those disturbed while
measured (``telemetry/validity.py``) and the run directory's files read around damage."""

from __future__ import annotations

from ddptop import units
from ddptop.report.blocks import Block, Lines
from ddptop.report.cells import tokens_too
from ddptop.report.schema import Summary


def problems_text(summary: Summary) -> str:
    lines = []
    for entry in summary.configs:
        if entry.status != "ok":
            stats = entry.stats
            kept = (
                f" ({stats.n} steps kept: p50 {units.seconds(stats.sec_iter.p50, 4, unit=True)}, "
                f"{units.rate(stats.ex_sec_total.p50)} ex/s"
                f"{tokens_too(stats.tok_sec_total.p50 if stats.tok_sec_total else None)})"
                if stats else ""
            )
            lines.append(f"{entry.config_id}: {entry.status}{kept}" + (f": {entry.reason}" if entry.reason else ""))
        elif entry.analysis_error:
            lines.append(f"{entry.config_id}: ok, steps kept; communication analysis failed: {entry.analysis_error}")
    return "\n".join(lines)


def not_measured_block(summary: Summary) -> Block:
    problems = problems_text(summary)
    return Block("Not measured in full:", [Lines(problems.splitlines(), indent=False)]) if problems else Block()


def disturbed_lines(summary: Summary) -> list[str]:
    """One line per configuration measured while something else used the node (``telemetry/validity.py``)."""
    return [f"{entry.config_id}: " + "; ".join(entry.validity.reasons)
            for entry in summary.configs if entry.validity and entry.validity.disturbed]


def disturbed_block(summary: Summary) -> Block:
    lines = disturbed_lines(summary)
    heading = "Disturbed while measured (other load or GPU limits; the figure may not be this hardware's):"
    return Block(heading, [Lines(lines, indent=False)]) if lines else Block()


def damaged_lines(summary: Summary) -> list[str]:
    """The run directory's files read around damage (``build._damage``), one line each."""
    damaged = summary.damaged
    return [f"{name}: {what}" for name, what in sorted(damaged.items())] if isinstance(damaged, dict) else []


def damaged_block(summary: Summary) -> Block:
    lines = damaged_lines(summary)
    return Block("Read around damaged files (the figures leave out what they lost):", [Lines(lines)]) if lines else Block()
