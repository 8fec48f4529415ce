"""What a rank says of a configuration: the fields of its ``config_start`` (once the model is built: its size,
how it is measured, its FLOPs and the dtype its ops run in) and of each round's ``config_end`` (the round's
measurement, ``bench_kernels.timing.Measured``, and the memory it held)."""

from __future__ import annotations

import sys
from typing import Any

from bench_kernels.errors import WorkloadError
from bench_kernels.flops import dtype_label, op_dtypes
from bench_kernels.rank_process import max_rss_bytes
from bench_kernels.sources import tokens_per_example
from bench_kernels.timing import Measured
from bench_kernels.training import Training, param_dtype
from ddptop.protocol.config_fields import config_fields
from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Status


def config_start_fields(torch: Any, device: Any, cfg: RunConfig, training: Training, world_size: int, setup_s: float,
                        round_index: int, flops: dict[str, Any] | None, notes: list[str]) -> dict[str, Any]:
    """The fields of ``cfg``'s config_start: ``flops`` are ``bench_kernels.flops.training_step_flops``' (None
    after the first round), ``notes`` what makes its dtype not what it says."""
    # autocast's dtype, else a model made in half precision runs its ops in that
    dtypes = op_dtypes(torch, device, cfg.amp or param_dtype(training.model))
    return {
        # the batch this process feeds per step: DataParallel's one process feeds the global batch
        **(config_fields(cfg) | {"batch_size": training.batch_size}),
        "world_size": world_size,  # the process group's (DataParallel's one process: 1)
        "params": training.params,
        "grad_bytes": training.grad_bytes,
        "warmup": cfg.warmup,
        "iters": cfg.iters,
        "time_budget": cfg.time_budget,
        "precision": cfg.precision if cfg.adaptive else None,
        "round": round_index,
        "rounds": cfg.rounds,
        "setup_s": setup_s,
        "notes": notes,
        **(flops or {}),
        "dtype_by_kind": dtypes,
        "compute_dtype": dtype_label(dtypes, (flops or {}).get("flops_by_kind")),
        "tokens_per_example": _tokens_per_example(training),
        "ddp_keywords": getattr(training.net, "ddptop_keywords", None),  # as passed, for the lines to paste
    }


def _tokens_per_example(training: Training) -> float | None:
    """Tokens per example of the configuration's batch, where the workload counts tokens."""
    try:
        return tokens_per_example(training.workload, training.batch, training.batch_size)
    except WorkloadError as exc:  # a broken count costs the tokens/s figure only
        print(f"bench_kernels.ddp: the workload's {exc}", file=sys.stderr, flush=True)
        return None


def config_end_fields(cfg: RunConfig, measured: Measured, round_index: int, last: bool) -> dict[str, Any]:
    """The fields of the config_end that ends one round of ``cfg`` well (``last``: its last round, which ends
    the configuration), with that round's figures alone."""
    return {
        "config_id": cfg.config_id,
        "status": Status.OK,
        "round": round_index,
        "last": last,
        "rounds": cfg.rounds,
        "iters": measured.iters,
        "warmup_iters": measured.warmup_iters,
        "stop_reason": measured.stop_reason,
        "precision_target": cfg.precision if cfg.adaptive else None,
        "precision_reached": measured.precision_reached,
        "unstable": measured.unstable,
        "warmup_s": measured.warmup_s,
        "measure_s": measured.measure_s,
        "peak_memory_bytes": measured.peak_memory_bytes,
        "max_rss_bytes": max_rss_bytes(),
        **({"counted_memory_bytes": sum(measured.counted_memory.values()), "counted_memory": measured.counted_memory}
           if measured.counted_memory else {}),
    }
