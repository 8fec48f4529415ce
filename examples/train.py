"""A small real training script: a classifier trained with DistributedDataParallel on data made on the CPU.

    torchrun --nproc-per-node 2 examples/train.py --transform-ms 1 --workers 2 --accumulate 2
    ddptop run -- examples/train.py --transform-ms 1 --workers 2 --accumulate 2

Each example is made by the Dataset on the CPU with a transform that costs ``--transform-ms`` (a sleep, or
arithmetic with ``--transform compute``), loaded by a DataLoader with ``--workers`` processes and a
DistributedSampler; DDP runs on gloo on the CPU and nccl on GPUs; SGD steps once every ``--accumulate``
batches (the others inside ``no_sync()``, so gradients are reduced once a step). ``--explicit`` marks the steps
and batches with ``ddptop_probe`` instead of leaving them to ddptop's hooks. ``--report`` prints the script's own
median step time at the end (what benchmarks/probe_cost.py compares). Runs alone too: ``python
examples/train.py`` is one process without a process group.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Callable, Iterable
from typing import Any, ContextManager

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, Dataset, DistributedSampler


class SlowExamples(Dataset):
    """Examples made when asked for, each costing about ``transform_ms`` of CPU time or of sleep; the label is a
    fixed function of the features, so the model has something to learn."""

    def __init__(self, size: int, features: int, classes: int, transform_ms: float, transform: str) -> None:
        self.size, self.features, self.classes = size, features, classes
        self.transform_s, self.transform = transform_ms / 1000, transform

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        features = torch.randn(self.features, generator=torch.Generator().manual_seed(index))
        label = int(features[: self.classes].argmax())
        if self.transform_s > 0:
            if self.transform == "sleep":
                time.sleep(self.transform_s)
            else:
                self._compute(features)
        return features, label

    def _compute(self, features: torch.Tensor) -> None:
        deadline = time.perf_counter() + self.transform_s
        while time.perf_counter() < deadline:  # arithmetic until the time is spent: a CPU-bound transform
            features = (features * 1.0001).tanh()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch-size", type=int, default=32, help="examples per batch and rank")
    parser.add_argument("--accumulate", type=int, default=1, help="batches per optimizer step")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader worker processes per rank")
    parser.add_argument("--transform-ms", type=float, default=0.0, help="the cost of making one example")
    parser.add_argument("--transform", choices=("sleep", "compute"), default="sleep")
    parser.add_argument("--examples", type=int, default=4096, help="the dataset's size")
    parser.add_argument("--features", type=int, default=64)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--steps", type=int, default=0, help="stop after this many optimizer steps (0: the epochs)")
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--explicit", action="store_true", help="mark steps and batches with ddptop_probe")
    parser.add_argument("--report", action="store_true", help="print the median step time at the end")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    distributed = "WORLD_SIZE" in os.environ  # started by torchrun (or ddptop under it)
    cuda = torch.cuda.is_available()
    if distributed:
        local_rank = int(os.environ["LOCAL_RANK"])
        if cuda:
            torch.cuda.set_device(local_rank)
        dist.init_process_group("nccl" if cuda else "gloo")
    rank, world_size = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    device = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    torch.manual_seed(0)

    dataset = SlowExamples(args.examples, args.features, args.classes, args.transform_ms, args.transform)
    sampler: DistributedSampler[int] = DistributedSampler(dataset, num_replicas=world_size, rank=rank, shuffle=True, seed=0, drop_last=True)
    loader = DataLoader(dataset, batch_size=args.batch_size, sampler=sampler, num_workers=args.workers,
                        drop_last=True, pin_memory=cuda, persistent_workers=args.workers > 0)
    net = nn.Sequential(nn.Linear(args.features, args.hidden), nn.ReLU(), nn.Linear(args.hidden, args.hidden),
                        nn.ReLU(), nn.Linear(args.hidden, args.classes)).to(device)
    ddp = DistributedDataParallel(net, device_ids=[device.index] if cuda else None) if distributed else None
    model = ddp or net
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()

    mark_step: Callable[..., ContextManager[Any]] = lambda examples=None, tokens=None: contextlib.nullcontext()
    batches: Callable[[Iterable[Any]], Iterable[Any]] = lambda loader: loader
    if args.explicit:
        import ddptop_probe

        mark_step, batches = ddptop_probe.step, ddptop_probe.batches
    steps_per_epoch = len(loader) // args.accumulate  # whole steps only: every step holds --accumulate batches
    step_times: list[float] = []
    steps, loss = 0, torch.zeros(())
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        pending = iter(batches(loader))
        for _ in range(steps_per_epoch):
            started = time.perf_counter()
            examples = args.batch_size * args.accumulate
            # a token per feature: what a sequence model would count as its tokens
            with mark_step(examples=examples, tokens=examples * args.features):
                for micro in range(args.accumulate):
                    inputs, labels = next(pending)
                    inputs, labels = inputs.to(device, non_blocking=True), labels.to(device, non_blocking=True)
                    last = micro == args.accumulate - 1
                    # the gradients of all but the last batch stay local: one allreduce a step
                    with ddp.no_sync() if ddp is not None and not last else contextlib.nullcontext():
                        loss = loss_fn(model(inputs), labels) / args.accumulate
                        loss.backward()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
            if cuda:
                torch.cuda.synchronize()
            step_times.append(time.perf_counter() - started)
            steps += 1
            if steps == args.steps:
                break
        if steps == args.steps:
            break
    if rank == 0:
        print(f"trained {steps} steps, last loss {loss.item() * args.accumulate:.3f}", flush=True)
        if args.report and step_times:
            print(f"median step {statistics.median(step_times[len(step_times) // 5:]) * 1e3:.3f} ms", flush=True)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
