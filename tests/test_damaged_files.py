"""Every run-directory file damaged (cut short, bytes overwritten, replaced, a value of the wrong type), as a
crash mid-write, a full disk or a bad copy leaves it: ``report``, ``diff``, ``view`` and ``watch`` either read
around the damage or refuse with one line and exit code 2. Fuzzed as the wire reader is (test_wire.py)."""

import contextlib
import io
import json
import os
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ddptop import cli
from ddptop.control import RecordedControl
from ddptop.errors import DdptopError
from ddptop.report import build, sections, store
from tests.conftest import REPO

RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")
FILES = (
    "runner.jsonl", "plan.json", "environment.json", "topology.json", "telemetry.jsonl", "summary.json",
    "launches/01-n1-gloo/events/rank-0.jsonl", "launches/02-n2-gloo/events/rank-1.jsonl",
    "launches/02-n2-gloo/launch.json",
)
JSON_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2, 10**12), st.floats(allow_nan=True),
                        st.text(max_size=8), st.just([]), st.just({}), st.lists(st.integers(), max_size=3))


@pytest.fixture(scope="module")
def pristine(tmp_path_factory):
    """The recorded run with its summary saved, as a finished run leaves it."""
    run = str(tmp_path_factory.mktemp("pristine") / "run")
    shutil.copytree(RECORDED, run)
    summary, _ = build.load_target(run, rebuild=True)
    store.save_summary(summary, run)
    return run


def _retype(value, path, new):
    """``value`` with the element at ``path`` (indices into nested dicts and lists) replaced by ``new``."""
    if not path or not isinstance(value, (dict, list)) or not value:
        return new
    keys = list(value) if isinstance(value, dict) else list(range(len(value)))
    key = keys[path[0] % len(keys)]
    value[key] = _retype(value[key], path[1:], new)
    return value


def _damage(data: bytes, how: tuple) -> bytes:
    kind = how[0]
    if kind == "cut":
        return data[: int(len(data) * how[1])]
    if kind == "overwrite":
        at = int(len(data) * how[1])
        return data[:at] + how[2] + data[at + len(how[2]):]
    if kind == "replace":
        return how[1]
    lines = data.split(b"\n")  # retype: one JSON document (a .json file, or one line of a .jsonl file)
    index = how[1] % len(lines) if data.rstrip(b"\n").count(b"\n") else 0
    target = lines[index] if len(lines) > 1 and b"\n" in data.rstrip(b"\n") else data
    try:
        document = json.loads(target)
    except ValueError:
        return data
    changed = json.dumps(_retype(document, how[2], how[3])).encode()
    if target is data:
        return changed
    lines[index] = changed
    return b"\n".join(lines)


DAMAGE = st.one_of(
    st.tuples(st.just("cut"), st.floats(0, 1)),
    st.tuples(st.just("overwrite"), st.floats(0, 1), st.binary(min_size=1, max_size=16)),
    st.tuples(st.just("replace"), st.binary(max_size=64)),
    st.tuples(st.just("retype"), st.integers(0, 10**6), st.lists(st.integers(0, 50), min_size=1, max_size=4),
              JSON_VALUES),
)


@contextlib.contextmanager
def damaged_copy(pristine, name, how):
    with tempfile.TemporaryDirectory() as base:
        run = os.path.join(base, "run")
        shutil.copytree(pristine, run)
        path = os.path.join(run, name)
        with open(path, "rb") as handle:
            data = handle.read()
        with open(path, "wb") as handle:
            handle.write(_damage(data, how))
        yield run


def _cli(*argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = cli.main(list(argv))
    return code, out.getvalue(), err.getvalue()


def _refused_in_one_line(code, err):
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("ddptop: error: ") and "Traceback" not in err


FUZZ = settings(max_examples=int(os.environ.get("DDPTOP_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@FUZZ
@given(name=st.sampled_from(FILES), how=DAMAGE, rebuild=st.booleans())
def test_report_reads_around_damage_or_refuses_in_one_line(pristine, name, how, rebuild):
    with damaged_copy(pristine, name, how) as run:
        code, out, err = _cli("report", run, *(["--rebuild"] if rebuild else []))
    if code != 0:
        _refused_in_one_line(code, err)
    else:
        assert "Scaling:" in out or "No scaling table" in out or "Benchmark:" in out


@FUZZ
@given(name=st.sampled_from(FILES), how=DAMAGE)
def test_diff_reads_around_damage_or_refuses_in_one_line(pristine, name, how):
    with damaged_copy(pristine, name, how) as run:
        code, out, err = _cli("diff", pristine, run)
    if code == 2:
        _refused_in_one_line(code, err)
    else:
        assert code in (0, 1) and out.startswith("A: ")


@FUZZ
@given(name=st.sampled_from(FILES), how=DAMAGE, mode=st.sampled_from(["now", "when_done"]))
def test_view_and_watch_read_around_damage_or_refuse_in_one_line(pristine, name, how, mode):
    """What ``view`` (mode "now") and ``watch`` ("when_done") read, as their frames and summary screen do."""
    with damaged_copy(pristine, name, how) as run:
        try:
            control = RecordedControl.of(run, mode)
            snapshot = control.take_snapshot()
            shown = control.final_summary() if control.wants_summary(snapshot) else None
        except DdptopError as exc:  # the CLI prints it as one line, exit code 2
            assert "\n" not in str(exc)
            return
        assert len(snapshot.session.configs) == 3  # the plan was readable: every configuration is there
        if shown is not None:
            assert sections.screen_sections(shown.summary, with_topology=True)


def test_damage_read_around_is_said_in_the_report(pristine, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(pristine, run)
    os.unlink(os.path.join(run, "summary.json"))
    with open(os.path.join(run, "telemetry.jsonl"), "ab") as handle:
        handle.write(b'{"v": 1, "type": "telemetry", "t": 1.0, "rank": -1, "gpus": [\n')  # a crash mid-line
    with open(os.path.join(run, "topology.json"), "w", encoding="utf-8") as handle:
        handle.write("[1, 2")
    code, out, _ = _cli("report", run)
    assert code == 0
    block = out[out.index("Read around damaged files"):].splitlines()
    assert block[1:3] == ["  telemetry.jsonl: 1 unreadable line(s) skipped",
                          "  topology.json: not JSON (Expecting ',' delimiter: line 1 column 6 (char 5)); left out"]


def test_a_damaged_plan_is_refused_in_one_line(pristine, tmp_path):
    run = str(tmp_path / "run")
    shutil.copytree(pristine, run)
    os.unlink(os.path.join(run, "summary.json"))
    with open(os.path.join(run, "plan.json"), "w", encoding="utf-8") as handle:
        handle.write('{"name": "x", "configs": 3}')
    code, _, err = _cli("report", run)
    _refused_in_one_line(code, err)
    assert "plan.json is damaged" in err
