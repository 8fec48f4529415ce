"""Mark a training script's steps and batches for ddptop where its own hooks cannot see them.

Under ``ddptop run -- train.py ...`` each rank's probe (``bench_kernels.script_probe``) ends a training step at
the optimizer's ``step()`` and times every wait for a batch of a ``torch.utils.data.DataLoader``. A script it
cannot follow that way (several optimizers a step, an optimizer that is no ``torch.optim.Optimizer``, batches
from no DataLoader, tokens rather than examples) says so itself::

    import ddptop_probe

    for batch in ddptop_probe.batches(my_batches):
        with ddptop_probe.step(examples=len(batch), tokens=batch.numel()):
            loss = model(batch).sum()
            loss.backward()
            my_optimizer.update()

``batches(iterable)`` gives the iterable's items, each wait for one timed; ``step(examples=None,
tokens=None)`` marks one training step, which ends when its block does (a step's time runs from the end of the
one before, so the batches fetched before the block count in it). Once a script uses ``step()``, its steps are
the ones it marks and the optimizer no longer ends them. Without ``examples`` a step counts the batches it drew.

Outside ddptop both do nothing: ``batches`` returns the iterable itself and ``step`` a context manager that
does nothing, so a script keeps them when it runs on its own. Standard library only.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any, ContextManager, Protocol, TypeVar

Item = TypeVar("Item")


class Probe(Protocol):
    """What ddptop's probe offers a script while it runs it (``bench_kernels.script_probe``)."""

    def batches(self, iterable: Iterable[Item]) -> Iterable[Item]: ...

    def step(self, examples: int | None, tokens: float | None) -> ContextManager[Any]: ...


_probe: Probe | None = None  # ddptop's probe while it runs this process's script; None otherwise
_NOT_MEASURED: ContextManager[Any] = contextlib.nullcontext()  # one for every step outside ddptop: nothing to make


def batches(iterable: Iterable[Item]) -> Iterable[Item]:
    """The items of ``iterable``, each wait for one timed when ddptop measures this script; the iterable itself
    otherwise. A DataLoader's batches are timed already: they are not timed twice."""
    probe = _probe
    return iterable if probe is None else probe.batches(iterable)


def step(examples: int | None = None, tokens: float | None = None) -> ContextManager[Any]:
    """A context manager around one training step: the step ends when its block does, with ``examples``
    (else the examples of the batches it drew) and ``tokens``. Does nothing outside ddptop."""
    probe = _probe
    return _NOT_MEASURED if probe is None else probe.step(examples, tokens)


def active() -> bool:
    """Whether ddptop measures this script now."""
    return _probe is not None


def register(probe: Probe | None) -> None:
    """For ddptop's probe alone: it registers itself before the script starts and ``None`` once it ended."""
    global _probe
    _probe = probe
