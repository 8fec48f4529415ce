"""Collective bandwidth benchmark: time allreduce, allgather, reduce-scatter and broadcast over message sizes.

Run by ddptop at the end of every launch with N >= 2 (its events land beside the DDP samples), or alone:

    python -m torch.distributed.run --nproc-per-node 2 -m bench_kernels.collectives --max-bytes 64MiB

Sizes follow nccl-tests: for allgather and reduce-scatter the size is the whole gathered buffer (each rank
contributes size/N), for allreduce and broadcast the buffer each rank passes in. algbw = size / time and
busbw = algbw * factor(N) with nccl-tests' factors (ddptop.protocol.bandwidth). "In place" means what it
means in nccl-tests: the input is a slice of the output (allgather) or the output a slice of the input
(reduce-scatter); torch's allreduce and broadcast are always in place.

Each operation is timed alone (on GPU with a device synchronise after it), so the samples give a
distribution rather than nccl-tests' single loop average.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from typing import Any

from ddptop.protocol.devices import apply_rank_device

OPS = ("allreduce", "allgather", "reduce_scatter", "broadcast")
OUT_OF_PLACE_OPS = ("allgather", "reduce_scatter")
# What gloo runs on GPU tensors, by torch.distributed's backend table (its gloo GPU column: broadcast and
# all_reduce). ProcessGroupGloo has CUDA code for more, but not the collectives benchmarked here as such: its
# reduce-scatter clones the whole input, allreduces it and copies this rank's chunk out
# (reduce_scatter_tensor_coalesced, torch/csrc/distributed/c10d/ProcessGroupGloo.cpp), so its time is an
# allreduce's and a reduce-scatter's bus bandwidth computed from it is wrong; its coalesced allgather has no
# CUDA path at all. ddptop's plan refuses these before the sweep; the kernel refuses them too.
GLOO_GPU_OPS = ("allreduce", "broadcast")
DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}
_SIZE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)


def parse_size(text: str) -> int:
    """'4096', '64K', '64KiB', '1GiB' -> bytes (binary multiples: K = 1024)."""
    match = _SIZE_RE.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a size like 1024, 64KiB, 16MiB or 1GiB")
    number, unit = float(match.group(1)), (match.group(2) or "B").upper()
    scale = {"B": 1, "K": 2**10, "M": 2**20, "G": 2**30}[unit[0]]
    return int(number * scale)


def message_sizes(min_bytes: int, max_bytes: int) -> list[int]:
    sizes, size = [], max(1, min_bytes)
    while size <= max_bytes:
        sizes.append(size)
        size *= 2
    return sizes


def _element_count(op: str, size_bytes: int, element_bytes: int, world_size: int) -> int:
    """Elements of the buffer the size refers to, rounded so it splits evenly over the ranks."""
    count = max(1, size_bytes // element_bytes)
    if op in OUT_OF_PLACE_OPS:
        count = max(world_size, count - count % world_size)
    return count


def refusal(op: str, backend: str | None, device_type: str) -> str | None:
    """Why ``op`` is not benchmarked with ``backend`` on ``device_type`` tensors, in one line; None: it is."""
    if backend == "gloo" and device_type == "cuda" and op not in GLOO_GPU_OPS:
        return (f"{op} not measured: gloo runs only {' and '.join(GLOO_GPU_OPS)} on GPU tensors "
                "(torch.distributed's backend table); use --backend nccl for it")
    return None


def _operation(dist: Any, torch: Any, op: str, count: int, inplace: bool, rank: int, world_size: int, device: Any,
               dtype: Any):
    """Buffers and a zero-argument callable running one collective on them. Torch 2.14 names the single-tensor
    gathers all_gather_single and reduce_scatter_single and deprecates the older names (a FutureWarning per
    call site, torch/distributed/distributed_c10d.py): the newer where torch has them."""
    all_gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
    reduce_scatter = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
    if op == "allreduce":
        buffer = torch.ones(count, dtype=dtype, device=device)
        return lambda: dist.all_reduce(buffer)
    if op == "broadcast":
        buffer = torch.ones(count, dtype=dtype, device=device)
        return lambda: dist.broadcast(buffer, 0)
    share = count // world_size
    if op == "allgather":
        output = torch.empty(count, dtype=dtype, device=device)
        source = (output[rank * share : (rank + 1) * share] if inplace
                  else torch.ones(share, dtype=dtype, device=device))
        if inplace:
            source.fill_(1)
        return lambda: all_gather(output, source)
    if op == "reduce_scatter":
        source = torch.ones(count, dtype=dtype, device=device)
        output = (source[rank * share : (rank + 1) * share] if inplace
                  else torch.empty(share, dtype=dtype, device=device))
        return lambda: reduce_scatter(output, source)
    raise ValueError(f"unknown collective {op!r}")


def run_collectives(torch: Any, dist: Any, device: Any, spec: dict[str, Any], emit: Any,
                    backend: str | None = None) -> None:
    """Time every (op, size, placement) of ``spec`` and hand each result to ``emit(**fields)``. An op the
    ``backend`` cannot run on this device is left out with one line on stderr (the launch's log)."""
    rank, world_size = dist.get_rank(), dist.get_world_size()
    dtype_name = spec.get("dtype", "float32")
    dtype = getattr(torch, dtype_name)
    element_bytes = DTYPE_BYTES[dtype_name]
    synchronize = (lambda: torch.cuda.synchronize(device)) if device.type == "cuda" else (lambda: None)
    clock = time.perf_counter
    for op in spec["ops"]:
        reason = refusal(op, backend, device.type)
        if reason is not None:
            if rank == 0:
                print(f"bench_kernels.collectives: {reason}", file=sys.stderr, flush=True)
            continue
        placements = (False, True) if op in OUT_OF_PLACE_OPS else (True,)
        for size in message_sizes(int(spec["min_bytes"]), int(spec["max_bytes"])):
            count = _element_count(op, size, element_bytes, world_size)
            for inplace in placements:
                began = clock()
                run = _operation(dist, torch, op, count, inplace, rank, world_size, device, dtype)
                for _ in range(int(spec.get("warmup", 5))):
                    run()
                synchronize()
                dist.barrier()
                samples = []
                for _ in range(int(spec.get("iters", 20))):
                    start = clock()
                    run()
                    synchronize()
                    samples.append(clock() - start)
                emit(op=op, bytes=count * element_bytes, count=count, dtype=dtype_name, inplace=inplace,
                     world_size=world_size, sec=samples, wall_s=clock() - began)
                del run
        if device.type == "cuda":
            torch.cuda.empty_cache()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.collectives", description=__doc__.splitlines()[0])
    parser.add_argument("--ops", default="allreduce", help=f"comma-separated: {', '.join(OPS)}")
    parser.add_argument("--min-bytes", default="1KiB")
    parser.add_argument("--max-bytes", default="64MiB")
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--dtype", choices=tuple(DTYPE_BYTES), default="float32")
    parser.add_argument("--backend", choices=("nccl", "gloo"), default=None, help="default: nccl on GPU, else gloo")
    args = parser.parse_args(argv)
    ops = [o.strip() for o in args.ops.split(",") if o.strip()]
    unknown = [o for o in ops if o not in OPS]
    if unknown:
        parser.error(f"unknown collective {unknown[0]!r}; known: {', '.join(OPS)}")

    import torch
    import torch.distributed as dist

    from ddptop.protocol.bandwidth import busbw_factor

    cuda = torch.cuda.is_available() and args.backend != "gloo"
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    device = torch.device("cuda", apply_rank_device(local_rank)) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    backend = args.backend or ("nccl" if cuda else "gloo")
    dist.init_process_group(backend)
    spec = {"ops": ops, "min_bytes": parse_size(args.min_bytes), "max_bytes": parse_size(args.max_bytes),
            "iters": args.iters, "warmup": args.warmup, "dtype": args.dtype}

    def show(**row: Any) -> None:
        if dist.get_rank() != 0:
            return
        ordered = sorted(row["sec"])
        p50 = ordered[len(ordered) // 2]
        algbw = row["bytes"] / p50 / 1e9
        busbw = algbw * busbw_factor(row["op"], row["world_size"])
        place = "in" if row["inplace"] else "out"
        print(f"{row['op']:>15s} {place:>3s} {row['bytes']:>12d} B {p50 * 1e6:>10.1f} us "
              f"algbw {algbw:8.3f} GB/s busbw {busbw:8.3f} GB/s", flush=True)

    run_collectives(torch, dist, device, spec, show, backend)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
