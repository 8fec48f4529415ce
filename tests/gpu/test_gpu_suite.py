"""The GPU suite: what ddptop does on a real NVIDIA GPU, asserted on its own files and screens.

    python3 -m pytest -m gpu -n 0

(every test marked gpu: these sixteen and the real-NVML sampler test of tests/test_telemetry.py). On a node
where NVML lists a GPU and torch sees CUDA (never under the simulated NVML: ``DDPTOP_FAKE_NVML`` must be
unset), an estimated 5.5 minutes on one H100 (docs/testing.md); anywhere else every test is skipped, with the
reason (decided once, when the module is collected). Nine runs serve the sixteen tests, each made once, by the
first test that needs it: the default plan under Textual's Pilot with nvidia-smi sampling beside it,
``ddptop doctor --report`` and the report's replay, the GPT kernel with ZeRO-1 and FSDP2, a capped fp16 batch
sweep that runs out of memory, a workload and a Hugging Face model, ``ddptop tune`` with torch.compile, and a
thread sweep on the CPU beside the GPU (--threads, --devices cpu,cuda), and a user's training script
(``ddptop run -- examples/train.py``). What each run is:
``tests/gpu/commands.py``. The readers of what the runs wrote: ``tests/gpu/support.py``, checked without a GPU
against the files of a real H100 run by ``tests/gpu/test_readers.py``. The tests run in this file's order;
docs/testing.md has the time of each.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Any

import pytest

from ddptop.errors import EXIT_OK
from tests.conftest import REPO, Finished, ddptop, processes_mentioning, run_sweep
from tests.gpu import commands
from tests.intervals_helpers import flat_shape
from tests.gpu.support import (
    GpuNode,
    ceiling_problems,
    compare_with_smi,
    compile_problems,
    config_dtypes,
    ddptop_readings,
    doctor_problems,
    gpm_readings,
    gpt_attention_problems,
    gpu_node,
    gpus_replay_problems,
    ok_configs,
    oom_sweep_problems,
    panel_gib,
    panel_name,
    panel_percent,
    panel_row_busy,
    panel_rows,
    parse_smi_csv,
    smi_problems,
    smi_topo_cells,
    start_smi_log,
    stop,
    strategy_problems,
    telemetry_records,
    topo_cell_problems,
    topo_replay_problems,
    trace_problems,
    transformer_flops_problems,
)

NODE = gpu_node()
pytestmark = [
    pytest.mark.gpu,
    pytest.mark.slow,  # launches process groups: alone on its worker under the default two (tests/cores.py)
    pytest.mark.skipif(isinstance(NODE, str), reason=NODE if isinstance(NODE, str) else "a GPU node"),
]


def node() -> GpuNode:
    assert isinstance(NODE, GpuNode)
    return NODE


def needs_nvidia_smi() -> str:
    if node().nvidia_smi is None:
        pytest.skip("nvidia-smi is not on PATH: there is nothing to hold ddptop's readings against")
    return node().nvidia_smi


def tail(done: Any) -> str:
    return (done.stdout or "")[-3000:] + (done.stderr or "")[-3000:]


def summary_of(done: Finished) -> dict[str, Any]:
    assert done.returncode == 0, tail(done)
    return done.figures()  # each estimate as its value and its interval beside it, as the readers read figures


def ceiling_dtypes(summary: dict[str, Any]) -> set[str]:
    return {c["dtype"] for c in summary.get("ceilings") or ()}


def nvml_gpus() -> dict[int, dict[str, Any]]:
    """Every GPU's name and memory, from pynvml itself (not through ddptop)."""
    import pynvml

    pynvml.nvmlInit()
    try:
        found = {}
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            found[index] = {"name": name.decode() if isinstance(name, bytes) else name,
                            "memory_total": pynvml.nvmlDeviceGetMemoryInfo(handle).total}
        return found
    finally:
        pynvml.nvmlShutdown()


# -- the default plan, under Pilot, with nvidia-smi beside it ------------------------------------------------------

@dataclass
class LiveDefault:
    run_dir: str
    summary: dict[str, Any]
    seen: dict[str, Any]  # what the live view showed
    smi_text: str | None  # nvidia-smi's readings taken meanwhile
    nvml: dict[int, dict[str, Any]]


async def watch(live: Any) -> dict[str, Any]:
    """The live view of ``live`` at 160x50 until its summary screen: the GPU panel's rows at the first frame
    where a configuration runs and a GPU row shows rank 0 with some load and memory (and the last rows seen, for
    a failure's message), then every configuration's status; q quits."""
    from ddptop.tui.app import DdptopApp, SummaryScreen
    from ddptop.tui.panels import ConfigTable
    from tests.tui_helpers import wait_for

    app = DdptopApp.for_live(live, fps=4)
    seen: dict[str, Any] = {"busy": None, "last": {}}
    async with app.run_test(size=(160, 50)) as pilot:
        configs = app.query_one("#configs", ConfigTable)
        gpus = app.query_one("#gpus")

        def look() -> bool:
            rows = panel_rows(gpus)
            seen["last"] = rows or seen["last"]
            running = any(str(configs.get_cell(key, "status")).split()[:1] == ["running"] for key in configs.rows)
            if running and any(panel_row_busy(cells) for cells in rows.values()):
                seen["busy"] = rows
                return True
            return isinstance(app.screen, SummaryScreen)  # over without such a frame: the test says so

        await wait_for(pilot, look, timeout=300, step=0.25)
        await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen), timeout=300)
        seen["statuses"] = {key: str(configs.get_cell(key, "status")) for key in configs.rows}
        await pilot.press("q")
    seen["exit"] = app.return_value
    return seen


@pytest.fixture(scope="module")
def default_plan(tmp_path_factory) -> LiveDefault:
    from ddptop.live.live_run import create_live_run
    from ddptop.run.plan import PlanOptions

    base = tmp_path_factory.mktemp("default")
    smi_path = str(base / "nvidia-smi.csv")
    gpus = nvml_gpus()
    smi = start_smi_log(node().nvidia_smi, smi_path) if node().nvidia_smi else None
    try:
        live = create_live_run(PlanOptions(**commands.DEFAULT_PLAN), str(base / "run"),
                               telemetry_interval=commands.TELEMETRY_INTERVAL, plots=False)
        try:
            seen = asyncio.run(watch(live))
        finally:  # a view that failed leaves no sweep running on the GPUs under the tests after it (as ddptop run)
            if live.running:
                live.stop()
            live.finish()
    finally:
        if smi is not None:
            stop(smi)
    run_dir = live.session.run_dir
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))
    smi_text = None
    if smi is not None:
        with open(smi_path, encoding="utf-8") as handle:
            smi_text = handle.read()
    return LiveDefault(run_dir, summary, seen, smi_text, gpus)


def test_nvml_readings_agree_with_nvidia_smi_taken_at_the_same_moments(default_plan):
    """ddptop's NVML sampler (every 0.5 s, and every 0.25 s while a configuration's steps run, during the
    default plan) against nvidia-smi's own readings (every 0.5 s beside it): each of ddptop's readings lies between the two nvidia-smi readings of its GPU around it,
    within 10 points of utilisation, 8 MiB of memory used, 20 W of power and 15 MHz of SM clock, for at least
    75%, 90%, 90% and 90% of the readings, and the median difference from the nearest is within the same
    tolerances; at least 10 readings are bracketed, 3 of them with the GPU busy; ddptop's readings are of the
    GPUs nvidia-smi and pynvml list. On Hopper and later, GPM's SM activity is read too."""
    needs_nvidia_smi()
    records = telemetry_records(os.path.join(default_plan.run_dir, "telemetry.jsonl"))
    readings = ddptop_readings(records)
    smi_rows = parse_smi_csv(default_plan.smi_text or "")
    assert smi_rows, f"nvidia-smi printed no reading: {(default_plan.smi_text or '')[:500]!r}"
    assert readings and {r["index"] for r in readings} <= {r["index"] for r in smi_rows} == set(default_plan.nvml)
    comparison = compare_with_smi(readings, smi_rows)
    assert smi_problems(comparison) == [], comparison["metrics"]
    if node().capability >= (9, 0):
        assert gpm_readings(records) > 0, "no GPM reading (SM active) on a GPU of compute capability 9 or later"


def test_the_default_plan_runs_with_nccl_at_every_world_size_of_the_node(default_plan):
    """The default plan as a user gets it (resnet50, batch 32 per GPU, 224 px, NCCL, the no-DDP baseline at
    N=1), one launch per world size: every world size from the visible GPUs (1, 2, 4, ... and their count)
    measured ok on CUDA with NCCL, DDP's compute/communication split measured, gradients reduced across GPUs and
    an allreduce sweep at every N >= 2, NVML and NCCL in the environment, and MFU against a ceiling measured in
    each dtype the steps ran in (tf32 convolutions, fp32 matmuls by torch's defaults)."""
    summary = default_plan.summary
    plan = summary["plan"]
    assert (plan["models"], plan["batch_sizes"], plan["image_size"]) == (["resnet50"], [32], 224)
    assert (plan["device"], plan["backends"], plan["baseline"]) == ("cuda", ["nccl"], True)
    assert plan["world_sizes"] == node().world_sizes
    configs = summary["configs"]
    assert summary["complete"] and summary["status_counts"] == {"ok": len(configs)}, summary["status_counts"]
    ddp = {c["world_size"]: c for c in configs if c["mode"] == "ddp"}
    assert sorted(ddp) == node().world_sizes
    assert [c["world_size"] for c in configs if c["mode"] == "no_ddp"] == [1]
    for config in configs:
        assert (config["backend"], config["device"]) == ("nccl", "cuda")
        assert config["stats"]["sec_iter"]["p50"] > 0 and config["measured_iters"] >= 10
    for n, config in ddp.items():
        assert config["label"] == f"1M/{n}G"
        communication = config["communication"] or {}
        assert (communication.get("compute_s") or 0) > 0, communication
        if n > 1:
            assert (communication.get("allreduce_bytes_per_rank") or 0) > 0, communication
    tables = {t["world_size"]: t for t in summary["collectives"] if t["op"] == "allreduce"}
    assert sorted(tables) == [n for n in node().world_sizes if n > 1]
    assert all(t["backend"] == "nccl" and (t["peak_busbw_gbs"] or 0) > 0 for t in tables.values()), tables
    environment = summary["environment"]
    assert environment["nvml"] == "ok" and not environment["nvml_fake"] and environment["versions"]["nccl"]
    assert ceiling_problems(summary) == []


def test_every_configuration_s_trace_shows_the_idle_share_nvml_read(default_plan):
    """The default plan's configurations are traced on the GPU (resnet50 at batch 32, N=1 among them): each
    trace holds CUDA kernels (CUPTI works), every rank's file is where the summary says, busy and idle make up
    the step, and where the traced steps ran at the measured pace the traced GPU idle share lies within 15
    points of the idle share the load table's NVML utilisation implies over the measured steps (on the H200 the
    profiler slowed resnet50 bs32's traced steps 1.4-1.5x: their idle is then not compared, and the verdict
    does not take it for the measured steps'). Where the trace shows the host bounding resnet50 at N=1
    (idle in every traced step, mostly waiting for the host, at the measured pace), the verdict says so."""
    configs = ok_configs(default_plan.summary)
    assert configs and all(c.get("trace") for c in configs), [c["config_id"] for c in configs if not c.get("trace")]
    problems = [p for config in configs for p in trace_problems(config, default_plan.run_dir)]
    assert problems == [], problems
    from ddptop.analysis import step_bound, traces

    for config in configs:  # a trace the profiler slowed is never read as the measured steps' idle GPU
        if not traces.faithful(traces.ConfigTrace.from_json(config["trace"])):
            assert not config["verdict"]["text"].startswith(("host-bound: the GPU sat", "launch-bound")), config["verdict"]

    n1 = next(c for c in configs if c["mode"] == "ddp" and c["world_size"] == 1)
    trace = traces.ConfigTrace.from_json(n1["trace"])
    if traces.faithful(trace) and step_bound._traced_host_bound(trace):  # the trace's own rule met
        assert n1["verdict"]["text"].split(":")[0] in ("host-bound", "launch-bound"), n1["verdict"]["text"]


def test_the_live_view_shows_the_real_gpus_in_its_gpu_panel(default_plan):
    """The live view (Textual's Pilot, 160x50) during the default plan: while a configuration runs, the GPU
    panel has a row per GPU with the name NVML gives (shortened as the panel does), the GPU's memory in GiB as
    NVML counts it, a utilisation in percent, and rank 0 on a GPU that is busy and holds memory; every
    configuration ends ok and q leaves with exit 0."""
    seen = default_plan.seen
    assert seen["exit"] == EXIT_OK
    # each row's status, a note on what disturbed it after (e.g. "ok ! other processes used 0.8 cores")
    assert seen["statuses"] and all(s.split()[:1] == ["ok"] for s in seen["statuses"].values()), seen["statuses"]
    rows = seen["busy"]
    assert rows, f"no frame showed rank 0 on a busy GPU while a configuration ran; the last rows: {seen['last']}"
    gpus = default_plan.nvml
    if len(gpus) <= 8:  # every GPU has a row of its own at 160x50
        assert sorted(rows, key=int) == [str(index) for index in sorted(gpus)]
    for key, cells in rows.items():
        if not key.isdigit():  # a line for the GPUs past the panel's rows, or a MIG instance's
            continue
        truth = gpus[int(key)]
        assert cells["name"] == panel_name(truth["name"]), (cells, truth)
        used, total = panel_gib(cells["memgib"]) or (None, None)
        assert total is not None and abs(total - truth["memory_total"] / 2 ** 30) <= 0.051, (cells, truth)
        percent = panel_percent(cells["util"])
        assert percent is not None and 0 <= percent <= 100, cells
    rank0_gpu = {str(c["telemetry"]["ranks"]["0"]["gpu"]) for c in ok_configs(default_plan.summary)
                 if "gpu" in ((c.get("telemetry") or {}).get("ranks") or {}).get("0", {})}
    assert rank0_gpu and any(key in rank0_gpu and panel_row_busy(cells) for key, cells in rows.items()), (
        rank0_gpu, rows)  # the busy row is the GPU the telemetry tied rank 0 to


# -- ddptop doctor, and its driver report replayed ---------------------------------------------------------------

@dataclass
class DoctorRun:
    done: subprocess.CompletedProcess
    checks: list[dict[str, Any]]
    report: dict[str, Any]
    live_gpus: dict[str, Any]
    live_topo: dict[str, Any]
    replayed_gpus: dict[str, Any]
    replayed_topo: dict[str, Any]


@pytest.fixture(scope="module")
def doctor_run(tmp_path_factory) -> DoctorRun:
    base = tmp_path_factory.mktemp("doctor")
    report_path = str(base / "driver-report.json")
    done = ddptop("doctor", "--out", str(base), "--report", report_path, timeout=300)
    assert os.path.exists(base / "doctor.json") and os.path.exists(report_path), tail(done)
    with open(base / "doctor.json", encoding="utf-8") as handle:
        checks = json.load(handle)["checks"]
    with open(report_path, encoding="utf-8") as handle:
        report = json.load(handle)

    def as_json(*args: str, env: dict | None = None) -> dict[str, Any]:
        answer = ddptop(*args, env=env)
        assert answer.returncode == 0, tail(answer)
        return json.loads(answer.stdout)

    replay = {"DDPTOP_FAKE_NVML": report_path}
    return DoctorRun(done, checks, report, as_json("gpus", "--json"), as_json("topo", "--json"),
                     as_json("gpus", "--json", env=replay), as_json("topo", "--json", env=replay))


def test_doctor_passes_and_its_topology_check_agrees_with_nvidia_smi_cell_by_cell(doctor_run):
    """``ddptop doctor`` (every check, the launches included) exits 0: NVML, nvidia-smi vs NVML, torch/CUDA/NCCL,
    CUDA order and the rendezvous store ok; ``topo -m vs ddptop topo`` ok (not skipped) over at least every GPU
    pair, no cell differing; P2P skipped on one GPU, ok or warn on several; ddptop's kernel within 0.8-1.25 of
    the plain DDP loop; nothing failed. And apart from the doctor: nvidia-smi topo -m, read by the suite's own
    parser, against ddptop topo --json cell by cell, the same cell count as the doctor compared."""
    smi = needs_nvidia_smi()
    assert doctor_run.done.returncode == 0, tail(doctor_run.done)
    assert doctor_problems(doctor_run.checks, node().cuda_count) == []
    printed = subprocess.run([smi, "topo", "-m"], capture_output=True, text=True, timeout=120)
    cells = smi_topo_cells(printed.stdout)
    assert cells, printed.stdout + printed.stderr
    assert topo_cell_problems(cells, doctor_run.live_topo) == []
    topology = next(c for c in doctor_run.checks if c["name"] == "topo -m vs ddptop topo")
    assert topology["data"]["cells"] == len(cells)


def test_the_driver_report_replays_as_the_live_gpus_and_topology(doctor_run):
    """``ddptop doctor --report FILE`` on the real driver, then ``DDPTOP_FAKE_NVML=FILE``: ``ddptop topo --json``
    replayed equals the live one in every key but ``fake`` (the same machine, so its CPUs too), and ``ddptop gpus
    --json`` replayed gives every GPU's fields read from the driver (index, name, UUID, bus ID, memory, power
    limit, clocks, PCIe maxima, MIG) as the live one, the replay marked simulated."""
    report = doctor_run.report
    assert report["nvml"]["problem"] is None and report["nvml"]["simulated"] is False
    assert len(report["gpus"]) == len(doctor_run.live_gpus["gpus"]) > 0
    assert topo_replay_problems(doctor_run.live_topo, doctor_run.replayed_topo, same_host=True) == []
    assert gpus_replay_problems(doctor_run.live_gpus, doctor_run.replayed_gpus) == []


# -- the GPT kernel: bf16, the GPU's fused attention, ZeRO-1 and FSDP2 ----------------------------------------------

ATTENTION_QUESTION = """
import json, sys, torch
from torch.utils.flop_counter import FlopCounterMode
from ddptop.protocol.catalog import TRANSFORMER_PRESETS
from bench_kernels.flops import attention_formulas
from bench_kernels.transformer import build_transformer, lm_loss, synthetic_batch

name, batch, seq_len = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
device = torch.device("cuda", 0)
model = build_transformer(name).to(device)
inputs, targets = synthetic_batch(torch, TRANSFORMER_PRESETS[name], batch, seq_len, device)
with FlopCounterMode(display=False, custom_mapping=attention_formulas(torch)) as counter:
    with torch.autocast(device_type="cuda", dtype=torch.bfloat16):
        loss = lm_loss(model(inputs), targets)
    loss.backward()
torch.cuda.synchronize()
ops = {str(op): int(flops) for op, flops in counter.get_flop_counts().get("Global", {}).items()}
print(json.dumps({"ops": ops, "total": int(counter.get_total_flops())}))
"""


def ask_attention() -> dict[str, Any]:
    """The ops the kernel's model runs on cuda:0 for one bf16 forward and backward of the GPT run's shape, and
    their FLOPs as the kernel counts them (a fresh process, after the run: never beside its ranks)."""
    done = subprocess.run([sys.executable, "-c", ATTENTION_QUESTION, commands.GPT_MODEL, str(commands.GPT_BATCH),
                           str(commands.GPT_SEQ_LEN)], capture_output=True, text=True, timeout=600, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=REPO), stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def gpt_run(tmp_path_factory) -> tuple[Finished, dict[str, Any]]:
    if node().capability < (8, 0):
        pytest.skip(f"bf16 fused attention needs compute capability 8.0 or later (this GPU: {node().capability})")
    done = run_sweep(str(tmp_path_factory.mktemp("gpt") / "run"), *commands.gpt_run(node().cuda_count))
    return done, ask_attention()


def test_the_gpt_kernel_runs_the_gpus_fused_attention_and_counts_6pt_plus_attention(gpt_run):
    """gpt-tiny at 256 tokens in bf16 autocast, DDP, ZeRO-1 and FSDP2 at the node's GPU count: every
    configuration ok with NCCL; its FLOPs per step within 1% of 6 x parameters x tokens plus the attention term
    counted from the shape (a count without the fused kernel's term would be 1.8% short); the same model's
    step on this GPU runs SDPA's fused kernel (flash attention, or cuDNN's or the memory-efficient one where
    torch prefers it on this GPU; no bmm, the math fallback's op) and counts exactly the run's FLOPs; tokens/s =
    examples/s x 256; MFU against a bf16 ceiling measured in the run."""
    if node().capability < (8, 0):
        pytest.skip(f"bf16 fused attention needs compute capability 8.0 or later (this GPU: {node().capability})")
    done, attention = gpt_run
    summary = summary_of(done)
    configs = summary["configs"]
    assert summary["status_counts"] == {"ok": 3}, summary["status_counts"]
    assert sorted(c["strategy"] for c in configs) == ["ddp", "fsdp2", "zero1"]
    for config in configs:
        assert (config["amp"], config["seq_len"], config["backend"], config["world_size"]) == (
            "bf16", commands.GPT_SEQ_LEN, "nccl", node().cuda_count)
    assert transformer_flops_problems(summary) == []
    assert gpt_attention_problems(attention) == []
    for config in configs:
        assert math.isclose(config["flops"]["per_step"], attention["total"], rel_tol=1e-9), (config["flops"], attention)
    assert "bf16" in ceiling_dtypes(summary) and ceiling_problems(summary) == []


def test_zero1_and_fsdp2_run_beside_ddp_with_their_allocator_peaks(gpt_run):
    """``--strategies zero1,fsdp2``: the strategy table has DDP, ZeRO-1 and FSDP2, each with the allocator's
    peak (torch.cuda.max_memory_allocated over the measured steps) as its memory per rank, equal to its
    configuration's ``peak_memory_bytes``, at least the rank's share of the fp32 parameters and below the
    GPU's memory."""
    done, _ = gpt_run
    summary = summary_of(done)
    assert summary["plan"]["strategies"] == ["ddp", "zero1", "fsdp2"]
    assert strategy_problems(summary) == []


@pytest.fixture(scope="module")
def workloads_run(tmp_path_factory) -> Finished:
    if node().capability < (8, 0):
        pytest.skip(f"bf16 autocast needs compute capability 8.0 or later (this GPU: {node().capability})")
    pytest.importorskip("transformers")
    return run_sweep(str(tmp_path_factory.mktemp("workloads") / "run"), *commands.workloads_run(node().cuda_count))


def test_a_workload_and_a_hugging_face_model_run_on_the_gpus(workloads_run):
    """The protocol on a GPU: a dict-batch workload with its own loss and a small Llama from a config, DDP and
    FSDP2 with NCCL in bf16 autocast; every configuration ok with an allocator peak; the workload's FLOPs the
    hand count, its 12 tokens per example; the Llama's FLOPs within 2% of 6 x weights x tokens plus the
    attention term, with no op left uncounted; tokens/s = examples/s x 128."""
    from bench_kernels.hf import independent_flops
    from bench_kernels.sources import load_workload
    from tests.workloads import hand_count_flops

    summary = summary_of(workloads_run)
    configs = summary["configs"]
    assert summary["status_counts"] == {"ok": 4}, summary["status_counts"]
    llama = load_workload(commands.HF_DECODER, 1000, 64, seq_len=commands.WORKLOAD_SEQ_LEN).model
    expected = independent_flops(llama, commands.WORKLOAD_BATCH, commands.WORKLOAD_SEQ_LEN)
    for config in configs:
        assert (config["backend"], config["amp"], config["world_size"]) == ("nccl", "bf16", node().cuda_count)
        assert config["peak_memory_bytes"] > 0
        if config["model"] == commands.WORKLOAD:
            assert config["flops"]["per_step"] == hand_count_flops(commands.WORKLOAD_BATCH)
            assert config["tokens_per_example"] == 12.0
        else:
            assert math.isclose(config["flops"]["per_step"], expected, rel_tol=0.02), (config["flops"], expected)
            assert config["flops"]["uncounted_ops"] == [] and config["tokens_per_example"] == 128.0
        stats = config["stats"]
        assert math.isclose(stats["tok_sec_total"]["p50"], stats["ex_sec_total"]["p50"] * config["tokens_per_example"])


# -- threads and devices: the thread curve and the CPU against the GPU ----------------------------------------

@pytest.fixture(scope="module")
def threads_devices_run(tmp_path_factory) -> Finished:
    cores = len(os.sched_getaffinity(0))
    return run_sweep(str(tmp_path_factory.mktemp("threads") / "run"), *commands.threads_devices_run(cores))


def test_the_cpu_thread_curve_and_the_gpu_against_the_cpu_in_service_units(threads_devices_run):
    """--threads 1,...,16 --devices cpu,cuda: every configuration ok, the CPU's at each thread count with its
    ranks bound to that many cores and seeing no GPU, the GPU's on cuda; the thread curve's speedup at the most
    threads above 1 beyond its interval; the GPU faster than the CPU's best split, with the answer in words."""
    summary = summary_of(threads_devices_run)
    counts = [t for t in commands.THREAD_COUNTS if t <= len(os.sched_getaffinity(0))]
    assert summary["status_counts"] == {"ok": len(counts) + 1}, summary["status_counts"]
    devices = {c["config_id"]: (c["device"], c["threads"]) for c in summary["configs"]}
    assert sorted(devices.values()) == sorted([("cuda", 0)] + [("cpu", t) for t in counts]), devices
    for name, setup in summary["environment"]["launch_setup"].items():
        if "-cpu-t" in name:
            assert all(len(rank["cores"]) == int(name.rsplit("-t", 1)[1]) for rank in setup["ranks"].values()), setup
    (curve,) = summary["threads"]
    assert [r["threads"] for r in curve["rows"]] == counts
    top = curve["rows"][-1]
    assert top["speedup_ci"] and top["speedup_ci"][0] > 1, top
    (compared,) = summary["devices_compared"]
    assert compared["cpu"]["threads"] in counts and compared["cuda"]["gpus"] == 1
    assert compared["gpu_speedup_ci"] and compared["gpu_speedup_ci"][0] > 1, compared
    assert compared["relative_su"] is not None and "service units" in compared["answer"], compared


# -- fp16, channels_last, and a real CUDA out of memory ------------------------------------------------------------

@pytest.fixture(scope="module")
def capped_sweep(tmp_path_factory) -> Finished:
    return run_sweep(str(tmp_path_factory.mktemp("capped") / "run"), *commands.CAPPED_SWEEP)


def test_fp16_autocast_and_channels_last_run_against_an_fp16_ceiling(capped_sweep):
    """``--amp fp16 --channels-last`` (resnet50 under a 4000 MiB cap, from batch 32): every batch that fit ran
    in fp16 autocast with the model and inputs in channels_last, its convolutions and matmuls counted in fp16,
    and its MFU is against an fp16 ceiling measured in the run."""
    summary = summary_of(capped_sweep)
    fitted = ok_configs(summary)
    assert fitted and fitted[0]["batch_size"] == 32
    for config in fitted:
        assert (config["amp"], config["channels_last"]) == ("fp16", True)
        assert config["flops"]["dtype"] == "fp16" and config_dtypes(config) == {"fp16"}
    assert "fp16" in ceiling_dtypes(summary) and ceiling_problems(summary) == []


def test_a_real_cuda_out_of_memory_ends_the_batch_sweep(capped_sweep):
    """``--batch-sweep --memory-cap-mb 4000``: the batches that fit ran within the cap (allocator peak), the next
    ended in torch's own CUDA out of memory (status oom), every larger batch was not run (naming the batch that
    ran out), the batch table says the same, the summary is complete and ddptop exits 0."""
    summary = summary_of(capped_sweep)
    assert summary["plan"]["memory_cap_mb"] == commands.CAP_MB and summary["complete"]
    assert oom_sweep_problems(summary, commands.CAP_MB) == []


# -- ddptop tune: torch.compile, and bf16 only through a variant ---------------------------------------------------

@pytest.fixture(scope="module")
def tune_run(tmp_path_factory) -> Finished:
    run_dir = str(tmp_path_factory.mktemp("tune") / "run")
    done = ddptop("tune", "--headless", "--out", run_dir, *commands.TUNE, timeout=300)
    return Finished(done.returncode, done.stdout, done.stderr, run_dir)


def test_tune_measures_torch_compile_with_its_first_step_and_bucket_splits(tune_run):
    """``ddptop tune --variants amp_bf16,compile`` at a 1 MB bucket cap: the compile variant measured, its first
    step (which compiles) reported once per launch and apart from the step time, Dynamo's graphs (at least one),
    DDP's buckets (at least two) and DDPOptimizer's graph splits (kept or lost), no other variant reporting a
    compilation, the lines to paste ending in torch.compile, and the report saying what the first step took."""
    summary = summary_of(tune_run)
    assert compile_problems(summary) == []
    rows = {row["variant"]: row for row in summary["tuning"][0]["rows"]}
    assert rows["compile"]["paste"][-1] == "model = torch.compile(model)"
    assert "the first step, which compiles, took" in tune_run.stdout


def test_bf16_only_through_tunes_amp_bf16_variant_has_a_measured_ceiling(tune_run):
    """A tune whose plan runs fp32 and whose amp_bf16 variant alone runs bf16: that variant's configuration ran
    in bf16 autocast and counted its FLOPs in bf16, a bf16 ceiling was measured beside the fp32 one, and every
    configuration, the variant's included, has its MFU against a measured ceiling."""
    if node().capability < (8, 0):
        pytest.skip(f"bf16 needs compute capability 8.0 or later (this GPU: {node().capability})")
    summary = summary_of(tune_run)
    assert summary["plan"]["amp"] is None
    by_variant = {c["variant"]: c for c in summary["configs"]}
    assert sorted(by_variant) == ["amp_bf16", "compile", "default"]
    assert by_variant["amp_bf16"]["amp"] == "bf16" and config_dtypes(by_variant["amp_bf16"]) == {"bf16"}
    assert config_dtypes(by_variant["default"]) and config_dtypes(by_variant["default"]) <= {"fp32", "tf32"}
    assert {"bf16", "fp32"} <= ceiling_dtypes(summary)
    assert ceiling_problems(summary) == []


# -- a user's training script on the GPU ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def script_run(tmp_path_factory) -> Finished:
    run_dir = str(tmp_path_factory.mktemp("script") / "run")
    done = ddptop("run", "--headless", "--out", run_dir, *commands.script_run())  # --no-plots before the script's --
    return Finished(done.returncode, done.stdout, done.stderr, run_dir)


def test_a_training_script_runs_unchanged_on_the_gpu_its_steps_ending_after_the_device_s_work(script_run):
    """`ddptop run -- examples/train.py` at N = 1: the script's own DDP over nccl on the GPU, two loader workers;
    every planned step measured and ended by ddptop; the probe found CUDA in use at the first step, so each
    step's end is taken after torch.cuda.synchronize() (the GPU's step, not the host's): config_end's
    script.device_name is this GPU's, its allocator peak above 0; every batch's 64 examples counted; no rank
    or worker left. After the measured steps, its profiler trace: one warm-up, three kept and one left out, broken
    down from the GPU's kernels."""
    summary = summary_of(script_run)
    (config,) = summary["configs"]
    assert (config["status"], config["device"], config["world_size"]) == ("ok", "cuda", 1), config["reason"]
    assert config["ended_by"] == "ddptop" and config["stats"]["n"] == commands.SCRIPT_ITERS
    seen = config["script"]
    assert seen["device_name"] in {gpu["name"] for gpu in nvml_gpus().values()}, seen
    assert (seen["process_group"], seen["group_world_size"], seen["step_marks"]) == (True, 1, "optimizer"), seen
    traced = 1 + commands.SCRIPT_TRACE_STEPS + 1
    assert seen["optimizer_steps"] == commands.SCRIPT_WARMUP + commands.SCRIPT_ITERS + traced
    trace = config["trace"]
    assert trace["steps"] == commands.SCRIPT_TRACE_STEPS and trace["breakdown"]["device"] == "cuda", trace
    assert trace["breakdown"]["kernels"], trace["breakdown"]  # the GPU's own kernels, from the file
    assert all(os.path.getsize(os.path.join(script_run.run_dir, f["path"])) > 0 for f in trace["files"])
    assert config["peak_memory_bytes"] > 0
    examples = [value for values in (config["step_values"].get("examples") or {}).values() for value in values]
    assert examples and set(examples) == {commands.SCRIPT_BATCH}, config["step_values"]
    assert processes_mentioning(script_run.run_dir) == []


# -- every dtype ------------------------------------------------------------------------------------------------

def test_every_dtype_the_suite_ran_has_a_measured_ceiling_and_an_mfu(default_plan, gpt_run, capped_sweep, tune_run):
    """Over the suite's runs: fp32, tf32 (on compute capability 8.0 and later), bf16 and fp16 each ran, and
    every configuration of every run has its MFU against a ceiling measured in the dtypes it ran in."""
    summaries = {"default plan": default_plan.summary, "gpt": summary_of(gpt_run[0]),
                 "capped sweep": summary_of(capped_sweep), "tune": summary_of(tune_run)}
    problems = [f"{name}: {line}" for name, summary in summaries.items() for line in ceiling_problems(summary)]
    assert problems == []
    ran = {dtype for summary in summaries.values() for c in ok_configs(summary) for dtype in config_dtypes(c)}
    wanted = {"fp32", "fp16"} | ({"tf32", "bf16"} if node().capability >= (8, 0) else set())
    assert wanted <= ran, ran
