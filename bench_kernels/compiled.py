"""torch.compile of a DDP model (``ddptop tune``'s compile variant): its first step, which compiles, timed apart
from the measured ones, and whether DDP's bucketing survived the compilation.

DDP overlaps each gradient bucket's allreduce with the rest of the backward pass. A compiled model's backward
is one graph, which would hold every allreduce back to its end; Dynamo's DDPOptimizer
(torch/_dynamo/backends/distributed.py, read in torch 2.14) splits the graph at DDP's bucket boundaries so the
overlap stays, and logs "DDPOptimizer used bucket cap %s and created %d buckets" on that module's logger at
INFO level. That line is the one place it says how many it made (it also stashes them on an object the
compiler keeps to itself), so the first step listens for it.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import Any

DDP_OPTIMIZER_LOGGER = "torch._dynamo.backends.distributed"
_CREATED = re.compile(r"DDPOptimizer used bucket cap (\d+) and created (\d+) buckets")


class _Listener(logging.Handler):
    def __init__(self) -> None:
        super().__init__(level=logging.INFO)
        self.buckets: list[int] = []  # one count per compiled graph

    def emit(self, record: logging.LogRecord) -> None:
        found = _CREATED.search(record.getMessage())
        if found:
            self.buckets.append(int(found[2]))


def first_step(step: Callable[[], None], ddp: Any) -> dict[str, Any]:
    """Run ``step`` twice (the first compiles the forward and the backward) and return what a compiled DDP
    step costs and keeps: the first step's seconds, the graphs Dynamo captured and its graph breaks, the graph
    splits DDPOptimizer made, and DDP's own bucket count to hold them against."""
    from torch._dynamo.utils import counters

    logger = logging.getLogger(DDP_OPTIMIZER_LOGGER)
    listener, level = _Listener(), logger.level
    logger.addHandler(listener)
    logger.setLevel(logging.INFO)
    breaks_before = sum(counters["graph_break"].values())
    graphs_before = counters["stats"]["unique_graphs"]
    try:
        start = time.perf_counter()
        step()
        seconds = time.perf_counter() - start
        # DDP starts with every gradient in one bucket and makes its real ones at the next forward, in the
        # order the gradients became ready (compute_bucket_size_limits, torch/nn/parallel/distributed.py):
        # one more step, so the count below is of the buckets the measured steps use
        step()
    finally:
        logger.removeHandler(listener)
        logger.setLevel(level)
    return {
        "first_step_s": seconds,
        "graphs": counters["stats"]["unique_graphs"] - graphs_before,
        "graph_breaks": sum(counters["graph_break"].values()) - breaks_before,
        "compiled_buckets": sum(listener.buckets) if listener.buckets else None,  # over every graph
        "ddp_buckets": ddp_bucket_count(ddp),
    }


def ddp_bucket_count(ddp: Any) -> int | None:
    """DDP's gradient buckets as its reducer holds them now (one zero tensor per bucket, in its order: what
    DDP's join mode reads, torch/nn/parallel/distributed.py); its logging data's "bucket_sizes" keeps the
    sizes from construction, one bucket before the first rebuild."""
    reducer = getattr(ddp, "reducer", None)
    buckets = getattr(reducer, "_get_zeros_like_grad_buckets", None)
    return len(buckets()) if buckets is not None else None
