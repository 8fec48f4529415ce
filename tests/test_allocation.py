"""What the job was given (ddptop.telemetry.allocation: affinity, cgroup v1/v2 limits, SLURM) against what the run
used at its peak (ddptop.analysis.job_use): the reading over fake /proc and /sys trees, the peak over the
recorded runs' summaries, the report's lines, and the live view's host line."""

import asyncio
import copy
import json
import os
import shutil

import psutil
import pytest

from ddptop.analysis.job_use import add_peak_use, config_use, peak_use
from ddptop.control import RecordedControl
from ddptop.report import environment_tables
from ddptop.report.schema import Summary
from ddptop.run import environment
from ddptop.telemetry import allocation
from ddptop.telemetry.inventory import Inventory
from ddptop.tui import format as fmt
from ddptop.tui.app import DdptopApp

from .conftest import REPO
from .tui_helpers import settled

GIB = 1 << 30
GOLDEN_RUN = os.path.join(REPO, "tests", "data", "golden", "recorded-run.summary.json")  # CPU: 3 configs, rank RSS
H100_SUMMARY = os.path.join(REPO, "tests", "data", "h100", "default", "summary.json")  # one H100, resnet50 bs32
RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")


def tree(root, files):
    """Files under ``root`` (a fake ``/``): path -> text; a text of None makes a directory there instead."""
    for path, text in files.items():
        full = os.path.join(root, path.lstrip("/"))
        if text is None:
            os.makedirs(full, exist_ok=True)
            continue
        os.makedirs(os.path.dirname(full), exist_ok=True)
        with open(full, "w", encoding="utf-8") as handle:
            handle.write(text)
    return str(root)


# -- cgroup v2 --------------------------------------------------------------------------------------------------

JOB = "/system.slice/slurmstepd.scope/job_1234"


def test_v2_memory_limit_of_the_job_above_the_step(tmp_path):
    """The step's own memory.max is "max" (no limit): the job's cgroup above it sets 64 GiB; the slice above
    that is larger and does not count."""
    root = tree(tmp_path, {
        "/proc/self/cgroup": f"0::{JOB}/step_0/user/task_0\n",
        f"/sys/fs/cgroup{JOB}/step_0/user/task_0/memory.max": "max\n",
        f"/sys/fs/cgroup{JOB}/step_0/memory.max": "max\n",
        f"/sys/fs/cgroup{JOB}/memory.max": f"{64 * GIB}\n",
        "/sys/fs/cgroup/system.slice/memory.max": f"{512 * GIB}\n",
    })
    assert allocation.memory_limit(root) == (64 * GIB, f"/sys/fs/cgroup{JOB}/memory.max")


def test_v2_the_smaller_parent_limit_holds(tmp_path):
    root = tree(tmp_path, {
        "/proc/self/cgroup": "0::/outer/inner\n",
        "/sys/fs/cgroup/outer/inner/memory.max": f"{8 * GIB}\n",
        "/sys/fs/cgroup/outer/memory.max": f"{4 * GIB}\n",
    })
    assert allocation.memory_limit(root) == (4 * GIB, "/sys/fs/cgroup/outer/memory.max")


def test_v2_max_everywhere_is_no_limit(tmp_path):
    root = tree(tmp_path, {
        "/proc/self/cgroup": "0::/user.slice/session-1.scope\n",
        "/sys/fs/cgroup/user.slice/session-1.scope/memory.max": "max\n",
        "/sys/fs/cgroup/user.slice/memory.max": "max\n",
    })
    assert allocation.memory_limit(root) == (None, None)


def test_v2_a_container_mounts_its_own_cgroup_as_the_root(tmp_path):
    """Inside a container /proc/self/cgroup says "0::/" and /sys/fs/cgroup is the container's own cgroup;
    a host path the container cannot see ("0::/docker/abc") comes down to that root too."""
    files = {"/sys/fs/cgroup/memory.max": f"{2 * GIB}\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"}
    root = tree(tmp_path / "a", {"/proc/self/cgroup": "0::/\n", **files})
    assert allocation.memory_limit(root) == (2 * GIB, "/sys/fs/cgroup/memory.max")
    assert allocation.cpu_quota(root) == (1.5, "/sys/fs/cgroup/cpu.max")
    root = tree(tmp_path / "b", {"/proc/self/cgroup": "0::/docker/abc\n", **files})
    assert allocation.memory_limit(root) == (2 * GIB, "/sys/fs/cgroup/memory.max")


def test_v2_a_path_never_leaves_the_cgroup_tree(tmp_path):
    """A cgroup namespace can show a path with "..": those parts are dropped, nothing outside is read."""
    root = tree(tmp_path, {
        "/proc/self/cgroup": "0::/../../escape\n",
        "/sys/escape/memory.max": "1024\n",  # what "/sys/fs/cgroup/../../escape" would reach
        "/sys/fs/cgroup/escape/memory.max": f"{3 * GIB}\n",
    })
    assert allocation.memory_limit(root) == (3 * GIB, "/sys/fs/cgroup/escape/memory.max")


def test_v2_cpu_quota(tmp_path):
    root = tree(tmp_path, {
        "/proc/self/cgroup": "0::/kubepods/pod1/ctr\n",
        "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "max 100000\n",
        "/sys/fs/cgroup/kubepods/pod1/cpu.max": "400000 100000\n",
        "/sys/fs/cgroup/kubepods/cpu.max": "max 100000\n",
    })
    assert allocation.cpu_quota(root) == (4.0, "/sys/fs/cgroup/kubepods/pod1/cpu.max")


# -- cgroup v1 --------------------------------------------------------------------------------------------------

V1_UNLIMITED = "9223372036854771712\n"  # what cgroup v1 writes for no limit


def test_v1_memory_limit_and_cpu_quota(tmp_path):
    job = "/slurm/uid_1000/job_1234"
    root = tree(tmp_path, {
        "/proc/self/cgroup": f"12:memory:{job}/step_0\n4:cpu,cpuacct:{job}\n1:name=systemd:/\n0::/\n",
        f"/sys/fs/cgroup/memory{job}/step_0/memory.limit_in_bytes": V1_UNLIMITED,
        f"/sys/fs/cgroup/memory{job}/memory.limit_in_bytes": f"{16 * GIB}\n",
        "/sys/fs/cgroup/memory/slurm/memory.limit_in_bytes": V1_UNLIMITED,
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        f"/sys/fs/cgroup/cpu,cpuacct{job}/cpu.cfs_quota_us": "200000\n",
        f"/sys/fs/cgroup/cpu,cpuacct{job}/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    assert allocation.memory_limit(root) == (16 * GIB, f"/sys/fs/cgroup/memory{job}/memory.limit_in_bytes")
    assert allocation.cpu_quota(root) == (2.0, f"/sys/fs/cgroup/cpu,cpuacct{job}/cpu.cfs_quota_us")


def test_v1_unlimited_everywhere_and_v1_before_a_hybrid_v2_line(tmp_path):
    """A hybrid system lists a v2 line too, whose hierarchy has no memory controller: the v1 memory
    controller is the one that limits (here: nothing), not a memory.max lying at the v2 path."""
    root = tree(tmp_path, {
        "/proc/self/cgroup": "4:memory:/user.slice\n0::/user.slice\n",
        "/sys/fs/cgroup/memory/user.slice/memory.limit_in_bytes": V1_UNLIMITED,
        "/sys/fs/cgroup/memory/memory.limit_in_bytes": V1_UNLIMITED,
        "/sys/fs/cgroup/user.slice/memory.max": "1024\n",
    })
    assert allocation.memory_limit(root) == (None, None)
    assert allocation.cpu_quota(root) == (None, None)


# -- unreadable -------------------------------------------------------------------------------------------------

def test_unreadable_or_missing_files_are_no_limit_known(tmp_path):
    # no /proc/self/cgroup at all (not Linux, or /proc not mounted)
    assert allocation.memory_limit(str(tmp_path / "empty")) == (None, None)
    assert allocation.cpu_quota(str(tmp_path / "empty")) == (None, None)
    # memory.max a directory (open fails), a garbled number, a cgroup path with no files under it
    root = tree(tmp_path / "odd", {
        "/proc/self/cgroup": "0::/a/b\n",
        "/sys/fs/cgroup/a/b/memory.max": None,
        "/sys/fs/cgroup/a/memory.max": "lots\n",
        "/sys/fs/cgroup/a/b/cpu.max": "\n",
    })
    assert allocation.memory_limit(root) == (None, None)
    assert allocation.cpu_quota(root) == (None, None)
    # garbled /proc/self/cgroup lines are skipped, a good one still read
    root = tree(tmp_path / "garbled", {
        "/proc/self/cgroup": "nonsense\n\n0::/ok\n",
        "/sys/fs/cgroup/ok/memory.max": "4096\n",
    })
    assert allocation.memory_limit(root) == (4096, "/sys/fs/cgroup/ok/memory.max")


# -- SLURM and the whole allocation ------------------------------------------------------------------------------

SLURM_ENV = {
    "SLURM_JOB_ID": "1234", "SLURM_JOB_NUM_NODES": "1", "SLURM_NTASKS": "2", "SLURM_CPUS_ON_NODE": "16",
    "SLURM_CPUS_PER_TASK": "8", "SLURM_MEM_PER_NODE": "65536", "SLURM_GPUS_ON_NODE": "2", "SLURM_JOB_GPUS": "0,1",
    "SLURM_GPUS_PER_NODE": "a100:2", "SLURM_JOB_NAME": "bench", "CUDA_VISIBLE_DEVICES": "0,1",
}


def test_slurm_variables_parsed():
    assert allocation.slurm_allocation(SLURM_ENV) == {
        "job_id": 1234, "job_num_nodes": 1, "ntasks": 2, "cpus_on_node": 16, "cpus_per_task": 8,
        "mem_per_node_mib": 65536, "gpus_on_node": 2, "gpus_per_node": 2, "gpus_per_node_spec": "a100:2",
        "job_gpus": "0,1",
    }
    # several GPU types: the count is their sum; a plain count has no spec; a single GPU id stays text
    assert allocation.slurm_allocation({"SLURM_GPUS_PER_NODE": "volta:3,kepler:1", "SLURM_JOB_GPUS": "3"}) == {
        "gpus_per_node": 4, "gpus_per_node_spec": "volta:3,kepler:1", "job_gpus": "3"}
    assert allocation.slurm_allocation({"SLURM_GPUS_PER_NODE": "2", "SLURM_MEM_PER_CPU": "4000"}) == {
        "gpus_per_node": 2, "mem_per_cpu_mib": 4000}
    assert allocation.slurm_allocation({"SLURM_GPUS_PER_NODE": "a100", "SLURM_JOB_ID": ""}) == {
        "gpus_per_node": "a100", "gpus_per_node_spec": "a100"}
    assert allocation.slurm_allocation({"HOME": "/root", "CUDA_VISIBLE_DEVICES": "0"}) == {}


def test_read_allocation_in_a_simulated_slurm_job(tmp_path, monkeypatch):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {8, 0, 1, 2, 3})
    root = tree(tmp_path, {"/proc/self/cgroup": f"0::{JOB}/step_0\n",
                           f"/sys/fs/cgroup{JOB}/memory.max": f"{64 * GIB}\n"})
    found = allocation.read_allocation(SLURM_ENV, proc_root=root)
    assert found["cores"] == [0, 1, 2, 3, 8] and found["cores_count"] == 5
    assert found["memory_limit_bytes"] == 64 * GIB
    assert found["memory_limit_source"] == f"/sys/fs/cgroup{JOB}/memory.max"
    assert found["cpu_quota_cores"] is None and found["cpu_quota_source"] is None
    assert found["memory_total_bytes"] == psutil.virtual_memory().total
    assert found["gpus_visible"] == "0,1"
    assert found["slurm"]["job_id"] == 1234 and found["slurm"]["gpus_on_node"] == 2
    assert json.loads(json.dumps(found)) == found  # saved as it is
    outside = allocation.read_allocation({}, proc_root=str(tmp_path / "nothing"))
    assert outside["slurm"] == {} and outside["gpus_visible"] is None and outside["memory_limit_bytes"] is None


def test_the_run_environment_carries_the_allocation(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    monkeypatch.setenv("SLURM_CPUS_ON_NODE", "4")
    env = environment.collect(Inventory())
    assert env["allocation"]["slurm"] == {"job_id": 77, "cpus_on_node": 4}
    assert env["allocation"]["cores"] == sorted(os.sched_getaffinity(0))
    assert env["allocation"]["cores_count"] == env["usable_cpus"]


# -- peak use over the summaries -----------------------------------------------------------------------------

def golden(path=GOLDEN_RUN):
    """A recorded run's summary as a summary from before allocation and peak_use were kept: without them."""
    with open(path, encoding="utf-8") as handle:
        doc = json.load(handle)
    doc["environment"].pop("peak_use", None)
    return doc


def test_peak_use_of_a_cpu_run():
    """recorded-run: ranks' CPU 138% (no ddp), 190.4% (1M/1P), 87.7% + 91.3% (1M/2P); RSS peaks 0.91,
    0.97 GB and 0.96 + 0.97 GB. No GPU ran (fake GPUs, kernels on the CPU)."""
    found = peak_use(golden()["configs"])
    assert found == {
        "cores_busy": 1.904, "cores_busy_config": "resnet18/ddp/bs4/n1/gloo",
        "rss_bytes": 962199552 + 971358208, "rss_config": "resnet18/ddp/bs4/n2/gloo",
        "gpu_memory_bytes": None, "gpu_memory_config": None, "gpu_memory_source": None, "gpus": None,
        "gpu_memory_total_at_most_bytes": None,
    }


def test_peak_use_of_a_gpu_run_and_the_allocator_figure():
    """The H100 run: NVML saw 5185011712 bytes in use on GPU 0 in the DDP configuration (its rank's RSS
    1.72 GB, one core busy). Where the load table's figure is the allocator's (larger), that one counts."""
    configs = golden(H100_SUMMARY)["configs"]
    found = peak_use(configs)
    assert (found["gpu_memory_bytes"], found["gpu_memory_source"], found["gpus"]) == (5185011712, "nvml", 1)
    assert found["gpu_memory_config"] == "resnet50/ddp/bs32/n1/nccl"
    assert found["rss_bytes"] == 1720909824 and found["cores_busy"] == pytest.approx(1.0009, abs=1e-3)
    two = copy.deepcopy(configs[0])
    two["config_id"] = "resnet50/ddp/bs32/n2/nccl"
    two["telemetry"].update(gpus=[0, 1], mem_peak_shown_bytes=6 * GIB, mem_peak_source="allocator")
    two["telemetry"]["ranks"] = {"0": {"cpu_mean": 120.0, "peak_rss_bytes": GIB, "gpu": 0},
                                 "1": {"cpu_mean": 80.0, "peak_rss_bytes": GIB, "gpu": 1}}
    assert config_use(two) == {"cores_busy": 2.0, "rss_bytes": 2 * GIB, "gpu_memory_bytes": 6 * GIB,
                               "gpu_memory_source": "allocator", "gpus": 2}
    found = peak_use(configs + [two])
    assert (found["gpu_memory_bytes"], found["gpus"], found["gpu_memory_total_at_most_bytes"]) == (6 * GIB, 2, 12 * GIB)
    assert (found["cores_busy"], found["cores_busy_config"]) == (2.0, "resnet50/ddp/bs32/n2/nccl")
    assert (found["rss_bytes"], found["rss_config"]) == (2 * GIB, "resnet50/ddp/bs32/n2/nccl")


def test_peak_use_without_telemetry_knows_nothing():
    configs = golden(os.path.join(REPO, "tests", "data", "golden", "recorded-cpu-run.summary.json"))["configs"]
    assert peak_use(configs)["rss_bytes"]  # with its telemetry, the recorded CPU run's ranks' RSS is known
    found = peak_use([{**config, "telemetry": None} for config in configs])  # a run without telemetry
    assert all(value is None for value in found.values())
    assert peak_use([{"config_id": "x", "telemetry": None}, "damaged"]) == found  # type: ignore[list-item]


def test_peak_use_is_stored_in_the_environment_and_survives_the_schema():
    doc = golden()
    add_peak_use(doc["environment"], doc["configs"])
    assert doc["environment"]["peak_use"]["rss_bytes"] == 1933557760
    again = Summary.from_json(doc).to_json()
    assert again["environment"]["peak_use"] == doc["environment"]["peak_use"]


# -- the report's environment lines ----------------------------------------------------------------------------

def given(**changes):
    found = {"cores": list(range(16)), "cores_count": 16, "cpu_quota_cores": None, "cpu_quota_source": None,
             "memory_limit_bytes": 64 * GIB, "memory_limit_source": f"/sys/fs/cgroup{JOB}/memory.max",
             "memory_total_bytes": 1024 * GIB, "gpus_visible": "0,1",
             "slurm": {"job_id": 1234, "cpus_on_node": 16, "gpus_on_node": 2}}
    found.update(changes)
    return found


def used(**changes):
    found = {"cores_busy": 11.83, "cores_busy_config": "resnet50/ddp/bs32/n2/nccl", "rss_bytes": int(23.1 * GIB),
             "rss_config": "resnet50/ddp/bs32/n2/nccl", "gpu_memory_bytes": 61 * GIB,
             "gpu_memory_config": "resnet50/ddp/bs32/n2/nccl", "gpu_memory_source": "nvml", "gpus": 2,
             "gpu_memory_total_at_most_bytes": 122 * GIB}
    found.update(changes)
    return found


def environment_lines(allocation_=None, peak=None, gpus=2):
    doc = golden()
    doc["environment"]["gpus"] = [{"index": i, "name": "NVIDIA H100 80GB HBM3"} for i in range(gpus)]
    if allocation_ is not None:
        doc["environment"]["allocation"] = allocation_
    if peak is not None:
        doc["environment"]["peak_use"] = peak
    return [line for line in environment_tables.environment_markdown(Summary.from_json(doc))
            if line.startswith(("- given", "- used at peak", "- note"))]


def test_report_given_and_used_lines():
    assert environment_lines(given(), used()) == [
        "- given: 16 cores (affinity 0-15), memory limit 64.0 GiB (cgroup), 2 GPUs (CUDA_VISIBLE_DEVICES=0,1)"
        " — SLURM job 1234: 16 CPUs on this node, 2 GPUs on this node",
        "- used at peak: 11.8 cores busy, 23.1 GiB RSS, 61.0 GiB GPU memory on the fullest of 2 GPUs"
        " (resnet50/ddp/bs32/n2/nccl)",
    ]  # 11.8 of 16 cores and 36% of the limit: no note


def test_report_names_each_figures_configuration_when_they_differ():
    lines = environment_lines(given(cores=[0, 1, 2, 3, 8, 9], cores_count=6, memory_limit_bytes=None,
                                    gpus_visible=None, cpu_quota_cores=4.0, slurm={}),
                              used(cores_busy=3.5, rss_config="resnet50/ddp/bs64/n2/nccl", gpu_memory_bytes=None))
    assert lines == [
        "- given: 6 cores (affinity 0-3,8-9), CPU quota 4 cores (cgroup), no memory limit (1024.0 GiB on the host),"
        " 2 GPUs",
        "- used at peak: 3.5 cores busy (resnet50/ddp/bs32/n2/nccl), 23.1 GiB RSS (resnet50/ddp/bs64/n2/nccl)",
    ]  # 3.5 of the quota's 4 cores: not under half; no memory limit: nothing to compare the RSS with


def test_report_notes_what_was_left_unused():
    lines = environment_lines(given(), used(cores_busy=3.2, rss_bytes=8 * GIB))
    assert lines[-1] == ("- note: the busiest configuration kept 3.2 of the 16 cores given busy; "
                         "the ranks' RSS stayed at or below 12% of the memory limit")


def test_report_notes_a_run_near_its_memory_limit():
    lines = environment_lines(given(), used(rss_bytes=int(60 * GIB)))
    assert lines[-1] == "- note: the ranks' RSS came to at most 94% of the memory limit"
    lines = environment_lines(given(), used(rss_bytes=int(57 * GIB)))  # 89%: neither near nor little
    assert not lines[-1].startswith("- note")


def test_report_slurm_memory_and_tasks():
    slurm = {"job_id": 99, "job_num_nodes": 2, "ntasks": 4, "cpus_per_task": 1, "mem_per_node_mib": 0,
             "mem_per_cpu_mib": 4000, "gpus_per_node": 1, "job_gpus": "3"}
    (line,) = environment_lines(given(slurm=slurm, gpus_visible="0"), None, gpus=1)
    assert line.endswith("1 GPU (CUDA_VISIBLE_DEVICES=0) — SLURM job 99: 2 nodes, 4 tasks of 1 CPU, "
                         "all memory per node, 3.9 GiB per CPU, 1 GPU per node, GPU ids 3")


def test_a_summary_from_before_prints_nothing_new():
    """A summary saved before allocation and peak_use: the environment section as it always was."""
    doc = golden()
    assert "allocation" not in doc["environment"] and "peak_use" not in doc["environment"]
    lines = environment_tables.environment_markdown(Summary.from_json(doc))
    with open(os.path.join(REPO, "tests", "data", "golden", "recorded-run.summary.md"), encoding="utf-8") as handle:
        md = handle.read()
    section = md.split("## Environment\n\n", 1)[1].split("\n## ", 1)[0]
    # the golden file is rebuilt from the run's files, which now gives it the used-at-peak line
    before = [line for line in section.rstrip("\n").split("\n") if not line.startswith("- used at peak")]
    assert "\n".join(lines) == "\n".join(before) + "\n"
    assert environment_lines(None, None) == []


# -- the live view's host line ----------------------------------------------------------------------------------

def test_given_in_a_few_words():
    env = {"gpus": [{}, {}], "allocation": given()}
    assert fmt.given(env) == "given 16 cores · 64.0 GiB memory limit · 2 GPUs (SLURM 1234)"
    env = {"gpus": [], "allocation": given(cpu_quota_cores=2.5, memory_limit_bytes=None, slurm={})}
    assert fmt.given(env) == "given 2.5 cores (quota) · no memory limit · 0 GPUs"
    assert fmt.given({"gpus": []}) is None and fmt.given(None) is None


def test_the_environment_of_a_recorded_control_is_its_environment_json(tmp_path):
    recorded = RecordedControl.of(RECORDED)
    with open(os.path.join(RECORDED, "environment.json"), encoding="utf-8") as handle:
        assert recorded.environment == json.load(handle)
    assert "allocation" not in recorded.environment and fmt.given(recorded.environment) is None  # from before it
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    os.remove(run / "environment.json")  # a run directory without it
    assert RecordedControl.of(str(run)).environment is None


def test_host_line_says_what_the_job_was_given(tmp_path):
    """A recorded run whose environment has the allocation: the host line's last line says it, at 80 columns
    whole; the recorded run from before (no allocation) shows no such line."""
    run = tmp_path / "run"
    shutil.copytree(RECORDED, run)
    with open(run / "environment.json", encoding="utf-8") as handle:
        env = json.load(handle)
    env["allocation"] = given(cores_count=2, cores=[0, 1], slurm={"job_id": 5678})
    with open(run / "environment.json", "w", encoding="utf-8") as handle:
        json.dump(env, handle)

    async def host_line(path, size):
        app = DdptopApp(RecordedControl.of(str(path)))  # which reads the run directory's environment.json
        async with app.run_test(size=size) as pilot:
            await settled(pilot)
            widget = app.query_one("#host")
            return str(widget.render()), widget.content_region.width

    for size in ((80, 24), (160, 50)):
        host, width = asyncio.run(host_line(run, size))
        lines = host.splitlines()
        assert "Host CPU" in host
        assert lines[-2] == "given 2 cores · 64.0 GiB memory limit · 8 GPUs (SLURM 5678)", host
        assert lines[-1].startswith("peak ") and lines[-1].endswith(" RSS"), host  # fake GPUs: no rank on one
        assert len(lines[-2]) <= width and len(lines[-1]) <= width  # each on one line of its own
    host, _ = asyncio.run(host_line(RECORDED, (80, 24)))
    assert "Host CPU" in host and "given" not in host


# -- what the ranks used at their peak so far, live ------------------------------------------------------------

def test_the_live_peak_adds_up_the_ranks_and_takes_the_fullest_gpu_holding_one():
    from ddptop.telemetry.running_peak import PeakUse

    peak = PeakUse()
    assert peak.as_dict() == {"cores_busy": None, "rss_bytes": None, "gpu_memory_bytes": None}
    peak.add({"ranks": [{"rank": 0, "cpu": None, "rss": 1000}], "gpus": []})  # psutil's first percent is None
    peak.add({"ranks": [{"rank": 0, "cpu": 150.0, "rss": 3000, "gpus": [1]}, {"rank": 1, "cpu": 90.0, "rss": 2000,
                                                                            "gpus": [2]}],
              "gpus": [{"index": 0, "mem_used": 70 * GIB}, {"index": 1, "mem_used": 5 * GIB},
                       {"index": 2, "mem_used": 6 * GIB}]})  # GPU 0 holds no rank: another job's
    peak.add({"ranks": [{"rank": 0, "cpu": 100.0, "rss": 4000}], "gpus": []})
    assert peak.as_dict() == {"cores_busy": 2.4, "rss_bytes": 5000, "gpu_memory_bytes": 6 * GIB}


@pytest.mark.parametrize("damaged", [{"gpus": [None]}, {"gpus": [{"index": [25, 0, 0], "mem_used": 1}]}, {"gpus": 5},
                                     {"ranks": 5}, {"ranks": [{"gpus": 3}]}, {"ranks": [None], "gpus": "x"}])
def test_the_live_peak_reads_around_a_damaged_reading(damaged):
    """A telemetry line retyped in any place (a GPU that is null, an index that is a list, a list that is a
    number) counts for nothing, and the readings around it still count."""
    from ddptop.telemetry.running_peak import PeakUse

    peak = PeakUse()
    peak.add(damaged)
    peak.add({"ranks": [{"rank": 0, "cpu": 50.0, "gpus": [0]}], "gpus": [{"index": 0, "mem_used": GIB}]})
    assert peak.as_dict() == {"cores_busy": 0.5, "rss_bytes": None, "gpu_memory_bytes": GIB}


def test_a_recorded_runs_follower_keeps_the_peak_of_every_record_not_only_those_it_keeps():
    from ddptop.telemetry.timeline import TimelineFollower

    path = os.path.join(REPO, "tests", "data", "h100", "default", "telemetry.jsonl")
    whole, short = TimelineFollower(path), TimelineFollower(path, keep=5)
    whole.refresh()
    short.refresh()
    assert len(short.records) == 5 and short.peak() == whole.peak()
    assert whole.peak()["gpu_memory_bytes"] > 0 and whole.peak()["rss_bytes"] > 0


def test_the_plans_usable_cores_are_the_affinity_within_the_cgroups_cpu_quota(tmp_path):
    from ddptop.telemetry.allocation import usable_cpu_count

    affinity = len(os.sched_getaffinity(0))
    limited = tree(tmp_path / "a", {"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "150000 100000\n"})
    assert usable_cpu_count(limited) == 1  # 1.5 cores of CPU time: one thread per core that time can keep busy
    free = tree(tmp_path / "b", {"/proc/self/cgroup": "0::/\n", "/sys/fs/cgroup/cpu.max": "max 100000\n"})
    assert usable_cpu_count(free) == affinity
    wide = tree(tmp_path / "c", {"/proc/self/cgroup": "0::/\n",
                                 "/sys/fs/cgroup/cpu.max": f"{100000 * (affinity + 8)} 100000\n"})
    assert usable_cpu_count(wide) == affinity
