"""The words ddptop and its kernels both write: configuration status, run mode, scaling, failure policy,
step phase.

They are ``StrEnum``s, so a member equals its string (``Status.OK == "ok"``), formats as it and is written
to JSON as it: event files and summaries read the same whether a side uses the enum or the bare string.
Standard library only, like the rest of ``ddptop.protocol``.
"""

from __future__ import annotations

from enum import StrEnum


class Status(StrEnum):
    """Where one configuration stands (also a launch's outcome: ok, failed or stopped)."""

    PENDING = "pending"
    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    OOM = "oom"  # ran out of device memory: a fault, except in a batch sweep, where it is the answer
    SKIPPED = "skipped"  # by the user
    STOPPED = "stopped"  # the sweep was stopped while it ran
    NOT_RUN = "not_run"  # the sweep ended before it started
    INTERRUPTED = "interrupted"  # running when the ddptop that ran the sweep died: its steps are kept


# A configuration in one of these states will not change again.
ENDED = frozenset(
    {Status.OK, Status.FAILED, Status.OOM, Status.SKIPPED, Status.STOPPED, Status.NOT_RUN, Status.INTERRUPTED}
)
# Ended by a fault, not by the user: the sweep exits 1.
FAILED = frozenset({Status.FAILED, Status.OOM})
# a rank's exit code once its SIGTERM handler has written what it measured (the shell's 128 + signal)
STOPPED_EXIT = 128 + 15


class Phase(StrEnum):
    """Which part of a configuration a rank's ``samples`` (or its ``error``, or an injected fault) belongs to."""

    WARMUP = "warmup"
    MEASURE = "measure"  # the steps the figures are of
    NOSYNC = "nosync"  # the step inside DDP's no_sync(): no gradient allreduce
    ANALYSIS = "analysis"  # the communication analysis after the configuration ended: no samples, its steps stand


class SweepStatus(StrEnum):
    """Where the whole sweep stands; its end is written in the ``sweep_end`` mark."""

    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    STOPPED = "stopped"


class Mode(StrEnum):
    """How a configuration trains."""

    DDP = "ddp"  # DistributedDataParallel, one process per device
    NO_DDP = "no_ddp"  # the plain model on one device: the baseline DDP's overhead is measured against
    DP = "dp"  # torch.nn.DataParallel: one process driving N devices


class Scaling(StrEnum):
    """What is held fixed as the world size N grows."""

    WEAK = "weak"  # the per-rank batch: the global batch grows with N
    STRONG = "strong"  # the global batch: split evenly over the N ranks


class OnFailure(StrEnum):
    """What the sweep does after a failed configuration."""

    CONTINUE = "continue"
    STOP = "stop"
