"""Which GPUs this process may use, read from NVML without importing torch.

A missing library, driver or GPU is a normal answer here, returned as ``problem`` text, never raised.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuInfo:
    index: int  # NVML index (the physical one, before CUDA_VISIBLE_DEVICES renumbering)
    name: str
    uuid: str
    memory_total: int | None


@dataclass(frozen=True)
class Inventory:
    gpus: tuple[GpuInfo, ...] = ()
    driver: str | None = None
    nvml_version: str | None = None
    problem: str | None = None  # why NVML gave nothing, in words
    all_gpu_count: int = 0  # before CUDA_VISIBLE_DEVICES filtering
    notes: tuple[str, ...] = field(default=())


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _filter_visible(gpus: list[GpuInfo], visible: str | None) -> list[GpuInfo]:
    """Apply CUDA_VISIBLE_DEVICES (indices or UUID prefixes, comma separated) as CUDA would."""
    if visible is None:
        return gpus
    chosen: list[GpuInfo] = []
    for token in (t.strip() for t in visible.split(",")):
        if not token:
            break  # CUDA stops at the first invalid entry; an empty string hides every device
        match: GpuInfo | None = None
        if token.lstrip("-").isdigit():
            index = int(token)
            match = next((g for g in gpus if g.index == index), None)
        else:
            match = next((g for g in gpus if g.uuid.startswith(token) or g.uuid.startswith("GPU-" + token)), None)
        if match is None or match in chosen:
            break
        chosen.append(match)
    return chosen


def read_inventory(nvml_module: object | None = None) -> Inventory:
    try:
        nvml = nvml_module
        if nvml is None:
            import pynvml as nvml  # nvidia-ml-py
    except ImportError:
        return Inventory(problem="NVML bindings (nvidia-ml-py) are not installed")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded, ...
        return Inventory(problem=f"NVML unavailable: {exc} (no NVIDIA driver on this machine?)")
    try:
        count = nvml.nvmlDeviceGetCount()
        gpus = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                memory_total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            except Exception:
                memory_total = None
            gpus.append(
                GpuInfo(
                    index=index,
                    name=_text(nvml.nvmlDeviceGetName(handle)),
                    uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
                    memory_total=memory_total,
                )
            )
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        try:
            nvml_version = _text(nvml.nvmlSystemGetNVMLVersion())
        except Exception:
            nvml_version = None
    except Exception as exc:
        return Inventory(problem=f"NVML query failed: {exc}")
    finally:
        try:
            nvml.nvmlShutdown()
        except Exception:
            pass
    visible = _filter_visible(gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    problem = None if visible else ("no GPU visible (CUDA_VISIBLE_DEVICES hides them)" if gpus else "NVML sees no GPU")
    return Inventory(
        gpus=tuple(visible), driver=driver, nvml_version=nvml_version, problem=problem, all_gpu_count=len(gpus)
    )
