"""What one configuration trains, and its training step.

Built once per configuration (a model with random weights, its wrapper, the optimizer, one fixed synthetic
batch) apart from the timing loop (``bench_kernels.timing``) and the worker's orchestration
(``bench_kernels.ddp``). The step runs through a wrapper passed in (``Workload.step_through``) because the
communication probe (``bench_kernels.comm_probe``) runs the same step through a second DDP wrapper: which
wrapper a phase measures is then said where the phase starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Mode


@dataclass
class Workload:
    model: Any  # the bare module: every wrapper and the optimizer share its parameters
    net: Any  # what the measured steps run through: DDP, DataParallel or the bare model
    optimizer: Any
    inputs: Any
    targets: Any
    loss_fn: Any
    amp_dtype: Any  # None: full precision
    scaler: Any  # a GradScaler for fp16, else None
    device: Any
    batch_size: int  # what one process feeds per step: the global batch for DataParallel
    params: int  # trainable parameters
    grad_bytes: int  # gradient bytes per step, what DDP allreduces

    def step_through(self, net: Any) -> Callable[[], None]:
        """One training step through ``net``: zero_grad, forward, loss, backward (DDP's allreduce happens
        there), optimizer step, then on GPU a synchronize so the step's time is the device's."""
        import torch

        optimizer, inputs, targets, loss_fn = self.optimizer, self.inputs, self.targets, self.loss_fn
        amp_dtype, scaler, device = self.amp_dtype, self.scaler, self.device
        synchronize = torch.cuda.synchronize if device.type == "cuda" else None

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            autocast = (
                torch.autocast(device_type="cuda", dtype=amp_dtype) if amp_dtype else contextlib.nullcontext()
            )
            with autocast:
                loss = loss_fn(net(inputs), targets)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if synchronize is not None:
                synchronize(device)

        return step


def build_workload(cfg: RunConfig, device: Any, local_rank: int, rank: int) -> Workload:
    import torch

    from bench_kernels.models import build_model

    torch.manual_seed(1234 + rank)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    model = build_model(cfg.model, cfg.num_classes, cfg.image_size).to(device)
    memory_format = torch.channels_last if cfg.channels_last else torch.contiguous_format
    model = model.to(memory_format=memory_format)
    trainable = [p for p in model.parameters() if p.requires_grad]
    net = wrap(model, cfg, device, local_rank)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    batch = cfg.global_batch if cfg.mode == Mode.DP else cfg.batch_size
    size = cfg.image_size
    inputs = torch.randn(batch, 3, size, size, device=device).contiguous(memory_format=memory_format)
    targets = torch.randint(0, cfg.num_classes, (batch,), device=device)
    amp_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(cfg.amp) if cfg.amp else None
    return Workload(
        model=model,
        net=net,
        optimizer=optimizer,
        inputs=inputs,
        targets=targets,
        loss_fn=torch.nn.CrossEntropyLoss(),
        amp_dtype=amp_dtype,
        scaler=grad_scaler(torch) if cfg.amp == "fp16" else None,
        device=device,
        batch_size=batch,
        params=sum(p.numel() for p in trainable),
        grad_bytes=sum(p.numel() * p.element_size() for p in trainable),
    )


def wrap(model: Any, cfg: RunConfig, device: Any, local_rank: int) -> Any:
    """The model as the configuration's mode trains it."""
    import torch

    if cfg.mode == Mode.DDP:
        return wrap_in_ddp(model, cfg, device, local_rank)
    if cfg.mode == Mode.DP:
        # One process scatters the batch over N devices, replicates the model every step and gathers the
        # outputs. Without CUDA, DataParallel is a pass-through: one process does the N ranks' work on the
        # cores they would have shared.
        devices = list(range(cfg.world_size)) if device.type == "cuda" else None
        return torch.nn.DataParallel(model, device_ids=devices)
    return model


def wrap_in_ddp(model: Any, cfg: RunConfig, device: Any, local_rank: int) -> Any:
    from torch.nn.parallel import DistributedDataParallel

    return DistributedDataParallel(
        model,
        device_ids=[local_rank] if device.type == "cuda" else None,
        bucket_cap_mb=cfg.bucket_cap_mb,
    )


def grad_scaler(torch: Any) -> Any:
    """fp16's loss scaler: ``torch.amp.GradScaler("cuda")`` where torch has the device-generic one, else the
    CUDA one it replaced (what the declared torch floor still ships)."""
    generic = getattr(getattr(torch, "amp", None), "GradScaler", None)
    return generic("cuda") if generic is not None else torch.cuda.amp.GradScaler()


def accepts(function: Any, keyword: str) -> bool:
    """Whether ``function`` takes ``keyword``: torch grows keywords across versions (read, not guessed)."""
    import inspect

    try:
        return keyword in inspect.signature(function).parameters
    except (TypeError, ValueError):  # a builtin without a signature
        return False
