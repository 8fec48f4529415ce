"""Which CUDA device each local rank uses, as ddptop tells the ranks (standard library only).

Whole GPUs go to the ranks as one ``CUDA_VISIBLE_DEVICES`` list of UUIDs, and rank k uses ``cuda:k``. A MIG
instance cannot be shared that way: a CUDA process enumerates at most one MIG device, whatever the list
holds. So for MIG (or whenever ddptop says so) the launch carries ``DDPTOP_RANK_CUDA_DEVICES``, one UUID per
local rank, and each rank narrows its own ``CUDA_VISIBLE_DEVICES`` to its entry before CUDA starts, then
uses ``cuda:0``.
"""

from __future__ import annotations

import os
from typing import MutableMapping

RANK_DEVICES_ENV = "DDPTOP_RANK_CUDA_DEVICES"


def apply_rank_device(local_rank: int, environ: MutableMapping[str, str] | None = None) -> int:
    """Narrow this rank's CUDA view when the launch says so; the CUDA index this rank then uses.

    Call before anything initialises CUDA in the process (torch initialises it lazily, at the first CUDA call).
    """
    env = os.environ if environ is None else environ
    entries = [e.strip() for e in env.get(RANK_DEVICES_ENV, "").split(",") if e.strip()]
    if not entries:
        return local_rank
    if not 0 <= local_rank < len(entries):
        raise RuntimeError(f"{RANK_DEVICES_ENV} names {len(entries)} devices, none for local rank {local_rank}")
    env["CUDA_VISIBLE_DEVICES"] = entries[local_rank]
    return 0
