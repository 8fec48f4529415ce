"""ZeRO-1 and FSDP2 beside DDP: the wrapped model, its optimizer, and the bytes each rank holds.

``wrap_fsdp`` shards the model for FSDP2 and ``zero_optimizer`` is ZeRO-1's optimizer (its model is DDP's),
for a configuration whose ``strategy`` is not plain DDP (``ddptop.protocol.strategies``); the step itself is the
configuration's (``bench_kernels.training.Training.step_through``), the same zero_grad, forward, loss, backward
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


def wrap_fsdp(model: Any, cfg: RunConfig, device: Any, units_of: Any = None) -> Any:
    """The model sharded by FSDP2 as ``cfg.strategy`` says (``reshard_after_forward``), in place: the
    workload's SGD then steps the local shards (DTensor parameters). ``units_of(model)``: the workload's own
    units (``Workload.fsdp_units``), else ``sharded_units``'s."""
    chosen = strategies.strategy(cfg.strategy)
    units = given_units(model, units_of) if units_of is not None else None
    shard_model(model, device, chosen.reshard_after_forward, mixed_precision=mixed_precision(cfg, device),
                units=units)
    return model


def given_units(model: Any, units_of: Any) -> list[Any]:
    """The workload's FSDP2 units, innermost first (``fully_shard`` takes a unit inside another before it),
    then the root; a unit that is not a submodule of the model is refused in one line."""
    inside = {id(m): depth for depth, m in _depths(model)}
    units = list({id(u): u for u in units_of(model)}.values())  # each once: fully_shard twice fails
    strangers = [type(u).__name__ for u in units if id(u) not in inside or u is model]
    if strangers:
        raise ValueError(f"the workload's fsdp_units gave modules that are not submodules of its model: "
                         f"{', '.join(strangers[:3])}")
    order = {id(m): i for i, m in enumerate(model.modules())}
    units.sort(key=lambda u: (-inside[id(u)], order[id(u)]))
    return units + [model]


def _depths(model: Any) -> list[tuple[int, Any]]:
    found: list[tuple[int, Any]] = []

    def walk(module: Any, depth: int) -> None:
        found.append((depth, module))
        for child in module.children():
            walk(child, depth + 1)

    walk(model, 0)
    return found


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
    """What ``fully_shard`` is applied to by default, innermost first, the root last (it takes any parameter
    left): every block of a Sequential or ModuleList (a ResNet's stages, a transformer's layers: FSDP's unit
    in practice is a block, and a whole stage would hold most of a model's parameters), at any depth (a
    Hugging Face model keeps its layers inside a child, ``transformer.h``, ``model.layers``), and each other
    module with parameters that holds no block (a CNN's stem and classifier, an embedding, a final norm); a
    module holding blocks becomes a unit after them where it is closed. A module is a unit only where it is
    closed: no parameter of it is held by a module outside it. A language model's head tied to its token
    embedding is left to the enclosing unit, the root at worst: as units of their own the two holders would
    each shard their copy, and the two would part."""
    import torch

    holders: dict[int, set[int]] = {}
    for module in model.modules():
        for parameter in module.parameters(recurse=False):
            holders.setdefault(id(parameter), set()).add(id(module))
    containers = (torch.nn.Sequential, torch.nn.ModuleList)

    def closed(module: Any) -> bool:
        inside = {id(m) for m in module.modules()}
        return all(holders[id(p)] <= inside for p in module.parameters())

    def has_parameters(module: Any) -> bool:
        return any(True for _ in module.parameters())

    def holds_blocks(module: Any) -> bool:
        return any(isinstance(m, containers) and sum(has_parameters(c) for c in m.children()) > 1
                   for m in module.modules())

    units: list[Any] = []

    def left_over(module: Any) -> bool:  # parameters no unit inside it took
        taken = {id(p) for unit in units for p in unit.parameters()}
        return any(id(p) not in taken for p in module.parameters())

    def visit(module: Any) -> None:
        for child in module.children():
            if not has_parameters(child):
                continue
            if isinstance(module, containers) and closed(child):
                units.append(child)  # a block
            elif isinstance(child, containers) or holds_blocks(child):
                visit(child)  # its blocks (or what holds them) first
                if not isinstance(child, containers) and closed(child) and left_over(child):
                    units.append(child)
            elif closed(child):
                units.append(child)
            else:
                visit(child)  # a tied module's closed parts may still be units

    visit(model)
    return units + [model]


def shard_model(model: Any, device: Any, reshard_after_forward: bool, mixed_precision: Any = None,
                units: list[Any] | None = None) -> None:
    """``fully_shard`` each unit (``units``, else ``sharded_units``'s; innermost first, the root last) on a
    one-dimensional mesh of every rank (a CPU mesh with gloo). Each unit's full parameter bytes are kept on
    the model for ``counted_memory``."""
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    world = dist.get_world_size()
    mesh = init_device_mesh(device.type, (world,))
    keywords: dict[str, Any] = {"mesh": mesh, "reshard_after_forward": reshard_after_forward}
    if mixed_precision is not None:
        keywords["mp_policy"] = mixed_precision
    units = units or sharded_units(model)
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


def counted_memory(model: Any, optimizer: Any, input_bytes: int, activation_bytes: float) -> dict[str, int]:
    """What one training step holds on this rank, by kind, in bytes (see the module's docstring);
    ``input_bytes``: every tensor of the batch."""
    params = list(model.parameters())
    return {
        "parameters": sum(nbytes(p) for p in params),
        # a gradient has its parameter's local shape; before the first backward, what it will hold
        "gradients": sum(nbytes(p.grad) if p.grad is not None else nbytes(p) for p in params if p.requires_grad),
        "optimizer_state": optimizer_state_bytes(optimizer),
        "gathered": gathered_bytes(model),
        "inputs": int(input_bytes),
        "activations": int(activation_bytes),
    }
