"""Fault injection, a testing aid: make a rank crash, run out of memory, hang or die at a chosen step.

    ddptop run --inject crash:rank=1:iter=20 --inject hang:rank=0:iter=5:config=n2

A fault is ``KIND[:rank=R][:iter=I][:config=TEXT][:phase=P]``: at measured step ``I`` (default 0) of every
configuration whose id contains ``TEXT`` (default: all), rank ``R`` (default 0); with ``phase=analysis``
instead when that configuration's communication analysis builds its second DDP wrapper (after the
configuration's measured steps have ended)
- ``crash``: raises RuntimeError, as a bug in a model would;
- ``oom``: raises torch's OutOfMemoryError, as a too-large batch would;
- ``hang``: stops making progress (sleeps until signalled), as a rank stuck in a collective would;
- ``kill``: sends itself SIGKILL, as the kernel's OOM killer or a node fault would;
- ``exit``: leaves at once with exit code 3, without reporting anything.
Standard library only: ddptop validates the specs, the ranks act on them.
"""

from __future__ import annotations

import os
import signal
import time
from dataclasses import dataclass
from typing import Any

KINDS = ("crash", "oom", "hang", "kill", "exit")
PHASES = ("measure", "analysis")


class FaultSpecError(ValueError):
    """A malformed --inject value; one line for the user."""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int = 0
    iteration: int = 0
    config: str = ""
    phase: str = "measure"

    def matches(self, config_id: str, rank: int) -> bool:
        return rank == self.rank and self.config in config_id


def parse_fault(text: str) -> Fault:
    kind, *options = text.strip().split(":")
    if kind not in KINDS:
        raise FaultSpecError(f"--inject {text!r}: unknown fault {kind!r} (known: {', '.join(KINDS)})")
    values: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in ("rank", "iter", "config", "phase"):
            raise FaultSpecError(
                f"--inject {text!r}: expected rank=R, iter=I, config=TEXT or phase=P, got {option!r}")
        if key == "config":
            values["config"] = value
            continue
        if key == "phase":
            if value not in PHASES:
                raise FaultSpecError(f"--inject {text!r}: phase must be one of {', '.join(PHASES)}")
            values["phase"] = value
            continue
        if not value.isdigit():
            raise FaultSpecError(f"--inject {text!r}: {key} must be a non-negative integer")
        values["rank" if key == "rank" else "iteration"] = int(value)
    return Fault(kind, **values)


def fire(fault: Fault, torch: Any = None) -> None:
    """Make the fault happen, here and now."""
    if fault.kind == "crash":
        raise RuntimeError(f"injected crash at step {fault.iteration} (--inject {fault.kind})")
    if fault.kind == "oom":
        error = getattr(torch, "OutOfMemoryError", MemoryError) if torch is not None else MemoryError
        raise error(f"injected out of memory at step {fault.iteration} (--inject oom)")
    if fault.kind == "hang":
        while True:  # a SIGTERM from torchrun still ends it, through the kernel's signal handler
            time.sleep(1)
    if fault.kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault.kind == "exit":
        os._exit(3)
