"""How the ranks of one launch are bound to CPUs: the launch spec's ``rank_cores``, ``binding`` and
``numa_binding`` fields, decided on the node that writes launch.json.

CPU launches: each local rank gets a disjoint set of ``threads`` CPUs (``ddptop.protocol.affinity``), applied
by the rank itself. GPU launches: torchrun's ``--numa-binding=node`` puts each rank on the CPUs of its GPU's
NUMA node (torch/numa/binding.py: the agent wraps each worker in ``numactl --physcpubind``; the ranks sharing
a NUMA node share its CPUs). That path needs a GPU, NVML's PCI view and numactl; it has not been run here.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from typing import Any

from ddptop.protocol import affinity

NUMA_MODE = "node"  # torch's AffinityMode.NODE: its docs' "if in doubt" choice; "exclusive" raises (and ends
# the launch) on a node with fewer physical cores than GPUs, "node" only where numactl or the GPU is missing


@functools.lru_cache(maxsize=1)
def torchrun_has_numa_binding() -> bool:
    """Whether the installed torch's torchrun takes ``--numa-binding`` (torch/numa/binding.py), found without
    importing torch: the ddptop process never pays for it."""
    try:
        found = importlib.util.find_spec("torch")
    except (ImportError, ValueError):
        return False
    places = list(found.submodule_search_locations or []) if found else []
    return any(os.path.exists(os.path.join(place, "numa", "binding.py")) for place in places)


def allowed_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return set(range(os.cpu_count() or 1))


def launch_binding(plan: Any, nproc_per_node: int, threads: int, device: str = "") -> dict[str, Any]:
    """The launch spec's binding fields for one launch of ``nproc_per_node`` local ranks on ``device`` (the
    plan's where not given)."""
    if not getattr(plan, "bind_cores", True):
        return {"binding": affinity.OFF}
    if (device or plan.device) == "cuda":
        if plan.per_rank_devices:  # a rank's cuda:0 is its own MIG instance, not the agent's device <local rank>
            return {"binding": "not bound: each rank sees only its own MIG device"}
        if not torchrun_has_numa_binding():
            return {"binding": "not bound: this torch's torchrun has no --numa-binding"}
        return {"numa_binding": NUMA_MODE}  # the launcher checks for numactl on its node; the rank says what it got
    available = allowed_cpus()
    found = affinity.assign_cores(available, nproc_per_node, threads or 1, affinity.cpu_places(available))
    return {"rank_cores": found.cores, "binding": found.how}
