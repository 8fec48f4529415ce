"""Cells that several of the report's tables share: a configuration's name in a row, and a transformer's
tokens/s beside its examples/s."""

from __future__ import annotations

from ddptop import units
from ddptop.report.schema import Config

TOKENS_HEADER = "tok/sec (all ranks)"


def config_name(entry: Config) -> str:
    """A configuration as a table's first cell: its label, model and batch size per rank."""
    return f"{entry.label} {entry.model} bs{entry.batch_size}"


def tokens_too(tokens: float | None) -> str:
    """" (3,885 tok/s)" after a transformer's examples/s; "" for an image model's."""
    return f" ({units.number(tokens, 0)} tok/s)" if tokens is not None else ""
