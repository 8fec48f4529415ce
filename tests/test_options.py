"""The one option table: every plan option is a flag, a TOML key and a PlanOptions field, and means the same."""

from __future__ import annotations

import dataclasses

import pytest

from ddptop.cli import _plan_options, build_parser, parse_arguments
from ddptop.run.options import PLAN_OPTIONS, RUN_OPTIONS, Option, PlanOptions, toml_types
from ddptop.run.plan import PlanError, build_plan
from ddptop.run.plan_file import read_plan_file
from ddptop.protocol.vocab import ENDED, FAILED, Mode, Scaling, Status
from ddptop.telemetry.inventory import GpuInfo, Inventory
from tests.conftest import stdlib_only

NO_GPU = Inventory(problem="NVML unavailable: test")
TWO_GPUS = Inventory(gpus=tuple(GpuInfo(i, "Tesla V100-SXM2-16GB", f"GPU-{i:08d}", 16 << 30) for i in range(2)))


def _toml(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    return repr(value)


def _sample(option: Option) -> tuple[object, list[str]]:
    """A value other than the default, and the command-line words that set it."""
    if not option.cli:  # the script after --: its words as they are
        return ["train.py", "--lr", "0.1,0.2"], ["--", "train.py", "--lr", "0.1,0.2"]
    if option.type is bool:
        value = option.action == "store_true"
        return value, [option.spelling]
    if option.is_list:
        items = {int: [3, 5], float: [1.5, 2.0], str: ["a", "b"]}[option.type]
        if option.action == "append":
            return items, [word for item in items for word in (option.spelling, str(item))]
        return items, [option.spelling, ",".join(map(str, items))]
    if option.type is dict:
        value = {"hidden_size": 64, "tie_word_embeddings": False, "hidden_act": "gelu"}
        return value, [option.spelling, "hidden_size=64,tie_word_embeddings=false,hidden_act=gelu"]
    if option.choices:
        value = next(c for c in option.choices if c != option.default)
    else:
        value = {int: 7, float: 2.5, str: "text"}[option.type]
    return value, [option.spelling, str(value)]


def _from_flags(*words: str) -> PlanOptions:
    return _plan_options(parse_arguments(["run", *words]))


def _from_toml(tmp_path, text: str) -> PlanOptions:
    path = tmp_path / "plan.toml"
    path.write_text(text)
    return _plan_options(build_parser().parse_args(["run", "--plan", str(path)]))


def test_every_plan_option_is_a_flag_a_toml_key_and_a_field():
    parser = build_parser()
    run = parser._subparsers._group_actions[0].choices["run"]  # noqa: SLF001 - the generated flags
    flags = {s: action.dest for action in run._actions for s in action.option_strings}  # noqa: SLF001
    names = [o.name for o in PLAN_OPTIONS]
    assert [f.name for f in dataclasses.fields(PlanOptions)] == names == PlanOptions.keys()
    assert list(toml_types()) == names
    for option in RUN_OPTIONS:
        if not option.cli:
            assert option.spelling not in flags and option.name not in flags.values()
            continue
        assert flags[option.spelling] == option.name
        for extra in option.also:
            assert flags[extra.spelling] == option.name
    assert len(RUN_OPTIONS) == len({o.name for o in RUN_OPTIONS})


@pytest.mark.parametrize("option", PLAN_OPTIONS, ids=lambda o: o.name)
def test_each_option_means_the_same_as_a_flag_and_in_toml(tmp_path, option):
    value, words = _sample(option)
    assert value != option.default
    from_flags = _from_flags(*words)
    from_toml = _from_toml(tmp_path, f"{option.name.replace('_', '-')} = {_toml(value)}\n")
    assert getattr(from_flags, option.name) == getattr(from_toml, option.name) == value
    assert from_flags == from_toml == PlanOptions(**{option.name: value})


def test_defaults_are_the_table_s():
    options = PlanOptions()
    for option in PLAN_OPTIONS:
        expected = list(option.default) if isinstance(option.default, tuple) else option.default
        assert getattr(options, option.name) == expected
    assert PlanOptions().backend is not PlanOptions().backend  # lists are never shared between instances


@pytest.mark.parametrize(
    "toml, flags, inventory",
    [
        (  # lists, a store_false flag, a choice and a float
            'models = ["resnet18", "alexnet"]\nbatch-sizes = [8, 16]\nworld-sizes = [1, 2]\nimage-size = 64\n'
            'baseline = false\nscaling = "strong"\ntime-budget = 1.5\nwarmup = 2\n',
            ["--models", "resnet18,alexnet", "--batch-sizes", "8,16", "--world-sizes", "1,2", "--image-size", "64",
             "--no-baseline", "--scaling", "strong", "--time-budget", "1.5", "--warmup", "2"],
            NO_GPU,
        ),
        (  # store_true flags, float lists, a store_const flag, an appended list, a choice
            "bucket-cap-mb = [25, 1]\nbatch-sweep = true\nbatch-sizes = [4]\nmax-batch = 32\ncollectives = []\n"
            'inject = ["crash:rank=1:iter=3"]\non-failure = "stop"\nefficiency-threshold = 0.5\n'
            "compare-dp = true\nhang-timeout = 60\n",
            ["--bucket-cap-mb", "25,1", "--batch-sweep", "--batch-sizes", "4", "--max-batch", "32",
             "--no-collectives", "--inject", "crash:rank=1:iter=3", "--on-failure", "stop",
             "--efficiency-threshold", "0.5", "--compare-dp", "--hang-timeout", "60"],
            NO_GPU,
        ),
        (  # GPU options: --amp with its implied dtype, channels-last, GPU indices, cost weights
            'amp = "bf16"\nchannels-last = true\ngpus = [1]\nsu-gpu-weight = 3\ncores-per-rank = 2.5\nname = "x"\n',
            ["--amp", "--channels-last", "--gpus", "1", "--su-gpu-weight", "3", "--cores-per-rank", "2.5",
             "--name", "x"],
            TWO_GPUS,
        ),
    ],
)
def test_the_same_plan_as_toml_and_as_flags(tmp_path, toml, flags, inventory):
    from_toml = build_plan(_from_toml(tmp_path, toml), inventory, cpu_count=2)
    from_flags = build_plan(_from_flags(*flags), inventory, cpu_count=2)
    assert from_toml == from_flags
    assert from_toml.to_json() == from_flags.to_json()


def test_flags_override_the_plan_file(tmp_path):
    path = tmp_path / "plan.toml"
    path.write_text('models = ["vgg11"]\nscaling = "strong"\nbaseline = false\n')
    options = _plan_options(build_parser().parse_args(["run", "--plan", str(path), "--models", "resnet18"]))
    assert options.models == ["resnet18"] and options.scaling == "strong" and options.baseline is False


@pytest.mark.parametrize(
    "line, message",
    [
        ('iters = "many"', "iters: 'many' is neither auto nor a whole number"),
        ("iters = true", "iters must be int or str"),
        ("precision = true", "precision must be float or int"),
        ('time-budget = "long"', "time-budget must be float or int"),
        ("baseline = 1", "baseline must be bool"),
        ('scaling = ["weak"]', "scaling must be str"),
        ('bucket_cap_mb = ["big"]', "bucket_cap_mb must be a list of float"),
        ("models = [1, 2]", "models must be a list of str"),
        ("world-sizes = [true]", "world-sizes must be a list of int"),
    ],
)
def test_a_wrong_toml_type_is_one_line(tmp_path, line, message):
    path = tmp_path / "plan.toml"
    path.write_text(line + "\n")
    with pytest.raises(PlanError) as error:
        read_plan_file(str(path))
    assert str(error.value) == f"plan file {path}: {message}"


def test_vocabularies_are_their_strings():
    assert Status.OK == "ok" and f"{Mode.NO_DDP}" == "no_ddp" and str(Scaling.WEAK) == "weak"
    assert FAILED <= ENDED and Status.RUNNING not in ENDED
    assert {str(s) for s in ENDED} == {"ok", "failed", "oom", "skipped", "stopped", "not_run", "interrupted"}


def test_options_model_and_vocabularies_import_the_standard_library_only():
    assert not stdlib_only("ddptop.run.options, ddptop.run.plan_records, ddptop.protocol.vocab")


def test_iters_and_warmup_take_auto_or_a_count():
    assert (_from_flags("--iters", "auto").iters, _from_flags("--iters", "30").iters) == ("auto", 30)
    assert _from_flags("--warmup", "Auto", "--rounds", "2").warmup == "auto"
    assert PlanOptions().iters is None  # the plan's default, auto
    from ddptop.errors import UsageError

    with pytest.raises(UsageError, match="--iters: 'many' is neither auto nor a whole number"):
        _from_flags("--iters", "many")
