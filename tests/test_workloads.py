"""A user's own model and training step as a workload (``ddptop.protocol.workload``): the check before any
launch, what the plan learns from it, its FLOPs, its memory, FSDP2's units, Hugging Face models from a
config, and real sweeps of it (tests.workloads, examples/my_workload.py)."""

import json
import os
import re
import select
import signal
import subprocess
import time

import pytest

from ddptop.protocol.modelspec import SpecError, parse_hf
from ddptop.protocol.workload import CheckAnswer, CheckProgress, WorkloadFacts
from ddptop.run.options import PlanOptions
from ddptop.run.plan import PlanError, build_plan
from ddptop.run.plan_models import NO_IMAGES, apply_facts
from ddptop.telemetry.inventory import Inventory

from .conftest import REPO, ddptop, ddptop_process, processes_mentioning, run_sweep

NO_GPU = Inventory(gpus=[], problem="no GPU in this test")
EXAMPLES = os.path.join(REPO, "examples")
TINY_GPT2 = "hf:gpt2:hidden_size=64:num_hidden_layers=2:num_attention_heads=4:vocab_size=512"
TINY_BERT = "hf:bert:hidden_size=64:num_hidden_layers=2:num_attention_heads=4:vocab_size=512:intermediate_size=128"


@pytest.fixture(scope="module")
def torch():
    return pytest.importorskip("torch")


def check(model: str, **options):
    import torch

    from bench_kernels.preflight import check as run_check

    return run_check(model, torch.device("cpu"), num_classes=10, image_size=32, **options)


# -- the check of a spec: one line that names the spec and what is wrong -------------------------------


@pytest.mark.parametrize("factory, expected", [
    ("not_a_model", "the factory returned int 42, neither a torch.nn.Module nor a Workload"),
    ("raises", "the factory raised RuntimeError: no such checkpoint"),
    ("rejected_batch", "the model rejects its batch of 2 ((2, 17) float32, (2, 17) float32): RuntimeError: mat1 and "
                       "mat2 shapes cannot be multiplied"),
    ("vector_loss", "loss(net, batch) must return a scalar floating-point tensor, got a tensor of shape (4,)"),
    ("unused_parameter", "2 parameter(s) got no gradient in a step (aux.weight, aux.bias): DDP fails on such a "
                         "model unless told to look for them; give its workload find_unused_parameters=True"),
    ("no_such_function", "tests.workloads has no function no_such_function"),
])
def test_a_spec_that_cannot_run_is_one_line_naming_it(torch, factory, expected):
    from bench_kernels.sources import WorkloadError

    with pytest.raises(WorkloadError) as caught:
        check(f"tests.workloads:{factory}")
    message = str(caught.value)
    assert message.startswith(f"model tests.workloads:{factory}: ") and expected in message
    assert "\n" not in message


def test_what_the_check_learns_of_a_workload(torch):
    facts = check("tests.workloads:dict_workload")
    assert (facts.kind, facts.image_input, facts.tokens_per_example, facts.flops_given) == ("factory", False, 12.0, False)
    assert facts.params == 16 * 32 + 32 + 32 * 4 + 4
    assert check("tests.tiny_models:tiny_cnn").image_input  # a module: an image classifier, as ever
    declared = check("tests.workloads:unused_parameter_declared")
    assert declared.find_unused_parameters
    assert check("tests.workloads:given_flops").flops_given


def test_the_checker_answers_every_spec_in_one_json_line_each(torch, capsys):
    from bench_kernels.preflight import main

    assert main(["--model", "tests.workloads:dict_workload", "--model", "tests.workloads:raises"]) == 0
    lines = capsys.readouterr().out.splitlines()
    answers = [line for line in lines if "checking" not in json.loads(line)]
    good, bad = (CheckAnswer.from_line(line) for line in answers)
    assert good.facts == WorkloadFacts.from_json(json.loads(answers[0])["facts"]) and good.error is None
    assert bad.facts is None and "no such checkpoint" in bad.error
    # a line as each phase starts, before the answers they lead to: what ddptop bounds the check by
    phases = [_phase(line) for line in lines]
    assert phases == [(None, "importing torch", True),
                      ("tests.workloads:dict_workload", "building its workload", True),
                      ("tests.workloads:dict_workload", "running one training step on 2 examples", False),
                      "answer",
                      ("tests.workloads:raises", "building its workload", True),
                      "answer"]


def _phase(line: str):
    if "checking" not in json.loads(line):
        return "answer"
    progress = CheckProgress.from_line(line)
    return progress.model, progress.doing, progress.setting_up


@pytest.mark.parametrize("factory, expected", [
    ("rejected_batch", "the model rejects its batch of 2"),
    ("unused_parameter", "give its workload find_unused_parameters=True"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_launch(tmp_path, factory, expected):
    out = tmp_path / "run"
    done = ddptop("run", "--headless", "--out", str(out), "--models", f"tests.workloads:{factory}", timeout=120)
    assert done.returncode == 2, done.stderr
    *phases, line = done.stderr.strip().splitlines()  # the check's phases as they began, then its one line
    assert line.startswith(f"ddptop: error: model tests.workloads:{factory}: ") and expected in line
    assert [phase.split(": ")[2].split(" (")[0] for phase in phases] == [
        "importing torch", "building its workload", "running one training step on 2 examples"]
    assert all(phase.startswith(f"ddptop: checking tests.workloads:{factory}: ") for phase in phases)
    assert not out.exists()  # nothing launched, nothing written


# flags of a plan that would launch little; none of these tests gets as far as a launch
SMALL_PLAN = ("--world-sizes", "1", "--batch-sizes", "2", "--launches", "1", "--telemetry-interval", "0",
              "--no-plots")

# a workload whose step never ends: make_batch starts a child (its command line names this file, so the test
# can look for it) and waits, as a batch read from a network share that went away would
STUCK_STEP = """
import subprocess, sys, time
import torch
from ddptop.protocol.workload import Workload

def make():
    def make_batch(n, device):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)", __file__])
        time.sleep(3600)
    return Workload(torch.nn.Linear(2, 2), make_batch, lambda net, batch: net(batch).sum())
"""

# a factory that never returns, as one downloading weights without a network
NEVER_BUILT = "import time\n\ndef make():\n    time.sleep(3600)\n"


def test_a_check_without_progress_for_the_hang_timeout_is_one_line_naming_the_model_and_leaves_nothing(tmp_path):
    factory = tmp_path / "stuck_step.py"
    factory.write_text(STUCK_STEP)
    model = f"{factory}:make"
    out = tmp_path / "run"
    started = time.monotonic()
    done = ddptop("run", "--headless", "--out", str(out), "--models", model, "--hang-timeout", "5", *SMALL_PLAN,
                  timeout=120)
    took = time.monotonic() - started
    assert done.returncode == 2, done.stderr
    *phases, line = done.stderr.strip().splitlines()
    assert line == (f"ddptop: error: model {model}: running one training step on 2 examples made no progress in "
                    "5 s (--hang-timeout); nothing was launched")
    # each phase shown as it began, with what ends it: the plan's hang timeout, at least the startup grace
    # (120 s) while importing torch or building, as a sweep's ranks get
    assert phases[-1] == (f"ddptop: checking {model}: running one training step on 2 examples (no progress for "
                          "5 s ends it: --hang-timeout)")
    assert phases[-2] == (f"ddptop: checking {model}: building its workload (no progress for 120 s ends it: "
                          "--hang-timeout 5, at least 120 s to import torch or build a model)")
    assert took < 60, f"the check took {took:.0f} s"  # its limit was 600 s, whatever --hang-timeout said
    assert not out.exists()
    _assert_nothing_left(str(factory))  # the checker and the child it started: its process group, killed


def _assert_nothing_left(text: str) -> None:
    """No process whose command line holds ``text``, once the killed ones are gone (a moment after SIGKILL)."""
    deadline = time.monotonic() + 5
    while processes_mentioning(text) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_mentioning(text) == []


def _wait_for_output(proc: subprocess.Popen, text: str, timeout: float = 60) -> str:
    """What ``proc`` printed up to the first line holding ``text``."""
    seen = ""
    deadline = time.monotonic() + timeout
    while text not in seen:
        remaining = deadline - time.monotonic()
        assert remaining > 0 and select.select([proc.stdout], [], [], remaining)[0], f"no {text!r} in: {seen}"
        line = proc.stdout.readline()
        assert line, f"ended before {text!r}: {seen}"
        seen += line
    return seen


def test_ctrl_c_while_a_factory_never_returns_exits_130_and_leaves_no_checker(tmp_path):
    factory = tmp_path / "never_built.py"
    factory.write_text(NEVER_BUILT)
    proc = ddptop_process("run", "--headless", "--out", str(tmp_path / "run"), "--models", f"{factory}:make",
                          "--hang-timeout", "5", *SMALL_PLAN)
    try:
        seen = _wait_for_output(proc, "building its workload")
        assert processes_mentioning(f"{factory}:make") != []  # the checker is at it: the factory is being built
        proc.send_signal(signal.SIGINT)
        rest, _ = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, seen + rest
    assert "Traceback" not in seen + rest and rest.strip().splitlines()[-1] == "ddptop: interrupted"
    _assert_nothing_left(str(factory))
    assert not (tmp_path / "run").exists()


def test_a_checker_that_dies_without_an_answer_is_one_line_with_its_exit_status(tmp_path):
    factory = tmp_path / "dies.py"
    factory.write_text("import os\n\ndef make():\n    os._exit(3)\n")
    done = ddptop("run", "--headless", "--out", str(tmp_path / "run"), "--models", f"{factory}:make", *SMALL_PLAN,
                  timeout=120)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1] == (
        f"ddptop: error: model {factory}:make: the check of its workload ended without an answer: exit status 3")


def test_a_factory_that_cannot_be_found_is_refused_without_importing_anything():
    with pytest.raises(PlanError, match="model factory module 'tests.nowhere' cannot be found"):
        build_plan(PlanOptions(models=["tests.nowhere:make_workload"]), NO_GPU, cpu_count=2)


# -- what the plan learns ------------------------------------------------------------------------------


def facts(model: str, **changes) -> WorkloadFacts:
    return WorkloadFacts(**{"model": model, "kind": "factory", **changes})


def test_tokens_per_example_and_channels_last_follow_the_check():
    model = "tests.workloads:dict_workload"
    plan = build_plan(PlanOptions(models=[model], tune=True, variants=["channels_last", "static_graph"]),
                      NO_GPU, cpu_count=2)
    assert "channels_last" in plan.variants  # not checked yet: a factory counts as an image model
    checked = apply_facts(plan, {model: facts(model, tokens_per_example=12.0)})
    assert "channels_last" not in checked.variants and "static_graph" in checked.variants
    assert checked.variant_reasons == {"channels_last": NO_IMAGES} and "channels_last" in checked.variants_skipped
    assert {c.tokens_per_example for c in checked.configs()} == {12.0}
    images = apply_facts(plan, {model: facts(model, image_input=True)})
    assert "channels_last" in images.variants and not images.variant_reasons
    with pytest.raises(PlanError, match=re.escape(f"--channels-last: {model}: its batch holds no 4-D image tensor")):
        apply_facts(build_plan(PlanOptions(models=[model], channels_last=True), NO_GPU, cpu_count=2),
                    {model: facts(model)})


def test_a_transformer_preset_says_why_channels_last_is_left_out_of_tune():
    plan = build_plan(PlanOptions(models=["gpt-tiny"], tune=True), NO_GPU, cpu_count=2)
    assert "channels_last" not in plan.variants and plan.variant_reasons["channels_last"] == NO_IMAGES
    assert {c.tokens_per_example for c in plan.configs()} == {128.0}


def test_hf_specs_and_the_plan_s_overrides():
    spec = parse_hf("hf:llama:hidden_size=256:tie_word_embeddings=false:hidden_act=silu",
                    {"hidden_size": 128, "num_hidden_layers": 2})
    assert spec.model_type == "llama"
    assert spec.overrides == {"hidden_size": 256, "num_hidden_layers": 2, "tie_word_embeddings": False,
                              "hidden_act": "silu"}
    with pytest.raises(SpecError, match="'hidden_size' is not key=value"):
        parse_hf("hf:llama:hidden_size")
    with pytest.raises(PlanError, match="hf_config: no hf:<model_type> model"):
        build_plan(PlanOptions(models=["resnet18"], hf_config={"hidden_size": 64}), NO_GPU, cpu_count=2)


# -- FLOPs: counted on the workload's own forward, loss and backward; what is not counted is named ------


def test_a_workload_s_flops_are_counted_on_its_step_and_match_a_hand_count(torch):
    from bench_kernels.flops import count_step
    from tests.workloads import dict_workload, hand_count_flops

    workload = dict_workload()
    batch = workload.make_batch(8, torch.device("cpu"))
    counted = count_step(torch, lambda: workload.loss(workload.model, batch).backward())
    assert sum(counted.by_kind.values()) == hand_count_flops(8) and counted.uncounted == {}


def test_an_op_without_a_formula_is_named_not_counted_silently(torch):
    from bench_kernels.flops import count_step

    @torch.library.custom_op("ddptop_tests::fused_gelu_linear", mutates_args=())
    def fused(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(x @ w)

    @fused.register_fake
    def _(x, w):
        return x.new_empty(x.shape[0], w.shape[1])

    x, w = torch.randn(4, 8), torch.randn(8, 8)
    counted = count_step(torch, lambda: fused(x, w) @ w)
    assert counted.uncounted == {"ddptop_tests::fused_gelu_linear": 1}
    assert counted.uncounted_lines() == ["ddptop_tests::fused_gelu_linear (1 call)"]
    assert sum(counted.by_kind.values()) == 2 * 4 * 8 * 8  # the matmul outside it, counted


# -- memory: the CPU count follows any batch; FSDP2's units ------------------------------------------


def test_the_cpu_memory_count_follows_a_dict_batch(torch):
    from bench_kernels.memory_cap import workload_activation_bytes
    from bench_kernels.sources import batch_bytes
    from tests.workloads import HIDDEN, OUTPUTS, dict_workload

    workload = dict_workload()
    probe = workload.make_batch(2, torch.device("cpu"))
    counted = workload_activation_bytes(workload.model, lambda: workload.loss(workload.model, probe), 64 / 2)
    assert counted == 64 * (HIDDEN + OUTPUTS) * 4  # the two Linear layers' outputs, in fp32 (ReLU is a function)
    assert batch_bytes(workload.make_batch(64, torch.device("cpu"))) == 64 * (16 + 16 + OUTPUTS) * 4


def test_fsdp2_s_default_units_are_the_blocks_and_a_tied_head_stays_with_the_root(torch):
    pytest.importorskip("transformers")
    from bench_kernels.sources import load_workload
    from bench_kernels.strategy_wrappers import given_units, sharded_units

    def names(model, units):
        lookup = {id(m): name or "<root>" for name, m in model.named_modules()}
        return [lookup[id(u)] for u in units]

    gpt2 = load_workload(TINY_GPT2, 1000, 64, seq_len=16).model
    assert names(gpt2, sharded_units(gpt2)) == ["transformer.wpe", "transformer.h.0", "transformer.h.1",
                                                "transformer.ln_f", "<root>"]
    assert gpt2.lm_head.weight is gpt2.transformer.wte.weight  # tied: left to the root, never split
    # the workload's own units: innermost first, then the root
    chosen = given_units(gpt2, lambda m: [m.transformer, m.transformer.h[1], m.transformer.h[0]])
    assert names(gpt2, chosen) == ["transformer.h.0", "transformer.h.1", "transformer", "<root>"]
    with pytest.raises(ValueError, match="not submodules of its model"):
        given_units(gpt2, lambda m: [torch.nn.Linear(2, 2)])


# -- Hugging Face models from a config ------------------------------------------------------------------


@pytest.mark.parametrize("spec", [TINY_GPT2, TINY_BERT], ids=["decoder", "encoder"])
def test_hf_flops_are_within_2_percent_of_the_independent_count(torch, spec):
    pytest.importorskip("transformers")
    from bench_kernels.flops import count_step
    from bench_kernels.hf import independent_flops
    from bench_kernels.sources import load_workload

    workload = load_workload(spec, 1000, 64, seq_len=32)
    assert all(p.dtype == torch.float32 for p in workload.model.parameters())
    assert workload.model.config.use_cache is False
    batch = workload.make_batch(4, torch.device("cpu"))
    counted = count_step(torch, lambda: workload.loss(workload.model, batch).backward())
    total = sum(counted.by_kind.values())
    assert total == pytest.approx(independent_flops(workload.model, 4, 32), rel=0.02)
    assert counted.uncounted == {} and workload.tokens(batch) == 4 * 32


@pytest.mark.parametrize("spec, expected", [
    ("hf:no_such_architecture", "model hf:no_such_architecture: ValueError: Unrecognized model identifier"),
    ("hf:gpt2:hidden_sise=64", "model hf:gpt2:hidden_sise=64: GPT2Config has no hidden_sise (a misspelt override"),
])
def test_an_hf_spec_that_cannot_be_built_is_one_line(torch, spec, expected):
    pytest.importorskip("transformers")
    from bench_kernels.sources import WorkloadError

    with pytest.raises(WorkloadError) as caught:
        check(spec)
    assert str(caught.value).startswith(expected) and "\n" not in str(caught.value)


# -- real sweeps ------------------------------------------------------------------------------------------


def _entries(summary: dict) -> dict[str, dict]:
    return {c["config_id"]: c for c in summary["configs"]}


@pytest.mark.slow
@pytest.mark.smoke
def test_a_dict_workload_runs_the_sweep_the_strategies_and_counts_its_flops(tmp_path):
    from tests.workloads import hand_count_flops

    model = "tests.workloads:dict_workload"
    done = run_sweep(str(tmp_path / "run"), "--models", model, "--world-sizes", "1,2", "--batch-sizes", "8",
                     "--strategies", "zero1,fsdp2", "--iters", "20", "--warmup", "3", "--launches", "1",
                     "--no-collectives")
    assert done.returncode == 0, done.stderr[-3000:]
    summary = done.summary()
    entries = _entries(summary)
    assert len(entries) == 7 and {e["status"] for e in entries.values()} == {"ok"}
    for entry in entries.values():
        assert entry["flops"]["per_step"] == hand_count_flops(8) and entry["flops"]["source"] == "counted"
        assert entry["tokens_per_example"] == 12.0
        p50, (low, high) = entry["stats"]["sec_iter"]["p50"], entry["stats"]["p50"]["ci"]
        assert low <= p50 <= high
        assert entry["stats"]["tok_sec_total"]["p50"] == pytest.approx(entry["stats"]["ex_sec_total"]["p50"] * 12)
        assert entry["counted_memory_bytes"] > 0
    rows = summary["scaling"][0]["rows"]
    assert [r["world_size"] for r in rows] == [1, 2] and rows[1]["speedup"]["ci"] is not None
    assert rows[1]["exposed_comm_s"] is not None  # compute against communication: the no_sync() phase ran
    assert summary["plan"]["workloads"][model]["tokens_per_example"] == 12.0
    assert "12 tokens per example" in done.stdout and "Strategies:" in done.stdout


@pytest.mark.slow
def test_tune_measures_a_workload_and_says_why_channels_last_is_left_out(tmp_path):
    model = "tests.workloads:dict_workload"
    out = str(tmp_path / "tune")
    done = ddptop("tune", "--headless", "--out", out, "--models", model, "--batch-sizes", "8", "--world-sizes", "2",
                  "--variants", "channels_last,gradient_as_bucket_view", "--iters", "20", "--warmup", "3",
                  "--launches", "2", "--no-plots", timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    (table,) = summary["tuning"]
    assert {r["variant"] for r in table["rows"]} == {"default", "gradient_as_bucket_view"}
    assert table["skipped"] == [{"variant": "channels_last", "why": NO_IMAGES}]
    assert "channels_last (its batch holds no 4-D image tensor" in done.stdout


@pytest.mark.slow
def test_the_batch_sweep_reaches_the_memory_cap_and_an_unused_parameter_runs_once_declared(tmp_path):
    models = ["tests.workloads:dict_workload", "tests.workloads:unused_parameter_declared"]
    done = run_sweep(str(tmp_path / "run"), "--models", ",".join(models), "--world-sizes", "2", "--batch-sizes", "64",
                     "--batch-sweep", "--max-batch", "4096", "--memory-cap-mb", "0.25", "--no-baseline",
                     "--iters", "10", "--warmup", "2", "--launches", "1", "--no-collectives", "--comm-iters", "5")
    summary = done.summary()
    for model in models:
        entries = [e for e in summary["configs"] if e["model"] == model]
        statuses = [(e["batch_size"], e["status"]) for e in entries]
        assert statuses[0] == (64, "ok") and "oom" in {s for _, s in statuses}, statuses
        ok = [e for e in entries if e["status"] == "ok"]
        assert all(e["counted_memory_bytes"] <= 0.25 * 2**20 for e in ok)
        assert ok[0]["communication"] is not None  # DDP's probe ran (with find_unused_parameters=True for one)
    (table,) = [t for t in summary["batch_throughput"] if t["model"] == models[0]]
    assert [r["batch_size"] for r in table["rows"]][:2] == [64, 128]


@pytest.mark.slow
def test_the_readme_example_and_a_hugging_face_model_run_through_ddptop(tmp_path):
    """Under strong scaling: the global batch of 8 split over the ranks, make_batch asked for each share."""
    pytest.importorskip("transformers")
    models = f"my_workload:make_workload,{TINY_GPT2}"
    done = ddptop("run", "--headless", "--out", str(tmp_path / "run"), "--models", models, "--world-sizes", "1,2",
                  "--batch-sizes", "8", "--scaling", "strong", "--seq-len", "32", "--iters", "10", "--warmup", "2",
                  "--launches", "1",
                  "--no-collectives", "--no-plots", env={"PYTHONPATH": os.pathsep.join([REPO, EXAMPLES])}, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(tmp_path / "run" / "summary.json", encoding="utf-8") as handle:
        summary = json.load(handle)
    assert {c["status"] for c in summary["configs"]} == {"ok"} and len(summary["configs"]) == 6
    assert {(c["world_size"], c["batch_size"]) for c in summary["configs"]} == {(1, 8), (2, 4)}
    hf = [c for c in summary["configs"] if c["model"] == TINY_GPT2]
    assert {c["tokens_per_example"] for c in hf} == {32.0}
    assert all(c["flops"]["per_step"] > 0 and not c["flops"]["uncounted_ops"] for c in hf)
    assert "Scaling: my_workload:make_workload" in done.stdout


def test_a_parameter_unused_on_a_later_step_fails_under_ddp_with_the_keyword_that_fixes_it(one_rank_group):
    """Past the one-step check: the kernel's own DDP wrapper and step, the rank's own error report."""
    from bench_kernels.errors import unused_parameter_hint
    from bench_kernels.training import build_training

    from .conftest import tiny_config

    training = build_training(tiny_config(model="tests.workloads:sometimes_unused"), one_rank_group.device("cpu"), 0, 0)
    step = training.step_through(training.net)
    step()  # the head used: every parameter reduced
    step()  # the head unused: DDP notices at the next step
    with pytest.raises(RuntimeError) as caught:
        step()
    assert unused_parameter_hint(caught.value).startswith(
        "Some parameters got no gradient in a step: give the workload find_unused_parameters=True")
    assert unused_parameter_hint(RuntimeError("CUDA error")) == ""
    declared = build_training(tiny_config(model="tests.workloads:unused_parameter_declared"),
                              one_rank_group.device("cpu"), 0, 0)
    assert declared.net.ddptop_keywords["find_unused_parameters"] is True
    for _ in range(3):
        declared.step_through(declared.net)()


# -- what a review of the protocol found ------------------------------------------------------------------


def test_a_message_over_several_lines_stays_one_line_and_bad_fsdp_units_are_caught_before_the_sweep(torch):
    from bench_kernels.sources import WorkloadError

    with pytest.raises(WorkloadError) as caught:
        check("tests.workloads:raises_on_two_lines")
    assert str(caught.value).endswith("the factory raised ValueError: first line second line")
    with pytest.raises(WorkloadError, match=r"fsdp_units\(model\): ValueError: .* not submodules of its model"):
        check("tests.workloads:stranger_units")


def test_a_builder_taking_only_kwargs_gets_num_classes_alone(torch):
    from bench_kernels.sources import accepted_keywords

    offered = {"num_classes": 10, "image_size": 32, "seq_len": 64}
    assert accepted_keywords(lambda **kwargs: None, offered) == {"num_classes": 10}
    assert accepted_keywords(lambda image_size, **kwargs: None, offered) == {"image_size": 32, "num_classes": 10}
    assert check("torchvision.models:regnet_y_400mf").image_input  # a torchvision builder, as a factory


def test_dataparallel_s_stacked_replica_losses_are_averaged(torch):
    from bench_kernels.training import scalar

    stacked = torch.tensor([1.0, 3.0])
    assert scalar(stacked, True).item() == 2.0 and scalar(stacked, False) is stacked
    one = torch.tensor(5.0)
    assert scalar(one, True) is one


def test_seq_len_is_no_token_count_of_a_factory_and_mixed_inputs_refuse_channels_last():
    models = ["gpt-tiny", "tests.workloads:dict_workload"]
    plan = build_plan(PlanOptions(models=models, seq_len=32), NO_GPU, cpu_count=2)
    assert plan.tokens_per_example == {"gpt-tiny": 32.0}  # the factory counts its own tokens, or has none
    checked = apply_facts(plan, {models[1]: facts(models[1])})
    assert {c.model: c.tokens_per_example for c in checked.configs()} == {"gpt-tiny": 32.0, models[1]: None}
    images = ["resnet18", "tests.workloads:dict_workload"]
    mixed = build_plan(PlanOptions(models=images, channels_last=True), NO_GPU, cpu_count=2)
    with pytest.raises(PlanError, match=re.escape("--channels-last: tests.workloads:dict_workload: its batch")):
        apply_facts(mixed, {images[1]: facts(images[1])})


def test_tune_leaves_out_the_find_unused_parameters_variant_a_workload_sets_already():
    from ddptop.run.plan_models import UNUSED_SET

    model = "tests.workloads:unused_parameter_declared"
    plan = build_plan(PlanOptions(models=[model], tune=True), NO_GPU, cpu_count=2)
    checked = apply_facts(plan, {model: facts(model, find_unused_parameters=True)})
    assert "find_unused_parameters" not in checked.variants and "static_graph" in checked.variants
    assert checked.variant_reasons["find_unused_parameters"] == UNUSED_SET


def test_the_check_sees_the_gpus_as_the_ranks_do():
    from ddptop.run.workloads import check_command, check_environment
    from ddptop.telemetry.inventory import GpuInfo

    node = Inventory(gpus=tuple(GpuInfo(i, "NVIDIA H100 80GB HBM3", f"GPU-{i:08d}", 85520809984) for i in range(4)),
                     driver="580.159.04", all_gpu_count=4)
    plan = build_plan(PlanOptions(models=["tests.workloads:dict_workload"], gpus=[2, 3]), node, cpu_count=16)
    assert check_environment(plan)["CUDA_VISIBLE_DEVICES"] == "GPU-00000002,GPU-00000003"
    command = check_command(plan, ["tests.workloads:dict_workload"])
    assert command[command.index("--device") + 1] == "cuda"


def test_the_check_and_the_ranks_get_one_import_path_made_absolute(tmp_path, monkeypatch):
    """A relative PYTHONPATH entry (README's ``PYTHONPATH=examples``) means ddptop's working directory for the
    check and for every rank, which run in their launch directory: one function builds both environments."""
    from ddptop.protocol.workload import STARTED_IN_ENV
    from ddptop.run.launcher import TorchrunLaunch
    from ddptop.run.workloads import check_environment

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(["examples", "", "/opt/lib", "../up", "examples/"]))
    plan = build_plan(PlanOptions(models=["tests.workloads:dict_workload"]), NO_GPU, cpu_count=2)
    checked = check_environment(plan)
    rank = TorchrunLaunch(str(tmp_path / "runs" / "launch"), None, 2).environment()
    assert checked["PYTHONPATH"] == rank["PYTHONPATH"] and checked[STARTED_IN_ENV] == rank[STARTED_IN_ENV] == str(tmp_path)
    entries = rank["PYTHONPATH"].split(os.pathsep)
    assert all(os.path.isabs(entry) for entry in entries), entries
    assert entries[1:] == [str(tmp_path), str(tmp_path / "examples"), "/opt/lib", str(tmp_path.parent / "up")]
    assert entries[0] == REPO  # the kernels' own checkout first, then where ddptop was started


def test_a_rank_that_cannot_import_what_the_check_did_says_both_directories(tmp_path, monkeypatch):
    """The rank's line names its own working directory, ddptop's (where the check imported the module) and the
    import path both had: the check succeeding and a rank failing is ddptop's fault, not the user's."""
    from bench_kernels.sources import import_context
    from ddptop.protocol.workload import STARTED_IN_ENV

    launch = tmp_path / "runs" / "launch"
    launch.mkdir(parents=True)
    monkeypatch.chdir(launch)
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}/examples")
    monkeypatch.setenv(STARTED_IN_ENV, str(tmp_path))
    line = import_context()
    assert f"this rank ran in {launch}" in line and f"check before launch, which imported it, in {tmp_path};" in line
    assert f"PYTHONPATH for both {tmp_path}/examples" in line and "a fault of ddptop's" in line
    monkeypatch.chdir(tmp_path)  # the check itself: where it looked, for the user to correct
    assert import_context() == f"(working directory {tmp_path}, PYTHONPATH {tmp_path}/examples)"


def test_an_upsampling_or_a_gamma_is_not_taken_for_an_uncounted_matmul(torch):
    from bench_kernels.flops import count_step

    model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.Upsample(scale_factor=2, mode="bilinear"))
    x = torch.randn(1, 3, 8, 8)
    assert count_step(torch, lambda: model(x).sum().backward()).uncounted == {}
    assert count_step(torch, lambda: torch.lgamma(x).cummax(0)[0].sum()).uncounted == {}


def test_a_fault_can_aim_at_a_configuration_whose_model_spec_holds_colons():
    from bench_kernels.faults import parse_fault

    fault = parse_fault("crash:rank=1:iter=3:config=hf:llama:hidden_size=64/ddp:phase=analysis")
    assert (fault.rank, fault.iteration, fault.config, fault.phase) == (1, 3, "hf:llama:hidden_size=64/ddp", "analysis")


def test_a_narrow_column_shows_the_part_of_a_spec_that_tells_models_apart():
    from ddptop.protocol.modelspec import display_name

    def short_name(model):
        return display_name(model, short=True)

    assert short_name("mypkg.bench:make_workload") == "bench:make_workload"
    assert short_name("my_workload:make_workload") == "my_workload:make_workload"
    assert short_name(TINY_GPT2) == "hf:gpt2+" and short_name("hf:bert") == "hf:bert"
    assert short_name("resnet50") == "resnet50"
    assert short_name("/home/me/exp/my_workload.py:make_workload") == "my_workload:make_workload"
    assert display_name("/home/me/exp/my_workload.py:make_workload") == "/home/me/exp/my_workload.py:make_workload"


def test_a_script_is_named_as_typed_and_run_by_its_absolute_path(tmp_path):
    """Its spec names it as the user typed it, relative to where ddptop started (two checkouts of one script
    name it alike); the command every rank runs holds its absolute path."""
    from ddptop.protocol.modelspec import Kind, display_name, parse_script, parse_spec, script_command

    (tmp_path / "sub").mkdir()
    (tmp_path / "train.py").write_text("")
    here = str(tmp_path)
    spec, command = parse_script(["train.py", "--batch", "8"], here)
    assert (spec.text, spec.kind, spec.target) == ("script:train.py --batch 8", Kind.SCRIPT, str(tmp_path / "train.py"))
    assert command == (str(tmp_path / "train.py"), "--batch", "8")
    assert display_name(spec.text) == "train.py" == display_name(spec.text, short=True)  # by its file
    assert script_command(spec.text) == "train.py --batch 8"  # the command as typed: the report's command line
    assert parse_spec(spec.text, here) == spec  # read back from a plan: the same spec
    assert parse_script(["./train.py", "--name", "a b"], here)[0].text == "script:train.py --name 'a b'"
    assert parse_script([str(tmp_path / "train.py")], here)[0].text == "script:train.py"  # under it: relative
    assert parse_script(["../train.py"], str(tmp_path / "sub"))[0].text == "script:../train.py"
    assert parse_script(["/elsewhere/train.py"], here)[0].text == "script:/elsewhere/train.py"
    module, command = parse_script(["-m", "pkg.train", "--epochs", "1"], here)
    assert (module.text, module.target, command) == ("script:-m pkg.train --epochs 1", "pkg.train",
                                                     ("-m", "pkg.train", "--epochs", "1"))
    assert display_name(module.text) == "-m pkg.train" and script_command(module.text) == "-m pkg.train --epochs 1"
    # as an older ddptop recorded a script: its absolute path, a module by its name
    assert display_name("script:/home/me/train.py") == "train.py"
    assert script_command("script:/home/me/train.py") == "/home/me/train.py"
    assert display_name("script:pkg.train") == "-m pkg.train" == script_command("script:pkg.train")
    assert display_name("resnet50") == "resnet50" and display_name(TINY_GPT2) == TINY_GPT2


def test_the_report_says_which_flops_a_workload_gave_or_left_uncounted():
    from ddptop.analysis.compute import compute_figures
    from ddptop.report import sections
    from ddptop.report.schema import Summary

    entry = {"mode": "ddp", "world_size": 1, "device": "cpu", "stats": {"sec_iter": {"p50": 0.01}}}

    def config(model: str, info: dict) -> dict:
        return {"label": "1M/1P", "model": model, "batch_size": 8, "config_id": f"{model}/ddp/bs8/n1/gloo",
                "flops": compute_figures(entry, info, "cpu", [])}

    summary = Summary.from_json({"configs": [
        config("pkg:given", {"flops_per_step": 2e9, "flops_source": "workload"}),
        config("pkg:fused", {"flops_per_step": 1e9, "flops_source": "counted",
                             "flops_uncounted": ["mylib::flash_fwd (4 calls)"]}),
        {"label": "1M/1P", "model": "pkg:broken", "batch_size": 8, "config_id": "pkg:broken/ddp/bs8/n1/gloo",
         "flops_note": "the workload's flops(batch) raised KeyError: 'ids'"},
    ]})
    text = sections.text_of("compute", summary)
    assert "pkg:given: FLOPs per step given by its workload (flops(batch)), not counted" in text
    assert ("pkg:fused: ops without a FLOP formula, counted as 0 (FLOP/s and MFU are lower bounds; give the "
            "workload flops(batch)): mylib::flash_fwd (4 calls)") in text
    assert "pkg:broken: no FLOP count (the workload's flops(batch) raised KeyError: 'ids')" in text
