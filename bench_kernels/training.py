"""What one configuration trains, and its training step.

Built once per configuration from the model spec's workload (``bench_kernels.sources``: the protocol of
``ddptop.protocol.workload``, the built-in models included): the model with random weights, its wrapper,
the optimizer, one fixed synthetic batch. Apart from the timing loop (``bench_kernels.timing``) and the
worker's orchestration (``bench_kernels.ddp``). The step runs through a wrapper passed in
(``Training.step_through``) because the communication probe (``bench_kernels.comm_probe``) runs the same step
through a second DDP wrapper: which wrapper a phase measures is then said where the phase starts.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench_kernels.sources import batch_bytes, load_workload, to_channels_last
from ddptop.protocol import strategies, variants
from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Mode
from ddptop.protocol.workload import Workload

AMP_DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # --amp -> torch dtype name


@dataclass
class Training:
    model: Any  # the bare module: every wrapper and the optimizer share its parameters
    net: Any  # what the measured steps run through: DDP, DataParallel, FSDP2's module or the bare model
    optimizer: Any
    batch: Any  # the workload's one fixed batch, on the device
    loss: Callable[[Any, Any], Any]  # the workload's loss(net, batch)
    amp_dtype: Any  # None: full precision
    scaler: Any  # a GradScaler for fp16, else None
    device: Any
    batch_size: int  # what one process feeds per step: the global batch for DataParallel
    params: int  # trainable parameters
    grad_bytes: int  # gradient bytes per step, what DDP allreduces
    workload: Workload  # what the model spec gave: its make_batch, tokens, flops, fsdp_units
    # DataParallel gathers each replica's loss: a scalar per GPU when the loss comes out of the model (a
    # Hugging Face ModelOutput's .loss), stacked into a vector the step averages (DataParallel on one device
    # or on the CPU passes the scalar through)
    average_loss: bool = False
    # DDP's logging data as the measured steps began (``comm_probe.ddp_logging_mark``): its averages run from
    # the wrapper's first step, so the probe takes the measured steps' share from the difference
    logging_mark: Any = None
    logging_read: Any = None  # DDP's averages over the measured steps, read before the trace ran any step ...
    logging_taken: bool = False  # ... when this is set (None is a reading too: a torch without the data)
    slowdown: Any = None  # an injected ``slow`` fault (``bench_kernels.faults.Slowdown``), a testing aid

    @property
    def input_bytes(self) -> int:
        return batch_bytes(self.batch)

    def slow_down(self, factor: float) -> None:
        """Make every later step of this workload slow (``--inject slow``), through any wrapper: the pause and
        the compute's stamps are hooks of the bare model, which every wrapper shares."""
        import torch

        from bench_kernels.faults import Slowdown

        if self.device.type == "cuda":
            def mark() -> Any:
                event = torch.cuda.Event(enable_timing=True)
                event.record()
                return event

            self.slowdown = Slowdown(factor, mark, lambda start, end: start.elapsed_time(end) / 1e3)
        else:
            self.slowdown = Slowdown(factor)
        self.model.register_forward_pre_hook(self.slowdown.before_forward)
        for parameter in self.model.parameters():
            if parameter.requires_grad:
                parameter.register_post_accumulate_grad_hook(self.slowdown.gradient_ready)

    def forward_loss(self, net: Any) -> Any:
        """The workload's loss of a forward of ``net`` on the batch, under the configuration's autocast (the
        step's, the FLOP count's): one number (``scalar``)."""
        import torch

        autocast = (torch.autocast(device_type=self.device.type, dtype=self.amp_dtype) if self.amp_dtype
                    else contextlib.nullcontext())
        with autocast:
            loss = self.loss(net, self.batch)
        return scalar(loss, self.average_loss)

    def step_through(self, net: Any) -> Callable[[], None]:
        """One training step through ``net``: zero_grad, forward and loss, backward (DDP's allreduce happens
        there), optimizer step, then on GPU a synchronize so the step's time is the device's."""
        import torch

        optimizer, forward_loss, scaler, device = self.optimizer, self.forward_loss, self.scaler, self.device
        synchronize = torch.cuda.synchronize if device.type == "cuda" else None

        def step() -> None:
            optimizer.zero_grad(set_to_none=True)
            loss = forward_loss(net)
            if scaler is not None:
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
            else:
                loss.backward()
                optimizer.step()
            if synchronize is not None:
                synchronize(device)

        return self.slowdown.timed(step) if self.slowdown is not None else step


def build_training(cfg: RunConfig, device: Any, local_rank: int, rank: int) -> Training:
    import torch

    torch.manual_seed(1234 + rank)
    if device.type == "cuda":
        for used in devices_used(cfg, device):  # DataParallel: each of its GPUs
            torch.cuda.reset_peak_memory_stats(used)
    batch_size = cfg.global_batch if cfg.mode == Mode.DP else cfg.batch_size
    workload = load_workload(cfg.model, cfg.num_classes, cfg.image_size, cfg.seq_len, cfg.hf_config)
    model = workload.model.to(device)
    batch = workload.make_batch(batch_size, device)
    if cfg.channels_last:  # the model's weights and every 4-D input of its batch
        model = model.to(memory_format=torch.channels_last)
        batch = to_channels_last(batch)
    trainable = [p for p in model.parameters() if p.requires_grad]
    net = wrap(model, cfg, device, local_rank, workload)
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01, momentum=0.9)
    if strategies.strategy(cfg.strategy).zero:  # ZeRO-1: the same SGD, its state sharded over the ranks
        optimizer = zero_optimizer(net)
    amp_dtype = getattr(torch, AMP_DTYPES[cfg.amp]) if cfg.amp else None
    return Training(
        model=model,
        net=net,
        optimizer=optimizer,
        batch=batch,
        loss=workload.loss,
        amp_dtype=amp_dtype,
        scaler=grad_scaler(torch) if cfg.amp == "fp16" else None,
        device=device,
        batch_size=batch_size,
        params=sum(p.numel() for p in trainable),
        grad_bytes=sum(p.numel() * p.element_size() for p in trainable),
        workload=workload,
        average_loss=cfg.mode == Mode.DP,
    )


def scalar(loss: Any, average: bool) -> Any:
    """The loss as one number: DataParallel's stacked per-replica losses averaged (``Training.average_loss``)."""
    return loss.mean() if average and loss.dim() else loss


def param_dtype(model: Any) -> str | None:
    """"bf16" or "fp16" where the model's floating parameters are all in it (a factory may build its model in
    half precision: its matmuls then run in it without autocast), else None."""
    import torch

    names = {torch.bfloat16: "bf16", torch.float16: "fp16"}
    found = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return names.get(found.pop()) if len(found) == 1 else None


def wrap(model: Any, cfg: RunConfig, device: Any, local_rank: int, workload: Workload | None = None) -> Any:
    """The model as the configuration's mode trains it (the workload's FSDP2 units and DDP keyword, if any)."""
    import torch

    if cfg.mode == Mode.DDP and strategies.strategy(cfg.strategy).fsdp:  # FSDP2 (bench_kernels.strategy_wrappers)
        from bench_kernels.strategy_wrappers import wrap_fsdp

        return wrap_fsdp(model, cfg, device, workload.fsdp_units if workload else None)
    if cfg.mode == Mode.DDP:
        ddp = wrap_in_ddp(model, cfg, device, local_rank,
                          find_unused=bool(workload and workload.find_unused_parameters))
        if not variants.variant(cfg.variant).compile:
            return ddp
        # Dynamo's DDPOptimizer asserts that DDP's first bucket (1 MiB) is no larger than the others
        # (torch/_dynamo/backends/distributed.py, torch 2.14): a smaller cap fails inside the first step
        first = getattr(torch.distributed, "_DEFAULT_FIRST_BUCKET_BYTES", 0)
        if ddp.bucket_bytes_cap < first:
            raise RuntimeError(f"torch.compile cannot run DDP with bucket_cap_mb={cfg.bucket_cap_mb:g}: Dynamo's "
                               f"DDPOptimizer needs a bucket cap of at least DDP's first bucket, {first / 2**20:g} MiB")
        # compiled at its first step (bench_kernels.compiled times that step apart from the measured ones)
        return torch.compile(ddp)
    if cfg.mode == Mode.DP:
        # One process scatters the batch over N devices, replicates the model every step and gathers the
        # outputs. Without CUDA, DataParallel is a pass-through: one process does the N ranks' work on the
        # cores they would have shared.
        return torch.nn.DataParallel(replica_module(model, cfg, device), device_ids=dp_devices(cfg, device))
    return model


def eager_ddp(net: Any) -> Any:
    """The DDP wrapper under a ``torch.compile`` (its ``_orig_mod``), or ``net`` itself: what runs a step eagerly
    (the FLOP count) and holds DDP's own state (``no_sync``, its logging data)."""
    return getattr(net, "_orig_mod", net)


def zero_optimizer(net: Any) -> Any:
    """ZeRO-1's optimizer (``bench_kernels.strategy_wrappers``) over the DDP-wrapped model's parameters."""
    from bench_kernels.strategy_wrappers import zero_optimizer as sharded

    return sharded(net)


def replica_module(model: Any, cfg: RunConfig, device: Any) -> Any:
    """What DataParallel replicates: under ``--amp`` on a GPU, the model inside an ``AutocastForward`` of the
    configuration's torch dtype (a ``torch.dtype``: ``torch.autocast`` takes no dtype name, and on entry
    ``torch.set_autocast_dtype`` refuses a string with a TypeError), else the model itself."""
    import torch

    if not cfg.amp or device.type != "cuda":
        return model
    return AutocastForward(model, getattr(torch, AMP_DTYPES[cfg.amp]), device.type)


def dp_devices(cfg: RunConfig, device: Any) -> list[int] | None:
    """The GPUs a DataParallel configuration drives from its one process (None on the CPU)."""
    return list(range(cfg.world_size)) if cfg.mode == Mode.DP and device.type == "cuda" else None


def devices_used(cfg: RunConfig, device: Any) -> list[Any]:
    """Every device this process's configuration allocates on: DataParallel's N GPUs, else its own one."""
    import torch

    indices = dp_devices(cfg, device)
    return [torch.device("cuda", i) for i in indices] if indices else [device]


class AutocastForward:
    """Runs the wrapped module's forward under ``torch.autocast("cuda", dtype)``, inside each replica.

    DataParallel's ``parallel_apply`` re-enters autocast in each replica's thread without a dtype
    (``torch.amp.autocast(device_type, enabled=autocast_enabled)`` in torch/nn/parallel/parallel_apply.py,
    read in torch 2.14), which means CUDA's default, fp16: ``--amp bf16`` then ran fp16 in every replica.
    The replica's own forward setting the dtype again makes it the one that counts. Autocast's dtype is
    thread-local and each replica runs in a thread parallel_apply starts, so the caller's ``torch.autocast``
    cannot reach it. ``device_type`` is the replicas' (None: CUDA where torch has it, else the CPU). Built
    lazily as an ``nn.Module`` subclass so importing this file does not import torch.
    """

    def __new__(cls, module: Any, dtype: Any, device_type: str | None = None) -> Any:
        return _autocast_module_class()(module, dtype, device_type)


def _autocast_module_class() -> Any:
    import torch

    global _AUTOCAST_CLASS
    if _AUTOCAST_CLASS is None:
        class _AutocastForward(torch.nn.Module):
            def __init__(self, module: Any, dtype: Any, device_type: str | None) -> None:
                super().__init__()
                self.module, self.dtype = module, dtype
                self.device_type = device_type or ("cuda" if torch.cuda.is_available() else "cpu")

            def forward(self, *args: Any, **kwargs: Any) -> Any:
                with torch.autocast(device_type=self.device_type, dtype=self.dtype):
                    return self.module(*args, **kwargs)

        _AUTOCAST_CLASS = _AutocastForward
    return _AUTOCAST_CLASS


_AUTOCAST_CLASS: Any = None


def wrap_in_ddp(model: Any, cfg: RunConfig, device: Any, local_rank: int, with_hook: bool = True,
                find_unused: bool = False) -> Any:
    """``model`` in DDP with the configuration's variant (``ddptop.protocol.variants``): its keywords, and its
    comm hook unless ``with_hook`` is false (the communication probe registers a timing hook of its own);
    ``find_unused``: the workload's parameters are not all used in a step (``find_unused_parameters=True``).
    ``ddp.ddptop_keywords`` keeps the keywords passed, under the installed torch's names."""
    from torch.nn.parallel import DistributedDataParallel

    chosen = variants.variant(cfg.variant)
    # Buffers re-sent before each forward: torch 2.14 names it forward_sync_buffers and deprecates
    # broadcast_buffers, which also skipped the sync at construction (torch/nn/parallel/distributed.py). The
    # step times are the same either way; the newer keyword where torch has it, so no warning is printed.
    buffers = ("forward_sync_buffers" if accepts(DistributedDataParallel.__init__, "forward_sync_buffers")
               else "broadcast_buffers")
    keywords = variants.ddp_keywords(chosen, cfg.bucket_cap_mb, buffers, cfg.broadcast_buffers)
    if find_unused:
        keywords["find_unused_parameters"] = True
    missing = [key for key in chosen.ddp_kwargs if not accepts(DistributedDataParallel.__init__, key)]
    if missing:
        raise RuntimeError(f"this torch's DDP has no {', '.join(missing)}: variant {cfg.variant} cannot run")
    ddp = DistributedDataParallel(model, device_ids=[local_rank] if device.type == "cuda" else None, **keywords)
    ddp.ddptop_keywords = keywords
    if with_hook and chosen.comm_hook is not None:
        register_comm_hook(ddp, chosen)
    # DDP's runtime averages (_get_ddp_logging_data) sample the first 10 iterations, then one in 100
    # (kDDPRuntimeLoggingSampleRate, torch/nn/parallel/distributed.py): with a short warm-up and 50 measured
    # steps they would describe mostly the warm-up. Every iteration, so they describe the measured steps.
    sample_every = getattr(ddp, "_set_ddp_runtime_logging_sample_rate", None)
    if sample_every is not None:
        sample_every(1)
    return ddp


def register_comm_hook(ddp: Any, chosen: variants.Variant) -> None:
    """The variant's DDP communication hook, from torch's own ddp_comm_hooks."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    if chosen.comm_hook == "fp16":
        ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    elif chosen.comm_hook == "bf16":
        ddp.register_comm_hook(None, default_hooks.bf16_compress_hook)
    elif chosen.comm_hook == "powersgd":
        state = powerSGD_hook.PowerSGDState(None, matrix_approximation_rank=chosen.powersgd_rank,
                                            start_powerSGD_iter=variants.POWERSGD_START)
        ddp.register_comm_hook(state, powerSGD_hook.powerSGD_hook)
    else:
        raise RuntimeError(f"unknown comm hook {chosen.comm_hook!r}")


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
