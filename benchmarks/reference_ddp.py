"""The reference: a minimal hand-written DDP timing loop, with nothing of ddptop in it.

Launched by torchrun (``python -m torch.distributed.run --standalone --nproc-per-node N``). Every rank builds
a randomly initialised torchvision model, wraps it in DistributedDataParallel and times each training step
(zero_grad, forward, loss, backward, optimizer step, and on GPU a synchronize) with ``time.perf_counter``.
Rank 0 gathers every rank's measured step times and writes them as JSON to --out.

    python -m torch.distributed.run --standalone --nproc-per-node 2 benchmarks/reference_ddp.py \
        --model resnet18 --batch-size 16 --image-size 64 --warmup 3 --iters 40 --threads 1 --out ref.json
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torchvision  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402

from bench_kernels.reference_loop import plain_step_times  # noqa: E402 - the plain loop, shared with doctor


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--num-classes", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=40)
    parser.add_argument("--threads", type=int, default=0, help="torch threads per rank (0: torch's choice)")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    cuda = torch.cuda.is_available()
    local_rank = int(os.environ["LOCAL_RANK"])
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank = dist.get_rank()
    torch.manual_seed(1234 + rank)

    model = getattr(torchvision.models, args.model)(weights=None, num_classes=args.num_classes).to(device)
    net = DistributedDataParallel(model, device_ids=[local_rank] if cuda else None)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    loss_fn = torch.nn.CrossEntropyLoss()
    inputs = torch.randn(args.batch_size, 3, args.image_size, args.image_size, device=device)
    targets = torch.randint(0, args.num_classes, (args.batch_size,), device=device)

    times = plain_step_times(torch, net, optimizer, loss_fn, inputs, targets, device, args.warmup, args.iters)

    gathered = [None] * dist.get_world_size()
    dist.all_gather_object(gathered, times)
    if rank == 0:
        with open(args.out, "w", encoding="utf-8") as handle:
            json.dump({"world_size": dist.get_world_size(), "device": device.type, "sec_per_iter": gathered}, handle)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
