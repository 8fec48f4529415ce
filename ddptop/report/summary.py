"""The scaling summary: one schema-versioned JSON document per run, plus its Markdown and CSV renderings.

``build_summary`` is a pure function of a session (its files) and the environment; ``save_summary`` writes
summary.json/.md/.csv atomically; ``load_summary`` refuses documents of an unknown schema or version.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from ddptop import analysis, rundir, stats
from ddptop.errors import DdptopError
from ddptop.report import communication
from ddptop.report.plots import PLOTS_DIR
from ddptop.session import FAILED, Session
from ddptop.telemetry import timeline
from ddptop.telemetry.monitor import TIMELINE_FILE
from ddptop.protocol.wire import EventFileReader

SCHEMA = "ddptop.summary"
SCHEMA_VERSION = 1
ENVIRONMENT_FILE = "environment.json"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SUMMARY_CSV = "summary.csv"
TOPOLOGY_FILE = "topology.json"


class SummaryError(DdptopError):
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
            "analysis_s": end.get("analysis_s"),
            "measured_iters": end.get("iters"),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "max_rss_bytes": max(rss) if rss else None,
            "stats": state.summary(exact=True),
            "samples": {str(rank): values for rank, values in sorted(state.samples.items())},
        }
    )
    entry["communication"] = communication.config_communication(state, entry) if entry["stats"] else None
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
        elif entry["mode"] == "ddp":
            groups.setdefault(key + (entry["bucket_cap_mb"],), []).append(entry)
    tables = []
    for (model, batch, backend, bucket_cap_mb), members in groups.items():
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
        baseline = baselines.get((model, batch, backend))
        reference = rows[0] if rows else None
        for row in rows:
            entry = by_size[row["world_size"]]
            row["config_id"] = entry["config_id"]
            row["label"] = entry["label"]
            row["cores"] = next(p.cores for p in points if p.world_size == row["world_size"])
            _add_model_figures(row, entry, by_size[reference["world_size"]], baseline, plan)
        unit = "GPUs" if plan.device == "cuda" else "ranks"
        fit = analysis.amdahl_fit([(r["world_size"], r["speedup"]) for r in rows])
        ddp_overhead = None
        if baseline and reference and reference["world_size"] == 1:
            ddp_overhead = reference["sec_iter"] / baseline["stats"]["sec_iter"]["p50"] - 1
        tables.append(
            {
                "recommendation": stats.recommendation(rows, unit, plan.efficiency_threshold),
                "efficiency_threshold": plan.efficiency_threshold,
                "amdahl": fit,
                "model": model,
                "batch_size": batch,
                "bucket_cap_mb": bucket_cap_mb,
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


def _add_model_figures(
    row: dict[str, Any], entry: dict[str, Any], reference: dict[str, Any], baseline: dict[str, Any] | None, plan: Any
) -> None:
    """Karp-Flatt, cost per million examples, data moved per epoch and the compute/communication split."""
    n = row["world_size"]
    row["karp_flatt"] = analysis.karp_flatt(row["speedup"], n) if row["reference_world_size"] == 1 else None
    row["cost_per_million"] = (  # one GPU per rank; on the CPU the price is per rank-hour
        analysis.cost_per_million(n, row["ex_sec_total"], plan.price_per_gpu_hour)
        if plan.price_per_gpu_hour is not None
        else None
    )
    grad_bytes, params = entry.get("grad_bytes"), entry.get("params")
    row["epoch"] = (
        analysis.epoch_transfer(grad_bytes, params, plan.epoch_examples, entry["global_batch"], n)
        if grad_bytes and params
        else None
    )
    comm = entry.get("communication") or {}
    row["compute_s"] = comm.get("compute_s")
    row["exposed_comm_s"] = comm.get("exposed_comm_s")
    row["exposed_comm_fraction"] = comm.get("exposed_comm_fraction")
    buckets = comm.get("buckets") or {}
    row["bucket_comm_s"] = buckets.get("in_flight_s")
    # Seed 002 takes the single-device time without DDP as the compute of every N; so do we when we have it.
    single = baseline if baseline is not None else (reference if reference["world_size"] == 1 else None)
    row["seed002_comm_estimate_s"] = (
        analysis.seed002_comm_estimate(
            row["sec_iter"], single["stats"]["sec_iter"]["p50"], entry["batch_size"], single["batch_size"]
        )
        if single is not None and n > 1
        else None
    )
    allreduce = comm.get("allreduce_bytes_per_rank")
    row["seed002_bandwidth_gbs"] = (
        allreduce / analysis.GIB / row["seed002_comm_estimate_s"]
        if allreduce and row["seed002_comm_estimate_s"] and row["seed002_comm_estimate_s"] > 0
        else None
    )


def _batch_throughput(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput per batch size for each model/N/backend with more than one batch (seed 002's sweep)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for entry in entries:
        if entry["mode"] != "ddp":
            continue
        key = (entry["model"], entry["world_size"], entry["backend"], entry["bucket_cap_mb"])
        groups.setdefault(key, []).append(entry)
    tables = []
    for (model, world_size, backend, cap), members in groups.items():
        if len({e["batch_size"] for e in members}) < 2:
            continue
        rows = []
        for entry in sorted(members, key=lambda e: e["batch_size"]):
            p50 = entry["stats"]["sec_iter"]["p50"] if entry["stats"] else None
            rows.append(
                {
                    "batch_size": entry["batch_size"],
                    "global_batch": entry["global_batch"],
                    "status": entry["status"],
                    "reason": entry["reason"],
                    "sec_iter": p50,
                    "ex_sec_total": entry["global_batch"] / p50 if p50 and entry["status"] == "ok" else None,
                    "peak_memory_bytes": entry["peak_memory_bytes"],
                }
            )
        measured = [r for r in rows if r["ex_sec_total"]]
        best = max(measured, key=lambda r: r["ex_sec_total"]) if measured else None
        oom = next((r for r in rows if r["status"] == "oom"), None)
        tables.append(
            {
                "model": model,
                "world_size": world_size,
                "backend": backend,
                "bucket_cap_mb": cap,
                "rows": rows,
                "best_batch": best["batch_size"] if best else None,
                "best_ex_sec_total": best["ex_sec_total"] if best else None,
                "first_oom_batch": oom["batch_size"] if oom else None,
            }
        )
    return tables


def _data_parallel_vs_ddp(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """DataParallel against DDP at the same N, model and batch (seeds 002 and 004)."""
    ddp = {(e["model"], e["batch_size"], e["world_size"]): e for e in entries if e["mode"] == "ddp" and e["stats"]}
    rows = []
    for entry in entries:
        if entry["mode"] != "dp":
            continue
        other = ddp.get((entry["model"], entry["batch_size"], entry["world_size"]))
        dp_p50 = entry["stats"]["sec_iter"]["p50"] if entry["stats"] else None
        ddp_p50 = other["stats"]["sec_iter"]["p50"] if other else None
        rows.append(
            {
                "model": entry["model"],
                "batch_size": entry["batch_size"],
                "world_size": entry["world_size"],
                "dp_status": entry["status"],
                "dp_sec_iter": dp_p50,
                "ddp_sec_iter": ddp_p50,
                "dp_ex_sec_total": entry["global_batch"] / dp_p50 if dp_p50 else None,
                "ddp_ex_sec_total": other["global_batch"] / ddp_p50 if ddp_p50 else None,
                "ddp_speedup_over_dp": dp_p50 / ddp_p50 if dp_p50 and ddp_p50 else None,
            }
        )
    return rows


def _compare_with_collectives(entries: list[dict[str, Any]], collectives: list[dict[str, Any]]) -> None:
    """Put the collective kernel's allreduce bandwidth at DDP's bucket size next to what DDP achieved."""
    for entry in entries:
        buckets = (entry.get("communication") or {}).get("buckets") or {}
        achieved = buckets.get("achieved")
        if not achieved or not buckets.get("mean_bucket_bytes"):
            continue
        row = communication.busbw_at(collectives, entry["world_size"], entry["backend"], buckets["mean_bucket_bytes"])
        if row is None:
            continue
        achieved["collective_bytes"] = row["bytes"]
        achieved["collective_busbw_gbs"] = row["busbw_gbs"]
        achieved["share_of_collective"] = achieved["busbw_gbs"] / row["busbw_gbs"] if row["busbw_gbs"] else None


def live_scaling(session: Session) -> dict[str, dict[str, Any]]:
    """Speedup and efficiency so far, per configuration id, from the configurations with samples."""
    with session.lock:
        entries = []
        for state in session.ordered_states():
            if state.status in FAILED:
                continue
            entry = state.spec.to_json()
            entry.update({"config_id": state.spec.config_id, "label": state.spec.label, "stats": state.summary(),
                          "grad_bytes": state.info.get("grad_bytes"), "params": state.info.get("params")})
            if entry["stats"] is not None:
                entry["communication"] = communication.config_communication(state, entry)
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
    analysis_s = sum(e.get("analysis_s") or 0 for e in entries)
    analysis_s += sum(c.get("wall_s") or 0 for c in session.collectives if c["rank"] == 0)
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
        "analysis_s": analysis_s,  # no_sync and comm-hook phases, collective benchmark
        "fraction_outside_iterations": (1 - iterations / wall) if wall > 0 else None,
        "fraction_setup": (1 - (iterations + analysis_s) / wall) if wall > 0 else None,
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
        collectives = communication.collective_tables(session.collectives, session.launches)
        _compare_with_collectives(entries, collectives)
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
            "batch_throughput": _batch_throughput(entries),
            "dp_vs_ddp": _data_parallel_vs_ddp(entries),
            "collectives": collectives,
            "overhead": _overhead(session, entries),
            "telemetry": telemetry,
            "topology": load_saved_topology(session.run_dir),
            "nodes": _nodes(session),
            "malformed_event_lines": session.malformed_lines(),
        }


def _nodes(session: Session) -> list[dict[str, Any]]:
    """Who ran what in a multi-node sweep: node 0 from runner.jsonl, each follower from its runner-node<K>."""
    if session.plan.nnodes <= 1:
        return []
    writer = session.writer or {}
    nodes = [{
        "node_rank": 0, "host": writer.get("host"), "pid": writer.get("pid"), "role": "leader",
        "launches": [{"launch": r.name, "status": r.status, "exit_code": r.exit_code}
                     for r in session.launches.values()],
        "files": {"runner": rundir.RUNNER_FILE, "telemetry": TIMELINE_FILE},
    }]
    for rank in range(1, session.plan.nnodes):
        runner = os.path.join(session.run_dir, rundir.node_file(rundir.RUNNER_FILE, rank))
        if not os.path.exists(runner):
            nodes.append({"node_rank": rank, "host": None, "pid": None, "role": "follower", "launches": [],
                          "files": {}, "problem": "never joined (no runner-node file)"})
            continue
        hello: dict[str, Any] = {}
        launches = []
        for event in EventFileReader(runner).read_rest():
            data = event.get("data") or {}
            if event["type"] == "hello":
                hello = event
            elif data.get("what") == "launch_end":
                launches.append({"launch": data["launch"], "status": data.get("status"),
                                 "exit_code": data.get("exit_code")})
        nodes.append({"node_rank": rank, "host": hello.get("host"), "pid": hello.get("pid"), "role": "follower",
                      "launches": launches,
                      "files": {"runner": os.path.basename(runner),
                                "telemetry": rundir.node_file(TIMELINE_FILE, rank)}})
    return nodes


def read_environment(run_dir: str) -> dict[str, Any]:
    try:
        with open(os.path.join(run_dir, ENVIRONMENT_FILE), encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError):
        return {}


def summary_paths(run_dir: str) -> dict[str, str]:
    """Where a run's summary files go: json, md, csv."""
    return {key: os.path.join(run_dir, name) for key, name in
            (("json", SUMMARY_JSON), ("md", SUMMARY_MD), ("csv", SUMMARY_CSV))}


def save_summary(summary: dict[str, Any], run_dir: str) -> dict[str, str]:
    from ddptop.report import tables

    paths = summary_paths(run_dir)
    rundir.write_json(paths["json"], summary)
    rundir.write_atomic(paths["md"], tables.markdown(summary))
    rundir.write_atomic(paths["csv"], tables.csv_text(summary))
    return paths


def load_target(target: str, rebuild: bool = False) -> tuple[dict[str, Any], bool]:
    """The summary of a run directory or a summary.json, and whether it had to be rebuilt from the events
    (a directory without a summary yet, or ``rebuild``); rebuilding does not write it."""
    if os.path.isdir(target):
        path = os.path.join(target, SUMMARY_JSON)
        if os.path.exists(path) and not rebuild:
            return load_summary(path), False
        session = Session.load(target)
        session.refresh(final=True)
        return build_summary(session), True
    if os.path.isfile(target):
        return load_summary(target), False
    raise SummaryError(f"{target} is neither a run directory nor a summary file")


def save_plots_safely(summary: dict[str, Any], run_dir: str) -> dict[str, str]:
    """Draw the plots; a plotting fault is reported in the paths, never allowed to lose the summary."""
    try:
        from ddptop.report import plots

        written = plots.save_plots(summary, run_dir)
    except Exception as exc:  # noqa: BLE001 - the numbers are saved already; say why the pictures are not
        return {"plots_error": f"{type(exc).__name__}: {exc}".splitlines()[0]}
    return {"plots": os.path.join(run_dir, PLOTS_DIR)} if written else {}


# Top-level keys every reader relies on, and their JSON types; anything else may be missing.
REQUIRED_KEYS = {"environment": dict, "plan": dict, "configs": list, "scaling": list, "overhead": dict}


def load_summary(path: str) -> dict[str, Any]:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except FileNotFoundError:
        raise SummaryError(f"{path} does not exist") from None
    except IsADirectoryError:
        raise SummaryError(f"{path} is a directory, not a summary file") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise SummaryError(f"{path} is not a readable JSON summary: {str(exc)[:200]}") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise SummaryError(f"{path} is not a ddptop summary")
    version = data.get("schema_version")
    if version != SCHEMA_VERSION:
        raise SummaryError(f"{path} has summary schema version {version!r}; this ddptop reads {SCHEMA_VERSION}")
    for key, kind in REQUIRED_KEYS.items():
        if not isinstance(data.get(key), kind):
            raise SummaryError(f"{path} is damaged: {key!r} is missing or not a JSON {kind.__name__}")
    return data
