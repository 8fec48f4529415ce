"""Benchmark kernels that run inside torchrun workers.

``bench_kernels.ddp`` is the DDP step benchmark's entry point (its docstring maps the modules it runs:
training, timing, comm_probe, memory_cap, ...); ``bench_kernels.collectives`` the collective bandwidth benchmark.
torch is imported only when a kernel runs, never at import: ``catalog``, ``faults`` and ``collectives``
are imported by ddptop to validate a plan without torch. Nothing here imports ddptop's user interface: of
ddptop they import only ``ddptop.protocol`` (the wire format, the launch spec, the run directory's names),
which is standard library only.
"""
