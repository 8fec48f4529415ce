"""Benchmark kernels that run inside torchrun workers.

Only the kernel modules (``bench_kernels.ddp``, ...) import torch; ``bench_kernels.catalog`` is standard
library only so that ddptop can validate a plan without importing torch. Nothing here imports ddptop's
user interface: the one shared module is the wire format, ``ddptop.wire``.
"""
