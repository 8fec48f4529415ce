"""A script's batches and steps as the probe records them: the examples of a batch, every wait for a batch
timed (``TimedBatches``), explicit mode's step (``ExplicitStep``), and the stream of measured steps with what
the probe saw of each beside its seconds (``StepStream``)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from bench_kernels.batches import batch_tensors
from bench_kernels.timing import SampleStream
from ddptop.protocol.wire import EventWriter



class Probe(Protocol):
    """What a timed loader and an explicit step tell the probe (``bench_kernels.script_probe.ScriptProbe``)."""

    timing_batches: bool
    explicit: bool

    def batch_drawn(self, asked: float, drawn: float, batch: Any, loader: dict[str, Any] | None) -> None: ...

    def end_step(self, examples: int | None, tokens: float | None) -> None: ...

_clock = time.perf_counter


def batch_examples(batch: Any, tensor: type | None = None) -> int | None:
    """The examples of one batch: the leading dimension of its first tensor (a tensor, or one inside a tuple,
    list, dict, dataclass or namedtuple); None where it holds no tensor with a leading dimension. ``tensor``:
    torch.Tensor, where the caller holds it."""
    if tensor is None:
        import torch

        tensor = torch.Tensor
    # the usual (inputs, labels) without the walk over the whole batch: this runs for every batch
    first = batch[0] if isinstance(batch, (tuple, list)) and batch else batch
    if not isinstance(first, tensor):
        tensors = batch_tensors(batch)
        first = tensors[0] if tensors else None
    if first is None or first.dim() == 0:
        return None
    return int(first.shape[0])


def non_negative(value: Any, kind: type) -> Any:
    """A count a script passed to ``ddptop_probe.step``, as ``kind``; None where it is no such count."""
    try:
        count = kind(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return count if count >= 0 else None


class StepStream(SampleStream):
    """One phase's steps, each with what the probe saw of it beside its seconds: its wait for batches, its
    examples and its tokens (None where not known). Sent as SampleStream's are, at most every flush interval; a
    run of steps that know different things goes in events of its own, so each list lines up with ``sec``."""

    LISTS = ("data_wait", "examples", "tokens", "grad_sq_local", "grad_sq_averaged")

    def __init__(self, writer: EventWriter, config_id: str, phase: str, total: int | None,
                 round_index: int | None) -> None:
        super().__init__(writer, config_id, phase, 0, round_index)
        self.total: int | None = total  # type: ignore[assignment]  # None: the script decides (script_to_end)
        self.beside: list[list[Any]] = [[] for _ in self.LISTS]  # pending steps' values of LISTS
        self.known: list[int] = []  # per pending step: which of them it has, one bit each

    def add_step(self, seconds: float, data_wait: float | None, examples: int | None, tokens: float | None,
                 grad_sq: tuple[float, float] | None = None) -> None:
        """A step's time and what was seen of it; ``grad_sq``: its squared gradient norms before and after its
        one synchronisation (``probe_noise``)."""
        values = (data_wait, examples, tokens) + (grad_sq if grad_sq is not None else (None, None))
        for kept, value in zip(self.beside, values):
            kept.append(value)
        self.known.append(sum(1 << i for i, value in enumerate(values) if value is not None))
        self.add(seconds)

    def send(self) -> None:
        pending, known = self.pending, self.known
        if not pending:
            return
        start = 0
        for end in range(1, len(pending) + 1):
            if end == len(pending) or known[end] != known[start]:
                self._emit(start, end)
                start = end
        self.sent += len(pending)
        self.pending, self.known, self.beside = [], [], [[] for _ in self.LISTS]

    def _emit(self, start: int, end: int) -> None:
        lists = {name: values[start:end] for name, values in zip(self.LISTS, self.beside) if values[start] is not None}
        self.writer.emit("samples", config_id=self.config_id, phase=self.phase, first_iter=self.sent + start,
                         of=self.total, sec=self.pending[start:end], **lists,
                         **({} if self.round is None else {"round": self.round}))

    def close(self) -> None:
        """The phase is over: its count is what ran, and its last steps reach the file now."""
        self.total = len(self.recorded)
        self.send()
        self.writer.flush()


class TimedBatches:
    """The iterator of a DataLoader (or of ``ddptop_probe.batches``) with every wait for a batch timed: from
    before ``next()`` to its return. The batch, StopIteration and the loader's own errors pass unchanged.
    ``loader``: the DataLoader's record (``script_loaders``), which counts its batches."""

    __slots__ = ("_iterator", "_probe", "_loader")

    def __init__(self, iterator: Iterator[Any], probe: Probe, loader: dict[str, Any] | None = None) -> None:
        self._iterator = iterator
        self._probe = probe
        self._loader = loader

    def __iter__(self) -> TimedBatches:
        return self

    def __next__(self) -> Any:
        probe = self._probe
        if not probe.timing_batches:
            return next(self._iterator)
        start = _clock()
        batch = next(self._iterator)
        probe.batch_drawn(start, _clock(), batch, self._loader)
        return batch

    def __len__(self) -> int:
        return len(self._iterator)  # type: ignore[arg-type]

    def __getattr__(self, name: str) -> Any:  # what a script reads of the loader's own iterator
        if name in TimedBatches.__slots__:  # not set yet (a copy in the making): not the iterator's to answer
            raise AttributeError(name)
        return getattr(self._iterator, name)


class ExplicitStep:
    """``ddptop_probe.step()``'s context manager: the step ends when the block does, unless it raised."""

    __slots__ = ("_probe", "_examples", "_tokens")

    def __init__(self, probe: Probe, examples: int | None, tokens: float | None) -> None:
        self._probe, self._examples, self._tokens = probe, examples, tokens

    def __enter__(self) -> ExplicitStep:
        self._probe.explicit = True  # the script marks its steps: the optimizer's no longer do
        return self

    def __exit__(self, kind: Any, value: Any, tb: Any) -> None:
        if kind is None:
            self._probe.end_step(self._examples, self._tokens)
