"""FLOPs of one training step, and the matmul ceiling a device actually reaches.

FLOPs per step are counted once per configuration by ``torch.utils.flop_counter.FlopCounterMode`` on one
forward and backward of the rank's own batch, before the warm-up and outside every timed step (the count
is analytic, per aten op: convolutions and matmuls, not measured). The optimizer step's element-wise work
is not counted, as model FLOPs utilisation conventionally leaves it out.

The ceiling follows the maximum-achievable-matmul-FLOPs method: a few square matmuls on the device in the
step's dtype, each timed over enough repetitions, the best TFLOP/s reached. It is what this device gives a
dense matmul here (clocks, power limits and all), so a figure against it says how much of the reachable
peak a step used; on the CPU it is the only peak there is.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

# square matmul sizes tried: the larger ones reach a GPU's ceiling; the CPU's is reached by the smaller ones
CEILING_SIZES = {"cuda": (2048, 4096, 8192), "cpu": (256, 512, 1024)}
CEILING_SECONDS = {"cuda": 0.5, "cpu": 0.6}  # per size, after a warm-up call


def compute_dtype(torch: Any, device: Any, amp: str | None) -> str:
    """What the step's matmuls and convolutions run in: the autocast dtype, else fp32, or tf32 on a GPU of
    compute capability 8.0 or later where torch lets cuDNN's convolutions use TF32 (its default)."""
    if amp:
        return amp
    if device.type == "cuda":
        major = torch.cuda.get_device_properties(device).major
        if major >= 8 and (torch.backends.cudnn.allow_tf32 or torch.backends.cuda.matmul.allow_tf32):
            return "tf32"
    return "fp32"


def count_step_flops(torch: Any, run_step_body: Any) -> int | None:
    """FLOPs of ``run_step_body()`` (a forward and backward), counted by FlopCounterMode; None without it."""
    try:
        from torch.utils.flop_counter import FlopCounterMode
    except ImportError:
        return None
    with FlopCounterMode(display=False) as counter:
        run_step_body()
    return int(counter.get_total_flops())


TORCH_DTYPES = {"fp32": "float32", "tf32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def matmul_ceiling(torch: Any, device: Any, dtype: str) -> dict[str, Any]:
    """The best FLOP/s a square matmul reaches on ``device`` in ``dtype`` over ``CEILING_SIZES``."""
    kind = "cuda" if device.type == "cuda" else "cpu"
    torch_dtype = getattr(torch, TORCH_DTYPES[dtype])
    synchronize = (lambda: torch.cuda.synchronize(device)) if kind == "cuda" else (lambda: None)
    tf32 = contextlib.nullcontext()
    if kind == "cuda":  # tf32 only when the step's dtype is tf32; plain fp32 otherwise
        tf32 = _allow_tf32(torch, dtype == "tf32")
    best, sizes = 0.0, []
    with tf32:
        for n in CEILING_SIZES[kind]:
            a = torch.randn(n, n, device=device, dtype=torch_dtype)
            b = torch.randn(n, n, device=device, dtype=torch_dtype)
            torch.mm(a, b)
            synchronize()
            reps, start = 0, time.perf_counter()
            while True:
                torch.mm(a, b)
                reps += 1
                if reps % 4 == 0:
                    synchronize()
                    if time.perf_counter() - start >= CEILING_SECONDS[kind]:
                        break
            elapsed = time.perf_counter() - start
            rate = 2.0 * n ** 3 * reps / elapsed
            sizes.append({"n": n, "flops_per_s": rate})
            best = max(best, rate)
            del a, b
    return {"dtype": dtype, "flops_per_s": best, "sizes": sizes, "method": "best square matmul"}


@contextlib.contextmanager
def _allow_tf32(torch: Any, allowed: bool) -> Any:
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
