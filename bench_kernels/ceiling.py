"""The matmul ceiling: the best FLOP/s a dense matmul reaches on this device, in each dtype a launch's steps run in.

The ceiling follows the maximum-achievable-matmul-FLOPs method: a few square matmuls on the device in the
step's dtype, each timed over enough repetitions, the best TFLOP/s reached. It is what this device gives a
dense matmul here (clocks, power limits and all), so a figure against it says how much of the reachable
peak a step used; on the CPU it is the only peak there is. Rank 0 measures it in the launch ddptop's sweep
chooses (``LaunchSpec.measure_ceiling``), after the launch's last measured step; it says each dtype's in a
``ceiling`` event.
"""

from __future__ import annotations

import contextlib
import platform
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench_kernels.flops import op_dtypes
from ddptop.protocol.launchspec import RunConfig

# square matmul sizes tried: the larger ones reach a GPU's ceiling; the CPU's is reached by the smaller ones
CEILING_SIZES = {"cuda": (2048, 4096, 8192), "cpu": (256, 512, 1024)}
# per size, after a warm-up call. Every sweep's first launch waits for it; on a CPU core the best of the three
# sizes spread about as much over 0.15 s a size as over 0.6 s (eight repeats, twice: CV 1.9-2.7% against 0.8-2.2%)
CEILING_SECONDS = {"cuda": 0.5, "cpu": 0.15}


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


def matmul_ceilings(torch: Any, device: Any, configs: Sequence[RunConfig]) -> list[dict[str, Any]]:
    """The best matmul FLOP/s this device reaches in each dtype any of ``configs`` runs in (convolutions and
    matmuls may differ: ``bench_kernels.flops.op_dtypes``; a variant's autocast counts, as ``ddptop tune``'s
    amp_bf16 beside DDP in fp32): the fields of each ``ceiling`` event. A dtype that cannot be measured (a
    small GPU out of memory) is left out with a line in the rank's log: only the "of measured ceiling"
    figures are lost, never the launch."""
    cuda = device.type == "cuda"
    name = torch.cuda.get_device_name(device) if cuda else platform.processor() or "cpu"
    amps = {cfg.amp for cfg in configs} or {None}
    dtypes = {dtype for amp in amps for dtype in op_dtypes(torch, device, amp).values()}
    found = []
    for dtype in sorted(dtypes):
        try:
            ceiling = matmul_ceiling(torch, device, dtype)
        except Exception as exc:  # noqa: BLE001 - see above
            print(f"bench_kernels.ddp: matmul ceiling in {dtype} not measured: {type(exc).__name__}: {exc}",
                  file=sys.stderr)
            if cuda:
                torch.cuda.empty_cache()
            continue
        found.append({"device_name": name, "threads": torch.get_num_threads(), **ceiling})
    return found


@contextlib.contextmanager
def _allow_tf32(torch: Any, allowed: bool) -> Any:
    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = allowed
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before
