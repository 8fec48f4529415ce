"""Fault injection, a testing aid: make a rank crash, run out of memory, hang or die at a chosen step, or
run slow.

    ddptop run --inject crash:rank=1:iter=20 --inject hang:rank=0:iter=5:config=n2
    ddptop run --inject slow:rank=1:factor=3

A fault is ``KIND[:rank=R][:iter=I][:config=TEXT][:phase=P]``: at measured step ``I`` (default 0) of every
configuration whose id contains ``TEXT`` (default: all), rank ``R`` (default 0); with ``phase=analysis``
instead when that configuration's communication analysis builds its second DDP wrapper (after the
configuration's measured steps have ended)
- ``crash``: raises RuntimeError, as a bug in a model would;
- ``oom``: raises torch's OutOfMemoryError, as a too-large batch would;
- ``hang``: stops making progress (sleeps until signalled), as a rank stuck in a collective would;
- ``kill``: sends itself SIGKILL, as the kernel's OOM killer or a node fault would;
- ``exit``: leaves at once with exit code 3, without reporting anything.
``slow:rank=R:factor=F[:config=TEXT]`` is no event at a step but a rank slower than its peers, as a throttled
GPU or a busier node would make it: every training step of rank R in those DDP configurations (warm-up,
measured, and the communication analysis) computes about F times as long (``Slowdown``).
Standard library and ddptop.protocol only: ddptop validates the specs, the ranks act on them.
"""

from __future__ import annotations

import math
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptop.protocol.vocab import Phase

STEP_KINDS = ("crash", "oom", "hang", "kill", "exit")  # fire once, just before a chosen step
SLOW = "slow"
KINDS = (*STEP_KINDS, SLOW)
PHASES = (Phase.MEASURE, Phase.ANALYSIS)


class FaultSpecError(ValueError):
    """A malformed --inject value; one line for the user."""


@dataclass(frozen=True)
class Fault:
    kind: str
    rank: int = 0
    iteration: int = 0
    config: str = ""
    phase: Phase = Phase.MEASURE
    factor: float = 1.0  # slow: how many times as long the rank's compute takes

    @property
    def at_step(self) -> bool:
        """Fires once at a step (``fire``), rather than slowing every step down (``Slowdown``)."""
        return self.kind in STEP_KINDS

    def matches(self, config_id: str, rank: int) -> bool:
        """The rank, and a configuration whose id holds ``config`` (ends with it, when it ends with "$")."""
        if self.config.endswith("$"):
            return rank == self.rank and config_id.endswith(self.config[:-1])
        return rank == self.rank and self.config in config_id


def parse_fault(text: str) -> Fault:
    kind, *options = _options(text.strip().split(":"))
    if kind not in KINDS:
        raise FaultSpecError(f"--inject {text!r}: unknown fault {kind!r} (known: {', '.join(KINDS)})")
    allowed = ("rank", "factor", "config") if kind == SLOW else ("rank", "iter", "config", "phase")
    values: dict[str, Any] = {}
    for option in options:
        key, sep, value = option.partition("=")
        if not sep or key not in allowed:
            expected = ("rank=R, factor=F or config=TEXT" if kind == SLOW
                        else "rank=R, iter=I, config=TEXT or phase=P")
            raise FaultSpecError(f"--inject {text!r}: expected {expected}, got {option!r}")
        if key == "config":
            values["config"] = value
            continue
        if key == "phase":
            if value not in PHASES:
                raise FaultSpecError(f"--inject {text!r}: phase must be one of {', '.join(PHASES)}")
            values["phase"] = Phase(value)
            continue
        if key == "factor":
            values["factor"] = _factor(text, value)
            continue
        if not value.isdigit():
            raise FaultSpecError(f"--inject {text!r}: {key} must be a non-negative integer")
        values["rank" if key == "rank" else "iteration"] = int(value)
    if kind == SLOW and "factor" not in values:
        raise FaultSpecError(f"--inject {text!r}: slow needs factor=F (its compute takes F times as long)")
    return Fault(kind, **values)


def _options(parts: list[str]) -> list[str]:
    """The kind and its options; a config's text may hold colons (``config=hf:llama:hidden_size=64``): a part
    after ``config=`` that is no option of its own belongs to it."""
    found: list[str] = []
    for part in parts:
        key = part.partition("=")[0]
        if found and found[-1].startswith("config=") and key not in ("rank", "iter", "phase", "factor", "config"):
            found[-1] += ":" + part
        else:
            found.append(part)
    return found


def _factor(text: str, value: str) -> float:
    try:
        factor = float(value)
    except ValueError:
        factor = math.nan
    if not (math.isfinite(factor) and factor > 1):
        raise FaultSpecError(f"--inject {text!r}: factor must be a number above 1, got {value!r}")
    return factor


# A slowed rank sleeps through its pause but this last part, which it waits out busy: a sleeper wakes late and
# computes slower after its nap (cold caches, a slower clock), while a rank busy for the whole pause takes a
# core its peers may need on a node with fewer cores than work.
WAKE_MARGIN_S = 0.001
RECENT_STEPS = 10  # the pause scales the shortest compute of this many latest steps


class Slowdown:
    """``slow``: one rank's compute, its forward and backward, takes ``factor`` times as long.

    At the start of its model's forward (``before_forward``, a forward pre-hook on the bare model: after DDP
    has re-sent the buffers, before the first gradient is ready) the rank pauses for ``factor - 1`` times
    its compute (``compute_s``), so its peers wait for it in the gradient allreduce as they would for a
    slower device. That compute runs from the end of the pause to its last gradient
    (``gradient_ready``, a hook on every parameter's accumulated gradient): the allreduce's wait and tail
    are no part of it, or a model whose step is mostly communication would be slowed by that. The pause is
    slept, its last ``WAKE_MARGIN_S`` waited out busy.

    ``mark`` stamps a moment and ``elapsed`` measures between two stamps: ``time.perf_counter`` by default;
    on a GPU, CUDA events (``bench_kernels.training``), read after the step's closing synchronize, so the
    compute is the device's (run on CPU only).
    """

    def __init__(self, factor: float, mark: Callable[[], Any] | None = None,
                 elapsed: Callable[[Any, Any], float] | None = None) -> None:
        self.factor = factor
        self.mark = mark or time.perf_counter
        self.elapsed = elapsed or (lambda start, end: end - start)
        self.computes: deque[float] = deque(maxlen=RECENT_STEPS)  # the latest steps' compute
        self.started: Any = None  # this step's compute began (the pause over)
        self.ready: Any = None  # this step's latest gradient accumulated

    @property
    def compute_s(self) -> float | None:
        """The rank's compute undisturbed, as near as its latest steps tell: their shortest (a step that lost
        its core for a while, or woke slowly from its pause, would stretch the next pause ``factor - 1`` times
        that)."""
        return min(self.computes) if self.computes else None

    def before_forward(self, *_args: Any) -> None:
        if self.computes:
            clock = time.perf_counter
            until = clock() + (self.factor - 1) * self.compute_s
            if until - clock() > WAKE_MARGIN_S:
                time.sleep(until - clock() - WAKE_MARGIN_S)
            while clock() < until:
                pass
        self.started = self.mark()

    def gradient_ready(self, *_args: Any) -> None:
        self.ready = self.mark()

    def timed(self, step: Callable[[], None]) -> Callable[[], None]:
        """``step``, measuring its compute for the next step's pause."""

        def slowed_step() -> None:
            self.started = self.ready = None
            step()
            if self.started is not None and self.ready is not None:
                self.computes.append(max(0.0, self.elapsed(self.started, self.ready)))

        return slowed_step


def fire(fault: Fault, torch: Any = None) -> None:
    """Make a fault of ``STEP_KINDS`` happen, here and now."""
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
