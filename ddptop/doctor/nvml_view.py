"""What NVML says, read through ddptop's own door (``ddptop.telemetry``), for the checks to compare with."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ddptop.doctor.parsing import bare_uuid
from ddptop.telemetry import nvml as nv
from ddptop.telemetry.inventory import read_inventory
from ddptop.telemetry.topology import sysfs_bdf


@dataclass(frozen=True)
class NvmlGpu:
    index: int  # NVML's index: PCI bus order, before CUDA_VISIBLE_DEVICES
    name: str
    uuid: str
    memory_mib: float | None
    bus_id: str | None  # sysfs form, 0000:06:00.0


@dataclass
class NvmlView:
    """Every GPU NVML lists (before CUDA_VISIBLE_DEVICES), the inventory a sweep would use, or why NVML cannot
    be read."""

    unavailable: str | None = None
    gpus: list[NvmlGpu] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (NVML index, why NVML would not open it)
    inventory: Any = None
    fake: bool = False

    @property
    def index_of_uuid(self) -> dict[str, int]:
        found = {bare_uuid(g.uuid): g.index for g in self.gpus}
        for gpu in getattr(self.inventory, "gpus", ()):  # MIG instances: their GPU's index
            found.setdefault(bare_uuid(gpu.uuid), gpu.index)
        return found


def _plain_name(name: str) -> str:
    return name.removesuffix(f" ({nv.FAKE_LABEL})").strip()


def read_nvml() -> NvmlView:
    try:
        nvml, fake = nv.load()
        nv.init(nvml)
    except nv.NvmlUnavailable as exc:
        return NvmlView(unavailable=str(exc))
    view = NvmlView(fake=fake)
    try:
        count = nv.call(nvml, "nvmlDeviceGetCount")
        for index in range(0 if isinstance(count, nv.Unavailable) else int(count)):
            handle = nv.call(nvml, "nvmlDeviceGetHandleByIndex", index)
            if isinstance(handle, nv.Unavailable):
                view.refused.append((index, handle.reason))
                continue
            name, uuid = nv.call(nvml, "nvmlDeviceGetName", handle), nv.call(nvml, "nvmlDeviceGetUUID", handle)
            if isinstance(name, nv.Unavailable) or isinstance(uuid, nv.Unavailable):
                view.refused.append((index, (name if isinstance(name, nv.Unavailable) else uuid).reason))
                continue
            memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", handle)
            pci = nv.call(nvml, "nvmlDeviceGetPciInfo", handle)
            view.gpus.append(NvmlGpu(
                index, _plain_name(nv.text(name)), nv.text(uuid),
                None if isinstance(memory, nv.Unavailable) else int(memory.total) / 2**20,
                None if isinstance(pci, nv.Unavailable) else sysfs_bdf(nv.text(pci.busId))))
        if isinstance(count, nv.Unavailable):
            view.unavailable = f"NVML could not count the GPUs: {count.reason}"
    finally:
        nv.shutdown(nvml)
    view.inventory = read_inventory()
    return view
