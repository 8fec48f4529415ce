"""How the kernels say what went wrong in one line: ``WorkloadError`` for a model spec that cannot give a
workload (the check before launch turns it into ddptop's bad input), ``one_line`` for any exception."""

from __future__ import annotations


class WorkloadError(ValueError):
    """A model spec that cannot give a workload, in one line."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and its message's lines joined, shortened."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:limit]}" + ("…" if len(text) > limit else "")
