"""Small models for tests, loaded by the kernels through ``--models tests.tiny_models:<factory>``."""

import os
import time

import torch
from torch import nn


def tiny_cnn(num_classes: int = 10) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(4),
        nn.Flatten(),
        nn.Linear(8 * 16, num_classes),
    )


class _Steady(nn.Module):
    """The tiny CNN with a fixed 25 ms sleep in each forward: a step whose time a busy machine barely moves
    (the sleep takes no core), for a test of when a precision target is met rather than of this machine's
    noise. The tiny CNN alone steps in about 1 ms, which another process's bursts can triple for a while."""

    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.body = tiny_cnn(num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        time.sleep(0.025)
        return self.body(x)


def steady_cnn(num_classes: int = 10) -> nn.Module:
    return _Steady(num_classes)


def slow_to_build(num_classes: int = 10) -> nn.Module:
    """The tiny CNN after 15 s of building, as a large model of a user's (weights made on the CPU, a
    checkpoint read) can take: longer than a short --hang-timeout, and no hang."""
    time.sleep(15)
    return tiny_cnn(num_classes)


class _WideMLP(nn.Module):
    # a model class of its own, as a training script has: torch.compile of DDP leaves a bare nn.Sequential's
    # forward (torch's own code, which Dynamo skips as a frame) uncompiled
    def __init__(self, num_classes: int) -> None:
        super().__init__()
        self.layers = nn.Sequential(nn.Flatten(), nn.Linear(3 * 32 * 32, 256), nn.ReLU(), nn.Linear(256, 256),
                                    nn.ReLU(), nn.Linear(256, num_classes))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def wide_mlp(num_classes: int = 10) -> nn.Module:
    """About 4 MB of gradients, most in one layer: several DDP buckets at a 1 MB cap, yet quick to compile."""
    return _WideMLP(num_classes)


class _FailOnRank(nn.Module):
    """Raises on one rank after a few forward passes, like a real fault in the middle of a measurement."""

    def __init__(self, num_classes: int, error: BaseException, after: int = 4) -> None:
        super().__init__()
        self.body = tiny_cnn(num_classes)
        self.error = error
        self.after = after
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        if os.environ.get("RANK") == "1" and self.calls > self.after:
            raise self.error
        return self.body(x)


def crash_on_rank1(num_classes: int = 10) -> nn.Module:
    return _FailOnRank(num_classes, RuntimeError("injected failure on rank 1"))


def oom_on_rank1(num_classes: int = 10) -> nn.Module:
    return _FailOnRank(num_classes, torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB"))
