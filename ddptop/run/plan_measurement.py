"""How a plan measures: batch and world sizes, steps and launches, buckets, the batch sweep, the
collective benchmark, the report's and the cost's settings, fault handling. Each step one ``PlanError`` line
for what cannot run."""

from __future__ import annotations

from typing import Any

from bench_kernels.collectives import OPS as COLLECTIVE_OPS
from bench_kernels.collectives import parse_size
from bench_kernels.faults import FaultSpecError, parse_fault
from ddptop.errors import PlanError
from ddptop.protocol.vocab import OnFailure, Scaling
from ddptop.run.options import AMP_DTYPES, AUTO, PlanOptions, unique


# Launches per configuration. Two are the fewest that measure the launch-to-launch spread; three are the
# fewest that see a 10% slowdown across 3% launch offsets in 80% of comparisons (two: about half), for about
# 6% more wall time than two on the default CPU plan (benchmarks/launch_cost.py, tests/test_launches.py).
DEFAULT_LAUNCHES = 3


def resolve_scaling(scaling: str) -> Scaling:
    if scaling not in tuple(Scaling):
        raise PlanError(f"--scaling must be weak or strong (got {scaling!r})")
    return Scaling(scaling)


def check_batch_sizes(batch_sizes: tuple[int, ...]) -> None:
    for batch in batch_sizes:
        if batch < 1:
            raise PlanError(f"batch size must be at least 1 (got {batch})")


def check_world_sizes(
    world_sizes: tuple[int, ...],
    batch_sizes: tuple[int, ...],
    scaling: Scaling,
    nnodes: int,
    per_node: int,
    on_gpu: bool,
    devices_per_node: int,
) -> None:
    """Each world size fits the devices (or whole nodes), and strong scaling can split every batch over it."""
    for world_size in world_sizes:
        if world_size < 1:
            raise PlanError(f"world size must be at least 1 (got {world_size})")
        if nnodes > 1 and world_size > per_node:
            if world_size % per_node or world_size // per_node > nnodes:
                raise PlanError(
                    f"world size {world_size} spans nodes: it must be a multiple of {per_node} ranks per node "
                    f"(--nproc-per-node), on at most --nnodes {nnodes}"
                )
        elif on_gpu and world_size > devices_per_node:
            raise PlanError(f"world size {world_size} needs {world_size} GPUs, but {devices_per_node} are usable")
        if scaling == Scaling.STRONG:
            for batch in batch_sizes:
                if batch % world_size:
                    raise PlanError(
                        f"strong scaling splits the global batch {batch} over {world_size} ranks: "
                        "it must divide evenly"
                    )


def count_or_auto(value: int | str | None, flag: str, least: int) -> int | None:
    """A fixed count (at least ``least``), or None for auto (also the default)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{flag} must be auto or a whole number (got {value!r})")
    if value < least:
        raise PlanError(f"{flag} must be at least {least} (got {value})" if least else
                        f"{flag} cannot be negative (got {value})")
    return value


def resolve_measurement(options: PlanOptions, on_gpu: bool) -> dict[str, Any]:
    """How each configuration is measured, as Plan fields: fixed counts, a time budget, or until precise.

    A fixed --iters N (and --warmup N) runs exactly that, as always. ``auto`` (the default) stops once the
    median's 95% interval is within --precision of it, between --min-iters and --max-iters steps and within
    --max-time-per-config seconds. A time budget measures about that long whatever --iters says. Limits
    that only auto uses are still checked, so a plan never carries a nonsensical one.
    """
    warmup = count_or_auto(options.warmup, "--warmup", 0)
    iters = count_or_auto(options.iters, "--iters", 1)
    time_budget = options.time_budget
    if time_budget is not None:
        if time_budget <= 0:
            raise PlanError(f"--time-budget must be positive seconds (got {time_budget})")
        if warmup == 0:
            raise PlanError("--time-budget needs at least one warm-up iteration to size the measurement")
    precision = options.precision if options.precision is not None else (0.02 if on_gpu else 0.05)
    if not 0 < precision < 1:
        raise PlanError(f"--precision must be a fraction between 0 and 1 (got {precision:g})")
    min_iters = options.min_iters if options.min_iters is not None else 10
    if min_iters < 1:
        raise PlanError(f"--min-iters must be at least 1 (got {min_iters})")
    max_iters = options.max_iters if options.max_iters is not None else (1000 if on_gpu else 200)
    if max_iters < min_iters:
        raise PlanError(f"--max-iters {max_iters} is below --min-iters {min_iters}")
    max_time = options.max_time_per_config if options.max_time_per_config is not None else (60.0 if on_gpu else 20.0)
    if max_time <= 0:
        raise PlanError(f"--max-time-per-config must be positive seconds (got {max_time:g})")
    max_warmup = options.max_warmup if options.max_warmup is not None else 50
    if max_warmup < 0:
        raise PlanError(f"--max-warmup cannot be negative (got {max_warmup})")
    launches, flag = options.launches, "--launches"
    if launches is None and options.rounds is not None:  # rounds were folded into launches
        launches, flag = options.rounds, "--rounds"
    if launches is None:
        launches = DEFAULT_LAUNCHES
    if launches < 1:
        raise PlanError(f"{flag} must be at least 1 (got {launches})")
    if options.launches is not None and options.rounds is not None and options.launches != options.rounds:
        raise PlanError(f"--rounds is the old name of --launches: give one (got {options.rounds} and {launches})")
    return {"warmup": warmup, "iters": iters, "time_budget": time_budget, "precision": float(precision),
            "min_iters": min_iters, "max_iters": max_iters, "max_time_per_config": float(max_time),
            "max_warmup": max_warmup, "launches_per_config": launches}


def resolve_bucket_caps(requested: list[float] | float) -> tuple[float, ...]:
    """DDP bucket sizes in MiB; a bare number is one cap."""
    caps = requested if isinstance(requested, list) else [requested]
    caps = [float(c) for c in unique(caps)]
    if not caps:
        raise PlanError("--bucket-cap-mb is empty")
    for cap in caps:
        if cap <= 0:
            raise PlanError(f"--bucket-cap-mb must be positive (got {cap:g})")
    return tuple(caps)


def resolve_batch_sweep(batch_sizes: tuple[int, ...], options: PlanOptions, on_gpu: bool) -> tuple[int, ...]:
    """The batch sizes to run: as given, or the --batch-sweep ladder."""
    if options.batch_sweep:
        return batch_ladder(batch_sizes, options.max_batch or (4096 if on_gpu else 256), options.scaling)
    if options.max_batch is not None:
        raise PlanError("--max-batch only applies with --batch-sweep")
    return batch_sizes


def resolve_comm_iters(comm_iters: int | None, iters: int) -> int:
    comm_iters = comm_iters if comm_iters is not None else max(5, iters // 4)
    if comm_iters < 0:
        raise PlanError(f"--comm-iters cannot be negative (got {comm_iters})")
    return comm_iters


def resolve_collectives(options: PlanOptions, on_gpu: bool) -> dict[str, Any]:
    """The collective benchmark's operations, message sizes and iterations, as Plan fields."""
    collectives = unique(options.collectives if options.collectives is not None else ["allreduce"])
    for op in collectives:
        if op not in COLLECTIVE_OPS:
            raise PlanError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVE_OPS)}")
    try:
        coll_min = parse_size(options.coll_min_bytes)
        coll_max = parse_size(options.coll_max_bytes or ("1GiB" if on_gpu else "16MiB"))
    except ValueError as exc:
        raise PlanError(f"--coll-min-bytes/--coll-max-bytes: {exc}") from None
    if not 0 < coll_min <= coll_max:
        raise PlanError(f"collective sizes must satisfy 0 < min <= max (got {coll_min} and {coll_max} bytes)")
    coll_iters = options.coll_iters if options.coll_iters is not None else (20 if on_gpu else 10)
    if coll_iters < 1:
        raise PlanError(f"--coll-iters must be at least 1 (got {coll_iters})")
    return {"collectives": collectives, "coll_min_bytes": coll_min, "coll_max_bytes": coll_max,
            "coll_iters": coll_iters}


# What gloo runs on CUDA tensors, per the backend table of torch.distributed's documentation: broadcast and
# all_reduce (and barrier); all_gather and reduce_scatter are CPU-only there.
GLOO_CUDA_COLLECTIVES = ("allreduce", "broadcast")


def check_gloo_collectives(ops: tuple[str, ...], backends: tuple[str, ...], on_gpu: bool) -> None:
    """Refuse before the sweep what gloo cannot run on GPU tensors, instead of failing at a launch's end."""
    unsupported = [op for op in ops if op not in GLOO_CUDA_COLLECTIVES]
    if on_gpu and "gloo" in backends and unsupported:
        raise PlanError(f"--collectives {','.join(unsupported)}: gloo runs only "
                        f"{' and '.join(GLOO_CUDA_COLLECTIVES)} on GPUs; use --backend nccl for them")


def check_report_settings(options: PlanOptions) -> None:
    """What the report's recommendation, cost and data-volume figures are computed with."""
    if not 0 < options.efficiency_threshold <= 1:
        raise PlanError(f"--efficiency-threshold must be in (0, 1] (got {options.efficiency_threshold:g})")
    if options.price_per_gpu_hour is not None and options.price_per_gpu_hour < 0:
        raise PlanError("--price-per-gpu-hour cannot be negative")
    if options.epoch_examples < 1:
        raise PlanError(f"--epoch-examples must be positive (got {options.epoch_examples})")


def check_amp(amp: str | None, on_gpu: bool) -> None:
    if amp is None:
        return
    if amp not in AMP_DTYPES:
        raise PlanError(f"--amp must be bf16 or fp16 (got {amp!r})")
    if not on_gpu:
        raise PlanError("--amp needs a GPU (CPU runs measure fp32)")


def check_cost_settings(options: PlanOptions) -> None:
    """Threads and the service-unit weights the cost is charged with."""
    if options.threads_per_rank is not None and options.threads_per_rank < 1:
        raise PlanError(f"--threads-per-rank must be at least 1 (got {options.threads_per_rank})")
    for key in ("su_core_weight", "su_gpu_weight"):
        if getattr(options, key) < 0:
            raise PlanError(f"--{key.replace('_', '-')} cannot be negative")
    if options.cores_per_rank is not None and options.cores_per_rank < 0:
        raise PlanError("--cores-per-rank cannot be negative")
    if options.internode_gbps <= 0:
        raise PlanError(f"--internode-gbps must be positive (got {options.internode_gbps:g})")


def check_fault_handling(options: PlanOptions) -> OnFailure:
    """Injected faults parse, hangs are detected after a positive time, and a failure policy is known."""
    for text in options.inject or ():
        try:
            parse_fault(text)
        except FaultSpecError as exc:
            raise PlanError(str(exc)) from None
    if options.hang_timeout <= 0:
        raise PlanError(f"--hang-timeout must be positive seconds (got {options.hang_timeout:g})")
    if options.on_failure not in tuple(OnFailure):
        raise PlanError(f"--on-failure must be continue or stop (got {options.on_failure!r})")
    return OnFailure(options.on_failure)


def batch_ladder(batch_sizes: tuple[int, ...], max_batch: int, scaling: str) -> tuple[int, ...]:
    """The batch-size sweep: the smallest given batch, doubled until ``max_batch`` (or out of memory)."""
    start = min(batch_sizes)
    if max_batch < start:
        raise PlanError(f"--max-batch {max_batch} is smaller than the first batch size {start}")
    ladder = [start]
    while ladder[-1] * 2 <= max_batch:
        ladder.append(ladder[-1] * 2)
    return tuple(ladder)
