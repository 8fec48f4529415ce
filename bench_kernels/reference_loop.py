"""The plain DDP training loop ddptop's kernel is compared with: nothing of ddptop's step or timing in it.

Used by ``ddptop doctor`` (``bench_kernels.doctor_probe``) and ``benchmarks/reference_ddp.py``.
"""

from __future__ import annotations

import time
from typing import Any


def plain_step_times(torch: Any, net: Any, optimizer: Any, loss_fn: Any, inputs: Any, targets: Any,
                     device: Any, warmup: int, iters: int) -> list[float]:
    """Each measured step's time: zero_grad, forward, loss, backward, optimizer step and, on a GPU, a
    synchronize, with ``time.perf_counter`` around exactly that; ``warmup`` steps first, not kept."""
    cuda = device.type == "cuda"
    times = []
    for index in range(warmup + iters):
        start = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss_fn(net(inputs), targets).backward()
        optimizer.step()
        if cuda:
            torch.cuda.synchronize(device)
        if index >= warmup:
            times.append(time.perf_counter() - start)
    return times
