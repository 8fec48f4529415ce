"""The transformer kernel (bench_kernels/transformer.py): its presets, its FLOP count against an independent
one, its activations under the CPU memory cap, its options, and tokens/s = examples/s x seq_len in a real
run (torchrun on the CPU with gloo)."""

import csv
import io
import json
import math
import os
import re

import pytest

from ddptop.protocol.catalog import TRANSFORMER_PRESETS
from ddptop.protocol.modelspec import KINDS, parse_spec
from ddptop.run.plan import PlanError, PlanOptions, build_plan
from ddptop.run.plan_file import read_plan_file
from ddptop.telemetry.inventory import Inventory
from tests.conftest import ddptop, run_sweep

NO_GPU = Inventory(problem="NVML unavailable: test")
TINY = TRANSFORMER_PRESETS["gpt-tiny"]


# --- the presets and the plan (no torch) ---------------------------------------------------------------

def test_presets_span_a_few_million_to_gpt2_medium():
    params = {name: shape.params for name, shape in TRANSFORMER_PRESETS.items()}
    assert params["gpt-tiny"] < 10e6
    assert 15e6 < params["gpt-20m"] < 25e6
    medium = TRANSFORMER_PRESETS["gpt-350m"]
    assert (medium.layers, medium.d_model, medium.heads) == (24, 1024, 16)
    assert 340e6 < params["gpt-350m"] < 360e6
    specs = [parse_spec(name) for name in TRANSFORMER_PRESETS]
    assert all(KINDS[s.kind].problem(s, 0) is None for s in specs)  # no image size to check


def test_seq_len_reaches_every_configuration_from_flags_and_plan_files(tmp_path):
    plan = build_plan(PlanOptions(models=["gpt-tiny", "resnet18"], seq_len=64), NO_GPU, cpu_count=2)
    by_model = {c.model: c.seq_len for c in plan.configs()}
    assert by_model == {"gpt-tiny": 64, "resnet18": None}
    default = build_plan(PlanOptions(models=["gpt-20m"]), NO_GPU, cpu_count=2)
    assert {c.seq_len for c in default.configs()} == {TRANSFORMER_PRESETS["gpt-20m"].default_seq_len}
    path = tmp_path / "plan.toml"
    path.write_text('models = ["gpt-tiny"]\nseq_len = 32\n')
    from_file = build_plan(PlanOptions(**read_plan_file(str(path))), NO_GPU, cpu_count=2)
    assert {c.seq_len for c in from_file.configs()} == {32}


@pytest.mark.parametrize("options, message", [
    (PlanOptions(models=["gpt-tiny"], seq_len=0), "gpt-tiny takes --seq-len from 1 to its context length 256"),
    (PlanOptions(models=["gpt-tiny"], seq_len=TINY.context + 1), f"(got {TINY.context + 1})"),
    (PlanOptions(models=["resnet18"], seq_len=64), "no model here takes token sequences"),
    (PlanOptions(models=["gpt-tiny"], image_size=64), "token sequences, not images"),
])
def test_plan_refuses_a_sequence_length_it_cannot_run(options, message):
    with pytest.raises(PlanError, match=re.escape(message)):
        build_plan(options, NO_GPU, cpu_count=2)


def test_tune_of_a_transformer_leaves_out_the_image_layout_variant():
    plan = build_plan(PlanOptions(models=["gpt-tiny"], tune=True), NO_GPU, cpu_count=2)
    assert "channels_last" not in plan.variants and "gradient_as_bucket_view" in plan.variants
    cnn = build_plan(PlanOptions(models=["resnet18"], tune=True), NO_GPU, cpu_count=2)
    assert "channels_last" in cnn.variants


@pytest.mark.parametrize("args", [
    ["run", "--models", "gpt-tiny", "--seq-len", "100000"],
    ["run", "--models", "gpt-tiny", "--seq-len", "-3"],
    ["run", "--models", "gpt-tiny", "--seq-len", "long"],
    ["tune", "--models", "gpt-350m", "--seq-len", "2048"],
])
def test_a_bad_seq_len_is_one_line_and_exit_2(args, tmp_path):
    done = ddptop(*args, "--headless", "--out", str(tmp_path / "run"))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddptop: error: ") and "seq-len" in lines[0]
    assert not (tmp_path / "run").exists()


def test_tokens_per_second_sit_beside_every_examples_per_second_of_a_transformer_only():
    from ddptop.analysis.tokens import add_token_rates

    def config(model, seq_len):
        return {"config_id": model, "model": model, "seq_len": seq_len,
                "stats": {"ex_sec_total": {"p50": 10.0, "p90": 8.0}, "ex_sec_total_p50_ci": [9.0, 11.0]}}

    doc = {
        "configs": [config("gpt-tiny", 64), config("resnet18", None)],
        "scaling": [{"rows": [{"config_id": m, "ex_sec_total": 10.0, "ex_sec_total_ci": [9.0, 11.0]}
                              for m in ("gpt-tiny", "resnet18")]}],
        "batch_throughput": [{"model": m, "best_ex_sec_total": 10.0, "rows": [{"ex_sec_total": 10.0}]}
                             for m in ("gpt-tiny", "resnet18")],
        "dp_vs_ddp": [{"model": "gpt-tiny", "dp_ex_sec_total": 2.0, "ddp_ex_sec_total": None}],
    }
    add_token_rates(doc)
    gpt, cnn = doc["configs"]
    assert gpt["stats"]["tok_sec_total"] == {"p50": 640.0, "p90": 512.0}
    assert gpt["stats"]["tok_sec_total_p50_ci"] == [576.0, 704.0]
    assert "tok_sec_total" not in cnn["stats"]
    rows = doc["scaling"][0]["rows"]
    assert rows[0]["tok_sec_total"] == 640.0 and rows[0]["tok_sec_total_ci"] == [576.0, 704.0]
    assert "tok_sec_total" not in rows[1]
    assert doc["batch_throughput"][0]["best_tok_sec_total"] == 640.0
    assert doc["batch_throughput"][0]["rows"][0]["tok_sec_total"] == 640.0
    assert "best_tok_sec_total" not in doc["batch_throughput"][1]
    assert doc["dp_vs_ddp"][0]["dp_tok_sec_total"] == 128.0 and doc["dp_vs_ddp"][0]["ddp_tok_sec_total"] is None


# --- in-process: the model, its FLOPs, its activations ---------------------------------------------------

@pytest.fixture(scope="module")
def torch():
    torch = pytest.importorskip("torch")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield torch
    torch.set_num_threads(threads)


def test_the_model_has_the_catalog_s_parameters_and_shape(torch):
    from bench_kernels.transformer import build_transformer, synthetic_batch

    model = build_transformer("gpt-tiny")
    assert sum(p.numel() for p in model.parameters()) == TINY.params
    inputs, targets = synthetic_batch(torch, TINY, 2, 16, "cpu")
    assert model(inputs).shape == (2, 16, TINY.vocab) and targets.shape == (2, 16)


@pytest.mark.parametrize("seq_len", [64, 256])
def test_flops_per_step_are_within_2_percent_of_the_independent_count(torch, seq_len):
    """The count the kernel reports (count_step_flops over one forward and backward) against 6 x parameters
    x tokens plus the attention term; at 256 tokens the attention is ~13% of the step, which torch's counter
    alone (no formula for the CPU's flash attention) would miss."""
    from bench_kernels.flops import count_step_flops
    from bench_kernels.transformer import (attention_flops_per_token, build_transformer, independent_flops, lm_loss,
                                           synthetic_batch)

    model = build_transformer("gpt-tiny")
    inputs, targets = synthetic_batch(torch, TINY, 2, seq_len, "cpu")
    counted = count_step_flops(torch, lambda: lm_loss(model(inputs), targets).backward())
    expected = independent_flops(TINY, 2, seq_len)
    assert abs(sum(counted.values()) / expected - 1) < 0.02, (counted, expected)

    # the attention term is in the count: without it the matmuls alone fall short by exactly that much
    from torch.utils.flop_counter import FlopCounterMode

    with FlopCounterMode(display=False) as plain:
        lm_loss(model(inputs), targets).backward()
    missing = sum(counted.values()) - plain.get_total_flops()
    assert missing == attention_flops_per_token(TINY, seq_len) * 2 * seq_len


def test_memory_cap_counts_what_the_step_keeps(torch):
    """The CPU cap's count (leaf outputs and the loss's log-probabilities) against the bytes autograd really
    saves for the backward, plus the logits alive while the loss is computed: the step's peak."""
    from bench_kernels.memory_cap import activation_bytes
    from bench_kernels.transformer import build_transformer, lm_loss, synthetic_batch

    model = build_transformer("gpt-tiny")
    inputs, targets = synthetic_batch(torch, TINY, 8, 64, "cpu")
    parameters = {p.untyped_storage().data_ptr() for p in model.parameters()}
    saved: dict[int, int] = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in parameters and storage.data_ptr() != inputs.untyped_storage().data_ptr():
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        logits = model(inputs)
        lm_loss(logits, targets)
    peak = sum(saved.values()) + logits.numel() * logits.element_size()
    counted = activation_bytes(model, inputs, with_loss=True)
    assert abs(counted / peak - 1) < 0.1, (counted, peak)


# --- a real run -----------------------------------------------------------------------------------------

@pytest.mark.slow
def test_a_real_run_reports_tokens_per_second(tmp_path):
    """gpt-tiny at N=1 and N=2 on the CPU with gloo, a few steps: tokens/s = examples/s x seq_len in
    summary.json, summary.csv and the closing text; the FLOPs per step the ranks counted match the
    independent count."""
    from bench_kernels.transformer import independent_flops

    seq_len, batch = 32, 2
    done = run_sweep(str(tmp_path / "run"), "--models", "gpt-tiny", "--batch-sizes", str(batch), "--seq-len",
                     str(seq_len), "--world-sizes", "1,2", "--warmup", "1", "--iters", "4", "--launches", "1",
                     "--comm-iters", "2", "--no-collectives", "--no-baseline", "--telemetry-interval", "0")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.figures()
    configs = summary["configs"]
    assert sorted(c["world_size"] for c in configs) == [1, 2]
    for config in configs:
        assert config["status"] == "ok" and config["seq_len"] == seq_len
        stats = config["stats"]
        for p in ("p50", "p90"):
            assert math.isclose(stats["tok_sec_total"][p], stats["ex_sec_total"][p] * seq_len, rel_tol=1e-12)
        low, high = stats["tok_sec_total_p50_ci"]
        assert low <= stats["tok_sec_total"]["p50"] <= high
        counted = config["flops"]["per_step"]
        assert abs(counted / independent_flops(TINY, batch, seq_len) - 1) < 0.02
        assert config["communication"]["compute_s"] is not None  # the communication analysis ran
    rows = [row for table in summary["scaling"] for row in table["rows"]]
    assert len(rows) == 2
    for row in rows:
        assert math.isclose(row["tok_sec_total"], row["ex_sec_total"] * seq_len, rel_tol=1e-12)
    with open(os.path.join(done.run_dir, "summary.csv"), encoding="utf-8") as handle:
        for line in csv.DictReader(io.StringIO(handle.read())):
            assert math.isclose(float(line["tok_sec_total_p50"]), float(line["ex_sec_total_p50"]) * seq_len,
                                rel_tol=1e-9)
    assert "tok/sec (all ranks)" in done.stdout and f"{seq_len} tokens per example" in done.stdout
    with open(os.path.join(done.run_dir, "summary.md"), encoding="utf-8") as handle:
        assert "tok/sec (all ranks)" in handle.read()
    assert json.loads(json.dumps(summary["plan"]))["seq_len"] == seq_len
