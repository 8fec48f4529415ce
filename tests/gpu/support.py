"""What the GPU suite needs beside ddptop: whether this machine can run it (decided once), nvidia-smi's own
readings, and the readers of what a run wrote that the suite's assertions use.

Each reader takes what ddptop wrote (summary.json, telemetry.jsonl, doctor's checks, the JSON of ``ddptop gpus``
and ``ddptop topo``) or what nvidia-smi printed, and returns the problems it found as lines: an empty list
means none, so a test asserts ``== []`` and a failure prints what differed. ``tests/gpu/test_readers.py`` runs
every reader on this machine against the files of a real H100 run (``tests/data/h100``, ``tests/gpu/data``).

Standard library and ddptop only: importing this module starts nothing (the suite's module decides once, at
collection, whether it runs).
"""

from __future__ import annotations

import bisect
import functools
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any

from ddptop.analysis.step_bound import IDLE_BLOCK_S
from ddptop.analysis.traces import TRACE_COST_LIMIT

FAKE_ENV = "DDPTOP_FAKE_NVML"


# -- whether this machine runs the suite ------------------------------------------------------------------------

@dataclass(frozen=True)
class GpuNode:
    """The GPUs the suite runs on, as NVML and torch see them."""

    nvml_gpus: int  # GPUs (or MIG instances) ddptop may run on, as NVML lists them
    cuda_count: int  # torch.cuda.device_count(): the GPUs visible to a rank
    capability: tuple[int, int]  # of cuda:0
    torch: str
    nvidia_smi: str | None  # its path, None where it is not on PATH

    @property
    def world_sizes(self) -> list[int]:
        """1, 2, 4, ... up to the visible GPUs, and their count itself: the default plan's world sizes."""
        sizes, n = [], 1
        while n <= self.cuda_count:
            sizes.append(n)
            n *= 2
        if sizes[-1] != self.cuda_count:
            sizes.append(self.cuda_count)
        return sizes


TORCH_QUESTION = (
    "import json, torch\n"
    "ok = torch.cuda.is_available()\n"
    "print(json.dumps({'torch': torch.__version__, 'cuda': ok, 'count': torch.cuda.device_count() if ok else 0,\n"
    "                  'capability': list(torch.cuda.get_device_capability(0)) if ok else None}))\n"
)


def ask_torch() -> dict[str, Any] | str:
    """torch's view of CUDA, from a fresh interpreter that exits at once (no CUDA context stays in the test
    process, where NVML would list it beside the ranks); a string says why there is no answer."""
    try:
        done = subprocess.run([sys.executable, "-c", TORCH_QUESTION], capture_output=True, text=True, timeout=300,
                              stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return lines[-1] if lines else f"exit {done.returncode}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"an answer that is not JSON: {done.stdout[-200:]!r}"


def decide(fake: str | None, read_inventory: Callable[[], Any],
           ask: Callable[[], dict[str, Any] | str]) -> GpuNode | str:
    """The node the suite runs on, or the reason it is skipped: a real NVML listing a GPU ddptop may use, and a
    torch that sees CUDA. The simulated NVML never counts."""
    if fake:
        return f"{FAKE_ENV}={fake} is set: the GPU suite reads the real driver only (unset it to run it)"
    inventory = read_inventory()
    if inventory.problem or not inventory.gpus:
        return f"no NVIDIA GPU: {inventory.problem or 'NVML lists no GPU'}"
    if not inventory.usable_gpus:
        return f"no usable NVIDIA GPU: {inventory.usable_problem}"
    answer = ask()
    if isinstance(answer, str):
        return f"torch could not be asked about CUDA: {answer}"
    if not answer.get("cuda") or not answer.get("count"):
        return (f"torch {answer.get('torch')} cannot use the GPU: torch.cuda.is_available() is False "
                f"(NVML lists {len(inventory.usable_gpus)} GPU(s); a CPU-only build of torch?)")
    return GpuNode(nvml_gpus=len(inventory.usable_gpus), cuda_count=int(answer["count"]),
                   capability=tuple(answer["capability"]), torch=str(answer["torch"]),
                   nvidia_smi=shutil.which("nvidia-smi"))


@functools.cache
def gpu_node() -> GpuNode | str:
    """Decided once per process, at the suite's collection."""
    from ddptop.telemetry.inventory import read_inventory

    return decide(os.environ.get(FAKE_ENV), read_inventory, ask_torch)


# -- NVML against nvidia-smi -------------------------------------------------------------------------------------

# what the suite asks nvidia-smi beside a run: every 500 ms, one line per GPU, timestamps in UTC (TZ=UTC)
SMI_FIELDS = ("timestamp", "index", "utilization.gpu", "memory.used", "power.draw", "clocks.sm")
SMI_LOOP = ["--query-gpu=" + ",".join(SMI_FIELDS), "--format=csv,noheader,nounits", "-lms", "500"]
_SMI_HEADER_ALIASES = {"clocks.current.sm": "clocks.sm"}  # what its header calls the field clocks.sm asks for
_METRIC_OF_FIELD = {"utilization.gpu": "util", "memory.used": "mem_used_mib", "power.draw": "power_w",
                    "clocks.sm": "sm_clock_mhz"}

# Per metric: how far ddptop's reading may lie outside the two nvidia-smi readings taken just before and just
# after it (the same unit as nvidia-smi's), and the share of readings that must lie within. Both samplers read
# the same NVML counters at different instants, so they differ only where the load changed between the
# instants. On the H100 (102 readings beside nvidia-smi -lms 500): memory 100% within 1 MiB; SM clock 99%
# within 15 MHz; power 97% within 10 W, 100% within 20 W; utilisation 88% within 5 points, 91% within 10.
METRICS = {
    "util": (10.0, 0.75),  # percentage points
    "mem_used_mib": (8.0, 0.90),  # MiB
    "power_w": (20.0, 0.90),  # W
    "sm_clock_mhz": (15.0, 0.90),  # MHz
}
MAX_GAP_S = 1.5  # nvidia-smi readings around ddptop's further apart than this do not bracket it
MIN_MATCHED = 10  # ddptop readings bracketed by nvidia-smi's
MIN_BUSY = 3  # of them while the GPU was busy (both nvidia-smi readings and ddptop's at 20% or more)
BUSY_UTIL = 20


def start_smi_log(smi: str, path: str) -> subprocess.Popen:
    """nvidia-smi printing SMI_FIELDS every 500 ms into ``path`` until stopped."""
    with open(path, "w", encoding="utf-8") as out:
        return subprocess.Popen([smi, *SMI_LOOP], stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                env=dict(os.environ, TZ="UTC"))


def stop(process: subprocess.Popen) -> None:
    """As Ctrl-C stops nvidia-smi's loop (its last lines written), then harder if it lingers."""
    for send, wait_s in ((lambda: process.send_signal(signal.SIGINT), 5), (process.terminate, 5), (process.kill, 30)):
        if process.poll() is not None:
            return
        send()
        try:
            process.wait(timeout=wait_s)
            return
        except subprocess.TimeoutExpired:
            continue


def _number(text: str | None) -> float | None:
    """nvidia-smi's value without its unit; None for [N/A], [Not Supported] and the like."""
    token = (text or "").split()[:1]
    try:
        return float(token[0]) if token else None
    except ValueError:
        return None


def parse_smi_csv(text: str, fields: tuple[str, ...] = SMI_FIELDS) -> list[dict[str, Any]]:
    """nvidia-smi's --query-gpu CSV as readings: ``t`` (its timestamp read as UTC), ``index`` (0 where not
    asked), and the metrics of ``METRICS``. With a header line (``--format=csv``) the fields are the header's
    and each value's unit is dropped; lines that are not readings (a warning) are skipped."""
    lines = [line for line in text.splitlines() if line.strip()]
    if lines and lines[0].startswith("timestamp"):
        names = (re.sub(r"\s*\[.*\]$", "", name.strip()) for name in lines[0].split(","))
        fields = tuple(_SMI_HEADER_ALIASES.get(name, name) for name in names)
        lines = lines[1:]
    rows = []
    for line in lines:
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != len(fields):
            continue
        values = dict(zip(fields, parts))
        try:
            t = datetime.strptime(values["timestamp"], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=timezone.utc)
        except (KeyError, ValueError):
            continue
        index = _number(values.get("index"))
        row: dict[str, Any] = {"t": t.timestamp(), "index": 0 if index is None else int(index)}
        for field, metric in _METRIC_OF_FIELD.items():
            row[metric] = _number(values.get(field))
        rows.append(row)
    return rows


def telemetry_records(path: str) -> list[dict[str, Any]]:
    """The telemetry lines of a run's telemetry.jsonl (damaged lines left out, as ddptop's reader does)."""
    records = []
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict) and record.get("type") == "telemetry":
                records.append(record)
    return records


def ddptop_readings(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """ddptop's own per-GPU readings (its sampler's instant ``t``), in nvidia-smi's units."""
    readings = []
    for record in records:
        for gpu in record.get("gpus") or ():
            if gpu.get("t") is None or gpu.get("index") is None:
                continue
            used = gpu.get("mem_used")
            readings.append({"t": gpu["t"], "index": gpu["index"], "util": gpu.get("util"),
                             "mem_used_mib": None if used is None else used / 2 ** 20,
                             "power_w": gpu.get("power_w"), "sm_clock_mhz": gpu.get("sm_clock_mhz")})
    return readings


def compare_with_smi(readings: list[dict[str, Any]], smi_rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Each ddptop reading against the two nvidia-smi readings of the same GPU just before and after it."""
    by_index: dict[int, list[dict[str, Any]]] = {}
    for row in smi_rows:
        by_index.setdefault(row["index"], []).append(row)
    for rows in by_index.values():
        rows.sort(key=lambda row: row["t"])
    result: dict[str, Any] = {"readings": len(readings), "matched": 0, "busy": 0, "metrics": {
        metric: {"compared": 0, "inside": 0, "outside": [], "differences": []} for metric in METRICS}}
    for reading in readings:
        rows = by_index.get(reading["index"]) or []
        at = bisect.bisect_left([row["t"] for row in rows], reading["t"])
        if at == 0 or at == len(rows):
            continue
        before, after = rows[at - 1], rows[at]
        if after["t"] - before["t"] > MAX_GAP_S:
            continue
        result["matched"] += 1
        if min(before["util"] or 0, after["util"] or 0, reading["util"] or 0) >= BUSY_UTIL:
            result["busy"] += 1
        nearest = before if reading["t"] - before["t"] <= after["t"] - reading["t"] else after
        for metric, (tolerance, _share) in METRICS.items():
            ours, first, second = reading[metric], before[metric], after[metric]
            if ours is None and first is None and second is None:
                continue  # neither reads it on this GPU
            entry = result["metrics"][metric]
            entry["compared"] += 1
            if ours is None or first is None or second is None:
                entry["outside"].append((reading["index"], round(reading["t"], 3), ours, first, second))
                continue
            if min(first, second) - tolerance <= ours <= max(first, second) + tolerance:
                entry["inside"] += 1
            else:
                entry["outside"].append((reading["index"], round(reading["t"], 3), ours, first, second))
            if nearest[metric] is not None:
                entry["differences"].append(ours - nearest[metric])
    return result


def smi_problems(comparison: dict[str, Any]) -> list[str]:
    """Where ddptop's readings and nvidia-smi's disagree beyond ``METRICS``' tolerances."""
    problems = []
    if comparison["matched"] < MIN_MATCHED:
        problems.append(f"only {comparison['matched']} of {comparison['readings']} ddptop readings lie between two "
                        f"nvidia-smi readings of their GPU (at least {MIN_MATCHED} wanted)")
    if comparison["busy"] < MIN_BUSY:
        problems.append(f"only {comparison['busy']} matched readings while the GPU was busy (util >= {BUSY_UTIL}%; "
                        f"at least {MIN_BUSY} wanted)")
    for metric, (tolerance, share) in METRICS.items():
        entry = comparison["metrics"][metric]
        if not entry["compared"]:
            problems.append(f"{metric}: never compared")
            continue
        inside = entry["inside"] / entry["compared"]
        if inside < share:
            problems.append(f"{metric}: {entry['inside']} of {entry['compared']} readings within {tolerance:g} of "
                            f"nvidia-smi's around them ({inside:.0%}, {share:.0%} wanted); first outside (GPU, t, "
                            f"ddptop, nvidia-smi before, after): {entry['outside'][:3]}")
        if entry["differences"] and abs(statistics.median(entry["differences"])) > tolerance:
            problems.append(f"{metric}: median difference from the nearest nvidia-smi reading "
                            f"{statistics.median(entry['differences']):+.2f}, beyond {tolerance:g}")
    return problems


def gpm_readings(records: list[dict[str, Any]]) -> int:
    """GPU readings holding GPM's SM activity (Hopper and later; the first reading of a GPU has none)."""
    return sum(1 for record in records for gpu in record.get("gpus") or () if gpu.get("sm_active") is not None)


# -- summary.json ------------------------------------------------------------------------------------------------

def ok_configs(summary: dict[str, Any]) -> list[dict[str, Any]]:
    return [c for c in summary["configs"] if c.get("status") == "ok"]


def config_dtypes(config: dict[str, Any]) -> set[str]:
    """The dtypes a configuration's FLOPs ran in: each op kind's (convolutions and matmuls may differ), else
    the one its count names."""
    flops = config.get("flops") or {}
    kinds = flops.get("by_kind")
    if kinds:
        return {kind["dtype"] for kind in kinds if kind.get("flops")}
    return {flops["dtype"]} if flops.get("dtype") else set()


def ceiling_problems(summary: dict[str, Any]) -> list[str]:
    """Every measured configuration has its FLOPs counted, a ceiling measured in each dtype it ran in (the
    summary's ``ceilings``), and its MFU against that ceiling (``flops.mfu_ceiling``, between 0 and 1)."""
    measured = {c.get("dtype") for c in summary.get("ceilings") or () if (c.get("flops_per_s") or 0) > 0}
    problems = []
    for config in ok_configs(summary):
        flops = config.get("flops") or {}
        what = []
        if not flops.get("per_step"):
            what.append("no FLOP count")
        missing = sorted(config_dtypes(config) - measured)
        if missing:
            what.append(f"no measured ceiling in {', '.join(missing)} (measured: {', '.join(sorted(measured)) or 'none'})")
        mfu = flops.get("mfu_ceiling")
        if mfu is None or not 0 < mfu < 1:
            what.append(f"mfu_ceiling {mfu}")
        if flops.get("ceiling") is None:
            what.append("no flops.ceiling")
        if what:
            problems.append(f"{config['config_id']}: " + "; ".join(what))
    return problems


TRACE_IDLE_TOLERANCE = 0.15  # the traced idle share against NVML's over the measured steps, as a share of the step


def trace_problems(config: dict[str, Any], run_dir: str, tolerance: float = TRACE_IDLE_TOLERANCE) -> list[str]:
    """A GPU configuration's profiler trace against what NVML read: the breakdown is the device's (kernels were
    recorded, so CUPTI worked), every rank's file is where the summary says, busy and idle make up the step,
    and, where the traced steps ran at the measured pace (``TRACE_COST_LIMIT``) and the measured window held an
    NVML reading that counts, the traced idle share lies within ``tolerance`` of the idle share NVML's
    utilisation implies over the measured steps (100% less the utilisation: the share of time no kernel ran). The trace's steps run after
    the measured ones, in the same launch, so the two describe the same step at different moments."""
    name = config.get("config_id", "?")
    trace = config.get("trace") or {}
    breakdown = trace.get("breakdown") or {}
    if breakdown.get("device") != "cuda" or not (breakdown.get("gpu_work") or {}).get("count"):
        return [f"{name}: no GPU kernel in the trace (device {breakdown.get('device')}, notes {breakdown.get('notes')})"]
    problems = [f"{name}: {found['path']} missing" for found in trace.get("files") or ()
                if not os.path.exists(os.path.join(run_dir, found["path"]))]
    if not trace.get("files"):
        problems.append(f"{name}: no trace file")
    figures = breakdown.get("figures") or {}
    busy, idle = (figures.get("busy_s") or {}).get("median"), (figures.get("idle_s") or {}).get("median")
    if busy is None or idle is None or abs(busy + idle - 1) > 1e-6:
        problems.append(f"{name}: busy {busy} and idle {idle} do not make up the step")
        return problems
    telemetry = config.get("telemetry") or {}
    nvml = (telemetry.get("gpu_idle") or {}).get("share")
    window = telemetry.get("window_s")
    ratio = trace.get("cost_ratio")
    if ratio is None or ratio > TRACE_COST_LIMIT:
        pass  # the profiler slowed the traced steps (H200, resnet50 bs32: 1.36-1.54x): their idle is not the measured's
    elif nvml is None and window is not None and window < IDLE_BLOCK_S:
        pass  # measured for less than NVML's sample period: no reading counts, nothing to set the trace against
    elif nvml is None:
        problems.append(f"{name}: no NVML idle share to set the trace against (measured {window} s)")
    elif abs(idle - nvml) > tolerance:
        problems.append(f"{name}: the trace's GPU idle {idle:.0%} against NVML's {nvml:.0%}, more than "
                        f"{tolerance:.0%} of the step apart")
    return problems


def _rank_batch(config: dict[str, Any]) -> int:
    if config.get("scaling") == "strong":
        return config["global_batch"] // config["world_size"]
    return config["batch_size"]


def transformer_flops_problems(summary: dict[str, Any], tolerance: float = 0.01) -> list[str]:
    """Every measured transformer configuration: FLOPs per step within ``tolerance`` of 6 x parameters x tokens
    plus the attention term (``bench_kernels.transformer.independent_flops``: 14 T d per token and layer, what
    a fused attention kernel costs; the math fallback's 12 T d lies 1.8% below it for gpt-tiny at 256
    tokens), and tokens/s = examples/s x seq_len."""
    from ddptop.protocol.catalog import TRANSFORMER_PRESETS
    from bench_kernels.transformer import independent_flops

    problems = []
    found = [c for c in ok_configs(summary) if c.get("seq_len")]
    if not found:
        return ["no measured transformer configuration"]
    for config in found:
        shape = TRANSFORMER_PRESETS[config["model"]]
        expected = independent_flops(shape, _rank_batch(config), config["seq_len"])
        counted = (config.get("flops") or {}).get("per_step")
        if not counted or abs(counted / expected - 1) > tolerance:
            problems.append(f"{config['config_id']}: {counted} FLOPs per step against {expected} counted from the "
                            f"shape (6PT plus attention), beyond {tolerance:.0%}")
        stats = config["stats"]
        tokens = (stats.get("tok_sec_total") or {}).get("p50")
        examples = stats["ex_sec_total"]["p50"]
        if tokens is None or abs(tokens - examples * config["seq_len"]) > 1e-9 * tokens:
            problems.append(f"{config['config_id']}: tokens/s {tokens} is not examples/s {examples} x "
                            f"{config['seq_len']}")
    return problems


# SDPA's fused GPU kernels (torch's flop counter has a formula for each, forward and backward): flash attention,
# cuDNN's (which recent torch prefers on Hopper and Blackwell where it applies) and the memory-efficient one
FUSED_ATTENTION = ("aten._scaled_dot_product_flash_attention", "aten._scaled_dot_product_cudnn_attention",
                   "aten._scaled_dot_product_efficient_attention")


def fused_attention(ops: dict[str, int]) -> list[str]:
    """The fused attention kernels among ``ops`` (op name -> FLOPs, as FlopCounterMode counts them)."""
    return [op for op in FUSED_ATTENTION if ops.get(op)]


def gpt_attention_problems(answer: dict[str, Any]) -> list[str]:
    """One step of the GPT kernel's model on the GPU: its attention ran one fused kernel, forward and backward,
    and no bmm (the math fallback's op: the model has no other batched matmul)."""
    ops = answer.get("ops") or {}
    forward = fused_attention(ops)
    problems = []
    if len(forward) != 1:
        problems.append(f"fused attention kernels {forward}, one wanted; ops: {sorted(ops)}")
    if [op for op in forward if not ops.get(op + "_backward")]:
        problems.append(f"no backward of {forward}; ops: {sorted(ops)}")
    if ops.get("aten.bmm"):
        problems.append(f"bmm ran ({ops['aten.bmm']} FLOPs): the math fallback of scaled_dot_product_attention")
    if answer.get("total") != sum(ops.values()):
        problems.append(f"total {answer.get('total')} is not the sum of the ops' {sum(ops.values())}")
    return problems


def strategy_problems(summary: dict[str, Any], wanted: tuple[str, ...] = ("ddp", "zero1", "fsdp2")) -> list[str]:
    """``--strategies``: every strategy measured, in the strategy table with the allocator's peak as its
    memory per rank, that peak the configuration's own (``peak_memory_bytes``), at least the rank's share of
    the fp32 parameters and below the device's memory."""
    tables = summary.get("strategies") or []
    if len(tables) != 1:
        return [f"{len(tables)} strategy tables, one wanted"]
    table = tables[0]
    rows = {row["strategy"]: row for row in table["rows"]}
    configs = {c["config_id"]: c for c in summary["configs"]}
    total = max((g.get("memory_total") or 0 for g in summary["environment"].get("gpus") or ()), default=0)
    problems = []
    if sorted(rows) != sorted(wanted):
        problems.append(f"strategies {sorted(rows)}, {sorted(wanted)} wanted")
    for name, row in rows.items():
        config = configs.get(row.get("config_id"))
        if config is None or config.get("status") != "ok" or config.get("strategy") != name:
            problems.append(f"{name}: its configuration {row.get('config_id')} is not a measured {name}")
            continue
        peak = config.get("peak_memory_bytes")
        share = 4 * config["params"] / table["world_size"]
        if row.get("memory_kind") != "allocator peak":
            problems.append(f"{name}: memory kind {row.get('memory_kind')!r}, the allocator's peak wanted")
        if peak is None or row.get("memory_bytes") != peak:
            problems.append(f"{name}: memory {row.get('memory_bytes')} in the table, {peak} measured")
        elif not share <= peak < (total or float("inf")):
            problems.append(f"{name}: allocator peak {peak} bytes outside [{share:.0f}, {total}) (the rank's share "
                            "of the fp32 parameters, the device's memory)")
    return problems


def oom_sweep_problems(summary: dict[str, Any], cap_mb: float) -> list[str]:
    """A batch sweep under ``--memory-cap-mb`` ended by a real CUDA out of memory: batches that fit, each within
    the cap, then one out of memory (torch's own message), then every larger batch not run, and the batch table
    saying the same."""
    configs = sorted(summary["configs"], key=lambda c: c["batch_size"])
    statuses = [c["status"] for c in configs]
    problems = []
    fitting = 0
    while fitting < len(statuses) and statuses[fitting] == "ok":
        fitting += 1
    if not fitting:
        problems.append(f"no batch fit: {statuses}")
    if fitting == len(statuses) or statuses[fitting] != "oom":
        return problems + [f"the sweep did not end at an out of memory: {statuses}"]
    if any(status != "not_run" for status in statuses[fitting + 1:]):
        problems.append(f"batches after the out of memory ran: {statuses}")
    oom = configs[fitting]
    if "CUDA out of memory" not in (oom.get("reason") or ""):
        problems.append(f"batch {oom['batch_size']}: {oom.get('reason')!r} is not torch's CUDA out of memory")
    for config in configs[fitting + 1:]:
        if str(oom["batch_size"]) not in (config.get("reason") or "") or config.get("measured_iters"):
            problems.append(f"batch {config['batch_size']}: not_run for {config.get('reason')!r}, "
                            f"{config.get('measured_iters')} steps")
    for config in configs[:fitting]:
        peak = config.get("peak_memory_bytes")
        if peak is None or not 0 < peak <= cap_mb * 2 ** 20:
            problems.append(f"batch {config['batch_size']}: allocator peak {peak} bytes, not within the "
                            f"{cap_mb:g} MiB cap")
    tables = summary.get("batch_throughput") or []
    table_statuses = [[row["status"] for row in sorted(t["rows"], key=lambda r: r["batch_size"])] for t in tables]
    if table_statuses != [statuses]:
        problems.append(f"batch table statuses {table_statuses}, {statuses} wanted")
    return problems


def compile_problems(summary: dict[str, Any], min_ddp_buckets: int = 2) -> list[str]:
    """``ddptop tune --variants compile``: the compiled configuration measured, its first step (which compiles)
    reported once per launch it ran in, the graphs Dynamo captured, DDP's buckets and DDPOptimizer's splits."""
    tables = summary.get("tuning") or []
    if len(tables) != 1:
        return [f"{len(tables)} tuning tables, one wanted"]
    rows = {row["variant"]: row for row in tables[0]["rows"]}
    row = rows.get("compile")
    if row is None or row.get("status") != "ok":
        return [f"no measured compile row: {row}"]
    cost = row.get("compiled") or {}
    launches = next((c.get("launches") or [] for c in summary["configs"] if c["config_id"] == row["config_id"]), [])
    problems = []
    first = cost.get("first_step_s") or []
    if not launches or len(first) != len(launches) or not all(isinstance(s, (int, float)) and s > 0 for s in first):
        problems.append(f"first steps {first} for {len(launches)} launch(es)")
    if not (cost.get("graphs") or 0) >= 1:
        problems.append(f"{cost.get('graphs')} graphs captured")
    if not (cost.get("ddp_buckets") or 0) >= min_ddp_buckets:
        problems.append(f"{cost.get('ddp_buckets')} DDP buckets, at least {min_ddp_buckets} wanted")
    if not (cost.get("compiled_buckets") or 0) >= 1 or cost.get("bucketing") not in ("kept", "lost"):
        problems.append(f"DDPOptimizer's splits {cost.get('compiled_buckets')}, bucketing {cost.get('bucketing')!r}")
    if any(r.get("compiled") for name, r in rows.items() if name != "compile"):
        problems.append("a variant other than compile reports a compilation")
    return problems


# -- ddptop doctor -----------------------------------------------------------------------------------------------

TOPOLOGY_CHECK = "topo -m vs ddptop topo"
MUST_BE_OK = ("NVML", "nvidia-smi vs NVML", TOPOLOGY_CHECK, "torch / CUDA / NCCL", "CUDA order vs NVML order",
              "rendezvous store")
LOOP_CHECK = "kernel vs plain DDP loop"
LOOP_RATIO = (0.8, 1.25)  # ddptop's kernel against the plain loop: ok within 3%, warn beyond; this far is neither
P2P_CHECK = "P2P access"


def doctor_problems(checks: list[dict[str, Any]], cuda_count: int) -> list[str]:
    """doctor's checks on a GPU node: the comparisons with the driver, nvidia-smi and torch ok (the topology
    cell by cell, none differing), P2P skipped with one GPU and ok or warn with more, the kernel within
    ``LOOP_RATIO`` of the plain loop, and no check failed."""
    by_name = {check["name"]: check for check in checks}
    problems = []
    for name in MUST_BE_OK:
        check = by_name.get(name)
        if check is None:
            problems.append(f"{name}: not run")
        elif check["status"] != "ok":
            problems.append(f"{name}: {check['status']}, not ok ({check['detail']})")
    topology = by_name.get(TOPOLOGY_CHECK) or {}
    if topology.get("status") == "ok":
        data = topology.get("data") or {}
        if data.get("mismatches") or (data.get("cells") or 0) < cuda_count ** 2:
            problems.append(f"{TOPOLOGY_CHECK}: {data.get('cells')} cells compared, mismatches {data.get('mismatches')}")
    p2p = by_name.get(P2P_CHECK) or {}
    wanted = ("skipped",) if cuda_count == 1 else ("ok", "warn")
    if p2p.get("status") not in wanted:
        problems.append(f"{P2P_CHECK}: {p2p.get('status')} with {cuda_count} GPU(s), {' or '.join(wanted)} wanted "
                        f"({p2p.get('detail')})")
    loop = by_name.get(LOOP_CHECK) or {}
    ratio = (loop.get("data") or {}).get("ratio")
    if loop.get("status") not in ("ok", "warn") or ratio is None or not LOOP_RATIO[0] <= ratio <= LOOP_RATIO[1]:
        problems.append(f"{LOOP_CHECK}: {loop.get('status')}, ratio {ratio} ({loop.get('detail')})")
    named = {name for name in MUST_BE_OK} | {P2P_CHECK, LOOP_CHECK}
    problems += [f"{c['name']}: fail ({c['detail']})" for c in checks if c["status"] == "fail" and c["name"] not in named]
    return problems


_ESCAPES = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def smi_topo_cells(text: str) -> dict[tuple[str, str], str]:
    """``nvidia-smi topo -m`` as {(row, column): word}, read apart from ddptop's own parser: terminal escapes
    dropped, the header is the line whose first word is GPU0, its device columns end at "CPU Affinity", NICn
    renamed by the NIC legend; the matrix ends at the first blank line."""
    lines = [_ESCAPES.sub("", line) for line in text.splitlines()]
    start = next((i for i, line in enumerate(lines) if line.split()[:1] == ["GPU0"]), None)
    if start is None:
        return {}
    columns = []
    for word in lines[start].split():
        if word == "CPU":
            break
        columns.append(word)
    legend = dict(re.findall(r"^\s*(NIC\d+):\s*(\S+)\s*$", "\n".join(lines), flags=re.M))
    cells = {}
    for line in lines[start + 1:]:
        words = line.split()
        if not words:
            break
        if words[0] not in columns:
            continue
        for column, word in zip(columns, words[1:1 + len(columns)]):
            cells[(legend.get(words[0], words[0]), legend.get(column, column))] = word
    return cells


def topo_cell_problems(smi_cells: dict[tuple[str, str], str], topo: dict[str, Any]) -> list[str]:
    """nvidia-smi's matrix against ``ddptop topo --json``'s, cell by cell, every GPU pair included."""
    matrix = topo.get("matrix") or {}
    problems = [f"{row}/{column}: nvidia-smi {word}, ddptop {matrix.get(row, {}).get(column)}"
                for (row, column), word in smi_cells.items() if matrix.get(row, {}).get(column) != word]
    problems += [f"{row}/{column}: ddptop {matrix.get(row, {}).get(column)}, nothing in nvidia-smi topo -m"
                 for row in topo.get("gpus") or () for column in topo.get("gpus") or ()
                 if (row, column) not in smi_cells]
    return problems


# -- the driver report's replay ----------------------------------------------------------------------------------

# what `ddptop gpus --json` reads once per GPU from the driver: a replay must give each back
GPU_STATIC = ("index", "name", "uuid", "bus_id", "memory_total", "power_limit_w", "sm_clock_max_mhz", "pcie_gen_max",
              "pcie_width_max", "mig_mode")
REPLAY_SUFFIX = " (FAKE)"  # a simulated (replayed) GPU's name says so


def topo_replay_problems(live: dict[str, Any], replayed: dict[str, Any], same_host: bool = True) -> list[str]:
    """``ddptop topo --json`` live and replayed from the driver report: the same in every key but ``fake``
    (and ``cpu``, the CPUs of the machine the replay runs on, unless that is the machine itself)."""
    problems = []
    if live.get("fake") is not False or replayed.get("fake") is not True:
        problems.append(f"fake: live {live.get('fake')}, replayed {replayed.get('fake')}")
    left_out = {"fake"} | (set() if same_host else {"cpu"})
    for key in sorted((set(live) | set(replayed)) - left_out):
        if live.get(key) != replayed.get(key):
            problems.append(f"{key}: live {live.get(key)!r}, replayed {replayed.get(key)!r}")
    return problems


def gpus_replay_problems(live: dict[str, Any], replayed: dict[str, Any]) -> list[str]:
    """``ddptop gpus --json`` live and replayed: the driver, and every GPU's fields read from the driver (its
    name marked simulated in the replay), MIG instances included."""
    problems = []
    if live.get("fake") or not replayed.get("fake"):
        problems.append(f"fake: live {live.get('fake')}, replayed {replayed.get('fake')}")
    for key in ("nvml", "driver"):
        if live.get(key) != replayed.get(key):
            problems.append(f"{key}: live {live.get(key)!r}, replayed {replayed.get(key)!r}")
    ours, theirs = live.get("gpus") or [], replayed.get("gpus") or []
    if len(ours) != len(theirs) or not ours:
        return problems + [f"{len(ours)} GPUs live, {len(theirs)} replayed"]
    for gpu, copy in zip(ours, theirs):
        for key in GPU_STATIC:
            value = copy.get(key)
            if key == "name" and isinstance(value, str):
                value = value.removesuffix(REPLAY_SUFFIX)
            if gpu.get(key) != value:
                problems.append(f"GPU {gpu.get('index')} {key}: live {gpu.get(key)!r}, replayed {copy.get(key)!r}")
        mig = [[(m.get("uuid"), m.get("profile"), m.get("gpu_instance")) for m in g.get("mig") or ()] for g in (gpu, copy)]
        if mig[0] != mig[1]:
            problems.append(f"GPU {gpu.get('index')} MIG: live {mig[0]}, replayed {mig[1]}")
    return problems


# -- the live view's GPU panel -----------------------------------------------------------------------------------

PANEL_COLUMNS = ("name", "util", "memgib", "rank")  # the GPU panel's cells the suite reads (GPU_COLUMNS' keys)


def panel_rows(table: Any) -> dict[str, dict[str, str]]:
    """The GPU panel's rows (the ``#gpus`` table) as their cells' text, keyed by the row's key (the GPU's index
    on one node); a cell the row lacks reads empty."""
    rows = {}
    for key in table.rows:
        cells = {}
        for column in PANEL_COLUMNS:
            try:
                cells[column] = str(table.get_cell(key, column))
            except KeyError:
                cells[column] = ""
        rows[key] = cells
    return rows


def panel_name(nvml_name: str) -> str:
    """A GPU's name as the panel's 22-character name column shows it."""
    return nvml_name.removeprefix("Tesla ").removeprefix("NVIDIA ")[:22]


def panel_percent(cell: str) -> float | None:
    found = re.search(r"(\d+(?:\.\d+)?)%\s*$", cell)
    return float(found[1]) if found else None


def panel_gib(cell: str) -> tuple[float, float] | None:
    """The memory cell ``used/total`` in GiB."""
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)/(\d+(?:\.\d+)?)\s*", cell)
    return (float(found[1]), float(found[2])) if found else None


def panel_row_busy(cells: dict[str, str], rank: str = "0") -> bool:
    """A GPU row of a running sweep, filled: ``rank`` on it, some utilisation and some memory used."""
    gib = panel_gib(cells.get("memgib", ""))
    return (rank in cells.get("rank", "").split(",") and (panel_percent(cells.get("util", "")) or 0) > 0
            and gib is not None and gib[0] > 0)
