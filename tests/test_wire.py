import errno
import json
import os
import stat
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ddptop.protocol import wire


@pytest.fixture(autouse=True, scope="module", params=["fast parser", "standard parser"])
def parser(request):
    """Every test here runs with the parser ddptop uses when orjson is installed, and without it."""
    chosen = wire.fast_loads() if request.param == "fast parser" else wire._stdlib_loads
    if chosen is None:
        pytest.skip("orjson is not installed")
    saved, wire.batch_loads = wire.batch_loads, chosen
    yield request.param
    wire.batch_loads = saved


def test_round_trip_of_every_event_type(tmp_path):
    path = str(tmp_path / "rank-0.jsonl")
    writer = wire.EventWriter(path, rank=0)
    writer.emit("hello", world_size=2, host="h", pid=1, device="cpu")
    writer.emit("config_start", config_id="c")
    writer.emit("samples", config_id="c", phase="measure", first_iter=0, sec=[0.1, 0.2])
    writer.emit("config_end", config_id="c", status="ok")
    writer.emit("error", error_type="E", message="m", traceback="tb", oom=False)
    writer.emit("bye")
    writer.close()
    events = wire.EventFileReader(path).read_new()
    assert [e["type"] for e in events] == ["hello", "config_start", "samples", "config_end", "error", "bye"]
    assert events[2]["sec"] == [0.1, 0.2]
    assert all(e["v"] == wire.WIRE_VERSION and e["rank"] == 0 for e in events)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_nothing_reaches_disk_before_flush(tmp_path):
    path = str(tmp_path / "r.jsonl")
    writer = wire.EventWriter(path, rank=3)
    writer.emit("bye")
    assert os.path.getsize(path) == 0
    writer.flush()
    assert os.path.getsize(path) > 0
    writer.close()


def test_partial_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "r.jsonl"
    line = wire.encode(wire.make_event("bye", 0))
    path.write_bytes(line + line[:10])
    reader = wire.EventFileReader(str(path))
    assert len(reader.read_new()) == 1
    with open(path, "ab") as handle:
        handle.write(line[10:])
    assert len(reader.read_new()) == 1
    assert reader.malformed == 0


def test_read_rest_takes_an_unterminated_last_event(tmp_path):
    path = tmp_path / "r.jsonl"
    path.write_bytes(wire.encode(wire.make_event("bye", 0)).rstrip(b"\n"))
    reader = wire.EventFileReader(str(path))
    assert reader.read_new() == []
    assert len(reader.read_rest()) == 1


def test_a_file_removed_after_it_was_seen_is_still_read_to_its_end(tmp_path):
    """A run directory removed mid-run takes the path, not what the writer wrote: the reader keeps the file it
    opened last, and lets it go with its last read."""
    path = tmp_path / "events" / "rank-0.jsonl"
    path.parent.mkdir()
    writer = wire.EventWriter(str(path), rank=0)
    writer.emit("hello", world_size=1, host="h", pid=1, device="cpu")
    writer.flush()
    reader = wire.EventFileReader(str(path))
    assert [e["type"] for e in reader.read_new()] == ["hello"]
    writer.emit("samples", config_id="c", phase="measure", first_iter=0, sec=[0.1, 0.2])
    writer.flush()
    os.unlink(path)
    os.rmdir(path.parent)
    writer.emit("bye")
    writer.close()
    assert [e["type"] for e in reader.read_rest()] == ["samples", "bye"]
    assert reader.read_new() == []  # let go: the path is gone, and so is the file


@pytest.mark.parametrize("error", [errno.ESTALE, errno.EIO])
def test_a_read_that_fails_part_way_keeps_what_it_read_and_goes_on_next_time(tmp_path, monkeypatch, error):
    """A stale NFS handle or an I/O error mid-file: the lines read before it are applied and the next read goes
    on from there (a stale handle is let go, the path opened afresh); no line is lost or read twice."""
    path = tmp_path / "rank-0.jsonl"
    lines = [wire.encode(wire.make_event("samples", 0, config_id="c", phase="measure", first_iter=i, sec=[0.1]))
             for i in range(40)]
    path.write_bytes(b"".join(lines))
    monkeypatch.setattr(wire, "READ_CHUNK", len(lines[0]) * 8 + 5)  # several reads, the last line cut
    real_pread, calls = os.pread, []

    def failing_pread(fd, size, offset):  # the third read of the file fails, as a server would fail it
        calls.append(offset)
        if len(calls) == 3:
            raise OSError(error, os.strerror(error))
        return real_pread(fd, size, offset)

    monkeypatch.setattr(os, "pread", failing_pread)
    reader = wire.EventFileReader(str(path))
    first = reader.read_new()
    assert 0 < len(first) < 40  # what came before the error
    assert (reader._fd == -1) is (error == errno.ESTALE)  # a stale handle is let go; after EIO the file is kept
    rest = reader.read_new()
    assert [e["first_iter"] for e in first + rest] == list(range(40))


def test_an_io_error_before_anything_is_read_is_raised_not_taken_for_a_quiet_file(tmp_path, monkeypatch):
    path = tmp_path / "rank-0.jsonl"
    path.write_bytes(wire.encode(wire.make_event("bye", 0)))

    def failing_pread(fd, size, offset):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(os, "pread", failing_pread)
    with pytest.raises(OSError, match="Input/output error"):
        wire.EventFileReader(str(path)).read_new()


@pytest.mark.parametrize("removed", [False, True], ids=["path there", "path removed"])
def test_a_read_when_the_process_is_out_of_file_descriptors_reads_the_file_it_holds(tmp_path, removed):
    """With every descriptor taken (a soft limit of 64 and many files tailed), the reader reads on from the
    file it holds instead of failing the refresh; and where the path is gone too, that file is all there is:
    it is kept."""
    path = tmp_path / "rank-0.jsonl"
    line = wire.encode(wire.make_event("bye", 0))
    path.write_bytes(line)
    script = f"""
import os, resource
from ddptop.protocol import wire
resource.setrlimit(resource.RLIMIT_NOFILE, (64, resource.getrlimit(resource.RLIMIT_NOFILE)[1]))
writer = os.open({str(path)!r}, os.O_WRONLY | os.O_APPEND)
reader = wire.EventFileReader({str(path)!r})
assert len(reader.read_new()) == 1
taken = []
try:
    while True:
        taken.append(os.open(os.devnull, os.O_RDONLY))
except OSError as exc:
    assert exc.errno == 24, exc  # EMFILE: not one descriptor is left
os.write(writer, {line!r})
if {removed!r}:
    os.unlink({str(path)!r})
print(len(reader.read_new()), reader._fd >= 0)
"""
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert found.returncode == 0, found.stderr
    assert found.stdout.split() == ["1", "True"]


def test_a_file_is_opened_afresh_for_every_read(tmp_path):
    """Over NFS, appends from another node show only on a fresh open: a replaced file is read from its path."""
    path = tmp_path / "rank-0.jsonl"
    line = wire.encode(wire.make_event("bye", 0))
    path.write_bytes(line)
    reader = wire.EventFileReader(str(path))
    assert len(reader.read_new()) == 1
    replacement = tmp_path / "replacement"
    replacement.write_bytes(line * 3)
    os.replace(replacement, path)
    assert len(reader.read_new()) == 2


@pytest.mark.parametrize(
    "line, reason",
    [
        (b"{not json", "not JSON"),
        (b"[1,2]", "not a JSON object"),
        (json.dumps({"v": 99, "type": "bye", "t": 0, "rank": 0}).encode(), "unsupported wire version"),
        (json.dumps({"v": 1, "type": "nope", "t": 0, "rank": 0}).encode(), "unknown event type"),
        (json.dumps({"v": 1, "type": "config_start", "t": 0, "rank": 0}).encode(), "without 'config_id'"),
        (
            json.dumps(
                {"v": 1, "type": "samples", "t": 0, "rank": 0, "config_id": "c", "phase": "measure",
                 "first_iter": 0, "sec": [0.1, "x"]}
            ).encode(),
            "non-negative numbers",
        ),
        (b'{"v":1,"type":"samples","t":0,"rank":0,"config_id":"c","phase":"measure","first_iter":0,"sec":[NaN]}',
         "NaN is not JSON"),
        (b'{"v":1,"type":"bye","t":0,"rank":0},{"v":1,"type":"bye","t":0,"rank":0}', "not JSON"),  # two on a line
        (b'{"v":1,"type":"bye","t":0,"rank":true}', "bye.rank is not an integer"),
        (b'{"v":1,"type":[],"t":0,"rank":0}', "unknown event type"),
        (b'{"v":1,"type":"bye","t":"noon","rank":0}', "bye.t is not a number or an integer"),
        (b'{"v":1,"type":"config_start","t":0,"rank":0,"config_id":["a"]}', "config_start.config_id is not a string"),
        (b'{"v":1,"type":"config_start","t":0,"rank":0,"config_id":"c","iters":"many"}', "iters is not an integer or null"),
        (b'{"v":1,"type":"hello","t":0,"rank":0,"world_size":2,"host":"h","pid":"1","device":"cpu"}', "hello.pid"),
    ],
)
def test_malformed_lines_are_skipped_and_counted(tmp_path, line, reason):
    good = wire.encode(wire.make_event("bye", 0))
    path = tmp_path / "r.jsonl"
    path.write_bytes(good + line + b"\n" + good)
    reader = wire.EventFileReader(str(path))
    events = reader.read_rest()
    assert len(events) == 2
    assert reader.malformed == 1
    assert reason in reader.first_problem


def test_nan_is_refused_at_the_source():
    with pytest.raises(ValueError):
        wire.encode(wire.make_event("samples", 0, config_id="c", phase="measure", first_iter=0, sec=[float("nan")]))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=400))
def test_reader_never_raises_on_arbitrary_bytes(tmp_path_factory, data):
    path = tmp_path_factory.mktemp("fuzz") / "r.jsonl"
    path.write_bytes(data)
    reader = wire.EventFileReader(str(path))
    events = reader.read_rest()
    lines = [l for l in data.split(b"\n") if l.strip()]
    assert len(events) + reader.malformed == len(lines)


def test_every_example_in_the_format_document_is_a_valid_event():
    import re

    from ddptop.protocol import wire

    path = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "wire-format.md")
    with open(path, encoding="utf-8") as handle:
        blocks = re.findall(r"```json\n(.*?)```", handle.read(), re.S)
    decoder, types = json.JSONDecoder(), set()
    for block in blocks:  # a block holds one event or several, an event may wrap over lines
        text, position = " ".join(block.split("\n")).strip(), 0
        while position < len(text):
            _, end = decoder.raw_decode(text, position)
            types.add(wire.decode(text[position:end])["type"])
            position = end
            while position < len(text) and text[position] == " ":
                position += 1
    assert types == set(wire.REQUIRED_FIELDS)  # one example per event type, each accepted by the reader


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.binary(max_size=600), st.builds(lambda d: json.dumps(d).encode(), st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
))))
def test_summary_loader_refuses_arbitrary_bytes_with_one_error(tmp_path_factory, data):
    from ddptop.report.store import SummaryError, load_summary

    path = tmp_path_factory.mktemp("summary") / "summary.json"
    path.write_bytes(data)
    with pytest.raises(SummaryError):
        load_summary(str(path))


def test_summary_loader_survives_deep_nesting(tmp_path):
    from ddptop.report.store import SummaryError, load_summary

    path = tmp_path / "summary.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(SummaryError, match="not a readable JSON summary"):
        load_summary(str(path))


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
FIELD_NAMES = sorted({name for fields in wire.EVENT_FIELDS.values() for name, _, _ in fields})


@settings(max_examples=400, deadline=None)
@given(
    st.sampled_from(sorted(wire.EVENT_FIELDS)),
    st.dictionaries(st.sampled_from(FIELD_NAMES), JSON_VALUES, max_size=8),
    st.sampled_from(["resnet18/ddp/bs4/n1/gloo", None]),
)
def test_a_session_survives_any_event_the_reader_lets_through(tmp_path_factory, event_type, fields, config_id):
    """Lines of the right shape with values of any JSON type: each is refused by the reader (MalformedEvent)
    or applied by the session without an error."""
    from ddptop.run import rundir
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    event = {"v": 1, "type": event_type, "t": 1.0, "rank": 0, **fields}
    if config_id is not None and "config_id" not in fields:
        event["config_id"] = config_id
    try:
        line = json.dumps(event).encode()
    except ValueError:
        return
    run_dir = str(tmp_path_factory.mktemp("session") / "run")
    plan = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4], baseline=False),
                      Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(run_dir, "fuzz"))
    events_dir = os.path.join(rundir.launch_dir(run_dir, 1, "n1-gloo", 0), "events")
    with open(os.path.join(events_dir, "rank-0.jsonl"), "wb") as handle:
        handle.write(line + b"\n")
    session.refresh()
    session.refresh(final=True)
    for state in session.ordered_states():
        state.summary()
        state.progress()
    session.close()


def test_every_field_of_the_wrong_type_is_refused_with_what_it_should_be():
    """Each checked field, given a value of every JSON type it may not hold: refused in words naming the types
    it may (a boolean field given null was once a KeyError out of the reader)."""
    values = {int: 3, float: 0.5, str: "x", list: [], dict: {}, bool: True, type(None): None}
    for event_type, checks in wire.EVENT_FIELDS.items():
        base = {"v": wire.WIRE_VERSION, "type": event_type}
        for name, allowed, required in checks:
            if required:
                base[name] = values[min(allowed, key=str)] if allowed else 0
        for name, allowed, _ in checks:
            for kind, value in values.items():
                if allowed is None or kind in allowed:
                    continue
                with pytest.raises(wire.MalformedEvent, match=rf"^{event_type}\.{name} is not "):
                    wire.validate({**base, name: value})
