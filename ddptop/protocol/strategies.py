"""The data-parallel strategies ddptop measures beside DDP on one node: ZeRO-1 and FSDP2.

Shared by the plan (``--strategies``: which configurations to run), the kernel (``bench_kernels.strategy_wrappers``:
how the model and its optimizer are wrapped) and the report (the strategy table's words). Every strategy
trains the same model on the same batch with the same SGD with momentum; only what each rank holds, and
the collectives that keep the ranks in step, differ:

- ``ddp``: every rank holds the whole model, its gradients and the momentum; gradients are allreduced.
- ``zero1``: DDP, with the optimizer state sharded (``torch.distributed.optim.ZeroRedundancyOptimizer``):
  each rank keeps the momentum of its share of the parameters and broadcasts its updated share.
- ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` on each top-level child module with parameters, then
  the root; parameters, gradients and momentum are sharded; each module's parameters are all-gathered for
  its forward and freed after it (``reshard_after_forward=True``), gradients reduce-scattered.
- ``fsdp2_no_reshard``: the same with ``reshard_after_forward=False``: the gathered parameters stay from the
  forward to the backward (one all-gather fewer per module, more memory).

Standard library only (the kernels import it inside torchrun workers).
"""

from __future__ import annotations

from dataclasses import dataclass

DDP = "ddp"
ZERO1 = "zero1"
FSDP2 = "fsdp2"
FSDP2_NO_RESHARD = "fsdp2_no_reshard"


@dataclass(frozen=True)
class Strategy:
    name: str
    what: str  # in words, for the report
    fsdp: bool = False  # the model is sharded by fully_shard
    reshard_after_forward: bool = True  # FSDP2's setting (fsdp only)
    zero: bool = False  # the optimizer state is sharded by ZeroRedundancyOptimizer under DDP


CATALOG: dict[str, Strategy] = {s.name: s for s in (
    Strategy(DDP, "DDP: every rank holds the model, its gradients and the momentum"),
    Strategy(ZERO1, "ZeRO-1: DDP with the optimizer state sharded (ZeroRedundancyOptimizer)", zero=True),
    Strategy(FSDP2, "FSDP2: parameters, gradients and momentum sharded, parameters freed after each forward",
             fsdp=True, reshard_after_forward=True),
    Strategy(FSDP2_NO_RESHARD, "FSDP2 with reshard_after_forward=False: gathered parameters kept until the backward",
             fsdp=True, reshard_after_forward=False),
)}


def strategy(name: str) -> Strategy:
    """The catalog's strategy of that name; a ValueError lists the known ones."""
    found = CATALOG.get(name)
    if found is None:
        raise ValueError(f"unknown strategy {name!r} (known: {', '.join(CATALOG)})")
    return found
