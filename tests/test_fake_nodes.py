"""The simulated nodes: the real pynvml binding over a fake C library, and every shipped profile end to end.

Each profile (``ddptop/telemetry/fake/profiles/*.toml``, ``docs/fake-nodes.md``) goes through ``ddptop gpus``,
``ddptop topo``, the plan ``ddptop run`` would make if its GPUs were real (world sizes and what each rank is
told about its device), and the live view's GPU panel. Only the published DGX-1 matrix exists to match cell
by cell (tests/test_telemetry.py); the other profiles' expected cells follow from their own layout.
"""

import ctypes
import dataclasses
import json
import os
from types import SimpleNamespace

import pynvml
import pytest

from ddptop.run.options import PlanOptions
from ddptop.run.plan import PlanError, build_plan, default_world_sizes
from ddptop.protocol.devices import RANK_DEVICES_ENV, apply_rank_device
from ddptop.telemetry.fake.driver import library as fake_library
from ddptop.telemetry.fake.nodes import NODES_DIR, ProfileError, known_nodes, load_profile
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.inventory import read_inventory, rank_gpu_environment
from ddptop.telemetry.monitor import Monitor
from ddptop.telemetry.topology import read_topology
from ddptop.doctor import parse_topo_matrix

from .conftest import ddptop

PROFILES = ("dgx1", "dgx-a100", "hgx-h100", "pcie-4gpu", "a100-mig", "container", "mixed", "dgx-a100-nps4",
            "h100-pcie-nps4")

# profile -> (GPUs NVML lists, devices a sweep may use, a few topology cells)
EXPECTED = {
    "dgx1": (8, 8, {("GPU0", "GPU3"): "NV2", ("GPU0", "GPU5"): "SYS", ("GPU0", "mlx5_0"): "PIX"}),
    "dgx-a100": (8, 8, {("GPU0", "GPU7"): "NV12", ("GPU0", "mlx5_0"): "PIX", ("GPU0", "mlx5_1"): "PXB",
                        ("GPU0", "mlx5_2"): "NODE", ("GPU0", "mlx5_4"): "SYS"}),
    "hgx-h100": (8, 8, {("GPU1", "GPU6"): "NV18", ("GPU5", "mlx5_5"): "PIX"}),
    "pcie-4gpu": (4, 4, {("GPU0", "GPU1"): "PIX", ("GPU0", "GPU2"): "PXB", ("GPU0", "GPU3"): "SYS",
                         ("GPU2", "mlx5_0"): "NODE"}),
    "a100-mig": (1, 7, {}),
    "container": (8, 2, {("GPU2", "GPU3"): "NV12", ("GPU0", "GPU2"): "N/A"}),
    "mixed": (2, 2, {("GPU0", "GPU1"): "NODE"}),
    "dgx-a100-nps4": (8, 8, {("GPU0", "GPU7"): "NV12", ("GPU0", "mlx5_1"): "PXB", ("GPU0", "mlx5_2"): "SYS"}),
    "h100-pcie-nps4": (4, 4, {("GPU0", "GPU1"): "NV12", ("GPU1", "GPU2"): "SYS", ("GPU0", "mlx5_0"): "NODE"}),
}
SMI_DATA = os.path.join(os.path.dirname(__file__), "data", "nvidia-smi")


def test_every_shipped_profile_is_tested():
    assert sorted(known_nodes()) == sorted(PROFILES) == sorted(EXPECTED)


# -- the binding is the real one -----------------------------------------------------------------------------------


def test_the_fake_answers_beneath_the_real_binding():
    fake = FakeNvml(steady=True)
    binding = fake_library.binding()
    assert binding.__file__ == pynvml.__file__ and binding is not pynvml  # the installed file, a second instance
    assert fake.nvmlDeviceGetCount is binding.nvmlDeviceGetCount  # pynvml's own wrapper, not a stand-in
    fake.nvmlInit()
    assert isinstance(binding.nvmlLib, fake_library.FakeLibrary)
    assert isinstance(binding.nvmlLib.nvmlDeviceGetMemoryInfo_v2, ctypes._CFuncPtr)  # a C function pointer
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    assert isinstance(handle, binding.c_nvmlDevice_t)  # the binding's own handle type, filled in "C"
    memory = fake.nvmlDeviceGetMemoryInfo(handle, version=binding.nvmlMemory_v2)
    assert isinstance(memory, binding.c_nvmlMemory_v2_t) and memory.total == 16160 << 20


def test_the_real_binding_is_left_alone():
    """A process that reads a real driver (or finds none) sees what it would without the simulation."""
    FakeNvml().nvmlInit()
    assert not isinstance(pynvml.nvmlLib, fake_library.FakeLibrary)
    inventory = read_inventory()  # the real pynvml on this machine
    assert not inventory.fake and all("FAKE" not in g.name for g in inventory.gpus)


def test_a_struct_of_the_wrong_version_is_refused_as_the_driver_would():
    fake = FakeNvml(steady=True)
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    binding = fake_library.binding()
    memory = binding.c_nvmlMemory_v2_t()
    memory.version = 1  # not nvmlMemory_v2
    function = binding._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
    assert function(handle, ctypes.byref(memory)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH


def test_a_driver_older_than_the_binding_meets_pynvmls_own_mismatch_error():
    fake = FakeNvml("pcie-4gpu")  # a 470 driver: no _v3 process call, no memory v2
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(fake.NVMLLibraryMismatchError):
        fake.nvmlDeviceGetComputeRunningProcesses(handle)
    with pytest.raises(fake.NVMLError_FunctionNotFound):
        fake.nvmlDeviceGetMemoryInfo(handle, version=fake.nvmlMemory_v2)


def test_a_process_whose_memory_nvml_cannot_tell_reads_as_none():
    fake = FakeNvml("container")
    fake.nvmlInit()
    listed = fake.nvmlDeviceGetComputeRunningProcesses(fake.nvmlDeviceGetHandleByIndex(2))
    assert [(p.pid, p.usedGpuMemory) for p in listed] == [(3999972, None)]


# -- profiles as data ----------------------------------------------------------------------------------------------


def test_a_profile_can_be_a_path_and_a_broken_one_is_one_line(tmp_path):
    good = tmp_path / "mine.toml"
    source = open(os.path.join(NODES_DIR, "mixed.toml")).read()
    good.write_text(source)
    assert load_profile(str(good)).gpus[1].name == "NVIDIA A100-PCIE-40GB"
    broken = tmp_path / "broken.toml"
    broken.write_text(source.replace("switch = 1\nname", "switch = 9\nname"))
    with pytest.raises(ProfileError, match=r"broken\.toml: .*gpus\[1\]\.switch 9 names no switch"):
        load_profile(str(broken))
    done = ddptop("gpus", env={"DDPTOP_FAKE_NVML": str(broken)})
    assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1 and "names no switch" in done.stderr
    done = ddptop("gpus", "--json", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": str(good)})
    assert done.returncode == 0 and len(json.loads(done.stdout)["gpus"]) == 2


DGX1_SOURCE = open(os.path.join(NODES_DIR, "dgx1.toml"), encoding="utf-8").read()

# (what is changed in dgx1.toml, the one line that names its place)
IMPOSSIBLE = [
    (("cpu_affinity = ", "cpu_afinity = "), r"gpu\.cpu_afinity: unknown key"),
    (("nvlink_slots = 6", "nvlink_slot = 6"), r"gpu\.nvlink_slot: unknown key"),
    (("{ socket = 1, root = 1 },\n]", "{ socket = 1, root = 1, parent = 7 },\n]"),
     r"pcie\.switches\[3\]\.parent: 7 names no switch"),
    (("{ socket = 1, root = 1 },\n]", "{ socket = 2, root = 1 },\n]"), r"pcie\.switches\[3\]\.socket: 2 is out of range"),
    (("[0, 1, 1], [0, 2, 1]", "[0, 1, 1], [0, 9, 1]"), r"nvlink\.pairs\[1\]\[1\]: 9 is out of range"),
    (("[0, 1, 1], [0, 2, 1]", "[0, 1, 3], [0, 2, 1]"), r"nvlink\.pairs: GPU 0 has 8 NVLinks, more than its 6 nvlink_slots"),
    (('cpu_affinity = "0-19,40-59"', 'cpu_affinity = "0-19;40-59"'), r"gpu\.cpu_affinity: '0-19;40-59' is not a CPU list"),
    (('cpu_affinity = "0-19,40-59"', 'cpu_affinity = "0-19,40-99"'), r"gpu\.cpu_affinity: CPU 80 is not one of the 80"),
    (("pcie = [3, 16]\n", ""), r"gpus\[0\]: no pcie \(nor a default in \[gpu\]\)"),
    (("[[nics]]\nname = \"mlx5_0\"\nswitch = 0", "[[nics]]\nname = \"mlx5_0\"\nswitch = 4"),
     r"nics\[0\]\.switch 4 names no switch"),
]


@pytest.mark.parametrize("change, message", IMPOSSIBLE)
def test_a_profile_that_cannot_be_right_is_refused_naming_the_place(tmp_path, change, message):
    old, new = change
    assert old in DGX1_SOURCE
    path = tmp_path / "wrong.toml"
    path.write_text(DGX1_SOURCE.replace(old, new, 1))
    with pytest.raises(ProfileError, match=r"wrong\.toml: " + message):
        load_profile(str(path))


def test_an_impossible_profile_is_one_line_and_exit_2_from_gpus_and_topo(tmp_path):
    path = tmp_path / "wrong.toml"
    path.write_text(DGX1_SOURCE.replace("{ socket = 1, root = 1 },\n]", "{ socket = 1, root = 1, parent = 7 },\n]"))
    for command in ("gpus", "topo"):
        done = ddptop(command, env={"DDPTOP_FAKE_NVML": str(path)})
        assert done.returncode == 2 and done.stdout == "", command
        assert done.stderr.strip().splitlines() == [
            f"ddptop: error: {path}: pcie.switches[3].parent: 7 names no switch (there are 4)"], command


@pytest.mark.parametrize("profile", PROFILES)
def test_gpus_and_topo_commands_under_each_profile(profile):
    listed, _usable, cells = EXPECTED[profile]
    env = {"DDPTOP_FAKE_NVML": profile}
    gpus = ddptop("gpus", "--json", "--interval", "0.1", env=env)
    assert gpus.returncode == 0, gpus.stderr
    data = json.loads(gpus.stdout)
    assert data["fake"] is True and len(data["gpus"]) == listed
    assert "Unknown Error" not in gpus.stdout  # what a failing simulated call would read as
    text = ddptop("gpus", "--interval", "0.1", env=env).stdout
    assert text.count(" (FAKE)  ") + text.count("(not accessible)") == listed  # every GPU, no name cut
    topo = ddptop("topo", "--json", env=env)
    assert topo.returncode == 0, topo.stderr
    matrix = json.loads(topo.stdout)["matrix"]
    for (row, column), word in cells.items():
        assert matrix[row][column] == word, (profile, row, column)


@pytest.mark.parametrize("profile", ["dgx-a100-nps4", "h100-pcie-nps4"])
def test_more_numa_nodes_than_sockets_match_their_machines_matrix_cell_by_cell(profile):
    """NPS4 EPYC nodes: 8 and 4 NUMA nodes, GPUs on odd ones, SYS between NUMA nodes of one socket; matched
    against the ``nvidia-smi topo -m`` such a machine prints (tests/data/nvidia-smi/<profile>/topo-m.txt)."""
    with open(os.path.join(SMI_DATA, profile, "topo-m.txt"), encoding="utf-8") as handle:
        text = handle.read()
    expected = parse_topo_matrix(text)
    env = {"DDPTOP_FAKE_NVML": profile}
    printed = ddptop("topo", env=env)
    assert printed.returncode == 0, printed.stderr
    assert parse_topo_matrix(printed.stdout) == expected and len(expected) > 30
    topo = json.loads(ddptop("topo", "--json", env=env).stdout)
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0].startswith("GPU") and len(parts) > 2:  # ..., CPU Affinity, NUMA Affinity, (blank), GPU NUMA ID
            cpus, numa, gpu_numa = parts[-4], parts[-3], parts[-1]
            assert (topo["cpu_affinity"][parts[0]], topo["numa_affinity"][parts[0]],
                    topo["gpu_numa_id"][parts[0]]) == (cpus, numa, gpu_numa), parts[0]
    # the NIC legend, and the columns after the matrix, as nvidia-smi prints them
    assert _nic_legend(printed.stdout) == _nic_legend(text) and len(_nic_legend(text)) == len(topo["nics"])
    header = next(line for line in printed.stdout.splitlines() if line.split()[:1] == ["GPU0"])
    assert header.split()[-7:] == ["CPU", "Affinity", "NUMA", "Affinity", "GPU", "NUMA", "ID"]
    gpu0 = next(line.split() for line in printed.stdout.splitlines() if line.startswith("GPU0 "))
    assert gpu0[-3:] == [topo["cpu_affinity"]["GPU0"], topo["numa_affinity"]["GPU0"], "N/A"]


def _nic_legend(text: str) -> list[tuple[str, str]]:
    """(NIC0, mlx5_0), ... from the lines after "NIC Legend:"."""
    lines = text.splitlines()
    start = lines.index("NIC Legend:") if "NIC Legend:" in lines else len(lines)
    found = []
    for line in lines[start + 1:]:
        label, colon, name = line.strip().partition(":")
        if colon and label.startswith("NIC"):
            found.append((label, name.strip()))
        elif line.strip():
            break
    return found


def _tree_profile(tmp_path, switches: list[str], gpus_on: list[int], nics_on: list[int] = (), sockets: int = 2,
                  pcie_extra: str = "") -> str:
    """A profile file of the given switches (TOML inline tables) with a GPU below each of ``gpus_on``."""
    lines = [
        'description = "test tree"', "[driver]", 'version = "550.90.07"', 'nvml_version = "12.550.90.07"',
        "cuda_version = 12040", "[cpu]", f"sockets = {sockets}", "cores_per_socket = 8", "[pcie]", pcie_extra,
        "switches = [" + ", ".join(switches) + "]", "[gpu]", 'name = "NVIDIA L40S"', "memory_mib = 46068",
        "power_limit_w = 350", "sm_clock_max_mhz = 2520", "memory_clock_mhz = 9001", "pcie = [4, 16]",
    ]
    lines += [f"[[gpus]]\nswitch = {s}" for s in gpus_on]
    lines += [f'[[nics]]\nname = "mlx5_{i}"\nswitch = {s}' for i, s in enumerate(nics_on)]
    path = tmp_path / "tree.toml"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_bus_numbers_fit_four_sockets_and_many_switches_per_socket(tmp_path):
    """Buses were 0x80 * socket + 0x10 * switch: socket 2 overflowed busIdLegacy (N/A, "Unknown Error") and a
    ninth switch on a socket took another's buses (FileExistsError in ``ddptop topo``)."""
    switches = [f"{{ socket = 0, root = {i % 2} }}" for i in range(10)]
    switches += [f"{{ socket = {s}, root = {s} }}" for s in (2, 3)]
    path = _tree_profile(tmp_path, switches, list(range(12)), nics_on=[0, 9, 11], sockets=4)
    fake = FakeNvml(path)
    fake.nvmlInit()
    legacy = []
    for index in range(12):
        pci = fake.nvmlDeviceGetPciInfo(fake.nvmlDeviceGetHandleByIndex(index))
        legacy.append(pci.busIdLegacy)
        assert pci.busId == fake.bus_ids[index] and pci.busIdLegacy == pci.busId[4:]  # 4-digit domain
    assert len(set(legacy)) == 12
    env = {"DDPTOP_FAKE_NVML": path}
    gpus = ddptop("gpus", "--json", "--interval", "0.1", env=env)
    assert gpus.returncode == 0 and "Unknown Error" not in gpus.stdout, gpus.stdout + gpus.stderr
    assert [g["bus_id"] for g in json.loads(gpus.stdout)["gpus"]] == fake.bus_ids
    topo = ddptop("topo", "--json", env=env)
    assert topo.returncode == 0 and "Traceback" not in topo.stderr, topo.stderr
    matrix = json.loads(topo.stdout)["matrix"]
    assert matrix["GPU0"]["GPU2"] == "PHB" and matrix["GPU0"]["GPU1"] == "NODE" and matrix["GPU0"]["GPU10"] == "SYS"
    assert matrix["GPU9"]["mlx5_1"] == "PIX" and matrix["GPU10"]["mlx5_2"] == "SYS"


def test_a_tree_larger_than_a_pci_domain_goes_on_in_the_next(tmp_path):
    """Two host bridges of 120 switches each, 242 buses each: the second starts PCI domain 1."""
    switches = [f"{{ socket = 0, root = {i // 120} }}" for i in range(240)]
    path = _tree_profile(tmp_path, switches, [0, 239])
    fake = FakeNvml(path)
    assert fake.bus_ids[0].startswith("00000000:") and fake.bus_ids[1].startswith("00000001:")
    topo = read_topology(fake)
    assert topo.link(0, 1) == "NODE" and not fake.callback_errors
    with pytest.raises(ProfileError, match=r"pcie\.switches: root 0 needs 484 PCI buses"):
        FakeNvml(_tree_profile(tmp_path, [f"{{ socket = 0, root = 0 }}" for _ in range(241)], [0]))


def test_paths_through_a_grandparent_switch_are_pxb(tmp_path):
    switches = ["{ socket = 0, root = 0 }", "{ socket = 0, root = 0, parent = 0 }",
                "{ socket = 0, root = 0, parent = 1 }", "{ socket = 0, root = 0, parent = 0 }",
                "{ socket = 0, root = 0, parent = 3 }", "{ socket = 0, root = 1 }"]
    # GPUs below: the grandparent itself, a grandchild, another grandchild, a child; NICs likewise
    topo = read_topology(FakeNvml(_tree_profile(tmp_path, switches, [0, 2, 4, 3, 5], nics_on=[2, 4])))
    assert topo.link(1, 2) == "PXB" and topo.link(0, 1) == "PXB" and topo.link(3, 1) == "PXB"
    assert topo.link(0, 4) == "NODE" and topo.link(1, 4) == "NODE"
    assert topo.matrix["GPU1"]["mlx5_0"] == "PIX" and topo.matrix["GPU2"]["mlx5_0"] == "PXB"
    assert topo.matrix["mlx5_0"]["mlx5_1"] == "PXB" and topo.matrix["GPU4"]["mlx5_0"] == "NODE"


@pytest.mark.parametrize("platform", ["NODE", "SYS"])
def test_nic_cells_take_nvmls_word_for_the_gpu_beside_the_nic(tmp_path, platform):
    """Host bridges 0, 1 and 2 on NUMA node 0, 3 on node 1. mlx5_0 shares host bridge 1 with GPU1, so its cells
    are NVML's for GPU1 (on a platform that reports SYS between host bridges of one NUMA node, GPU0-mlx5_0 is
    SYS like GPU0-GPU1, not NODE); mlx5_1 has no GPU beside it: ddptop's NODE, marked NODE*."""
    switches = [f"{{ socket = {root // 3}, root = {root} }}" for root in range(4)]
    path = _tree_profile(tmp_path, switches, [0, 1, 3], nics_on=[1, 2],
                         pcie_extra=f'between_host_bridges = "{platform}"')
    done = ddptop("topo", "--json", env={"DDPTOP_FAKE_NVML": path})
    assert done.returncode == 0, done.stderr
    topo = json.loads(done.stdout)
    matrix = topo["matrix"]
    assert matrix["GPU0"]["GPU1"] == platform and matrix["GPU1"]["mlx5_0"] == "PIX"
    assert matrix["GPU0"]["mlx5_0"] == matrix["mlx5_0"]["GPU0"] == platform  # as NVML says for GPU0-GPU1
    assert matrix["GPU2"]["mlx5_0"] == "SYS" and matrix["GPU2"]["mlx5_1"] == "SYS"  # another NUMA node
    assert matrix["GPU0"]["mlx5_1"] == matrix["mlx5_0"]["mlx5_1"] == "NODE"
    assert sorted(map(tuple, topo["inferred"])) == sorted(
        [("GPU0", "mlx5_1"), ("mlx5_1", "GPU0"), ("GPU1", "mlx5_1"), ("mlx5_1", "GPU1"),
         ("mlx5_0", "mlx5_1"), ("mlx5_1", "mlx5_0")])
    printed = ddptop("topo", env={"DDPTOP_FAKE_NVML": path}).stdout
    assert "  NIC1: mlx5_1" in printed.splitlines()  # named NIC1 in the matrix, as nvidia-smi names NICs
    row = next(line.split() for line in printed.splitlines() if line.startswith("NIC1 "))
    assert row[1:6] == ["NODE*", "NODE*", "SYS", "NODE*", "X"]
    assert "  *     = ddptop's inference from the PCIe tree in sysfs" in printed
    assert parse_topo_matrix(printed)[("mlx5_1", "GPU0")] == "NODE"  # compared with nvidia-smi as a word


def _as_if_real(profile: str):
    """The inventory a sweep would see on that machine (the fake's own is never run on)."""
    return dataclasses.replace(read_inventory(FakeNvml(profile)), fake=False)


@pytest.mark.parametrize("profile", PROFILES)
def test_the_plan_each_profile_would_get(profile):
    _listed, usable, _cells = EXPECTED[profile]
    inventory = _as_if_real(profile)
    assert len(inventory.usable_gpus) == usable
    plan = build_plan(PlanOptions(), inventory, cpu_count=8)
    assert plan.device == "cuda" and plan.world_sizes == tuple(default_world_sizes(usable))
    assert plan.rank_devices == tuple(g.uuid for g in inventory.usable_gpus)
    env = rank_gpu_environment(plan, {})
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    if profile == "a100-mig":  # one MIG instance per rank, each rank narrowing its own view
        assert plan.per_rank_devices and "CUDA_VISIBLE_DEVICES" not in env
        assert all(u.startswith("MIG-") for u in env[RANK_DEVICES_ENV].split(","))
        assert plan.backends == ("gloo",)  # NCCL will not run two ranks on one GPU's instances
        for rank in range(usable):
            rank_env = dict(env)
            assert apply_rank_device(rank, rank_env) == 0
            assert rank_env["CUDA_VISIBLE_DEVICES"] == plan.rank_devices[rank]
    else:
        assert not plan.per_rank_devices and env["CUDA_VISIBLE_DEVICES"].split(",") == list(plan.rank_devices)
        assert plan.backends == ("nccl",)
    if profile == "container":  # GPUs 2 and 3, by UUID: "0,1" would be right only by CUDA's renumbering
        assert [g.index for g in inventory.usable_gpus] == [2, 3]
    if profile == "mixed":  # NVML's (PCI) order, whatever CUDA's default order would say
        assert [g.name for g in inventory.usable_gpus] == ["NVIDIA GeForce RTX 3090 (FAKE)",
                                                           "NVIDIA A100-PCIE-40GB (FAKE)"]


def test_mig_plans_refuse_what_cannot_run():
    inventory = _as_if_real("a100-mig")
    with pytest.raises(PlanError, match="NCCL does not run several ranks on MIG instances of one GPU"):
        build_plan(PlanOptions(backend=["nccl"]), inventory, cpu_count=8)
    with pytest.raises(PlanError, match="only one MIG instance"):
        build_plan(PlanOptions(compare_dp=True), inventory, cpu_count=8)
    one = build_plan(PlanOptions(backend=["nccl"], world_sizes=[1]), inventory, cpu_count=8)
    assert one.backends == ("nccl",)  # one rank: nothing to refuse
    chosen = build_plan(PlanOptions(gpus=[3, 5], world_sizes=[1, 2], backend=["gloo"]), inventory, cpu_count=8)
    assert chosen.rank_devices == (inventory.usable_gpus[3].uuid, inventory.usable_gpus[5].uuid)


def test_mig_instances_in_cuda_visible_devices_are_recognised(monkeypatch):
    instances = read_inventory(FakeNvml("a100-mig")).gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{instances[4].uuid},{instances[6].uuid}")
    assert [g.uuid for g in read_inventory(FakeNvml("a100-mig")).gpus] == [instances[4].uuid, instances[6].uuid]


def test_no_rank_devices_leaves_the_rank_alone():
    env = {"CUDA_VISIBLE_DEVICES": "4,5"}
    assert apply_rank_device(1, env) == 1 and env == {"CUDA_VISIBLE_DEVICES": "4,5"}
    with pytest.raises(RuntimeError, match="none for local rank 2"):
        apply_rank_device(2, {RANK_DEVICES_ENV: "MIG-a,MIG-b"})


@pytest.mark.parametrize("profile", PROFILES)
def test_the_gpu_panel_under_each_profile(profile):
    from textual.app import App

    from ddptop.run.snapshot import TelemetrySnapshot
    from ddptop.tui.panels.gpus import GpuTable

    listed, _usable, _cells = EXPECTED[profile]
    fake = FakeNvml(profile, steady=True)
    monitor = Monitor(0.05, None, fake).start()

    class Panel(App):
        def compose(self):
            yield GpuTable(id="gpus")

    async def scenario():
        app = Panel()
        async with app.run_test(size=(160, 20)) as pilot:
            while monitor.latest() is None:
                await pilot.pause(0.05)
            table = app.query_one(GpuTable)
            table.update_from(SimpleNamespace(telemetry=TelemetrySnapshot.of(monitor)))
            await pilot.pause()
            return table

    import asyncio

    try:
        table = asyncio.run(scenario())
    finally:
        monitor.stop()
    gpu_rows = [row for row in table.rows if "/mig" not in row]  # a MIG instance's line is under its GPU's
    assert len(gpu_rows) == listed
    assert table.row_count - len(gpu_rows) == sum(len(gpu.mig) for gpu in fake.profile.gpus)
    names = [str(table.get_cell(row, "name")) for row in gpu_rows]
    notes = [str(table.get_cell(row, "notes")) for row in gpu_rows]
    accessible = [gpu.accessible for gpu in fake.profile.gpus]
    for name, note, ok in zip(names, notes, accessible):
        assert ("not accessible" in note) is (not ok)
        if ok:
            assert name and "unavailable" not in name


def test_loopback_nodes_each_get_their_own_gpus():
    """Several "nodes" on one GPU machine (a rehearsal of a multi-node run): each gets its own slice, since NCCL
    refuses two ranks on one GPU; too few GPUs is refused in one line."""
    from ddptop.telemetry.inventory import LoopbackGpuError

    inventory = _as_if_real("dgx1")
    plan = build_plan(PlanOptions(nnodes=2, nproc_per_node=4), inventory, cpu_count=8)
    uuids = [g.uuid for g in inventory.usable_gpus]
    first = rank_gpu_environment(plan, {}, node_rank=0, loopback=True)["CUDA_VISIBLE_DEVICES"].split(",")
    second = rank_gpu_environment(plan, {}, node_rank=1, loopback=True)["CUDA_VISIBLE_DEVICES"].split(",")
    assert first == uuids[:4] and second == uuids[4:]
    crowded = build_plan(PlanOptions(nnodes=3, nproc_per_node=4), inventory, cpu_count=8)
    with pytest.raises(LoopbackGpuError, match="3 nodes on this machine x 4 ranks need 12 GPUs"):
        rank_gpu_environment(crowded, {}, node_rank=0, loopback=True)
    # on separate machines each node keeps its own view: node 1 is told its own GPUs, read there
    own = (("GPU-node1-a", "GPU-node1-b", "GPU-node1-c", "GPU-node1-d"), False)
    assert rank_gpu_environment(plan, {}, node_rank=1, own=own)["CUDA_VISIBLE_DEVICES"] == ",".join(own[0])


def test_a_counter_that_wraps_costs_one_reading_never_a_negative_rate():
    """A driver whose byte counters are 32-bit (``counter_bits``): PCIe TX at 2 GB/s wraps every ~2 s."""
    from ddptop.telemetry.fake.nodes import with_changes
    from ddptop.telemetry.gpu import GpuSampler

    class Clock:
        now = 0.0

        def __call__(self):
            return self.now

    clock = Clock()
    fake = FakeNvml(with_changes(load_profile("dgx1"), counter_bits=32), clock=clock, steady=True)
    with GpuSampler(fake) as sampler:
        rates = []
        for now in (0.5, 1.0, 1.5, 2.0, 2.5, 3.0):  # the 2.0 -> 2.5 s step crosses 2**32 bytes
            clock.now = now
            reading = sampler.sample()[0]
            rates.append(reading.pcie_tx_bps)
    assert rates[0] is None and rates[4] is None  # the first reading, and the one across the wrap
    assert all(r == pytest.approx(2.0e9, rel=1e-3) for i, r in enumerate(rates) if i not in (0, 4))
