"""Compute vs communication per configuration, and the collective benchmark's bandwidth tables.

Three measurements of the same thing, kept side by side because each misleads in its own way:
- exposed communication = p50 step time - p50 step time inside ``no_sync()`` (what synchronisation adds to
  a step, after whatever DDP overlapped with the backward pass);
- DDP's own averages from ``_get_ddp_logging_data()`` (forward, backward compute, backward communication and
  their overlap, sampled by DDP on some iterations);
- the comm hook's bucket timings: the time any bucket's allreduce was in flight per step, and the bandwidth
  that implies for the gradient bytes reduced.
The estimate from the single-device time (t(N) minus t1 scaled to this rank's work) is added by the scaling
tables (``ddptop.analysis.scaling``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

from ddptop.analysis import formulas, stats
from ddptop.protocol.bandwidth import busbw_factor


def _median_of(values: list[float]) -> float | None:
    return stats.median(values) if values else None


def config_communication(state: Any, entry: dict[str, Any]) -> dict[str, Any] | None:
    """The communication figures of one DDP configuration, or None when nothing was measured."""
    if entry["mode"] != "ddp":
        return None
    sync = entry["stats"]["sec_iter"]["p50"] if entry.get("stats") else None
    nosync_samples = [s for rank in sorted(state.nosync) for s in state.nosync[rank]]
    nosync = _median_of(nosync_samples)
    grad_bytes = entry.get("grad_bytes")
    world_size = entry["world_size"]
    result: dict[str, Any] = {
        "step_s": sync,
        "nosync_samples": len(nosync_samples),
        "compute_s": nosync,
        "exposed_comm_s": max(0.0, sync - nosync) if sync is not None and nosync is not None else None,
        "exposed_comm_fraction": None,
        "allreduce_bytes_per_rank": formulas.allreduce_bytes(grad_bytes, world_size) if grad_bytes else None,
        "allreduce_gib_per_rank": formulas.allreduce_bytes(grad_bytes, world_size) / formulas.GIB
        if grad_bytes
        else None,
        "ddp_logging": None,
        "buckets": None,
    }
    if result["exposed_comm_s"] is not None and sync:
        result["exposed_comm_fraction"] = result["exposed_comm_s"] / sync
    comm = state.comm.get(0) or next(iter(state.comm.values()), None)
    if comm is not None:
        result["ddp_logging"] = comm.get("ddp_logging")
        busy = [s for event in state.comm.values() for s in event.get("bucket_comm_s") or ()]
        total = [s for event in state.comm.values() for s in event.get("bucket_sum_s") or ()]
        reduced = comm.get("bucket_bytes") or []
        hooked = [s for event in state.comm.values() for s in event.get("hooked_step_s") or ()]
        busy_s = _median_of(busy)
        bytes_per_step = _median_of([float(b) for b in reduced])
        buckets = _median_of([float(b) for b in comm.get("buckets") or []])
        achieved = None
        if busy_s and bytes_per_step and world_size > 1:
            algbw = bytes_per_step / busy_s / 1e9
            achieved = {"algbw_gbs": algbw, "busbw_gbs": algbw * formulas.ring_factor(world_size)}
        result["buckets"] = {
            "steps": len(busy),
            "in_flight_s": busy_s,
            "sum_s": _median_of(total),
            "count": buckets,
            "bytes_per_step": bytes_per_step,
            "mean_bucket_bytes": bytes_per_step / buckets if bytes_per_step and buckets else None,
            "hooked_step_s": _median_of(hooked),
            "achieved": achieved,
        }
    if result["compute_s"] is None and result["ddp_logging"] is None and result["buckets"] is None:
        return None
    return result


def collective_samples(events: Iterable[dict[str, Any]], launches: Mapping[str, Any]) -> dict[tuple, dict[int, list[float]]]:
    """Each collective's times per rank, keyed (world size, backend, op, bytes, in place)."""
    by_key: dict[tuple, dict[int, list[float]]] = defaultdict(dict)
    for event in events:
        launch = event.get("launch")
        record = launches.get(launch) if launch is not None else None
        backend = record.backend if record is not None else None
        key = (event["world_size"], backend, event["op"], event["bytes"], bool(event["inplace"]))
        by_key[key].setdefault(event["rank"], []).extend(event["sec"])
    return by_key


def collective_tables(events: list[dict[str, Any]], launches: dict[str, Any]) -> list[dict[str, Any]]:
    """One table per (world size, backend, collective): time, algbw and busbw per size and placement.

    A collective ends when its slowest rank ends, so each row takes the largest of the ranks' median times.
    """
    by_key = collective_samples(events, launches)
    tables: dict[tuple, dict[str, Any]] = {}
    for (world_size, backend, op, size, inplace), per_rank in sorted(by_key.items(), key=lambda kv: str(kv[0])):
        medians = [stats.median(v) for v in per_rank.values() if v]
        if not medians:
            continue
        seconds = max(medians)
        algbw = size / seconds / 1e9 if seconds > 0 else None
        table = tables.setdefault(
            (world_size, backend, op),
            {"world_size": world_size, "backend": backend, "op": op,
             "busbw_factor": busbw_factor(op, world_size), "rows": []},
        )
        table["rows"].append(
            {
                "bytes": size,
                "inplace": inplace,
                "time_s": seconds,
                "ranks": len(medians),
                "samples": sum(len(v) for v in per_rank.values()),
                "algbw_gbs": algbw,
                "busbw_gbs": algbw * table["busbw_factor"] if algbw is not None else None,
            }
        )
    result = []
    for table in sorted(tables.values(), key=lambda t: (t["world_size"], str(t["backend"]), t["op"])):
        table["rows"].sort(key=lambda r: (r["bytes"], r["inplace"]))
        best = max((r for r in table["rows"] if r["busbw_gbs"]), key=lambda r: r["busbw_gbs"], default=None)
        table["peak_busbw_gbs"] = best["busbw_gbs"] if best else None
        table["peak_at_bytes"] = best["bytes"] if best else None
        result.append(table)
    return result


def busbw_at(tables: list[dict[str, Any]], world_size: int, backend: str, size: float) -> dict[str, Any] | None:
    """The collective kernel's allreduce row nearest in size to ``size`` bytes, at this world size."""
    for table in tables:
        if table["op"] == "allreduce" and table["world_size"] == world_size and table["backend"] == backend:
            rows = [r for r in table["rows"] if r["busbw_gbs"]]
            if rows:
                return min(rows, key=lambda r: abs(r["bytes"] - size))
    return None
