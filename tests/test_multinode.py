"""Several nodes: torchrun's static rendezvous from flags or SLURM, rehearsed as two agents on loopback."""

import json
import os
import shutil

import pytest

from ddptop.run.cluster import Cluster, ClusterError, expand_first, from_flags, from_slurm
from ddptop.run.launcher import free_loopback_port
from ddptop.run.plan import PlanError, PlanOptions, build_plan
from ddptop.telemetry.inventory import read_inventory

from .conftest import ddptop, ddptop_process, processes_mentioning
from .intervals_helpers import flat_shape
from .test_store_security import assert_loopback_only, watch_listening

SLURM_STEP = {"SLURM_JOB_ID": "4242", "SLURM_NODEID": "1", "SLURM_NNODES": "2", "SLURM_NTASKS": "2",
              "SLURM_JOB_NODELIST": "gpu[07-08]"}


def test_flags_give_torchruns_static_rendezvous():
    assert from_flags(1, None, None, 600) is None
    cluster = from_flags(2, 1, "10.0.0.7:29500", 300)
    assert cluster == Cluster(2, 1, "10.0.0.7", 29500, 300.0) and not cluster.leader and not cluster.loopback
    assert from_flags(2, None, "[::1]:29500", 600).host == "::1"
    for args, message in (
        ((2, 0, None, 600), "needs --rdzv-endpoint"),
        ((2, 2, "h:1", 600), "--node-rank must be in 0..1"),
        ((2, 0, "h", 600), "HOST:PORT"),
        ((2, 0, "h:99999", 600), "HOST:PORT"),
        ((1, 1, None, 600), "need --nnodes above 1"),
        ((2, 0, "h:1", 0), "--join-timeout"),
    ):
        with pytest.raises(ClusterError, match=message):
            from_flags(*args)


def test_slurm_variables_give_the_same_settings():
    cluster = from_slurm(SLURM_STEP, None, 600)
    # node 0 of the list hosts the rendezvous; the port comes from the job id, so jobs sharing nodes differ
    assert (cluster.nnodes, cluster.node_rank, cluster.host, cluster.port) == (2, 1, "gpu07", 29400 + 242)
    assert from_slurm(SLURM_STEP, "head:1234", 600).endpoint == "head:1234"
    with pytest.raises(ClusterError, match="one ddptop per node"):
        from_slurm({**SLURM_STEP, "SLURM_NTASKS": "16"}, None, 600)
    with pytest.raises(ClusterError, match="SLURM_NODEID not set"):
        from_slurm({k: v for k, v in SLURM_STEP.items() if k != "SLURM_NODEID"}, None, 600)


@pytest.mark.parametrize("nodelist, first", [
    ("gpu[07-08,12]", "gpu07"), ("node1,node2", "node1"), ("a[001-004]-ib", "a001-ib"), ("solo", "solo"),
    ("rack[3,5]n[1-2]", "rack3n[1-2]"),
])
def test_first_host_of_a_slurm_node_list(nodelist, first):
    assert expand_first(nodelist) == first


def test_a_multi_node_plan_adds_whole_nodes_to_one_nodes_sizes():
    inventory = read_inventory()
    plan = build_plan(PlanOptions(nnodes=4, nproc_per_node=2, baseline=False), inventory)
    assert plan.world_sizes == (1, 2, 4, 8)
    labels = [(launch.launch_key, [c.label for c in launch.configs]) for launch in plan.launches()]
    once = [("n1-gloo", ["1M/1P"]), ("n2-gloo", ["1M/2P"]), ("n4-2nodes-gloo", ["2M/2P"]),
            ("n8-4nodes-gloo", ["4M/2P"])]
    assert labels == once + once[::-1] + once  # three launches of each, the world sizes interleaved
    assert [c.config_id for c in plan.configs()][-1] == "resnet18/ddp/bs16/n8/4nodes/gloo"
    for options, message in (
        (PlanOptions(nnodes=2, nproc_per_node=2, world_sizes=[3]), "multiple of 2 ranks per node"),
        (PlanOptions(nnodes=2, nproc_per_node=2, world_sizes=[6]), "at most --nnodes 2"),
        (PlanOptions(nproc_per_node=2), "only applies with --nnodes"),
    ):
        with pytest.raises(PlanError, match=message):
            build_plan(options, inventory)


def test_a_follower_without_a_leader_gives_up_with_one_line(tmp_path):
    done = ddptop("run", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:1",
                  "--out", str(tmp_path / "run"), "--join-timeout", "1")
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "node 0 wrote no plan.json" in done.stderr and "same --out" in done.stderr


@pytest.mark.parametrize("fault", ["cannot open", "full disk"])
def test_a_follower_that_cannot_write_the_run_directory_says_so_in_one_line(tmp_path, fault):
    """Its own records go first; a node that cannot write them cannot write its ranks' events either."""
    from ddptop.protocol import storage

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    shutil.copy(os.path.join("tests", "data", "recorded-run", "plan.json"), run_dir / "plan.json")
    env = {}
    if fault == "cannot open":
        (run_dir / "runner-node1.jsonl").mkdir()  # as root, a directory is what refuses to be opened for writing
    else:
        env = {storage.DISK_FULL_ENV: str(run_dir / "runner-node1.jsonl"), "DDPTOP_FAULT_DISK_FULL_AFTER": "0"}
    done = ddptop("run", "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "127.0.0.1:1",
                  "--out", str(run_dir), "--join-timeout", "1", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    problem = "is a directory" if fault == "cannot open" else "no space left on device"
    assert f"node 1: {problem} writing runner-node1.jsonl in {run_dir}: every node writes" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


@pytest.mark.slow
def test_two_agents_on_loopback_form_a_two_node_sweep(tmp_path):
    run_dir = str(tmp_path / "shared")
    port = free_loopback_port()
    endpoint = f"127.0.0.1:{port}"
    # node 1 comes first, from SLURM's variables, and waits for node 0's plan
    follower = ddptop_process("run", "--slurm", "--rdzv-endpoint", endpoint, "--out", run_dir,
                              "--telemetry-interval", "0.5", env=SLURM_STEP)
    leader = ddptop_process("run", "--headless", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", endpoint,
                            "--nproc-per-node", "1", "--out", run_dir, "--models", "resnet18", "--image-size", "32",
                            "--num-classes", "10", "--batch-sizes", "4", "--warmup", "2", "--iters", "8",
                            "--no-baseline", "--comm-iters", "2", "--coll-max-bytes", "64KiB", "--launches", "1",
                            "--no-plots")
    try:
        listening = watch_listening([leader, follower], timeout=400)  # every socket of both nodes' trees
        leader_out, _ = leader.communicate(timeout=60)
        follower_out, _ = follower.communicate(timeout=120)
    finally:
        leader.kill()
        follower.kill()
    assert leader.returncode == 0, leader_out
    assert follower.returncode == 0, follower_out
    # two nodes on one machine: node 0's store and every rank's sockets listen on loopback only
    assert_loopback_only(listening)
    assert any(s[3] == 1 for s in listening), f"node 1's ranks were never seen listening: {sorted(listening)}"
    assert "joining 02-n2-2nodes-gloo (2 nodes x 1 ranks)" in follower_out
    assert "01-n1" not in follower_out  # a one-node launch is node 0's alone

    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))
    assert [(c["label"], c["status"]) for c in summary["configs"]] == [("1M/1P", "ok"), ("2M/1P", "ok")]
    rows = summary["scaling"][0]["rows"]
    assert [r["label"] for r in rows] == ["1M/1P", "2M/1P"] and rows[1]["speedup"] > 0
    assert "2 ranks --    2M/1P:  p50:" in leader_out and "Nodes (2" in leader_out
    nodes = {n["node_rank"]: n for n in summary["nodes"]}
    assert nodes[1]["role"] == "follower" and nodes[1]["pid"] == follower.pid
    # the two-node launch, and one more of its kind where a busy machine disturbed it
    assert nodes[1]["launches"][0] == {"launch": "02-n2-2nodes-gloo", "status": "ok", "exit_code": 0}
    assert all(l["launch"].endswith("-n2-2nodes-gloo") and l["status"] == "ok" for l in nodes[1]["launches"])
    # rank 1 of the two-node launch ran under node 1's own agent: its log directory, its agent log
    launch = os.path.join(run_dir, "launches", "02-n2-2nodes-gloo")
    assert os.path.exists(os.path.join(launch, "agent-node1.log"))
    assert any(files for _, _, files in os.walk(os.path.join(launch, "logs-node1")))
    with open(os.path.join(launch, "events", "rank-1.jsonl"), encoding="utf-8") as handle:
        hello = json.loads(handle.readline())
    assert hello["local_rank"] == 0 and hello["world_size"] == 2
    # the collectives ran across both nodes, and node 1 recorded its own telemetry
    assert any(t["world_size"] == 2 and t["rows"] for t in summary["collectives"])
    assert os.path.getsize(os.path.join(run_dir, "telemetry-node1.jsonl")) > 0
    assert not processes_mentioning(run_dir)
    # what `ddptop watch` shows of the run: node 1's telemetry beside node 0's
    from ddptop.control import RecordedControl

    telemetry = RecordedControl.of(run_dir, None).take_snapshot().telemetry
    assert telemetry.latest["host"] and list(telemetry.nodes) == [1] and telemetry.nodes[1].latest["host"]
