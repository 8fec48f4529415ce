"""nccl-tests all_reduce_perf: one 64 MiB allreduce, against ddptop's collective benchmark on 2+ GPUs."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from ddptop.doctor.commands import run_command
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.launch import Launched
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.parsing import NCCL_TESTS_BYTES, last_line, parse_all_reduce_perf
from ddptop.doctor.result import FAIL, OK, SKIPPED, WARN, Check
from ddptop.telemetry import nvml as nv

NAME = "nccl-tests all_reduce_perf"
NCCL_TESTS_TOLERANCE = 0.10  # ddptop's allreduce busbw within 10% of nccl-tests' at the same size


def run(context: DoctorContext) -> Check:
    return check_nccl_tests(context.view, None if context.quick else context.launch)


def _ddptop_busbw(summary: dict[str, Any] | None, world_size: int) -> float | None:
    for table in (summary or {}).get("collectives") or []:
        if table.get("op") == "allreduce" and table.get("world_size") == world_size:
            for row in table.get("rows") or []:
                if row.get("bytes") == NCCL_TESTS_BYTES and not row.get("inplace") and row.get("busbw_gbs"):
                    return float(row["busbw_gbs"])
    return None


def check_nccl_tests(view: NvmlView, launch: Callable[[list[str]], Launched] | None) -> Check:
    """``launch``: how ddptop's run is started; None under --quick."""
    binary = shutil.which("all_reduce_perf")
    if binary is None:
        return Check(NAME, SKIPPED, "all_reduce_perf (nccl-tests) is not on PATH")
    usable = list(view.inventory.usable_gpus) if view.inventory is not None else []
    if not usable:
        return Check(NAME, SKIPPED, "no GPU to run it on" + (f" ({nv.FAKE_ENV}: simulated GPUs)" if view.fake else ""))
    if any(g.is_mig for g in usable):
        return Check(NAME, SKIPPED, "MIG instances: NCCL runs one per process")
    count = len(usable)
    if count < 2:
        return Check(NAME, SKIPPED, "one GPU: an allreduce moves nothing between GPUs")
    if launch is None:
        return Check(NAME, SKIPPED, "--quick: nothing is launched")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(g.uuid for g in usable))
    done = run_command([binary, "-b", "64M", "-e", "64M", "-g", str(count)], 600, env)
    theirs = parse_all_reduce_perf(done.stdout)
    if theirs is None:
        return Check(NAME, FAIL, f"all_reduce_perf gave no result (exit {done.returncode}: "
                                 f"{last_line(done.stderr or done.stdout)})")
    launched = launch(["--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "8",
                       "--world-sizes", str(count), "--backend", "nccl", "--no-baseline", "--warmup", "1",
                       "--iters", "3", "--comm-iters", "0", "--collectives", "allreduce", "--coll-min-bytes",
                       "64MiB", "--coll-max-bytes", "64MiB"])
    ours = _ddptop_busbw(launched.summary, count)
    data = {"gpus": count, "bytes": NCCL_TESTS_BYTES, "nccl_tests_busbw_gbs": theirs, "ddptop_busbw_gbs": ours}
    words = f"64 MiB allreduce on {count} GPUs: busbw {theirs:.1f} GB/s (nccl-tests)"
    if ours is None:
        return Check(NAME, OK, f"{words}; ddptop's collective benchmark gave none (exit "
                               f"{launched.returncode}: {launched.error})", data)
    ratio = ours / theirs if theirs else None
    data["ratio"] = ratio
    words += f", {ours:.1f} GB/s (ddptop, torch.distributed)"
    if ratio is not None and ratio >= 1 - NCCL_TESTS_TOLERANCE:
        return Check(NAME, OK, f"{words}: ratio {ratio:.2f}", data)
    return Check(NAME, WARN, f"{words}: ratio {ratio:.2f}, more than {NCCL_TESTS_TOLERANCE:.0%} below "
                             "nccl-tests" if ratio is not None else words, data)
