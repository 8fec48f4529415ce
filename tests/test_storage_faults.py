"""A full disk or an exhausted quota, by injection through the very code that writes (``os.write`` raising
ENOSPC half-way through a file, ``DDPTOP_FAULT_DISK_FULL``): the tables are printed from memory, the summary
goes to the fallback directory, no temporary file is left, exit code 1, never a traceback."""

import contextlib
import errno
import glob
import json
import os
import shutil
import subprocess
import time

import pytest

from ddptop.protocol import storage
from ddptop.report import build, sections, store
from ddptop.report.schema import Summary
from tests.conftest import REPO, ddptop, ddptop_process, processes_mentioning, run_sweep


def test_a_write_that_runs_out_of_space_leaves_nothing_behind(tmp_path, monkeypatch):
    target = tmp_path / "summary.json"
    target.write_text("the previous summary\n")
    monkeypatch.setenv(storage.DISK_FULL_ENV, str(tmp_path))
    with pytest.raises(OSError) as caught:
        storage.write_atomic(str(target), "x" * 10_000)
    assert caught.value.errno == errno.ENOSPC and caught.value.filename == str(target)
    assert target.read_text() == "the previous summary\n"  # whole or not at all
    assert os.listdir(tmp_path) == ["summary.json"]  # no summary.json.tmp-<pid>
    assert storage.describe_os_error(caught.value, str(target)) == "no space left on device writing summary.json"


def test_the_summary_goes_to_the_fallback_and_the_closing_text_says_so(tmp_path, monkeypatch):
    summary, _ = build.load_target(os.path.join(REPO, "tests", "data", "recorded-run"), rebuild=True)
    summary.run_dir = str(tmp_path / "run")
    os.makedirs(tmp_path / "run")
    monkeypatch.setattr(store, "_write_summary", _failing_only_in(str(tmp_path / "run"), store._write_summary))
    paths = store.save_summary(summary, str(tmp_path / "run"), str(tmp_path / "fallback"))
    assert paths["save_error"] == "no space left on device writing summary.json"
    assert paths["fallback"].startswith(str(tmp_path / "fallback")) and os.path.exists(paths["json"])
    assert oct(os.stat(tmp_path / "fallback").st_mode & 0o777) == "0o700"  # user-only
    line = sections.saved_line(summary, paths)
    assert line.startswith(f"Summary not saved in {tmp_path / 'run'}: no space left on device writing summary.json; "
                           f"written to {paths['fallback']} instead. Once there is room: ddptop report ")
    # the fallback full as well: nothing saved, and the way to save it later
    monkeypatch.setenv(storage.DISK_FULL_ENV, str(tmp_path))
    nowhere = store.save_summary(summary, str(tmp_path / "run"), str(tmp_path / "fallback"))
    assert "json" not in nowhere and nowhere["fallback_error"].startswith("no space left on device")
    assert sections.saved_line(summary, nowhere).endswith(f"then run: ddptop report {tmp_path / 'run'} --rebuild\n")


def _failing_only_in(directory, write):
    def failing(summary, target):
        if os.path.abspath(target) == os.path.abspath(directory):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.path.join(target, "summary.json"))
        return write(summary, target)

    return failing


def test_a_full_disk_before_the_run_is_one_line(tmp_path):
    from tests.conftest import ddptop

    done = ddptop("run", "--headless", "--out", str(tmp_path / "run"), "--launches", "1", "--iters", "2",
                  env={storage.DISK_FULL_ENV: str(tmp_path / "run")})
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [
        f"ddptop: error: cannot write the run directory {tmp_path / 'run'}: no space left on device writing "
        "environment.json"]


@pytest.mark.slow
def test_a_full_disk_at_the_end_prints_every_table_and_saves_to_the_fallback(tmp_path, monkeypatch):
    run_dir, fallback = tmp_path / "run", tmp_path / "fallback"
    monkeypatch.setenv(storage.DISK_FULL_ENV, str(run_dir / "summary"))  # the summary files only
    done = run_sweep(str(run_dir), "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32",
                     "--num-classes", "10", "--batch-sizes", "2", "--world-sizes", "1", "--warmup", "1",
                     "--iters", "4", "--comm-iters", "0", "--no-collectives", "--telemetry-interval", "0",
                     "--launches", "1", "--fallback-dir", str(fallback))
    assert done.returncode == 1 and "Traceback" not in done.stderr + done.stdout
    assert "Scaling: tests.tiny_models:tiny_cnn" in done.stdout and "Why it is not faster" in done.stdout
    assert f"Summary not saved in {run_dir}: no space left on device writing summary.json" in done.stdout
    (saved,) = glob.glob(str(fallback / "run-*" / "summary.json"))
    with open(saved, encoding="utf-8") as handle:
        configs = json.load(handle)["configs"]
    assert [c["status"] for c in configs] == ["ok"] * 2
    assert not os.path.exists(run_dir / "summary.json")
    assert glob.glob(str(run_dir / "**" / "*.tmp-*"), recursive=True) == []
    assert processes_mentioning(str(run_dir)) == []


# -- the one write path, and what each writer does when it fails ---------------------------------------------


def test_the_injected_full_disk_names_files_by_glob_and_stops_at_a_byte_count(tmp_path, monkeypatch):
    from ddptop.protocol import storage

    monkeypatch.setenv(storage.DISK_FULL_ENV, "*/events/rank-1.jsonl")
    monkeypatch.setenv(storage.DISK_FULL_AFTER_ENV, "100")
    os.makedirs(tmp_path / "events")
    for rank in (0, 1):
        fd = os.open(tmp_path / "events" / f"rank-{rank}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            storage.write_all(fd, b"x" * 60, str(tmp_path / "events" / f"rank-{rank}.jsonl"), 0)
            if rank == 1:
                with pytest.raises(OSError) as caught:
                    storage.write_all(fd, b"y" * 60, str(tmp_path / "events" / "rank-1.jsonl"), 60)
                assert caught.value.errno == errno.ENOSPC
            else:
                storage.write_all(fd, b"y" * 60, str(tmp_path / "events" / "rank-0.jsonl"), 60)
        finally:
            os.close(fd)
    assert os.path.getsize(tmp_path / "events" / "rank-0.jsonl") == 120
    assert os.path.getsize(tmp_path / "events" / "rank-1.jsonl") == 100  # up to the byte count, as a full disk


def test_an_events_file_that_fills_up_says_why_and_is_never_written_again(tmp_path, monkeypatch):
    from ddptop.protocol.wire import EventFileReader, EventsUnwritable, EventWriter

    monkeypatch.setenv(storage.DISK_FULL_ENV, str(tmp_path / "events"))
    monkeypatch.setenv("DDPTOP_FAULT_DISK_FULL_AFTER", "300")
    os.makedirs(tmp_path / "events")
    writer = EventWriter(str(tmp_path / "events" / "rank-1.jsonl"), 1, 0.0)
    writer.emit("hello", world_size=2, host="h", pid=1, device="cpu")
    writer.flush()
    with pytest.raises(EventsUnwritable) as caught:
        for first in range(0, 100, 10):
            writer.emit("samples", config_id="c", phase="measure", first_iter=first, of=100, sec=[0.001] * 10)
            writer.flush()
    assert str(caught.value) == "no space left on device writing events/rank-1.jsonl"
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.delenv(storage.DISK_FULL_ENV)  # room again: the file still takes nothing, so it has no gap
    size = os.path.getsize(tmp_path / "events" / "rank-1.jsonl")
    writer.emit("bye", wall_s=1.0)
    with pytest.raises(EventsUnwritable):
        writer.close()
    assert os.path.getsize(tmp_path / "events" / "rank-1.jsonl") == size
    reader = EventFileReader(str(tmp_path / "events" / "rank-1.jsonl"))
    assert [e["type"] for e in reader.read_rest()][0] == "hello"


def _session(tmp_path):
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.run.session import Session
    from ddptop.telemetry.inventory import Inventory

    plan = build_plan(PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4], iters=10), Inventory(problem="test"), 2)
    os.makedirs(tmp_path / "run")
    return Session.create(plan, str(tmp_path / "run"))


def test_marks_that_a_full_disk_stops_are_applied_in_memory(tmp_path, monkeypatch):
    from ddptop.protocol.marks import ConfigEnd

    session = _session(tmp_path)
    config = session.plan.configs()[-1]
    monkeypatch.setenv(storage.DISK_FULL_ENV, str(tmp_path / "run" / "runner.jsonl"))
    session.mark(**ConfigEnd(config.config_id, "skipped", "skipped by the user").to_data())
    assert session.configs[config.config_id].status == "skipped"  # not lost with the line
    assert session.configs[config.config_id].reason == "skipped by the user"
    assert session.not_saved == {"runner.jsonl": "no space left on device writing runner.jsonl"}
    with open(tmp_path / "run" / "runner.jsonl", encoding="utf-8") as handle:
        assert "skipped by the user" not in handle.read()  # the file holds no half of it as a whole line
    session.close()  # no traceback at the end either


def _launch_writing_events(session):
    """A launch of one rank that has said hello and started the first configuration (its writer, config id)."""
    from ddptop.protocol import layout
    from ddptop.protocol.marks import LaunchStart
    from ddptop.protocol.wire import EventWriter

    config = session.plan.configs()[0].config_id
    launch = layout.launch_name(1, "n1-gloo")
    events = os.path.join(layout.events_dir(layout.launch_path(session.run_dir, launch)), layout.events_name(0))
    os.makedirs(os.path.dirname(events))
    session.mark(**LaunchStart(launch, 1, "gloo", (config,)).to_data())
    writer = EventWriter(events, 0, 0.0)
    writer.emit("hello", world_size=1, host="h", pid=os.getpid(), device="cpu")
    writer.emit("config_start", config_id=config)
    writer.flush()
    return writer, launch, config


def _open_files():
    return len(os.listdir("/proc/self/fd"))


def test_steps_written_before_the_run_directory_was_removed_are_kept(tmp_path):
    """The directory goes between two reads: what the rank had written is read from the file the session
    opened, and the last read lets that file go."""
    session = _session(tmp_path)
    writer, _, config = _launch_writing_events(session)
    before = _open_files()
    session.refresh()
    assert _open_files() == before + 1  # the rank's file, held between reads
    writer.emit("samples", config_id=config, phase="measure", first_iter=0, of=10, sec=[0.01] * 10)
    writer.flush()
    shutil.rmtree(tmp_path / "run")
    session.refresh(final=True)
    assert session.configs[config].samples == {0: [0.01] * 10}
    assert _open_files() == before
    writer.close()
    session.close()


def test_the_files_of_an_ended_launch_are_read_to_their_end_and_let_go(tmp_path):
    from ddptop.protocol.marks import LaunchEnd

    session = _session(tmp_path)
    writer, launch, config = _launch_writing_events(session)
    before = _open_files()
    session.refresh()
    writer.emit("samples", config_id=config, phase="measure", first_iter=0, of=10, sec=[0.01] * 10)
    writer.close()
    session.mark(**LaunchEnd(launch, 0, "ok").to_data())
    assert session.configs[config].samples == {0: [0.01] * 10}
    assert _open_files() == before - 1  # the writer's and the reader's, both gone
    session.refresh()
    assert _open_files() == before - 1  # not opened again
    session.close()


def test_a_line_still_arriving_when_its_launch_ends_is_read_whole_at_the_final_read(tmp_path):
    """Over NFS a rank's last line can land after its launch is known to have ended: the half that is there is
    kept back, not counted malformed, and the final read takes the whole line."""
    from ddptop.protocol import wire
    from ddptop.protocol.marks import LaunchEnd

    session = _session(tmp_path)
    writer, launch, config = _launch_writing_events(session)
    writer.close()
    line = wire.encode(wire.make_event("samples", 0, config_id=config, phase="measure", first_iter=0, of=10,
                                       sec=[0.01] * 10))
    with open(writer.path, "ab") as out:
        out.write(line[:20])
        out.flush()
        session.mark(**LaunchEnd(launch, 0, "ok").to_data())
        out.write(line[20:])
    assert session.configs[config].samples == {}
    session.refresh(final=True)
    assert session.configs[config].samples == {0: [0.01] * 10}
    assert sum(reader.malformed for reader in session.readers.values()) == 0
    session.close()


def test_telemetry_a_full_disk_stops_stays_in_memory_and_the_view_says_so(tmp_path, monkeypatch):
    from ddptop.control import RecordedControl
    from ddptop.telemetry.monitor import Monitor

    monitor = Monitor(0.5, str(tmp_path / "telemetry.jsonl"), None, lambda: [])
    monitor.sample_once()
    monkeypatch.setenv(storage.DISK_FULL_ENV, str(tmp_path / "telemetry.jsonl"))
    for _ in range(3):
        monitor.sample_once()
    monitor.stop()
    assert monitor.not_saved == "no space left on device writing telemetry.jsonl"
    assert len(monitor.unsaved) == 3 and len(monitor.records) == 4  # every reading after the failure is kept
    # the status line of the view: what the run directory no longer receives
    control = RecordedControl.of(os.path.join(REPO, "tests", "data", "recorded-run"))
    control.telemetry = monitor
    snapshot = control.take_snapshot()
    assert snapshot.not_saved == ("telemetry not saved: no space left on device writing telemetry.jsonl",)
    from ddptop.tui.panels.status import StatusLine

    line = StatusLine()
    shown = []
    line.show_content = lambda text: shown.append(str(text))
    line.update_from(snapshot)
    assert "telemetry not saved: no space left on device writing telemetry.jsonl (kept in memory)" in shown[0]


def test_the_closing_line_says_what_was_not_saved_and_that_the_summary_holds_it(tmp_path):
    summary = Summary.from_json(
        {"run_dir": "runs/x", "not_saved": {"telemetry.jsonl": "no space left on device writing telemetry.jsonl"}})
    in_place = {"json": "runs/x/summary.json", "md": "runs/x/summary.md", "csv": "runs/x/summary.csv"}
    assert sections.saved_line(summary, in_place).splitlines()[0] == (
        "Not saved in runs/x: no space left on device writing telemetry.jsonl; the summary was made from memory "
        "and holds every figure")
    moved = {"json": "/tmp/f/summary.json", "md": "/tmp/f/summary.md", "csv": "/tmp/f/summary.csv",
             "save_error": "no space left on device writing summary.json", "fallback": "/tmp/f"}
    assert sections.saved_line(summary, moved).splitlines()[0] == (
        "Summary not saved in runs/x: no space left on device writing summary.json; written to /tmp/f instead. "
        "Keep this summary, it holds every figure (no space left on device writing telemetry.jsonl, so a rebuild "
        "from the files would lack them)")


# -- whole runs: a filesystem that fills up, goes away or goes read-only, or stalls ---------------------------

TINY = ("--launches", "1", "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "2",
        "--warmup", "1", "--comm-iters", "0", "--no-collectives")


@contextlib.contextmanager
def small_tmpfs(path, size="200k"):
    """A filesystem of ``size`` at ``path`` where this machine lets the test mount one (root in a container
    that allows it), else a skip: the injected variant of each test covers the same code."""
    os.makedirs(path, exist_ok=True)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                             capture_output=True, text=True, check=False) if shutil.which("mount") else None
    if mounted is None or mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({(mounted.stderr.strip() if mounted else 'no mount command')})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_a_full_disk_that_got_a_few_pages_back_is_still_named_full(tmp_path):
    """After a launch failed on a full disk, a writer that failed removed its partial file: the probe's 4 KiB fit
    again, yet the disk is full. Under 1 MiB free it is said so, with what is free; a disk with room is not."""
    with small_tmpfs(tmp_path / "disk", size="2m") as disk:
        events = os.path.join(disk, "events")
        os.makedirs(events)
        assert storage.storage_problem(events) is None  # 2 MiB free
        with open(os.path.join(disk, "filler"), "wb") as handle:
            handle.write(b"\0" * (2 * 1024 * 1024 - 64 * 1024))  # 64 KiB left
        found = storage.storage_problem(events)
        assert found is not None and found.startswith("no space left on device writing events/ (")
        assert found.endswith(" KiB free there after the launch failed)")
        assert 0 < int(found.split("(")[1].split()[0]) <= 64


def _assert_clean_end(done, out_dir):
    assert "Traceback" not in done.stdout + done.stderr
    assert "Benchmark: tests.tiny_models:tiny_cnn" in done.stdout  # the tables, from memory
    assert glob.glob(os.path.join(str(out_dir), "**", "*.tmp-*"), recursive=True) == []
    assert processes_mentioning(str(out_dir)) == []


@pytest.mark.slow
@pytest.mark.parametrize("disk", ["tmpfs", "injected"])
def test_a_disk_that_fills_up_during_the_sweep(tmp_path, disk):
    """Rank events, telemetry and the summary meet a full disk: the configuration that lost its events says
    why in words, telemetry is kept in memory, the tables are printed, the summary goes to the fallback."""
    fallback = tmp_path / "fallback"
    env = {}
    if disk == "injected":  # rank 1 of the N=2 launch alone, from its 4 KiB on: the reason is its own words
        out = tmp_path / "out"
        env = {storage.DISK_FULL_ENV: "*/events/rank-1.jsonl", "DDPTOP_FAULT_DISK_FULL_AFTER": "4096"}
        context = contextlib.nullcontext()
    else:  # a real 160 KiB filesystem: everything competes for it and the ranks' logs are lost with it (at 200 KiB
        # a fast sweep's events sometimes fit, and the disk filled only at the summary)
        out = tmp_path / "small"
        context = small_tmpfs(out, size="160k")
    with context:
        # enough steps to fill a 160 KiB filesystem; the injected fault needs only rank 1's first 4 KiB
        iters = "3000" if disk == "tmpfs" else "600"
        done = ddptop("run", "--headless", "--out", str(out / "run"), *TINY, "--world-sizes", "1,2",
                      "--iters", iters, "--telemetry-interval", "0.2", "--fallback-dir", str(fallback), env=env)
        _assert_clean_end(done, out)
        assert done.returncode == 1
        failed = [line for line in done.stdout.splitlines() if "/n2/gloo] failed" in line]
        if disk == "injected":
            (line,) = failed  # the lost rank first; the peer's broken connection after it, as its echo
            assert line.startswith("[tests.tiny_models:tiny_cnn/ddp/bs2/n2/gloo] failed: rank 1: no space left on "
                                   "device writing events/rank-1.jsonl")
        else:
            failed = [line for line in done.stdout.splitlines() if "] failed" in line]
            assert any("no space left on device" in line for line in failed), (failed, done.stdout[-3000:])
            assert "Summary not saved in" in done.stdout and "no space left on device writing" in done.stdout
            (saved,) = glob.glob(str(fallback / "run-*" / "summary.json"))
            with open(saved, encoding="utf-8") as handle:
                summary = json.load(handle)
            if "telemetry.jsonl" in summary.get("not_saved", {}):  # what the file lost came to the fallback
                assert os.path.getsize(os.path.join(os.path.dirname(saved), "telemetry.jsonl")) > 0
                assert "ddptop: no space left on device writing telemetry.jsonl; kept in memory" in done.stdout


def _wait_for_steps(run_dir, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for path in glob.glob(os.path.join(run_dir, "launches", "*", "events", "rank-0.jsonl")):
            with open(path, encoding="utf-8") as handle:
                if handle.read().count('"measure"') >= 2:
                    return
        time.sleep(0.2)
    raise AssertionError("the sweep never reached its measured steps")


@pytest.mark.slow
@pytest.mark.parametrize("how", ["removed", "read-only"])
def test_the_run_directory_lost_mid_run_stops_the_sweep_with_one_line(tmp_path, how):
    """Removed for real; made read-only by injection (Linux refuses to remount a filesystem read-only while
    files on it are open for writing, so a real one goes read-only only on its own errors): every write under
    the run directory fails with EROFS from the moment the test says so."""
    from ddptop.protocol import storage

    run_dir, trigger = tmp_path / "out" / "run", tmp_path / "read-only-now"
    env = {storage.DISK_FULL_ENV: str(run_dir), storage.DISK_ERROR_ENV: "EROFS", storage.DISK_FROM_ENV: str(trigger)}
    proc = ddptop_process("run", "--headless", "--no-plots", "--out", str(run_dir), *TINY, "--world-sizes", "1",
                          "--iters", "1000000", "--max-time-per-config", "60", "--telemetry-interval", "0.5",
                          "--fallback-dir", str(tmp_path / "fallback"), env=env if how == "read-only" else None)
    try:
        _wait_for_steps(str(run_dir))
        if how == "removed":
            shutil.rmtree(run_dir)
        else:
            trigger.touch()
        output, _ = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    done = subprocess.CompletedProcess(proc.args, proc.returncode, output, "")
    _assert_clean_end(done, tmp_path / "out")
    assert proc.returncode == 1
    stopped = [line for line in output.splitlines() if "] failed: sweep stopped: " in line]
    if how == "removed":
        assert stopped == [f"[tests.tiny_models:tiny_cnn/no_ddp/bs2/n1/gloo] failed: sweep stopped: the run "
                           f"directory {run_dir} was removed"]
    else:
        assert stopped == ["[tests.tiny_models:tiny_cnn/no_ddp/bs2/n1/gloo] failed: sweep stopped: rank 0: "
                           "read-only filesystem writing events/rank-0.jsonl"]
    assert "Summary not saved in" in output and f"written to {tmp_path / 'fallback'}" in output
    (saved,) = glob.glob(str(tmp_path / "fallback" / "run-*" / "summary.json"))
    with open(saved, encoding="utf-8") as handle:
        configs = json.load(handle)["configs"]
    assert [c["status"] for c in configs] == ["failed", "not_run"]
    assert configs[0]["stats"]["n"] > 0  # what was measured before is in the summary


@pytest.mark.slow
def test_a_stalling_filesystem_never_lands_in_a_step_time(tmp_path):
    """Every write of the ranks' events stalls 1 s, as on an NFS server under load: the phase takes the
    stalls, no measured step does (the flush happens after the step's clock stopped). A step that held a stall
    would last at least the stall; beside a busy process the tiny model's steps reached 0.15 s, so the bound
    is the stall itself, not a fraction of it, and the stall is long enough to leave a slow VM's worst step
    far below it."""
    from ddptop.protocol.storage import SLOW_WRITE_ENV, SLOW_WRITE_PATTERN_ENV
    from ddptop.protocol.wire import EventFileReader

    stall = 1.0
    done = ddptop("run", "--headless", "--no-plots", "--out", str(tmp_path / "run"), *TINY, "--world-sizes", "1",
                  "--no-baseline", "--iters", "400", "--telemetry-interval", "0",
                  env={SLOW_WRITE_ENV: str(stall), SLOW_WRITE_PATTERN_ENV: "*/events/*"})
    assert done.returncode == 0, done.stdout + done.stderr
    (events,) = glob.glob(str(tmp_path / "run" / "launches" / "*" / "events" / "rank-0.jsonl"))
    read = EventFileReader(events).read_rest()
    steps = [t for e in read if e["type"] == "samples" and e["phase"] == "measure" for t in e["sec"]]
    end = next(e for e in read if e["type"] == "config_end")
    assert len(steps) == 400
    assert end["measure_s"] - sum(steps) >= stall  # the stalls happened inside the phase...
    assert max(steps) < stall  # ...and none inside a step
