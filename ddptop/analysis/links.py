"""Bus bandwidth as a share of the link it ran over: NVLink when every pair of the ranks' GPUs is joined by
NVLink (directly or through NVSwitches), PCIe otherwise, as nccl-tests' busbw is read against line rate.

The peak of one GPU is one direction of its links (``telemetry/topology.py``: every active NVLink at its
generation's rate; PCIe at the generation and width the GPU and slot allow), the lowest over the GPUs in the
ring. A share above 100% is possible where the switch reduces in the fabric (NVLink SHARP); it is shown
as measured. On the CPU, or where the GPUs or their links are unknown, there is no peak, said in words.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any


def link_peak(topology: Mapping[str, Any] | None, gpus: Sequence[int], device: str) -> dict[str, Any]:
    """``{"link": "NVLink"|"PCIe", "peak_gbs": float}``, or ``{"link": None, "why": words}``."""
    if device != "cuda":
        return {"link": None, "why": "no link peak: the ranks ran on the CPU"}
    links = (topology or {}).get("links") or {}
    matrix = (topology or {}).get("matrix") or {}
    found = [links[f"GPU{g}"] for g in gpus if links.get(f"GPU{g}") is not None]
    if not gpus or len(found) != len(gpus):
        return {"link": None, "why": "no link peak: the ranks' GPUs or their links are unknown"}
    pairs = [(a, b) for a in gpus for b in gpus if a != b]
    nvlinked = pairs and all(matrix.get(f"GPU{a}", {}).get(f"GPU{b}", "").startswith("NV") for a, b in pairs)
    key, name = ("nvlink_gbs", "NVLink") if nvlinked else ("pcie_gbs", "PCIe")
    peaks = [f.get(key) for f in found]
    if any(p is None for p in peaks):
        return {"link": None, "why": f"no link peak: NVML gave no {name} generation or width"}
    return {"link": name, "peak_gbs": min(peaks)}


def add_link_shares(entries: Iterable[dict[str, Any]], collectives: Iterable[dict[str, Any]],
                    topology: Mapping[str, Any] | None) -> None:
    """Write the peak and the share of it into each DDP entry's ``communication.buckets.achieved`` and each
    collective table (against the GPUs the configurations of that world size and backend ran on)."""
    gpus_of: dict[tuple[int, str], list[int]] = {}
    devices: dict[tuple[int, str], str] = {}
    for entry in entries:
        key = (entry["world_size"], entry["backend"])
        gpus = (entry.get("telemetry") or {}).get("gpus") or []
        gpus_of.setdefault(key, [])
        gpus_of[key] = sorted(set(gpus_of[key]) | set(gpus))
        devices[key] = entry.get("device") or "cpu"
        achieved = ((entry.get("communication") or {}).get("buckets") or {}).get("achieved")
        if achieved and achieved.get("busbw_gbs") is not None:
            _share(achieved, achieved["busbw_gbs"], link_peak(topology, gpus, entry.get("device") or "cpu"))
    for table in collectives:
        key = (table["world_size"], table["backend"])
        if table.get("peak_busbw_gbs") is not None and key in devices:
            _share(table, table["peak_busbw_gbs"], link_peak(topology, gpus_of[key], devices[key]))


def _share(into: dict[str, Any], busbw_gbs: float, peak: Mapping[str, Any]) -> None:
    into["link"] = peak["link"]
    into["link_peak_gbs"] = peak.get("peak_gbs")
    into["link_share"] = busbw_gbs / peak["peak_gbs"] if peak.get("peak_gbs") else None
    if peak["link"] is None:
        into["link_why"] = peak["why"]
