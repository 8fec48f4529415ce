"""What the largest measured world size would do on 2x and 4x as many nodes: a model, never a measurement.

Method (weak scaling: the batch per rank stays as measured):
- compute per step: the largest measured N's no_sync step time (its backward without the allreduce), which
  does not change with more nodes;
- allreduce per step across N' = k x N ranks on k nodes: a ring moves 2(N'-1)/N' x the gradient bytes
  through every link of the ring; the slowest link is the node's network link (``--internode-gbps``, GB/s
  per node, default 25: a 200 Gb/s NIC) or the measured bus bandwidth inside the node, whichever is lower;
- overlap: the share of the allreduce that stayed exposed at the measured N (exposed communication over the
  time any gradient bucket's allreduce was in flight, from the comm hook) stays the same; where the hook
  did not time buckets, nothing overlaps (the pessimistic end).
Projected step = compute + exposed share x projected allreduce; speedup = N' x (t(reference) / step) and
efficiency = speedup / N', against the table's reference N as every row is. The compute time's 95%
interval gives the step's range; the speedup's range puts the step's ends against the reference time's
opposite ends (wider than a joint interval would be). The assumptions' own error is in neither, and is said
beside the figures.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ddptop.records import MODEL, paired

DEFAULT_INTERNODE_GBPS = 25.0  # GB/s per node: one 200 Gb/s NIC (HDR InfiniBand, 200 GbE)
FACTORS = (2, 4)


def project(table: Mapping[str, Any], entries_by_id: Mapping[str, Mapping[str, Any]],
            internode_gbps: float = DEFAULT_INTERNODE_GBPS) -> dict[str, Any] | None:
    """The projection under one scaling table, or None when its figures cannot support one (with no row
    above N=1, no compute/communication split, or strong scaling)."""
    rows: Sequence[Mapping[str, Any]] = table.get("rows") or []
    if table.get("scaling") != "weak" or len(rows) < 2:
        return None
    last, reference = rows[-1], rows[0]
    entry = entries_by_id.get(last["config_id"]) or {}
    comm = entry.get("communication") or {}
    compute, grad_bytes = comm.get("compute_s"), entry.get("grad_bytes")
    n = int(last["world_size"])
    if not compute or not grad_bytes or n < 2 or not reference.get("sec_iter"):
        return None
    buckets = comm.get("buckets") or {}
    in_flight, exposed = buckets.get("in_flight_s"), comm.get("exposed_comm_s")
    exposed_share = min(max(exposed / in_flight, 0.0), 1.0) if in_flight and exposed is not None else 1.0
    intra = ((buckets.get("achieved") or {}).get("busbw_gbs")
             or (in_flight and 2 * (n - 1) / n * grad_bytes / in_flight / 1e9) or None)
    compute_range = comm.get("compute_s_ci")
    reference_range = reference.get("sec_iter_ci") or [reference["sec_iter"]] * 2
    points = []
    for factor in FACTORS:
        ranks = n * factor
        link = min(internode_gbps, intra) if intra else internode_gbps
        allreduce_s = 2 * (ranks - 1) / ranks * grad_bytes / (link * 1e9)
        step = compute + exposed_share * allreduce_s
        speedup = ranks * reference["sec_iter"] / step
        step_range = speedup_range = efficiency_range = None
        if compute_range:  # the compute time's interval carried through (where the no_sync steps gave one)
            step_range = [c + exposed_share * allreduce_s for c in compute_range]
            speedup_range = [ranks * reference_range[0] / step_range[1], ranks * reference_range[1] / step_range[0]]
            efficiency_range = [v / ranks for v in speedup_range]
        points.append({
            "world_size": ranks, "nodes": factor, "sec_iter": paired(step, step_range, MODEL),
            "allreduce_s": allreduce_s, "speedup": paired(speedup, speedup_range, MODEL),
            "efficiency": paired(speedup / ranks, efficiency_range, MODEL),
            "link_gbps": link, "link": "inter-node" if not intra or internode_gbps <= intra else "intra-node",
        })
    return {
        "from_world_size": n,
        "internode_gbps": internode_gbps,
        "intra_busbw_gbs": intra,
        "exposed_share": exposed_share,
        "overlap_measured": bool(in_flight),
        "points": points,
        "assumptions": (
            f"a model, not a measurement: {n} ranks per node as measured, ring allreduce at the lower of "
            f"{internode_gbps:g} GB/s per node and "
            + (f"the {intra:.3g} GB/s bus bandwidth measured in the node" if intra else "no measured in-node figure")
            + f", {100 * exposed_share:.0f}% of it exposed as at N={n}"
            + ("" if in_flight else " (no bucket timing: no overlap assumed)")
        ),
    }
