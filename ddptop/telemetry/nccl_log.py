"""Which algorithm and protocol NCCL used for each collective, from its own log.

NCCL chooses an algorithm (Ring, Tree, NVLS, CollNet, PAT) and a protocol (LL, LL128, Simple) per collective
from its cost model, unless ``NCCL_ALGO`` / ``NCCL_PROTO`` say otherwise, and the one place it tells is its
TUNING log: with ``NCCL_DEBUG=INFO`` and ``NCCL_DEBUG_SUBSYS=TUNING``, rank 0 of each communicator writes a
line per collective it enqueues. The format, from NCCL's src/enqueue.cc:

    NCCL 2.19 on:   INFO(NCCL_TUNING, "%s: %ld Bytes -> Algo %s proto %s channel{Lo..Hi}={%d..%d}", ...)
                    (later versions append " comm %p")
    NCCL 2.12-2.18: INFO(NCCL_TUNING, "%s: %ld Bytes -> Algo %d proto %d time %f", ...)

each after NCCL's prefix ``<host>:<pid>:<tid> [<device>] NCCL INFO ``. The numbers of the older format are
NCCL's enum orders (src/include/devcomm.h: NCCL_ALGO_TREE 0, RING 1, COLLNET_DIRECT 2, COLLNET_CHAIN 3,
NVLS 4, NVLS_TREE 5; NCCL_PROTO_LL 0, LL128 1, SIMPLE 2).

``ddptop tune`` on GPUs turns that log on in every launch, into files of their own in the launch's ``nccl/``
folder (``ddptop.run.nccl_debug``), so the ranks' stdout stays readable; a user who set any NCCL_DEBUG
variable keeps theirs, and the launch has no such folder to read. The files also hold NCCL's warnings, which
NCCL otherwise prints to stdout.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from ddptop.protocol import layout
from ddptop.records import Record

_ALGOS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE")
_PROTOS = ("LL", "LL128", "SIMPLE")
_LINE = re.compile(r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)")


@dataclass(kw_only=True)
class NcclChoice(Record):
    """How many collectives of one kind NCCL ran with one algorithm and protocol, and their sizes: the record
    the summary holds too (``report.schema.NcclChoice``)."""

    collective: str = ""
    algorithm: str = ""
    protocol: str = ""
    count: int = 0
    min_bytes: int = 0
    max_bytes: int = 0


def _name(value: str, names: tuple[str, ...]) -> str:
    """An algorithm or protocol as NCCL names it; the older log's number looked up in NCCL's enum."""
    if value.isdigit():
        return names[int(value)] if int(value) < len(names) else f"#{value}"
    return value.upper()


def parse(lines: Iterable[str]) -> list[NcclChoice]:
    """Every TUNING line counted by collective, algorithm and protocol (most used first); other lines are
    NCCL's other output and are passed over."""
    return merge(NcclChoice(collective=found[1], algorithm=_name(found[3], _ALGOS), protocol=_name(found[4], _PROTOS),
                        count=1, min_bytes=int(found[2]), max_bytes=int(found[2]))
                 for found in map(_LINE.search, lines) if found is not None)


def merge(choices: Iterable[NcclChoice]) -> list[NcclChoice]:
    """Choices of several launches added up, most used first."""
    added: dict[tuple[str, str, str], NcclChoice] = {}
    for c in choices:
        key = (c.collective, c.algorithm, c.protocol)
        seen = added.get(key)
        added[key] = c if seen is None else NcclChoice(
            collective=c.collective, algorithm=c.algorithm, protocol=c.protocol, count=seen.count + c.count,
            min_bytes=min(seen.min_bytes, c.min_bytes), max_bytes=max(seen.max_bytes, c.max_bytes))
    return sorted(added.values(), key=lambda c: (-c.count, c.collective, c.algorithm, c.protocol))


def launch_choices(launch_dir: str) -> list[NcclChoice] | None:
    """What NCCL chose in one launch, from every file of its ``nccl/`` folder; None where the launch has no
    such folder (not a tune on GPUs, or the user's own NCCL_DEBUG). A file cut short is read as far as it
    goes."""
    folder = os.path.join(launch_dir, layout.NCCL_LOG_DIR)
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return None

    def lines() -> Iterable[str]:
        for name in names:
            try:
                with open(os.path.join(folder, name), encoding="utf-8", errors="replace") as handle:
                    yield from handle
            except OSError:
                continue

    return parse(lines())
