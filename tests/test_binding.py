"""Binding ranks to CPUs: the planned sets (pure), their trip through launch.json, the launcher's torchrun
flag for GPU launches, what a rank applies and reports, and one real launch."""

from __future__ import annotations

import json
import os

import pytest

from ddptop.run import binding
from ddptop.run.launcher import TorchrunLaunch
from ddptop.protocol import affinity
from ddptop.protocol.affinity import PHYSICAL, SIBLINGS, assign_cores, bind_this_process, cpu_places
from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError


def _two_nodes_with_siblings() -> dict[int, tuple[int, int, int]]:
    """16 CPUs: NUMA nodes 0 and 1 of four cores each, CPU c and c + 8 hyperthread siblings (Linux's order)."""
    return {cpu: ((cpu % 8) // 4, (cpu % 8) // 4, cpu % 8) for cpu in range(16)}


def _disjoint(sets) -> bool:
    flat = [cpu for s in sets for cpu in s]
    return len(flat) == len(set(flat))


# -- the plan (pure) -------------------------------------------------------------------------------------------

def test_one_cpu_per_physical_core_and_each_rank_inside_one_numa_node():
    found = assign_cores(range(16), 2, 4, _two_nodes_with_siblings())
    assert found.how == PHYSICAL
    assert found.cores == ((0, 1, 2, 3), (4, 5, 6, 7))  # node 0's cores, then node 1's; no sibling used


def test_a_rank_that_would_straddle_nodes_goes_to_the_next_one():
    places = {cpu: (0 if cpu < 6 else 1, 0, cpu) for cpu in range(12)}  # two nodes of six cores
    assert assign_cores(range(12), 2, 4, places).cores == ((0, 1, 2, 3), (6, 7, 8, 9))


def test_siblings_are_used_only_when_physical_cores_run_out():
    found = assign_cores(range(16), 4, 4, _two_nodes_with_siblings())
    assert found.how == SIBLINGS
    assert found.cores == ((0, 1, 8, 9), (2, 3, 10, 11), (4, 5, 12, 13), (6, 7, 14, 15))  # whole cores each


def test_only_the_cpus_this_process_may_use_are_given_out():
    allowed = {2, 3, 5, 7, 11}  # a cgroup's odd choice
    found = assign_cores(allowed, 2, 2)
    assert found.cores == ((2, 3), (5, 7)) and _disjoint(found.cores)
    assert assign_cores(allowed, 2, 2) == found  # the same arguments, the same sets


@pytest.mark.parametrize("ranks, threads", [(4, 1), (2, 2), (3, 1)])
def test_more_threads_than_cpus_binds_nothing_and_says_why(ranks, threads):
    found = assign_cores({0, 1}, ranks, threads, {0: (0, 0, 0), 1: (0, 0, 1)})
    assert found.cores is None
    assert found.how == f"not bound: {ranks} rank(s) x {threads} thread(s) need {ranks * threads} CPUs, 2 allowed"


def test_this_two_core_machine_fits_two_ranks_of_one_thread():
    found = assign_cores({0, 1}, 2, 1, {0: (0, 0, 0), 1: (0, 0, 1)})
    assert found.cores == ((0,), (1,))


def test_cpu_places_read_sysfs_and_default_to_a_core_per_cpu(tmp_path):
    def write(relative, text):
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text + "\n")

    write("devices/system/node/node0/cpulist", "0-1")
    write("devices/system/node/node1/cpulist", "2-3")
    for cpu, core in ((0, 0), (1, 0), (2, 1), (3, 1)):  # two cores of two siblings, one per node
        write(f"devices/system/cpu/cpu{cpu}/topology/physical_package_id", str(cpu // 2))
        write(f"devices/system/cpu/cpu{cpu}/topology/core_id", str(core))
    places = cpu_places({0, 1, 2, 3, 9}, str(tmp_path))
    assert places == {0: (0, 0, 0), 1: (0, 0, 0), 2: (1, 1, 1), 3: (1, 1, 1), 9: (0, -1, 9)}
    assert assign_cores({0, 1, 2, 3}, 2, 1, places).cores == ((0,), (2,))  # a core each, not two siblings


# -- launch.json ------------------------------------------------------------------------------------------------

def _spec(**fields) -> LaunchSpec:
    base = {"launch_id": "01-n2-gloo", "events_dir": "/tmp/e", "device": "cpu", "backend": "gloo",
            "threads_per_rank": 1, "configs": ()}
    return LaunchSpec(**{**base, **fields})


def test_rank_cores_round_trip_through_launch_json():
    spec = _spec(rank_cores=((0, 1), (2, 3)), binding=PHYSICAL)
    data = json.loads(spec.dumps())
    assert data["rank_cores"] == [[0, 1], [2, 3]] and data["numa_binding"] is None
    assert LaunchSpec.loads(spec.dumps()) == spec
    assert LaunchSpec.loads(_spec(numa_binding="node").dumps()).numa_binding == "node"


def test_an_older_launch_json_reads_as_unbound():
    data = json.loads(_spec(rank_cores=((0,),)).dumps())
    for key in ("rank_cores", "binding", "numa_binding"):
        del data[key]
    spec = LaunchSpec.from_json(data)
    assert (spec.rank_cores, spec.binding, spec.numa_binding) == (None, "not bound", None)


def test_a_rank_cores_entry_of_another_type_is_refused_by_name():
    data = json.loads(_spec().dumps())
    data["rank_cores"] = [[0, "1"]]
    with pytest.raises(LaunchSpecError, match=r"rank_cores\[0\]\[1\] is a string, not an integer"):
        LaunchSpec.from_json(data)


# -- what the sweep writes --------------------------------------------------------------------------------------

class _Plan:
    def __init__(self, device="cpu", bind_cores=True, per_rank_devices=False):
        self.device, self.bind_cores, self.per_rank_devices = device, bind_cores, per_rank_devices


def test_the_sweep_plans_cpu_launches_from_its_own_affinity(monkeypatch):
    monkeypatch.setattr(binding, "allowed_cpus", lambda: {0, 1, 2, 3})
    monkeypatch.setattr(affinity, "cpu_places", lambda cpus, root="/sys": {c: (0, 0, c) for c in cpus})
    assert binding.launch_binding(_Plan(), 2, 2) == {"rank_cores": ((0, 1), (2, 3)), "binding": PHYSICAL}
    assert binding.launch_binding(_Plan(bind_cores=False), 2, 2) == {"binding": affinity.OFF}
    assert binding.launch_binding(_Plan(), 4, 2)["rank_cores"] is None


def test_gpu_launches_ask_torchrun_for_numa_binding_where_it_can(monkeypatch):
    monkeypatch.setattr(binding, "torchrun_has_numa_binding", lambda: True)
    assert binding.launch_binding(_Plan("cuda"), 2, 8) == {"numa_binding": "node"}
    assert binding.launch_binding(_Plan("cuda", per_rank_devices=True), 2, 8)["binding"].startswith("not bound")
    monkeypatch.setattr(binding, "torchrun_has_numa_binding", lambda: False)
    assert "no --numa-binding" in binding.launch_binding(_Plan("cuda"), 2, 8)["binding"]


def test_the_installed_torch_is_seen_to_have_numa_binding_or_not_without_importing_it():
    import importlib.util
    import sys

    binding.torchrun_has_numa_binding.cache_clear()
    had_torch = "torch" in sys.modules
    found = binding.torchrun_has_numa_binding()
    origin = importlib.util.find_spec("torch")
    expected = origin is not None and any(
        os.path.exists(os.path.join(p, "numa", "binding.py")) for p in origin.submodule_search_locations or [])
    assert found == expected
    assert ("torch" in sys.modules) == had_torch


@pytest.mark.parametrize("numactl", [True, False])
def test_the_launcher_passes_numa_binding_only_where_numactl_is(tmp_path, monkeypatch, numactl):
    monkeypatch.setattr("ddptop.run.launcher.shutil.which", lambda name, path=None: "/usr/bin/numactl" if numactl else None)
    launch = TorchrunLaunch(str(tmp_path), _spec(device="cuda", numa_binding="node"), 2)
    command, env = launch.command(29500), launch.environment()
    assert ("--numa-binding=node" in command) == numactl
    if numactl:  # an option of torchrun's, not of the kernel
        assert command.index("--numa-binding=node") < command.index(launch.kernel)
    assert env.get(affinity.NUMA_BINDING_ENV) == ("node" if numactl else None)
    cpu = TorchrunLaunch(str(tmp_path), _spec(rank_cores=((0,), (1,))), 2)
    assert not any(word.startswith("--numa-binding") for word in cpu.command(29500))
    assert affinity.UNBOUND_ENV not in cpu.environment()


def test_nodes_rehearsed_on_one_machine_leave_their_ranks_unbound(tmp_path, monkeypatch, restore_affinity):
    from bench_kernels.hello import bind_cores
    from ddptop.run.launcher import NodePlacement

    spec = _spec(rank_cores=((0,), (1,)), binding=PHYSICAL)
    placement = NodePlacement(2, 1, "127.0.0.1", 29500, 60.0, loopback=True)
    reason = TorchrunLaunch(str(tmp_path), spec, 2, placement=placement).environment()[affinity.UNBOUND_ENV]
    monkeypatch.setenv(affinity.UNBOUND_ENV, reason)  # as the rank inherits it
    assert bind_cores(spec, 0) == (f"not bound: {reason}", sorted(restore_affinity))
    elsewhere = NodePlacement(2, 1, "node1", 29500, 60.0, loopback=False)
    assert affinity.UNBOUND_ENV not in TorchrunLaunch(str(tmp_path), spec, 2, placement=elsewhere).environment()


# -- the rank ----------------------------------------------------------------------------------------------------

@pytest.fixture
def restore_affinity():
    before = os.sched_getaffinity(0)
    yield before
    os.sched_setaffinity(0, before)


def test_a_rank_binds_to_its_planned_cpus_and_says_so(restore_affinity):
    cpu = min(restore_affinity)
    how, cores = bind_this_process((cpu,), PHYSICAL)
    assert (how, cores) == (PHYSICAL, [cpu]) and os.sched_getaffinity(0) == {cpu}


def test_a_rank_whose_planned_cpus_are_not_allowed_here_stays_unbound(restore_affinity):
    how, cores = bind_this_process((max(restore_affinity) + 1000,), PHYSICAL)
    assert how == "not bound: none of its planned CPUs is allowed here"
    assert cores == sorted(restore_affinity)


def test_the_kernel_reports_torchrun_s_numa_binding_only_when_its_agent_applied_it(monkeypatch, restore_affinity):
    from bench_kernels.hello import bind_cores

    spec = _spec(device="cuda", numa_binding="node")
    monkeypatch.setenv(affinity.NUMA_BINDING_ENV, "node")
    assert bind_cores(spec, 0)[0] == "NUMA node of its GPU (torchrun --numa-binding=node)"
    monkeypatch.delenv(affinity.NUMA_BINDING_ENV)
    assert bind_cores(spec, 0)[0].startswith("not bound: no numactl")
    lacking = _spec(rank_cores=((0,),), binding=PHYSICAL)
    assert bind_cores(lacking, 3)[0] == "not bound: no planned CPUs for local rank 3"
    assert bind_cores(_spec(binding=affinity.OFF), 0) == (affinity.OFF, sorted(restore_affinity))


# -- one real launch ---------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_each_rank_s_hello_reports_the_disjoint_cores_it_was_bound_to(tmp_path):
    from tests.conftest import run_sweep

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("needs two CPUs")
    run_dir = str(tmp_path / "run")
    done = run_sweep(run_dir, "--models", "tests.tiny_models:tiny_cnn", "--batch-sizes", "2", "--world-sizes", "2",
                     "--image-size", "32", "--num-classes", "10", "--warmup", "1", "--iters", "3",
                     "--threads-per-rank", "1", "--no-collectives", "--telemetry-interval", "0", "--launches", "1")
    assert done.returncode == 0, done.stderr + done.stdout
    launches = sorted(os.listdir(os.path.join(run_dir, "launches")))
    assert launches
    setups = done.summary()["environment"]["launch_setup"]
    for launch in launches:
        spec = LaunchSpec.read(os.path.join(run_dir, "launches", launch, "launch.json"))
        hellos = {}
        for rank in (0, 1):
            with open(os.path.join(run_dir, "launches", launch, "events", f"rank-{rank}.jsonl"), encoding="utf-8") as f:
                hellos[rank] = next(e for e in map(json.loads, f) if e["type"] == "hello")
        assert all(h["binding"] == spec.binding == PHYSICAL for h in hellos.values())
        assert [tuple(hellos[r]["cores"]) for r in (0, 1)] == list(spec.rank_cores)
        assert all(len(h["cores"]) == 1 == h["threads"] for h in hellos.values())
        assert _disjoint(h["cores"] for h in hellos.values())
        assert setups[launch]["ranks"]["1"] == {"binding": spec.binding, "cores": hellos[1]["cores"]}
