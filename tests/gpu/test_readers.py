"""The GPU suite's own code, run here without a GPU: its skip decision, its commands against ddptop's parser and
plan, and every reader its assertions use (``tests/gpu/support.py``) against the files of a real run on one
H100 80GB HBM3 (``tests/data/h100``: the default plan, a tune, a capped batch sweep, the driver report,
nvidia-smi's readings beside the default plan; ``tests/gpu/data``: the GPT kernel with ZeRO-1 and FSDP2 in bf16,
and in fp16). Each reader passes what held there and reports what did not, so the suite's assertions are
known to pass and to fail on real output before a GPU runs them."""

from __future__ import annotations

import asyncio
import copy
import json
import os
import subprocess
import sys

import pytest

from ddptop.doctor import CHECK_NAMES, parse_topo_matrix
from ddptop.run.options import PlanOptions
from ddptop.run.plan import build_plan
from ddptop.telemetry.inventory import GpuInfo, Inventory
from tests.conftest import REPO, ddptop
from tests.gpu import commands
from tests.gpu.support import (
    FAKE_ENV,
    LOOP_CHECK,
    METRICS,
    MIN_BUSY,
    MUST_BE_OK,
    P2P_CHECK,
    PANEL_COLUMNS,
    TOPOLOGY_CHECK,
    GpuNode,
    ceiling_problems,
    compare_with_smi,
    compile_problems,
    config_dtypes,
    ddptop_readings,
    decide,
    doctor_problems,
    gpm_readings,
    gpt_attention_problems,
    gpu_node,
    gpus_replay_problems,
    trace_problems,
    oom_sweep_problems,
    panel_gib,
    panel_name,
    panel_percent,
    panel_row_busy,
    panel_rows,
    parse_smi_csv,
    smi_problems,
    smi_topo_cells,
    strategy_problems,
    telemetry_records,
    topo_cell_problems,
    topo_replay_problems,
    transformer_flops_problems,
)

H100 = os.path.join(REPO, "tests", "data", "h100")
GPU_DATA = os.path.join(REPO, "tests", "gpu", "data")
SMI_DATA = os.path.join(REPO, "tests", "data", "nvidia-smi")
REPORT = os.path.join(H100, "h100-driver-report.json")


def load(*parts: str) -> dict:
    with open(os.path.join(*parts), encoding="utf-8") as handle:
        return json.load(handle)


def summary(name: str) -> dict:
    """A recorded H100 run's summary as this ddptop writes it (read and written again: estimate records, the
    current schema), then read as the GPU suite reads its own runs (``Finished.figures``)."""
    from ddptop.report.schema import Summary
    from tests.intervals_helpers import flat_shape

    return flat_shape(json.loads(json.dumps(Summary.from_json(load(H100, name, "summary.json")).to_json())))


GPT = os.path.join(GPU_DATA, "gpt-125m-bf16-zero1-fsdp2.summary.json")  # the gpt run on the H100
FP16 = os.path.join(GPU_DATA, "gpt-20m-fp16-fsdp2.summary.json")  # the fp16 run on the H100


# -- whether the suite runs ----------------------------------------------------------------------------------------

def never_asked():
    raise AssertionError("torch asked where NVML already decided")


def h100s(count: int) -> Inventory:
    return Inventory(gpus=tuple(GpuInfo(i, "NVIDIA H100 80GB HBM3", f"GPU-{i:08d}", 85520809984) for i in range(count)),
                     driver="580.159.04", all_gpu_count=count)


def test_the_suite_runs_on_a_real_gpu_that_torch_sees_and_says_why_not_elsewhere():
    fake = decide("dgx1", never_asked, never_asked)
    assert fake.startswith(f"{FAKE_ENV}=dgx1 is set: the GPU suite reads the real driver only")
    missing = decide(None, lambda: Inventory(problem="NVML unavailable: NVML Shared Library Not Found"), never_asked)
    assert missing == "no NVIDIA GPU: NVML unavailable: NVML Shared Library Not Found"
    assert decide(None, lambda: Inventory(driver="580.159.04"), never_asked) == "no NVIDIA GPU: NVML lists no GPU"
    cpu_torch = decide(None, lambda: h100s(1), lambda: {"torch": "2.11.0+cpu", "cuda": False, "count": 0})
    assert "torch 2.11.0+cpu cannot use the GPU: torch.cuda.is_available() is False" in cpu_torch
    assert decide(None, lambda: h100s(1), lambda: "No module named 'torch'") == (
        "torch could not be asked about CUDA: No module named 'torch'")
    one = decide(None, lambda: h100s(1), lambda: {"torch": "2.11.0+cu130", "cuda": True, "count": 1,
                                                   "capability": [9, 0]})
    assert isinstance(one, GpuNode) and one.capability == (9, 0) and one.world_sizes == [1]
    for count, sizes in ((2, [1, 2]), (6, [1, 2, 4, 6]), (8, [1, 2, 4, 8])):
        node = decide(None, lambda: h100s(count), lambda: {"torch": "t", "cuda": True, "count": count,
                                                           "capability": [9, 0]})
        assert node.world_sizes == sizes


def test_here_every_test_of_the_suite_is_skipped_with_the_reason():
    """The suite's one command on this machine: every test collected, every one skipped with the same reason."""
    reason = gpu_node()
    if not isinstance(reason, str):
        pytest.skip("this machine runs the GPU suite itself")
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "gpu", "-n", "0", "-rs", "-q", "-p",
                           "no:cacheprovider", "tests/gpu"], cwd=REPO, capture_output=True, text=True, timeout=300)
    lines = done.stdout.splitlines()
    skipped = [line for line in lines if line.startswith("SKIPPED [1] tests/gpu/test_gpu_suite.py:")]
    assert len(skipped) == 16 and all(line.endswith(": " + reason) for line in skipped), done.stdout[-3000:]
    assert done.returncode == 0 and lines[-1].startswith("16 skipped"), done.stdout[-3000:]


# -- the suite's commands: ddptop's own parser and plan -------------------------------------------------------------

def plan_of(command: str, arguments: list[str], gpus: int):
    from ddptop.cli import parse_arguments
    from ddptop.run.options import merge_plan_options

    args = parse_arguments([command, "--headless", "--out", "x", *arguments])  # a script after --, as ddptop takes it
    if command == "tune":
        args.tune = True
    return build_plan(merge_plan_options({}, args), h100s(gpus), cpu_count=16)


@pytest.mark.parametrize("gpus", [1, 8])
def test_the_suites_runs_are_valid_plans_on_a_node_of_one_and_eight_gpus(gpus):
    default = build_plan(PlanOptions(**commands.DEFAULT_PLAN), h100s(gpus), cpu_count=16)
    assert default.world_sizes == ((1,) if gpus == 1 else (1, 2, 4, 8)) and default.models == ("resnet50",)
    assert (default.backends, default.launches_per_config, default.comm_iters, default.collectives) == (
        ("nccl",), 1, 5, ("allreduce",))
    gpt = plan_of("run", commands.gpt_run(gpus), gpus)
    assert gpt.world_sizes == (gpus,) and gpt.strategies == ("ddp", "zero1", "fsdp2") and gpt.amp == "bf16"
    assert gpt.seq_lens == {"gpt-tiny": 256} and not gpt.baseline and gpt.collectives == ()
    capped = plan_of("run", commands.CAPPED_SWEEP, gpus)
    assert capped.batch_sizes[:3] == (32, 64, 128) and capped.memory_cap_mb == commands.CAP_MB
    assert (capped.amp, capped.channels_last, capped.world_sizes) == ("fp16", True, (1,))
    tune = plan_of("tune", commands.TUNE, gpus)
    assert tune.variants == ("default", "amp_bf16", "compile") and tune.world_sizes == (gpus,)
    assert tune.amp is None and tune.bucket_cap_mb == (1.0,) and tune.launches_per_config == 1
    workloads = plan_of("run", commands.workloads_run(gpus), gpus)
    assert workloads.models == (commands.WORKLOAD, commands.HF_DECODER) and workloads.world_sizes == (gpus,)
    assert workloads.strategies == ("ddp", "fsdp2") and workloads.seq_lens[commands.HF_DECODER] == 128
    threads = plan_of("run", commands.threads_devices_run(16), gpus)
    assert (threads.devices, threads.cpu_grid, threads.world_sizes) == (
        ("cpu", "cuda"), ((1, 1), (1, 2), (1, 4), (1, 8), (1, 16)), (1,))
    assert [launch.launch_key for launch in threads.launches()] == ["n1-nccl"] + [
        f"n1-gloo-cpu-t{t}" for t in (1, 2, 4, 8, 16)]
    script = plan_of("run", commands.script_run(), gpus)
    assert script.script[:2] == (commands.TRAIN_SCRIPT, "--workers") and script.world_sizes == (1,)
    assert (script.warmup, script.iters, script.backends, script.baseline) == (
        commands.SCRIPT_WARMUP, commands.SCRIPT_ITERS, ("nccl",), False)
    for plan in (gpt, capped, tune, workloads, threads, script):
        assert plan.max_time_per_config == 2 and plan.launches_per_config == 1 and plan.device == "cuda"


# -- NVML against nvidia-smi -----------------------------------------------------------------------------------------

def h100_readings():
    records = telemetry_records(os.path.join(H100, "default", "telemetry.jsonl"))
    with open(os.path.join(H100, "nvidia-smi-during-default.csv"), encoding="utf-8") as handle:
        return records, parse_smi_csv(handle.read())


def test_nvml_against_nvidia_smi_holds_on_the_h100s_readings_and_fails_on_wrong_ones():
    records, smi = h100_readings()
    assert len(smi) == 207 and smi[0] == {"t": 1795721059.898, "index": 0, "util": 0.0, "mem_used_mib": 0.0,
                                          "power_w": 121.76, "sm_clock_mhz": 1980.0}
    readings = ddptop_readings(records)
    comparison = compare_with_smi(readings, smi)
    assert comparison["matched"] == 102 and comparison["busy"] >= MIN_BUSY
    assert smi_problems(comparison) == []
    assert gpm_readings(records) > 0

    doubled = [dict(r, mem_used_mib=None if r["mem_used_mib"] is None else 2 * r["mem_used_mib"]) for r in readings]
    assert [p.split(":")[0] for p in smi_problems(compare_with_smi(doubled, smi))] == ["mem_used_mib"] * 2
    late = [dict(r, t=r["t"] + 1.0) for r in readings]  # one second off: matched to the wrong instants
    assert [p.split(":")[0] for p in smi_problems(compare_with_smi(late, smi))] == ["mem_used_mib", "power_w"]
    other = [dict(r, index=1) for r in readings]  # another GPU's readings
    assert smi_problems(compare_with_smi(other, smi))[0].startswith("only 0 of 102 ddptop readings")
    lost = [dict(r, power_w=None) for r in readings]
    assert any(p.startswith("power_w: 0 of 102") for p in smi_problems(compare_with_smi(lost, smi)))


def test_nvidia_smi_without_header_or_units_with_an_index_and_missing_values():
    text = ("2026/11/26 19:24:48.921, 0, 55, 4947, 325.59, 1980\n"
            "2026/11/26 19:24:48.921, 1, [N/A], 0, [N/A], 1410\n"
            "Failed to initialize NVML: Unknown Error\n")
    assert parse_smi_csv(text) == [
        {"t": 1795721088.921, "index": 0, "util": 55.0, "mem_used_mib": 4947.0, "power_w": 325.59, "sm_clock_mhz": 1980.0},
        {"t": 1795721088.921, "index": 1, "util": None, "mem_used_mib": 0.0, "power_w": None, "sm_clock_mhz": 1410.0}]
    assert set(METRICS) == {"util", "mem_used_mib", "power_w", "sm_clock_mhz"}


# -- summary.json --------------------------------------------------------------------------------------------------

def test_ceilings_hold_on_the_h100s_runs_but_for_bf16_met_only_through_a_variant():
    for name in ("default", "oom"):
        assert ceiling_problems(summary(name)) == []
    assert ceiling_problems(load(GPT)) == [] and ceiling_problems(load(FP16)) == []
    tune = summary("tune")
    assert ceiling_problems(tune) == [
        "resnet18/ddp/bs128/n1/nccl/amp_bf16: no measured ceiling in bf16 (measured: fp32, tf32); mfu_ceiling None; "
        "no flops.ceiling"]
    assert config_dtypes(tune["configs"][0]) == {"fp32", "tf32"}
    assert {v: config_dtypes(c) for v, c in ((c["variant"], c) for c in tune["configs"])}["amp_bf16"] == {"bf16"}


def test_transformer_flops_are_6pt_plus_attention_within_1_percent_on_the_h100():
    assert transformer_flops_problems(load(GPT)) == [] and transformer_flops_problems(load(FP16)) == []
    # gpt-125m was 0.08% off, gpt-20m 0.17%: a tolerance of 0.05% catches both
    tight = transformer_flops_problems(load(GPT), tolerance=0.0005)
    assert len(tight) == 4 and all("beyond 0%" in line for line in tight)
    assert transformer_flops_problems(summary("default")) == ["no measured transformer configuration"]
    wrong = copy.deepcopy(load(FP16))
    wrong["configs"][1]["stats"]["tok_sec_total"]["p50"] *= 2
    assert transformer_flops_problems(wrong) == [
        f"gpt-20m/ddp/bs16/n1/nccl: tokens/s {wrong['configs'][1]['stats']['tok_sec_total']['p50']} is not "
        f"examples/s {wrong['configs'][1]['stats']['ex_sec_total']['p50']} x 512"]


def test_strategies_and_their_allocator_peaks_on_the_h100():
    assert strategy_problems(load(GPT)) == []
    assert strategy_problems(load(FP16), wanted=("ddp", "fsdp2")) == []
    assert strategy_problems(load(FP16)) == ["strategies ['ddp', 'fsdp2'], ['ddp', 'fsdp2', 'zero1'] wanted"]
    counted = copy.deepcopy(load(GPT))
    counted["strategies"][0]["rows"][2]["memory_kind"] = "counted"
    assert strategy_problems(counted) == ["fsdp2: memory kind 'counted', the allocator's peak wanted"]
    assert strategy_problems(summary("default")) == ["0 strategy tables, one wanted"]


def test_the_h100s_out_of_memory_ended_its_batch_sweep():
    oom = summary("oom")
    assert oom_sweep_problems(oom, cap_mb=6000) == []
    # batch 64 held 5.63 GiB (5767 MiB): a 5000 MiB cap it would not have kept
    assert oom_sweep_problems(oom, cap_mb=5000) == [
        "batch 64: allocator peak 6046751744 bytes, not within the 5000 MiB cap"]
    assert oom_sweep_problems(summary("default"), cap_mb=6000)[-1].startswith("the sweep did not end at an out of memory")
    ran_on = copy.deepcopy(oom)
    ran_on["configs"][3]["status"] = "ok"
    assert "batches after the out of memory ran" in oom_sweep_problems(ran_on, cap_mb=6000)[0]


def test_compile_on_the_h100s_tune():
    tune = summary("tune")
    assert compile_problems(tune) == []
    assert compile_problems(tune, min_ddp_buckets=3) == ["2 DDP buckets, at least 3 wanted"]
    eager = copy.deepcopy(tune)
    next(r for r in eager["tuning"][0]["rows"] if r["variant"] == "compile")["compiled"]["first_step_s"] = [33.0]
    assert compile_problems(eager) == ["first steps [33.0] for 2 launch(es)"]
    assert compile_problems(summary("default")) == ["0 tuning tables, one wanted"]


def test_a_fused_attention_kernel_is_told_from_the_math_fallback():
    flash = {"aten._scaled_dot_product_flash_attention": 10, "aten._scaled_dot_product_flash_attention_backward": 25,
             "aten.mm": 100, "aten.addmm": 50}
    assert gpt_attention_problems({"ops": flash, "total": 185}) == []
    cudnn = {"aten._scaled_dot_product_cudnn_attention": 10, "aten._scaled_dot_product_cudnn_attention_backward": 25}
    assert gpt_attention_problems({"ops": cudnn, "total": 35}) == []
    math_path = {"aten.bmm": 30, "aten.mm": 100}
    assert [p.split(" ")[0] for p in gpt_attention_problems({"ops": math_path, "total": 130})] == ["fused", "bmm"]


# -- doctor --------------------------------------------------------------------------------------------------------

def test_the_doctor_reader_finds_the_h100s_skipped_topology_check_and_nothing_else():
    checks = load(REPORT)["checks"]
    assert set(MUST_BE_OK) | {LOOP_CHECK, P2P_CHECK} <= set(CHECK_NAMES)
    assert doctor_problems(checks, cuda_count=1) == [
        "topo -m vs ddptop topo: skipped, not ok (nvidia-smi topo -m printed no matrix (NV#  = Connection "
        "traversing a bonded set of # NVLinks))"]
    compared = [dict(c, status="ok", detail="1 cells agree", data={"cells": 1, "mismatches": []})
                if c["name"] == TOPOLOGY_CHECK else c for c in checks]
    assert doctor_problems(compared, cuda_count=1) == []
    assert [p.split(":")[0] for p in doctor_problems(compared, cuda_count=2)] == [TOPOLOGY_CHECK, P2P_CHECK]
    slow = [dict(c, data=dict(c["data"], ratio=1.4)) if c["name"] == LOOP_CHECK else c for c in compared]
    assert doctor_problems(slow, cuda_count=1)[0].startswith(f"{LOOP_CHECK}: ok, ratio 1.4")


@pytest.mark.parametrize("node", ["h100-driver-report", "dgx1", "dgx-a100-nps4", "h100-pcie-nps4"])
def test_the_suites_topo_m_parser_reads_what_ddptop_reads(node):
    with open(os.path.join(SMI_DATA, node, "topo-m.txt"), encoding="utf-8") as handle:
        text = handle.read()
    assert smi_topo_cells(text) == parse_topo_matrix(text)


def test_nvidia_smi_topo_m_against_ddptop_topo_cell_by_cell():
    cells = smi_topo_cells(load(REPORT)["nvidia_smi"]["topo_m"])  # the H100's own bytes, underlined header
    assert cells == {("GPU0", "GPU0"): "X"}
    assert topo_cell_problems(cells, load(H100, "topo.json")) == []
    from ddptop.telemetry.fake.nvml import FakeNvml
    from ddptop.telemetry.topology import read_topology

    with open(os.path.join(SMI_DATA, "dgx1", "topo-m.txt"), encoding="utf-8") as handle:
        published = smi_topo_cells(handle.read())  # the DGX-1 of PyTorch's DDP benchmark README
    dgx1 = read_topology(FakeNvml("dgx1")).to_json()
    assert len(published) == 144 and topo_cell_problems(published, dgx1) == []
    dgx1["matrix"]["GPU0"]["GPU3"] = "NV1"
    assert topo_cell_problems(published, dgx1) == ["GPU0/GPU3: nvidia-smi NV2, ddptop NV1"]
    assert topo_cell_problems({}, load(H100, "topo.json")) == ["GPU0/GPU0: ddptop X, nothing in nvidia-smi topo -m"]


def test_the_h100s_driver_report_replays_as_its_gpus_and_topology():
    replay = {"DDPTOP_FAKE_NVML": REPORT}
    topo = ddptop("topo", "--json", env=replay)
    gpus = ddptop("gpus", "--json", "--interval", "0.05", env=replay)
    assert topo.returncode == 0 and gpus.returncode == 0, topo.stderr + gpus.stderr
    live_topo, replayed_topo = load(H100, "topo.json"), json.loads(topo.stdout)
    assert topo_replay_problems(live_topo, replayed_topo, same_host=False) == []
    if os.cpu_count() != 16:  # another machine's CPUs than the H100's 16: said, where the replay runs beside it
        assert topo_replay_problems(live_topo, replayed_topo, same_host=True)[0].startswith("cpu: live {")
    live_gpus = load(H100, "gpus.json")
    assert gpus_replay_problems(live_gpus, json.loads(gpus.stdout)) == []
    other = copy.deepcopy(json.loads(gpus.stdout))
    other["gpus"][0]["power_limit_w"] = 350.0
    assert gpus_replay_problems(live_gpus, other) == ["GPU 0 power_limit_w: live 700.0, replayed 350.0"]
    assert topo_replay_problems(live_topo, live_topo)[0] == "fake: live False, replayed False"


# -- the live view's GPU panel -------------------------------------------------------------------------------------

def test_the_gpu_panel_reader_on_the_recorded_runs_view_and_the_h100s_cells():
    """The reader the suite uses on the live view's ``#gpus`` table, on the recorded run of 8 simulated GPUs
    under Pilot; and the cells the H100 showed during a real sweep (its 160x50 screenshot)."""
    from ddptop.tui.app import DdptopApp
    from ddptop.tui.panels.gpus import GPU_COLUMNS
    from tests.tui_helpers import first_frame

    assert set(PANEL_COLUMNS) <= {column[0] for column in GPU_COLUMNS}

    async def rows():
        app = DdptopApp.for_recorded(os.path.join("tests", "data", "recorded-run"))
        async with app.run_test(size=(160, 50)) as pilot:
            await first_frame(pilot)
            return panel_rows(app.query_one("#gpus"))

    cwd = os.getcwd()
    os.chdir(REPO)
    try:
        recorded = asyncio.run(rows())
    finally:
        os.chdir(cwd)
    assert sorted(recorded, key=int) == [str(i) for i in range(8)]
    assert all(cells["name"].endswith("(FAKE)") and panel_gib(cells["memgib"]) for cells in recorded.values())
    assert panel_percent(recorded["0"]["util"]) == 76 and panel_gib(recorded["0"]["memgib"]) == (7.1, 15.5)
    h100 = {"name": "H100 80GB HBM3", "util": "███████▎  91%", "memgib": "7.9/79.6", "rank": "0"}
    assert panel_name("NVIDIA H100 80GB HBM3") == h100["name"] and panel_row_busy(h100)
    assert not panel_row_busy(dict(h100, rank="-")) and not panel_row_busy(dict(h100, util="        0%"))
    assert not panel_row_busy(dict(h100, memgib="0.0/79.6"))


# -- the GPU tests themselves, on the H100's files ----------------------------------------------------------------

def test_the_gpu_tests_own_assertions_pass_on_what_held_on_the_h100(monkeypatch, tmp_path):
    """The GPU suite's test functions, run on the H100's recorded run in the suite's place (the node it saw:
    one GPU of compute capability 9.0): NVML against nvidia-smi on the default plan's readings, the default
    plan at N=1, the GPU panel with the cells the live view showed during a real sweep there, ZeRO-1 and FSDP2
    with their allocator peaks, and torch.compile's first steps and splits with the report ddptop prints of that
    tune."""
    import shutil

    from tests.conftest import Finished
    from tests.gpu import test_gpu_suite as suite

    monkeypatch.setattr(suite, "NODE", GpuNode(nvml_gpus=1, cuda_count=1, capability=(9, 0), torch="2.11.0+cu130",
                                               nvidia_smi="/usr/bin/nvidia-smi"))
    gpu = load(H100, "gpus.json")["gpus"][0]
    with open(os.path.join(H100, "nvidia-smi-during-default.csv"), encoding="utf-8") as handle:
        smi = handle.read()
    default = summary("default")
    shown = {"name": "H100 80GB HBM3", "util": "███████▎  91%", "memgib": "7.9/79.6", "rank": "0"}
    seen = {"exit": 0, "busy": {"0": shown}, "last": {"0": shown},
            "statuses": {c["config_id"]: "ok" for c in default["configs"]}}
    live = suite.LiveDefault(os.path.join(H100, "default"), default, seen, smi,
                             {0: {"name": gpu["name"], "memory_total": gpu["memory_total"]}})
    suite.test_nvml_readings_agree_with_nvidia_smi_taken_at_the_same_moments(live)
    suite.test_the_default_plan_runs_with_nccl_at_every_world_size_of_the_node(live)
    suite.test_the_live_view_shows_the_real_gpus_in_its_gpu_panel(live)

    def finished(source: str, stdout: str = "") -> Finished:
        run_dir = tmp_path / os.path.basename(os.path.dirname(source) if source.endswith("/summary.json") else source)
        run_dir.mkdir()
        shutil.copy(source, run_dir / "summary.json")
        return Finished(0, stdout, "", str(run_dir))

    suite.test_zero1_and_fsdp2_run_beside_ddp_with_their_allocator_peaks((finished(GPT), {}))
    report = ddptop("report", os.path.join(H100, "tune"))
    assert report.returncode == 0, report.stderr
    suite.test_tune_measures_torch_compile_with_its_first_step_and_bucket_splits(
        finished(os.path.join(H100, "tune", "summary.json"), report.stdout))


def test_the_trace_reader_holds_where_the_trace_agrees_with_nvml_and_fails_where_it_cannot(tmp_path):
    """The GPU test's reader on traces written by hand in Kineto's format (tests/test_traces.py): one whose
    idle share NVML confirms passes; an idle share NVML contradicts, a CUDA trace without kernels, and a
    missing file each fail, said in one line."""
    from tests.test_traces import gpu_entry, kineto_trace

    entry = gpu_entry(kineto_trace(3, 4, 100.0, 60.0), config_id="c")  # 43% idle in every step
    entry["telemetry"] = {"gpu_idle": {"share": 0.40}}
    path = tmp_path / entry["trace"]["files"][0]["path"]
    path.parent.mkdir(parents=True)
    path.write_bytes(b"")
    assert trace_problems(entry, str(tmp_path)) == []
    far = copy.deepcopy(entry)
    far["telemetry"]["gpu_idle"]["share"] = 0.05
    assert trace_problems(far, str(tmp_path)) == [
        "c: the trace's GPU idle 43% against NVML's 5%, more than 15% of the step apart"]
    empty = gpu_entry({"traceEvents": [e for e in kineto_trace(3, 4, 100.0, 60.0)["traceEvents"]
                                      if e["cat"] == "user_annotation"]}, config_id="c")
    assert trace_problems(empty, str(tmp_path))[0].startswith("c: no GPU kernel in the trace")
    assert trace_problems(entry, str(tmp_path / "elsewhere"))[0].endswith("rank0.pt.trace.json.gz missing")
    # no NVML share: a window shorter than NVML's sample period has no reading that counts; a longer one fails
    short = copy.deepcopy(entry)
    short["telemetry"] = {"gpu_idle": None, "window_s": 0.6}
    assert trace_problems(short, str(tmp_path)) == []
    short["telemetry"]["window_s"] = 3.0
    assert trace_problems(short, str(tmp_path)) == ["c: no NVML idle share to set the trace against (measured 3.0 s)"]
    slowed = copy.deepcopy(far)  # traced at twice the measured pace: its idle is the profiler's, not compared
    slowed["trace"]["cost_ratio"] = 2.0
    assert trace_problems(slowed, str(tmp_path)) == []
