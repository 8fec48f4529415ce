"""The DDP communication hooks whose result is the average of the ranks' gradients (torch's
``ddp_comm_hooks.default_hooks``, by the name DDP's logging gives them): under any other (PowerSGD's low-rank
approximation, post-local SGD's local steps) the gradient after the allreduce is not the global batch's, and
the gradient noise scale is not measured (``bench_kernels.probe_noise``, ``report.scaling_tables``)."""

AVERAGING_HOOKS = frozenset({"allreduce_hook", "fp16_compress_hook", "bf16_compress_hook",
                             "BuiltinCommHookType.ALLREDUCE", "BuiltinCommHookType.FP16_COMPRESS"})
