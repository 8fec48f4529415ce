"""GPU-only defects, checked under the fake NVML answering as the real binding does on older drivers."""

import json
import threading
import time

import pynvml

from ddptop.telemetry import nvml as nv
from ddptop.telemetry.fake.node_readings import RESERVED_BYTES
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.gpu import GpuSampler
from ddptop.telemetry.monitor import Monitor

RANK_PID = 4242


def test_a_driver_without_the_v3_process_call_still_lists_the_processes():
    """pynvml's unversioned call raises NVMLLibraryMismatchError (not an NVMLError) on such a driver: the
    sampler falls back to _v2 and stops asking the unversioned one."""
    fake = FakeNvml(steady=True)  # the DGX-1's driver: no _v3
    fake.attach_process(0, RANK_PID, 3 << 30)
    with GpuSampler(fake) as sampler:
        for _ in range(4):
            readings = sampler.sample()
    assert readings[0].processes == [{"pid": RANK_PID, "gpu_memory": 3 << 30}]
    assert "processes" not in readings[0].na
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 8  # once per GPU, then never again
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses_v2"] == 4 * 8


def test_a_driver_with_the_v3_call_uses_it():
    fake = FakeNvml(steady=True, process_calls_v3=True)
    fake.attach_process(1, RANK_PID, 1 << 30)
    with GpuSampler(fake) as sampler:
        sampler.sample()
        readings = sampler.sample()
    assert readings[1].processes == [{"pid": RANK_PID, "gpu_memory": 1 << 30}]
    assert fake.calls["nvmlDeviceGetComputeRunningProcesses"] == 2 * 8


def test_the_library_mismatch_is_a_permanent_reason_not_a_retry():
    reason = nv.reason_of(pynvml, pynvml.NVMLLibraryMismatchError("Unversioned function called ..."))
    assert reason.permanent and "lacks the version" in reason.reason


def test_memory_used_leaves_out_what_the_driver_reserves():
    """nvidia-smi shows v2's used; v1's counts the driver's reserved memory too."""
    fake = FakeNvml(steady=True)
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    with GpuSampler(fake) as sampler:
        reading = sampler.sample()[0]
    assert reading.mem_used == v1.used - RESERVED_BYTES and reading.mem_total == v1.total


def test_memory_falls_back_to_v1_on_a_driver_without_v2():
    fake = FakeNvml(steady=True, memory_v2=False)
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    v1 = fake.nvmlDeviceGetMemoryInfo(handle)
    with GpuSampler(fake) as sampler:
        for _ in range(3):
            reading = sampler.sample()[0]
    assert reading.mem_used == v1.used and "mem_used" not in reading.na


def test_stopping_while_the_sampler_is_stuck_in_nvml_leaves_nvml_alone(tmp_path):
    """Shutting NVML down (or freeing its event set) under a call still running in the driver is undefined:
    a monitor whose thread is stuck returns, says so, and leaves both to the process's exit."""
    entered, release = threading.Event(), threading.Event()

    class HungDriver(FakeNvml):
        def utilization(self, index, mig):  # the driver's side of nvmlDeviceGetUtilizationRates, hung
            entered.set()
            release.wait(30)
            return super().utilization(index, mig)

    fake = HungDriver(steady=True)
    monitor = Monitor(0.05, str(tmp_path / "telemetry.jsonl"), fake)
    monitor.start()
    try:
        assert entered.wait(30)
        monitor.stop(timeout=0.2)
        assert "nvmlShutdown" not in fake.calls and "nvmlEventSetFree" not in fake.calls
        assert "stuck" in monitor.last_error
    finally:
        release.set()


def test_stopping_a_healthy_monitor_shuts_nvml_down(tmp_path):
    fake = FakeNvml(steady=True)
    monitor = Monitor(0.05, str(tmp_path / "telemetry.jsonl"), fake)
    monitor.start()
    monitor.stop()
    assert fake.calls.get("nvmlShutdown") == 1


def test_the_gpu_table_fits_the_largest_gpus_without_cutting_a_value():
    from ddptop.tui.panels.gpus import GPU_COLUMNS, _gpu_cells

    widths = {column[0]: column[2] for column in GPU_COLUMNS}  # (key, label, width[, priority])
    h200 = {"index": 7, "mem_used": 140 * 2**30, "mem_total": 141 * 2**30, "power_w": 1000.0,
            "power_limit_w": 1000.0, "util": 100, "temp_c": 85, "sm_clock_mhz": 1980}
    cells = _gpu_cells(h200, "NVIDIA H200", [100] * 12, ["7"])
    for key in ("memgib", "power", "temp", "clock"):
        assert len(str(cells[key])) <= widths[key], (key, cells[key])


def test_a_gpu_this_process_may_not_use_is_skipped_not_the_whole_node():
    """NO_PERMISSION on one GPU's handle (another job's, cgroup-denied) used to empty the inventory, so
    --device auto ran on the CPU, and the sampler showed that GPU as lost."""
    from ddptop.telemetry.inventory import read_inventory

    fake = FakeNvml(steady=True)
    fake.deny_gpu(2)
    inventory = read_inventory(fake)
    assert [g.index for g in inventory.gpus] == [0, 1, 3, 4, 5, 6, 7]
    assert inventory.notes == ("GPU 2: not accessible (no permission)",) and inventory.problem is None
    with GpuSampler(fake) as sampler:
        readings = sampler.sample()
    assert not readings[2].lost and readings[2].inaccessible == "no permission"
    assert readings[2].na["all"] == "not accessible: no permission"
    assert readings[3].util == 90  # the others read as before

    from ddptop.tui.panels.gpus import _gpu_cells

    assert str(_gpu_cells(readings[2].to_json(), "", [], [])["notes"]) == "not accessible"


def test_gpus_name_the_parents_visible_devices_not_physical_indices():
    """--gpus 0,1 under CUDA_VISIBLE_DEVICES=4,5,6,7 (a SLURM job without cgroups) is GPUs 4 and 5: writing
    "0,1" for the ranks ran them on another job's GPUs. This is the path without NVML's UUIDs."""
    from types import SimpleNamespace

    from ddptop.telemetry.inventory import rank_gpu_environment

    def plan(gpus, device="cuda"):
        return SimpleNamespace(gpus=gpus, device=device, rank_devices=(), per_rank_devices=False)

    slurm = {"CUDA_VISIBLE_DEVICES": "4,5,6,7"}
    assert rank_gpu_environment(plan((0, 1)), slurm) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                                         "CUDA_VISIBLE_DEVICES": "4,5"}
    uuids = {"CUDA_VISIBLE_DEVICES": "GPU-aaa,GPU-bbb,GPU-ccc", "CUDA_DEVICE_ORDER": "FASTEST_FIRST"}
    assert rank_gpu_environment(plan((2,)), uuids) == {"CUDA_VISIBLE_DEVICES": "GPU-ccc"}  # the user's order kept
    assert rank_gpu_environment(plan((1, 3)), {}) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID",
                                                      "CUDA_VISIBLE_DEVICES": "1,3"}
    assert rank_gpu_environment(plan(None), slurm) == {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # inherits 4,5,6,7
    assert rank_gpu_environment(plan((0,), "cpu"), slurm) == {}


def test_a_dataparallel_process_is_tied_to_every_gpu_it_runs_on(tmp_path):
    """DataParallel is one process on several GPUs: NVML lists its PID on each, and each is its GPU (the rank
    used to be tied only to the last GPU that listed it)."""
    import os

    from ddptop.telemetry.host import RankProcess

    fake = FakeNvml(steady=True)
    for gpu in (0, 1, 2, 3):
        fake.attach_process(gpu, os.getpid(), 1 << 30)
    refs = [RankProcess(os.getpid(), 0, "L1", 0, "cuda:0", None)]
    monitor = Monitor(0.05, str(tmp_path / "telemetry.jsonl"), fake, lambda: refs).start()
    try:
        deadline = time.time() + 10
        while monitor.latest() is None and time.time() < deadline:
            time.sleep(0.02)
        rank = monitor.latest()["ranks"][0]
    finally:
        monitor.stop()
    assert rank["gpus"] == [0, 1, 2, 3] and rank["gpu"] == 0


# -- the GPU NUMA ID column and the NIC legend of ddptop topo ------------------------------------------------------


GRACE_HOPPER = """description = "a Grace Hopper-like node: one GPU whose memory is NUMA node 1 beside the CPU's node 0"
[driver]
version = "550.90.07"
nvml_version = "12.550.90.07"
cuda_version = 12040
[cpu]
sockets = 1
cores_per_socket = 72
[pcie]
switches = [ { socket = 0, root = 0 } ]
[gpu]
name = "NVIDIA GH200 480GB"
memory_mib = 97871
power_limit_w = 900
sm_clock_max_mhz = 1980
memory_clock_mhz = 2619
pcie = [5, 16]
numa_node_id = NUMA_ID
[[gpus]]
switch = 0
[[nics]]
name = "mlx5_0"
switch = 0
"""


def test_the_gpus_own_numa_node_is_a_column_of_its_own_after_numa_affinity(tmp_path):
    """nvmlDeviceGetNumaNodeId answers on a platform whose GPU memory is a NUMA node (a profile's numa_node_id):
    it is the GPU NUMA ID column, while NUMA Affinity stays the CPU side's node; on x86 it is N/A."""
    from tests.conftest import ddptop

    path = tmp_path / "gh.toml"
    path.write_text(GRACE_HOPPER.replace("NUMA_ID", "1"))
    done = ddptop("topo", env={"DDPTOP_FAKE_NVML": str(path)})
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    header = next(line for line in lines if line.split()[:1] == ["GPU0"])
    assert header.split() == ["GPU0", "NIC0", "CPU", "Affinity", "NUMA", "Affinity", "GPU", "NUMA", "ID"]
    assert next(line for line in lines if line.startswith("GPU0 ")).split() == ["GPU0", "X", "PIX", "0-71", "0", "1"]
    assert lines[lines.index("NIC Legend:") + 2] == "  NIC0: mlx5_0"
    as_json = json.loads(ddptop("topo", "--json", env={"DDPTOP_FAKE_NVML": str(path)}).stdout)
    assert as_json["gpu_numa_id"] == {"GPU0": "1"} and as_json["numa_affinity"] == {"GPU0": "0"}
    assert as_json["nics"] == ["mlx5_0"] and as_json["matrix"]["GPU0"]["mlx5_0"] == "PIX"  # JSON: own names
    x86 = json.loads(ddptop("topo", "--json", env={"DDPTOP_FAKE_NVML": "pcie-4gpu"}).stdout)
    assert set(x86["gpu_numa_id"].values()) == {"N/A"}
    path.write_text(GRACE_HOPPER.replace("NUMA_ID", "-1"))
    refused = ddptop("topo", env={"DDPTOP_FAKE_NVML": str(path)})
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "gpu.numa_node_id: -1 is out of range" in refused.stderr


def test_a_topology_saved_before_the_gpu_numa_id_loads_and_prints_without_that_column():
    """tests/data/recorded-run/topology.json has no gpu_numa_id: it still loads; its NICs are NIC0.. with a legend."""
    import os

    from ddptop.doctor import parse_topo_matrix
    from ddptop.telemetry.topology import Topology, format_matrix
    from tests.conftest import REPO

    with open(os.path.join(REPO, "tests", "data", "recorded-run", "topology.json"), encoding="utf-8") as handle:
        saved = json.load(handle)
    assert "gpu_numa_id" not in saved
    topo = Topology.from_json(saved)
    assert topo.gpu_numa_id == {} and topo.to_json()["gpu_numa_id"] == {}
    text = format_matrix(topo)
    header = next(line for line in text.splitlines() if line.split()[:1] == ["GPU0"])
    assert header.split()[-4:] == ["CPU", "Affinity", "NUMA", "Affinity"]
    assert [f"  NIC{i}: {name}" for i, name in enumerate(saved["nics"])] == \
        text.splitlines()[text.splitlines().index("NIC Legend:") + 2:][:len(saved["nics"])]
    cells = parse_topo_matrix(text)
    assert all(cells[(row, column)] == word for row, columns in saved["matrix"].items()
               for column, word in columns.items())
