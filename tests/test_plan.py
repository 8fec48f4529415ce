import pytest

from ddptop.run.plan import PlanError, PlanOptions, build_plan, default_world_sizes
from ddptop.run.plan_file import read_plan_file
from ddptop.telemetry.inventory import GpuInfo, Inventory

NO_GPU = Inventory(problem="NVML unavailable: test")


def gpus(n: int) -> Inventory:
    return Inventory(gpus=tuple(GpuInfo(i, "Tesla V100-SXM2-16GB", f"GPU-{i:08d}", 16 << 30) for i in range(n)))


def test_cpu_defaults():
    plan = build_plan(PlanOptions(), NO_GPU, cpu_count=2)
    assert plan.device == "cpu" and plan.backends == ("gloo",)
    assert plan.world_sizes == (1, 2)
    assert plan.models == ("resnet18",)
    assert plan.threads_per_rank == {1: 2, 2: 1}


def test_gpu_defaults_follow_the_visible_gpus():
    plan = build_plan(PlanOptions(), gpus(8), cpu_count=64)
    assert plan.device == "cuda" and plan.backends == ("nccl",)
    assert plan.world_sizes == (1, 2, 4, 8)
    assert plan.models == ("resnet50",) and plan.batch_sizes == (32,) and plan.image_size == 224
    assert default_world_sizes(6) == [1, 2, 4, 6]
    assert build_plan(PlanOptions(gpus=[1, 3]), gpus(8), cpu_count=64).world_sizes == (1, 2)


def test_launches_group_configurations_by_world_size_with_baseline_at_one():
    plan = build_plan(
        PlanOptions(models=["resnet18", "alexnet"], batch_sizes=[8, 16], world_sizes=[1, 2], image_size=64),
        NO_GPU,
        cpu_count=2,
    )
    launches = plan.launches()
    # three launches of each world size, interleaved: 1 2, then 2 1, then 1 2, the configurations' order rotated
    assert [(l.world_size, l.backend, l.replicate) for l in launches] == [
        (1, "gloo", 0), (2, "gloo", 0), (2, "gloo", 1), (1, "gloo", 1), (1, "gloo", 2), (2, "gloo", 2)]
    first = [c.config_id for c in launches[0].configs]
    assert [c.config_id for c in launches[3].configs] == [*first[1:], first[0]]
    assert [c.config_id for c in launches[4].configs] == [*first[2:], *first[:2]]
    assert {c.round for c in launches[3].configs} == {1} and {c.round for c in launches[4].configs} == {2}
    assert {c.rounds for c in plan.configs()} == {3}
    assert len(launches[0].configs) == 2 * 2 * 2  # no_ddp + ddp per model and batch
    assert {c.mode for c in launches[1].configs} == {"ddp"}
    ids = [c.config_id for c in plan.configs()]
    assert len(ids) == len(set(ids)) == 12
    labels = {c.label for c in plan.configs()}
    assert labels == {"no ddp", "1M/1P", "1M/2P"}


def test_strong_scaling_splits_the_global_batch():
    plan = build_plan(PlanOptions(scaling="strong", batch_sizes=[64], world_sizes=[1, 2, 4]), NO_GPU, 4)
    per_rank = {c.world_size: c.batch_size for c in plan.configs() if c.mode == "ddp"}
    assert per_rank == {1: 64, 2: 32, 4: 16}
    assert {c.global_batch for c in plan.configs()} == {64}


@pytest.mark.parametrize(
    "options, inventory, message",
    [
        (PlanOptions(models=["resnet9000"]), NO_GPU, "unknown model 'resnet9000'"),
        (PlanOptions(models=["no_such_pkg.mod:f"]), NO_GPU, "cannot be found"),
        (PlanOptions(models=["not a factory:"]), NO_GPU, "package.module:factory"),
        (PlanOptions(batch_sizes=[0]), NO_GPU, "batch size must be at least 1"),
        (PlanOptions(world_sizes=[0]), NO_GPU, "world size must be at least 1"),
        (PlanOptions(world_sizes=[16]), gpus(8), "world size 16 needs 16 GPUs, but 8 are usable"),
        (PlanOptions(scaling="strong", batch_sizes=[30], world_sizes=[1, 4]), NO_GPU, "must divide evenly"),
        (PlanOptions(backend=["nccl"]), NO_GPU, "nccl needs GPUs"),
        (PlanOptions(backend=["mpi"]), NO_GPU, "--backend must be"),
        (PlanOptions(device="cuda"), NO_GPU, "no GPU is usable"),
        (PlanOptions(amp="bf16"), NO_GPU, "--amp needs a GPU"),
        (PlanOptions(models=["vit_b_16"], image_size=40), NO_GPU, "divisible by its patch size 16"),
        (PlanOptions(models=["alexnet"], image_size=32), NO_GPU, "at least 64"),
        (PlanOptions(iters=0), NO_GPU, "--iters must be at least 1"),
        (PlanOptions(warmup=0, time_budget=5), NO_GPU, "at least one warm-up"),
        (PlanOptions(iters="lots"), NO_GPU, "--iters must be auto or a whole number (got 'lots')"),
        (PlanOptions(warmup=-1), NO_GPU, "--warmup cannot be negative"),
        (PlanOptions(precision=0), NO_GPU, "--precision must be a fraction between 0 and 1"),
        (PlanOptions(precision=1.5), NO_GPU, "--precision must be a fraction between 0 and 1"),
        (PlanOptions(min_iters=0), NO_GPU, "--min-iters must be at least 1"),
        (PlanOptions(min_iters=50, max_iters=20), NO_GPU, "--max-iters 20 is below --min-iters 50"),
        (PlanOptions(max_time_per_config=0), NO_GPU, "--max-time-per-config must be positive"),
        (PlanOptions(max_warmup=-2), NO_GPU, "--max-warmup cannot be negative"),
        (PlanOptions(rounds=0), NO_GPU, "--rounds must be at least 1"),
        (PlanOptions(launches=0), NO_GPU, "--launches must be at least 1"),
        (PlanOptions(launches=2, rounds=3), NO_GPU, "--rounds is the old name of --launches"),
        (PlanOptions(bucket_cap_mb=0), NO_GPU, "--bucket-cap-mb must be positive"),
        (PlanOptions(gpus=[0, 9]), gpus(8), "--gpus 9: only GPUs 0..7"),
        (PlanOptions(gpus=[1, 1]), gpus(8), "twice"),
    ],
)
def test_invalid_plans_are_one_clear_line(options, inventory, message):
    with pytest.raises(PlanError) as error:
        build_plan(options, inventory, cpu_count=2)
    assert message in str(error.value)
    assert "\n" not in str(error.value)


def test_toml_plan_and_its_errors(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text('models = ["resnet18", "vgg11"]\nbatch-sizes = 8\nscaling = "strong"\nwarmup = 1\n')
    values = read_plan_file(str(path))
    assert values == {"models": ["resnet18", "vgg11"], "batch_sizes": [8], "scaling": "strong", "warmup": 1}
    plan = build_plan(PlanOptions(**values), NO_GPU, cpu_count=2)
    assert plan.scaling == "strong" and plan.models == ("resnet18", "vgg11")

    path.write_text("models = [1, 2]\n")
    with pytest.raises(PlanError, match="models must be a list of str"):
        read_plan_file(str(path))
    path.write_text("colour = 'blue'\n")
    with pytest.raises(PlanError, match="unknown key 'colour'"):
        read_plan_file(str(path))
    path.write_text("models = [\n")
    with pytest.raises(PlanError, match="not valid TOML"):
        read_plan_file(str(path))
    with pytest.raises(PlanError, match="does not exist"):
        read_plan_file(str(tmp_path / "missing.toml"))


def test_plan_json_round_trip():
    from ddptop.run.plan_records import Plan

    plan = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1, 2]), NO_GPU, cpu_count=2)
    again = Plan.from_json(plan.to_json())
    assert again == plan
    assert [c.config_id for c in again.configs()] == [c.config_id for c in plan.configs()]


def test_measurement_is_adaptive_by_default_with_the_device_s_limits():
    cpu = build_plan(PlanOptions(), NO_GPU, cpu_count=2)
    assert (cpu.warmup, cpu.iters, cpu.time_budget) == (None, None, None)  # auto, auto
    assert (cpu.precision, cpu.min_iters, cpu.max_iters, cpu.max_time_per_config, cpu.max_warmup, cpu.launches_per_config) == (
        0.05, 10, 200, 20.0, 50, 3)
    assert cpu.comm_iters == 5  # as with the former fixed 20 steps
    gpu = build_plan(PlanOptions(), gpus(2), cpu_count=8)
    assert (gpu.precision, gpu.max_iters, gpu.max_time_per_config, gpu.comm_iters) == (0.02, 1000, 60.0, 12)
    config = cpu.configs()[0]
    # each of the three launches measures a third of the steps, to sqrt(3) times the precision
    assert config.adaptive and (config.max_iters, config.max_time_per_config, config.rounds) == (67, 20.0 / 3, 3)
    assert config.precision == pytest.approx(0.05 * 3 ** 0.5)


def test_fixed_counts_and_a_time_budget_are_kept_as_given():
    plan = build_plan(PlanOptions(warmup=3, iters=20), NO_GPU, cpu_count=2)
    assert (plan.warmup, plan.iters) == (3, 20) and not plan.configs()[0].adaptive
    assert build_plan(PlanOptions(warmup="auto", iters="AUTO"), NO_GPU, cpu_count=2).iters is None
    budget = build_plan(PlanOptions(time_budget=2.0), NO_GPU, cpu_count=2)  # auto is then not used
    assert budget.time_budget == 2.0 and not budget.configs()[0].adaptive


def test_a_plan_file_may_say_auto(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text('iters = "auto"\nwarmup = 4\nprecision = 0.01\nrounds = 3\nmax-time-per-config = 30\n')
    values = read_plan_file(str(path))
    assert values == {"iters": "auto", "warmup": 4, "precision": 0.01, "rounds": 3, "max_time_per_config": 30}
    plan = build_plan(PlanOptions(**values), NO_GPU, cpu_count=2)
    # rounds are the old name of launches
    assert (plan.iters, plan.warmup, plan.precision, plan.launches_per_config, plan.max_time_per_config) == (
        None, 4, 0.01, 3, 30.0)


def test_a_plan_json_from_before_adaptive_measurement_reads_as_fixed_counts():
    from ddptop.run.plan_records import Plan

    data = build_plan(PlanOptions(warmup=3, iters=20), NO_GPU, cpu_count=2).to_json()
    for key in ("precision", "min_iters", "max_iters", "max_time_per_config", "max_warmup", "launches_per_config"):
        del data[key]
    plan = Plan.from_json(data)
    assert (plan.warmup, plan.iters, plan.launches_per_config) == (3, 20, 1) and not plan.configs()[0].adaptive


def test_a_script_plan_runs_the_script_alone_at_each_world_size_and_survives_its_json(tmp_path, monkeypatch):
    import json
    import os

    from ddptop.run.plan_records import Plan

    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    monkeypatch.chdir(tmp_path)
    plan = build_plan(PlanOptions(script=["train.py", "--lr", "0.1"], world_sizes=[1, 2]), NO_GPU, cpu_count=2)
    assert plan.script == (os.path.join(str(tmp_path), "train.py"), "--lr", "0.1")
    assert plan.script_dir == str(tmp_path)
    configs = plan.configs()
    # one configuration per world size: no no-DDP baseline, no variant, the script's batch its own (0 here)
    assert [(c.world_size, c.mode, c.batch_size) for c in configs] == [(1, "ddp", 0), (2, "ddp", 0)]
    # named by its file, not by the absolute path the ranks run nor by its arguments (the command's, as typed)
    assert [c.config_id for c in configs] == ["train.py/n1/gloo", "train.py/n2/gloo"]
    assert plan.models == ("script:train.py --lr 0.1",)
    assert all(len(launch.configs) == 1 for launch in plan.launches())
    # its profiler trace runs over its own steps after the measured ones (3 by default, as a kernel's)
    assert (plan.comm_iters, plan.trace_steps, plan.collectives, plan.baseline) == (0, 3, (), False)
    assert Plan.from_json(json.loads(json.dumps(plan.to_json()))) == plan
    traced = build_plan(PlanOptions(script=["train.py"], trace_steps=5), NO_GPU, cpu_count=2)
    assert traced.trace_steps == 5 and all(c.trace_steps == 5 for c in traced.configs())
    assert build_plan(PlanOptions(script=["train.py"], trace_steps=0), NO_GPU, cpu_count=2).trace_steps == 0
    # run to its own end: no step follows the measured ones to trace
    assert build_plan(PlanOptions(script=["train.py"], script_to_end=True), NO_GPU, cpu_count=2).trace_steps == 0
