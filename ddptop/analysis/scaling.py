"""The scaling tables, for the saved summary and for the live view alike.

``scaling_tables`` turns configuration entries (a summary's ``configs``: spec fields, ``stats``,
``grad_bytes``, ``params``, ``communication``) and the plan into one table per model, batch, backend and
bucket size: speedup, efficiency, relative cost and SU, Karp-Flatt, cost, data per epoch, the
compute/communication split, Amdahl's fit and a recommendation in words. The batch sweep, DataParallel
against DDP and the collective kernel's bandwidth beside DDP's are here too.

The live view asks for the same rows several times a second while only a few inputs change between looks.
``LiveScaling`` keeps the last tables and rebuilds them only when a configuration's inputs (its p50 step
time, gradient size and communication figures) changed, so a frame with nothing new costs a key comparison
(``ddptop.live.live_scaling`` feeds it a running session's configurations).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from ddptop.analysis import communication, formulas, projection, script_steps, stats
from ddptop.analysis.figures import Measured, put
from ddptop.protocol import strategies, variants
from ddptop.protocol.modelspec import model_kind, owns_batch


class PlanFigures(Protocol):
    """What the scaling tables read of a sweep's plan (``ddptop.run.plan_records.Plan`` has it all). Read-only
    members, so that a frozen dataclass fits, and one whose ``scaling`` is a ``str`` enum."""

    @property
    def scaling(self) -> str: ...
    @property
    def device(self) -> str: ...
    @property
    def threads_per_rank(self) -> dict[int, int]: ...
    @property
    def cores_per_rank(self) -> float | None: ...
    @property
    def su_core_weight(self) -> float: ...
    @property
    def su_gpu_weight(self) -> float: ...
    @property
    def efficiency_threshold(self) -> float: ...
    @property
    def price_per_gpu_hour(self) -> float | None: ...
    @property
    def epoch_examples(self) -> int: ...
    @property
    def internode_gbps(self) -> float: ...


def as_written(entry: Mapping[str, Any]) -> bool:
    """DDP as a user writes it, not one of ddptop tune's variants (``analysis.tuning`` compares those) nor
    another strategy (ZeRO-1, FSDP2: ``analysis.strategy_figures`` compares those)."""
    return (entry.get("variant") or variants.DEFAULT) == variants.DEFAULT and plain_ddp(entry)


def plain_ddp(entry: Mapping[str, Any]) -> bool:
    """Of the DDP strategy, not ZeRO-1 or FSDP2 (a summary from before strategies has DDP alone)."""
    return (entry.get("strategy") or strategies.DDP) == strategies.DDP


def scaling_tables(
    entries: Sequence[dict[str, Any]], plan: PlanFigures, replicates: Mapping[str, Any] | None = None,
    noise_scales: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One table per (model, batch, backend, bucket size) of the DDP entries with samples, against the
    smallest world size measured and, where there is one, the plain model without DDP. With each
    configuration's bootstrap ``replicates`` (``intervals``), every figure gets its 95% interval; with its
    gradient noise scale (``noise_scales``, by configuration), each row its speedup in time to the same loss."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    baselines: dict[tuple, dict[str, Any]] = {}
    for entry in entries:
        # a model that draws its own batch (a script) drew it at each N (weak, strong or neither): one table
        batch = table_batch(entry) if owns_batch(entry["model"]) else 0
        # a thread sweep's thread counts (--threads) and the CPU part of a plan on GPUs: a table each
        threads = (entry.get("threads") or 0) if getattr(plan, "threads", ()) else 0
        key = (entry["model"], batch, entry["backend"], entry.get("device") or plan.device, threads)
        if entry["stats"] is None:
            continue
        if entry["mode"] == "no_ddp":
            baselines[key] = entry
        elif entry["mode"] == "ddp" and (entry.get("variant") or variants.DEFAULT) == variants.DEFAULT:
            # DDP as written, and each strategy of --strategies (ZeRO-1, FSDP2) in a table of its own
            strategy = entry.get("strategy") or strategies.DDP
            groups.setdefault(key + (entry["bucket_cap_mb"], strategy), []).append(entry)
    tables = []
    for (model, batch, backend, device, threads, bucket_cap_mb, strategy), members in groups.items():
        points = []
        by_size = {}
        for entry in members:
            n = entry["world_size"]
            points.append(
                stats.ScalingPoint(
                    world_size=n,
                    sec_iter=entry["stats"]["sec_iter"]["p50"],
                    global_batch=entry["global_batch"],
                    cores=charged_cores(plan, n, entry.get("threads") or 0, device) * n,
                    gpus=n if device == "cuda" else 0,
                    replicates=(replicates or {}).get(entry["config_id"]),
                )
            )
            by_size[n] = entry
        figures = stats.scaling_rows(points, plan.su_core_weight, plan.su_gpu_weight)
        rows = figures.rows
        # the no-DDP row measures DDP's own cost at N=1; a strategy's table is against its own smallest N alone
        baseline = baselines.get((model, batch, backend, device, threads)) if strategy == strategies.DDP else None
        reference = rows[0] if rows else None
        for row in rows:
            entry = by_size[row["world_size"]]
            row["config_id"] = entry["config_id"]
            row["label"] = entry["label"]
            row["cores"] = next(p.cores for p in points if p.world_size == row["world_size"])
            _add_model_figures(row, entry, by_size[rows[0]["world_size"]], baseline, plan,
                               figures.karp_flatt.get(row["world_size"]))
        unit = "GPUs" if device == "cuda" else "ranks"
        # a model that draws its own batch: the batch as observed, and whether its ranks trained one model
        script_facts = _script_facts(rows, by_size) if not model_kind(model).own_batch else {}
        if script_facts.get("not_data_parallel"):
            _unmodelled(rows)
        # Amdahl's law is a speedup over one rank: fitted only where N=1 was measured (from a larger base
        # the speedups assume perfect scaling up to it, and the base itself would be a point made up), and
        # never over ranks that each train alone: there is no scaling to fit
        fit = (formulas.amdahl_fit([(r["world_size"], r["speedup"]) for r in rows])
               if reference is not None and reference["world_size"] == 1 and not script_facts.get("not_data_parallel")
               and all(r["speedup"] is not None for r in rows) else None)
        ddp_overhead = None
        if baseline and reference and reference["world_size"] == 1:
            ddp_overhead = reference["sec_iter"] / baseline["stats"]["sec_iter"]["p50"] - 1
        table = {
            "recommendation": None,
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
            **({"strategy": strategy} if strategy != strategies.DDP else {}),
            **({"device": device} if device != plan.device else {}),
            **({"threads": threads} if threads else {}),
            **script_facts,
        }
        if replicates:
            from ddptop.analysis import intervals  # numpy: only where a summary is built, never at the view's start

            intervals.add_scaling_intervals(table, by_size, baseline, replicates, figures.speedups)
        if noise_scales and not script_facts.get("not_data_parallel"):
            from ddptop.analysis import noise_scale  # numpy: only where a summary is built

            noise_by_size = {n: noise_scales.get(e["config_id"]) for n, e in by_size.items()}
            noise_scale.time_to_loss_rows(
                rows, figures.speedups, {n: s for n, s in noise_by_size.items() if s is not None},
                {p.world_size: float(p.global_batch) for p in points})
        table["recommendation"] = stats.recommendation(rows, unit, plan.efficiency_threshold)
        table["projection"] = projection.project(table, {e["config_id"]: e for e in members}, plan.internode_gbps)
        if table.get("not_data_parallel"):  # its ranks each train alone: nothing here is a scaling measurement
            table["recommendation"] = (f"No scaling to judge: {table['not_data_parallel']}; the rows are the step "
                                       "times of ranks that each train alone.")
            table["projection"] = None  # nor anything to project beyond this node
            _not_scaling(rows, table.get("not_data_parallel_at") or ())
        tables.append(table)
    return tables


NO_DDP_BASELINE = "a script has no no-DDP baseline: speedup is against the smallest N measured"
SERIAL_BASELINE = ("N=1 ran without a process group: it is the serial baseline (as a kernel's no-DDP row), and "
                   "speedup is against it")


def _script_facts(rows: list[dict[str, Any]], by_size: Mapping[int, Mapping[str, Any]]) -> dict[str, Any]:
    """What a script's table says beside its figures: the batch as observed at each N and the scaling it
    makes (weak, strong, changed or unknown: ``script_steps.observed_scaling``), that there is no no-DDP row,
    and whether its ranks trained one model together at all (``not_data_parallel``); each row's batch."""
    batches = {n: ((e["batch_size"], e["global_batch"]) if e.get("global_batch") else None) for n, e in by_size.items()}
    observed = script_steps.observed_scaling(batches)
    facts: dict[str, Any] = {"scaling": observed.kind, "batch_meaning": "as observed", "batch_observed": observed.text,
                             "no_ddp_note": NO_DDP_BASELINE}
    # configuration by configuration: N=1 without a process group is the serial baseline, as a kernel's no-DDP
    # row; a larger N is not data-parallel where its ranks did not train one model together
    smallest = by_size[min(by_size)]
    if smallest["world_size"] == 1 and (smallest.get("script") or {}).get("process_group") is False:
        facts["no_ddp_note"] = SERIAL_BASELINE
    problems = {n: script_steps.data_parallel_problem(e.get("script")) for n, e in sorted(by_size.items())}
    apart = [n for n, problem in problems.items() if problem]
    if apart:
        found = problems[apart[0]] or ""
        where = ", ".join(f"N={n}" for n in apart)
        facts["not_data_parallel"] = found.replace("not data-parallel:", f"not data-parallel at {where}:", 1)
        facts["not_data_parallel_at"] = apart
    own = next((b for e in by_size.values()
                if (b := script_steps.own_backend(e["backend"], script_steps.group_backend(e.get("script"))))), None)
    if own:  # the script's init_process_group chose another backend than the launch's: the table says both
        facts["group_backend"] = own
    for row in rows:
        entry = by_size[row["world_size"]]
        row["batch_per_rank"] = entry["batch_size"] if entry.get("global_batch") else None
        row["global_batch"] = entry.get("global_batch") or None
    return facts


def _unmodelled(rows: list[dict[str, Any]]) -> None:
    """The rows of ranks that each train alone: no model of scaling is read from them (no Karp-Flatt serial
    fraction, no gradients synchronised per epoch, no communication estimated from N=1's step)."""
    for row in rows:
        row.update(karp_flatt=None, epoch=None, comm_estimate_from_t1_s=None, bandwidth_from_t1_gbs=None)
        row.pop("karp_flatt_ci", None)  # its interval came with its value (``stats.scaling_rows``): gone with it


def _not_scaling(rows: list[dict[str, Any]], apart: Sequence[int]) -> None:
    """The rows at the world sizes whose ranks each train alone: their step and examples/s are measured, but no
    speedup, efficiency or relative cost of one training over N ranks (there is none), with no interval."""
    for row in rows:
        if row["world_size"] in apart:
            for key in ("speedup", "efficiency", "relative_cost", "relative_su"):
                row[key] = row[f"{key}_ci"] = None


def table_batch(entry: Mapping[str, Any]) -> int:
    """The batch a table is of: per rank under weak scaling, global under strong."""
    return entry["batch_size"] if entry["scaling"] == "weak" else entry["global_batch"]


def charged_cores(plan: PlanFigures, world_size: int, threads: int = 0, device: str = "") -> float:
    """The cores one rank is charged in service units: a CPU rank of a thread sweep or of the CPU part its own
    threads (its bound cores), else --cores-per-rank where given, else the plan's share of the cores at N."""
    if threads and device == "cpu":
        return threads
    if plan.cores_per_rank is not None:
        return plan.cores_per_rank
    return rank_threads(plan, world_size, threads)


def rank_threads(plan: PlanFigures, world_size: int, threads: int = 0) -> int:
    """Each rank's threads: a thread sweep's own count, else the plan's share of the cores at N (as
    ``ddptop.run.plan_records.Plan.threads_for`` gives a launch)."""
    return threads or plan.threads_per_rank.get(world_size) or 1


def _add_model_figures(
    row: dict[str, Any], entry: dict[str, Any], reference: dict[str, Any], baseline: dict[str, Any] | None, plan: PlanFigures,
    karp_flatt: Measured | None = None,
) -> None:
    """Karp-Flatt (``stats.scaling_rows``'), cost per million examples, data moved per epoch and the
    compute/communication split."""
    n = row["world_size"]
    put(row, "karp_flatt", karp_flatt)
    if karp_flatt is None or karp_flatt.replicates is None:
        del row["karp_flatt_ci"]  # the flat shape's interval only where there is one to give
    row["cost_per_million"] = (  # one GPU per rank; on the CPU the price is per rank-hour
        formulas.cost_per_million(n, row["ex_sec_total"], plan.price_per_gpu_hour)
        if plan.price_per_gpu_hour is not None and row["ex_sec_total"]
        else None
    )
    grad_bytes, params = entry.get("grad_bytes"), entry.get("params")
    row["epoch"] = (
        formulas.epoch_transfer(grad_bytes, params, plan.epoch_examples, entry["global_batch"], n)
        if grad_bytes and params
        else None
    )
    # energy per example from the GPUs' energy counters over the measured steps (telemetry); the relative
    # energy is to the reference N as relative cost is: above 1, each example costs more joules
    energy = (entry.get("telemetry") or {}).get("energy_per_example_j")
    reference_energy = (reference.get("telemetry") or {}).get("energy_per_example_j")
    row["examples_per_joule"] = 1.0 / energy if energy else None
    row["relative_energy"] = energy / reference_energy if energy and reference_energy else None
    comm = entry.get("communication") or {}
    row["compute_s"] = comm.get("compute_s")
    row["exposed_comm_s"] = comm.get("exposed_comm_s")
    row["exposed_comm_fraction"] = comm.get("exposed_comm_fraction")
    buckets = comm.get("buckets") or {}
    row["bucket_comm_s"] = buckets.get("in_flight_s")
    # The estimate from t1 takes the single-device time as the compute of every N ("Problem 2 - Data
    # Parallelism in Pytorch" uses one GPU without DDP); the plain model's time when we have it.
    single = baseline if baseline is not None else (reference if reference["world_size"] == 1 else None)
    if model_kind(entry.get("model") or "").data_wait:  # its step holds the data wait too: step_less_wait compares it instead
        single = None
    row["comm_estimate_from_t1_s"] = (
        formulas.comm_estimate_from_t1(
            row["sec_iter"], single["stats"]["sec_iter"]["p50"], entry["batch_size"], single["batch_size"]
        )
        if single is not None and n > 1
        else None
    )
    allreduce = comm.get("allreduce_bytes_per_rank")
    estimate = row["comm_estimate_from_t1_s"]
    row["bandwidth_from_t1_gbs"] = (
        allreduce / formulas.GIB / estimate if allreduce and estimate and estimate > 0 else None
    )


def rows_by_config(tables: Iterable[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Every table's rows by configuration id (a configuration is in one table at most)."""
    return {row["config_id"]: row for table in tables for row in table["rows"]}


def batch_throughput(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Throughput per batch size for each model/N/backend with more than one batch: the batch-size sweep up to
    out of memory, with the 95% interval of each throughput."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    two_devices = len({e.get("device") for e in entries}) > 1
    for entry in entries:
        if entry["mode"] != "ddp" or (entry.get("variant") or variants.DEFAULT) != variants.DEFAULT:
            continue
        strategy = entry.get("strategy") or strategies.DDP  # each strategy's sweep a table of its own
        key = (entry["model"], entry["world_size"], entry["backend"], entry["bucket_cap_mb"], strategy,
               entry.get("device") or "", entry.get("threads") or 0)  # a sweep's per device and thread count
        groups.setdefault(key, []).append(entry)
    tables = []
    for (model, world_size, backend, cap, strategy, device, threads), members in groups.items():
        if len({e["batch_size"] for e in members}) < 2:
            continue
        rows = []
        for entry in sorted(members, key=lambda e: e["batch_size"]):
            stats = entry["stats"] or {}
            p50 = stats["sec_iter"]["p50"] if stats else None
            measured_ok = bool(p50) and entry["status"] == "ok"
            rows.append(
                {
                    "batch_size": entry["batch_size"],
                    "global_batch": entry["global_batch"],
                    "status": entry["status"],
                    "reason": entry["reason"],
                    "sec_iter": p50,
                    "sec_iter_ci": stats.get("p50_ci") if measured_ok else None,
                    "ex_sec_total": entry["global_batch"] / p50 if measured_ok else None,
                    "ex_sec_total_ci": stats.get("ex_sec_total_p50_ci") if measured_ok else None,
                    "peak_memory_bytes": entry["peak_memory_bytes"],
                    **({"counted_memory_bytes": entry["counted_memory_bytes"]}
                       if entry.get("counted_memory_bytes") is not None else {}),
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
                **({"strategy": strategy} if strategy != strategies.DDP else {}),
                **({"threads": threads} if threads else {}),
                **({"device": device} if device and two_devices else {}),
            }
        )
    return tables


def data_parallel_vs_ddp(entries: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """DataParallel against DDP at the same N, model and batch, the comparison of "Problem 2 - Data
    Parallelism in Pytorch" and of "Benchmarking Distributed Training and Inference on NVIDIA's A6000 GPUs"."""
    ddp = {(e["model"], e["batch_size"], e["world_size"]): e for e in entries
           if e["mode"] == "ddp" and e["stats"] and as_written(e)}
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
                "ddp_ex_sec_total": other["global_batch"] / ddp_p50 if other and ddp_p50 else None,
                "ddp_speedup_over_dp": dp_p50 / ddp_p50 if dp_p50 and ddp_p50 else None,
            }
        )
    return rows


def compare_with_collectives(entries: Sequence[dict[str, Any]], collectives: list[dict[str, Any]]) -> None:
    """Put the collective kernel's allreduce bandwidth at DDP's bucket size next to what DDP achieved
    (written into each entry's ``communication.buckets.achieved``)."""
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


# -- the live view ------------------------------------------------------------------------------------------


# What the tables read of an entry besides its p50 and communication figures.
_ENTRY_INPUTS = (
    "config_id", "label", "mode", "model", "scaling", "batch_size", "global_batch", "world_size", "backend",
    "bucket_cap_mb", "grad_bytes", "params", "device", "threads",
)
_COMM_INPUTS = ("compute_s", "exposed_comm_s", "exposed_comm_fraction", "allreduce_bytes_per_rank")


def _inputs_key(entry: dict[str, Any]) -> tuple:
    """Everything of ``entry`` that the tables depend on, as one comparable value."""
    summary = entry.get("stats")
    comm = entry.get("communication") or {}
    return (
        tuple(entry.get(name) for name in _ENTRY_INPUTS),
        summary["sec_iter"]["p50"] if summary is not None else None,
        tuple(comm.get(name) for name in _COMM_INPUTS),
        (comm.get("buckets") or {}).get("in_flight_s"),
    )


class LiveScaling:
    """The scaling tables of a run in progress, rebuilt only when their inputs changed.

    ``rows(entries)`` returns the rows by configuration id; ``tables`` the tables they came from (with the
    Amdahl fit and the recommendation). Both are the cache's own objects, shared between calls that saw the
    same inputs: read them, do not change them. One thread at a time may call a given instance; the result
    of a call is never changed afterwards, so it may be handed to another thread.
    """

    def __init__(self, plan: PlanFigures) -> None:
        self.plan = plan
        self.tables: list[dict[str, Any]] = []
        self._key: tuple | None = None
        self._rows: dict[str, dict[str, Any]] = {}

    def rows(self, entries: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any]]:
        """Speedup, efficiency, exposed communication and the rest of each row, by configuration id."""
        key = tuple(_inputs_key(entry) for entry in entries)
        if key != self._key:
            tables = scaling_tables(entries, self.plan)
            self.tables, self._rows, self._key = tables, rows_by_config(tables), key
        return self._rows
