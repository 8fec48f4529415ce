"""The check of a plan's own models before any launch: a factory's or a Hugging Face model's workload is
built once and one training step run on a small batch (``bench_kernels.preflight``, in a subprocess: this
process never imports torch), so bad input is one line and exit 2 before the sweep starts, and the plan
learns what applies to each model: tokens per example (tokens/s), whether its batch holds images (tune's
channels_last).

The check is bounded by its time without progress, not its total: the checker prints a line as it starts each
phase (importing torch, building each model's workload, its step), each shown to the user as it comes, and
a phase with no line for the plan's ``--hang-timeout`` (at least the sweep's startup grace while importing
torch or building, as a rank setting up gets) ends it: one line naming the model and the phase, the
checker's whole process group killed. Ctrl-C ends it the same way.

The built-in models need no check: their batches are ddptop's own, their facts their kind's
(``ddptop.protocol.modelspec.KINDS``).
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Callable, Iterable

from ddptop.protocol.modelspec import registered
from ddptop.protocol.workload import CheckAnswer, CheckProgress
from ddptop.run.hang_watch import STARTUP_GRACE
from ddptop.run.launcher import die_with_ddptop, kernel_environment
from ddptop.run.plan_records import Plan
from ddptop.run.plan import PlanError
from ddptop.run.plan_models import apply_facts
from ddptop.telemetry.inventory import rank_gpu_environment

STDERR_TAIL = 20  # lines of the checker's stderr kept, for the line of a checker that died without an answer
REAP_WAIT = 5.0  # seconds to wait for the killed checker to be reaped, or its output's last lines to come


class WorkloadCheckError(PlanError):
    """A model of the plan cannot run: one line naming it (exit 2, before any launch)."""


class CheckStalled(Exception):
    """No line from the checker for its phase's limit (``CheckWatch.limit``); the checker is killed."""


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


def check_environment(plan: Plan) -> dict[str, str]:
    """The kernels' import path and the GPUs as the ranks see them (UUIDs, MIG instances one per rank, the
    parent's CUDA_VISIBLE_DEVICES entries for --gpus): the checker narrows to local rank 0's, as a rank does."""
    env = kernel_environment()
    env.update(rank_gpu_environment(plan, dict(os.environ)))
    return env


class CheckWatch:
    """What the checker has said so far: the phase it is in (its last ``CheckProgress``), each told to
    ``progress`` as one line, and its answers. Its limit is the plan's hang timeout, at least the sweep's
    startup grace while it sets up (importing torch, building a model), as a rank's: a large model built on
    the CPU takes longer than a short ``--hang-timeout`` and is not stuck."""

    def __init__(self, models: list[str], hang_timeout: float, progress: Callable[[str], None] | None = None) -> None:
        self.models = models
        self.hang_timeout = hang_timeout
        self.progress = progress
        self.phase = CheckProgress("starting Python", setting_up=True)  # until its first line
        self.answers: dict[str, CheckAnswer] = {}

    def limit(self) -> float:
        """Seconds the current phase may go without a line."""
        return max(self.hang_timeout, STARTUP_GRACE) if self.phase.setting_up else self.hang_timeout

    @property
    def answered(self) -> bool:
        return all(model in self.answers for model in self.models)

    def read(self, line: str) -> None:
        """One line of the checker's stdout; a line that is not the checker's (a user's print) is passed over."""
        if not line.startswith("{"):
            return
        try:
            body = json.loads(line)
            if isinstance(body, dict) and "checking" in body:
                self.phase = CheckProgress.from_line(line)
                if self.progress is not None:
                    self.progress(f"checking {self.subject()}: {self.phase.doing} (no progress for "
                                  f"{self.limit():g} s ends it: {self.bound()})")
            else:
                answer = CheckAnswer.from_line(line)
                self.answers[answer.model] = answer
        except (ValueError, KeyError, TypeError, AttributeError):
            return

    def subject(self) -> str:
        """Whose check the current phase is: its model, or every model before the first."""
        return self.phase.model if self.phase.model is not None else ", ".join(self.models)

    def bound(self) -> str:
        """The flag behind the current limit, and the grace where it made the limit longer."""
        if self.limit() == self.hang_timeout:
            return "--hang-timeout"
        return f"--hang-timeout {self.hang_timeout:g}, at least {STARTUP_GRACE:g} s to import torch or build a model"

    def stalled(self) -> str:
        """The one line for a check stopped in the current phase."""
        whose = f"model {self.phase.model}" if self.phase.model is not None else f"the check of {self.subject()}"
        return (f"{whose}: {self.phase.doing} made no progress in {self.limit():g} s ({self.bound()}); "
                "nothing was launched")


def run_check(command: list[str], env: dict[str, str], watch: CheckWatch) -> tuple[int | None, str]:
    """Run the checker, giving ``watch`` each line of its stdout as it comes, until every model is answered or
    its stdout ends: its exit status (None: still running when killed) and the last lines of its stderr.
    ``CheckStalled`` when no line came for ``watch.limit()``. The checker runs in a session of its own and its
    whole process group is killed on the way out, however that comes (answers, a stall, Ctrl-C): nothing it
    started outlives the check. (It also gets SIGTERM should ddptop itself die.)"""
    process = subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, start_new_session=True,
                               preexec_fn=die_with_ddptop)
    try:
        lines: queue.SimpleQueue[str | None] = queue.SimpleQueue()
        errors: deque[str] = deque(maxlen=STDERR_TAIL)
        readers = [_read_lines(process.stdout, lines.put, at_end=lambda: lines.put(None)),
                   _read_lines(process.stderr, errors.append)]
        while not watch.answered:
            try:
                # at most the longest wait a lock takes: --hang-timeout may be huge or inf
                line = lines.get(timeout=min(watch.limit(), threading.TIMEOUT_MAX))
            except queue.Empty:
                raise CheckStalled() from None
            if line is None:  # its stdout ended: it exited (or died) without every answer
                break
            watch.read(line)
        code = _wait(process, REAP_WAIT)
    finally:
        _kill_group(process)
    for reader, stream in zip(readers, (process.stdout, process.stderr)):
        reader.join(REAP_WAIT)  # the last lines of stderr, for a checker that died
        if stream is not None and not reader.is_alive():  # one still read (a process outside the group holds
            stream.close()  # the pipe) is left to its daemon thread: closing it now would wait on that read
    return code, "\n".join(errors)


def _read_lines(stream: Iterable[str] | None, put: Callable[[str], None],
                at_end: Callable[[], None] | None = None) -> threading.Thread:
    """A thread handing each line of ``stream`` to ``put``, then calling ``at_end``: the checker's pipes are
    read as they come, so that a line is seen when it is written and a full stderr never blocks the checker."""

    def read() -> None:
        for line in stream or ():
            put(line.rstrip("\n"))
        if at_end is not None:
            at_end()

    thread = threading.Thread(target=read, name="ddptop-check-output", daemon=True)
    thread.start()
    return thread


def _wait(process: subprocess.Popen[str], seconds: float) -> int | None:
    try:
        return process.wait(seconds)
    except subprocess.TimeoutExpired:
        return None


def _kill_group(process: subprocess.Popen[str]) -> None:
    """SIGKILL the checker's process group (it and whatever it started: a model's download workers, ...): it
    holds nothing that needs a clean exit, and a stuck factory may ignore anything gentler."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):  # the group is gone already
        pass
    _wait(process, REAP_WAIT)


def check_workloads(plan: Plan, progress: Callable[[str], None] | None = None) -> Plan:
    """The plan with what the check found of each factory and hf model; ``WorkloadCheckError`` (one line)
    for the first that cannot run, in the plan's order, or for the model whose check made no progress for
    the plan's hang timeout. ``progress`` is told one line as each phase of the check starts."""
    models = [m for m in plan.models if registered(m).checked]
    if not models:
        return apply_facts(plan, {})
    watch = CheckWatch(models, plan.hang_timeout, progress)
    try:
        code, stderr = run_check(check_command(plan, models), check_environment(plan), watch)
    except CheckStalled:
        raise WorkloadCheckError(watch.stalled()) from None
    for model in models:
        answer = watch.answers.get(model)
        if answer is None:  # the checker itself died (torch missing, a crash in native code)
            status = f"exit status {code}" if code is not None else "it closed its output but kept running"
            tail = " ".join(stderr.strip().splitlines()[-1:]) or status
            raise WorkloadCheckError(f"model {model}: the check of its workload ended without an answer: {tail[:300]}")
        if answer.error:
            raise WorkloadCheckError(answer.error)
    return apply_facts(plan, {m: watch.answers[m].facts for m in models if watch.answers[m].facts is not None})
