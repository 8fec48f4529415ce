"""Start, watch and stop one torchrun (``torch.distributed.run``) process group.

The torchrun agent is started in a session of its own (so a Ctrl-C meant for ddptop does not reach the
ranks first) with its output in ``agent.log`` and each worker's in torchrun's ``--log-dir``. torchrun starts
its workers in sessions of their own too, so stopping signals the agent and then, after a grace period,
kills every process of the tree as it was seen (psutil), grandchildren included. Single-node launches use a
free loopback port for the rendezvous; a launch that spans nodes uses torchrun's static rendezvous at the
leader's endpoint, one agent per node, each with its own agent log and worker log directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil

import bench_kernels
from ddptop.run.cluster import Cluster
from ddptop.protocol import layout, storage
from ddptop.protocol.affinity import NUMA_BINDING_ENV, UNBOUND_ENV
from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError
from ddptop.protocol.modelspec import KINDS, Kind
from ddptop.protocol.vocab import Status
from ddptop.protocol.workload import STARTED_IN_ENV

# Seconds between looks for the launch's processes while it runs: each look reads every /proc/<pid>/stat,
# so the gap doubles from the first to the last (the ranks appear in a launch's first seconds; stopping a
# launch looks once more whatever the gap).
TREE_SCAN_INTERVALS = (1.0, 8.0)
KERNEL_PROGRAM = KINDS[Kind.CLASSIFIER].program  # ddptop's own kernel, which builds the model of every other kind


def import_path(entries: list[str | None], cwd: str) -> str:
    """``PYTHONPATH`` of the given entries (each may itself be a ``PYTHONPATH``), every one made absolute against
    ``cwd``, in order, once each: a relative entry would otherwise name another folder in a rank, which runs in
    its launch directory."""
    parts = [part for entry in entries if entry for part in entry.split(os.pathsep) if part]
    return os.pathsep.join(dict.fromkeys(os.path.normpath(os.path.join(cwd, part)) for part in parts))


def kernel_environment(cwd: str | None = None) -> dict[str, str]:
    """This process's environment for anything that runs the kernels' code, the check before launch and every
    rank alike (one function, so the two cannot disagree): the workers import bench_kernels and
    ddptop.protocol from this very checkout, installed or not, and a user's module from where ddptop was
    started, the user's ``PYTHONPATH`` made absolute against ddptop's working directory (the ranks run in the
    launch directory); ``STARTED_IN_ENV`` names that directory for a rank's error line."""
    cwd = cwd or os.getcwd()
    env = dict(os.environ)
    source_root = os.path.dirname(os.path.dirname(os.path.abspath(bench_kernels.__file__)))
    env["PYTHONPATH"] = import_path([source_root, cwd, env.get("PYTHONPATH")], cwd)
    env[STARTED_IN_ENV] = cwd
    return env


@dataclass(frozen=True)
class NodePlacement:
    """Where this agent stands in a launch that spans nodes."""

    nnodes: int
    node_rank: int
    host: str
    port: int
    join_timeout: float
    loopback: bool  # every node on this machine

    @classmethod
    def on(cls, cluster: Cluster, nodes: int) -> "NodePlacement":
        """This node's place in a launch over the first ``nodes`` nodes of the cluster."""
        return cls(nodes, cluster.node_rank, cluster.host, cluster.port, cluster.join_timeout, cluster.loopback)


@dataclass
class LaunchOutcome:
    exit_code: int | None
    status: str  # ok | failed | stopped
    wall_s: float
    reason: str | None


def _load_prctl() -> Any:
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except OSError:
        return None


_PRCTL = _load_prctl()  # looked up here: the child between fork and exec must not import or load anything


def die_with_ddptop() -> None:
    """In the agent (or the check before launch), before exec: SIGTERM it when ddptop dies, even by SIGKILL, so
    it stops its ranks (which in turn die with it) and nothing keeps a GPU busy for a ddptop that is gone."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def free_loopback_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class TorchrunLaunch:
    def __init__(
        self,
        path: str,
        spec: LaunchSpec | None,
        nproc_per_node: int,
        env: dict[str, str] | None = None,
        kernel: str = KERNEL_PROGRAM,
        python: str = sys.executable,
        placement: NodePlacement | None = None,
    ) -> None:
        self.path = path
        self.spec = spec  # None: a follower node's agent runs the leader's launch.json
        self.placement = placement
        self.nproc_per_node = nproc_per_node
        self.kernel = kernel
        self._read_spec: LaunchSpec | None = None
        self.python = python
        self.extra_env = env or {}
        self.process: subprocess.Popen[bytes] | None = None
        self.started: float | None = None
        self.ended: float | None = None
        self.stop_requested = False
        self._tree: dict[int, psutil.Process] = {}
        self._next_tree_scan = 0.0
        self._tree_scan_gap = TREE_SCAN_INTERVALS[0]

    @property
    def node_rank(self) -> int:
        return self.placement.node_rank if self.placement else 0

    @property
    def spec_path(self) -> str:
        return layout.spec_path(self.path)

    @property
    def agent_log(self) -> str:
        return layout.agent_log(self.path, self.node_rank)

    def launch_spec(self) -> LaunchSpec | None:
        """The launch's spec: the leader's own, or on a follower node the launch.json the leader wrote (read
        once; None where it cannot be read)."""
        if self.spec is None and self._read_spec is None:
            try:
                self._read_spec = LaunchSpec.read(self.spec_path)
            except LaunchSpecError:
                return None
        return self.spec or self._read_spec

    def rank_program(self) -> list[str]:
        """What torchrun runs in each rank: its configurations' kind's program (``ModelKind.program``), ddptop's
        kernel (``kernel``) or a program of the kind's own, the probe, with the user's command after ``--``."""
        spec = self.launch_spec()
        program = spec.configs[0].kind.program if spec is not None and spec.configs else KERNEL_PROGRAM
        if program == KERNEL_PROGRAM:
            return ["-m", self.kernel, "--spec", self.spec_path]
        return ["-m", program, "--spec", self.spec_path, "--", *(spec.script if spec is not None else ())]

    def working_dir(self) -> str:
        """Where the ranks start: a script where the user started ddptop (its relative paths are the user's), as
        ``torchrun train.py`` would; a kernel in its launch directory."""
        spec = self.launch_spec()
        if spec is not None and spec.script_dir and os.path.isdir(spec.script_dir):
            return spec.script_dir
        return self.path

    def command(self, port: int) -> list[str]:
        where = self.placement
        if where is None:
            nodes = ["--nnodes=1", "--master-addr=127.0.0.1", f"--master-port={port}"]
        else:
            # every node on this machine: each agent meets at 127.0.0.1, where node 0's store listens
            host = "127.0.0.1" if where.loopback else where.host
            nodes = [f"--nnodes={where.nnodes}", f"--node-rank={where.node_rank}", f"--master-addr={host}",
                     f"--master-port={where.port}", f"--rdzv-conf=timeout={int(where.join_timeout)}"]
        # The agent that hosts the store on this machine alone (one node, or node 0 of nodes that are all on this
        # machine): torchrun behind a store that listens on loopback only (bench_kernels.loopback_agent).
        local_store = where is None or (where.loopback and where.node_rank == 0)
        agent = "bench_kernels.loopback_agent" if local_store else "torch.distributed.run"
        numa = self.numa_binding()
        return [
            self.python,
            "-m",
            agent,
            *nodes,
            *([f"--numa-binding={numa}"] if numa else []),
            f"--nproc-per-node={self.nproc_per_node}",
            "--max-restarts=0",
            "--monitor-interval=0.2",
            f"--log-dir={layout.logs_dir(self.path, self.node_rank)}",
            "--redirects=3",
            *self.rank_program(),
        ]

    def numa_binding(self) -> str | None:
        """The --numa-binding mode this node's agent gets: the launch spec's, where numactl is on this node's
        PATH (torch's binding runs it, and without it fails the whole launch). Unverified: it needs a GPU."""
        spec = self.launch_spec()  # a follower node: the leader's launch.json, written before its agent starts
        if spec is None:
            return None
        path = {**os.environ, **self.extra_env}.get("PATH")
        return spec.numa_binding if spec.numa_binding and shutil.which("numactl", path=path) else None

    def environment(self) -> dict[str, str]:
        env = kernel_environment()
        env["PYTHONUNBUFFERED"] = "1"
        # Every rank on this machine: gloo's connections between ranks, and NCCL's bootstrap and proxy sockets,
        # listen on loopback instead of the interface the host name resolves to (NCCL's choice: the first
        # non-loopback one); a user's own setting wins. The rendezvous store listens on loopback only
        # (bench_kernels.loopback_agent). Several machines: torchrun's store listens on every interface of
        # node 0 for the launch (docs/faults.md, Security).
        one_machine = self.placement is None or self.placement.loopback
        if one_machine and os.path.exists("/sys/class/net/lo"):
            for variable in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"):
                env.setdefault(variable, "lo")
        env.update(self.extra_env)
        numa = self.numa_binding()
        if numa:  # so each rank can say how it was bound
            env[NUMA_BINDING_ENV] = numa
        else:
            env.pop(NUMA_BINDING_ENV, None)
        env.pop(UNBOUND_ENV, None)
        if self.placement is not None and self.placement.loopback and self.placement.nnodes > 1:
            env[UNBOUND_ENV] = "several nodes of the launch on this one machine"
        return env

    def start(self) -> None:
        if self.spec is not None:
            storage.write_atomic(self.spec_path, self.spec.dumps())
        log = os.open(self.agent_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            self.started = time.monotonic()
            self.process = subprocess.Popen(
                self.command(free_loopback_port()),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.environment(),
                start_new_session=True,
                cwd=self.working_dir(),
                preexec_fn=die_with_ddptop,
            )
        finally:
            os.close(log)

    def poll(self) -> int | None:
        assert self.process is not None
        code = self.process.poll()
        if code is None:
            now = time.monotonic()
            if now >= self._next_tree_scan:  # a scan reads every /proc/<pid>/stat: not ten times a second
                self._remember_tree()
                self._next_tree_scan = now + self._tree_scan_gap
                self._tree_scan_gap = min(2 * self._tree_scan_gap, TREE_SCAN_INTERVALS[1])
        elif self.ended is None:
            self.ended = time.monotonic()
        return code

    def _remember_tree(self) -> None:
        """Keep the processes of the tree we have seen, so we can still kill orphans after the agent dies."""
        assert self.process is not None
        try:
            agent = psutil.Process(self.process.pid)
            for proc in [agent, *agent.children(recursive=True)]:
                self._tree.setdefault(proc.pid, proc)
        except psutil.Error:
            pass

    def stop(self, grace: float = 5.0) -> None:
        """SIGTERM the agent (it forwards to the ranks), then SIGKILL whatever of the tree is left."""
        if self.process is None:
            return
        self.stop_requested = True
        self._remember_tree()
        if self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and self._alive():
            time.sleep(0.05)
        self.kill_tree()

    def kill_tree(self) -> None:
        self._remember_tree()
        for proc in self._alive():
            try:
                proc.kill()
            except psutil.Error:
                pass
        if self.process is not None:
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        psutil.wait_procs(list(self._tree.values()), timeout=5)
        if self.ended is None:
            self.ended = time.monotonic()

    def _alive(self) -> list[psutil.Process]:
        alive = []
        for proc in self._tree.values():
            try:
                if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
            except psutil.Error:
                pass
        if self.process is not None:
            self.process.poll()  # reap the agent so it is not counted as a zombie forever
        return alive

    def outcome(self) -> LaunchOutcome:
        assert self.process is not None and self.started is not None
        code = self.process.poll()
        wall = (self.ended or time.monotonic()) - self.started
        if self.stop_requested:
            return LaunchOutcome(code, Status.STOPPED, wall, "stopped by ddptop")
        if code == 0:
            return LaunchOutcome(code, Status.OK, wall, None)
        return LaunchOutcome(code, Status.FAILED, wall, f"torchrun {describe_exit(code)}")
