"""The run directory: everything a sweep measures, on disk while it runs.

    runs/20261121-101500-resnet50-weak/
      plan.json                      the resolved plan (written first)
      runner.jsonl                   ddptop's own events: launches started/ended, configurations marked
      environment.json, topology.json   the node ddptop ran on (versions, GPUs; the GPU/NIC/CPU matrix)
      telemetry.jsonl                the telemetry sampler's records, one per tick
      launches/01-n2-gloo/
        launch.json                  what the ranks were told to run (ddptop.protocol.launchspec)
        agent.log                    torchrun's own output (agent-node<K>.log: node K's, multi-node)
        events/rank-<R>.jsonl        each rank's events (wire format), R the global rank
        logs/.../<local rank>/stdout.log, stderr.log   each worker's output (torchrun --log-dir;
                                     logs-node<K>/ for node K's workers)
      runner-node<K>.jsonl, telemetry-node<K>.jsonl   what follower node K did and measured (multi-node)
      summary.json, summary.md, summary.csv           the saved summary (at the end, or on demand)
      plots/                         the summary's figures (PNG)

The names are defined once, in ``ddptop.protocol.layout``, and every file is written by
``ddptop.protocol.storage`` (whole or not at all); this module creates the run directory and its launches'
folders, user-only (0700), refusing to reuse one (``RunDirError``, a user error), and reads what torchrun
left in a launch's folder: the workers' logs and the failures its agent listed.
"""
from __future__ import annotations

import glob
import os
import re
import time

from ddptop.errors import DdptopError
from ddptop.protocol import layout


class RunDirError(DdptopError):
    """A run directory that cannot be created or read; one line for the user."""


def _safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "run"


def create_run_dir(out: str | None, name: str, base: str = "runs") -> str:
    """Create a fresh run directory; refuse to reuse one that holds anything."""
    if out:
        path = os.path.abspath(out)
        if os.path.exists(path) and (not os.path.isdir(path) or os.listdir(path)):
            raise RunDirError(f"{out} already exists and is not empty; ddptop never overwrites a run directory")
        _make_private_dirs(path)
        return path
    stamp = time.strftime("%Y%m%d-%H%M%S")
    root = os.path.abspath(base)
    candidate = os.path.join(root, f"{stamp}-{_safe_name(name)}")
    suffix = 1
    while True:
        try:
            _make_private_dirs(os.path.dirname(candidate))
            os.mkdir(candidate, 0o700)
            return candidate
        except FileExistsError:
            suffix += 1
            candidate = os.path.join(root, f"{stamp}-{_safe_name(name)}-{suffix}")


def prepare_out_dir(out: str, error: type[DdptopError] = RunDirError) -> None:
    """An ``--out`` folder made (user-only, with its parents) where missing and found writable, before any work,
    so a bad path costs nothing: ``error`` with one line otherwise (each command's own kind of user error)."""
    try:
        os.makedirs(out, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise error(f"cannot create --out {out}: {(exc.strerror or str(exc)).lower()}") from None
    if not os.path.isdir(out) or not os.access(out, os.W_OK):
        raise error(f"--out {out} is not a writable directory")


def _make_private_dirs(path: str) -> None:
    try:
        existed = os.path.isdir(path)
        os.makedirs(path, mode=0o700, exist_ok=True)
        if not existed:
            os.chmod(path, 0o700)
    except OSError as exc:
        raise RunDirError(f"cannot create run directory {path}: {exc.strerror}") from None
    if not os.access(path, os.W_OK):
        raise RunDirError(f"run directory {path} is not writable")


def launch_dir(run_dir: str, index: int, launch_key: str, attempt: int) -> str:
    """Create a launch's directory and its events folder (user-only); return its path."""
    path = layout.launch_path(run_dir, layout.launch_name(index, launch_key, attempt))
    for directory in (os.path.dirname(path), path, layout.events_dir(path)):
        os.makedirs(directory, mode=0o700, exist_ok=True)
        os.chmod(directory, 0o700)  # makedirs applies the mode only to the last level, and through the umask
    return path


def event_files(run_dir: str) -> list[str]:
    return sorted(glob.glob(layout.events_glob(run_dir)))


def worker_logs(launch_path: str, logs_dir: str = layout.LOGS_DIR) -> dict[int, dict[str, str]]:
    """Map local rank -> {'stdout': path, 'stderr': path} from torchrun's --log-dir layout."""
    logs: dict[int, dict[str, str]] = {}
    for path in glob.glob(os.path.join(launch_path, logs_dir, "*", "attempt_*", "*", "std*.log")):
        local_rank = os.path.basename(os.path.dirname(path))
        if local_rank.isdigit():
            stream = os.path.basename(path).split(".")[0]
            logs.setdefault(int(local_rank), {})[stream] = path
    return logs


def node_log_dirs(launch_path: str) -> list[tuple[int, str]]:
    """(node rank, worker log directory) of every node's agent in a launch: logs, logs-node1, ..."""
    found = []
    for path in glob.glob(os.path.join(launch_path, layout.LOGS_DIR + "*")):
        node = layout.node_of(os.path.basename(path), layout.LOGS_DIR)
        if node is not None and os.path.isdir(path):
            found.append((node, os.path.basename(path)))
    return sorted(found)


def tail_lines(path: str, lines: int = 20, max_bytes: int = 64 * 1024) -> list[str]:
    try:
        with open(path, "rb") as handle:
            handle.seek(0, os.SEEK_END)
            size = handle.tell()
            handle.seek(max(0, size - max_bytes))
            text = handle.read().decode(errors="replace")
    except OSError:
        return []
    return [line for line in text.splitlines() if line.strip()][-lines:]


def log_tail(launch_path: str, lines: int, streams: tuple[str, ...] = ("stderr",)) -> list[str]:
    """The last ``lines`` lines each rank wrote to each of ``streams`` (stderr: a traceback, usually), each marked
    with its rank (and its stream where more than one is read), at most twice ``lines`` in all; else the last of
    torchrun's own log."""
    found: list[str] = []
    for node, logs_dir in node_log_dirs(launch_path):
        where = f"node {node} " if node else ""
        for local_rank, files in sorted(worker_logs(launch_path, logs_dir).items()):
            for stream in streams:
                label = f"{where}rank {local_rank}" + (f" {stream}" if len(streams) > 1 else "")
                found.extend(f"[{label}] {line}" for line in tail_lines(files.get(stream, ""), lines))
    return found[-lines * 2:] or tail_lines(layout.agent_log(launch_path), lines)


def last_output(launch_path: str) -> str | None:
    """The last line the first rank that wrote any wrote: to its stdout, else to its stderr (a script's own word
    on why it ended, as a script that cannot run here prints it)."""
    for _node, logs_dir in node_log_dirs(launch_path):
        for _rank, files in sorted(worker_logs(launch_path, logs_dir).items()):
            for stream in ("stdout", "stderr"):
                tail = tail_lines(files.get(stream, ""), 1)
                if tail:
                    return tail[-1].strip()
    return None


_FAILURE_RE = re.compile(r"^\s*time\s*:\s*(\S+).*?^\s*rank\s*:\s*(\d+).*?^\s*exitcode\s*:\s*(-?\d+)",
                         re.S | re.M)


def failed_ranks(launch_path: str) -> list[tuple[int, int, str]]:
    """Every failure torchrun's agent.log lists, as (rank, exit code, time as written): its "Root Cause"
    first, then the others.

    torchrun calls root cause the failure with the smallest timestamp, in whole seconds, and a rank killed
    without an error file is stamped when the agent notices it: a SIGKILLed rank and the peer its death broke
    often share a second, and the tie goes to the lower rank. So the root cause alone can name the echo.
    """
    text = "\n".join(tail_lines(layout.agent_log(launch_path), 400))
    root_at = text.find("Root Cause")
    if root_at < 0:
        return []
    others_at = text.rfind("Failures:", 0, root_at)
    root = _FAILURE_RE.findall(text[root_at:])[:1]
    others = _FAILURE_RE.findall(text[others_at:root_at]) if others_at >= 0 else []
    return [(int(rank), int(code), when) for when, rank, code in root + others]
