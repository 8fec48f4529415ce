"""What the kernel's rank says of a configuration when its model is built: the fields of its ``config_start``
(its size, how it is measured, its FLOPs and the dtype its ops run in). Each round's ``config_end`` is
``bench_kernels.timing.config_end_fields``', the kernel's and the script probe's alike."""

from __future__ import annotations

import sys
from typing import Any

from bench_kernels.errors import WorkloadError
from bench_kernels.flops import dtype_label, op_dtypes
from bench_kernels.sources import tokens_per_example
from bench_kernels.training import Training, param_dtype
from ddptop.protocol.config_fields import config_fields
from ddptop.protocol.launchspec import RunConfig


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
