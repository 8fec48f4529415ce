"""Why a configuration is not faster: datasheet peaks, the verdict per configuration, energy per example.

The verdict is checked over constructed summary entries, one per kind, and on both sides of each threshold's
interval rule (no verdict on an effect its interval cannot tell from noise); the datasheet table against
the vendors' dense figures named in the brief of each entry.
"""

import pytest

from ddptop.analysis import step_bound as v
from ddptop.analysis.datasheet_peaks import datasheet_peak, peak_flops
from ddptop.records import MODEL, Estimate
from ddptop.report.schema import Summary

# -- datasheet peaks ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, dtype, tflops", [
    ("NVIDIA A100-SXM4-80GB", "bf16", 312.0),  # dense; 624 is the sparsity figure
    ("NVIDIA A100-SXM4-40GB", "tf32", 156.0),
    ("NVIDIA H100 80GB HBM3", "bf16", 989.4),  # dense; 1,979 is the sparsity figure
    ("NVIDIA H100 PCIe", "fp16", 756.0),
    ("Tesla V100-SXM2-16GB", "fp16", 125.0),
    ("NVIDIA L4", "bf16", 121.0),
    ("NVIDIA H200 NVL", "bf16", 835.5),  # not the SXM part's 989.4, which "H200" alone would give
    ("NVIDIA H200", "bf16", 989.4),
    ("NVIDIA H100 NVL", "tf32", 417.5),
    ("NVIDIA B200", "bf16", 2250.0),
    ("NVIDIA L40", "tf32", 90.5),
    ("NVIDIA RTX A6000", "bf16", 154.8),
    ("NVIDIA GeForce RTX 3090", "fp16", 71.0),
    ("NVIDIA GeForce RTX 4090", "bf16", 165.2),
])
def test_datasheet_figures_are_the_dense_ones(name, dtype, tflops):
    value, source = peak_flops(name, dtype)
    assert value == tflops * 1e12 and "dense" in source


def test_model_numbers_match_whole_and_unknown_gpus_say_so():
    assert datasheet_peak("NVIDIA A10").name == "A10" and datasheet_peak("NVIDIA A100-PCIE-40GB").name == "A100"
    assert datasheet_peak("NVIDIA L40S").name == "L40S" and datasheet_peak("NVIDIA L40").name == "L40"
    assert datasheet_peak("NVIDIA H200 NVL").name == "H200 NVL" and datasheet_peak("NVIDIA H200").name == "H200 SXM"
    assert peak_flops("NVIDIA A10G", "bf16") == (None, "no datasheet figure for NVIDIA A10G")  # not the A10's
    assert peak_flops("Tesla V100-SXM2-16GB", "bf16")[0] is None  # Volta has no bf16 tensor cores


# -- the verdict ------------------------------------------------------------------------------------------------------


def entry(fraction=None, ci=None, world_size=2, device="cpu", util=None, rank_cpu=None, peak=None, mfu=None,
          link=None, idle=None):
    comm = {}
    if fraction is not None:
        comm = {"exposed_comm_fraction": fraction, "exposed_comm_fraction_ci": ci}
    if link:
        comm["buckets"] = {"achieved": {"link_share": link[0], "link": link[1]}}
    telemetry = {"util_mean": util, "ranks": {"0": {"cpu_mean": rank_cpu}} if rank_cpu is not None else {},
                 "gpus": [0], "gpu_idle": idle}
    return {"config_id": "m/ddp/bs8/n2/nccl", "mode": "ddp", "world_size": world_size, "device": device,
            "batch_size": 64, "stats": {"n": 50}, "communication": comm, "telemetry": telemetry,
            "peak_memory_bytes": peak, "flops": {"mfu_datasheet": Estimate(value=mfu[0]), "mfu_ceiling": Estimate(value=mfu[1])} if mfu else {}}


GPU_ENV = {"gpus": [{"index": 0, "memory_total": 80 << 30}]}


def test_communication_bound_only_when_the_interval_clears_the_threshold():
    bound = v.verdict(entry(0.38, [0.31, 0.45], link=(0.61, "NVLink")))
    assert bound["kind"] == v.COMMUNICATION
    assert "38% of the step is exposed communication" in bound["text"] and "61% of NVLink peak" in bound["text"]
    straddles = v.verdict(entry(0.38, [0.20, 0.55]))  # the same point, an interval reaching below 25%
    assert straddles["kind"] == v.BALANCED


def test_compute_bound_when_communication_is_surely_minor():
    found = v.verdict(entry(0.06, [0.03, 0.08], device="cuda", mfu=(0.41, 0.52)), GPU_ENV)
    assert found["kind"] == v.COMPUTE
    assert found["text"] == ("compute-bound: 41% MFU (52% of the measured matmul ceiling), "
                             "communication 6% exposed")
    assert v.verdict(entry(0.06, [0.0, 0.12]))["kind"] == v.BALANCED  # upper end above 10%: not surely minor


def idle(share, ci, rank_cpu=100.0, readings=24, launches=3):
    return {"share": Estimate(value=share, ci=ci), "readings": readings, "blocks": readings, "launches": launches,
            "rank_cpu_mean": rank_cpu}


def test_host_bound_and_memory():
    host = v.verdict(entry(0.05, [0.02, 0.07], device="cuda", util=75, idle=idle(0.25, [0.20, 0.30])), GPU_ENV)
    assert host["kind"] == v.HOST
    assert host["text"].startswith("host-bound: the GPU was idle 25% of the measured steps (95% CI 20%–30%, 24 readings "
                                   "in 3 launches), the rank at 100% of a core — try a larger batch per GPU, CUDA "
                                   "graphs or torch.compile(mode=\"reduce-overhead\")")
    full = v.verdict(entry(0.05, [0.02, 0.07], device="cuda", util=95, rank_cpu=40, peak=int(0.93 * (80 << 30))),
                     GPU_ENV)
    assert full["text"].endswith("memory: 93% of GPU memory at batch 64")
    # the same idle share on the CPU: no GPU, no host-bound verdict from it
    assert v.verdict(entry(0.05, [0.02, 0.07], device="cpu", idle=idle(0.9, [0.85, 0.95])))["kind"] == v.COMPUTE


def test_host_bound_only_when_the_idle_interval_clears_the_threshold_at_a_full_core():
    def kind(share, ci, rank_cpu=100.0):
        return v.verdict(entry(0.05, [0.02, 0.07], device="cuda", idle=idle(share, ci, rank_cpu)), GPU_ENV)["kind"]

    low = v.HOST_IDLE_SHARE
    assert kind(low + 0.05, [low + 0.01, low + 0.09]) == v.HOST
    assert kind(low + 0.05, [low - 0.01, low + 0.11]) == v.COMPUTE  # the same share, an interval reaching below it
    assert kind(0.5, None) == v.COMPUTE  # one reading: no interval, no verdict on it
    assert kind(0.5, [0.4, 0.6], rank_cpu=v.RANK_CPU_BUSY - 5) == v.COMPUTE  # the rank not at a full core
    assert kind(0.5, [0.4, 0.6], rank_cpu=v.RANK_CPU_BUSY) == v.HOST
    assert v.thresholds()["host_idle_share"] == low and "gpu_idle_util" not in v.thresholds()


def test_the_idle_share_and_its_interval_by_hand():
    import math
    import statistics

    # one window from t=100, a reading a second from 100.5: the first counts only a second after the start
    utils = [10, 70, 80, 75, 75, 60]
    readings = [{"t": 100.5 + i, "window": 0, "start": 100.0, "util": u, "rank_cpu": 99.0 + i % 2}
                for i, u in enumerate(utils)]
    found = v.gpu_idle(readings)
    shares = [1 - u / 100 for u in utils[1:]]
    mean, sd = statistics.fmean(shares), statistics.stdev(shares)
    half = 2.776 * sd / math.sqrt(len(shares))  # t(0.975, 4)
    assert found["readings"] == found["blocks"] == 5 and found["launches"] == 1
    assert found["share"].value == pytest.approx(mean)
    assert found["share"].ci == pytest.approx([mean - half, mean + half], rel=2e-3)
    assert found["rank_cpu_mean"] == pytest.approx(statistics.fmean(99.0 + i % 2 for i in range(1, 6)))
    # four readings a second apart in two windows, then the same at a quarter second: readings less than
    # a second apart are one observation, and two windows never share one
    fast = [{"t": 10.0 + 0.25 * i, "window": 0, "start": 9.0, "util": 60 + 10 * (i // 4), "rank_cpu": 100.0}
            for i in range(8)]
    fast += [{"t": 50.0 + 0.25 * i, "window": 1, "start": 49.0, "util": 80.0, "rank_cpu": 100.0} for i in range(2)]
    grouped = v.gpu_idle(fast)
    assert grouped["blocks"] == 3 and grouped["readings"] == 10 and grouped["launches"] == 2
    assert grouped["share"].value == pytest.approx(statistics.fmean([0.4, 0.3, 0.2]))
    assert v.gpu_idle([]) is None and v.gpu_idle(readings[:1]) is None  # nothing a second into its window
    assert v.gpu_idle(readings[1:2])["share"].ci is None  # one observation: no interval


def test_one_rank_and_missing_figures():
    assert v.verdict(entry(world_size=1))["text"] == "compute only (one rank, no communication)"
    unknown = v.verdict(entry())
    assert unknown["kind"] == v.UNKNOWN and "not told apart" in unknown["text"]
    assert v.verdict({"stats": None})["kind"] == v.UNKNOWN


# -- energy in the scaling table ------------------------------------------------------------------------------------


def test_energy_per_example_becomes_examples_per_joule_and_relative_energy():
    from ddptop.analysis.scaling import _add_model_figures
    from types import SimpleNamespace

    plan = SimpleNamespace(price_per_gpu_hour=None, epoch_examples=1000)
    ref = {"telemetry": {"energy_per_example_j": 0.5}, "world_size": 1, "batch_size": 8, "stats": {"sec_iter": {"p50": 1}}}
    two = {"telemetry": {"energy_per_example_j": 0.6}, "batch_size": 8, "global_batch": 16}
    row = {"world_size": 2, "speedup": 1.8, "reference_world_size": 1, "sec_iter": 1.1, "ex_sec_total": 14.5}
    _add_model_figures(row, two, ref, None, plan)
    assert row["examples_per_joule"] == pytest.approx(1 / 0.6) and row["relative_energy"] == pytest.approx(1.2)
    row = {"world_size": 2, "speedup": 1.8, "reference_world_size": 1, "sec_iter": 1.1, "ex_sec_total": 14.5}
    _add_model_figures(row, {"telemetry": {}, "batch_size": 8, "global_batch": 16}, ref, None, plan)
    assert row["examples_per_joule"] is None and row["relative_energy"] is None


# -- the projection beyond the node ---------------------------------------------------------------------------------


def _table(scaling="weak"):
    return {"scaling": scaling, "rows": [
        {"world_size": 1, "sec_iter": 0.100, "config_id": "a"},
        {"world_size": 4, "sec_iter": 0.125, "config_id": "b", "speedup": 3.2},
    ]}


def test_the_projection_by_hand():
    from ddptop.analysis.projection import project

    grad = 100e6  # bytes
    entries = {"b": {"grad_bytes": grad, "communication": {
        "compute_s": 0.100, "compute_s_ci": [0.098, 0.102], "exposed_comm_s": 0.010,
        "buckets": {"in_flight_s": 0.040, "achieved": {"busbw_gbs": 100.0}}}}}
    found = project(_table(), entries, internode_gbps=25.0)
    assert found["exposed_share"] == pytest.approx(0.25) and found["from_world_size"] == 4
    two = found["points"][0]
    allreduce = 2 * 7 / 8 * grad / 25e9  # 8 ranks over the 25 GB/s network link, the slower one
    assert two["world_size"] == 8 and two["nodes"] == 2 and two["allreduce_s"] == pytest.approx(allreduce)
    assert two["sec_iter"].value == pytest.approx(0.100 + 0.25 * allreduce)
    assert two["sec_iter"].ci == pytest.approx([0.098 + 0.25 * allreduce, 0.102 + 0.25 * allreduce])
    assert two["speedup"].value == pytest.approx(8 * 0.100 / two["sec_iter"].value) and two["link"] == "inter-node"
    # the reference has no interval here: the speedup's range is the step's, turned over
    assert two["speedup"].ci == pytest.approx([8 * 0.100 / two["sec_iter"].high, 8 * 0.100 / two["sec_iter"].low])
    assert two["efficiency"].ci == pytest.approx([v / 8 for v in two["speedup"].ci])
    assert two["speedup"].method == MODEL
    assert "a model, not a measurement" in found["assumptions"]
    # with one, each end of the speedup's range takes the reference's end that widens it
    table = _table()
    table["rows"][0]["sec_iter_ci"] = [0.095, 0.105]
    two = project(table, entries, internode_gbps=25.0)["points"][0]
    assert two["speedup"].ci == pytest.approx([8 * 0.095 / two["sec_iter"].high, 8 * 0.105 / two["sec_iter"].low])
    assert two["speedup"].low < two["speedup"].value < two["speedup"].high
    # no bucket timing: nothing overlaps; strong scaling, or no split: no projection at all
    del entries["b"]["communication"]["buckets"]
    assert project(_table(), entries)["exposed_share"] == 1.0
    assert project(_table("strong"), entries) is None
    assert project(_table(), {"b": {"grad_bytes": grad, "communication": {}}}) is None


def test_internode_bandwidth_must_be_positive():
    from ddptop.run.options import PlanOptions
    from ddptop.run.plan import PlanError, build_plan
    from ddptop.telemetry.inventory import Inventory

    with pytest.raises(PlanError, match="--internode-gbps must be positive"):
        build_plan(PlanOptions(internode_gbps=0), Inventory(problem="none"), cpu_count=2)


# -- hardware counters (GPM) ----------------------------------------------------------------------------------------


def test_gpm_counters_from_the_hopper_node_to_the_load_table(tmp_path):
    """NVML GPM under the simulated HGX H100, end to end: two samples per metric window through the real
    binding, each reading's counters, their means over a configuration's measured steps, the load table."""
    import os
    import time

    from ddptop.report import sections
    from ddptop.telemetry.fake.nvml import FakeNvml
    from ddptop.telemetry.host import RankProcess
    from ddptop.telemetry.monitor import Monitor
    from ddptop.telemetry.timeline import window_figures

    fake = FakeNvml("hgx-h100", steady=True)
    fake.attach_process(0, os.getpid(), 1 << 30)
    refs = [RankProcess(os.getpid(), 0, "L1", 0, "cuda:0", None)]
    monitor = Monitor(0.05, str(tmp_path / "telemetry.jsonl"), fake, lambda: refs).start()
    try:
        deadline = time.time() + 20
        while len(monitor.records) < 6 and time.time() < deadline:
            time.sleep(0.02)
        records = list(monitor.records)
    finally:
        monitor.stop()
    first, later = records[0]["gpus"][0], records[-1]["gpus"][0]
    assert "sm_active" not in first and first["na"]["sm_active"] == "first reading (GPM needs two samples)"
    assert (later["sm_active"], later["sm_occupancy"], later["tensor_active"], later["dram_active"]) == (
        82.0, 41.0, 33.0, 57.0)  # the node's steady figures, read back through nvmlGpmMetricsGet
    figures = window_figures(records, records[1]["t"] - 1e-3, records[-1]["t"], "L1", examples=100)
    assert figures["gpus"] == [0] and figures["sm_active_mean"] == 82.0 and figures["tensor_active_mean"] == 33.0
    summary = {"configs": [{"label": "1M/1G", "model": "m", "batch_size": 8, "telemetry": figures,
                            "stats": {"sec_iter": {"p50": 0.1}}}],
               "telemetry": {"info": {}}}
    text = sections.text_of("load", Summary.from_json(summary))
    assert "SM active" in text and "tensor active" in text and "82%" in text and "33%" in text
    assert "SM active" not in sections.text_of("load", Summary.from_json({**summary, "configs": [
        {"label": "1M/1G", "model": "m", "batch_size": 8, "telemetry": {**figures, "sm_active_mean": None}}]}))


# -- link peaks -----------------------------------------------------------------------------------------------------


def test_link_peaks_and_bus_bandwidth_shares_under_simulated_nodes():
    from ddptop.analysis.links import add_link_shares, link_peak
    from ddptop.telemetry.fake.nvml import FakeNvml
    from ddptop.telemetry.topology import read_topology

    h100 = read_topology(FakeNvml("hgx-h100")).to_json()
    assert h100["links"]["GPU3"] == {"nvlink_active": 18, "nvlink_version": 4, "nvlink_gbs": 450.0,
                                     "pcie_gen_max": 5, "pcie_width_max": 16, "pcie_gbs": pytest.approx(63.0, 0.01)}
    assert link_peak(h100, [0, 1, 2, 3], "cuda") == {"link": "NVLink", "peak_gbs": 450.0}  # 18 x 25 GB/s
    pcie = read_topology(FakeNvml("pcie-4gpu")).to_json()
    assert link_peak(pcie, [0, 1], "cuda") == {"link": "PCIe", "peak_gbs": pytest.approx(31.5, 0.01)}  # gen 4 x16
    assert link_peak(pcie, [0, 1], "cpu")["why"] == "no link peak: the ranks ran on the CPU"
    assert link_peak(pcie, [], "cuda")["link"] is None
    dgx1 = read_topology(FakeNvml("dgx1")).to_json()
    assert link_peak(dgx1, [0, 5], "cuda")["link"] == "PCIe"  # GPUs 0 and 5 share no NVLink (SYS)

    entry = {"world_size": 4, "backend": "nccl", "device": "cuda", "telemetry": {"gpus": [0, 1, 2, 3]},
             "communication": {"buckets": {"achieved": {"busbw_gbs": 270.0}}}}
    table = {"world_size": 4, "backend": "nccl", "peak_busbw_gbs": 360.0}
    add_link_shares([entry], [table], h100)
    achieved = entry["communication"]["buckets"]["achieved"]
    assert achieved["link"] == "NVLink" and achieved["link_share"] == pytest.approx(0.6)
    assert table["link_share"] == pytest.approx(0.8) and table["link_peak_gbs"] == 450.0
    found = v.verdict({**entry, "mode": "ddp", "stats": {"n": 50}, "communication": {
        **entry["communication"], "exposed_comm_fraction": 0.4, "exposed_comm_fraction_ci": [0.3, 0.5]}})
    assert "allreduce at 60% of NVLink peak" in found["text"]


# -- FLOPs and MFU ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, published_gmacs", [("resnet18", 1.81), ("resnet50", 4.09)])
def test_flops_per_step_match_the_published_forward_counts(name, published_gmacs):
    """torchvision's model table: 1.81 and 4.09 GMACs (listed as "GFLOPS") per 224-px image forward; a
    forward and backward is about three forwards, and FLOPs are two per multiply-add. Within 3%: the first
    convolution needs no gradient for its input."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from bench_kernels.flops import count_step_flops

    model = getattr(torchvision.models, name)(num_classes=1000)
    images, labels = torch.randn(2, 3, 224, 224), torch.tensor([1, 2])

    def forward_and_backward():
        torch.nn.functional.cross_entropy(model(images), labels).backward()

    by_kind = count_step_flops(torch, forward_and_backward)
    counted = sum(by_kind.values())
    assert counted == pytest.approx(2 * 3 * 2 * published_gmacs * 1e9, rel=0.03)
    # nearly all of a ResNet's FLOPs are convolutions: the fully connected layer is the only matmul
    fc = 2 * 3 * 2 * model.fc.in_features * model.fc.out_features  # forward, two gradients; batch of 2
    assert by_kind["matmul"] == fc and by_kind["conv"] == counted - fc
    # and what FlopCounterMode itself says of the same step, built again here
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as mode:
        forward_and_backward()
    assert counted == mode.get_total_flops()


def test_mfu_by_hand():
    from ddptop.analysis.compute import compute_figures

    entry = {"mode": "ddp", "world_size": 4, "device": "cuda", "amp": "bf16",
             "stats": {"sec_iter": {"p50": 0.1}, "p50_ci": [0.095, 0.11]}}
    info = {"flops_per_step": 3.12e13, "compute_dtype": "bf16"}
    ceilings = [{"device_name": "NVIDIA A100-SXM4-80GB", "dtype": "bf16", "flops_per_s": 2.6e14}]
    found = compute_figures(entry, info, "NVIDIA A100-SXM4-80GB", ceilings)
    assert found["achieved_per_device"].value == pytest.approx(3.12e14) and found["achieved_total"] == pytest.approx(1.248e15)
    assert found["mfu_datasheet"].value == pytest.approx(3.12e14 / 312e12) and "A100" in found["datasheet_source"]
    assert found["mfu_ceiling"].value == pytest.approx(3.12e14 / 2.6e14)
    assert found["achieved_per_device"].ci == pytest.approx([3.12e13 / 0.11, 3.12e13 / 0.095])
    assert found["mfu_datasheet"].ci == pytest.approx([3.12e13 / 0.11 / 312e12, 3.12e13 / 0.095 / 312e12])
    # the CPU is one device: every rank's FLOP/s against the node's ceiling; no datasheet
    cpu = compute_figures({**entry, "device": "cpu", "world_size": 2}, {"flops_per_step": 1e9, "compute_dtype": "fp32"},
                          "x86", [{"device_name": "x86", "dtype": "fp32", "flops_per_s": 5e10}])
    assert cpu["mfu_ceiling"].value == pytest.approx(2 * 1e9 / 0.1 / 5e10) and cpu["mfu_datasheet"] is None
    # DataParallel counted the global batch on one process: per GPU is a share of it
    dp = compute_figures({**entry, "mode": "dp"}, info, "NVIDIA A100-SXM4-80GB", ceilings)
    assert dp["achieved_per_device"].value == pytest.approx(3.12e14 / 4)
    assert compute_figures(entry, {}, None, []) is None  # no count: no block


def _stand_in_torch(capability: int, cudnn_tf32: bool, matmul_tf32: bool):
    """The flags a CUDA torch answers with, on a GPU of the given compute capability."""
    from types import SimpleNamespace

    return SimpleNamespace(
        cuda=SimpleNamespace(get_device_properties=lambda device: SimpleNamespace(major=capability)),
        backends=SimpleNamespace(cudnn=SimpleNamespace(allow_tf32=cudnn_tf32),
                                 cuda=SimpleNamespace(matmul=SimpleNamespace(allow_tf32=matmul_tf32))))


def test_each_kind_of_op_runs_in_the_dtype_its_own_switch_allows():
    from types import SimpleNamespace

    from bench_kernels.flops import dtype_label, op_dtypes

    gpu = SimpleNamespace(type="cuda")
    # torch's defaults: cuDNN may use TF32, cuBLAS may not, so a matmul runs in true FP32
    defaults = op_dtypes(_stand_in_torch(9, True, False), gpu, None)
    assert defaults == {"conv": "tf32", "matmul": "fp32"}
    assert dtype_label(defaults) == "conv tf32, matmul fp32"
    assert dtype_label(defaults, {"conv": 0, "matmul": 10}) == "fp32"  # a model without convolutions
    high = op_dtypes(_stand_in_torch(9, True, True), gpu, None)  # set_float32_matmul_precision("high")
    assert high == {"conv": "tf32", "matmul": "tf32"} and dtype_label(high) == "tf32"
    assert op_dtypes(_stand_in_torch(7, True, True), gpu, None) == {"conv": "fp32", "matmul": "fp32"}  # Volta
    assert op_dtypes(_stand_in_torch(9, True, False), gpu, "bf16") == {"conv": "bf16", "matmul": "bf16"}
    assert op_dtypes(None, SimpleNamespace(type="cpu"), None) == {"conv": "fp32", "matmul": "fp32"}


def test_a_matmul_heavy_model_is_held_against_the_peak_its_matmuls_run_at():
    """A ViT-like step, 99.5% of its FLOPs in matmuls, on an H100 SXM: with torch's defaults its matmuls run
    in FP32, so its MFU is against about the FP32 peak (67), not the TF32 one (494.7); with TF32 matmuls on,
    against TF32."""
    from ddptop.analysis.compute import compute_figures

    entry = {"mode": "ddp", "world_size": 1, "device": "cuda", "stats": {"sec_iter": {"p50": 0.1}}}
    by_kind = {"conv": 5e9, "matmul": 995e9}
    name = "NVIDIA H100 80GB HBM3"
    ceilings = [{"device_name": name, "dtype": "fp32", "flops_per_s": 50e12},
                {"device_name": name, "dtype": "tf32", "flops_per_s": 400e12}]
    fp32_matmuls = compute_figures(entry, {"flops_per_step": 1e12, "flops_by_kind": by_kind,
                                           "dtype_by_kind": {"conv": "tf32", "matmul": "fp32"},
                                           "compute_dtype": "conv tf32, matmul fp32"}, name, ceilings)
    mixed = 1e12 / (5e9 / 494.7e12 + 995e9 / 67e12)
    assert fp32_matmuls["datasheet_peak"] == pytest.approx(mixed) and 67e12 < mixed < 68e12
    assert fp32_matmuls["mfu_datasheet"].value == pytest.approx(1e13 / mixed)
    assert fp32_matmuls["ceiling"] == pytest.approx(1e12 / (5e9 / 400e12 + 995e9 / 50e12))
    assert "fp32 dense 67" in fp32_matmuls["datasheet_source"] and "tf32 dense 494.7" in fp32_matmuls["datasheet_source"]
    assert fp32_matmuls["dtype"] == "conv tf32, matmul fp32" and len(fp32_matmuls["by_kind"]) == 2
    tf32_matmuls = compute_figures(entry, {"flops_per_step": 1e12, "flops_by_kind": by_kind,
                                           "dtype_by_kind": {"conv": "tf32", "matmul": "tf32"},
                                           "compute_dtype": "tf32"}, name, ceilings)
    assert tf32_matmuls["datasheet_peak"] == pytest.approx(494.7e12)
    assert tf32_matmuls["mfu_datasheet"].value == pytest.approx(1e13 / 494.7e12)
    assert fp32_matmuls["mfu_datasheet"].value / tf32_matmuls["mfu_datasheet"].value > 7  # the 7.4x the TF32 label hid
