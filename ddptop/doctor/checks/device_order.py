"""CUDA order vs NVML order: cuda:k against NVML's numbering (PCI bus order)."""

from __future__ import annotations

from typing import Any

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.parsing import bare_uuid
from ddptop.doctor.result import OK, SKIPPED, WARN, Check, listed
from ddptop.telemetry import nvml as nv

NAME = "CUDA order vs NVML order"


def run(context: DoctorContext) -> Check:
    if context.probe is None:
        return Check(NAME, SKIPPED, "torch could not be asked")
    return check_device_order(context.probe, context.view)


def check_device_order(probe: dict[str, Any], view: NvmlView) -> Check:
    devices = probe["devices"]
    if not devices:
        return Check(NAME, SKIPPED, "torch sees no CUDA device")
    if view.fake:
        return Check(NAME, SKIPPED, f"NVML is simulated ({nv.FAKE_ENV}): no real order to compare with")
    if not view.gpus:
        return Check(NAME, SKIPPED, f"no NVML to compare with ({view.unavailable or 'no GPU'})")
    if any(d["uuid"] is None for d in devices):
        return Check(NAME, SKIPPED, "this torch does not report device UUIDs")
    index_of = view.index_of_uuid
    order = [index_of.get(bare_uuid(d["uuid"])) for d in devices]
    data = {"cuda_to_nvml": order, "cuda_device_order": probe.get("cuda_device_order"),
            "cuda_visible_devices": probe.get("cuda_visible_devices")}
    unknown = [f"cuda:{d['index']} ({d['uuid']})" for d, i in zip(devices, order) if i is None]
    if unknown:
        return Check(NAME, WARN, f"not in NVML's list: {listed(unknown)}", data)
    mapping = ", ".join(f"cuda:{k}=GPU{i}" for k, i in enumerate(order))
    if order == sorted(order):
        return Check(NAME, OK, f"{len(order)} device(s) in NVML's order ({mapping})", data)
    by_pci = probe.get("cuda_device_order") == "PCI_BUS_ID"
    visible = probe.get("cuda_visible_devices")
    if by_pci and visible:
        return Check(NAME, OK, f"{mapping}: the order CUDA_VISIBLE_DEVICES={visible} asks for", data)
    if by_pci:
        return Check(NAME, WARN, f"{mapping} although CUDA_DEVICE_ORDER=PCI_BUS_ID", data)
    return Check(NAME, WARN, f"{mapping}: CUDA numbers the GPUs fastest first, NVML and nvidia-smi by PCI bus "
                             "(ddptop sets CUDA_DEVICE_ORDER=PCI_BUS_ID for its ranks; set it for your own "
                             "scripts)", data)
