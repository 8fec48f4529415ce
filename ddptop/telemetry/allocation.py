"""What this process may use: its CPUs, the memory and CPU limits of its cgroup, the GPUs it is shown and the
SLURM job it runs in. Standard library and psutil only (no torch): read once when a run starts
(``ddptop.run.environment.collect``) and saved as the environment's ``allocation``; the plan's thread counts
are drawn from ``usable_cpu_count``.

Nothing here raises on a missing or unreadable file: a limit that cannot be read is not known (None).

- cores: the CPUs this process may run on (``sched_getaffinity``: a SLURM job's or a container's cpuset).
- cpu_quota_cores: a CPU time quota in cores (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
  ``cpu.cfs_period_us``), the way Kubernetes and ``docker --cpus`` limit CPUs without a cpuset.
- memory_limit_bytes: the cgroup's memory limit (v2 ``memory.max``, v1 ``memory.limit_in_bytes``), the
  smallest of this process's cgroup and every cgroup above it: a limit set on a parent holds for its children.
- slurm: the SLURM variables that say what the job was given (``sbatch``'s output environment variables).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from typing import Any, Callable

from ddptop.protocol.kernel_files import read_kernel_file

V1_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as a page-rounded 2**63 - 1

# variable -> key in ``slurm``; the memory variables are MiB (sbatch's --mem and --mem-per-cpu units)
SLURM_VARIABLES = {
    "SLURM_JOB_ID": "job_id",
    "SLURM_JOB_NUM_NODES": "job_num_nodes",
    "SLURM_NTASKS": "ntasks",
    "SLURM_CPUS_ON_NODE": "cpus_on_node",
    "SLURM_CPUS_PER_TASK": "cpus_per_task",
    "SLURM_MEM_PER_NODE": "mem_per_node_mib",
    "SLURM_MEM_PER_CPU": "mem_per_cpu_mib",
    "SLURM_GPUS_ON_NODE": "gpus_on_node",
    "SLURM_GPUS_PER_NODE": "gpus_per_node",
    "SLURM_JOB_GPUS": "job_gpus",
}


def read_allocation(environ: Mapping[str, str] | None = None, proc_root: str = "/") -> dict[str, Any]:
    """What this process was given, as JSON. ``environ``: the environment to read (this process's by
    default); ``proc_root``: where ``/proc`` and ``/sys`` are found (a test's fake tree)."""
    environ = os.environ if environ is None else environ
    cores = _affinity()
    v2, v1 = cgroup_paths(proc_root)
    memory, memory_source = memory_limit(proc_root, v2, v1)
    quota, quota_source = cpu_quota(proc_root, v2, v1)
    return {
        "cores": cores,
        "cores_count": len(cores),
        "cpu_quota_cores": quota,
        "cpu_quota_source": quota_source,
        "memory_limit_bytes": memory,
        "memory_limit_source": memory_source,
        "memory_total_bytes": _memory_total(),
        "gpus_visible": environ.get("CUDA_VISIBLE_DEVICES"),
        "slurm": slurm_allocation(environ),
    }


def _affinity() -> list[int]:
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return list(range(os.cpu_count() or 1))


def usable_cpu_count(proc_root: str = "/") -> int:
    """The cores ddptop may use: its affinity (a SLURM job's or a container's cpuset), and no more than its
    cgroup's CPU time quota allows (``docker --cpus``, a Kubernetes limit: a quota of 2.5 cores is 2), so the
    ranks' threads never outnumber the CPU time the job has."""
    cores = len(_affinity())
    quota, _ = cpu_quota(proc_root)
    return min(cores, max(1, int(quota))) if quota is not None else cores


def _memory_total() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except Exception:  # psutil missing or unable to read the machine: not known
        return None


# --- cgroups --------------------------------------------------------------------------------------------

def cgroup_paths(proc_root: str = "/") -> tuple[str | None, dict[str, str]]:
    """This process's cgroup: its cgroup v2 path (the ``0::`` line; None without one) and its cgroup v1
    path per controller (``memory``, ``cpu``...), from ``/proc/self/cgroup``."""
    text = read_kernel_file(_under(proc_root, "/proc/self/cgroup"))
    v2: str | None = None
    v1: dict[str, str] = {}
    for line in (text or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            v2 = path
        else:
            for controller in controllers.split(","):
                if controller:
                    v1[controller] = path
    return v2, v1


def memory_limit(proc_root: str = "/", v2: str | None = None, v1: dict[str, str] | None = None,
                 ) -> tuple[int | None, str | None]:
    """The smallest memory limit of this process's cgroup and those above it, and the file that set it.

    A memory controller in cgroup v1 is the one that limits (a hybrid system has a v2 line as well, whose
    hierarchy then has no memory controller); else cgroup v2. (None, None) where no limit is set or none
    can be read."""
    if v2 is None and v1 is None:
        v2, v1 = cgroup_paths(proc_root)
    if v1 and "memory" in v1:
        return _smallest(proc_root, "/sys/fs/cgroup/memory", v1["memory"], "memory.limit_in_bytes", _v1_bytes)
    if v2 is not None:
        return _smallest(proc_root, "/sys/fs/cgroup", v2, "memory.max", _v2_bytes)
    return None, None


def cpu_quota(proc_root: str = "/", v2: str | None = None, v1: dict[str, str] | None = None,
              ) -> tuple[float | None, str | None]:
    """The smallest CPU time quota of this process's cgroup and those above it, in cores, and the file
    that set it; (None, None) where none is set or none can be read."""
    if v2 is None and v1 is None:
        v2, v1 = cgroup_paths(proc_root)
    if v1 and "cpu" in v1:
        # mounted as cpu (often a link to cpu,cpuacct where the two controllers share a hierarchy)
        base = "/sys/fs/cgroup/cpu" if _exists(proc_root, "/sys/fs/cgroup/cpu") else "/sys/fs/cgroup/cpu,cpuacct"

        def v1_quota(text: str, folder: str) -> float | None:
            period = _integer(read_kernel_file(_under(proc_root, posixpath.join(folder, "cpu.cfs_period_us"))))
            quota = _integer(text)
            return quota / period if quota is not None and quota > 0 and period else None
        return _smallest(proc_root, base, v1["cpu"], "cpu.cfs_quota_us", v1_quota)
    if v2 is not None:
        return _smallest(proc_root, "/sys/fs/cgroup", v2, "cpu.max", _v2_cores)
    return None, None


def _smallest(proc_root: str, base: str, path: str, name: str,
              parse: Callable[[str, str], Any]) -> tuple[Any, str | None]:
    """The smallest value of file ``name`` in the cgroup at ``path`` and each cgroup above it, up to the
    hierarchy's root ``base``, and the path of the file it came from. ``..`` and ``.`` in ``path`` (a cgroup
    namespace's view) are dropped: nothing outside ``base`` is read."""
    parts = [p for p in path.split("/") if p not in ("", ".", "..")]
    best: tuple[Any, str | None] = (None, None)
    for depth in range(len(parts), -1, -1):
        folder = posixpath.join(base, *parts[:depth])
        file = posixpath.join(folder, name)
        text = read_kernel_file(_under(proc_root, file))
        value = parse(text, folder) if text is not None else None
        if value is not None and (best[0] is None or value < best[0]):
            best = (value, file)
    return best


def _v2_bytes(text: str, _folder: str) -> int | None:
    return None if text.strip() == "max" else _integer(text)


def _v1_bytes(text: str, _folder: str) -> int | None:
    value = _integer(text)
    return None if value is None or value >= V1_UNLIMITED else value


def _v2_cores(text: str, _folder: str) -> float | None:
    """``cpu.max``: "<quota> <period>" in microseconds, or "max <period>" for no quota."""
    fields = text.split()
    if not fields or fields[0] == "max":
        return None
    quota = _integer(fields[0])
    period = _integer(fields[1]) if len(fields) > 1 else 100_000
    return quota / period if quota is not None and quota > 0 and period else None


def _under(proc_root: str, path: str) -> str:
    """Where ``path`` (/proc/..., /sys/...) is for a tree rooted at ``proc_root``."""
    return os.path.join(proc_root, path.lstrip("/"))


def _exists(proc_root: str, path: str) -> bool:
    return os.path.isdir(_under(proc_root, path))


def _integer(text: str | None) -> int | None:
    try:
        return int(text.strip()) if text is not None else None
    except ValueError:
        return None


# --- SLURM ------------------------------------------------------------------------------------------------

def slurm_allocation(environ: Mapping[str, str]) -> dict[str, Any]:
    """The SLURM variables present, as numbers where they are whole numbers; {} outside a SLURM job.

    ``gpus_per_node`` (``--gpus-per-node=[type:]count``, possibly several: "a100:2,v100:1") is the count;
    the text as given is kept as ``gpus_per_node_spec`` where it is not a plain number. ``job_gpus`` (the
    GPU ids, "0,1") is kept as text: a single id is not a count."""
    found: dict[str, Any] = {}
    for variable, key in SLURM_VARIABLES.items():
        value = environ.get(variable)
        if value is None or value.strip() == "":
            continue
        value = value.strip()
        if key == "job_gpus":
            found[key] = value
        elif key == "gpus_per_node":
            count = _gpu_count(value)
            found[key] = count if count is not None else value
            if _integer(value) is None:
                found["gpus_per_node_spec"] = value
        else:
            number = _integer(value)
            found[key] = number if number is not None else value
    return found


def _gpu_count(spec: str) -> int | None:
    """The GPUs of ``[type:]count[,[type:]count...]``; None where a part has no count."""
    total = 0
    for part in spec.split(","):
        count = _integer(part.rsplit(":", 1)[-1])
        if count is None:
            return None
        total += count
    return total
