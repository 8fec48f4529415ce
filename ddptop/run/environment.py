"""Facts about the machine a sweep ran on, gathered without importing torch.

torch, CUDA, cuDNN and NCCL versions come from the ranks' hello events (torch lives there); this module adds
what the ddptop process can see itself: host, OS, CPUs, NVML's GPUs and driver, the batch scheduler, and
what this process was given (``allocation``: its cores, its cgroup's limits, its SLURM job;
``ddptop.telemetry.allocation``).
"""

from __future__ import annotations

import os
import platform
import socket
import sys
from dataclasses import asdict

from ddptop import __version__
from ddptop.telemetry import nvml as nv
from ddptop.telemetry.allocation import read_allocation, usable_cpu_count
from ddptop.telemetry.inventory import Inventory

SCHEDULER_VARIABLES = ("SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_NODELIST", "SLURM_JOB_GPUS", "PBS_JOBID")


def _cpu_model() -> str | None:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as handle:
            for line in handle:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or None


def collect(inventory: Inventory) -> dict:
    return {
        "hostname": socket.gethostname(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "python_executable": sys.executable,
        "ddptop": __version__,
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),
        "usable_cpus": usable_cpu_count(),
        "gpus": [asdict(g) for g in inventory.gpus],
        "driver": inventory.driver,
        "nvml": inventory.problem or "ok",
        "gpu_notes": list(inventory.notes),  # GPUs NVML lists that this process may not use, and why
        "nvml_fake": nv.FAKE_LABEL + " " + os.environ.get(nv.FAKE_ENV, "") if inventory.fake else None,
        "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "scheduler": {k: os.environ[k] for k in SCHEDULER_VARIABLES if k in os.environ},
        "allocation": read_allocation(),
    }
