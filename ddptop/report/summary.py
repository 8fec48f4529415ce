"""The scaling summary: one schema-versioned JSON document per run, plus its Markdown and CSV renderings.

``build_summary`` is a pure function of a session (its files) and the environment; ``save_summary`` writes
summary.json/.md/.csv atomically; ``load_summary`` refuses documents of an unknown schema or version.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ddptop import rundir, stats
from ddptop.session import FAILED, Session
from ddptop.telemetry import timeline
from ddptop.telemetry.monitor import TIMELINE_FILE

SCHEMA = "ddptop.summary"
SCHEMA_VERSION = 1
ENVIRONMENT_FILE = "environment.json"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SUMMARY_CSV = "summary.csv"
TOPOLOGY_FILE = "topology.json"


class SummaryError(ValueError):
    """A summary that cannot be read; one line for the user."""


def _rank0_end(state: Any) -> dict[str, Any]:
    return state.end.get(0) or next(iter(state.end.values()), {})


def _config_entry(session: Session, state: Any) -> dict[str, Any]:
    spec = state.spec
    end = _rank0_end(state)
    peaks = [e.get("peak_memory_bytes") for e in state.end.values() if e.get("peak_memory_bytes") is not None]
    rss = [e.get("max_rss_bytes") for e in state.end.values() if e.get("max_rss_bytes") is not None]
    entry = spec.to_json()
    entry.update(
        {
            "label": spec.label,
            "status": state.status,
            "reason": state.reason,
            "log_tail": state.log_tail or None,
            "launch": state.launch,
            "params": state.info.get("params"),
            "grad_bytes": state.info.get("grad_bytes"),
            "setup_s": state.info.get("setup_s"),
            "warmup_s": end.get("warmup_s"),
            "measure_s": end.get("measure_s"),
            "measured_iters": end.get("iters"),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "max_rss_bytes": max(rss) if rss else None,
            "stats": state.summary(),
            "samples": {str(rank): values for rank, values in sorted(state.samples.items())},
        }
    )
    return entry


def _scaling(session: Session, entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    plan = session.plan
    groups: dict[tuple, list[dict[str, Any]]] = {}
    baselines: dict[tuple, dict[str, Any]] = {}
    for entry in entries:
        batch = entry["batch_size"] if entry["scaling"] == "weak" else entry["global_batch"]
        key = (entry["model"], batch, entry["backend"])
        if entry["stats"] is None:
            continue
        if entry["mode"] == "no_ddp":
            baselines[key] = entry
        else:
            groups.setdefault(key, []).append(entry)
    tables = []
    for (model, batch, backend), members in groups.items():
        points = []
        by_size = {}
        for entry in members:
            n = entry["world_size"]
            cores_per_rank = plan.cores_per_rank if plan.cores_per_rank is not None else plan.threads_per_rank[n]
            points.append(
                stats.ScalingPoint(
                    world_size=n,
                    sec_iter=entry["stats"]["sec_iter"]["p50"],
                    global_batch=entry["global_batch"],
                    cores=cores_per_rank * n,
                    gpus=n if plan.device == "cuda" else 0,
                )
            )
            by_size[n] = entry
        rows = stats.scaling_rows(points, plan.su_core_weight, plan.su_gpu_weight)
        for row in rows:
            entry = by_size[row["world_size"]]
            row["config_id"] = entry["config_id"]
            row["label"] = entry["label"]
            row["cores"] = next(p.cores for p in points if p.world_size == row["world_size"])
        baseline = baselines.get((model, batch, backend))
        reference = rows[0] if rows else None
        ddp_overhead = None
        if baseline and reference and reference["world_size"] == 1:
            ddp_overhead = reference["sec_iter"] / baseline["stats"]["sec_iter"]["p50"] - 1
        unit = "GPUs" if plan.device == "cuda" else "ranks"
        tables.append(
            {
                "recommendation": stats.recommendation(rows, unit),
                "model": model,
                "batch_size": batch,
                "batch_meaning": "per rank" if plan.scaling == "weak" else "global",
                "scaling": plan.scaling,
                "backend": backend,
                "reference_world_size": reference["world_size"] if reference else None,
                "no_ddp_sec_iter": baseline["stats"]["sec_iter"]["p50"] if baseline else None,
                "ddp_overhead_at_reference": ddp_overhead,
                "rows": rows,
            }
        )
    return tables


def live_scaling(session: Session) -> dict[str, dict[str, Any]]:
    """Speedup and efficiency so far, per configuration id, from the configurations with samples."""
    with session.lock:
        entries = []
        for state in session.ordered_states():
            if state.status in FAILED:
                continue
            entry = state.spec.to_json()
            entry.update({"config_id": state.spec.config_id, "label": state.spec.label, "stats": state.summary()})
            entries.append(entry)
    return {row["config_id"]: row for table in _scaling(session, entries) for row in table["rows"]}


def _step_seconds(entry: dict[str, Any]) -> float:
    """Seconds rank 0 spent in steps; a configuration cut short has no phase times, only its samples."""
    if entry["measure_s"] is not None:
        return (entry["warmup_s"] or 0) + entry["measure_s"]
    return sum(entry["samples"].get("0", ()))


def _overhead(session: Session, entries: list[dict[str, Any]]) -> dict[str, Any]:
    """How much of the sweep's wall time went to anything but warm-up and measured steps."""
    iterations = sum(_step_seconds(e) for e in entries)
    launches = [
        {
            "launch": record.name,
            "world_size": record.world_size,
            "backend": record.backend,
            "status": record.status,
            "exit_code": record.exit_code,
            "reason": record.reason,
            "wall_s": (record.ended_t - record.started_t) if record.ended_t else None,
        }
        for record in session.launches.values()
    ]
    launch_wall = sum(l["wall_s"] or 0 for l in launches)
    end = session.ended_t or max((r.ended_t or 0 for r in session.launches.values()), default=0)
    start = min((r.started_t for r in session.launches.values()), default=end)
    wall = max(end - start, launch_wall)
    return {
        "sweep_wall_s": wall,
        "launch_wall_s": launch_wall,
        "iterations_s": iterations,
        "fraction_outside_iterations": (1 - iterations / wall) if wall > 0 else None,
        "launches": launches,
    }


def _measure_window(state: Any, entry: dict[str, Any], last_t: float) -> tuple[float, float] | None:
    """The measured steps' wall-clock window (whole configuration when it did not finish)."""
    end = _rank0_end(state)
    if entry["status"] == "ok" and end.get("measure_s") is not None:
        return end["t"] - end["measure_s"], end["t"]
    if state.started_t is None:
        return None
    return state.started_t, state.ended_t or last_t


def _add_telemetry(session: Session, states: list[Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    records, malformed = timeline.read_timeline(os.path.join(session.run_dir, TIMELINE_FILE))
    last_t = records[-1]["t"] if records else time.time()
    for state, entry in zip(states, entries):
        window = _measure_window(state, entry, last_t)
        examples = (entry["measured_iters"] or 0) * entry["global_batch"] if entry["status"] == "ok" else None
        entry["telemetry"] = (
            timeline.window_figures(
                records, window[0], window[1], state.launch, examples, state.started_t, state.ended_t or last_t
            )
            if window
            else None
        )
    return {
        "file": TIMELINE_FILE if records else None,
        "readings": len(records),
        "malformed_lines": malformed,
        "info": timeline.timeline_info(records),
    }


def load_saved_topology(run_dir: str) -> dict[str, Any] | None:
    try:
        with open(os.path.join(run_dir, TOPOLOGY_FILE), encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def build_summary(session: Session, environment: dict[str, Any] | None = None) -> dict[str, Any]:
    with session.lock:
        states = session.ordered_states()
        entries = [_config_entry(session, s) for s in states]
        telemetry = _add_telemetry(session, states, entries)
        env = dict(environment or read_environment(session.run_dir))
        env["versions"] = session.versions()
        counts: dict[str, int] = {}
        for entry in entries:
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "run_dir": os.path.abspath(session.run_dir),
            "name": session.plan.name,
            "complete": session.ended_t is not None,
            "environment": env,
            "plan": session.plan.to_json(),
            "status_counts": counts,
            "configs": entries,
            "scaling": _scaling(session, entries),
            "overhead": _overhead(session, entries),
            "telemetry": telemetry,
            "topology": load_saved_topology(session.run_dir),
            "malformed_event_lines": session.malformed_lines(),
        }


def read_environment(run_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(run_dir, ENVIRONMENT_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def save_summary(summary: dict[str, Any], run_dir: str) -> dict[str, str]:
    from ddptop.report import tables

    paths = {
        "json": os.path.join(run_dir, SUMMARY_JSON),
        "md": os.path.join(run_dir, SUMMARY_MD),
        "csv": os.path.join(run_dir, SUMMARY_CSV),
    }
    rundir.write_json(paths["json"], summary)
    rundir.write_atomic(paths["md"], tables.markdown(summary))
    rundir.write_atomic(paths["csv"], tables.csv_text(summary))
    return paths


def load_summary(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise SummaryError(f"{path} does not exist") from None
    except (OSError, ValueError) as exc:
        raise SummaryError(f"{path} is not a readable JSON summary: {exc}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SummaryError(f"{path} is not a ddptop summary")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SummaryError(f"{path} has summary schema version {version!r}; this ddptop reads {SCHEMA_VERSION}")
    return data
