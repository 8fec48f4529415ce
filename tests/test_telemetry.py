"""Telemetry: the NVML sampler, topology, host/rank load and the timeline, against the fake 8-GPU node.

The fake (ddptop/telemetry/fake/nvml.py) answers with pynvml's own constants and error classes, so these
tests run the same code that reads a real driver; tests marked ``gpu`` repeat the essentials on real NVML.
"""

import dataclasses
import html
import json
import os
import re
import subprocess
import sys
import time

import psutil
import pynvml
import pytest

from ddptop.report.build import _rank_spans
from ddptop.run.options import PlanOptions
from ddptop.run.plan import build_plan
from ddptop.run.config_state import ConfigState
from ddptop.telemetry import timeline
from ddptop.doctor import parse_topo_matrix
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.gpu import GpuSampler
from ddptop.telemetry.host import HostSampler, RankProcess
from ddptop.telemetry.inventory import Inventory, read_inventory
from ddptop.telemetry.monitor import Monitor
from ddptop.telemetry.topology import PciDevice, format_matrix, pci_link, read_topology

from .conftest import REPO, ddptop

# the DGX-1 `nvidia-smi topo -m` printed in the README of PyTorch's DDP benchmark, kept beside the repository
PUBLISHED_DGX1 = os.path.join(REPO, "..", "shared", "seeds", "001_6a810b76499e3c2f.txt")


parse_matrix = parse_topo_matrix  # the doctor's reader of nvidia-smi's matrix reads ours too


class ManualClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def published_dgx1_matrix() -> dict:
    if not os.path.exists(PUBLISHED_DGX1):
        pytest.skip("the published DGX-1 matrix is not beside the repository")
    with open(PUBLISHED_DGX1, encoding="utf-8") as handle:
        text = html.unescape(handle.read())
    block = re.search(r"--- nvidia-smi topo -m ---(.*?)Legend", text, re.S)
    assert block, "the published DGX-1 page no longer holds a topology matrix"
    return parse_matrix(block.group(1))


# -- topology ---------------------------------------------------------------------------------------------


def test_fake_dgx1_matrix_equals_the_published_dgx1_matrix_cell_for_cell():
    expected = published_dgx1_matrix()
    topo = read_topology(FakeNvml())
    printed = format_matrix(topo)
    assert parse_matrix(printed) == expected
    assert len(expected) == 12 * 12
    assert topo.cpu_affinity == {f"GPU{i}": "0-19,40-59" for i in range(8)}  # the published CPU Affinity column
    assert [topo.numa_affinity[f"GPU{i}"] for i in range(8)] == ["0"] * 4 + ["1"] * 4
    assert printed.startswith("FAKE")
    for key in ("X ", "SYS", "NODE", "PHB", "PXB", "PIX", "NV#"):
        assert f"  {key}" in printed  # the legend


def test_topo_command_with_fake_env_prints_the_same_matrix_labelled_fake():
    expected = published_dgx1_matrix()
    done = ddptop("topo", env={"DDPTOP_FAKE_NVML": "dgx1"})
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("FAKE: simulated node")
    assert parse_matrix(done.stdout) == expected
    as_json = ddptop("topo", "--json", env={"DDPTOP_FAKE_NVML": "dgx1"})
    data = json.loads(as_json.stdout)
    assert data["fake"] is True and data["matrix"]["GPU0"]["GPU3"] == "NV2" and data["matrix"]["mlx5_2"]["GPU4"] == "PIX"


def test_pcie_paths_classify_like_nvidia_smi():
    def dev(path, numa=0):
        return PciDevice("d", path[-1], path, numa)

    root = ["pci0000:00", "0000:00:01.0", "0000:01:00.0"]  # root port, switch upstream port
    a = dev(root + ["0000:02:08.0", "0000:03:00.0"])
    b = dev(root + ["0000:02:09.0", "0000:04:00.0"])
    nested = dev(root + ["0000:02:0a.0", "0000:05:00.0", "0000:06:08.0", "0000:07:00.0"])
    other_port = dev(["pci0000:00", "0000:00:02.0", "0000:10:00.0", "0000:11:08.0", "0000:12:00.0"])
    other_bridge_same_node = dev(["pci0000:40", "0000:40:01.0", "0000:41:00.0"], numa=0)
    other_node = dev(["pci0000:80", "0000:80:01.0", "0000:81:00.0"], numa=1)
    assert pci_link(a, a) == "X"
    assert pci_link(a, b) == "PIX"
    assert pci_link(a, nested) == "PXB"
    assert pci_link(a, other_port) == "PHB"
    assert pci_link(a, other_bridge_same_node) == "NODE"
    assert pci_link(a, other_node) == "SYS"
    assert pci_link(a, PciDevice("gone", None, None, None)) == "N/A"


def test_gpus_behind_nvswitches_show_their_link_count():
    """Every link of an HGX board ends at an NVSwitch (NVML's remote device type says so)."""
    for profile, links in (("hgx-h100", "NV18"), ("dgx-a100", "NV12")):
        topo = read_topology(FakeNvml(profile))
        assert {topo.link(a, b) for a in range(8) for b in range(8) if a != b} == {links}, profile


def test_an_nvlink_to_a_gpu_this_process_cannot_see_is_not_an_nvswitch():
    """A container given GPUs 0 and 5 of a DGX-1: their NVLinks end at GPUs it cannot open. The pair shares no
    link (the published matrix says SYS); counting those links as NVSwitch links made it NV6."""
    fake = FakeNvml("dgx1")
    for hidden in (1, 2, 3, 4, 6, 7):
        fake.deny_gpu(hidden)
    topo = read_topology(fake)
    assert topo.link(0, 5) == "SYS" and topo.link(5, 0) == "SYS"


def _dgx1_seen_from_a_job(lacks: set[str], allowed: set[int]) -> FakeNvml:
    from ddptop.telemetry.fake.nodes import load_profile, with_changes

    fake = FakeNvml(with_changes(load_profile("dgx1"), lacks=frozenset(lacks)))
    for hidden in set(range(8)) - allowed:
        fake.deny_gpu(hidden)
    return fake


def test_without_the_remote_device_type_a_link_to_a_hidden_gpu_is_still_no_nvswitch():
    """Drivers without nvmlDeviceGetNvLinkRemoteDeviceType name a link's far end by bus id only. GPUs 0 and 5 of
    a DGX-1: every far end is a GPU the job may not open, which the driver still knows (handle by bus id:
    NO_PERMISSION), so the pair is SYS as on a newer driver, not NV6."""
    fake = _dgx1_seen_from_a_job({"nvmlDeviceGetNvLinkRemoteDeviceType"}, {0, 5})
    topo = read_topology(fake)
    assert topo.link(0, 5) == "SYS" and topo.link(5, 0) == "SYS"
    assert fake.calls["nvmlDeviceGetHandleByPciBusId"] == 6  # once per distinct far end: GPUs 1, 2, 3, 4, 6, 7
    # the NVSwitches of an HGX board are no GPU to the driver (NOT_FOUND): still NV18
    from ddptop.telemetry.fake.nodes import load_profile, with_changes

    hgx = FakeNvml(with_changes(load_profile("hgx-h100"), lacks=frozenset({"nvmlDeviceGetNvLinkRemoteDeviceType"})))
    assert {read_topology(hgx).link(a, b) for a in range(8) for b in range(8) if a != b} == {"NV18"}


def test_without_either_query_a_link_between_visible_gpus_shows_a_mesh():
    """A driver that can say neither the far end's type nor whether a GPU sits at a bus id: a link between two
    GPUs the job sees proves a mesh (NVSwitch boards have none), so links to unseen GPUs are no switch links."""
    fake = _dgx1_seen_from_a_job({"nvmlDeviceGetNvLinkRemoteDeviceType", "nvmlDeviceGetHandleByPciBusId_v2"},
                                 {0, 1, 5})
    topo = read_topology(fake)
    assert (topo.link(0, 1), topo.link(1, 5), topo.link(0, 5)) == ("NV1", "NV2", "SYS")


def test_numa_affinity_is_the_cpu_sides_not_the_gpus_own_numa_node(tmp_path):
    """nvmlDeviceGetNumaNodeId is NOT_SUPPORTED on x86 (as the simulator answers) and, where GPU memory is a NUMA
    node of its own (Grace Hopper: node 1 beside CPU node 0), names the GPU's node, not the CPUs' nearest it.
    NUMA affinity comes from the PCI device's numa_node in sysfs, else NVML's memory affinity."""
    from ddptop.telemetry.fake.nodes import load_profile, with_changes

    fake = FakeNvml("dgx-a100-nps4")
    fake.nvmlInit()
    with pytest.raises(fake.NVMLError_NotSupported):
        fake.nvmlDeviceGetNumaNodeId(fake.nvmlDeviceGetHandleByIndex(0))
    expected = {f"GPU{i}": numa for i, numa in enumerate("33117755")}
    assert read_topology(fake).numa_affinity == expected
    no_sysfs = tmp_path / "sys"
    no_sysfs.mkdir()  # no PCI devices to read: NVML's memory affinity answers
    assert read_topology(FakeNvml("dgx-a100-nps4"), sysfs_root=str(no_sysfs)).numa_affinity == expected
    profile = load_profile("a100-mig")
    grace = with_changes(profile, gpus=tuple(dataclasses.replace(g, numa_node_id=1) for g in profile.gpus))
    assert read_topology(FakeNvml(grace)).numa_affinity == {"GPU0": "0"}


def test_a_pcie_gpu_is_asked_about_nvlink_once():
    """NOT_SUPPORTED on link 0 means no link will answer: one call per GPU, not 36."""
    fake = FakeNvml("pcie-4gpu")
    topo = read_topology(fake)
    assert fake.calls["nvmlDeviceGetNvLinkState"] == 4
    assert [topo.link(0, j) for j in range(1, 4)] == ["PIX", "PXB", "SYS"] and topo.matrix["GPU0"]["mlx5_0"] == "NODE"


def test_topology_without_nvml_is_a_clear_message():
    topo = read_topology(FakeNvml(library_missing=True))
    assert topo.gpus == [] and "NVML unavailable" in topo.problem
    text = format_matrix(topo)
    assert "NVML unavailable" in text and "Traceback" not in text


# -- the GPU sampler -----------------------------------------------------------------------------------------


def test_sampler_reads_every_field_and_derives_rates_from_counters():
    clock = ManualClock()
    fake = FakeNvml(clock=clock, steady=True)
    with GpuSampler(fake) as sampler:
        first = sampler.sample()
        assert len(first) == 8 and first[0].pcie_tx_bps is None  # a rate needs two readings
        assert first[0].na["pcie_tx_bps"] == "rate needs two readings"
        clock.now += 2.0
        readings = sampler.sample()
    for reading in readings:
        i = reading.index
        assert reading.util == 90 and reading.mem_util == 40
        assert reading.power_w == pytest.approx(150 + 20 * i) and reading.power_limit_w == 300
        assert reading.energy_j == pytest.approx((150 + 20 * i) * 2.0, abs=0.01)
        assert reading.temp_c is not None and reading.sm_clock_mhz and reading.mem_clock_mhz == 877
        assert reading.pcie_tx_bps == pytest.approx(2.0e9 + 1e8 * i, rel=1e-6)
        assert reading.pcie_rx_bps == pytest.approx(3.0e9 + 1e8 * i, rel=1e-6)
        assert reading.nvlink_tx_bps == pytest.approx(40.0e9 + 1e9 * i, rel=1e-5)  # KiB counters, in bytes/s
        assert reading.throttle == [] and reading.ecc_uncorrected == 0
        # Volta has no GPM counters: said once per counter, nothing else missing
        assert reading.na == {key: "no GPM counters on this GPU (Hopper and later)"
                              for key in ("sm_active", "sm_occupancy", "tensor_active", "dram_active")}
    assert sampler.static[0].name.endswith("(FAKE)") and sampler.fake


def test_unsupported_fields_are_na_with_reason_and_not_asked_again():
    fake = FakeNvml(
        fail={"nvmlDeviceGetPowerUsage": pynvml.NVML_ERROR_NOT_SUPPORTED},
        missing={"nvmlDeviceGetTotalEnergyConsumption"},
        absent={"nvmlDeviceGetTotalEccErrors"},
    )
    fake.unsupported_fields = {pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES}
    with GpuSampler(fake) as sampler:
        for _ in range(3):
            readings = sampler.sample()
    gpu = readings[0]
    assert gpu.power_w is None and gpu.na["power_w"] == "not supported on this GPU"
    assert gpu.energy_j is None and "not in this driver's NVML" in gpu.na["energy_j"]
    assert gpu.ecc_uncorrected is None and gpu.na["ecc_uncorrected"] == "not in the installed nvidia-ml-py"
    assert gpu.pcie_tx_bps is None and gpu.na["pcie_tx_bps"] == "not supported on this GPU"
    assert gpu.pcie_rx_bps is not None  # the other counters of the same call still work
    assert gpu.util is not None and gpu.mem_used is not None
    assert fake.calls["nvmlDeviceGetPowerUsage"] == 8  # once per GPU, then remembered
    assert fake.calls["nvmlDeviceGetTotalEnergyConsumption"] == 8


def test_renamed_function_falls_back_to_the_old_name():
    fake = FakeNvml(missing={"nvmlDeviceGetCurrentClocksEventReasons"})
    with GpuSampler(fake) as sampler:
        gpu = sampler.sample()[0]
    assert gpu.throttle is not None and "throttle" not in gpu.na


def test_lost_gpu_stays_listed_and_the_others_keep_reporting():
    fake = FakeNvml()
    with GpuSampler(fake) as sampler:
        sampler.sample()
        fake.lose_gpu(3)
        readings = sampler.sample()
        again = sampler.sample()
    assert readings[3].lost and again[3].lost and "GPU lost" in again[3].na["all"]
    assert all(not r.lost and r.util is not None for r in again if r.index != 3)


def test_xid_errors_are_reported_on_their_gpu():
    fake = FakeNvml()
    with GpuSampler(fake) as sampler:
        sampler.sample()
        fake.xid(2, 79)
        readings = sampler.sample()
    assert readings[2].xid == [79] and readings[1].xid == []


def test_no_nvml_library_is_a_problem_not_an_exception():
    with GpuSampler(FakeNvml(library_missing=True)) as sampler:
        assert sampler.sample() == []
        assert "NVML unavailable" in sampler.problem
    inventory = read_inventory(FakeNvml(library_missing=True))
    assert inventory.gpus == () and "NVML unavailable" in inventory.problem


def test_fake_gpus_are_shown_but_never_run_on():
    inventory = read_inventory(FakeNvml())
    assert len(inventory.gpus) == 8 and inventory.fake
    assert inventory.usable_gpus == () and "simulated" in inventory.usable_problem


def test_unknown_fake_node_is_bad_input():
    done = ddptop("gpus", env={"DDPTOP_FAKE_NVML": "dgx9"})
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "ddptop: error: DDPTOP_FAKE_NVML='dgx9' is not a known fake node (known: a100-mig, container, dgx-a100, "
        "dgx-a100-nps4, dgx1, h100-pcie-nps4, hgx-h100, mixed, pcie-4gpu; or a path to a .toml profile)"
    ]


def test_gpus_command_text_and_json():
    done = ddptop("gpus", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": "dgx1"})
    assert done.returncode == 0, done.stderr
    assert "FAKE: simulated GPUs" in done.stdout and done.stdout.count("(FAKE)") == 8
    assert "Host: " in done.stdout
    data = json.loads(ddptop("gpus", "--json", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": "dgx1"}).stdout)
    assert data["fake"] and len(data["gpus"]) == 8
    assert data["gpus"][7]["nvlink_rx_bps"] > 0 and data["gpus"][0]["memory_total"] > 0
    assert data["host"]["mem_total"] > 0
    # V100s have no MIG: not a word of it, and the JSON says so per GPU
    assert "MIG" not in done.stdout
    assert all(g["mig_mode"] is None and g["mig"] == [] for g in data["gpus"])


def test_gpus_command_lists_every_mig_instance_under_its_gpu():
    """a100-mig: one A100 in MIG mode, seven 1g.5gb instances, each a line under the GPU (as nvidia-smi lists
    them) and an entry of its ``mig`` list; its missing utilisation is put down to MIG, not to the GPU."""
    done = ddptop("gpus", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": "a100-mig"})
    assert done.returncode == 0, done.stderr
    instances = re.findall(r"^ +MIG (\d) 1g\.5gb GI (\d+) +([\d.]+)/4\.8 +processes: none$", done.stdout, re.M)
    assert [slot for slot, _, _ in instances] == [str(i) for i in range(7)], done.stdout
    assert [int(gi) for _, gi, _ in instances] == list(range(7, 14))
    assert "MIG: 7 instance(s)" in done.stdout
    assert "util: NVML gives no utilisation in MIG mode (GPU 0)" in done.stdout
    assert "util: not supported" not in done.stdout
    data = json.loads(ddptop("gpus", "--json", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": "a100-mig"}).stdout)
    gpu = data["gpus"][0]
    assert gpu["mig_mode"] == "enabled" and len(gpu["mig"]) == 7
    assert gpu["na"]["util"] == "NVML gives no utilisation in MIG mode" and "util" not in gpu
    for slot, instance in enumerate(gpu["mig"]):
        assert instance["slot"] == slot and instance["profile"] == "1g.5gb" and instance["uuid"].startswith("MIG-")
        assert instance["mem_total"] == 4864 << 20 and 0 < instance["mem_used"] < instance["mem_total"]
        assert instance["processes"] == []


def test_mig_instances_carry_their_own_processes_and_memory_and_are_listed_once():
    """A process in instance 3 is on that instance's handle (its memory in the instance's use) and, marked
    with its instance, in the process table; the instances themselves are enumerated once, at open."""
    from ddptop.telemetry.gpus_command import snapshot_text, take_snapshot

    fake = FakeNvml("a100-mig", steady=True)
    fake.attach_process(0, os.getpid(), 1 << 30, mig=3)
    snap = take_snapshot(0.0, fake)
    mig = snap["gpus"][0]["mig"]
    assert mig[3]["processes"] == [{"pid": os.getpid(), "gpu_memory": 1 << 30}]
    assert mig[3]["mem_used"] == (1 << 30) + (12 << 20) and mig[2]["mem_used"] == 12 << 20
    assert all(m["processes"] == [] for i, m in enumerate(mig) if i != 3)
    assert [p["mig"] for p in snap["processes"]] == [3]
    text = snapshot_text(snap)
    assert re.search(rf"MIG 3 1g\.5gb GI 10 +1\.0/4\.8 +processes: {os.getpid()}$", text, re.M), text
    assert re.search(rf"^ +0 MIG 3 +{os.getpid()} +1\.0 GiB", text, re.M), text
    with GpuSampler(fake) as sampler:
        for _ in range(3):
            sampler.sample()
    assert fake.calls["nvmlDeviceGetMigDeviceHandleByIndex"] == 2 * 7  # once per open, not per reading
    assert "nvmlDeviceGetUtilizationRates" not in fake.calls  # known absent in MIG mode: never asked


def test_gpus_command_without_nvml_reports_the_host():
    done = ddptop("gpus", "--interval", "0.1", env={"DDPTOP_FAKE_NVML": ""})
    assert done.returncode == 0, done.stderr
    if "NVML ok" in done.stdout.splitlines()[0]:
        pytest.skip("this machine has a working NVML")
    assert "No GPU: NVML" in done.stdout and "Host: " in done.stdout


# -- host and ranks -------------------------------------------------------------------------------------------

BUSY = "import time\nend = time.time() + 30\nwhile time.time() < end: pass\n"
HOLD = (
    "import threading, time\nblock = bytearray(300 << 20)\n"
    "for _ in range(4): threading.Thread(target=time.sleep, args=(30,), daemon=True).start()\n"
    "print('ready', flush=True)\ntime.sleep(30)\n"
)


@pytest.mark.alone  # a spinning process's CPU, measured
def test_host_sampler_measures_real_processes():
    busy = subprocess.Popen([sys.executable, "-c", BUSY])
    hold = subprocess.Popen([sys.executable, "-c", HOLD], stdout=subprocess.PIPE, text=True)
    try:
        assert hold.stdout.readline().strip() == "ready"
        refs = [RankProcess(busy.pid, 0, "L"), RankProcess(hold.pid, 1, "L")]
        sampler = HostSampler()
        first = sampler.ranks(refs)
        assert [r["cpu"] for r in first] == [None, None]  # no interval to measure over yet
        time.sleep(1.0)
        host = sampler.host()
        by_rank = {r["rank"]: r for r in sampler.ranks(refs)}
        assert by_rank[0]["cpu"] > 40  # a spinning process, on a 2-core machine that also runs the tests
        assert by_rank[1]["cpu"] < 20
        assert by_rank[1]["rss"] >= 300 << 20
        assert by_rank[1]["threads"] >= 5
        assert host["mem_total"] > host["mem_used"] > 0 and len(host["per_cpu"]) == psutil.cpu_count()
        busy.kill()
        busy.wait()
        assert [r["rank"] for r in sampler.ranks(refs)] == [1]  # a process that ended drops out
    finally:
        for process in (busy, hold):
            process.kill()
            process.wait()


# -- monitor and timeline ---------------------------------------------------------------------------------------


def test_monitor_ties_ranks_to_gpus_and_writes_the_timeline_as_it_goes(tmp_path):
    fake = FakeNvml()
    fake.attach_process(5, os.getpid(), 2 << 30)
    refs = [
        RankProcess(os.getpid(), 0, "L1", 0, "cuda:0", None),  # NVML lists its PID on GPU 5
        RankProcess(os.getppid(), 1, "L1", 1, "cuda:1", "4,6"),  # a container: found through CUDA_VISIBLE_DEVICES
    ]
    path = tmp_path / "telemetry.jsonl"
    monitor = Monitor(0.05, str(path), fake, lambda: refs).start()  # its thread opens NVML and the file
    try:
        deadline = time.time() + 10
        while (not path.exists() or len(path.read_text().splitlines()) < 3) and time.time() < deadline:
            time.sleep(0.02)
        on_disk, malformed = timeline.read_timeline(str(path))  # while the monitor still runs
    finally:
        monitor.stop()
    assert len(on_disk) >= 3 and malformed == 0
    assert on_disk[0]["info"]["fake"] and len(on_disk[0]["info"]["gpus"]) == 8
    last = on_disk[-1]
    ranks = {r["rank"]: r for r in last["ranks"]}
    assert ranks[0]["gpu"] == 5 and ranks[1]["gpu"] == 6
    gpu5 = next(g for g in last["gpus"] if g["index"] == 5)
    assert gpu5["processes"] == [{"pid": os.getpid(), "gpu_memory": 2 << 30, "rank": 0}]
    assert monitor.errors == 0


@pytest.mark.parametrize("slow_ranks", [False, True])
def test_energy_per_example_from_the_timeline(tmp_path, slow_ranks):
    """``slow_ranks``: the ranks' readings after the GPUs' take 0.15 s, as on a busy node; the energy counter's
    difference must still be over the time it was read (a record stamped after the ranks was 43% off once)."""
    fake = FakeNvml(steady=True)  # GPU i draws 150 + 20 i watts, always
    fake.attach_process(0, os.getpid(), 1 << 30)
    fake.attach_process(1, os.getppid(), 1 << 30)
    refs = [RankProcess(os.getpid(), 0, "L"), RankProcess(os.getppid(), 1, "L")]
    path = tmp_path / "telemetry.jsonl"
    monitor = Monitor(0.2, str(path), fake, lambda: refs)
    monitor.open()
    if slow_ranks:
        read_ranks = monitor.host.ranks

        def slowly(wanted):
            time.sleep(0.15 if len(monitor.records) % 2 else 0.0)  # every other record: the delays differ
            return read_ranks(wanted)

        monitor.host.ranks = slowly
    for _ in range(6):
        monitor.sample_once()
        time.sleep(0.2)
    monitor.stop()
    records, _ = timeline.read_timeline(str(path))
    start, end = records[1]["t"] + 0.05, records[4]["t"] - 0.05
    figures = timeline.window_figures(records, start, end, "L", examples=1000)
    assert figures["gpus"] == [0, 1] and not figures["coarse"]
    assert figures["util_mean"] == 90 and figures["util_max"] == 90
    assert figures["power_mean_w"] == pytest.approx(150 + 170)
    assert figures["mem_peak_bytes"] == 600 * (1 << 20) + (1 << 30)
    expected = (150 + 170) * (end - start)
    assert figures["energy_source"] == "energy counter"
    assert figures["energy_j"] == pytest.approx(expected, rel=0.02)  # readings and records are ms apart
    assert figures["energy_per_example_j"] == pytest.approx(expected / 1000, rel=0.02)
    assert set(figures["ranks"]) == {"0", "1"} and figures["ranks"]["0"]["peak_rss_bytes"] > 0


def test_a_window_shorter_than_the_interval_uses_the_next_reading():
    records = [
        {"t": 10.0, "gpus": [], "host": {"cpu": 10.0}, "ranks": []},
        {"t": 11.0, "gpus": [], "host": {"cpu": 70.0}, "ranks": []},
    ]
    figures = timeline.window_figures(records, 10.2, 10.6, "L", None)
    assert figures["coarse"] and figures["host_cpu_mean"] == 70.0 and figures["util_mean"] is None
    assert timeline.window_figures(records, 11.5, 12.0, "L", None) is None  # nothing measured after it


def test_a_configuration_measured_again_in_a_further_launch_takes_its_ranks_load_from_that_launch():
    """A load burst disturbed the configuration's first launch (01), which ended it at t=13; a further launch
    (03) measured it again from t=27.9 to 29.1 (its rank 1 the last to end). Its ranks' load is read from
    launch 03's readings over that span; the span of its first start to its first end, [6, 13], holds none
    of them (every rank's load read empty). Measured in both launches (--launches 2), it is read from both."""
    def reading(t, launch, rss):
        return {"t": t, "gpus": [], "host": {"cpu": 50.0},
                "ranks": [{"launch": launch, "rank": 0, "pid": 7, "rss": rss, "threads": 4, "cpu": 95.0}]}

    records = ([reading(t, "01", 800 << 20) for t in (6.5, 9.0, 12.0)]
               + [reading(t, "03", 900 << 20) for t in (28.0, 28.5, 29.0)])
    spec = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4]), Inventory(problem="test"),
                      cpu_count=2).configs()[0]
    state = ConfigState(spec, started_t=6.0, ended_t=13.0, launch_started_t={"01": 6.0, "03": 27.9})
    # its config_end in each launch, as the session keeps them (rank 1 a little after rank 0 in launch 03)
    state.round_ends = {0: [{"t": 13.0, "launch": "01"}, {"t": 28.9, "launch": "03"}],
                        1: [{"t": 12.9, "launch": "01"}, {"t": 29.1, "launch": "03"}]}
    assert state.span_in("01") == (6.0, 13.0) and state.span_in("03") == (27.9, 29.1)
    window = (28.2, 28.9)
    again = {"launches": [{"launch": "01", "used": False}, {"launch": "03", "used": True}]}
    assert _rank_spans(state, again, "03", window, 30.0) == [("03", 27.9, 29.1)]
    figures = timeline.window_figures(records, *window, "03", None, _rank_spans(state, again, "03", window, 30.0))
    assert figures["ranks"]["0"]["readings"] == 3 and figures["ranks"]["0"]["peak_rss_bytes"] == 900 << 20
    both = {"launches": [{"launch": "01", "used": True}, {"launch": "03", "used": True}]}
    figures = timeline.window_figures(records, *window, "03", None, _rank_spans(state, both, "03", window, 30.0))
    assert figures["ranks"]["0"]["readings"] == 6 and figures["ranks"]["0"]["peak_rss_bytes"] == 900 << 20
    first_only = [r for r in records if 6.0 <= r["t"] <= 13.0]
    assert all(x["launch"] == "01" for r in first_only for x in r["ranks"])  # none of launch 03's in [6, 13]


# -- the sweep records telemetry ----------------------------------------------------------------------------------


@pytest.mark.slow
def test_sweep_summary_has_load_per_configuration(cpu_sweep):
    summary = cpu_sweep.summary()
    records, malformed = timeline.read_timeline(os.path.join(cpu_sweep.run_dir, "telemetry.jsonl"))
    assert records and malformed == 0 and summary["telemetry"]["readings"] == len(records)
    hello_pids = set()
    for path in sorted(os.popen(f"ls {cpu_sweep.run_dir}/launches/*/events/rank-*.jsonl").read().split()):
        with open(path, encoding="utf-8") as handle:
            hello_pids.add(json.loads(handle.readline())["pid"])
    seen = {r["pid"] for record in records for r in record["ranks"]}
    assert seen and seen <= hello_pids  # only the ranks, identified by their hello
    for entry in summary["configs"]:
        load = entry["telemetry"]
        assert load is not None and load["host_cpu_mean"] is not None
        assert set(load["ranks"]) == {str(r) for r in range(entry["world_size"])}
        assert all(r["peak_rss_bytes"] > 50 << 20 for r in load["ranks"].values())  # torch + resnet18
        if summary["environment"]["nvml"] != "ok":
            assert load["gpus"] == [] and load["energy_per_example_j"] is None
    assert summary["topology"] is not None
    assert "Load during measured steps" in cpu_sweep.stdout
    with open(os.path.join(cpu_sweep.run_dir, "summary.csv"), encoding="utf-8") as handle:
        assert "energy_per_example_j" in handle.readline()


# -- real NVML ----------------------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_real_nvml_sampler_and_topology():
    inventory = read_inventory()
    if not inventory.gpus or inventory.fake:
        pytest.skip(f"no GPU: {inventory.problem}")
    with GpuSampler() as sampler:
        sampler.sample()
        time.sleep(0.5)
        readings = sampler.sample()
    assert len(readings) == inventory.all_gpu_count
    for reading in readings:
        assert reading.mem_used is not None and reading.util is not None, reading.na
        assert reading.power_w is None or reading.power_w > 0
    topo = read_topology()
    assert topo.gpus and all(topo.matrix[g][g] == "X" for g in topo.gpus)
    print(format_matrix(topo))
    print(json.dumps([r.to_json() for r in readings], indent=1))


def test_the_cpu_layout_is_read_from_sysfs_and_shown_where_there_is_no_gpu(tmp_path):
    """Two sockets of two cores with two threads each, two NUMA nodes, as sysfs lays them out."""
    from ddptop.telemetry.topology import Topology, format_matrix, read_cpu_layout

    cpu_dir = tmp_path / "devices" / "system" / "cpu"
    cpu_dir.mkdir(parents=True)
    (cpu_dir / "online").write_text("0-7\n")
    for cpu in range(8):
        topology = cpu_dir / f"cpu{cpu}" / "topology"
        topology.mkdir(parents=True)
        (topology / "physical_package_id").write_text(f"{cpu // 4}\n")
        (topology / "core_id").write_text(f"{cpu % 2}\n")  # cpu and cpu+2 are one core's two threads
    for node, cpus in (("0", "0-3"), ("1", "4-7")):
        (tmp_path / "devices" / "system" / "node" / f"node{node}").mkdir(parents=True)
        (tmp_path / "devices" / "system" / "node" / f"node{node}" / "cpulist").write_text(cpus + "\n")
    layout = read_cpu_layout(str(tmp_path))
    assert {k: layout[k] for k in ("logical", "cores", "sockets", "numa")} == {
        "logical": 8, "cores": 4, "sockets": 2, "numa": {"0": "0-3", "1": "4-7"}}
    text = format_matrix(Topology(problem="NVML unavailable", cpu=layout), {1: 2, 2: 1})
    assert text.splitlines()[1:6] == [
        "No GPU or RDMA NIC found.",
        "",
        "CPUs of this machine: 2 socket(s), 4 physical cores, 8 logical CPUs",
        "  NUMA node 0: CPUs 0-3",
        "  NUMA node 1: CPUs 4-7",
    ]
    assert text.rstrip().endswith("with this many threads (OMP_NUM_THREADS) per rank: N=1: 2, N=2: 1")
    assert Topology.from_json(Topology(cpu=layout).to_json()).cpu == layout  # saved in topology.json
