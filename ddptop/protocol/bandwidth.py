"""Bus bandwidth factors of the collectives, as nccl-tests defines them (doc/PERFORMANCE.md).

busbw = algbw * factor(N), so figures compare with nccl-tests' tables. Sizes follow its convention:
allgather and reduce_scatter count the whole (gathered) buffer, the others the buffer each rank passes in.
Here rather than in the analysis because the collective kernel computes the same figure and imports only
this package.
"""

from __future__ import annotations

BUSBW_FACTORS = {
    "allreduce": lambda n: 2 * (n - 1) / n,
    "allgather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}
COLLECTIVES = tuple(BUSBW_FACTORS)


def busbw_factor(collective: str, world_size: int) -> float:
    """Bus bandwidth per unit of algorithm bandwidth for ``collective`` over ``world_size`` ranks."""
    return BUSBW_FACTORS[collective](world_size)
