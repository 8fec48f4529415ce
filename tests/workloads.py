"""Workloads of the protocol (``ddptop.protocol.workload``) for tests, loaded through
``--models tests.workloads:<factory>``: a dict batch with a loss of its own, FLOPs countable by hand, a
model with an unused parameter, and factories that are wrong in each way a user's can be."""

import torch
from torch import nn

from ddptop.protocol.workload import Workload

FEATURES, HIDDEN, OUTPUTS = 16, 32, 4
USED = 12  # features the mask keeps per example: the "tokens" of an example


class MaskedRegressor(nn.Module):
    """Two linear layers over masked features, taking keywords (``net(**batch)``)."""

    def __init__(self) -> None:
        super().__init__()
        self.encode = nn.Linear(FEATURES, HIDDEN)
        self.decode = nn.Linear(HIDDEN, OUTPUTS)

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return self.decode(torch.relu(self.encode(features * mask)))


def _batch(n: int, device: torch.device) -> dict[str, torch.Tensor]:
    mask = torch.zeros(n, FEATURES, device=device)
    mask[:, :USED] = 1.0
    return {"features": torch.randn(n, FEATURES, device=device), "mask": mask,
            "target": torch.randn(n, OUTPUTS, device=device)}


def _weighted_loss(net: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """A loss of its own: squared error, the later outputs weighted more."""
    out = net(features=batch["features"], mask=batch["mask"])
    weights = torch.linspace(1.0, 2.0, OUTPUTS, device=out.device)
    return ((out - batch["target"]) ** 2 * weights).mean()


def hand_count_flops(batch: int) -> int:
    """One forward and backward of ``MaskedRegressor`` on ``batch`` examples, counted by hand: each linear
    layer's forward is 2 x batch x in x out; its weight gradient the same again; its input gradient the same
    again for the second layer only (the first layer's input, the masked features, needs no gradient)."""
    first, second = 2 * batch * FEATURES * HIDDEN, 2 * batch * HIDDEN * OUTPUTS
    return (first + second) + (first + second) + second


def dict_workload() -> Workload:
    return Workload(MaskedRegressor(), _batch, _weighted_loss, tokens=lambda batch: int(batch["mask"].sum()))


class WithUnused(MaskedRegressor):
    """A head that no step uses (an auxiliary head for another task): DDP waits for its gradient forever."""

    def __init__(self) -> None:
        super().__init__()
        self.aux = nn.Linear(HIDDEN, 2)


def unused_parameter() -> Workload:
    return Workload(WithUnused(), _batch, _weighted_loss)


def unused_parameter_declared() -> Workload:
    return Workload(WithUnused(), _batch, _weighted_loss, find_unused_parameters=True)


def given_flops() -> Workload:
    """The workload says its FLOPs (as for kernels the counter cannot see): twice the hand count, so the
    figure can only have come from it."""
    return Workload(MaskedRegressor(), _batch, _weighted_loss, flops=lambda batch: 2 * hand_count_flops(len(batch["mask"])))


# -- wrong in one way each -------------------------------------------------------------------------------


def not_a_model():
    return 42


def raises():
    raise RuntimeError("no such checkpoint")


def rejected_batch() -> Workload:
    return Workload(MaskedRegressor(), lambda n, device: {"features": torch.randn(n, FEATURES + 1, device=device),
                                                          "mask": torch.ones(n, FEATURES + 1, device=device)},
                    lambda net, batch: net(**batch).sum())


def vector_loss() -> Workload:
    return Workload(MaskedRegressor(), _batch, lambda net, batch: net(features=batch["features"], mask=batch["mask"]).sum(0))


class SometimesUnused(WithUnused):
    """Uses its auxiliary head on the first forward only: a one-step check sees every parameter used, and DDP
    fails at the first step after one that left the head without a gradient."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, features: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        hidden = torch.relu(self.encode(features * mask))
        out = self.decode(hidden)
        return out + self.aux(hidden).sum() if self.calls == 1 else out


def sometimes_unused() -> Workload:
    return Workload(SometimesUnused(), _batch, _weighted_loss)


def raises_on_two_lines():
    raise ValueError("first line\nsecond line")


def stranger_units() -> Workload:
    return Workload(MaskedRegressor(), _batch, _weighted_loss, fsdp_units=lambda model: [nn.Linear(2, 2)])
