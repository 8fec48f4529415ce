"""What torch sees on this node, for ``ddptop doctor`` (which never imports torch itself).

    python -m bench_kernels.doctor_probe [--loop-steps N]

Prints one JSON object: versions (torch, CUDA, NCCL, torchvision), the CUDA devices in CUDA's order (name,
UUID, compute capability), the peer-to-peer access matrix, where the rendezvous store would listen for a
single-node launch, and, with ``--loop-steps``, the median step of a reference DDP loop written with plain
torch only (resnet18, synthetic data, one rank), to compare with ddptop's kernel on the same configuration.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import socket
import statistics
import sys
from typing import Any

from bench_kernels.reference_loop import plain_step_times


def versions(torch: Any) -> dict[str, Any]:
    found: dict[str, Any] = {"torch": torch.__version__, "cuda": torch.version.cuda, "nccl": None,
                             "torchvision": None}
    try:
        import torchvision

        found["torchvision"] = torchvision.__version__
    except Exception as exc:  # noqa: BLE001 - reported as the check's reason
        found["torchvision_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if torch.cuda.is_available():
        found["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    return found


def devices(torch: Any) -> list[dict[str, Any]]:
    listed = []
    for index in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        props = torch.cuda.get_device_properties(index)
        uuid = getattr(props, "uuid", None)  # torch >= 2.1: the device's UUID, as NVML spells it after GPU-
        listed.append({"index": index, "name": props.name, "uuid": f"GPU-{uuid}" if uuid else None,
                       "capability": [props.major, props.minor]})
    return listed


def peer_access(torch: Any, count: int) -> list[list[bool | None]]:
    return [[None if a == b else bool(torch.cuda.can_device_access_peer(a, b)) for b in range(count)]
            for a in range(count)]


def store_listens() -> dict[str, Any]:
    """Where a single-node launch's rendezvous store listens: start one as the launch's agent does."""
    import psutil

    from bench_kernels.loopback_agent import listen_on_loopback

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    kept = listen_on_loopback(port)
    if kept is None:
        import torch.distributed as dist

        kept = dist.TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=5))
    addresses = sorted({c.laddr.ip for c in psutil.Process().net_connections(kind="inet")
                        if c.status == psutil.CONN_LISTEN and c.laddr.port == port})
    del kept
    return {"port": port, "addresses": addresses}


def reference_loop(torch: Any, steps: int) -> dict[str, Any]:
    """A plain DDP training loop, nothing of ddptop in it: resnet18, 32 px, batch 8, SGD, one rank."""
    import torch.distributed as dist
    import torchvision

    cuda = torch.cuda.is_available()
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")
    dist.init_process_group("nccl" if cuda else "gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10).to(device)
        net = torch.nn.parallel.DistributedDataParallel(model, device_ids=[0] if cuda else None)
        optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
        inputs = torch.randn(8, 3, 32, 32, device=device)
        targets = torch.randint(0, 10, (8,), device=device)
        times = plain_step_times(torch, net, optimizer, torch.nn.CrossEntropyLoss(), inputs, targets, device,
                                 warmup=3, iters=steps)
        return {"steps": len(times), "p50_s": statistics.median(times)}
    finally:
        dist.destroy_process_group()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench_kernels.doctor_probe")
    parser.add_argument("--loop-steps", type=int, default=0)
    args = parser.parse_args(argv)
    import torch

    if os.environ.get("OMP_NUM_THREADS"):
        torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))
    listed = devices(torch)
    result: dict[str, Any] = {"versions": versions(torch), "devices": listed,
                              "cuda_device_order": os.environ.get("CUDA_DEVICE_ORDER"),
                              "peer_access": peer_access(torch, len(listed)) if len(listed) > 1 else []}
    try:
        result["store"] = store_listens()
    except Exception as exc:  # noqa: BLE001 - the check reports it
        result["store_error"] = f"{type(exc).__name__}: {exc}"[:300]
    if args.loop_steps:
        result["reference_loop"] = reference_loop(torch, args.loop_steps)
    sys.stdout.write(json.dumps(result) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
