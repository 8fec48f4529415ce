"""What torch sees on this node, for ``ddptop doctor`` (which never imports torch itself).

    python -m bench_kernels.doctor_probe facts
    python -m bench_kernels.doctor_probe loop --model resnet18 --image-size 32 --num-classes 10 --batch-size 8 \
        --warmup 5 --steps 30 --threads 2

``facts`` prints one JSON object: versions (torch, CUDA or HIP, NCCL, gloo, torchvision), the CUDA devices in
CUDA's own order (name, UUID, compute capability, memory) with the environment that orders them, and the
peer-to-peer access matrix between them. ``loop`` times a reference DDP training loop written with plain
torch only (``bench_kernels.reference_loop``: a torchvision model, DDP, SGD, one synthetic batch, one rank,
gloo on the CPU, nccl on ``cuda:0``) and prints its step times, to compare with ddptop's kernel on the same
configuration. Every answer is a field of the JSON; nothing here raises for a missing GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from typing import Any

from bench_kernels.reference_loop import plain_step_times


def _error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def versions(torch: Any) -> dict[str, Any]:
    import torch.distributed as dist

    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda,
                             "hip": getattr(torch.version, "hip", None), "nccl": None, "torchvision": None,
                             "distributed": dist.is_available(), "gloo": None, "nccl_available": None}
    if dist.is_available():
        found["gloo"] = dist.is_gloo_available()
        found["nccl_available"] = dist.is_nccl_available()
    if found["nccl_available"]:
        try:
            # torch/cuda/nccl.py: (major, minor, patch[, suffix]) of the NCCL torch was built with; it needs
            # no GPU, only a build with NCCL
            found["nccl"] = ".".join(str(part) for part in torch.cuda.nccl.version())
        except Exception as exc:  # noqa: BLE001 - reported as the check's reason
            found["nccl_error"] = _error(exc)
    try:
        import torchvision

        found["torchvision"] = torchvision.__version__
    except Exception as exc:  # noqa: BLE001 - reported as the check's reason
        found["torchvision_error"] = _error(exc)
    return found


def devices(torch: Any) -> tuple[list[dict[str, Any]], str | None]:
    """The CUDA devices in CUDA's order, and why there are none where CUDA would not start."""
    try:
        available = torch.cuda.is_available()
    except Exception as exc:  # noqa: BLE001
        return [], _error(exc)
    if not available:
        return [], None
    listed = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        # torch/_C/__init__.pyi: _CudaDeviceProperties.uuid, a _CUuuid whose str() is the 8-4-4-4-12 hex form
        # (torch/csrc/cuda/Module.cpp); NVML writes the same with "GPU-" (a MIG instance: "MIG-") before it
        uuid = getattr(props, "uuid", None)
        listed.append({"index": index, "name": props.name, "uuid": str(uuid) if uuid is not None else None,
                       "capability": [props.major, props.minor], "memory_bytes": int(props.total_memory)})
    return listed, None


def peer_access(torch: Any, count: int) -> list[list[bool | None]]:
    """``torch.cuda.can_device_access_peer(a, b)`` for every ordered pair of CUDA devices (None on the
    diagonal)."""
    return [[None if a == b else bool(torch.cuda.can_device_access_peer(a, b)) for b in range(count)]
            for a in range(count)]


def facts(torch: Any) -> dict[str, Any]:
    listed, problem = devices(torch)
    result: dict[str, Any] = {
        "versions": versions(torch), "devices": listed, "cuda_problem": problem,
        "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"), "peer_access": [],
    }
    if len(listed) > 1:
        try:
            result["peer_access"] = peer_access(torch, len(listed))
        except Exception as exc:  # noqa: BLE001 - the check reports it
            result["peer_access_error"] = _error(exc)
    return result


def reference_loop(torch: Any, args: argparse.Namespace) -> dict[str, Any]:
    """A plain DDP training loop, nothing of ddptop in it: one rank, a one-process group on a HashStore."""
    import torch.distributed as dist
    import torchvision

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(1234)
        model = getattr(torchvision.models, args.model)(weights=None, num_classes=args.num_classes).to(device)
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        inputs = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
        targets = torch.randint(0, args.num_classes, (args.batch_size,), device=device)
        times = plain_step_times(torch, net, optimizer, torch.nn.CrossEntropyLoss(), inputs, targets, device,
                                 warmup=args.warmup, iters=args.steps)
    finally:
        dist.destroy_process_group()
    return {"device": device.type, "threads": torch.get_num_threads(), "steps": len(times),
            "p50_s": statistics.median(times), "sec": times}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.doctor_probe")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("facts", help="versions, CUDA devices, peer access")
    loop = commands.add_parser("loop", help="time a plain DDP loop")
    loop.add_argument("--model", default="resnet18")
    loop.add_argument("--image-size", type=int, default=32)
    loop.add_argument("--num-classes", type=int, default=10)
    loop.add_argument("--batch-size", type=int, default=8)
    loop.add_argument("--warmup", type=int, default=5)
    loop.add_argument("--steps", type=int, default=30)
    loop.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's choice)")
    args = parser.parse_args(argv)
    import torch

    if args.command == "facts":
        result = facts(torch)
    else:
        if args.threads:
            torch.set_num_threads(args.threads)
        result = reference_loop(torch, args)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
