"""The DDP variants ``ddptop tune`` measures against DDP as a user writes it: each one thing a user can set.

The catalog is shared by the plan (which configurations to run), the kernel (what to pass to DDP and which
comm hook to register) and the report (what changes in the arithmetic, and the lines to paste). A variant
changes DDP's keyword arguments, the gradient bucket size, the buffer sync or the comm hook; the model, the
batch and the optimizer stay the default's.

Standard library only (the kernels import it inside torchrun workers).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptop.protocol import strategies

DEFAULT = "default"
# PowerSGD compresses from this step on (its own default, 1000, would leave every measured step uncompressed;
# 2 is the earliest it allows with error feedback: powerSGD_hook.PowerSGDState)
POWERSGD_START = 2


@dataclass(frozen=True)
class Variant:
    """One setting a user can change, as ddptop applies it."""

    name: str
    what: str  # the setting in words ("static_graph=True")
    ddp_kwargs: dict[str, Any] = field(default_factory=dict)  # keyword arguments to DDP beyond the default
    bucket_cap_mb: float | None = None  # the gradient bucket size (None: the plan's)
    buffer_sync: bool = True  # DDP re-sends module buffers before each forward (its default)
    comm_hook: str | None = None  # fp16 | bf16 | powersgd: the DDP communication hook registered
    powersgd_rank: int = 0  # PowerSGD's matrix approximation rank
    math: str | None = None  # what changes in the arithmetic (None: the same gradients, bit for bit or nearly)
    cuda_only: bool = False  # measured on GPUs only (said and skipped on the CPU)
    # the step rather than DDP: autocast's dtype, and the memory format of the model and its inputs
    amp: str | None = None
    channels_last: bool = False
    # environment variables of the launch (NCCL's): such a variant runs in a launch of its own
    env: tuple[tuple[str, str], ...] = ()
    cpu_why: str | None = None  # why it is not measured on the CPU (cuda_only)
    compile: bool = False  # torch.compile of the DDP-wrapped model (its compile time is reported apart)
    # another data-parallel strategy in DDP's place (ZeRO-1, FSDP2: ddptop.protocol.strategies), as a candidate
    strategy: str | None = None
    # a script's tries only (``ddptop tune -- train.py``): keyword arguments set on its training DataLoader's
    # call, and gradients synchronised once every k micro-batches, as no_sync() around the first k-1 would
    loader_kwargs: dict[str, Any] = field(default_factory=dict)
    no_sync_every: int = 0
    # and each rank's CPU threads (OMP_NUM_THREADS and torch.set_num_threads, bound to as many cores), set for
    # the launch: the script's own torch.set_num_threads would override it (then the try is not applied)
    threads: int = 0


AUTOCAST_ON_GPU = "autocast is measured on GPUs only (as ddptop's --amp)"


def _nccl(variable: str, value: str) -> Variant:
    """An NCCL setting, in a launch of its own (NCCL reads its environment once, at init)."""
    return Variant(f"{variable.lower()}_{value.lower()}", f"{variable}={value}", env=((variable, value),),
                   cuda_only=True, cpu_why="NCCL runs on GPUs only; gloo has no algorithm or protocol to choose")


def _strategy(name: str) -> Variant:
    """ZeRO-1 or FSDP2 as a candidate of ddptop tune (``--strategies`` measures them in a sweep): the same
    model, batch and SGD; recommended alone, never set together with a DDP setting."""
    return Variant(name, strategies.strategy(name).what, strategy=name)


def _bucket(size: float) -> Variant:
    return Variant(f"bucket_cap_mb_{size:g}", f"bucket_cap_mb={size:g}", bucket_cap_mb=size)


CATALOG: dict[str, Variant] = {v.name: v for v in (
    Variant(DEFAULT, "DDP(model) as written, every keyword at its default"),
    _bucket(10), _bucket(50), _bucket(100),
    Variant("gradient_as_bucket_view", "gradient_as_bucket_view=True", {"gradient_as_bucket_view": True}),
    Variant("static_graph", "static_graph=True", {"static_graph": True}),
    Variant("no_buffer_sync", "no buffer sync before each forward", buffer_sync=False,
            math="module buffers (BatchNorm's running statistics) are no longer copied from rank 0 before each "
                 "forward: each rank keeps its own"),
    Variant("find_unused_parameters", "find_unused_parameters=True (the cost of leaving it on)",
            {"find_unused_parameters": True}),
    Variant("fp16_compress_hook", "comm hook fp16_compress_hook", comm_hook="fp16",
            math="gradients are sent as fp16 (rounded to 11 significant bits, and small values flushed to zero)"),
    Variant("bf16_compress_hook", "comm hook bf16_compress_hook", comm_hook="bf16",
            math="gradients are sent as bf16 (rounded to 8 significant bits)"),
    Variant("powersgd_rank1", "comm hook PowerSGD, rank 1", comm_hook="powersgd", powersgd_rank=1,
            math="gradients are sent as a rank-1 approximation per matrix (with error feedback): a lossy "
                 "compression that can cost accuracy"),
    Variant("powersgd_rank4", "comm hook PowerSGD, rank 4", comm_hook="powersgd", powersgd_rank=4,
            math="gradients are sent as a rank-4 approximation per matrix (with error feedback): a lossy "
                 "compression that can cost accuracy"),
    Variant("channels_last", "channels_last memory format (model and inputs)", channels_last=True),
    Variant("compile", "torch.compile of the DDP model", compile=True),
    Variant("amp_bf16", "autocast to bf16", amp="bf16", cuda_only=True, cpu_why=AUTOCAST_ON_GPU,
            math="matmuls and convolutions run in bf16 (8 significant bits), the weights stay fp32"),
    Variant("amp_fp16", "autocast to fp16 with a gradient scaler", amp="fp16", cuda_only=True, cpu_why=AUTOCAST_ON_GPU,
            math="matmuls and convolutions run in fp16 (11 significant bits), the loss scaled against "
                 "underflow; the weights stay fp32"),
    *(_nccl("NCCL_ALGO", value) for value in ("Ring", "Tree")),
    *(_nccl("NCCL_PROTO", value) for value in ("LL", "LL128", "Simple")),
    *(_strategy(name) for name in (strategies.ZERO1, strategies.FSDP2, strategies.FSDP2_NO_RESHARD)),
)}

# what `ddptop tune` measures when not told otherwise: every variant of the catalog
DEFAULT_TUNE = tuple(CATALOG)

# what ddptop tune tries on a user's script (``ddptop tune -- train.py``) when told which: DDP's keyword arguments
# and bucket size, which the script probe sets on the script's own DDP constructor call (its file untouched), and
# the script-only tries below; a setting of the step, a comm hook or an environment would change more than a
# keyword of one of the script's calls. Told none, the tune chooses from a first run (``analysis.script_tries``).
SCRIPT_TUNE = ("bucket_cap_mb_10", "bucket_cap_mb_100", "gradient_as_bucket_view", "static_graph")

NO_TRY = "every try"  # a script's tune's not_tried where no try ran at all

# tries of a script's own calls, named with their value where they take one (num_workers_4, no_sync_4)
UNUSED_OFF = "find_unused_parameters_false"
PIN_MEMORY = "pin_memory"
PERSISTENT = "persistent_workers"
WORKERS, PREFETCH, NO_SYNC, THREADS = "num_workers_", "prefetch_factor_", "no_sync_", "threads_"
SCRIPT_ONLY = (UNUSED_OFF, PIN_MEMORY, PERSISTENT, f"{WORKERS}K", f"{PREFETCH}K", f"{NO_SYNC}K", f"{THREADS}K")


def _script_try(name: str) -> Variant | None:
    """A try of a script's own calls by its name, or None for any other name."""
    if name == UNUSED_OFF:
        return Variant(name, "find_unused_parameters=False", {"find_unused_parameters": False})
    if name == PIN_MEMORY:
        return Variant(name, "DataLoader pin_memory=True", loader_kwargs={"pin_memory": True}, cuda_only=True,
                       cpu_why="pinned memory speeds copies to a GPU only")
    if name == PERSISTENT:
        return Variant(name, "DataLoader persistent_workers=True", loader_kwargs={"persistent_workers": True})
    for prefix in (WORKERS, PREFETCH, NO_SYNC, THREADS):
        count = name.removeprefix(prefix)
        if name.startswith(prefix) and count.isdigit() and int(count) > (0 if prefix in (WORKERS, THREADS) else 1):
            k = int(count)
            if prefix == THREADS:
                return Variant(name, f"OMP_NUM_THREADS={k} in each rank", threads=k)
            if prefix == WORKERS:  # workers kept between the script's passes over its data, as the example
                return Variant(name, f"DataLoader num_workers={k}, persistent_workers=True",
                               loader_kwargs={"num_workers": k, "persistent_workers": True})
            if prefix == PREFETCH:
                return Variant(name, f"DataLoader prefetch_factor={k}", loader_kwargs={"prefetch_factor": k})
            return Variant(name, f"gradients synchronised once every {k} micro-batches (no_sync() around the "
                                 f"first {k - 1})", no_sync_every=k)
    return None


def is_script_only(chosen: Variant) -> bool:
    """A try of a script's own calls that ddptop's kernels have nothing to set it on."""
    return bool(chosen.loader_kwargs or chosen.no_sync_every or chosen.threads or chosen.name == UNUSED_OFF)


def applies_to_script(chosen: Variant) -> bool:
    """Whether the probe can set the variant on a script's calls: DDP's keyword arguments, its bucket size, the
    training loader's keyword arguments, no_sync over its micro-batches, the ranks' CPU threads."""
    return chosen.name == DEFAULT or bool((chosen.ddp_kwargs or chosen.bucket_cap_mb or chosen.loader_kwargs
                                           or chosen.no_sync_every or chosen.threads) and not (
        chosen.comm_hook or chosen.env or chosen.amp or chosen.channels_last or chosen.compile or chosen.strategy
        or not chosen.buffer_sync))


def script_ddp_arguments(name: str) -> dict[str, Any]:
    """The keyword arguments the script probe sets on the script's DDP call for the variant ``name`` (none for
    DDP as written)."""
    chosen = variant(name)
    found = dict(chosen.ddp_kwargs)
    if chosen.bucket_cap_mb is not None:
        found["bucket_cap_mb"] = chosen.bucket_cap_mb
    return found

# DDP as written once more, beside a combination of variants in launches of their own (ddptop tune)
AGAIN = "default_again"
_AGAIN = Variant(AGAIN, "DDP as written, measured again beside the combination")
JOIN = "+"  # a combination's name: its variants' names joined


def as_written(name: str) -> bool:
    """Whether a configuration of ``name`` measures DDP (or a user's script) as written: the default, or the
    default measured again beside a combination; every other name is a variant (a script's try)."""
    return name in (DEFAULT, AGAIN)


def variant(name: str) -> Variant:
    """The catalog's variant of that name, DDP as written again, or a combination ("a+b"); a ValueError
    lists the known ones."""
    if name == AGAIN:
        return _AGAIN
    if JOIN in name:
        return combined([variant(part) for part in name.split(JOIN)])
    found = CATALOG.get(name) or _script_try(name)
    if found is None:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(CATALOG)}; a script's also: "
                         f"{', '.join(SCRIPT_ONLY)})")
    return found


_STATIC = "ddp.static_graph"


def combinable(names: list[str]) -> list[str]:
    """Of ``names`` (best first), those that can be set together: one bucket size, one comm hook and one
    autocast dtype at most, the first of each kind kept; no NCCL setting (each runs in a launch of its own)
    and not torch.compile (recommended alone: its compile time, paid by every job, is a cost the step time
    leaves out, and its graph split depends on every other setting); a script's static_graph and no_sync_k
    not together (the first kept: DDP's static graph breaks under no_sync())."""
    kept: list[str] = []
    bucket = hook = amp = False
    keywords: set[str] = set()  # a script's: each keyword of its calls set by one try at most
    for name in names:
        chosen = variant(name)
        if chosen.env or chosen.compile or chosen.strategy:  # NCCL (a launch of its own), compile, a strategy: alone
            continue
        mine = {f"loader.{k}" for k in chosen.loader_kwargs} | {f"ddp.{k}" for k in chosen.ddp_kwargs} | (
            {"no_sync"} if chosen.no_sync_every else set()) | ({"threads"} if chosen.threads else set())
        clash = {_STATIC, "no_sync"}  # DDP's static graph breaks under no_sync() (script_tries.STATIC_WITH_NO_SYNC)
        if mine & keywords or (mine & clash and keywords & clash):
            continue
        keywords |= mine
        if chosen.amp is not None:
            if amp:
                continue
            amp = True
        if chosen.bucket_cap_mb is not None:
            if bucket:
                continue
            bucket = True
        if chosen.comm_hook is not None:
            if hook:
                continue
            hook = True
        kept.append(name)
    return kept


def combined(parts: list[Variant]) -> Variant:
    """The variants set together (``combinable`` chose them): every keyword, the one bucket size and hook."""
    hooks = [p for p in parts if p.comm_hook is not None]
    maths = [p.math for p in parts if p.math]
    return Variant(
        JOIN.join(p.name for p in parts), " and ".join(p.what for p in parts),
        {key: value for p in parts for key, value in p.ddp_kwargs.items()},
        bucket_cap_mb=next((p.bucket_cap_mb for p in parts if p.bucket_cap_mb is not None), None),
        buffer_sync=all(p.buffer_sync for p in parts),
        comm_hook=hooks[0].comm_hook if hooks else None, powersgd_rank=hooks[0].powersgd_rank if hooks else 0,
        math="; ".join(maths) or None, cuda_only=any(p.cuda_only for p in parts),
        amp=next((p.amp for p in parts if p.amp), None), channels_last=any(p.channels_last for p in parts),
        env=tuple(pair for p in parts for pair in p.env), compile=any(p.compile for p in parts),
        loader_kwargs={key: value for p in parts for key, value in p.loader_kwargs.items()},
        no_sync_every=max((p.no_sync_every for p in parts), default=0),
        threads=max((p.threads for p in parts), default=0))


def ddp_keywords(chosen: Variant, bucket_cap_mb: float, buffers_keyword: str, buffer_sync: bool = True
                 ) -> dict[str, Any]:
    """DDP's keyword arguments for a variant (beyond the model and device_ids): the bucket size, the buffer sync
    under the installed torch's name for it (``buffers_keyword``; off when the plan or the variant turns it
    off), and the variant's own."""
    return {"bucket_cap_mb": bucket_cap_mb, buffers_keyword: buffer_sync and chosen.buffer_sync, **chosen.ddp_kwargs}


def paste_lines(chosen: Variant, keywords: Mapping[str, Any]) -> list[str]:
    """The lines a user pastes into a training script to run this variant: the DDP call with only what differs
    from DDP's defaults, and the hook's registration; for a strategy (ZeRO-1, FSDP2), its wrapping instead."""
    if chosen.strategy is not None:
        return strategy_lines(chosen.strategy)
    defaults = {"bucket_cap_mb": 25.0, "broadcast_buffers": True, "forward_sync_buffers": True,
                "gradient_as_bucket_view": False, "static_graph": False, "find_unused_parameters": False}
    changed = [f"{key}={value!r}" for key, value in keywords.items() if defaults.get(key, object()) != value]
    lines = [f"model = DDP(model{''.join(', ' + c for c in changed)})"]
    if chosen.comm_hook in ("fp16", "bf16"):
        lines = ["from torch.distributed.algorithms.ddp_comm_hooks import default_hooks", *lines,
                 f"model.register_comm_hook(None, default_hooks.{chosen.comm_hook}_compress_hook)"]
    if chosen.channels_last:
        lines = ["model = model.to(memory_format=torch.channels_last)", *lines,
                 "# and each batch: inputs = inputs.to(memory_format=torch.channels_last)"]
    if chosen.amp == "bf16":
        lines.append("# the forward and the loss: with torch.autocast('cuda', dtype=torch.bfloat16): ...")
    elif chosen.amp == "fp16":
        lines.append("# the forward and the loss: with torch.autocast('cuda', dtype=torch.float16): ...; "
                     "scale the loss with torch.amp.GradScaler('cuda')")
    if chosen.compile:
        lines.append("model = torch.compile(model)")
    if chosen.env:  # NCCL reads them at init: in the job's environment, before the process group forms
        lines = [*(f"export {key}={value}" for key, value in chosen.env), *lines]
    if chosen.comm_hook == "powersgd":  # measured compressing from the third step (PowerSGD's earliest)
        lines = ["from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD", *lines,
                 f"model.register_comm_hook(powerSGD.PowerSGDState(None, matrix_approximation_rank="
                 f"{chosen.powersgd_rank}, start_powerSGD_iter={POWERSGD_START}), powerSGD.powerSGD_hook)"]
    return lines


def keyword_words(keywords: Mapping[str, Any]) -> str:
    return ", ".join(f"{key}={value!r}" for key, value in keywords.items())


def script_change_lines(chosen: Variant, ddp_site: str | None, loader_site: str | None = None) -> list[str]:
    """The change to a user's script for a try of ``ddptop tune -- train.py``: at the line that made its DDP
    model (``train.py:97``) and the one that made its training loader, the keywords to give each call; for
    no_sync, the micro-batches to wrap; for the ranks' threads, the launch's environment."""
    lines = []
    ddp = script_ddp_arguments(chosen.name)
    if ddp:
        lines.append(f"{ddp_site or 'the script'}: DistributedDataParallel(..., {keyword_words(ddp)})")
    if chosen.loader_kwargs:
        lines.append(f"{loader_site or 'the training loader'}: DataLoader(..., {keyword_words(chosen.loader_kwargs)})")
    if chosen.no_sync_every:
        k = chosen.no_sync_every
        lines.append(f"{ddp_site or 'the script'}: run the forward and backward of the first {k - 1} of every {k} "
                     "micro-batches inside `with model.no_sync():` (the last one synchronises)")
    if chosen.threads:  # torch reads it once, at its start: the launch's environment, or the script's first lines
        lines.append(f"the launch: OMP_NUM_THREADS={chosen.threads} torchrun ... (or torch.set_num_threads("
                     f"{chosen.threads}) at the script's start)")
    return lines


def strategy_lines(name: str) -> list[str]:
    """The lines that train with ZeRO-1 or FSDP2 where a script has DDP (the SGD of ddptop's step)."""
    chosen = strategies.strategy(name)
    if chosen.zero:
        return ["from torch.distributed.optim import ZeroRedundancyOptimizer", "model = DDP(model)",
                "optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.SGD, "
                "lr=0.01, momentum=0.9)"]
    keyword = "" if chosen.reshard_after_forward else ", reshard_after_forward=False"
    return ["from torch.distributed.fsdp import fully_shard",
            f"for block in blocks: fully_shard(block{keyword})  # each block (ddptop: each top-level child, "
            "a Sequential stage block by block)",
            f"fully_shard(model{keyword})",
            "optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)  # after fully_shard"]
