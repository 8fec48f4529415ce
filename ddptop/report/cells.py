"""Cells that several of the report's tables share: a configuration's name in a row, a transformer's
tokens/s beside its examples/s, and the note under a table that names every configuration it has no row for."""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence

from ddptop import units
from ddptop.protocol.modelspec import with_batch
from ddptop.report.schema import Config

TOKENS_HEADER = "tok/sec (all ranks)"


def config_name(entry: Config) -> str:
    """A configuration as a table's first cell: its label, model and batch size per rank."""
    return f"{entry.label} {with_batch(entry.model, entry.batch_size)}"


def tokens_too(tokens: float | None) -> str:
    """" (3,885 tok/s)" after a transformer's examples/s; "" for an image model's."""
    return f" ({units.number(tokens, 0)} tok/s)" if tokens is not None else ""


def not_measured(entry: Config) -> str | None:
    """Why a configuration has no figure of its steps at all ("not measured: failed"); None where it has steps."""
    return f"not measured: {entry.status}" if entry.stats is None else None


def unlisted_note(configs: Sequence[Config], listed: Collection[str], why: Callable[[Config], str]) -> str | None:
    """'No row for A (why); B (why).': every configuration a table has no row for (``listed``: the config ids
    it has rows for), so that none leaves a table without a word; None where it lists them all."""
    missing = [f"{config_name(entry)} ({why(entry)})" for entry in configs if entry.config_id not in listed]
    return f"No row for {'; '.join(missing)}." if missing else None
