"""A node other than node 0 in a multi-node sweep: it follows the leader's run directory.

The leader (node rank 0) decides everything and writes it down before acting: the plan, each launch's
``launch_start`` mark in runner.jsonl, then its launch.json. A follower reads those files on the shared
filesystem and, for each launch that spans it, starts its own torchrun agent with the same launch.json and
the leader's rendezvous endpoint; torchrun's rendezvous joins the agents. When the leader ends a launch
(finished, failed, skipped, stopped) the follower's agent is given a moment and then stopped too. What the
follower did goes to runner-node<K>.jsonl and its node's telemetry to telemetry-node<K>.jsonl.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from typing import Any, Callable

from ddptop.run.cluster import Cluster, ClusterError
from ddptop.errors import DdptopError
from ddptop.run.launcher import NodePlacement, TorchrunLaunch, describe_exit
from ddptop.run.plan_records import Plan
from ddptop.protocol import layout, storage
from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError
from ddptop.protocol.marks import FollowerEnd, LaunchEnd, LaunchJoin, LaunchStart, SweepEnd, parse_mark
from ddptop.protocol.vocab import Status, SweepStatus
from ddptop.protocol.wire import EventFileReader, EventsUnwritable, EventWriter
from ddptop.telemetry.inventory import devices_for, rank_gpu_environment, read_inventory

END_GRACE = 10.0  # seconds a follower's agent gets to end by itself once the leader's launch has ended
POLL = 0.2


class Follower:
    def __init__(self, run_dir: str, cluster: Cluster, say: Callable[[str], None] = print) -> None:
        assert not cluster.leader
        self.run_dir = run_dir
        self.cluster = cluster
        self.say = say
        self.current: TorchrunLaunch | None = None
        self.failed_launches: list[str] = []
        self.leader_status: str | None = None
        self._stop = threading.Event()
        self._writer: EventWriter | None = None
        self._runner = EventFileReader(layout.run_file(run_dir, layout.RUNNER_FILE))
        self._started: dict[str, LaunchStart] = {}
        self._ended: set[str] = set()
        self._own_devices: tuple[tuple[str, ...], bool] | None = None

    def request_stop(self) -> None:
        self._stop.set()

    # -- the run ------------------------------------------------------------------------------------------
    def run(self, plan: dict[str, Any] | None = None) -> str:
        """Follow until the leader's sweep ends (its status), or until stopped ("stopped")."""
        plan = plan if plan is not None else self.wait_for_plan()
        self._writer = self._start_records()
        self.say(f"ddptop: node {self.cluster.node_rank} of {self.cluster.nnodes} following {self.run_dir} "
                 f"(rendezvous {self.cluster.endpoint})")
        try:
            while not self._stop.is_set():
                self._read_leader()
                waiting = [d for name, d in self._started.items() if name not in self._ended and self._spans_me(d)]
                if waiting:
                    name = waiting[0].launch
                    self._join(waiting[0], plan, lambda: self._read_leader() or name in self._ended)
                    self._ended.add(name)  # never joined twice, whatever the leader writes next
                    continue
                if self.leader_status is not None:
                    return self.leader_status
                time.sleep(POLL)
            return SweepStatus.STOPPED
        finally:
            self._mark(FollowerEnd(self.leader_status))
            with contextlib.suppress(EventsUnwritable):  # said once already, by _mark
                self._writer.close()

    def _start_records(self) -> EventWriter:
        """runner-node<K>.jsonl, opened and said hello to. A node that cannot write there cannot write its
        ranks' events either (a read-only mount, a full quota): one line, before any launch is joined."""
        runner_file = layout.run_file(self.run_dir, layout.RUNNER_FILE, self.cluster.node_rank)
        try:
            writer = EventWriter(runner_file, -1, 0.0)
        except OSError as exc:
            raise ClusterError(self._unwritable(storage.describe_os_error(exc, runner_file))) from None
        writer.emit("hello", world_size=0, host=os.uname().nodename, pid=os.getpid(), device="-",
                    node_rank=self.cluster.node_rank)
        try:
            writer.flush(durable=True)
        except EventsUnwritable as exc:
            with contextlib.suppress(EventsUnwritable):
                writer.close()
            raise ClusterError(self._unwritable(str(exc))) from None
        return writer

    def _unwritable(self, problem: str) -> str:
        return (f"node {self.cluster.node_rank}: {problem} in {self.run_dir}: every node writes its records and its "
                "ranks' events there (a shared filesystem, writable from each node)")

    def _read_leader(self) -> None:
        """Apply the leader's new marks: launches started and ended, the sweep's end (which ends them all)."""
        for mark in map(parse_mark, self._runner.read_new()):
            if isinstance(mark, LaunchStart):
                self._started[mark.launch] = mark
            elif isinstance(mark, LaunchEnd):
                self._ended.add(mark.launch)
            elif isinstance(mark, SweepEnd):
                self.leader_status = mark.status
                self._ended.update(self._started)

    def _spans_me(self, launch: LaunchStart) -> bool:
        return int(launch.nodes) > self.cluster.node_rank

    def wait_for_plan(self) -> dict[str, Any]:
        path = layout.run_file(self.run_dir, layout.PLAN_FILE)
        deadline = time.monotonic() + self.cluster.join_timeout
        while not os.path.exists(path):
            if self._stop.is_set():
                raise ClusterError(f"stopped while waiting for node 0's {layout.PLAN_FILE} in {self.run_dir}")
            if time.monotonic() > deadline:
                raise ClusterError(
                    f"node 0 wrote no {layout.PLAN_FILE} in {self.run_dir} within {self.cluster.join_timeout:g} s: "
                    "is it started with the same --out, on a filesystem both nodes share?"
                )
            time.sleep(POLL)
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)

    def _join(self, launch: LaunchStart, plan: dict[str, Any], leader_ended: Callable[[], bool]) -> None:
        name = launch.launch
        path = layout.launch_path(self.run_dir, name)
        spec_path = layout.spec_path(path)
        deadline = time.monotonic() + 60
        while not os.path.exists(spec_path):  # the leader writes it right after its launch_start mark
            if self._stop.is_set() or leader_ended() or time.monotonic() > deadline:
                return
            time.sleep(POLL)
        try:
            spec = LaunchSpec.read(spec_path)
        except LaunchSpecError as exc:  # the ranks would refuse it too: say so here, and let the leader time out
            self._not_joining(name, str(exc))
            return
        nodes, per_node = int(launch.nodes), int(launch.nproc_per_node or 0)
        placement = NodePlacement.on(self.cluster, nodes)
        try:
            env = {"OMP_NUM_THREADS": str(spec.threads_per_rank), **self._gpu_environment(Plan.from_json(plan))}
        except DdptopError as exc:  # loopback nodes that would share GPUs: the leader refused it already
            self._not_joining(name, str(exc))
            return
        agent = TorchrunLaunch(path, None, per_node, env, placement=placement)
        self.say(f"ddptop: node {self.cluster.node_rank}: joining {name} ({nodes} nodes x {per_node} ranks)")
        self._mark(LaunchJoin(name))
        self.current = agent
        agent.start()
        leader_done_at: float | None = None
        while agent.poll() is None:
            if self._stop.is_set():
                break
            if leader_done_at is None and leader_ended():
                leader_done_at = time.monotonic()
            if leader_done_at is not None and time.monotonic() - leader_done_at > END_GRACE:
                break
            time.sleep(POLL)
        if agent.poll() is None:
            agent.stop()
        agent.kill_tree()
        self.current = None
        outcome = agent.outcome()
        if outcome.status == Status.FAILED and leader_done_at is None:
            self.failed_launches.append(name)
        self._mark(LaunchEnd(name, outcome.exit_code, outcome.status, outcome.reason, outcome.wall_s))
        self.say(f"ddptop: node {self.cluster.node_rank}: {name} ended, {outcome.status}"
                 + (f" (torchrun {describe_exit(outcome.exit_code)})" if outcome.status == Status.FAILED else ""))

    def _gpu_environment(self, plan: Plan) -> dict[str, str]:
        """This node's GPUs for its ranks: a slice of the leader's when every node is on this machine, else
        this node's own, read from its own NVML (the plan's UUIDs name node 0's GPUs)."""
        if plan.device != "cuda":
            return {}
        if self.cluster.loopback:
            return rank_gpu_environment(plan, dict(os.environ), self.cluster.node_rank, loopback=True)
        if self._own_devices is None:
            self._own_devices = devices_for(read_inventory(), plan.gpus)
        return rank_gpu_environment(plan, dict(os.environ), self.cluster.node_rank, own=self._own_devices)

    def _not_joining(self, name: str, reason: str) -> None:
        """A launch this node cannot join: said, counted as failed, and marked as ended so."""
        self.say(f"ddptop: node {self.cluster.node_rank}: not joining {name}: {reason}")
        self.failed_launches.append(name)
        self._mark(LaunchEnd(name, None, Status.FAILED, reason, 0.0))

    def _mark(self, mark: FollowerEnd | LaunchEnd | LaunchJoin) -> None:
        """Write one of this node's marks (with its node rank) to runner-node<K>.jsonl, durably."""
        assert self._writer is not None
        if self._writer.failed is not None:
            return
        self._writer.emit("mark", data=dataclasses.replace(mark, node_rank=self.cluster.node_rank).to_data())
        try:
            self._writer.flush(durable=True)
        except EventsUnwritable as exc:  # node 0 waits for this node's marks a while, then goes on without them
            self.say(f"ddptop: node {self.cluster.node_rank}: {exc}; this node's marks are not saved")
