"""The run directory's names: every file and folder ddptop or a rank writes there, and where it goes.

One definition, so that the writers (the sweep, the ranks, the follower nodes, the telemetry sampler) and the
readers (the session, ``watch``, ``report``, the summary) cannot disagree on a name. Pure functions on path
strings, standard library only: nothing here touches the disk (``ddptop.protocol.storage`` writes the files,
``ddptop.run.rundir`` makes the folders).

    <run dir>/
      plan.json                  PLAN_FILE
      runner.jsonl               RUNNER_FILE (node K: runner-node<K>.jsonl)
      telemetry.jsonl            TIMELINE_FILE (node K: telemetry-node<K>.jsonl)
      environment.json           ENVIRONMENT_FILE
      topology.json              TOPOLOGY_FILE
      summary.json/.md/.csv      SUMMARY_JSON, SUMMARY_MD, SUMMARY_CSV
      plots/                     PLOTS_DIR
      traces/<config>/rank<R>.pt.trace.json.gz   TRACES_DIR, trace_file(): each configuration's profiler trace
      launches/<NN>-<key>[-retry<A>]/      LAUNCHES_DIR, launch_name()
        launch.json              SPEC_FILE
        agent.log                AGENT_LOG (node K: agent-node<K>.log)
        events/rank-<R>.jsonl    EVENTS_DIR, events_name()
        logs/                    LOGS_DIR, torchrun's --log-dir (node K: logs-node<K>)
        nccl/<host>.<pid>.log    NCCL_LOG_DIR: NCCL's own log in a tune on GPUs (its algorithm choices)
"""

from __future__ import annotations

import os
import re

PLAN_FILE = "plan.json"  # the resolved plan, written first
RUNNER_FILE = "runner.jsonl"  # ddptop's own events (hello, marks)
TIMELINE_FILE = "telemetry.jsonl"  # the telemetry sampler's records
ENVIRONMENT_FILE = "environment.json"
TOPOLOGY_FILE = "topology.json"
SUMMARY_JSON = "summary.json"
SUMMARY_MD = "summary.md"
SUMMARY_CSV = "summary.csv"
PLOTS_DIR = "plots"
UI_ERROR_LOG = "ui-error.log"  # the traceback of a view (live, watch, view) that raised; the data are saved apart
LAUNCHES_DIR = "launches"
TRACES_DIR = "traces"
TRACE_SUFFIX = ".pt.trace.json.gz"  # torch.profiler's own name for a trace; the .gz makes export_chrome_trace compress it

# inside one launch's directory
SPEC_FILE = "launch.json"  # what every rank of the launch runs (every node's agent reads the same one)
AGENT_LOG = "agent.log"  # torchrun's own output
EVENTS_DIR = "events"
NCCL_LOG_DIR = "nccl"  # NCCL_DEBUG_FILE's folder in a tune's GPU launches (run.nccl_debug; telemetry.nccl_log reads it)
LOGS_DIR = "logs"  # torchrun --log-dir: <LOGS_DIR>/<run id>/attempt_<n>/<local rank>/stdout.log, stderr.log
EVENTS_PREFIX, EVENTS_SUFFIX = "rank-", ".jsonl"

_NODE_TAG = "-node"


def node_file(name: str, node_rank: int) -> str:
    """Node K's own copy of a run or launch file (runner.jsonl -> runner-node1.jsonl, logs -> logs-node1);
    node 0 keeps the single-node name."""
    if not node_rank:
        return name
    stem, ext = os.path.splitext(name)
    return f"{stem}{_NODE_TAG}{node_rank}{ext}"


def node_of(name: str, base: str) -> int | None:
    """The node rank a name is ``base``'s copy for (``node_file``'s inverse), or None if it is not one."""
    if name == base:
        return 0
    stem, ext = os.path.splitext(base)
    middle = name.removeprefix(stem + _NODE_TAG)
    if middle == name or not middle.endswith(ext):
        return None
    digits = middle[: len(middle) - len(ext)] if ext else middle
    return int(digits) if digits.isdigit() else None


def launch_name(index: int, launch_key: str, attempt: int = 0) -> str:
    """``02-n2-gloo``: the launch's place in the sweep and its key; a retry after a fault adds ``-retry<A>``."""
    return f"{index:02d}-{launch_key}" + (f"-retry{attempt}" if attempt else "")


def launch_path(run_dir: str, name: str) -> str:
    return os.path.join(run_dir, LAUNCHES_DIR, name)


def spec_path(launch_dir: str) -> str:
    return os.path.join(launch_dir, SPEC_FILE)


def agent_log(launch_dir: str, node_rank: int = 0) -> str:
    return os.path.join(launch_dir, node_file(AGENT_LOG, node_rank))


def logs_dir(launch_dir: str, node_rank: int = 0) -> str:
    return os.path.join(launch_dir, node_file(LOGS_DIR, node_rank))


def trace_dir_name(config_id: str) -> str:
    """A configuration's trace folder: its id with anything but letters, digits and ``.=+-`` as ``_``
    (``resnet18/ddp/bs32/n2/gloo`` -> ``resnet18_ddp_bs32_n2_gloo``; ``-m pkg.train/n2/gloo`` ->
    ``m_pkg.train_n2_gloo``): one flat, safe name per id."""
    return re.sub(r"[^A-Za-z0-9.=+-]", "_", config_id).strip(".").lstrip("-") or "_"  # no leading "-": not an option


def trace_file(config_id: str, rank: int) -> str:
    """Where global rank ``rank`` writes the trace of ``config_id``, relative to the run directory."""
    return os.path.join(TRACES_DIR, trace_dir_name(config_id), f"rank{rank}{TRACE_SUFFIX}")


def events_dir(launch_dir: str) -> str:
    return os.path.join(launch_dir, EVENTS_DIR)


def events_name(rank: int) -> str:
    return f"{EVENTS_PREFIX}{rank}{EVENTS_SUFFIX}"


def events_path(launch_dir: str, rank: int) -> str:
    """Where global rank ``rank`` of a launch appends its events."""
    return os.path.join(launch_dir, EVENTS_DIR, events_name(rank))


def rank_of_events_file(name: str) -> int | None:
    """The rank an events file belongs to (``rank-3.jsonl`` -> 3), or None for any other name."""
    base = os.path.basename(name)
    if not (base.startswith(EVENTS_PREFIX) and base.endswith(EVENTS_SUFFIX)):
        return None
    digits = base[len(EVENTS_PREFIX) : len(base) - len(EVENTS_SUFFIX)]
    return int(digits) if digits.isdigit() else None


def events_glob(run_dir: str) -> str:
    """A glob pattern matching every rank's events file of every launch."""
    return os.path.join(run_dir, LAUNCHES_DIR, "*", EVENTS_DIR, f"{EVENTS_PREFIX}*{EVENTS_SUFFIX}")


def launch_of_events_file(path: str) -> str:
    """The launch name an events file belongs to (``.../launches/<name>/events/rank-0.jsonl``)."""
    return os.path.basename(os.path.dirname(os.path.dirname(path)))


def node_ranks_with(run_dir: str, name: str) -> list[int]:
    """The node ranks whose copy of the run file ``name`` exists (0 for the single-node name), sorted."""
    try:
        entries = os.listdir(run_dir)
    except OSError:
        return []
    return sorted(rank for rank in (node_of(entry, name) for entry in entries) if rank is not None)


def run_file(run_dir: str, name: str, node_rank: int = 0) -> str:
    """A file at the top of the run directory, node K's copy for ``node_rank`` K (runner, telemetry)."""
    return os.path.join(run_dir, node_file(name, node_rank))

