"""Interference and validity: what a configuration's window ran through, from the telemetry ddptop records.

GPU cases run the real Monitor against the fake node (``ddptop/telemetry/fake/nvml.py``), made to throttle,
host a stranger's process, train a link down or report an Xid. The host case spins real processes. This
machine is shared, so GPU cases replace the host part of their records with a quiet one: the host figures
are whatever else the machine runs at that moment.
"""

import json
import os
import shutil
import subprocess
import sys
import time

import pynvml
import pytest

from ddptop.report import sections
from ddptop.protocol.vocab import Status
from ddptop.run.snapshot import ConfigSnapshot, ValiditySoFar
from ddptop.telemetry import timeline, validity
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.host import HostSampler, RankProcess
from ddptop.telemetry.monitor import Monitor
from ddptop.tui.panels.configs import _config_cells, config_notes
from ddptop.report.schema import Summary

from .conftest import REPO

QUIET_HOST = {"cpu": 5.0, "mem_used": 1 << 30, "mem_total": 8 << 30, "mem_available": 7 << 30,
              "other_cpu_cores": 0.05, "own_cpu_cores": 1.0, "swap_in": 0, "swap_out": 0}


def gpu_window(tmp_path, change=None, slow_ttl=None, ticks=5):
    """Validity of a window over ``ticks`` readings of a steady fake node, ranks 0 and 1 on GPUs 0 and 1;
    ``change(fake)`` runs after the first reading (the one before the window)."""
    fake = FakeNvml(steady=True)
    fake.attach_process(0, os.getpid(), 1 << 30)
    fake.attach_process(1, os.getppid(), 1 << 30)
    refs = [RankProcess(os.getpid(), 0, "L", 0, "cuda:0"), RankProcess(os.getppid(), 1, "L", 1, "cuda:1")]
    path = tmp_path / "telemetry.jsonl"
    monitor = Monitor(0.05, str(path), fake, lambda: refs)
    if slow_ttl is not None:
        monitor.gpu.slow_ttl = slow_ttl
    try:
        for tick in range(ticks):
            monitor.sample_once()
            if tick == 0 and change is not None:
                change(fake)
            time.sleep(0.01)
    finally:
        monitor.stop()
    records, malformed = timeline.read_timeline(str(path))
    assert malformed == 0 and len(records) == ticks
    for record in records:
        record["host"] = dict(QUIET_HOST)
    return validity.window_validity(records, records[0]["t"], records[-1]["t"], "L"), records


def gpu_reasons(found):
    return [r for r in found["reasons"] if r.startswith("GPU")]


def test_quiet_fake_node_is_not_disturbed(tmp_path):
    found, records = gpu_window(tmp_path)
    assert not found["disturbed"] and found["reasons"] == [], found
    assert found["gpus"] == [0, 1] and found["gpu_checks"] == "done" and found["readings"] == 4
    assert found["throttle_share"] == {} and found["sm_clock_below_max_share"] == 0.0
    assert found["pcie_degraded"] is False and found["foreign_gpu_processes"] == [] and found["xid"] == []
    assert found["ecc"] == 0 and found["swap_bytes"] == 0 and found["other_cpu_cores"] == pytest.approx(0.05)
    info = records[0]["info"]["gpus"][0]
    assert (info["sm_clock_max_mhz"], info["pcie_gen_max"], info["pcie_width_max"]) == (1530, 3, 16)
    gpu0 = records[-1]["gpus"][0]
    assert (gpu0["pcie_gen"], gpu0["pcie_width"]) == (3, 16)


def test_throttling_gpu_is_disturbed(tmp_path):
    found, _ = gpu_window(tmp_path, lambda fake: fake.throttle(1, pynvml.nvmlClocksEventReasonHwThermalSlowdown))
    assert found["disturbed"]
    assert "GPU 1: HW thermal held its clocks in 100% of samples" in found["reasons"]
    assert any(r.startswith("GPU 1: SM clock below 90% of max") for r in found["reasons"])
    assert found["throttle_share"] == {"HW thermal": 0.5}  # one GPU of two, every sample
    assert found["sm_clock_below_max_share"] == 0.5


def test_a_limit_that_is_not_interference_is_recorded_but_not_flagged(tmp_path):
    found, _ = gpu_window(tmp_path, lambda fake: fake.throttle(0, pynvml.nvmlClocksEventReasonSyncBoost, 1.0))
    assert not found["disturbed"] and found["throttle_share"] == {"sync boost": 0.5}


def test_foreign_process_on_a_ranks_gpu_is_disturbed(tmp_path):
    found, records = gpu_window(tmp_path, lambda fake: fake.attach_process(0, 4242424, 3 << 30))
    assert found["disturbed"]
    assert "GPU 0: a compute process that is not a rank (PID 4242424)" in found["reasons"]
    assert found["foreign_gpu_processes"] == [{"gpu": 0, "pid": 4242424, "known": True, "gpu_memory_max": 3 << 30}]
    processes = records[-1]["gpus"][0]["processes"]
    assert {"pid": os.getpid(), "gpu_memory": 1 << 30, "rank": 0} in processes  # the rank is not foreign


def test_a_process_on_a_gpu_the_job_does_not_use_is_not_its_business(tmp_path):
    found, _ = gpu_window(tmp_path, lambda fake: fake.attach_process(5, 4242424, 3 << 30))
    assert not found["disturbed"] and found["foreign_gpu_processes"] == []


def test_pids_from_another_namespace_are_unknown_not_guessed(tmp_path):
    """A container: NVML lists host PIDs, the rank is found through CUDA_VISIBLE_DEVICES."""
    fake = FakeNvml(steady=True)
    fake.attach_process(2, 7000001, 1 << 30)  # the rank's host PID, or a stranger's: nobody here can tell
    refs = [RankProcess(os.getpid(), 0, "L", 0, "cuda:0", "2,3")]
    path = tmp_path / "telemetry.jsonl"
    monitor = Monitor(0.05, str(path), fake, lambda: refs)
    for _ in range(3):
        monitor.sample_once()
    monitor.stop()
    records, _ = timeline.read_timeline(str(path))
    assert records[-1]["gpus"][2]["processes"] == [{"pid": 7000001, "gpu_memory": 1 << 30, "foreign": "unknown"}]
    for record in records:
        record["host"] = dict(QUIET_HOST)
    found = validity.window_validity(records, records[0]["t"], records[-1]["t"], "L")
    assert found["gpus"] == [2] and not found["disturbed"]
    assert any("other compute processes unknown" in note for note in found["notes"])


def test_pcie_link_narrower_than_its_maximum_is_disturbed(tmp_path):
    found, _ = gpu_window(tmp_path, lambda fake: fake.pcie_link(1, 3, 8))
    assert found["disturbed"] and found["pcie_degraded"] is True
    assert "GPU 1: PCIe link gen3 x8 while busy (can do gen3 x16)" in found["reasons"]


def test_xid_and_new_ecc_errors_are_disturbed(tmp_path):
    def faults(fake):
        fake.xid(0, 79)
        fake.ecc_error(1, 2)

    found, _ = gpu_window(tmp_path, faults, slow_ttl=0.0)
    assert found["disturbed"] and found["xid"] == [{"gpu": 0, "code": 79}] and found["ecc"] == 2
    assert "GPU 0: Xid 79" in found["reasons"] and "GPU 1: 2 new uncorrected ECC errors" in found["reasons"]


def test_an_xid_before_the_window_is_not_the_windows():
    before = {"t": 1.0, "gpus": [{"index": 0, "xid": [79]}], "ranks": [{"launch": "L", "gpu": 0}]}
    inside = [{"t": 2.0 + i, "gpus": [{"index": 0, "xid": [79], "util": 90}], "ranks": [{"launch": "L", "gpu": 0}],
               "host": {}} for i in range(2)]
    found = validity.window_validity([before, *inside], 1.5, 4.0, "L")
    assert found["xid"] == [] and not found["disturbed"]
    assert validity._new_codes([1, 2, 3], [2, 3, 4, 5]) == [4, 5]  # lists keep the last codes only


def test_new_nvml_calls_not_supported_are_na_with_a_reason(tmp_path):
    fake = FakeNvml(fail={"nvmlDeviceGetCurrPcieLinkWidth": pynvml.NVML_ERROR_NOT_SUPPORTED},
                    missing={"nvmlDeviceGetMaxPcieLinkGeneration"})
    monitor = Monitor(0.05, None, fake)
    record = [monitor.sample_once() for _ in range(3)][-1]
    monitor.stop()
    gpu = record["gpus"][0]
    assert "pcie_width" not in gpu and gpu["na"]["pcie_width"] == "not supported on this GPU"
    assert gpu["na"]["pcie_gen"].startswith("maximum: not in this driver's NVML")
    assert fake.calls["nvmlDeviceGetCurrPcieLinkWidth"] == 8  # once per GPU, then remembered
    assert "nvmlDeviceGetCurrPcieLinkGeneration" not in fake.calls  # no maximum: never asked


# -- host -------------------------------------------------------------------------------------------------------

SPIN = "import time\nend = time.time() + {seconds}\nwhile time.time() < end: pass\n"


def spin_detached(seconds: float) -> int:
    """A spinning process that is not ddptop's child (its parent exits at once): the PID."""
    starter = (
        "import subprocess, sys\n"
        f"p = subprocess.Popen([sys.executable, '-c', {SPIN.format(seconds=seconds)!r}])\n"
        "print(p.pid, flush=True)\n"
    )
    done = subprocess.run([sys.executable, "-c", starter], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


def test_a_busy_process_that_is_not_a_rank_disturbs_the_window(tmp_path):
    rank = subprocess.Popen([sys.executable, "-c", SPIN.format(seconds=2.5)])  # a rank: ddptop's own child
    refs = [RankProcess(rank.pid, 0, "L", 0, "cpu")]
    path = tmp_path / "telemetry.jsonl"
    monitor = Monitor(0.25, str(path), FakeNvml(library_missing=True), lambda: refs).start()
    try:
        time.sleep(0.3)
        start = time.time()
        stranger = spin_detached(2.0)
        time.sleep(2.0)
        end = time.time()
    finally:
        monitor.stop()
        rank.kill()
        rank.wait()
    records, _ = timeline.read_timeline(str(path))
    window = [r for r in records if start < r["t"] <= end]
    inside = [r["host"] for r in window]
    assert inside and all("other_cpu_cores" in h and "mem_available" in h and "swap_in" in h for h in inside)
    # the spinning rank is ddptop's, not "other": what it used (psutil's per-process figure) is in "own"
    own = sum(h["own_cpu_cores"] for h in inside) / len(inside)
    rank_cores = sum(r["ranks"][0]["cpu"] or 0 for r in window) / 100 / len(window)
    assert own == pytest.approx(rank_cores, abs=0.1) and own > 0.05, window
    found = validity.window_validity(records, start, end, "L")
    assert found["other_cpu_cores"] > validity.OTHER_CPU_CORES_MAX, (stranger, inside)
    assert found["disturbed"] and found["reasons"][0].startswith("other processes used")
    assert found["gpu_checks"] == "skipped" and "GPU checks skipped: no GPU ran this configuration" in found["notes"]


# spins until it has used this much CPU itself, however long a busy machine makes that take
SPIN_CPU = "import time\nwhile time.process_time() < {seconds}: pass\n"


def test_host_sampler_counts_a_reaped_child_as_its_own():
    """A child that ran and was reaped between two readings counts as ddptop's own CPU: its 0.5 CPU-seconds
    are in the reading, whatever share of a core the machine's load left it (the reading's cores times at
    most the wall time around it)."""
    started = time.monotonic()
    sampler = HostSampler()
    subprocess.run([sys.executable, "-c", SPIN_CPU.format(seconds=0.5)], check=True)  # starts and ends between ticks
    reading = sampler.host()
    wall = time.monotonic() - started  # at least the sampler's own interval
    assert reading["own_cpu_cores"] * wall >= 0.45, (reading, wall)


# -- old timelines, live view, report ---------------------------------------------------------------------------


def test_a_timeline_without_these_fields_says_not_recorded():
    records, _ = timeline.read_timeline(os.path.join(REPO, "tests", "data", "recorded-run", "telemetry.jsonl"))
    assert records and "other_cpu_cores" not in records[-1]["host"]
    found = validity.window_validity(records, records[0]["t"], records[-1]["t"], "01-n1-gloo")
    assert not found["disturbed"] and found["other_cpu_cores"] is None and found["swap_bytes"] is None
    assert "other processes' CPU: not recorded" in found["notes"] and "swap activity: not recorded" in found["notes"]
    assert found["mem_available_min_bytes"] > 0  # from memory total - used, which old timelines have
    old_gpu = [{"t": 1.0 + i, "host": {}, "gpus": [{"index": 0, "util": 90}], "ranks": [{"launch": "L", "gpu": 0}]}
               for i in range(3)]
    found = validity.window_validity(old_gpu, 0.0, 3.0, "L")
    assert found["pcie_degraded"] is None and "PCIe link: not recorded" in found["notes"]
    assert found["ecc"] is None and not found["disturbed"]


def test_the_accumulator_is_incremental_and_equals_the_window(tmp_path):
    """What the live view relies on: records added a frame at a time, overlapping, give the whole window's
    answer (each record counted once)."""
    _, records = gpu_window(tmp_path, lambda fake: fake.pcie_link(0, 2, 16), ticks=6)
    start = records[0]["t"]
    live = validity.ValidityAccumulator(start, None, "L")
    live.add_all(records[:3]).add_all(records[1:])
    answer = live.result()
    whole = validity.ValidityAccumulator(start, None, "L").add_all(records).result()
    assert answer == whole and answer["readings"] == 5 and answer["disturbed"]
    fresh = validity.ValidityAccumulator(records[-1]["t"], None, "L").add_all(records).result()
    assert fresh["readings"] == 0 and not fresh["disturbed"]


def test_config_table_shows_a_disturbed_configuration_and_the_report_lists_it():
    base = dict(config_id="c", label="1M/2P", model="resnet18", mode="ddp", batch_size=16, backend="gloo",
                status="running", reason=None, progress=0.5, sample_count=3, revision=1, stats=None)
    quiet = _config_cells(ConfigSnapshot(**base, validity=ValiditySoFar(False)), None)["status"]
    assert quiet.plain == "running" and quiet == _config_cells(ConfigSnapshot(**base), None)["status"]
    disturbed = ConfigSnapshot(**base, validity=ValiditySoFar(True, ("other processes used 0.9 cores",), so_far=True))
    assert _config_cells(disturbed, None)["status"].plain == "running !"  # the mark; the notes say what it means
    (note,) = config_notes([disturbed])
    assert note.plain == "! 1M/2P disturbed while measured: other processes used 0.9 cores (so far)"
    summary = {"configs": [{"config_id": "a", "validity": {"disturbed": False, "reasons": []}},
                           {"config_id": "b", "validity": {"disturbed": True, "reasons": ["GPU 1: Xid 79", "x"]}},
                           {"config_id": "c"}]}
    assert sections.text_of("disturbed", Summary.from_json(summary)).splitlines()[1:] == ["b: GPU 1: Xid 79; x"]
    assert sections.text_of("disturbed", Summary.from_json({"configs": summary["configs"][::2]})) == ""


def test_a_finished_run_viewed_after_the_fact_carries_no_live_mark():
    """``ddptop view`` of a run that ended: no configuration ran while the view watched, so none carries the
    live view's mark (its summary says whether the node was quiet); the next frame says the same."""
    from ddptop.control import RecordedControl

    control = RecordedControl.of(os.path.join(REPO, "tests", "data", "recorded-run"))
    first = control.take_snapshot().session
    assert [c.validity for c in first.configs] == [None, None, None]
    assert [c.validity for c in control.take_snapshot().session.configs] == [None, None, None]


# -- a new launch's rank, before its hello is read ------------------------------------------------------------------

H100_SPREAD = os.path.join(REPO, "tests", "data", "h100", "spread-second-machine")


def test_the_h100_s_own_ranks_listed_before_their_hello_are_not_strangers():
    """On a real H100 NVML listed each new launch's rank on the GPU up to 0.6 s before its hello was read, and
    those records call it "not a rank" (PIDs 567, 640, 713: the ranks of launches 2, 3 and 4). Judged with the
    PIDs the run's hellos gave, the configuration's whole window is quiet; without them it is what it was."""
    from ddptop.run.session import Session

    session = Session.load(H100_SPREAD)
    assert session.rank_pids() == {494, 567, 640, 713}
    records, malformed = timeline.read_timeline(os.path.join(H100_SPREAD, "telemetry.jsonl"))
    assert malformed == 0
    start, end = records[0]["t"], records[-1]["t"]
    for launch in ("02-n1-nccl", "03-n1-nccl", "04-n1-nccl"):
        unaware = validity.window_validity(records, start, end, launch, timeline.timeline_info(records))
        assert unaware["disturbed"] and any("not a rank" in reason for reason in unaware["reasons"])
        judged = validity.window_validity(records, start, end, launch, timeline.timeline_info(records),
                                          session.rank_pids())
        assert not judged["disturbed"], judged["reasons"]
        assert judged["foreign_gpu_processes"] == []


def test_a_gpu_process_of_ddptops_own_process_tree_is_never_foreign(tmp_path):
    """A child of this process (as a launch's rank is) on GPU 0 before any rank is known: marked as the launch's,
    not as a stranger, and the window stays quiet; a process outside the tree is still a stranger."""
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        fake = FakeNvml(steady=True)
        fake.attach_process(0, child.pid, 1 << 30)
        fake.attach_process(1, 4242424, 1 << 30)
        path = tmp_path / "telemetry.jsonl"
        monitor = Monitor(0.05, str(path), fake, lambda: [])
        for _ in range(3):
            monitor.sample_once()
        monitor.stop()
    finally:
        child.kill()
        child.wait()
    records, _ = timeline.read_timeline(str(path))
    processes = {p["pid"]: p for g in records[-1]["gpus"] for p in g.get("processes") or ()}
    assert processes[child.pid] == {"pid": child.pid, "gpu_memory": 1 << 30, "launch": True}
    assert processes[4242424]["foreign"] is True
    for record in records:
        record["host"] = dict(QUIET_HOST)
        record["ranks"] = [{"rank": 0, "pid": child.pid, "launch": "L", "gpu": 0}]  # its hello, read later
    found = validity.window_validity(records, records[0]["t"], records[-1]["t"], "L")
    assert not found["disturbed"] and found["foreign_gpu_processes"] == []


# -- the GPUs' state in each launch ---------------------------------------------------------------------------------

H100_DEFAULT = os.path.join(REPO, "tests", "data", "h100", "default")


def _rebuilt(run_dir: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "ddptop", "report", run_dir, "--rebuild", "--format", "json"],
                          capture_output=True, text=True, timeout=300, cwd=REPO)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_each_launch_records_its_gpus_state_and_one_off_the_steady_state_is_flagged(tmp_path):
    """The H100's default plan: three launches of each configuration, every one at 1980 MHz while busy with no
    clock limit, 41-45 °C: none flagged, so the 25% spread between DDP's launches is not the GPU's state. The
    same run with a power cap and a lower clock written into the first launch's window: that launch is flagged."""
    run = tmp_path / "default"
    shutil.copytree(H100_DEFAULT, run)
    summary = _rebuilt(str(run))
    for entry in summary["configs"]:
        assert [u["launch"] for u in entry["launches"]] == ["01-n1-nccl", "02-n1-nccl", "03-n1-nccl"]
        for unit in entry["launches"]:
            state = unit["gpu_state"]["0"]
            assert state["sm_clock_busy_mhz"] == 1980 and state["limits"] == {} and unit["unsteady"] == []
            assert 40 <= state["temp_c"] <= 46 and state["readings"] >= 5 and state["power_w"] > 250
    ddp = next(e for e in summary["configs"] if e["mode"] == "ddp")
    first = ddp["launches"][0]
    start, end = _window(run, "01-n1-nccl", ddp["config_id"])
    lines = (run / "telemetry.jsonl").read_text().splitlines()
    with open(run / "telemetry.jsonl", "w", encoding="utf-8") as handle:
        for line in lines:
            record = json.loads(line)
            if start < record["t"] <= end:
                record["gpus"][0].update(throttle=["power cap"], sm_clock_mhz=1600)
            handle.write(json.dumps(record) + "\n")
    again = next(e for e in _rebuilt(str(run))["configs"] if e["mode"] == "ddp")
    flagged = again["launches"][0]
    assert flagged["launch"] == first["launch"] and flagged["gpu_state"]["0"]["limits"] == {"power cap": 1.0}
    assert flagged["unsteady"] == ["GPU 0: power cap seen",
                                   "GPU 0: SM clock 1600 MHz while busy, 1980 MHz in another launch"]
    assert [u["unsteady"] for u in again["launches"][1:]] == [[], []]
    text = subprocess.run([sys.executable, "-m", "ddptop", "report", str(run)], capture_output=True, text=True,
                          timeout=300, cwd=REPO).stdout
    table = text[text.index("Launch to launch"):].split("\n\n")[0]
    assert "GPU busy clock, power, temp" in table
    rows = [line for line in table.splitlines() if "-n1-nccl " in line]
    assert len(rows) == 5 and all(" 1980 MHz " in row and row.endswith(" yes") for row in rows)  # the flagged
    # launch held a clock limit, so it was also disturbed: its steps are not used and it has no row, only its note
    assert ("1M/1G resnet50 bs32 01-n1-nccl: GPU 0: power cap seen; GPU 0: SM clock 1600 MHz while busy, "
            "1980 MHz in another launch") in table


def _window(run, launch: str, config_id: str) -> tuple[float, float]:
    """A configuration's measured window in one launch: its config_end's time less its measured seconds."""
    path = run / "launches" / launch / "events" / "rank-0.jsonl"
    end = next(e for e in map(json.loads, path.read_text().splitlines())
               if e["type"] == "config_end" and e["config_id"] == config_id)
    return end["t"] - end["measure_s"], end["t"]


def test_unsteady_launches_compares_each_launch_with_the_others():
    def state(clock, temp, limits=None):
        return {"0": {"sm_clock_busy_mhz": clock, "temp_c": temp, "limits": limits or {}}}

    assert validity.unsteady_launches({"a": state(1980, 40), "b": state(1950, 45)}) == {"a": [], "b": []}
    found = validity.unsteady_launches({"a": state(1980, 40), "b": state(1700, 55, {"HW thermal": 0.2}),
                                        "c": state(1980, 41, {"sync boost": 1.0})})
    assert found == {"a": [], "c": [], "b": ["GPU 0: HW thermal seen",
                                             "GPU 0: SM clock 1700 MHz while busy, 1980 MHz in another launch",
                                             "GPU 0: 55 °C, 40 °C in another launch"]}
    assert validity.unsteady_launches({"only": state(1500, 80)}) == {"only": []}  # nothing to compare with


@pytest.mark.parametrize("status", list(Status))
def test_every_status_and_its_mark_fit_the_status_cell_whole(status):
    """Each word a status cell can show, with the disturbed node's mark where it takes one, and a queued
    configuration between two of up to 99 launches: never cut (the notes say what the mark means)."""
    from ddptop.tui.panels.configs import CONFIG_COLUMNS, SCRIPT_COLUMNS, status_text

    base = dict(config_id="c", label="1M/2P", model="resnet18", mode="ddp", batch_size=16, backend="gloo",
                status=status.value, reason=None, progress=0.5, sample_count=3, revision=1, stats=None)
    shown = [status_text(ConfigSnapshot(**base, validity=ValiditySoFar(True, ("other processes used 0.9 cores",))))]
    shown.append(status_text(ConfigSnapshot(**base, analysis_phase="trace")))
    shown.append(status_text(ConfigSnapshot(**base, launches_measured=98, launches_planned=99), measuring=False))
    for columns in (CONFIG_COLUMNS, SCRIPT_COLUMNS):
        width = next(c[2] for c in columns if c[0] == "status")
        assert all(len(text.plain) <= width for text in shown), ([t.plain for t in shown], width)


def test_a_median_known_only_to_thousands_of_percent_is_shown_whole_in_its_cell():
    from ddptop.tui.panels.configs import CONFIG_COLUMNS, _precision

    width = next(c[2] for c in CONFIG_COLUMNS if c[0] == "prec")
    assert [_precision(x) for x in (0.0123, 0.9994, 25.444, 999.9)] == ["±1.2%", "±99.9%", "±2544%", "±99990%"]
    assert all(len(_precision(x)) <= width for x in (0.0123, 0.9994, 25.444, 999.9))
