import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass

import psutil
import pytest

from tests import cores

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# every summary a test writes, in this process, a CLI subprocess or a sweep's, is checked for contradictions
# (ddptop.report.consistency): one that contradicts itself fails the test with the figure's path and values
os.environ["DDPTOP_CHECK_SUMMARIES"] = "1"
CORES: cores.CoreShare | None = None  # this worker's share of the cores (pytest-xdist), set at configure


def pytest_configure(config):
    global CORES
    CORES = cores.CoreShare.for_worker(config)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(items):
    cores.order_and_group(items)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """Setup (a shared sweep too), the test and teardown under the worker's share of the cores."""
    with CORES.held(cores.runs_alone(item)) if CORES else contextlib.nullcontext():
        yield


@pytest.fixture(autouse=True)
def _no_fake_nvml_callback_errors():
    """An exception inside the simulated NVML library reaches the binding only as NVML_ERROR_UNKNOWN: a test
    that met one fails here, whatever it asserted."""
    yield
    fake = sys.modules.get("ddptop.telemetry.fake.node_state")
    if fake is None:
        return
    errors = [error for node in list(fake.ALL_NODES) for error in node.callback_errors]
    for node in list(fake.ALL_NODES):
        node.callback_errors.clear()
    assert not errors, f"the simulated NVML library failed inside a call: {errors[:3]}"


@dataclass
class Finished:
    returncode: int
    stdout: str
    stderr: str
    run_dir: str

    def summary(self) -> dict:
        with open(os.path.join(self.run_dir, "summary.json"), encoding="utf-8") as handle:
            return json.load(handle)

    def figures(self) -> dict:
        """The summary with each estimate in the flat shape: its value under its name and its interval beside
        it as ``<name>_ci`` (``tests.intervals_helpers.flat_shape``), for a test that reads figures."""
        from tests.intervals_helpers import flat_shape

        return flat_shape(self.summary())


def _ddptop_env(env: dict | None) -> dict:
    return {**os.environ, "PYTHONPATH": REPO, "COLUMNS": "200", **(env or {})}


def ddptop(*args: str, timeout: float = 300, cwd: str = REPO, env: dict | None = None) -> subprocess.CompletedProcess:
    """Run the real command line in a fresh interpreter, as a user would (``env`` adds variables)."""
    return subprocess.run(
        [sys.executable, "-m", "ddptop", *args],
        cwd=cwd,
        env=_ddptop_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
    )


def ddptop_process(*args: str, env: dict | None = None) -> subprocess.Popen:
    """The same, started in the background: its output (stdout and stderr together) comes with communicate()."""
    return subprocess.Popen(
        [sys.executable, "-m", "ddptop", *args],
        cwd=REPO,
        env=_ddptop_env(env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
    )


def imports_in_fresh_interpreter(modules: str) -> tuple[set[str], set[str]]:
    """Import ``modules`` (comma-separated) in a new interpreter: the top-level packages that came with them
    and every module loaded, as sets of names."""
    code = (
        "import json, sys; before = set(sys.modules); import " + modules + "; "
        "print(json.dumps(sorted(set(sys.modules) - before)))"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True, capture_output=True, text=True)
    loaded = set(json.loads(done.stdout))
    return {m.split(".")[0] for m in loaded}, loaded


def stdlib_only(modules: str) -> set[str]:
    """What importing ``modules`` brought beyond ddptop and the standard library (empty: nothing)."""
    packages, _ = imports_in_fresh_interpreter(modules)
    return packages - {"ddptop"} - set(sys.stdlib_module_names)


def wait_path(path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.1)


def run_sweep(run_dir: str, *args: str, plots: bool = False) -> Finished:
    """A real headless `ddptop run`; without its plots unless the test looks at them (matplotlib: 2-3 s a run)."""
    done = ddptop("run", "--headless", "--out", run_dir, *args, *(() if plots else ("--no-plots",)))
    return Finished(done.returncode, done.stdout, done.stderr, run_dir)


def processes_mentioning(text: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if any(text in part for part in proc.info["cmdline"] or ()):
                found.append(proc)
        except psutil.Error:
            pass
    return found


@pytest.fixture(scope="session")
def cpu_sweep(tmp_path_factory) -> Finished:
    """One real sweep shared by the tests that read it: resnet18 at 32 px, N = 1 and 2, gloo, with telemetry
    (test_telemetry.py), no_sync and bucket timing, and every collective (run A of test_deeper.py's bucket A/B,
    whose counts below it checks: 4 communication steps a rank, 4 timed operations per size up to 64 KiB)."""
    run_dir = str(tmp_path_factory.mktemp("sweep") / "run")
    return run_sweep(
        run_dir,
        "--models", "resnet18",
        "--batch-sizes", "4",
        "--world-sizes", "1,2",
        "--image-size", "32",
        "--num-classes", "10",
        "--warmup", "2",
        "--iters", "8",
        "--launches", "1",  # one launch per world size: the tests below read one launch's events
        "--telemetry-interval", "0.25",
        *CPU_SWEEP_COMMUNICATION,
        plots=True,  # test_deeper.py looks at them
    )


# what test_deeper.py's run A adds to the shared sweep (its run B differs from it in these alone)
CPU_SWEEP_COMMUNICATION = ("--comm-iters", "4", "--bucket-cap-mb", "25", "--collectives",
                           "allreduce,allgather,reduce_scatter,broadcast", "--coll-max-bytes", "64KiB",
                           "--coll-iters", "4")


@pytest.fixture
def one_rank_group():
    """A real gloo process group of one rank in this process (the kernels' DDP paths without torchrun)."""
    torch = pytest.importorskip("torch")
    import torch.distributed as dist

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield torch
    finally:
        dist.destroy_process_group()


def tiny_config(**changes):
    """One DDP configuration of the tiny CNN on one CPU rank, as a rank reads it (``changes`` on top)."""
    from ddptop.protocol.launchspec import RunConfig
    from ddptop.protocol.vocab import Mode, Scaling

    values = dict(config_id="c", model="tests.tiny_models:tiny_cnn", mode=Mode.DDP, batch_size=2, global_batch=2,
                  world_size=1, nnodes=1, backend="gloo", device="cpu", scaling=Scaling.WEAK, image_size=32,
                  num_classes=10, warmup=1, iters=2, time_budget=None, bucket_cap_mb=25.0, amp=None,
                  channels_last=False, comm_iters=3)
    values.update(changes)
    return RunConfig(**values)


def written(doc):
    """A document made of the analysis' dicts as summary.json holds it: each estimate in its nested form."""
    from ddptop.records import Estimate

    return json.loads(json.dumps(doc, default=Estimate.to_json))


def _svg_text(svg: str) -> list[str]:
    """The characters of a Textual SVG screenshot, row by row (its cells are 12.2 px apart)."""
    import html
    import re

    rows: dict[float, list[tuple[float, str]]] = {}
    for match in re.finditer(r'<text class="[^"]*" x="([\d.]+)" y="([\d.]+)"[^>]*>(.*?)</text>', svg):
        rows.setdefault(float(match[2]), []).append((float(match[1]), html.unescape(match[3])))
    lines = []
    for y in sorted(rows):
        line = ""
        for x, text in sorted(rows[y]):
            line = line.ljust(round(x / 12.2)) + text
        lines.append(line.replace("\xa0", " ").rstrip())
    return lines


@pytest.fixture
def snap_compare(snap_compare, request):
    """pytest-textual-snapshot's comparison, and on a mismatch the differing rows as text in the test's
    output (its HTML report stays on the machine that ran the suite)."""
    import difflib
    import pickle

    from pytest_textual_snapshot import node_to_report_path

    def compare(*args, **kwargs) -> bool:
        matched = snap_compare(*args, **kwargs)
        if not matched:
            _, expected, actual, *_ = pickle.loads(node_to_report_path(request.node).read_bytes())
            diff = difflib.unified_diff(_svg_text(expected or ""), _svg_text(actual), "expected", "actual",
                                        lineterm="", n=1)
            print("\n".join(diff) or "the rows' text is the same: a colour or a style differs")
        return matched

    return compare
