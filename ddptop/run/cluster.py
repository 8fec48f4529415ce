"""Where this ddptop stands in a multi-node sweep: torchrun's static rendezvous, from flags or from SLURM.

Every node runs the same ``ddptop run``; node rank 0 leads (builds the plan, runs the sweep, writes the
summary) and every other node follows the leader's run directory on the shared filesystem, starting its own
torchrun agent for each launch that spans it. The ranks meet through torchrun's rendezvous at the endpoint
(the leader's agent hosts it): ddptop adds no protocol of its own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass

from ddptop.errors import DdptopError

DEFAULT_PORT = 29400
DEFAULT_JOIN_TIMEOUT = 600.0


class ClusterError(DdptopError):
    """Multi-node settings that cannot work; one line for the user."""


@dataclass(frozen=True)
class Cluster:
    nnodes: int
    node_rank: int
    host: str  # the rendezvous endpoint: the leader's address
    port: int
    join_timeout: float = DEFAULT_JOIN_TIMEOUT
    source: str = "flags"  # or "slurm"

    @property
    def leader(self) -> bool:
        return self.node_rank == 0

    @property
    def endpoint(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def loopback(self) -> bool:
        """Every node on this machine (a test, or a rehearsal before the real job)."""
        return self.host in ("localhost", "::1") or self.host.startswith("127.")


def parse_endpoint(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ClusterError(f"--rdzv-endpoint must be HOST:PORT (got {text!r})")
    return host.strip("[]"), int(port)


def from_flags(nnodes: int, node_rank: int | None, endpoint: str | None, join_timeout: float) -> Cluster | None:
    """torchrun's own flags: --nnodes, --node-rank, --rdzv-endpoint. None for a single node."""
    if nnodes < 1:
        raise ClusterError(f"--nnodes must be at least 1 (got {nnodes})")
    if nnodes == 1:
        if node_rank or endpoint:
            raise ClusterError("--node-rank and --rdzv-endpoint need --nnodes above 1")
        return None
    if endpoint is None:
        raise ClusterError("--nnodes above 1 needs --rdzv-endpoint HOST:PORT (the node-rank-0 host), or --slurm")
    rank = node_rank or 0
    if not 0 <= rank < nnodes:
        raise ClusterError(f"--node-rank must be in 0..{nnodes - 1} (got {rank})")
    if join_timeout <= 0:
        raise ClusterError(f"--join-timeout must be positive seconds (got {join_timeout:g})")
    host, port = parse_endpoint(endpoint)
    return Cluster(nnodes, rank, host, port, join_timeout)


def from_slurm(env: dict[str, str], endpoint: str | None, join_timeout: float) -> Cluster:
    """One ddptop per node started by ``srun --ntasks-per-node=1``: SLURM_NNODES, SLURM_NODEID and the first
    host of the node list (SLURM's node 0) as the endpoint; the port from the job id unless given."""
    missing = [v for v in ("SLURM_JOB_ID", "SLURM_NODEID") if v not in env]
    nodes_text = env.get("SLURM_STEP_NUM_NODES") or env.get("SLURM_NNODES") or env.get("SLURM_JOB_NUM_NODES")
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST")
    if nodes_text is None:
        missing.append("SLURM_NNODES")
    if nodelist is None:
        missing.append("SLURM_JOB_NODELIST")
    if missing:
        raise ClusterError(f"--slurm outside a SLURM step: {', '.join(missing)} not set (start ddptop with srun)")
    assert nodes_text is not None and nodelist is not None
    tasks = env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS")
    if tasks is not None and tasks != nodes_text:
        raise ClusterError(
            f"--slurm needs one ddptop per node (srun --ntasks-per-node=1); this step has {tasks} tasks on "
            f"{nodes_text} nodes"
        )
    try:
        nnodes, node_rank = int(nodes_text), int(env["SLURM_NODEID"])
    except ValueError:
        raise ClusterError(f"SLURM_NNODES={nodes_text!r} or SLURM_NODEID={env['SLURM_NODEID']!r} is not a number")
    if endpoint:
        host, port = parse_endpoint(endpoint)
    else:
        host = first_host(nodelist)
        port = DEFAULT_PORT + int(env["SLURM_JOB_ID"]) % 1000 if env["SLURM_JOB_ID"].isdigit() else DEFAULT_PORT
    if not 0 <= node_rank < nnodes:
        raise ClusterError(f"SLURM_NODEID={node_rank} is outside the {nnodes} nodes of the step")
    return Cluster(nnodes, node_rank, host, port, join_timeout, "slurm")


def first_host(nodelist: str) -> str:
    """The first host of a SLURM node list ('gpu[07-08,12],cpu3' -> 'gpu07'); scontrol when it is there."""
    if shutil.which("scontrol"):
        try:
            done = subprocess.run(
                ["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, timeout=10
            )
            if done.returncode == 0 and done.stdout.split():
                return done.stdout.split()[0]
        except (OSError, subprocess.TimeoutExpired):
            pass
    return expand_first(nodelist)


_BRACKETED = re.compile(r"^([^,\[]*)\[([^\]]+)\](.*)$")


def expand_first(nodelist: str) -> str:
    first = nodelist.strip()
    match = _BRACKETED.match(first)
    if match is None:
        name = first.split(",")[0]
        if not name:
            raise ClusterError(f"cannot read the SLURM node list {nodelist!r}")
        return name
    prefix, ranges, rest = match.groups()
    start = ranges.split(",")[0].split("-")[0]
    suffix = rest.split(",")[0] if not rest.startswith(",") else ""
    return f"{prefix}{start}{suffix}"


def slurm_run_dir(env: dict[str, str]) -> str | None:
    """The run directory every node of a SLURM job agrees on without being told (relative to the cwd)."""
    job = env.get("SLURM_JOB_ID")
    return os.path.join("runs", f"slurm-{job}") if job else None
