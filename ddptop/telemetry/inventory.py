"""Which GPUs this process may use, read from NVML without importing torch.

A missing library, driver or GPU is a normal answer here, returned as ``problem`` text, never raised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from ddptop.errors import DdptopError
from ddptop.protocol.devices import RANK_DEVICES_ENV
from ddptop.telemetry import nvml as nv


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML index (the physical one, before CUDA_VISIBLE_DEVICES renumbering)
    name: str
    uuid: str
    memory_total: int | None
    mig_parent: int | None = None  # a MIG instance: the NVML index of its GPU (``index`` is that GPU's too)

    @property
    def is_mig(self) -> bool:
        return self.mig_parent is not None


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    nvml_version: str | None = None
    problem: str | None = None  # why NVML gave nothing, in words
    all_gpu_count: int = 0  # before CUDA_VISIBLE_DEVICES filtering
    notes: tuple[str, ...] = field(default=())
    fake: bool = False  # GPUs of DDPTOP_FAKE_NVML: shown, never run on

    @property
    def usable_gpus(self) -> tuple[GpuInfo, ...]:
        """The GPUs a sweep can run kernels on."""
        return () if self.fake else self.gpus

    @property
    def usable_problem(self) -> str | None:
        if self.fake:
            return f"the GPUs of {nv.FAKE_ENV} are simulated; kernels run on the CPU"
        return self.problem


def filter_visible(gpus: list[Any], visible: str | None) -> list[Any]:
    """Apply CUDA_VISIBLE_DEVICES (indices, GPU- or MIG- UUID prefixes, comma separated) as CUDA would.

    ``gpus`` are anything with ``index`` and ``uuid`` (MIG instances carry their GPU's index after it); the
    result is in CUDA's order (cuda:0 first). An index names the GPU, or the first MIG instance of a GPU in MIG
    mode.
    """
    if visible is None:
        return list(gpus)
    chosen: list[Any] = []
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            break  # CUDA stops at the first invalid entry; an empty string hides every device
        match = None
        if token.lstrip("-").isdigit():
            index = int(token)
            match = next((g for g in gpus if g.index == index), None)
        else:
            match = next((g for g in gpus if (g.uuid or "").startswith((token, "GPU-" + token))), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return chosen


def devices_for(inventory: Inventory, gpus: tuple[int, ...] | None) -> tuple[tuple[str, ...], bool]:
    """The UUIDs of the devices ranks use (``--gpus`` positions among the usable ones, or all of them), and
    whether each rank must see only its own (a MIG instance); empty when NVML gave no UUIDs."""
    usable = list(inventory.usable_gpus)
    chosen = usable if gpus is None else [usable[p] for p in gpus if 0 <= p < len(usable)]
    if not chosen or not all(gpu.uuid for gpu in chosen):
        return (), False
    return tuple(gpu.uuid for gpu in chosen), any(gpu.is_mig for gpu in chosen)


class LoopbackGpuError(DdptopError):
    """Loopback nodes (all on this machine) would share GPUs."""


def rank_gpu_environment(plan: Any, environ: dict[str, str], node_rank: int = 0, loopback: bool = False,
                         own: tuple[tuple[str, ...], bool] | None = None) -> dict[str, str]:
    """What one node's ranks need in their environment so that their ``cuda:k`` is the GPU ddptop means.

    With the devices' UUIDs from NVML (``plan.rank_devices``, or ``own``: another node's own, read there) the
    ranks are told exactly those, which holds under any parent ``CUDA_VISIBLE_DEVICES``, in containers and on
    nodes of mixed models; MIG instances go one per rank (``ddptop.protocol.devices``). Nodes on loopback
    (a rehearsal on one machine) each get their own slice of the GPUs: NCCL refuses two ranks on one GPU.
    Without NVML, ``--gpus`` counts the GPUs this process sees, in the order of its own
    ``CUDA_VISIBLE_DEVICES`` (a SLURM job without cgroups sees ``4,5,6,7``): the ranks get the parent's entries
    at those positions, never the positions themselves, which would name another job's GPUs.
    ``CUDA_DEVICE_ORDER`` is ``PCI_BUS_ID`` (unless set already), so CUDA numbers GPUs as NVML does on a node
    of mixed models (CUDA's default puts the fastest first)."""
    if plan.device != "cuda":
        return {}
    env = {} if "CUDA_DEVICE_ORDER" in environ else {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}
    devices, per_rank = own if own is not None else (tuple(plan.rank_devices), plan.per_rank_devices)
    per_node = getattr(plan, "nproc_per_node", 0)
    if loopback and per_node and getattr(plan, "nnodes", 1) > 1:
        needed = plan.nnodes * per_node
        if len(devices) < needed:
            raise LoopbackGpuError(
                f"{plan.nnodes} nodes on this machine x {per_node} ranks need {needed} GPUs, one per rank, "
                f"but {len(devices) or 'no'} {'are' if len(devices) != 1 else 'is'} usable here by UUID")
        devices = devices[node_rank * per_node:(node_rank + 1) * per_node]
    if devices and per_rank:
        env[RANK_DEVICES_ENV] = ",".join(devices)
    elif devices:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(devices)
    elif plan.gpus is not None:
        parent = environ.get("CUDA_VISIBLE_DEVICES")
        entries = [t.strip() for t in parent.split(",")] if parent is not None else None
        env["CUDA_VISIBLE_DEVICES"] = ",".join(entries[p] if entries is not None else str(p) for p in plan.gpus)
    return env


def read_inventory(nvml_module: object | None = None) -> Inventory:
    try:
        nvml, fake = nv.load(nvml_module)
        nv.init(nvml)
    except nv.NvmlUnavailable as exc:
        return Inventory(problem=str(exc))
    notes: list[str] = []
    try:
        count = nvml.nvmlDeviceGetCount()
        gpus = []
        for index in range(count):
            # one GPU this process may not use (another job's, cgroup-denied) must not hide the others
            found = _gpu_info(nvml, index)
            if isinstance(found, nv.Unavailable):
                notes.append(f"GPU {index}: not accessible ({found.reason})")
                continue
            gpu, handle = found
            instances = _mig_instances(nvml, index, handle)
            if instances is None:
                gpus.append(gpu)
            elif instances:  # a GPU in MIG mode runs CUDA work only inside its instances
                gpus.extend(instances)
            else:
                notes.append(f"GPU {index}: MIG mode is on but it has no MIG instance, so CUDA cannot use it")
        driver = nv.text(nvml.nvmlSystemGetDriverVersion())
        nvml_version = nv.call(nvml, "nvmlSystemGetNVMLVersion")
        nvml_version = None if isinstance(nvml_version, nv.Unavailable) else nv.text(nvml_version)
    except Exception as exc:  # a GPU lost while listing, a binding mismatch: no GPU, one line
        return Inventory(problem=f"NVML query failed: {nv.reason_of(nvml, exc).reason}", fake=fake)
    finally:
        nv.shutdown(nvml)
    visible = filter_visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    if visible:
        problem = None
    elif gpus:
        problem = "no GPU visible (CUDA_VISIBLE_DEVICES hides them)"
    else:
        problem = "no GPU this process may use" if notes else "NVML sees no GPU"
    return Inventory(
        gpus=tuple(visible),
        driver=driver,
        nvml_version=nvml_version,
        problem=problem,
        all_gpu_count=count,
        notes=tuple(notes),
        fake=fake,
    )


def _gpu_info(nvml: Any, index: int) -> tuple[GpuInfo, Any] | nv.Unavailable:
    """One GPU's identity and handle, or why NVML refused it."""
    handle = nv.call(nvml, "nvmlDeviceGetHandleByIndex", index)
    if isinstance(handle, nv.Unavailable):
        return handle
    name = nv.call(nvml, "nvmlDeviceGetName", handle)
    uuid = nv.call(nvml, "nvmlDeviceGetUUID", handle)
    for answer in (name, uuid):
        if isinstance(answer, nv.Unavailable):
            return answer
    memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", handle)
    return GpuInfo(index=index, name=nv.text(name), uuid=nv.text(uuid),
                   memory_total=None if isinstance(memory, nv.Unavailable) else int(memory.total)), handle


def _mig_instances(nvml: Any, index: int, handle: Any) -> list[GpuInfo] | None:
    """The MIG instances of a GPU in MIG mode, in NVML's order; None when MIG is off or not supported."""
    mode = nv.call(nvml, "nvmlDeviceGetMigMode", handle)  # [current, pending]
    if isinstance(mode, nv.Unavailable) or int(mode[0]) != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
        return None
    most = nv.call(nvml, "nvmlDeviceGetMaxMigDeviceCount", handle)
    instances: list[GpuInfo] = []
    for slot in range(0 if isinstance(most, nv.Unavailable) else int(most)):
        mig = nv.call(nvml, "nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if isinstance(mig, nv.Unavailable):
            continue  # NOT_FOUND: an empty slot
        name, uuid = nv.call(nvml, "nvmlDeviceGetName", mig), nv.call(nvml, "nvmlDeviceGetUUID", mig)
        if isinstance(name, nv.Unavailable) or isinstance(uuid, nv.Unavailable):
            continue
        memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", mig)
        instances.append(GpuInfo(index=index, name=nv.text(name), uuid=nv.text(uuid), mig_parent=index,
                                 memory_total=None if isinstance(memory, nv.Unavailable) else int(memory.total)))
    return instances
