"""ZeRO-1 and FSDP2 beside DDP: the wrapped model, its optimizer, and the bytes each rank holds.

``wrap_fsdp`` shards the model for FSDP2 and ``zero_optimizer`` is ZeRO-1's optimizer (its model is DDP's),
for a configuration whose ``strategy`` is not plain DDP (``ddptop.protocol.strategies``); the step itself is the
workload's (``bench_kernels.workload.Workload.step_through``), the same zero_grad, forward, loss, backward
and optimizer step for every strategy.

``counted_memory`` is the per-rank memory figure of the CPU, where no allocator gives a reliable peak: the
bytes this rank holds, counted from the real tensors (the local shard of every DTensor parameter, gradient
and momentum buffer; ZeroRedundancyOptimizer's local state), plus FSDP2's parameters gathered for the
module being run, the input batch and the layer outputs autograd keeps (``memory_cap.activation_bytes``).
The same figure decides ``--memory-cap-mb`` on the CPU before the first step (the optimizer state is then
the momentum the local optimizer will create: one buffer per parameter it owns).
"""

from __future__ import annotations

from typing import Any

from ddptop.protocol import strategies
from ddptop.protocol.launchspec import RunConfig

SGD = {"lr": 0.01, "momentum": 0.9}  # what every strategy steps with (the workload's SGD)
MOMENTUM_SLOTS = 1  # state tensors SGD with momentum keeps per parameter


def wrap_fsdp(model: Any, cfg: RunConfig, device: Any) -> Any:
    """The model sharded by FSDP2 as ``cfg.strategy`` says (``reshard_after_forward``), in place: the
    workload's SGD then steps the local shards (DTensor parameters)."""
    chosen = strategies.strategy(cfg.strategy)
    shard_model(model, device, chosen.reshard_after_forward, mixed_precision=mixed_precision(cfg, device))
    return model


def zero_optimizer(net: Any) -> Any:
    """ZeRO-1: the workload's SGD with momentum, each rank keeping the state of its share of the
    parameters and broadcasting its updated share after the step (``ZeroRedundancyOptimizer``)."""
    import torch
    from torch.distributed.optim import ZeroRedundancyOptimizer

    return ZeroRedundancyOptimizer(net.parameters(), optimizer_class=torch.optim.SGD, **SGD)


def mixed_precision(cfg: RunConfig, device: Any) -> Any:
    """FSDP2's MixedPrecisionPolicy: bf16 parameters for the compute, fp32 gradient reduction, on a GPU with
    ``--amp bf16`` (what DDP's autocast runs then); None (full precision) otherwise, the CPU included."""
    if device.type != "cuda" or cfg.amp != "bf16":
        return None
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    return MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)


def sharded_units(model: Any) -> list[Any]:
    """What ``fully_shard`` is applied to, in the order the forward runs them: each top-level child module
    with parameters (a torchvision CNN's stem and its classifier), a stage that is a Sequential block by
    block (a ResNet's layer1..layer4: FSDP's unit in practice is a block, and a whole last stage holds most
    of a ResNet's parameters), then the root, which takes any parameter left. A child holding a parameter
    another child holds too (a language model's head tied to its token embedding) is left to the root: as a
    unit of its own it would shard one holder's copy and leave the other's whole, and the two would part."""
    from collections import Counter

    import torch

    holders = Counter(id(p) for child in model.children() for p in child.parameters())
    units = []
    for child in model.children():
        if not any(True for _ in child.parameters()) or any(holders[id(p)] > 1 for p in child.parameters()):
            continue
        if isinstance(child, (torch.nn.Sequential, torch.nn.ModuleList)):
            units += [block for block in child.children() if any(True for _ in block.parameters())]
        else:
            units.append(child)
    return units + [model]


def shard_model(model: Any, device: Any, reshard_after_forward: bool, mixed_precision: Any = None) -> None:
    """``fully_shard`` each unit of ``sharded_units`` on a one-dimensional mesh of every rank (a CPU mesh
    with gloo). Each unit's full parameter bytes are kept on the model for ``counted_memory``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))
    keywords: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mixed_precision is not None:
        keywords["mp_policy"] = mixed_precision
    units = sharded_units(model)
    # each unit's own parameters (those no unit inside it takes), as full tensors, before sharding
    taken: set[int] = set()
    full = []
    for unit in units[:-1] + [model]:
        own = [p for p in unit.parameters() if id(p) not in taken]
        taken.update(id(p) for p in own)
        gathered_size = 2 if mixed_precision is not None else None  # bf16 parameters while gathered
        full.append(sum(p.numel() * (gathered_size or p.element_size()) for p in own))
    for unit in units:
        fully_shard(unit, **keywords)
    model.ddptop_units = full  # forward order; the root (last) runs first and is gathered throughout
    model.ddptop_reshard = reshard_after_forward
    model.ddptop_world = world


def reshard(model: Any) -> None:
    """Shard again every FSDP2 unit a forward without a backward left gathered (the activation estimate's
    forward, with ``reshard_after_forward=False``): the steps then start sharded, and the count sees the
    shards, not the gathered parameters. Nothing for a model FSDP2 did not shard."""
    for module in model.modules():
        if callable(getattr(module, "reshard", None)) and hasattr(module, "unshard"):
            module.reshard()


def local(tensor: Any) -> Any:
    """The part of ``tensor`` this rank holds: a DTensor's local shard, else the tensor itself."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if callable(to_local) else tensor


def nbytes(tensor: Any) -> int:
    held = local(tensor)
    return held.numel() * held.element_size()


def optimizer_state_bytes(optimizer: Any) -> int:
    """The optimizer state this rank holds, from its real tensors; before the first step (no state yet) the
    momentum it will create: one buffer per parameter its local optimizer owns (ZeRO-1: its share)."""
    inner = getattr(optimizer, "optim", optimizer)  # ZeroRedundancyOptimizer's local optimizer
    held = sum(nbytes(value) for state in inner.state.values() for value in state.values()
               if hasattr(value, "element_size") and value.dim() > 0)
    if held:
        return held
    return MOMENTUM_SLOTS * sum(nbytes(p) for group in inner.param_groups for p in group["params"])


def gathered_bytes(model: Any) -> int:
    """FSDP2's bytes beyond the shards at the backward's peak (0 for DDP and ZeRO-1), walked unit by unit in
    the backward's order (the forward's, reversed). While unit i's backward runs this rank holds its gathered
    parameters, the next unit's (prefetched), unit i's full gradients before their reduce-scatter; the
    gradient shards of the units not yet reduced do not exist yet (the steady count has them all). Without
    ``reshard_after_forward`` every unit's gathered parameters stay from the forward until its backward
    ends. The root's own parameters are gathered throughout."""
    units = list(getattr(model, "ddptop_units", ()))
    if not units:
        return 0
    world = getattr(model, "ddptop_world", 1)
    root, blocks = units[-1], units[:-1][::-1]  # backward order
    peak = 0
    for i, unit in enumerate(blocks):
        if getattr(model, "ddptop_reshard", True):
            params = unit + (blocks[i + 1] if i + 1 < len(blocks) else 0)
        else:
            params = sum(blocks[i:])
        missing_shards = sum(blocks[i:]) / world  # not reduce-scattered yet
        peak = max(peak, params + unit - missing_shards)
    return int(root + peak)


def counted_memory(model: Any, optimizer: Any, inputs: Any, activation_bytes: float) -> dict[str, int]:
    """What one training step holds on this rank, by kind, in bytes (see the module's docstring)."""
    params = list(model.parameters())
    return {
        "parameters": sum(nbytes(p) for p in params),
        # a gradient has its parameter's local shape; before the first backward, what it will hold
        "gradients": sum(nbytes(p.grad) if p.grad is not None else nbytes(p) for p in params if p.requires_grad),
        "optimizer_state": optimizer_state_bytes(optimizer),
        "gathered": gathered_bytes(model),
        "inputs": inputs.numel() * inputs.element_size(),
        "activations": int(activation_bytes),
    }
