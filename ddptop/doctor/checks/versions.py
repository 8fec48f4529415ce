"""torch / CUDA / NCCL: versions; torchvision importable; a CUDA torch where NVML sees GPUs."""

from __future__ import annotations

from typing import Any

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.result import FAIL, OK, WARN, Check

NAME = "torch / CUDA / NCCL"


def run(context: DoctorContext) -> Check:
    if context.probe is None:
        return Check(NAME, FAIL, context.probe_problem)
    return check_versions(context.probe, context.view)


def check_versions(probe: dict[str, Any], view: NvmlView) -> Check:
    v = probe["versions"]
    said = (f"torch {v['torch']}, " + (f"HIP {v['hip']}" if v.get("hip") else f"CUDA {v.get('cuda') or '-'}")
            + f", NCCL {v.get('nccl') or '-'}, torchvision {v.get('torchvision') or '-'}")
    data = {"versions": v, "cuda_problem": probe.get("cuda_problem")}
    if not v.get("distributed"):
        return Check(NAME, FAIL, f"{said}: this torch has no torch.distributed", data)
    if v.get("torchvision") is None:
        return Check(NAME, FAIL, f"{said}: torchvision does not import ({v.get('torchvision_error')})", data)
    usable = [] if view.fake or view.inventory is None else list(view.inventory.gpus)
    if usable and not (v.get("cuda") or v.get("hip")):
        return Check(NAME, FAIL, f"{said}: NVML sees {len(usable)} GPU(s) but this torch is a CPU-only build", data)
    if usable and not probe["devices"]:
        why = probe.get("cuda_problem") or "torch.cuda.is_available() is False (driver older than this CUDA?)"
        return Check(NAME, FAIL, f"{said}: NVML sees {len(usable)} GPU(s) but torch sees none: {why}", data)
    if probe["devices"] and not v.get("nccl_available"):
        return Check(NAME, WARN, f"{said}: GPUs but no NCCL in this torch (gloo only)", data)
    return Check(NAME, OK, said, data)
