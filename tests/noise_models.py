"""A workload whose gradient noise scale is known exactly, for a real run under ddptop (tests/test_gradient_noise.py).

The least-squares problem of ``ddptop.analysis.synthetic.gradient_problem``: every example's gradient is
(x.w - y) x at fixed parameters w over a fixed dataset, so tr(Sigma) and |G|^2, and B_noise, are computed over
the whole dataset. The trainable parameter p enters the loss as mean((x.w - y) (x.p)), whose gradient in p is
exactly that per-example gradient whatever p is: the optimizer moves p, not the answer. Each rank draws its
batch with replacement from the dataset, from a generator of its own seeded by its rank (the draws, and so the
figures, are the same on every run: one sample of what a 95% interval covers). Where ``NOISE_PICKS`` names a
folder, every batch's indices are appended to ``n<world size>-rank<rank>.txt`` there, one line a batch, so that
a test can compute what each synchronisation held.
"""

from __future__ import annotations

import os

import torch

from ddptop.analysis.synthetic import gradient_problem
from ddptop.protocol.workload import Workload


class FixedPointGradient(torch.nn.Module):
    def __init__(self, features: int) -> None:
        super().__init__()
        self.p = torch.nn.Parameter(torch.zeros(features, dtype=torch.float64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.p


def least_squares() -> Workload:
    problem = gradient_problem()
    x, y, w = (torch.from_numpy(a) for a in (problem.x, problem.y, problem.w))
    residual = x @ w - y  # at the fixed parameters
    rank, world_size = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    generator = torch.Generator().manual_seed(rank)
    log = os.environ.get("NOISE_PICKS")

    def make_batch(n: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor]:
        picks = torch.randint(0, len(x), (n,), generator=generator)
        if log:
            with open(os.path.join(log, f"n{world_size}-rank{rank}.txt"), "a") as out:
                out.write(" ".join(str(int(i)) for i in picks) + "\n")
        return x[picks].to(device), residual[picks].to(device)

    def loss(net: torch.nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
        inputs, residuals = batch
        return (residuals * net(inputs)).mean()

    return Workload(FixedPointGradient(x.shape[1]), make_batch, loss)
