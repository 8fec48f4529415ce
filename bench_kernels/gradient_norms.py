"""Squared gradient norms on either side of DDP's allreduce, per synchronisation, for the gradient noise scale.

A comm hook sees each bucket twice: its flat buffer as this rank's backward left it (the local gradient, over
this rank's batch) and the averaged result the allreduce hands back (the gradient over every rank's batch).
``before`` and ``after`` take one norm of each, a read of the buffer and nothing copied (``vector_norm``
accumulates in float32 at least, whatever the gradient's dtype); a synchronisation's squared norms are the sums over
its buckets. DDP launches its buckets in index order, so bucket 0 starts a synchronisation.

On CUDA the norms stay on the device, queued where the hook and its callback run (the backward stream, and
the stream made to wait for the allreduce); ``take`` reads them after the step's own synchronize, so the hook
never waits for the device. A multiplier common to both sides (a GradScaler's loss scale, a loss summed rather
than averaged) cancels in the noise scale; the analysis drops a synchronisation whose norms are not finite
(an fp16 step skipped for overflow). ``ddptop.analysis.noise_scale`` turns the pairs into the estimate.
"""

from __future__ import annotations

from typing import Any


class GradientNorms:
    """The norms of each bucket before and after its allreduce, grouped by synchronisation."""

    def __init__(self, torch: Any) -> None:
        self.torch = torch
        self.local: list[list[Any]] = []  # per synchronisation, each bucket's local gradient norm (a 0-d tensor)
        self.averaged: list[list[Any]] = []  # ... and its averaged gradient's

    def before(self, index: int, buffer: Any) -> None:
        """A bucket handed to the allreduce: its local gradient's norm, before anything divides it in place."""
        if index == 0 or not self.local:
            self.local.append([])
            self.averaged.append([])
        self.local[-1].append(self._norm(buffer))

    def after(self, result: Any) -> None:
        """The bucket's averaged gradient, as the allreduce (or the model's own hook) returned it."""
        tensor = result[0] if isinstance(result, (list, tuple)) else result
        if self.averaged:
            self.averaged[-1].append(self._norm(tensor))

    def _norm(self, tensor: Any) -> Any:
        """The norm accumulated in float32 at least (a bf16 or fp16 gradient's own precision would lose it)."""
        torch = self.torch
        return torch.linalg.vector_norm(tensor, dtype=torch.promote_types(tensor.dtype, torch.float32))

    def take(self) -> list[tuple[float, float]]:
        """Each complete synchronisation's squared norms (local, averaged) since the last call, in order; the
        device must be done with them (after the step's synchronize). A synchronisation whose buckets did not
        all come back (a fault) is left out."""
        done = [(self._squared(local), self._squared(averaged))
                for local, averaged in zip(self.local, self.averaged) if local and len(local) == len(averaged)]
        self.local, self.averaged = [], []
        return done

    def _squared(self, norms: list[Any]) -> float:
        return float(self.torch.stack(norms).double().square().sum().item())
