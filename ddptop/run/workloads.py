"""The check of a plan's own models before any launch: a factory's or a Hugging Face model's workload is
built once and one training step run on a small batch (``bench_kernels.preflight``, in a subprocess: this
process never imports torch), so bad input is one line and exit 2 before the sweep starts, and the plan
learns what applies to each model: tokens per example (tokens/s), whether its batch holds images (tune's
channels_last).

The built-in models need no check: their batches are ddptop's own, their facts their kind's
(``ddptop.protocol.modelspec.KINDS``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

from ddptop.protocol.modelspec import registered
from ddptop.protocol.workload import CheckAnswer
from ddptop.run.launcher import kernel_environment
from ddptop.run.plan_records import Plan
from ddptop.run.plan import PlanError
from ddptop.run.plan_models import apply_facts
from ddptop.telemetry.inventory import rank_gpu_environment

# seconds for the check of every model of a plan: importing torch and the user's code, building each model
# and one step on a small batch (a large Hugging Face model's random initialisation takes a while on a CPU)
CHECK_TIMEOUT = 600.0


class WorkloadCheckError(PlanError):
    """A model of the plan cannot run: one line naming it (exit 2, before any launch)."""


def check_command(plan: Plan, models: list[str]) -> list[str]:
    """The checker's command line: on the plan's device (a GPU plan: the first rank's GPU, which the
    environment of ``run_check`` names as the ranks' does)."""
    command = [sys.executable, "-m", "bench_kernels.preflight", "--device", plan.device,
               "--num-classes", str(plan.num_classes), "--image-size", str(plan.image_size),
               "--hf-config", json.dumps(plan.hf_config)]
    if plan.seq_len is not None:
        command += ["--seq-len", str(plan.seq_len)]
    for model in models:
        command += ["--model", model]
    return command


def run_check(command: list[str], env: dict[str, str], timeout: float = CHECK_TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, env=env, capture_output=True, text=True, timeout=timeout)


def check_environment(plan: Plan) -> dict[str, str]:
    """The kernels' import path and the GPUs as the ranks see them (UUIDs, MIG instances one per rank, the
    parent's CUDA_VISIBLE_DEVICES entries for --gpus): the checker narrows to local rank 0's, as a rank does."""
    env = kernel_environment()
    env.update(rank_gpu_environment(plan, dict(os.environ)))
    return env


def check_workloads(plan: Plan, run: Callable[[list[str], dict[str, str]], Any] = run_check) -> Plan:
    """The plan with what the check found of each factory and hf model; ``WorkloadCheckError`` (one line)
    for the first that cannot run, in the plan's order."""
    models = [m for m in plan.models if registered(m).checked]
    if not models:
        return apply_facts(plan, {})
    command = check_command(plan, models)
    try:
        done = run(command, check_environment(plan))
    except subprocess.TimeoutExpired:
        raise WorkloadCheckError(f"checking {', '.join(models)} took longer than {CHECK_TIMEOUT:g} s "
                                 "(building each model and one step on 2 examples)") from None
    answers: dict[str, CheckAnswer] = {}
    for line in done.stdout.splitlines():
        if line.startswith("{"):
            try:
                answer = CheckAnswer.from_line(line)
            except (ValueError, KeyError, TypeError):
                continue
            answers[answer.model] = answer
    for model in models:
        answer = answers.get(model)
        if answer is None:  # the checker itself died (torch missing, a crash in native code)
            tail = " ".join(done.stderr.strip().splitlines()[-1:]) or f"exit status {done.returncode}"
            raise WorkloadCheckError(f"model {model}: the check of its workload ended without an answer: {tail[:300]}")
        if answer.error:
            raise WorkloadCheckError(answer.error)
    return apply_facts(plan, {m: answers[m].facts for m in models if answers[m].facts is not None})
