"""Benchmark kernels that run inside torchrun workers.

Only the kernel modules (``bench_kernels.ddp``, ...) import torch; ``bench_kernels.catalog`` is standard
library only so that ddptop can validate a plan without importing torch. Nothing here imports ddptop's
user interface: of ddptop they import only ``ddptop.protocol`` (the wire format, the launch spec, the run
directory's names), which is standard library only.
"""
