"""How the kernels say what went wrong: ``WorkloadError`` for a model spec that cannot give a workload (the
check before launch turns it into ddptop's bad input), ``one_line`` for any exception in one line, and
``error_fields`` for the fields of a rank's ``error`` event (whether it is out of memory, the fix of DDP's
unused-parameter error said first)."""

from __future__ import annotations

import traceback
from typing import Any


class WorkloadError(ValueError):
    """A model spec that cannot give a workload, in one line."""


def one_line(exc: BaseException, limit: int = 300) -> str:
    """An exception as one line: its type and its message's lines joined, shortened."""
    text = " ".join(line.strip() for line in str(exc).splitlines() if line.strip())
    return f"{type(exc).__name__}: {text[:limit]}" + ("…" if len(text) > limit else "")


def error_fields(exc: BaseException, hint: str = "") -> dict[str, Any]:
    """The fields of the ``error`` event that reports ``exc`` (``hint`` first in its message: what fixes it,
    where the caller knows), its configuration and phase left to the caller."""
    return {
        "error_type": type(exc).__name__,
        "message": (hint + str(exc))[:2000],
        "traceback": "".join(traceback.format_exception(exc))[-8000:],
        "oom": is_oom(exc),
    }


# what DDP raises at the step after one in which a parameter got no gradient (torch/csrc/distributed/c10d/reducer.cpp)
DDP_UNUSED = "Expected to have finished reduction in the prior iteration"


def unused_parameter_hint(exc: BaseException) -> str:
    """The keyword that fixes DDP's unused-parameter error, said first (a reason is cut to its first sentences)."""
    if DDP_UNUSED not in str(exc):
        return ""
    return ("Some parameters got no gradient in a step: give the workload find_unused_parameters=True "
            "(ddptop.protocol.workload). ")


def is_oom(exc: BaseException) -> bool:
    if isinstance(exc, MemoryError):
        return True
    if type(exc).__name__ == "OutOfMemoryError":
        return True
    return "out of memory" in str(exc).lower()
