"""summary.csv: one row per configuration, its figures (step time, scaling, communication, load, intervals,
verdict) in columns; columns added later are appended, so that the earlier ones keep their places."""

from __future__ import annotations

import csv
import io
from typing import Any

from ddptop.analysis.stats import PERCENTILES
from ddptop.protocol.modelspec import display_name
from ddptop.report.load_tables import GPM_LOAD_KEYS, memory_peak, rss_peak
from ddptop.report.schema import (Estimate, ci_of, Communication, GpuIdle, ScalingRow, StepFigures, Straggler, Summary, Validity,
                                  WindowLoad)

CSV_SPEC_FIELDS = (
    "config_id", "model", "mode", "label", "world_size", "nnodes", "batch_size", "global_batch", "backend",
    "device", "scaling", "image_size", "status", "reason", "params", "peak_memory_bytes",
)


CSV_LOAD_FIELDS = (
    "util_mean", "util_max", "mem_peak_bytes", "power_mean_w", "energy_j", "energy_per_example_j", "host_cpu_mean",
)


CSV_COMM_FIELDS = ("compute_s", "exposed_comm_s", "exposed_comm_fraction", "allreduce_bytes_per_rank")


CSV_INTERVAL_FIELDS = ("sec_iter_p50", "speedup", "efficiency", "relative_cost", "relative_su")


def csv_text(summary: Summary) -> str:
    scaling_by_config = summary.scaling_rows()
    header = list(CSV_SPEC_FIELDS) + ["samples", "mean_s", "std_s"]
    header += [f"sec_iter_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_replica_p{q}" for q in PERCENTILES]
    header += [f"ex_sec_total_p{q}" for q in PERCENTILES]
    header += ["speedup", "efficiency", "relative_cost", "relative_su", "karp_flatt", "cost_per_million"]
    header += list(CSV_COMM_FIELDS) + ["comm_estimate_from_t1_s", "ddp_busbw_gbs"]
    header += list(CSV_LOAD_FIELDS) + ["rank_peak_rss_bytes"]
    # appended, so the columns above keep their places: the 95% intervals and how far to trust the row
    header += [f"{key}_{end}" for key in CSV_INTERVAL_FIELDS for end in ("low", "high")]
    header += ["p50_precision", "stop_reason", "unstable", "disturbed", "disturbed_reason"]
    header += list(GPM_LOAD_KEYS) + ["verdict"]
    header += ["straggler_rank", "straggler_evidence"]
    header += ["seq_len", "tok_sec_total_p50", "tok_sec_total_p50_low", "tok_sec_total_p50_high"]
    header += ["variant", "strategy", "counted_memory_bytes"]  # ddptop tune's, --strategies', the CPU's count
    # the readings behind the load figures, the memory peak the table shows, the GPUs' idle share
    header += ["telemetry_readings", "telemetry_coarse", "mem_peak_shown_bytes", "mem_peak_source",
               "gpu_idle_share", "gpu_idle_share_low", "gpu_idle_share_high", "gpu_idle_readings"]
    header += ["threads_per_rank"]  # each rank's threads: a thread sweep's count, else the plan's share
    # a user's script's: its wait for data as a share of the step, its batch and scaling as observed
    header += ["data_wait_share", "data_wait_share_low", "data_wait_share_high", "observed_batch_per_rank",
               "observed_scaling"]
    alone = {table.rows[0].config_id for table in summary.scaling if len(table.rows) == 1}
    scaling_kind = {row.config_id: table.scaling for table in summary.scaling for row in table.rows
                    if table.batch_observed is not None}
    buffer = io.StringIO()
    writer = csv.writer(buffer, lineterminator="\n")
    writer.writerow(header)
    for entry in summary.configs:
        stats = entry.stats or StepFigures()
        # each a Config field; the model as the tables name it (a script by its file: its command is summary.json's)
        row: list[Any] = [display_name(entry.model) if f == "model" else getattr(entry, f) for f in CSV_SPEC_FIELDS]
        row += [stats.n, stats.mean, stats.std]
        for figures in (stats.sec_iter, stats.ex_sec_replica, stats.ex_sec_total):
            row += [figures.at(f"p{q}") for q in PERCENTILES]
        scale = scaling_by_config.get(entry.config_id) or ScalingRow()
        # a table's only row has no figure relative to another (its reference values are by definition)
        row += [None] * 5 if entry.config_id in alone else [
            scale.speedup, scale.efficiency, scale.relative_cost, scale.relative_su, scale.karp_flatt]
        row.append(scale.cost_per_million)
        comm = entry.communication or Communication()
        row += [comm.compute_s, comm.exposed_comm_s, comm.exposed_comm_fraction, comm.allreduce_bytes_per_rank]
        row.append(scale.comm_estimate_from_t1_s)
        achieved = comm.buckets.achieved if comm.buckets else None
        row.append(achieved.busbw_gbs if achieved else None)
        load = entry.telemetry or WindowLoad()
        row += [load.util_mean, load.util_max, load.mem_peak_bytes, load.power_mean_w, load.energy_j,
                load.energy_per_example_j, load.host_cpu_mean]
        row.append(rss_peak(load))
        intervals = [ci_of(stats.p50)] + [ci_of(scale.figure(k)) for k in CSV_INTERVAL_FIELDS[1:]]
        row += [interval[end] if interval else None for interval in intervals for end in (0, 1)]
        validity = entry.validity or Validity()
        row += [stats.p50_precision, entry.stop_reason, entry.unstable,
                validity.disturbed, validity.reasons[0] if validity.reasons else None]
        row += [load.gpm(k) for k in GPM_LOAD_KEYS] + [entry.verdict.text if entry.verdict else None]
        straggler = entry.straggler or Straggler()
        row += [straggler.rank, straggler.evidence]
        tokens, tokens_ci = stats.tok_sec_total, ci_of(stats.tok_sec_total_p50)
        row += [entry.seq_len, tokens.p50 if tokens else None] + (list(tokens_ci) if tokens_ci else [None, None])
        row += [entry.variant, entry.strategy, entry.counted_memory_bytes]
        idle = load.gpu_idle or GpuIdle()
        row += [load.readings, load.coarse, *(memory_peak(entry, load) if entry.telemetry else (None, None))]
        row += [idle.share, *(ci_of(idle.share) or (None, None)), idle.readings]
        row.append(entry.threads or summary.plan.threads_for(entry.world_size))
        wait = entry.data_wait
        row += [wait.share if wait else None, *((ci_of(wait.share) if wait and ci_of(wait.share) else None) or (None, None))]
        row += [entry.batch_size if not entry.kind.own_batch and entry.global_batch else None,
                scaling_kind.get(entry.config_id)]
        writer.writerow(["" if v is None else v.value if isinstance(v, Estimate) else v for v in row])
    return buffer.getvalue()
