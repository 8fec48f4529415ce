"""FLOPs of one training step.

FLOPs per step are counted once per configuration (``training_step_flops``: the FLOP fields of its
config_start) by ``torch.utils.flop_counter.FlopCounterMode`` on one forward and backward of the rank's own
batch, before the warm-up and outside every timed step (the count is analytic, per aten op: convolutions and
matmuls, not measured), by op kind: convolutions run in cuDNN and matmuls (mm, addmm, bmm, attention) in
cuBLAS, whose TF32 switches differ (``op_dtypes``). The CPU's flash attention, which torch's counter has no
formula for, is counted with the GPU kernels' formulas (``attention_formulas``). The optimizer step's
element-wise work is not counted, as model FLOPs utilisation conventionally leaves it out.
An op the counter has no formula for counts 0: the count names every such op that may do real arithmetic
(an op of a library's own namespace, a Triton kernel, an aten matmul, convolution or attention torch's
registry does not know), so a report never passes a partial count off as the whole. A kernel called outside
torch's dispatcher (a C++ extension's own call) is not seen at all; a workload can give its FLOPs instead.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from bench_kernels.errors import one_line
from bench_kernels.training import Training, eager_ddp
from ddptop.protocol import variants
from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Mode

OP_KINDS = ("conv", "matmul")


def op_dtypes(torch: Any, device: Any, amp: str | None) -> dict[str, str]:
    """What each kind of op runs in: the autocast dtype; else, on a GPU of compute capability 8.0 or later,
    tf32 where torch allows it for that kind (cuDNN's convolutions: ``torch.backends.cudnn.allow_tf32``, on
    by default; cuBLAS's matmuls: ``torch.backends.cuda.matmul.allow_tf32``, off by default, which
    ``torch.set_float32_matmul_precision("high")`` turns on); else fp32."""
    if amp:
        return {kind: amp for kind in OP_KINDS}
    found = {kind: "fp32" for kind in OP_KINDS}
    if device.type == "cuda" and torch.cuda.get_device_properties(device).major >= 8:
        if torch.backends.cudnn.allow_tf32:
            found["conv"] = "tf32"
        if torch.backends.cuda.matmul.allow_tf32:
            found["matmul"] = "tf32"
    return found


def dtype_label(dtypes: dict[str, str], flops_by_kind: dict[str, int] | None = None) -> str:
    """One word where every kind that ran runs in one dtype ("tf32"), else each kind's ("conv tf32, matmul
    fp32"); kinds with no FLOPs in the step are left out."""
    ran = [k for k in OP_KINDS if flops_by_kind is None or flops_by_kind.get(k, 0) > 0] or list(OP_KINDS)
    used = {dtypes[k] for k in ran}
    return used.pop() if len(used) == 1 else ", ".join(f"{k} {dtypes[k]}" for k in ran)


def op_kind(op: Any) -> str:
    """"conv" for a convolution (forward or backward), "matmul" for every other op FlopCounterMode counts."""
    return "conv" if "convolution" in getattr(op, "__name__", str(op)) else "matmul"


@dataclass(frozen=True)
class StepFlops:
    """A step's counted FLOPs by op kind, and the ops that ran without a formula (name -> calls)."""

    by_kind: dict[str, int]
    uncounted: dict[str, int]

    def uncounted_lines(self) -> list[str]:
        return [f"{name} ({calls} call{'s' if calls != 1 else ''})" for name, calls in sorted(self.uncounted.items())]


# namespaces whose ops do no arithmetic a FLOP count is about: collectives, profiling marks, random bits
QUIET_NAMESPACES = {"c10d", "_c10d_functional", "_c10d_functional_autograd", "_dtensor", "profiler", "rngprims",
                    "fsdp", "debugprims"}
# aten ops by a word of their name: the arithmetic FLOP counts are about (a matmul, a convolution, attention);
# whole words, so upsample_bilinear2d, cummax or lgamma are not taken for one
HEAVY_WORDS = {"mm", "addmm", "bmm", "baddbmm", "addbmm", "matmul", "einsum", "linear", "gemm", "mv", "addmv",
               "conv1d", "conv2d", "conv3d", "conv", "convolution", "attention"}


def training_step_flops(torch: Any, cfg: RunConfig, training: Training) -> dict[str, Any]:
    """FLOPs of one forward, loss and backward of this rank's batch by op kind, before any timed step, and
    the ops the counter had no formula for; or the workload's own figure where it gives one (``flops``): the
    FLOP fields of the configuration's config_start.
    DDP runs it under ``no_sync()`` (no allreduce), DataParallel on the bare model with the global batch
    (FlopCounterMode follows this thread, not the replicas' threads); the gradients are dropped after."""
    given = training.workload.flops
    if given is not None:
        try:
            return {"flops_per_step": float(given(training.batch)), "flops_source": "workload"}
        except Exception as exc:  # noqa: BLE001 - the workload's own function failing: said, not counted
            return {"flops_note": f"the workload's flops(batch) raised {one_line(exc)}"}
    if variants.variant(cfg.variant).ddp_kwargs.get("static_graph"):
        return {}  # static_graph DDP breaks on a no_sync() step before its first (an internal assert)
    net = training.model if cfg.mode == Mode.DP else eager_ddp(training.net)  # the FLOPs are the same
    # FSDP2 has no no_sync(): its reduce-scatters run, outside the count as every collective is
    quiet = net.no_sync() if cfg.mode == Mode.DDP and hasattr(net, "no_sync") else contextlib.nullcontext()

    def forward_and_backward() -> None:
        with quiet:
            training.forward_loss(net).backward()

    try:
        counted = count_step(torch, forward_and_backward)
    except Exception as exc:  # noqa: BLE001 - a model FlopCounterMode cannot follow: no count, not a failure
        return {"flops_note": f"FlopCounterMode could not count this step: {one_line(exc)}"}
    finally:
        training.optimizer.zero_grad(set_to_none=True)
    if counted is None:
        return {}
    return {"flops_per_step": sum(counted.by_kind.values()) or None, "flops_by_kind": counted.by_kind,
            "flops_source": "counted", "flops_uncounted": counted.uncounted_lines()}


def count_step_flops(torch: Any, run_step_body: Any) -> dict[str, int] | None:
    """FLOPs of ``run_step_body()`` (a forward and backward) by op kind, counted by FlopCounterMode; None
    without it."""
    counted = count_step(torch, run_step_body)
    return counted.by_kind if counted is not None else None


def count_step(torch: Any, run_step_body: Any) -> StepFlops | None:
    """``count_step_flops`` with the ops that ran without a formula; None without FlopCounterMode."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
        from torch.utils._python_dispatch import TorchDispatchMode
    except ImportError:
        return None
    seen: dict[Any, int] = {}

    class OpsSeen(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen[func] = seen.get(func, 0) + 1
            return func(*args, **(kwargs or {}))

    with FlopCounterMode(display=False, custom_mapping=attention_formulas(torch)) as counter:
        with OpsSeen():
            run_step_body()
    by_kind = {kind: 0 for kind in OP_KINDS}
    for op, flops in counter.get_flop_counts().get("Global", {}).items():
        by_kind[op_kind(op)] += int(flops)
    registry = getattr(counter, "flop_registry", {})
    uncounted: dict[str, int] = {}
    for func, calls in seen.items():
        packet = getattr(func, "overloadpacket", func)
        if packet in registry or func in registry or not may_compute(func):
            continue
        name = op_name(func)
        uncounted[name] = uncounted.get(name, 0) + calls
    return StepFlops(by_kind, uncounted)


def op_name(func: Any) -> str:
    """``namespace::op`` of an op overload (its overload left out), or its str."""
    name = getattr(func, "name", None)
    text = name() if callable(name) else str(func)
    return text.split(".")[0]


def may_compute(func: Any) -> bool:
    """Whether an op without a formula may still do a step's arithmetic: any op of a namespace other than
    torch's own (a library's kernel, a Triton kernel, a user's custom op), or an aten op named as a matmul,
    a convolution or attention."""
    namespace = getattr(func, "namespace", None) or op_name(func).split("::")[0]
    if namespace in QUIET_NAMESPACES:
        return False
    if namespace not in ("aten", "prims"):
        return True
    words = set(op_name(func).split("::")[-1].split("_"))
    return bool(words & HEAVY_WORDS)


def attention_formulas(torch: Any) -> dict[Any, Any]:
    """FLOP formulas for the attention ops torch's flop counter has none for (``FlopCounterMode``'s
    ``custom_mapping``). In torch 2.14 its registry counts the CUDA kernels (flash, memory-efficient, cuDNN:
    ``_scaled_dot_product_flash_attention`` and the others) but not the CPU's flash attention,
    ``_scaled_dot_product_flash_attention_for_cpu`` and its backward, which a CPU step runs: they counted 0.
    Given the same formulas, with the same argument order (query, key, value; the backward's grad_out
    first), the CPU's count is the GPU's. Ops the registry has already (a later torch) are left to it."""
    try:
        from torch.utils import flop_counter
    except ImportError:
        return {}
    aten = torch.ops.aten

    def forward(query: Any, key: Any, value: Any, *_args: Any, out_shape: Any = None, **_kwargs: Any) -> int:
        return flop_counter.sdpa_flop_count(query, key, value)

    def backward(grad_out: Any, query: Any, key: Any, value: Any, *_args: Any, out_shape: Any = None,
                 **_kwargs: Any) -> int:
        return flop_counter.sdpa_backward_flop_count(grad_out, query, key, value)

    wanted = {
        "_scaled_dot_product_flash_attention_for_cpu": forward,
        "_scaled_dot_product_flash_attention_for_cpu_backward": backward,
    }
    found = {}
    for name, formula in wanted.items():
        op = getattr(aten, name, None)
        if op is None or op in flop_counter.flop_registry or getattr(op, "default", None) in flop_counter.flop_registry:
            continue
        found[op] = formula
    return found
