"""Build a run's scaling summary: one schema-versioned JSON document, from a session and its run directory.

``build_summary`` gathers a session's configurations, the scaling tables (``ddptop.analysis.scaling``), the
sweep's overhead and the run directory's telemetry timeline, topology and follower files into that document;
it reads those files but writes nothing (``ddptop.report.store`` saves and loads it). ``load_target`` gives
a run's summary: the saved one, or one built from the run directory's events.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ddptop.analysis import (communication, compute, gradient_noise, job_use, links, scaling, script_steps, step_bound, strategy_figures,
                             threads, tokens, traces, tuning)
from ddptop.protocol import layout
from ddptop.protocol.layout import (ENVIRONMENT_FILE, RUNNER_FILE, SUMMARY_JSON, TIMELINE_FILE, TOPOLOGY_FILE,
                                    node_file)
from ddptop.protocol.marks import LaunchEnd, parse_mark
from ddptop.protocol.vocab import Status
from ddptop.protocol.wire import EventFileReader
from ddptop.protocol.modelspec import model_kind
from ddptop.report import load_tables, outputs, quiet, store
from ddptop.report.schema import Summary
from ddptop.report.store import SCHEMA, SCHEMA_VERSION, read_json_object
from ddptop.run.session import Session
from ddptop.telemetry import nccl_log, timeline


def _writer_died(session: Session) -> str | None:
    """Why the configurations still marked running will never end: the ddptop that ran the sweep is gone
    without having ended it (None while it runs, after it ended the sweep, or when that cannot be known)."""
    if session.ended_t is not None or session.writer_alive() is not False:
        return None
    hello = session.writer or {}
    return f"the ddptop running the sweep (pid {hello.get('pid', '?')} on {hello.get('host', '?')}) died"


def _status(state: Any, writer_died: str | None) -> tuple[str, str | None]:
    if writer_died is not None and state.status == Status.RUNNING:
        return Status.INTERRUPTED, writer_died
    if writer_died is not None and state.status == Status.PENDING:
        return Status.NOT_RUN, None
    return state.status, state.reason


def _config_entry(session: Session, state: Any, writer_died: str | None = None) -> dict[str, Any]:
    spec = state.spec
    end = state.rank0_end()
    status, reason = _status(state, writer_died)
    ends = state.rank_ends()
    peaks = [e.get("peak_memory_bytes") for e in ends.values() if e.get("peak_memory_bytes") is not None]
    rss = [e.get("max_rss_bytes") for e in ends.values() if e.get("max_rss_bytes") is not None]
    entry = spec.to_json()
    entry.update(
        {
            "label": spec.label,
            "status": status,
            "reason": reason,
            "log_tail": state.log_tail or None,
            "launch": state.launch,
            "params": state.info.get("params"),
            "grad_bytes": state.info.get("grad_bytes"),
            # what the rank counted on its own batch, else what the plan's check counted on a small one
            "tokens_per_example": state.info.get("tokens_per_example") or spec.tokens_per_example,
            "flops_note": state.info.get("flops_note"),
            "setup_s": state.info.get("setup_s"),
            "warmup_s": end.get("warmup_s"),
            "measure_s": end.get("measure_s"),
            # the probe runs after the configuration's end (its comm event says how long); older runs: config_end
            "analysis_s": (state.comm.get(0) or {}).get("analysis_s", end.get("analysis_s")),
            "analysis_error": state.analysis_error,
            "notes": list(state.info.get("notes") or []) if isinstance(state.info.get("notes"), list) else [],
            "measured_iters": end.get("iters"),
            "warmup_iters": end.get("warmup_iters"),
            "stop_reason": end.get("stop_reason"),
            "precision_target": end.get("precision_target"),
            "precision_reached": end.get("precision_reached"),
            "unstable": end.get("unstable"),
            "peak_memory_bytes": max(peaks) if peaks else None,
            "max_rss_bytes": max(rss) if rss else None,
            "stats": state.summary(exact=True),
            "samples": {str(rank): values for rank, values in sorted(state.samples.items())},
        }
    )
    if state.spec.script_to_end or state.step_values or end.get("script") is not None:
        entry.update(_script_fields(state, end))
    entry.update(_counted_memory(state))
    # the launch of each measured step, as runs of [launch index, steps] (the launch is the intervals' unit)
    names = state.launch_names()
    entry["launches"] = [{"launch": name} for name in names]
    entry["launch_of_steps"] = {str(rank): run_lengths([names.index(n) if n in names else 0 for n in labels])
                                for rank, labels in sorted(state.launches_of_steps().items())}
    entry["communication"] = communication.config_communication(state, entry) if entry["stats"] else None
    # the ranks write their trace files; ddptop breaks them down, here and on every rebuild
    trace = traces.config_trace(state.traces, entry["stats"]["sec_iter"]["p50"] if entry["stats"] else None,
                                session.run_dir, spec.device)
    if trace is not None:
        entry["trace"] = trace.to_json()
    return entry


def _script_fields(state: Any, end: dict[str, Any]) -> dict[str, Any]:
    """What the probe saw of a user's script: each measured step's data wait, examples and tokens per rank
    (parallel to ``samples``), what it saw of the script (``config_end.script``: its process group, its
    processes, how its steps were marked), who ended it and what the probe lost; the command it ran."""
    # what each rank's probe saw, over every launch of the configuration (not its last launch's alone)
    seen = {rank: script_steps.seen_over_launches([e["script"] for e in _launch_ends(state, rank)
                                                   if isinstance(e.get("script"), dict)]) for rank in sorted(state.rank_ends())}
    first = 0 if seen.get(0) else next((rank for rank, found in seen.items() if found), None)
    # the batch as the script drew it (what the tables' examples/s use)
    batch = script_steps.observed_batch(state.step_values)
    observed = {"batch_size": batch.per_rank, "global_batch": batch.global_batch} if batch else {}
    tokens = script_steps.tokens_per_example(state.step_values)
    return {
        **observed,
        **({"tokens_per_example": tokens} if tokens else {}),
        "step_values": {name: {str(rank): values for rank, values in sorted(per_rank.items())}
                        for name, per_rank in sorted(state.step_values.items())},
        "script": seen[first] if first is not None else None,
        "script_per_rank": {str(rank): found for rank, found in seen.items() if found},
        "ended_by": end.get("ended_by"),
        "probe_notes": sorted({e["note"] for rank in state.rank_ends() for e in _launch_ends(state, rank) if e.get("note")}),
        "command": state.info.get("command"),
    }


def _launch_ends(state: Any, rank: int) -> list[dict[str, Any]]:
    """One rank's config_end of each launch of the configuration, in the order they ran: every launch that
    ended well (``round_ends``), then the last one where it failed."""
    ends = list(state.round_ends.get(rank, ()))
    last = state.end.get(rank)
    if last is not None and (last.get("status") != Status.OK or not ends):
        ends.append(last)
    return ends


def _observed_rates(entry: dict[str, Any]) -> None:
    """A script's examples/s at every percentile from the batch it drew (its spec has none); unknown (None)
    where its examples were not counted, never 0 ex/s."""
    stats = entry.get("stats")
    if not stats or model_kind(entry["model"]).own_batch:
        return
    for key, examples in (("ex_sec_replica", entry["batch_size"]), ("ex_sec_total", entry["global_batch"])):
        stats[key] = {p: (examples / sec if entry["global_batch"] and sec > 0 else None)
                      for p, sec in stats["sec_iter"].items()}


def _counted_memory(state: Any) -> dict[str, Any]:
    """The CPU's per-rank memory (no allocator peak there): what one step holds on each rank, counted by the
    kernel (``bench_kernels.strategy_wrappers.counted_memory``); the figure is the rank that holds most, with its
    breakdown by kind. Nothing for a GPU run or a run from before the count."""
    counted = {rank: e for rank, e in state.rank_ends().items() if isinstance(e.get("counted_memory_bytes"), int)}
    if not counted:
        return {}
    rank = max(counted, key=lambda r: counted[r]["counted_memory_bytes"])
    breakdown = counted[rank].get("counted_memory")
    return {
        "counted_memory_bytes": counted[rank]["counted_memory_bytes"],
        "counted_memory_per_rank": {str(r): counted[r]["counted_memory_bytes"] for r in sorted(counted)},
        "counted_memory": breakdown if isinstance(breakdown, dict) else None,
    }


def run_lengths(values: list[int]) -> list[list[int]]:
    """[[value, count], ...] of consecutive equal values (1 1 1 0 0: [[1, 3], [0, 2]])."""
    runs: list[list[int]] = []
    for value in values:
        if runs and runs[-1][0] == value:
            runs[-1][1] += 1
        else:
            runs.append([value, 1])
    return runs


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
    trace_s = sum((e.get("trace") or {}).get("wall_s") or 0 for e in entries)
    launches: list[dict[str, Any]] = [
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
    # a sweep whose writer died has no end mark: it ended at the last thing any file recorded
    end = session.ended_t or max([r.ended_t or 0 for r in session.launches.values()] + [session.last_event_t or 0])
    start = min((r.started_t for r in session.launches.values()), default=end)
    wall = max(end - start, launch_wall)
    return {
        "sweep_wall_s": wall,
        "launch_wall_s": launch_wall,
        "iterations_s": iterations,
        "analysis_s": analysis_s,  # no_sync and comm-hook phases, collective benchmark
        "fraction_outside_iterations": (1 - iterations / wall) if wall > 0 else None,
        "fraction_setup": (1 - (iterations + analysis_s + trace_s) / wall) if wall > 0 else None,
        "launches": launches,
        **({"trace_s": trace_s} if trace_s else {}),  # the profiled steps and their export
    }


def _window_iters(state: Any, window: tuple[float, float]) -> int | None:
    """The steps measured in one launch's window, when the window is one launch's of several."""
    found = [iters for _, start, end, iters in state.launch_windows() if (start, end) == window]
    return found[0] if found and len(state.launch_windows()) > 1 else None


def _rank_spans(state: Any, entry: dict[str, Any], launch: str | None, window: tuple[float, float],
                last_t: float) -> list[tuple[str | None, float, float]]:
    """(launch, start, end) of the configuration in each launch its figures use, whose readings of that
    launch's ranks give the ranks' load: its whole time there, warm-up included. A configuration measured in
    several launches (--launches, or again after a load burst) is in each one's span, never in the span of
    its first start to its first end, which holds none of a later launch's readings."""
    used = [u["launch"] for u in entry.get("launches", ()) if u.get("used")] or [launch]
    spans = []
    for name in used:
        start, end = state.span_in(name)
        if name == launch:  # the window's own launch reaches its window at least
            start, end = min(start if start is not None else window[0], window[0]), max(end or last_t, window[1])
        if start is not None:
            spans.append((name, start, end if end is not None else last_t))
    return spans


def _add_gpu_figures(state: Any, entry: dict[str, Any], records: list[dict[str, Any]],
                     window: tuple[float, float]) -> None:
    """The GPUs' idle share over every used launch's measured steps (the host-bound verdict's evidence), and
    the GPU memory peak the load table shows beside NVML's own (``load_tables.memory_peak_shown``)."""
    load = entry["telemetry"]
    used = {u["launch"] for u in entry.get("launches", ()) if u.get("used")}
    windows = [(name, start, end) for name, start, end, _ in state.launch_windows() if name in used]
    readings = timeline.busy_readings(records, windows or [(state.launch, window[0], window[1])])
    load["gpu_idle"] = step_bound.gpu_idle(readings)
    on_gpus = sum(1 for rank in load["ranks"].values() if rank.get("gpu") in load["gpus"])
    load["mem_peak_shown_bytes"], load["mem_peak_source"] = load_tables.memory_peak_shown(
        load["mem_peak_bytes"], entry["peak_memory_bytes"], on_gpus, entry["mode"], entry["world_size"])


def _add_telemetry(
    session: Session, states: list[Any], entries: list[dict[str, Any]], kept: list[dict[str, Any]] | None
) -> dict[str, Any]:
    records, malformed = timeline.read_timeline(os.path.join(session.run_dir, TIMELINE_FILE))
    if kept:  # the records the file could not take (a full disk), from the monitor's memory
        records = sorted(records + list(kept), key=lambda e: e["t"])
    last_t = records[-1]["t"] if records else time.time()
    info = timeline.timeline_info(records)
    rank_pids = session.rank_pids()
    for state, entry in zip(states, entries):
        # each launch judged, the launches the figures use, and the verdict over the measured window: the rule
        # the live view applies too (``report.quiet``)
        judged = quiet.judge(state, entry["status"], records, info, rank_pids, last_t)
        for unit, found in zip(entry["launches"], judged.launches):
            unit.update(found)
        used = [u for u in entry["launches"] if u["used"]]
        if len(used) < len(entry["launches"]):  # the tables' percentiles from the quiet launches only
            entry["stats"] = state.summary_of({u["launch"] for u in used})
        window, launch = judged.window, judged.launch
        iters = _window_iters(state, window) if window else None
        examples = (iters if iters is not None else entry["measured_iters"] or 0) * entry["global_batch"] \
            if entry["status"] == "ok" else None
        entry["telemetry"] = (
            timeline.window_figures(records, window[0], window[1], launch, examples,
                                    _rank_spans(state, entry, launch, window, last_t))
            if window
            else None
        )
        if entry["telemetry"] is not None and window:
            _add_gpu_figures(state, entry, records, window)
        # interference and faults over the same window: was the node quiet while it was measured?
        entry["validity"] = judged.validity
    return {
        "file": TIMELINE_FILE if records else None,
        "readings": len(records),
        "malformed_lines": malformed,
        "info": info,
    }


def build_summary(
    session: Session,
    environment: dict[str, Any] | None = None,
    telemetry_kept: list[dict[str, Any]] | None = None,
    topology: dict[str, Any] | None = None,
) -> Summary:
    """Everything the run measured, as one typed summary (``ddptop.report.schema``). What the caller holds in memory is used
    before the run directory's files, which a full disk or a removed directory may lack: the environment,
    the ``topology`` and ``telemetry_kept`` (the telemetry records the timeline file could not take)."""
    from ddptop.analysis import intervals, launches, script_figures, uncertainty  # numpy: loaded when a summary is built, not with the view

    with session.lock:
        states = session.ordered_states()
        writer_died = _writer_died(session)
        entries = [_config_entry(session, s, writer_died) for s in states]
        telemetry = _add_telemetry(session, states, entries, telemetry_kept)
        for entry in entries:  # after the launches were judged (which may recompute the stats), before intervals
            _observed_rates(entry)
        damaged_json: dict[str, str | None] = {}  # what the run directory's JSON files read here lacked
        if not environment:
            path = os.path.join(session.run_dir, ENVIRONMENT_FILE)
            environment, damaged_json[ENVIRONMENT_FILE] = read_json_object(path)
        env = dict(environment or {})
        env["versions"] = session.versions()
        env["launch_setup"] = _launch_setup(session)
        job_use.add_peak_use(env, entries)  # what the run used at its peak, beside environment.allocation
        counts: dict[str, int] = {}
        for entry in entries:
            counts[entry["status"]] = counts.get(entry["status"], 0) + 1
        replicates, launch_variance = intervals.add_step_intervals(states, entries)
        if session.plan.script_tune or len(session.plan.variants) > 1:  # a tune's rows show the step's p95
            intervals.add_tail_intervals(entries, launch_variance)
        # a script's data wait, step less it and gradient synchronisation, before the verdicts
        script_figures.add_script_figures(entries, threads=session.plan.threads_per_rank)
        noise_scales = _gradient_noise(states, entries)
        for state, entry in zip(states, entries):  # FLOP/s and MFU, with the p50's interval carried over
            hello = (session.hellos.get((state.launch, 0)) if state.launch is not None else None) or {}
            entry["flops"] = compute.compute_figures(entry, state.info, hello.get("device_name"), session.ceilings)
        collectives = communication.collective_tables(session.collectives, session.launches)
        intervals.add_collective_intervals(collectives, session.collectives, session.launches)
        scaling.compare_with_collectives(entries, collectives)
        if topology is None:
            topology, damaged_json[TOPOLOGY_FILE] = read_json_object(os.path.join(session.run_dir, TOPOLOGY_FILE))
        links.add_link_shares(entries, collectives, topology)
        for entry in entries:
            entry["verdict"] = step_bound.verdict(entry, env)
        doc = {
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
            "verdict_thresholds": step_bound.thresholds(),
            "ceilings": [{k: c.get(k) for k in ("device_name", "dtype", "flops_per_s", "sizes", "threads")}
                         for c in session.ceilings],
            "uncertainty": {"method": launches.METHOD if launch_variance.estimated
                            else f"{uncertainty.METHOD}; {launches.WITHIN_ONLY}", "confidence": uncertainty.CONFIDENCE,
                            "resamples": uncertainty.RESAMPLES, "launch_variance": launch_variance.record().to_json()},
            "scaling": scaling.scaling_tables(entries, session.plan, replicates, noise_scales),
            "batch_throughput": scaling.batch_throughput(entries),
            "dp_vs_ddp": scaling.data_parallel_vs_ddp(entries),
            "tuning": tuning.tuning_tables(entries, replicates, {
                state.spec.config_id: state.info["ddp_keywords"] for state in states
                if isinstance(state.info.get("ddp_keywords"), dict)}, skipped=session.plan.variants_skipped,
                compiles={state.spec.config_id: state.compiles for state in states if state.compiles},
                nccl=_nccl_choices(session.run_dir, entries), reasons=session.plan.variant_reasons,
                tried=session.plan.tries_why, not_tried=session.plan.not_tried, script_dir=session.plan.script_dir,
                script_file=next(iter(session.plan.script), "")),
            "collectives": collectives,
            "overhead": _overhead(session, entries),
            "telemetry": telemetry,
            "topology": topology,
            "nodes": _nodes(session),
            "malformed_event_lines": session.malformed_lines(),
            "damaged": _damage(session, telemetry, damaged_json),
            **_strategy_tables(entries, replicates, session.plan.memory_cap_mb),
            **_thread_answers(entries, session.plan, replicates),
        }
        tokens.add_token_rates(doc)  # beside every examples/s of a transformer configuration
        summary = Summary.from_json(doc)
    if os.environ.get(store.CHECK_ENV) == "1":  # every summary made, saved or not (the tests set it)
        store.check_consistency(summary.to_json(), f"the summary of {session.run_dir}")
        outputs.check(summary, f"the summary of {session.run_dir}")  # and every output it has renders
    return summary


def _nccl_choices(run_dir: str, entries: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Per configuration, what NCCL's TUNING log says it chose in the launches that measured it (a tune on
    GPUs; ``ddptop.telemetry.nccl_log``): every collective of those launches, the configuration's among them."""
    by_launch: dict[str, list[nccl_log.NcclChoice] | None] = {}
    found: dict[str, list[dict[str, Any]]] = {}
    for entry in entries:
        names = [launch.get("launch") for launch in entry.get("launches") or [] if isinstance(launch, dict)]
        choices: list[nccl_log.NcclChoice] = []
        for name in names:
            if isinstance(name, str):
                if name not in by_launch:
                    by_launch[name] = nccl_log.launch_choices(layout.launch_path(run_dir, name))
                choices += by_launch[name] or []
        if choices:
            found[entry["config_id"]] = [c.to_json() for c in nccl_log.merge(choices)]
    return found


def _gradient_noise(states: list[Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Each configuration's gradient noise scale from its ranks' squared gradient norms (``gradient_noise``):
    its record on the entry, and the estimates by configuration for the scaling tables' time to loss."""
    from ddptop.analysis import noise_scale  # numpy: loaded when a summary is built

    found = {}
    for state, entry in zip(states, entries):
        world_size = entry["world_size"]
        pairs = (gradient_noise.synchronisations(gradient_noise.measured_pairs(state.comm, state.step_values),
                                                 world_size) if entry["stats"] else None)
        if not pairs or not pairs[0]:
            continue
        kind = model_kind(entry["model"])
        noise = noise_scale.estimate(*pairs)
        if noise is None:  # too few synchronisations: said, with how many there were
            entry["gradient_noise"] = gradient_noise.GradientNoise(
                syncs=len(pairs[0]), batch_local=sum(pairs[2]) / len(pairs[2]),
                batch_global=sum(pairs[3]) / len(pairs[3]), over=gradient_noise.over_words(kind),
                synthetic=kind.random_data).to_json()
            continue
        found[entry["config_id"]] = noise
        # the halves of one launch's synchronisations: each launch trains from its start again
        last = _last_launch_steps(state)
        window = (gradient_noise.synchronisations(gradient_noise.measured_pairs(state.comm, state.step_values, last),
                                                  world_size) if last is not None else pairs)
        entry["gradient_noise"] = gradient_noise.record(noise, over=gradient_noise.over_words(kind),
                                                        synthetic=kind.random_data,
                                                        halves=noise_scale.halves(*window) if window else None).to_json()
    return found


def _last_launch_steps(state: Any) -> list[int] | None:
    """The measured steps of the configuration's last launch (rank 0's, numbered as its samples), where its
    steps came from more than one; None where they all came from one."""
    labels = state.launches_of_steps().get(0) or []
    if not labels or len(set(labels)) < 2:
        return None
    return [i for i, label in enumerate(labels) if label == labels[-1]]


def _thread_answers(entries: list[dict[str, Any]], plan: Any, replicates: Any) -> dict[str, Any]:
    """The thread curve, the best split of the cores and the CPU against the GPUs (--threads, --devices); no
    key for a run without them."""
    found = {"threads": threads.thread_tables(entries, plan, replicates),
             "core_budget": threads.core_budget(entries, plan, replicates),
             "devices_compared": threads.devices_compared(entries, plan, replicates)}
    return {key: tables for key, tables in found.items() if tables}


def _strategy_tables(entries: list[dict[str, Any]], replicates: Any, cap: float | None) -> dict[str, Any]:
    """DDP, ZeRO-1 and FSDP2 side by side (``--strategies``); no key at all for a run of DDP alone."""
    tables = strategy_figures.strategy_tables(entries, replicates, memory_cap_mb=cap)
    return {"strategies": tables} if tables else {}


def _damage(session: Session, telemetry: dict[str, Any], json_problems: dict[str, str | None]) -> dict[str, str]:
    """The run directory's files read around damage (cut short, corrupted), and what was wrong with each;
    ``json_problems``: the JSON files the summary read, and what was wrong with each (None: nothing)."""
    found: dict[str, str] = {}
    readers = [] if session.writes_runner_file else [session.runner_reader]
    for reader in readers + list(session.readers.values()):
        if reader.malformed:
            name = os.path.relpath(reader.path, session.run_dir)
            found[name] = f"{reader.malformed} unreadable line(s) skipped (first: {reader.first_problem})"
    if telemetry.get("malformed_lines"):
        found[TIMELINE_FILE] = f"{telemetry['malformed_lines']} unreadable line(s) skipped"
    for name, problem in json_problems.items():
        if problem:
            found[name] = f"{problem}; left out"
    return found


def _launch_setup(session: Session) -> dict[str, Any]:
    """Per launch, what its hellos said can make one launch differ from another: each rank's CPU binding
    (how, and the CPUs it could run on) and rank 0's GPU setup (cuDNN flags, NCCL's environment)."""
    found: dict[str, Any] = {}
    for (launch, rank), hello in sorted(session.hellos.items()):
        if "binding" not in hello and "gpu_setup" not in hello:
            continue  # written before ranks said so
        entry = found.setdefault(launch, {"ranks": {}})
        entry["ranks"][str(rank)] = {"binding": hello.get("binding"), "cores": hello.get("cores")}
        if isinstance(hello.get("gpu_setup"), dict):
            entry["gpu_setup"] = hello["gpu_setup"]
    return found


def _nodes(session: Session) -> list[dict[str, Any]]:
    """Who ran what in a multi-node sweep: node 0 from runner.jsonl, each follower from its runner-node<K>."""
    if session.plan.nnodes <= 1:
        return []
    writer = session.writer or {}
    nodes = [{
        "node_rank": 0, "host": writer.get("host"), "pid": writer.get("pid"), "role": "leader",
        "launches": [{"launch": r.name, "status": r.status, "exit_code": r.exit_code}
                     for r in session.launches.values()],
        "files": {"runner": RUNNER_FILE, "telemetry": TIMELINE_FILE},
    }]
    for rank in range(1, session.plan.nnodes):
        runner = os.path.join(session.run_dir, node_file(RUNNER_FILE, rank))
        if not os.path.exists(runner):
            nodes.append({"node_rank": rank, "host": None, "pid": None, "role": "follower", "launches": [],
                          "files": {}, "problem": "never joined (no runner-node file)"})
            continue
        hello: dict[str, Any] = {}
        launches = []
        for event in EventFileReader(runner).read_rest():
            mark = parse_mark(event)
            if event["type"] == "hello":
                hello = event
            elif isinstance(mark, LaunchEnd):
                launches.append({"launch": mark.launch, "status": mark.status, "exit_code": mark.exit_code})
        nodes.append({"node_rank": rank, "host": hello.get("host"), "pid": hello.get("pid"), "role": "follower",
                      "launches": launches,
                      "files": {"runner": os.path.basename(runner),
                                "telemetry": node_file(TIMELINE_FILE, rank)}})
    return nodes


def load_target(target: str, rebuild: bool = False) -> tuple[Summary, bool]:
    """The summary of a run directory or a summary.json, and whether it had to be rebuilt from the events
    (a directory without a summary yet, or ``rebuild``); rebuilding does not write it."""
    if os.path.isdir(target):
        path = os.path.join(target, SUMMARY_JSON)
        if os.path.exists(path) and not rebuild:
            return store.load_summary(path), False
        session = Session.load(target)
        session.refresh(final=True)
        return build_summary(session), True
    if os.path.isfile(target):
        return store.load_summary(target), False
    raise store.SummaryError(f"{target} is neither a run directory nor a summary file")
