"""P2P access: peer access between CUDA devices, against the NVLinks NVML reports."""

from __future__ import annotations

from typing import Any

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.parsing import bare_uuid
from ddptop.doctor.result import FAIL, OK, SKIPPED, WARN, Check, listed
from ddptop.telemetry.topology import read_topology

NAME = "P2P access"


def run(context: DoctorContext) -> Check:
    if context.probe is None:
        return Check(NAME, SKIPPED, "torch could not be asked")
    return check_peer_access(context.probe, context.view)


def check_peer_access(probe: dict[str, Any], view: NvmlView, links: dict[str, dict[str, str]] | None = None) -> Check:
    """Peer access between CUDA devices; ``links`` is ddptop's topology matrix (read here when not given),
    whose GPUs are NVML's: each CUDA device is found there by its UUID."""
    if probe.get("peer_access_error"):
        return Check(NAME, FAIL, f"torch.cuda.can_device_access_peer failed: {probe['peer_access_error']}")
    matrix = probe.get("peer_access") or []
    if not matrix:
        return Check(NAME, SKIPPED, "fewer than two CUDA devices")
    if links is None:
        links = read_topology().matrix
    index_of = view.index_of_uuid
    nvml_of = [index_of.get(bare_uuid(d["uuid"])) for d in probe["devices"]]

    def link(a: int, b: int) -> str:
        if nvml_of[a] is None or nvml_of[b] is None:
            return "?"
        return links.get(f"GPU{nvml_of[a]}", {}).get(f"GPU{nvml_of[b]}", "?")

    off = [(a, b) for a, row in enumerate(matrix) for b, ok in enumerate(row) if ok is False]
    data = {"peer_access": matrix, "off": [[a, b, link(a, b)] for a, b in off]}
    nvlinked_off = [f"cuda:{a}-cuda:{b} ({link(a, b)})" for a, b in off if link(a, b).startswith("NV")]
    if nvlinked_off:
        return Check(NAME, WARN, "no peer access between GPUs NVML reports NVLinked: " + listed(nvlinked_off)
                     + " (NCCL falls back to slower paths; a container or driver setting?)", data)
    if off:
        return Check(NAME, OK, f"{len(matrix)} devices; no peer access for {len(off)} ordered pair(s), none of "
                               "them NVLinked", data)
    return Check(NAME, OK, f"every pair of {len(matrix)} devices has peer access", data)
