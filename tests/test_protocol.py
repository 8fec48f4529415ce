"""ddptop.protocol: the launch spec, the run directory's names and the runner marks, as both sides use them."""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys

import pytest

from ddptop.run import rundir
from ddptop.run.launcher import TorchrunLaunch
from ddptop.run.plan_records import ConfigSpec
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.protocol import layout, marks, storage
from ddptop.protocol.launchspec import LAUNCH_SPEC_VERSION, CollectiveSpec, LaunchSpec, LaunchSpecError, RunConfig
from ddptop.protocol.vocab import Mode, Scaling
from ddptop.protocol.wire import EventFileReader, EventWriter
from ddptop.run.signals import STOP_SIGNALS, handle_stop_signals
from ddptop.telemetry.inventory import Inventory

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _plan():
    options = PlanOptions(models=["resnet18"], batch_sizes=[2], world_sizes=[1, 2], device="cpu", backend=["gloo"],
                          warmup=1, iters=2, collectives=["allreduce"])
    return build_plan(options, Inventory(problem="no GPU"), cpu_count=4)


def _spec(path: str = "/tmp/run/launches/02-n2-gloo") -> LaunchSpec:
    plan = _plan()
    launch = plan.launches()[-1]
    return LaunchSpec(
        launch_id=os.path.basename(path),
        events_dir=layout.events_dir(path),
        device=plan.device,
        backend=launch.backend,
        threads_per_rank=plan.threads_per_rank[launch.world_size],
        configs=tuple(RunConfig.from_json(c.to_json()) for c in launch.configs),
        memory_cap_mb=512,
        inject=("crash@resnet18:3",),
        collectives=CollectiveSpec.from_json(plan.collective_spec()),
    )


# -- launch spec -----------------------------------------------------------------------------------------------

def test_launch_spec_round_trips_through_json():
    spec = _spec()
    text = spec.dumps()
    assert LaunchSpec.loads(text) == spec
    data = json.loads(text)
    assert data["version"] == LAUNCH_SPEC_VERSION
    assert data["memory_cap_mb"] == 512.0 and data["inject"] == ["crash@resnet18:3"]
    assert data["collectives"]["ops"] == ["allreduce"]


def test_the_plan_config_is_the_run_config_with_core_properties_only():
    """The kernels read configurations as RunConfig, the plan writes ConfigSpec: one set of fields, one shape
    on disk, the same types on both sides."""
    assert issubclass(ConfigSpec, RunConfig)
    assert dataclasses.fields(ConfigSpec) == dataclasses.fields(RunConfig)
    for config in _plan().configs():
        data = json.loads(json.dumps(config.to_json()))
        read = RunConfig.from_json(data)
        assert read.to_json() == config.to_json() and dataclasses.astuple(read) == dataclasses.astuple(config)
        assert type(read.mode) is Mode and type(read.scaling) is Scaling
        assert ConfigSpec.from_json(data) == config


def test_the_fields_that_name_a_configuration_are_declared_once():
    """ConfigFields is their one declaration: the plan's configuration, launch.json's and the view's snapshot
    take them from it, first and in its order, and config_fields copies them from one record to another."""
    from ddptop.protocol.config_fields import ConfigFields, config_fields
    from ddptop.run.snapshot import ConfigSnapshot

    names = [f.name for f in dataclasses.fields(ConfigFields)]
    for record in (RunConfig, ConfigSpec, ConfigSnapshot):
        assert issubclass(record, ConfigFields) and [f.name for f in dataclasses.fields(record)][:len(names)] == names
    config = _plan().configs()[0]
    assert list(config.to_json())[:len(names)] == names
    assert config_fields(config) == {name: getattr(config, name) for name in names}


def test_a_config_names_an_unknown_mode_in_one_line():
    data = _spec().to_json()
    data["configs"][0]["mode"] = "fsdp"
    with pytest.raises(LaunchSpecError, match=r"configs\[0\]\.mode is 'fsdp', not one of ddp, no_ddp, dp"):
        LaunchSpec.from_json(data)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda d: d.pop("version"), "launch spec version None, but this ddptop reads version 1"),
        (lambda d: d.update(version=99), "launch spec version 99"),
        (lambda d: d.pop("backend"), "backend is missing"),
        (lambda d: d.update(threads_per_rank="2"), "threads_per_rank is a string, not an integer"),
        (lambda d: d.update(threads_per_rank=True), "threads_per_rank is true or false, not an integer"),
        (lambda d: d["configs"][0].pop("model"), "configs[0].model is missing"),
        (lambda d: d["configs"][0].update(iters="auto"), "configs[0].iters is a string, not an integer"),
        (lambda d: d["configs"][0].update(scaling=1), "configs[0].scaling is an integer, not one of weak, strong"),
        (lambda d: d.update(configs={}), "configs is not a list"),
        (lambda d: d["collectives"].update(ops="allreduce"), "collectives.ops is not a list"),
    ],
)
def test_a_spec_it_cannot_read_is_refused_with_the_field(tmp_path, change, message):
    data = _spec().to_json()
    change(data)
    path = tmp_path / layout.SPEC_FILE
    path.write_text(json.dumps(data))
    with pytest.raises(LaunchSpecError) as caught:
        LaunchSpec.read(str(path))
    assert message in str(caught.value) and str(path) in str(caught.value)


def test_a_missing_or_broken_spec_file_is_one_line(tmp_path):
    with pytest.raises(LaunchSpecError, match="cannot read launch spec"):
        LaunchSpec.read(str(tmp_path / "nothing.json"))
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(LaunchSpecError, match="not JSON"):
        LaunchSpec.read(str(tmp_path / "bad.json"))


def test_the_kernel_reads_what_the_launcher_writes(tmp_path):
    """The core writes launch.json through the launcher; the kernel's own reading path (bench_kernels.ddp,
    in a fresh interpreter, as a torchrun worker would) gets back the same spec."""
    run_dir = rundir.create_run_dir(str(tmp_path / "run"), "t")
    path = rundir.launch_dir(run_dir, 2, "n2-gloo", 0)
    spec = _spec(path)
    launch = TorchrunLaunch(path, spec, 2)
    storage.write_atomic(launch.spec_path, spec.dumps())  # what TorchrunLaunch.start writes before torchrun
    assert launch.spec_path == os.path.join(path, "launch.json")
    code = (
        "import json, sys\n"
        "from bench_kernels import ddp\n"
        "spec = ddp.LaunchSpec.read(sys.argv[1])\n"
        "print(json.dumps(spec.to_json()))\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] == 'ddptop')))\n"
    )
    done = subprocess.run([sys.executable, "-c", code, launch.spec_path], cwd=REPO, capture_output=True,
                          text=True, check=True)
    seen, modules = map(json.loads, done.stdout.splitlines())
    assert LaunchSpec.from_json(seen) == spec
    assert all(m == "ddptop" or m.startswith("ddptop.protocol") for m in modules), modules


def test_the_kernel_refuses_a_foreign_spec_with_one_line(tmp_path):
    path = tmp_path / "launch.json"
    path.write_text(json.dumps({"launch_id": "x"}))
    done = subprocess.run([sys.executable, "-m", "bench_kernels.ddp", "--spec", str(path)], cwd=REPO,
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert "launch spec version None" in done.stderr and "Traceback" not in done.stderr


# -- layout ----------------------------------------------------------------------------------------------------

def test_layout_names_match_what_is_on_disk():
    """The names are a contract with run directories already written: they must not drift."""
    assert (layout.PLAN_FILE, layout.RUNNER_FILE, layout.TIMELINE_FILE, layout.SPEC_FILE, layout.AGENT_LOG) == (
        "plan.json", "runner.jsonl", "telemetry.jsonl", "launch.json", "agent.log")
    assert layout.events_path("/r/launches/01-n1-gloo", 3) == "/r/launches/01-n1-gloo/events/rank-3.jsonl"
    assert layout.launch_name(2, "n2-gloo") == "02-n2-gloo"
    assert layout.launch_name(2, "n2-gloo", 1) == "02-n2-gloo-retry1"
    assert layout.launch_path("/r", "02-n2-gloo") == "/r/launches/02-n2-gloo"
    assert layout.launch_of_events_file("/r/launches/02-n2-gloo/events/rank-0.jsonl") == "02-n2-gloo"
    assert layout.agent_log("/l", 1) == "/l/agent-node1.log" and layout.logs_dir("/l", 0) == "/l/logs"
    assert layout.run_file("/r", layout.RUNNER_FILE, 2) == "/r/runner-node2.jsonl"


@pytest.mark.parametrize("name", [layout.RUNNER_FILE, layout.TIMELINE_FILE, layout.LOGS_DIR, layout.AGENT_LOG])
def test_node_file_and_node_of_are_inverse(name):
    for node in (0, 1, 12):
        assert layout.node_of(layout.node_file(name, node), name) == node
    assert layout.node_of("summary.json", name) is None
    assert layout.node_of(layout.node_file(name, 1).replace("1", "x"), name) is None


def test_rank_of_events_file():
    assert layout.rank_of_events_file("rank-12.jsonl") == 12
    assert layout.rank_of_events_file("/a/events/rank-0.jsonl") == 0
    for other in ("rank-.jsonl", "rank-1.jsonl.tmp", "runner.jsonl", "rank-a.jsonl"):
        assert layout.rank_of_events_file(other) is None


def test_run_dir_io_uses_the_layout(tmp_path):
    run_dir = rundir.create_run_dir(str(tmp_path / "run"), "t")
    path = rundir.launch_dir(run_dir, 1, "n1-gloo", 0)
    open(layout.events_path(path, 0), "w").close()
    assert rundir.event_files(run_dir) == [layout.events_path(path, 0)]
    for node in (0, 2):
        os.makedirs(layout.logs_dir(path, node))
    os.makedirs(os.path.join(path, "logs-nodeX"))
    assert rundir.node_log_dirs(path) == [(0, "logs"), (2, "logs-node2")]


# -- runner marks ----------------------------------------------------------------------------------------------

MARKS = [
    marks.LaunchStart("02-n2-gloo", 2, "gloo", ("a", "b"), nodes=2, nproc_per_node=1),
    marks.LaunchEnd("02-n2-gloo", 0, "ok", None, 12.9),
    marks.LaunchEnd("02-n2-gloo", -9, "failed", "torchrun killed by SIGKILL", 3.0, node_rank=1),
    marks.ConfigEnd("a", "failed", "torchrun exit code 1", cause="rank 1 killed by SIGKILL", log_tail=("x", "y")),
    marks.ConfigEnd("b", "not_run", "sweep stopped"),
    marks.SweepEnd("stopped"),
    marks.LaunchJoin("02-n2-gloo", node_rank=1),
    marks.FollowerEnd("done", node_rank=1),
]


@pytest.mark.parametrize("mark", MARKS, ids=lambda m: m.what)
def test_marks_round_trip_through_a_runner_file(tmp_path, mark):
    path = str(tmp_path / layout.RUNNER_FILE)
    writer = EventWriter(path, -1, 0.0)
    writer.emit("mark", data=mark.to_data())
    writer.close()
    (event,) = EventFileReader(path).read_rest()
    assert event["data"]["what"] == mark.what
    assert marks.parse_mark(event) == mark


def test_mark_data_keeps_the_documented_shape():
    assert marks.LaunchEnd("l", 0, "ok", None, 1.5).to_data() == {
        "what": "launch_end", "launch": "l", "exit_code": 0, "status": "ok", "reason": None, "wall_s": 1.5}
    assert marks.LaunchJoin("l", node_rank=1).to_data() == {"what": "launch_join", "launch": "l", "node_rank": 1}
    assert marks.SweepEnd("done").to_data() == {"what": "sweep_end", "status": "done"}


def test_parse_mark_ignores_what_it_does_not_know():
    assert marks.parse_mark({"type": "hello", "data": {"what": "sweep_end"}}) is None
    assert marks.parse_mark({"type": "mark", "data": {"what": "from_the_future", "x": 1}}) is None
    assert marks.parse_mark({"type": "mark", "data": {"what": "launch_start", "launch": "l"}}) is None
    assert marks.parse_mark({"type": "mark", "data": {"what": "config", "config_id": "c", "status": "failed",
                                                      "log_tail": "not a list"}}) is None
    extra = marks.parse_mark({"type": "mark", "data": {"what": "sweep_end", "status": "done", "later": 1}})
    assert extra == marks.SweepEnd("done")


# -- signals ---------------------------------------------------------------------------------------------------

def test_stop_signal_handlers_are_installed_then_restored():
    before = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    seen = []
    with handle_stop_signals(lambda signum, _frame: seen.append(signum)):
        signal.raise_signal(signal.SIGTERM)
        assert all(signal.getsignal(sig) not in (before[sig],) for sig in STOP_SIGNALS)
    assert seen == [signal.SIGTERM]
    assert {sig: signal.getsignal(sig) for sig in STOP_SIGNALS} == before


def test_stop_signal_handlers_are_restored_after_an_error():
    before = signal.getsignal(signal.SIGINT)
    with pytest.raises(RuntimeError), handle_stop_signals(lambda *_: None):
        raise RuntimeError("boom")
    assert signal.getsignal(signal.SIGINT) is before


def test_a_spec_s_kind_says_whether_its_batch_is_ddptop_s_and_each_spec_is_parsed_once(tmp_path, monkeypatch):
    """What differs between a kernel and a script is its kind's: the batch a kernel is given by --batch-sizes
    is in its name, a script's own is not; a plan's configurations say whether they are a script's; a spec
    named again by every table and line is parsed once."""
    from ddptop.protocol import modelspec

    assert modelspec.owns_batch("resnet18") and modelspec.owns_batch("gpt-tiny")
    assert not modelspec.owns_batch("script:train.py --lr 0.1")
    assert modelspec.with_batch("resnet18", 16) == "resnet18 bs16"
    assert modelspec.with_batch("script:train.py --lr 0.1", 0) == "train.py"
    assert modelspec.parse_spec("resnet18", cwd="/") is modelspec.parse_spec("resnet18", cwd="/")
    from ddptop.telemetry.inventory import Inventory

    no_gpu = Inventory(problem="NVML unavailable: test")
    (tmp_path / "train.py").write_text("print('training')\n")
    monkeypatch.chdir(tmp_path)
    scripts = build_plan(PlanOptions(world_sizes=[1, 2], script=["train.py"]), no_gpu, cpu_count=2).configs()
    assert scripts and all(not c.kind.own_batch and c.batch_size == 0 for c in scripts)
    kernels = build_plan(PlanOptions(world_sizes=[1, 2], models=["resnet18"], batch_sizes=[4]), no_gpu,
                         cpu_count=2).configs()
    assert kernels and all(c.kind.own_batch and c.batch_size == 4 for c in kernels)
