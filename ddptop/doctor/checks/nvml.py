"""NVML: ddptop's NVML (GPUs, driver), and the GPUs it may not open."""

from __future__ import annotations

import os

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.result import OK, SKIPPED, WARN, Check, listed
from ddptop.telemetry import nvml as nv

NAME = "NVML"


def run(context: DoctorContext) -> Check:
    return check_nvml(context.view)


def check_nvml(view: NvmlView) -> Check:
    if view.unavailable and not view.gpus:
        return Check(NAME, SKIPPED, view.unavailable)
    inventory = view.inventory
    label = f" ({nv.FAKE_LABEL}: simulated node {os.environ.get(nv.FAKE_ENV)})" if view.fake else ""
    data = {"driver": inventory.driver, "nvml_version": inventory.nvml_version, "fake": view.fake,
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "memory_mib": g.memory_mib,
                      "bus_id": g.bus_id} for g in view.gpus],
            "usable": [g.uuid for g in inventory.gpus], "refused": [list(r) for r in view.refused],
            "notes": list(inventory.notes)}
    reasons: dict[str, list[str]] = {}
    for index, reason in view.refused:
        reasons.setdefault(reason, []).append(str(index))
    notes = [f"GPU{'s' if len(found) > 1 else ''} {', '.join(found)} not accessible ({reason})"
             for reason, found in reasons.items()]
    notes += [note for note in inventory.notes if "not accessible" not in note]
    said = f"; {listed(notes)}" if notes else ""
    if not inventory.gpus:
        return Check(NAME, WARN, f"driver {inventory.driver or '?'}{label}: {inventory.problem}{said}", data)
    mig = sum(g.is_mig for g in inventory.gpus)
    count = f"{len(view.gpus)} GPU(s)" + (f" with {mig} MIG instance(s)" if mig else "")
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        count += f", {len(inventory.gpus)} visible"
    return Check(NAME, OK, f"{count}, driver {inventory.driver}{label}{said}", data)
