"""ZeRO-1 and FSDP2 beside DDP (``--strategies``): the plan, and one real sweep on a gloo group of two ranks.

The sweep is a batch sweep under a CPU memory cap, in one launch: every strategy measured at the same
batches with intervals, each rank's counted memory checked against the model's byte counts, and the largest
batch that fits growing DDP < ZeRO-1 < FSDP2 (what each shards leaves room for layer outputs). It is also the
suite's batch sweep to out of memory. The strategies across two launches: the transformer's sweep and the
tune below.
"""

import json
import os

import pytest

from ddptop.protocol import variants
from ddptop.run.plan import PlanError, PlanOptions, build_plan
from ddptop.telemetry.inventory import Inventory
from tests.conftest import ddptop, run_sweep
from tests.intervals_helpers import flat_shape

STRATEGIES = ("ddp", "zero1", "fsdp2")


def _cpu_plan(**options):
    return build_plan(PlanOptions(device="cpu", **options), Inventory(problem="NVML unavailable: test"), cpu_count=2)


def test_each_strategy_is_a_configuration_at_every_world_size():
    plan = _cpu_plan(models=["resnet18"], batch_sizes=[4], world_sizes=[1, 2],
                     strategies=["fsdp2", "zero1", "fsdp2_no_reshard"], launches=1)
    assert plan.strategies == ("ddp", "fsdp2", "zero1", "fsdp2_no_reshard")  # DDP first, the reference
    ddp = [c for c in plan.configs() if c.mode == "ddp"]
    assert {(c.world_size, c.strategy) for c in ddp} == {(n, s) for n in (1, 2) for s in plan.strategies}
    fsdp = next(c for c in ddp if c.strategy == "fsdp2" and c.world_size == 2)
    assert fsdp.config_id == "resnet18/fsdp2/bs4/n2/gloo" and fsdp.label == "1M/2P fsdp2"
    assert fsdp.comm_iters == 0  # the communication probe times DDP's no_sync(), which FSDP2 has not
    plain = next(c for c in ddp if c.strategy == "ddp" and c.world_size == 2)
    assert plain.config_id == "resnet18/ddp/bs4/n2/gloo" and plain.label == "1M/2P"


def test_an_unknown_strategy_is_one_line_and_exit_2():
    with pytest.raises(PlanError, match="unknown strategy 'zero3'"):
        _cpu_plan(strategies=["zero3"])
    done = ddptop("run", "--headless", "--device", "cpu", "--strategies", "zero1,zero3")
    assert done.returncode == 2
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown strategy 'zero3'" in lines[0] and "fsdp2" in lines[0]


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    run_dir = str(tmp_path_factory.mktemp("strategies") / "run")
    return run_sweep(run_dir, "--models", "resnet18", "--image-size", "32", "--num-classes", "10",
                     "--batch-sweep", "--batch-sizes", "8", "--max-batch", "128", "--memory-cap-mb", "140",
                     "--world-sizes", "2", "--strategies", "zero1,fsdp2,fsdp2_no_reshard", "--warmup", "1", "--iters", "3",
                     "--launches", "1", "--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0",
                     plots=True)


def _by(summary):
    return {(c["strategy"], c["batch_size"]): c for c in summary["configs"]}


@pytest.mark.slow
def test_every_strategy_is_measured_with_intervals(sweep):
    assert sweep.returncode == 0, sweep.stderr + sweep.stdout  # out of memory is the sweep's answer here
    configs = _by(sweep.figures())
    for strategy in STRATEGIES:
        stats = configs[(strategy, 8)]["stats"]
        low, high = stats["ex_sec_total_p50_ci"]
        assert configs[(strategy, 8)]["status"] == "ok" and low <= stats["ex_sec_total"]["p50"] <= high
        assert len(configs[(strategy, 8)]["launches"]) == 1
    # a scaling table per strategy (here of one world size), none mixing strategies
    by_id = {c["config_id"]: c for c in sweep.figures()["configs"]}
    for table in sweep.figures()["scaling"]:
        assert {by_id[r["config_id"]]["strategy"] for r in table["rows"]} == {table.get("strategy", "ddp")}
    assert {t.get("strategy", "ddp") for t in sweep.figures()["scaling"]} == {*STRATEGIES, "fsdp2_no_reshard"}


@pytest.mark.slow
def test_counted_memory_per_rank_matches_the_model_bytes(sweep):
    configs = _by(sweep.figures())
    ddp, zero, fsdp = (configs[(s, 8)] for s in STRATEGIES)
    whole = ddp["grad_bytes"]  # the model's fp32 parameters, in bytes
    held = ddp["counted_memory"]
    assert held["parameters"] == held["gradients"] == held["optimizer_state"] == whole  # all replicated
    assert held["gathered"] == 0
    # ZeRO-1: parameters and gradients whole, the momentum shared out: the ranks' shares add up to the whole
    zero_held = zero["counted_memory"]
    assert zero_held["parameters"] == zero_held["gradients"] == whole
    rest = zero["counted_memory_bytes"] - zero_held["optimizer_state"]  # what every rank holds alike
    shares = [total - rest for total in zero["counted_memory_per_rank"].values()]
    assert sum(shares) == whole and max(shares) < 0.6 * whole  # about half the momentum bytes each at N=2
    # FSDP2: parameters, gradients and momentum sharded (every rank's local shards add up to the whole)
    fsdp_held = fsdp["counted_memory"]
    assert fsdp_held["parameters"] == fsdp_held["gradients"] == fsdp_held["optimizer_state"]
    assert fsdp_held["parameters"] * 2 == pytest.approx(whole, abs=64)
    assert 0 < fsdp_held["gathered"] < whole
    for other in (zero, fsdp):  # the same batch, the same layer outputs: less held per rank than DDP
        assert other["counted_memory"]["activations"] == held["activations"]
        assert max(other["counted_memory_per_rank"].values()) < ddp["counted_memory_bytes"]


@pytest.mark.slow
def test_the_largest_batch_that_fits_grows_with_sharding(sweep):
    summary = sweep.figures()
    largest = {}
    for strategy in (*STRATEGIES, "fsdp2_no_reshard"):
        table = next(t for t in summary["batch_throughput"] if t.get("strategy", "ddp") == strategy)
        fits = [r["batch_size"] for r in table["rows"] if r["status"] == "ok"]
        assert table["first_oom_batch"] == 2 * max(fits)  # the ladder doubles up to the first that does not fit
        oom = _by(summary)[(strategy, table["first_oom_batch"])]
        assert "memory cap" in oom["reason"] and "on the fullest rank" in oom["reason"]
        assert not oom.get("log_tail")  # the launch went on: the end of its log is about later configurations
        largest[strategy] = max(fits)
    assert largest["ddp"] < largest["zero1"] < largest["fsdp2"], largest
    # the ranks agreed on every refusal before any step, so none ended its launch: the one launch planned
    assert os.listdir(os.path.join(sweep.run_dir, "launches")) == ["01-n2-gloo"]
    # the gathered parameters it keeps from the forward into the backward cost it room FSDP2 has, not all of it
    assert largest["ddp"] < largest["fsdp2_no_reshard"] <= largest["fsdp2"], largest
    for strategy, batch in largest.items():  # the count after the steps agrees with the cap's before them
        assert _by(summary)[(strategy, batch)]["counted_memory_bytes"] <= 140 * 2**20


@pytest.mark.slow
def test_the_batch_sweep_stops_at_out_of_memory_and_marks_the_fastest_batch(sweep):
    """The batch sweep as such, on DDP's ladder: the batches double until one runs out of memory under the
    cap, the larger ones are not run, and each ladder's table marks the batch with the most examples/s."""
    summary = sweep.figures()
    status = {c["batch_size"]: c["status"] for c in summary["configs"] if c["strategy"] == "ddp"}
    assert status == {8: "ok", 16: "ok", 32: "oom", 64: "not_run", 128: "not_run"}
    assert _by(summary)[("ddp", 64)]["reason"] == "batch 32 already ran out of memory"
    assert len(summary["batch_throughput"]) == 4  # a table per strategy
    for table in summary["batch_throughput"]:
        measured = {r["batch_size"]: r["ex_sec_total"] for r in table["rows"] if r["ex_sec_total"]}
        assert table["best_batch"] == max(measured, key=measured.get)
    assert "Throughput per batch size" in sweep.stdout
    assert os.path.exists(os.path.join(sweep.run_dir, "plots", "batch_throughput.png"))


@pytest.mark.slow
def test_the_strategy_table_answers_which_is_fastest_and_which_fits_the_largest_batch(sweep):
    summary = sweep.figures()
    (table,) = summary["strategies"]
    rows = {r["strategy"]: r for r in table["rows"]}
    assert list(rows) == [*STRATEGIES, "fsdp2_no_reshard"] and table["world_size"] == 2
    for name, row in rows.items():
        low, high = row["ex_sec_total_ci"]
        assert row["batch_size"] == table["batch_size"] and low <= row["ex_sec_total"] <= high
        assert row["memory_kind"] == "counted" and row["memory_bytes"] == _by(summary)[(name, row["batch_size"])][
            "counted_memory_bytes"]
        if name != "ddp":
            low, high = row["speedup_ci"]
            assert low <= row["speedup"] <= high
            assert row["verdict"] in ("faster", "slower", "within noise", "equivalent")
    top = max(r["largest_batch"] for r in rows.values())
    leaders = [name for name, r in rows.items() if r["largest_batch"] == top]
    assert "fsdp2" in leaders and all(r["largest_batch_fits"] for r in rows.values())  # each sweep reached OOM
    if len(leaders) == 1:
        assert table["fits_largest"] == "fsdp2"
        assert "fsdp2 fits the largest batch under the 140 MiB memory cap" in table["answer"]
    else:
        assert table["fits_largest"] is None and " and ".join(leaders) + " fit the largest batch under" in table[
            "answer"]
    if table["fastest"] is None:
        assert "cannot be told apart" in table["answer"]
    else:
        assert f"{table['fastest']} gives the most examples/s" in table["answer"]
    assert {p["strategy"] for p in table["frontier"]} == {*STRATEGIES, "fsdp2_no_reshard"}
    with open(f"{sweep.run_dir}/summary.md", encoding="utf-8") as handle:
        markdown = handle.read()
    assert "## Strategies: DDP, ZeRO-1, FSDP2" in markdown and "## Memory frontier" in markdown
    assert table["answer"] in sweep.stdout  # the closing text
    assert os.path.exists(os.path.join(sweep.run_dir, "plots", "memory_frontier.png"))


def test_zero1_and_fsdp2_are_candidates_of_tune():
    plan = _cpu_plan(tune=True)
    assert {"zero1", "fsdp2", "fsdp2_no_reshard"} <= set(plan.variants)  # the default search has them
    fsdp = next(c for c in plan.configs() if c.variant == "fsdp2")
    assert fsdp.strategy == "fsdp2" and fsdp.label == "1M/2P fsdp2" and fsdp.comm_iters == 0
    assert fsdp.config_id == "resnet18/ddp/bs16/n2/gloo/fsdp2"  # named as every candidate of tune is
    assert variants.combinable(["zero1", "static_graph", "fsdp2"]) == ["static_graph"]  # recommended alone
    assert "fully_shard(model, reshard_after_forward=False)" in variants.paste_lines(
        variants.variant("fsdp2_no_reshard"), {})


@pytest.mark.slow
def test_tune_measures_a_strategy_against_ddp_as_written(tmp_path):
    done = ddptop("tune", "--headless", "--no-plots", "--out", str(tmp_path / "tune"), "--models",
                  "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "4",
                  "--variants", "zero1,fsdp2", "--launches", "2", "--warmup", "1", "--iters", "4", "--keep-slower",
                  "--telemetry-interval", "0")
    assert done.returncode == 0, done.stderr + done.stdout
    with open(tmp_path / "tune" / "summary.json", encoding="utf-8") as handle:
        summary = flat_shape(json.load(handle))
    (table,) = summary["tuning"]
    rows = {r["variant"]: r for r in table["rows"]}
    assert set(rows) == {"default", "zero1", "fsdp2"}
    for name in ("zero1", "fsdp2"):
        low, high = rows[name]["speedup_ci"]
        assert low <= rows[name]["speedup"] <= high and rows[name]["paste"]
    assert "fully_shard(model)" in "\n".join(rows["fsdp2"]["paste"])
    configs = {c["variant"]: c for c in summary["configs"]}
    assert configs["fsdp2"]["strategy"] == "fsdp2" and configs["fsdp2"]["counted_memory"]["gathered"] > 0
    assert "strategies" not in summary  # tune's candidates are in its own table


@pytest.mark.slow
@pytest.mark.parametrize("size", [(80, 24), (160, 50)])
def test_the_summary_screen_shows_the_strategy_tables_whole(sweep, size):
    """The strategy table, the memory by kind, the largest batches and the frontier keep their columns
    within the screen at 80x24 and 160x50: none needs scrolling sideways."""
    import asyncio

    from ddptop.tui.app import DdptopApp
    from tests.tui_helpers import summary_text

    async def drive():
        app = DdptopApp.for_recorded(sweep.run_dir, open_summary="now")
        async with app.run_test(size=size) as pilot:
            text = await summary_text(app, pilot)
            await pilot.pause(0.3)
            tables = [w for w in app.screen.query(".table") if any(
                key in str(w.render()) for key in ("vs DDP", "inputs+outputs", "largest batch", "memory/rank"))]
            widths = [(w.size.width, w.parent.size.width) for w in tables]
            await pilot.press("q")
        return text, widths

    text, widths = asyncio.run(drive())
    assert "Strategies: resnet18 at N=2 (gloo)" in text and "Memory frontier: resnet18 at N=2" in text
    assert len(widths) == 4 and all(0 < width <= room for width, room in widths), widths


# -- the kernel's parts a CPU checks without a process group; the GPU's through stand-ins -------------------------

def test_fsdp2_gathered_bytes_walk_the_backward():
    """Three units of 20 bytes each, the root holding 6 of its own, on 2 ranks: with resharding the peak is at
    the middle unit (itself and the next gathered, its full gradients, less the 2 units' gradient shards not
    made yet: 40 + 20 - 20); without, at the first (all three still gathered: 60 + 20 - 30)."""
    from types import SimpleNamespace

    from bench_kernels.strategy_wrappers import gathered_bytes

    model = SimpleNamespace(ddptop_units=[20, 20, 20, 6], ddptop_world=2, ddptop_reshard=True)
    assert gathered_bytes(model) == 6 + 40
    model.ddptop_reshard = False
    assert gathered_bytes(model) == 6 + 50
    assert gathered_bytes(SimpleNamespace()) == 0  # DDP, ZeRO-1: nothing gathered


def test_the_count_before_the_first_step_is_what_the_steps_hold():
    """Plain SGD with momentum on one process: before a step the count predicts the gradients and the
    momentum from the parameters; after steps it reads them, and the two agree."""
    import torch

    from bench_kernels.strategy_wrappers import counted_memory

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    inputs = torch.randn(5, 8)
    before = counted_memory(model, optimizer, inputs.numel() * 4, activation_bytes=100)
    for _ in range(2):
        optimizer.zero_grad(set_to_none=True)
        model(inputs).sum().backward()
        optimizer.step()
    after = counted_memory(model, optimizer, inputs.numel() * 4, activation_bytes=100)
    whole = sum(p.numel() * 4 for p in model.parameters())
    assert before == after == {"parameters": whole, "gradients": whole, "optimizer_state": whole, "gathered": 0,
                               "inputs": 5 * 8 * 4, "activations": 100}


def test_fsdp2_units_are_a_resnets_blocks():
    import torch
    import torchvision

    from bench_kernels.strategy_wrappers import sharded_units

    model = torchvision.models.resnet18(num_classes=10)
    units = sharded_units(model)
    blocks = [block for stage in (model.layer1, model.layer2, model.layer3, model.layer4) for block in stage]
    assert units == [model.conv1, model.bn1, *blocks, model.fc, model] and not any(
        isinstance(u, torch.nn.Sequential) for u in units)


def test_fsdp2_mixed_precision_is_bf16_on_a_gpu_with_amp_bf16_only():
    """The GPU path through stand-ins of the device: bf16 parameters, fp32 gradient reduction."""
    from types import SimpleNamespace

    import torch

    from bench_kernels.strategy_wrappers import mixed_precision

    cuda, cpu = SimpleNamespace(type="cuda"), SimpleNamespace(type="cpu")
    policy = mixed_precision(SimpleNamespace(amp="bf16"), cuda)
    assert policy.param_dtype == torch.bfloat16 and policy.reduce_dtype == torch.float32
    assert mixed_precision(SimpleNamespace(amp=None), cuda) is None
    assert mixed_precision(SimpleNamespace(amp="fp16"), cuda) is None  # fp16 needs a scaler FSDP2 does not run
    assert mixed_precision(SimpleNamespace(amp="bf16"), cpu) is None


def test_fsdp2_leaves_a_tied_head_and_embedding_to_the_root():
    """GPT ties its head to its token embedding: neither is a unit of its own (sharding one holder would
    part the two copies); the blocks are units, and the root takes the tied weight, the positions and ln_f."""
    from bench_kernels.strategy_wrappers import sharded_units
    from bench_kernels.transformer import build_transformer

    model = build_transformer("gpt-tiny")
    assert model.head.weight is model.tokens.weight
    assert sharded_units(model) == [*model.blocks, model.ln_f, model]


@pytest.mark.slow
def test_ddp_zero1_and_fsdp2_of_a_small_transformer(tmp_path):
    """The issue's check on a language model: DDP, ZeRO-1 and FSDP2 of gpt-tiny at N=2 on gloo, measured with
    intervals, tokens/s beside examples/s, and less counted memory per rank for the sharded two, by the bytes
    the model holds (FSDP2's parameter shards are half the model's: its tied weight counted once)."""
    done = run_sweep(str(tmp_path / "run"), "--models", "gpt-tiny", "--seq-len", "64", "--batch-sizes", "4",
                     "--world-sizes", "2", "--strategies", "zero1,fsdp2", "--warmup", "1", "--iters", "4",
                     "--launches", "2", "--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0")
    assert done.returncode == 0, done.stderr + done.stdout
    configs = {c["strategy"]: c for c in done.figures()["configs"] if c["mode"] == "ddp"}
    assert set(configs) == set(STRATEGIES)
    for config in configs.values():
        stats = config["stats"]
        low, high = stats["ex_sec_total_p50_ci"]
        assert config["status"] == "ok" and low <= stats["ex_sec_total"]["p50"] <= high
        assert len(config["launches"]) == 2 and stats["p50_levels"] == "launches"  # intervals across launches
        assert stats["tok_sec_total"]["p50"] == pytest.approx(64 * stats["ex_sec_total"]["p50"])
    whole = configs["ddp"]["grad_bytes"]
    assert configs["ddp"]["counted_memory"]["parameters"] == whole
    assert configs["fsdp2"]["counted_memory"]["parameters"] * 2 == pytest.approx(whole, abs=64)
    for sharded in ("zero1", "fsdp2"):
        assert max(configs[sharded]["counted_memory_per_rank"].values()) < configs["ddp"]["counted_memory_bytes"]
    import csv

    with open(os.path.join(done.run_dir, "summary.csv"), encoding="utf-8") as handle:
        rows = {row["config_id"]: row for row in csv.DictReader(handle)}
    for strategy, config in configs.items():  # the CSV names each row's strategy and its counted memory
        row = rows[config["config_id"]]
        assert (row["strategy"], int(row["counted_memory_bytes"])) == (strategy, config["counted_memory_bytes"])
