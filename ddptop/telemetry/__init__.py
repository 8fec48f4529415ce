"""Telemetry read by the ddptop process itself (NVML, /sys, psutil). Never imports torch.

``nvml`` is the one door to NVML; ``gpu``, ``host``, ``topology`` and ``inventory`` (the usable GPUs, MIG,
what each rank is told) read the node, ``allocation`` what this process was given (cores, cgroup limits,
SLURM); ``monitor`` samples it on a thread into the ``timeline``; ``validity`` judges a measured window (was
the node quiet?); ``nccl_log`` reads which algorithm and protocol NCCL chose, from its own log;
``gpus_command`` is ``ddptop gpus``; ``fake`` holds the simulated nodes.
"""

__all__ = ["allocation", "fake", "gpu", "gpus_command", "host", "inventory", "monitor", "nccl_log", "nvml",
           "running_peak", "timeline", "topology", "validity"]
