import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from tests.conftest import REPO, ddptop, imports_in_fresh_interpreter, processes_mentioning, stdlib_only


def test_core_imports_neither_torch_nor_textual():
    packages, _ = imports_in_fresh_interpreter(
        "ddptop.cli, ddptop.headless, ddptop.run.session, ddptop.run.sweep, ddptop.run.launcher, ddptop.run.plan, "
        "ddptop.analysis.stats, ddptop.analysis.scaling, ddptop.report.build, ddptop.report.store, "
        "ddptop.report.sections, ddptop.telemetry.inventory, ddptop.protocol.wire, ddptop.telemetry.monitor, "
        "ddptop.telemetry.topology, ddptop.telemetry.gpus_command, ddptop.telemetry.fake.nvml, "
        "ddptop.live.live_run, ddptop.protocol.modelspec, bench_kernels.sources"
    )
    assert not packages & {"torch", "torchvision", "textual"}


def test_the_live_view_starts_without_numpy_scipy_or_matplotlib():
    """The first frame waits for every import: the statistics and plots load when a summary is built."""
    packages, _ = imports_in_fresh_interpreter("ddptop.tui.app, ddptop.control, ddptop.cli")
    assert not packages & {"torch", "numpy", "scipy", "matplotlib"}


def test_wire_is_standard_library_only():
    assert not stdlib_only("ddptop.protocol.wire")


@pytest.mark.parametrize(
    "args, message",
    [
        (["run", "--models", "resnet9000"], "unknown model 'resnet9000'"),
        (["run", "--batch-sizes", "0"], "batch size must be at least 1"),
        (["run", "--world-sizes", "two"], "is not a comma-separated list of int"),
        (["run", "--backend", "nccl"], "nccl needs GPUs"),
        (["run", "--bogus-flag"], "unrecognized arguments: --bogus-flag"),
        (["run", "--fps", "0"], "--fps must be positive"),
        (["run", "--telemetry-interval", "-1"], "--telemetry-interval must be 0 (off) or positive"),
        (["gpus", "--interval", "0"], "--interval must be between 0 and 60 seconds"),
        (["--models", "resnet18", "--scaling", "strong", "--batch-sizes", "3"], "must divide evenly"),
        (["report", "/nonexistent/run"], "is neither a run directory nor a summary file"),
        (["run", "--plan", "/nonexistent/plan.toml"], "does not exist"),
        (["run", "--out", "/etc/passwd/run"], "cannot create run directory /etc/passwd/run"),
        (["run", "--inject", "boom"], "unknown fault 'boom'"),
        (["run", "--inject", "crash:iter=soon"], "iter must be a non-negative integer"),
        (["run", "--inject", "slow:rank=1"], "slow needs factor=F"),
        (["run", "--inject", "slow:rank=1:factor=0.5"], "factor must be a number above 1"),
        (["run", "--hang-timeout", "0"], "--hang-timeout must be positive"),
        (["run", "--coll-max-bytes", "5XB"], "is not a size"),
        (["run", "--memory-cap-mb", "-5"], "--memory-cap-mb must be positive"),
        (["run", "--max-batch", "64"], "--max-batch only applies with --batch-sweep"),
        (["plot", "/nonexistent/run"], "is neither a run directory nor a summary file"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args, message):
    done = ddptop(*args)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddptop: error: ")
    assert message in lines[0]
    assert "Traceback" not in done.stderr


# a script that would leave a file beside it if it ran (ddptop only compiles it before a launch)
SCRIPT_RAN = "import pathlib\npathlib.Path(__file__).with_name('ran').write_text('ran')\n"


@pytest.mark.parametrize(
    "after, message",
    [
        (["--", "nope.py"], "script {tmp}/nope.py: no such file"),
        (["--", "broken.py", "--lr", "1"], "script {tmp}/broken.py: does not parse: "),
        (["--", "-m", "no_such_package.train"], "script module 'no_such_package.train' cannot be found"),
        (["--"], "no script after --"),
        (["--", "-m"], "no script after --"),
        (["--models", "resnet18", "--", "ok.py"], "--models describes ddptop's own kernels, not a script"),
        (["--batch-sizes", "8", "--", "ok.py"], "--batch-sizes describes ddptop's own kernels"),
        (["--models", "resnet18", "--batch-sizes", "8", "--", "ok.py"], "--models, --batch-sizes describe"),
        (["--script-to-end"], "--script-to-end needs a script"),
    ],
)
def test_a_bad_script_command_is_one_line_exit_2_and_launches_nothing(tmp_path, after, message):
    (tmp_path / "ok.py").write_text(SCRIPT_RAN)
    (tmp_path / "broken.py").write_text(SCRIPT_RAN + "def train(:\n    pass\n")
    run_dir = tmp_path / "run"
    done = ddptop("run", "--headless", "--out", str(run_dir), "--world-sizes", "1", *after, cwd=str(tmp_path))
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddptop: error: "), done.stderr
    assert message.format(tmp=tmp_path) in lines[0]
    assert "broken.py" not in after or lines[0].endswith("(line 3)")  # the file and the line
    assert not (run_dir / "launches").exists() and not (tmp_path / "ran").exists()
    assert processes_mentioning(str(tmp_path)) == []  # no torchrun, no rank


def test_out_dir_is_never_overwritten(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    done = ddptop("run", "--headless", "--out", str(tmp_path))
    assert done.returncode == 2
    assert "already exists and is not empty" in done.stderr
    assert os.listdir(tmp_path) == ["precious.txt"]


def test_unknown_summary_schema_version_is_refused(tmp_path):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"schema": "ddptop.summary", "schema_version": 99}))
    done = ddptop("report", str(path))
    assert done.returncode == 2
    assert "schema version 99" in done.stderr
    path.write_text("{ truncated")
    assert "not a readable JSON summary" in ddptop("report", str(path)).stderr


def test_report_of_a_directory_that_is_not_a_run(tmp_path):
    done = ddptop("report", str(tmp_path))
    assert done.returncode == 2
    assert "not a ddptop run directory" in done.stderr


def test_kernels_lists_the_models_and_help_works():
    done = ddptop("kernels")
    assert done.returncode == 0
    for name in ("resnet50", "resnext50_32x4d", "vgg16", "alexnet", "densenet121", "squeezenet1_0", "vit_b_16"):
        assert name in done.stdout
    help_text = ddptop("run", "--help").stdout
    for flag in ("--headless", "--models", "--world-sizes", "--scaling", "--bucket-cap-mb", "--no-baseline"):
        assert flag in help_text


def test_diff_bad_input_is_one_line(tmp_path):
    missing = ddptop("diff", str(tmp_path / "nope"), str(tmp_path / "nope2"))
    assert missing.returncode == 2 and missing.stderr.count("\n") == 1 and "neither a run directory" in missing.stderr
    future = tmp_path / "summary.json"
    future.write_text(json.dumps({"schema": "ddptop.summary", "schema_version": 99}))
    done = ddptop("diff", str(future), str(future))
    assert done.returncode == 2 and "schema version 99" in done.stderr and "Traceback" not in done.stderr
    assert ddptop("diff", str(future), str(future), "--alpha", "2").returncode == 2


def test_damaged_summary_and_corrupt_events(tmp_path):
    damaged = tmp_path / "summary.json"
    damaged.write_text(json.dumps({"schema": "ddptop.summary", "schema_version": 1, "configs": {}}))
    done = ddptop("report", str(damaged))
    assert done.returncode == 2 and "is damaged" in done.stderr and "Traceback" not in done.stderr
    # a run whose events file took garbage (a disk hiccup, a killed writer): the readers skip and count it
    run = tmp_path / "run"
    shutil.copytree(os.path.join(REPO, "tests", "data", "recorded-run"), run)
    events = next(run.glob("launches/*/events/rank-0.jsonl"))
    with open(events, "ab") as handle:
        handle.write(b"\x00\xff not json\n{\"v\": 99}\n")
    done = ddptop("report", str(run), "--rebuild", "--format", "json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["malformed_event_lines"] == 2


@pytest.mark.parametrize("writer", ["alive here", "on another host", "dead", "saving", "saving elsewhere",
                                    "saved nothing"])
def test_report_saves_a_rebuilt_summary_only_where_no_ddptop_will(tmp_path, writer):
    """A run without summary.json: its tables are printed from the events either way; the summary is
    written beside them only when its writer is known gone. A live writer saves its own when the sweep ends
    (and a watcher takes summary.json for that final one)."""
    run = tmp_path / "run"
    shutil.copytree(os.path.join(REPO, "tests", "data", "recorded-run"), run)
    runner = run / "runner.jsonl"
    lines = [json.loads(line) for line in runner.read_text().splitlines()]
    hello, marks = lines[0], [e for e in lines[1:] if e["data"]["what"] != "sweep_end"]  # not ended
    end = next(e for e in lines if e.get("data", {}).get("what") == "sweep_end")
    if writer in ("saving", "saving elsewhere"):  # ended a moment ago; its ddptop writes summary.json now
        marks.append(dict(end, t=time.time()))
    elif writer == "saved nothing":  # ended longer ago than a save takes, its ddptop still open (a full disk)
        marks.append(dict(end, t=time.time() - 120))
    if writer in ("alive here", "saving", "saved nothing"):  # this test's own process, started before the hello's time
        hello.update(host=os.uname().nodename, pid=os.getpid(), t=time.time())
    elif writer in ("on another host", "saving elsewhere"):
        hello.update(host="gpu-node-elsewhere")
    else:  # a pid of this host that is gone
        done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        hello.update(host=os.uname().nodename, pid=int(done.stdout))
    runner.write_text("".join(json.dumps(e) + "\n" for e in [hello, *marks]))
    done = ddptop("report", str(run))
    assert done.returncode == 0 and "Scaling: resnet18" in done.stdout
    if writer in ("dead", "saved nothing"):
        assert os.path.exists(run / "summary.json") and done.stderr == ""
        return
    assert not os.path.exists(run / "summary.json")
    if writer in ("saving", "saving elsewhere"):
        assert done.stderr == (f"ddptop: the sweep in {run} ended less than 30 s ago and its ddptop (pid "
                               f"{hello['pid']} on {hello['host']}) saves the summary: this report is built from the "
                               "events and is not saved (--rebuild saves it)\n")
        return
    runs = "still runs" if writer == "alive here" else "may still run (on another host)"
    assert done.stderr == (f"ddptop: the sweep in {run} has not ended and its ddptop (pid {hello['pid']} on "
                           f"{hello['host']}) {runs}: this report is of the steps so far and is not saved "
                           "(--rebuild saves it)\n")
    assert ddptop("report", str(run), "--rebuild").returncode == 0 and os.path.exists(run / "summary.json")


def test_plot_draws_speedup_only_over_two_world_sizes_and_says_when_there_is_nothing(tmp_path):
    """`ddptop plot` of a saved summary: speedup and efficiency for the recorded run (N=1 and 2); for the same run
    cut to N=1 (a speedup of 1 by definition) no plot, and a line saying so."""
    run = str(tmp_path / "run")
    shutil.copytree(os.path.join(REPO, "tests", "data", "recorded-run"), run)
    summary = json.loads(ddptop("report", run, "--format", "json").stdout)
    done = ddptop("plot", run)
    assert done.returncode == 0, done.stderr
    assert {os.path.basename(p) for p in done.stdout.split()} >= {"speedup.png", "speedup.svg", "efficiency.png"}
    for table in summary["scaling"]:
        table["rows"] = table["rows"][:1]
        table.pop("projection", None)
    summary["configs"] = [c for c in summary["configs"] if c["world_size"] == 1]
    one = tmp_path / "one"
    one.mkdir()
    (one / "summary.json").write_text(json.dumps(summary), encoding="utf-8")
    done = ddptop("plot", str(one / "summary.json"))
    assert done.returncode == 0 and done.stdout == "", done.stdout + done.stderr
    assert done.stderr.strip() == ("ddptop plot: nothing to draw in this summary "
                                   "(speedup and efficiency need two world sizes)")


def test_plot_makes_its_out_folder_as_run_and_doctor_do_and_refuses_a_file(tmp_path):
    recorded = os.path.join(REPO, "tests", "data", "recorded-run")
    done = ddptop("plot", recorded, "--out", str(tmp_path / "new" / "plots-x"))
    assert done.returncode == 0, done.stderr
    assert os.path.isfile(tmp_path / "new" / "plots-x" / "plots" / "speedup.svg")
    (tmp_path / "a-file").write_text("x")
    done = ddptop("plot", recorded, "--out", str(tmp_path / "a-file"))
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr == f"ddptop: error: cannot create --out {tmp_path / 'a-file'}: file exists\n", done.stderr
