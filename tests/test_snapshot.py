"""Snapshots: what views read while another thread feeds the session, and what they hold."""

import functools
import json
import os
import threading
import time
from types import SimpleNamespace

import pytest

from ddptop.run import rundir
from ddptop.live.live_scaling import live_scaling
from ddptop.headless import _status_text
from ddptop.run.plan import PlanOptions, build_plan
from ddptop.protocol.wire import EventWriter
from ddptop.run.session import Session
from ddptop.run.snapshot import CHART_TAIL
from ddptop.run.sweep import SweepRunner
from ddptop.telemetry.inventory import Inventory
from ddptop.tui.format import braille_chart
from ddptop.run.snapshot import RunPhase
from ddptop.tui.panels.configs import _config_cells

RUN_SECONDS = 10.0
# paced: 60 events every 10 ms over the ranks' files (6,000/s), read back by the feeder after each write
SNAPSHOT_PERIOD = 0.01  # 100 snapshots a second, 25 times the default frame rate


def _plan():
    options = PlanOptions(models=["resnet18"], world_sizes=[1, 2], batch_sizes=[4], iters=10**6, warmup=0)
    return build_plan(options, Inventory(problem="test"), cpu_count=2)


class Feeder(threading.Thread):
    """Plays the ranks of every configuration in turn (hello, start, steps, end) and applies what it wrote
    to the session as it goes, as the sweep thread and the frame worker do in a real run."""

    def __init__(self, session: Session, seconds: float) -> None:
        super().__init__(daemon=True)
        self.session = session
        self.seconds = seconds
        self.written = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._feed()
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc

    def _feed(self) -> None:
        plan, run_dir = self.session.plan, self.session.run_dir
        launches = plan.launches()
        deadline = time.monotonic() + self.seconds
        share = self.seconds / len(plan.configs())
        for number, launch in enumerate(launches, 1):
            name = f"{number:02d}-{launch.launch_key}"
            self.session.mark(what="launch_start", launch=name, world_size=launch.world_size,
                              backend=launch.backend, configs=[c.config_id for c in launch.configs])
            events = os.path.join(rundir.launch_dir(run_dir, number, launch.launch_key, 0), "events")
            writers = [EventWriter(os.path.join(events, f"rank-{r}.jsonl"), r, 0.0) for r in range(launch.world_size)]
            for rank, writer in enumerate(writers):
                writer.emit("hello", world_size=launch.world_size, host=os.uname().nodename, pid=os.getpid(),
                            device="cpu", local_rank=rank)
            for config in launch.configs:
                until = min(deadline, time.monotonic() + share)
                for writer in writers:
                    writer.emit("config_start", config_id=config.config_id, warmup=0, iters=10**6)
                step = 0
                while time.monotonic() < until:
                    began = time.monotonic()
                    per_rank = max(1, 60 // len(writers))
                    for rank, writer in enumerate(writers):
                        for i in range(per_rank):
                            writer.emit("samples", config_id=config.config_id, phase="measure",
                                        first_iter=step + i, sec=[0.05 + 0.001 * ((step + i + rank) % 7)])
                        writer.flush()
                        self.written += per_rank
                    step += per_rank
                    self.session.refresh()
                    time.sleep(max(0.0, 0.01 - (time.monotonic() - began)))
                for writer in writers:
                    writer.emit("config_end", config_id=config.config_id, status="ok")
                    writer.flush()
                self.session.refresh()
            for writer in writers:
                writer.close()
            self.session.mark(what="launch_end", launch=name, exit_code=0, status="ok")
        self.session.mark(what="sweep_end")


def _render(snapshot) -> int:
    """What the views do with a snapshot: table cells, headless lines and the chart; the cells drawn."""
    drawn = 0
    for config in snapshot.configs:
        drawn += len(_config_cells(config, None))
        _status_text(config)
        if config.tails:
            braille_chart(list(config.tails.values()), 80, 10)
    return drawn


def test_snapshots_taken_while_another_thread_feeds_the_session_are_whole_and_match_a_rebuild(tmp_path):
    plan = _plan()
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    feeder = Feeder(session, RUN_SECONDS)
    feeder.start()
    taken, seen_counts = 0, []
    started = time.monotonic()
    while feeder.is_alive():
        snapshot = session.snapshot()
        _render(snapshot)
        live_scaling(session)
        for config in snapshot.configs:  # a snapshot is one moment: its counts agree with its own tails
            if config.stats is not None:
                assert config.stats.n == config.sample_count
                assert sum(len(t) for t in config.tails.values()) == min(
                    config.sample_count, sum(min(len(t), CHART_TAIL) for t in config.tails.values()))
        seen_counts.append(sum(c.sample_count for c in snapshot.configs))
        taken += 1
        time.sleep(SNAPSHOT_PERIOD)
    feeder.join()
    elapsed = time.monotonic() - started
    assert feeder.error is None, feeder.error
    print(f"{feeder.written / elapsed:.0f} events/s fed, {taken / elapsed:.0f} snapshots/s taken and drawn")
    assert seen_counts == sorted(seen_counts), "a later snapshot showed fewer steps than an earlier one"

    session.refresh(final=True)
    final = session.snapshot()
    rebuilt = Session.load(session.run_dir)
    rebuilt.refresh(final=True)
    assert rebuilt.snapshot() == final
    assert sum(c.sample_count for c in final.configs) == feeder.written
    assert [c.status for c in final.configs] == ["ok"] * len(plan.configs())
    session.close()


def test_a_snapshot_does_not_change_when_the_session_does(tmp_path):
    plan = _plan()
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    config = plan.configs()[0]
    events = os.path.join(rundir.launch_dir(session.run_dir, 1, "n1-gloo", 0), "events")
    writer = EventWriter(os.path.join(events, "rank-0.jsonl"), 0, 0.0)
    writer.emit("config_start", config_id=config.config_id, warmup=0, iters=10)
    writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=0, sec=[0.1, 0.2])
    writer.flush()
    session.refresh()
    before = session.snapshot()
    writer.emit("samples", config_id=config.config_id, phase="measure", first_iter=2, sec=[0.3])
    writer.flush()
    session.refresh()
    after = session.snapshot()
    assert before.configs[0].tails[0] == (0.1, 0.2) and before.configs[0].stats.n == 2
    assert after.configs[0].tails[0] == (0.1, 0.2, 0.3) and after.configs[0].stats.n == 3
    assert before.configs[0].revision < after.configs[0].revision
    with pytest.raises(AttributeError):
        before.configs[0].status = "ok"  # frozen
    with pytest.raises(TypeError):
        before.configs[0].tails[0] = ()  # read-only mapping
    writer.close()
    session.close()


def test_with_rounds_the_view_follows_the_configuration_being_measured(tmp_path):
    options = PlanOptions(models=["resnet18"], world_sizes=[1], batch_sizes=[4], iters=10, warmup=0, rounds=2)
    plan = build_plan(options, Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    first, second = (c.config_id for c in plan.configs())
    writer = EventWriter(os.path.join(rundir.launch_dir(session.run_dir, 1, "n1-gloo", 0), "events",
                                      "rank-0.jsonl"), 0, 0.0)
    writer.emit("config_start", config_id=first, warmup=0, iters=10, round=0, rounds=2)
    writer.emit("samples", config_id=first, phase="measure", first_iter=0, sec=[0.1] * 10)
    writer.emit("config_end", config_id=first, status="ok", round=0, last=False)
    writer.emit("config_start", config_id=second, warmup=0, iters=10, round=0, rounds=2)
    writer.flush()
    session.refresh()
    snapshot = session.snapshot()
    assert [c.status for c in snapshot.configs] == ["running", "running"]  # the first waits for its round 2
    assert session.measuring() == second and snapshot.running().config_id == second
    writer.close()
    session.close()


def _two_ranks_of_one_launch(tmp_path, comm_iters, trace_steps=0, options=None):
    """A session of one resnet18 configuration at N=2 (or of ``options``' one) whose launch has started, and its
    two ranks' writers."""
    options = options or PlanOptions(models=["resnet18"], world_sizes=[2], batch_sizes=[4], iters=10, warmup=0,
                                     comm_iters=comm_iters, baseline=False, launches=1, trace_steps=trace_steps)
    plan = build_plan(options, Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    (launch,) = plan.launches()
    (config,) = launch.configs
    name = f"01-{launch.launch_key}"
    session.mark(what="launch_start", launch=name, world_size=2, backend=launch.backend, configs=[config.config_id])
    events = os.path.join(rundir.launch_dir(session.run_dir, 1, launch.launch_key, 0), "events")
    writers = [EventWriter(os.path.join(events, f"rank-{r}.jsonl"), r, 0.0) for r in range(2)]
    return session, config, name, writers


def _emit_all(session, config, writers, kind, **fields):
    """One event of ``kind`` from every rank, read by the session: the configuration as the views show it."""
    for writer in writers:
        writer.emit(kind, config_id=config.config_id, **fields)
        writer.flush()
    session.refresh()
    (shown,) = session.snapshot().configs
    return shown


def test_a_traced_configuration_says_its_trace_then_its_communication_analysis(tmp_path):
    """After its steps, the profiler trace runs before the compute/communication split: the status line names
    each in turn, and nothing once every rank reported both."""
    session, config, name, writers = _two_ranks_of_one_launch(tmp_path, comm_iters=5, trace_steps=3)
    emit_all = functools.partial(_emit_all, session, config, writers)

    emit_all("config_start", warmup=0, iters=10)
    emit_all("samples", phase="measure", first_iter=0, sec=[0.05] * 10)
    emit_all("config_end", status="ok")
    assert "analysing 1M/2P resnet18 bs4: profiler trace" in _status_line(session)
    emit_all("heartbeat", doing="traced step 1 of 5")
    assert "analysing 1M/2P resnet18 bs4: profiler trace" in _status_line(session)
    emit_all("trace", path="traces/x/rank0.pt.trace.json.gz", steps=3, wall_s=1.0, note="no room")
    assert "analysing 1M/2P resnet18 bs4: compute vs communication" in _status_line(session)
    emit_all("comm", analysis_s=1.0)
    assert session.snapshot().analysing() is None and "analysing" not in _status_line(session)
    for writer in writers:
        writer.close()
    session.close()


def test_a_script_s_traced_steps_are_said_as_its_trace_before_its_end(tmp_path):
    """A script's ranks trace after their measured steps and end after: while they say so (heartbeats with
    ``trace``), the view says its profiler trace runs, not a running configuration with nothing left; its end
    after the trace makes it ok with nothing running."""
    script = tmp_path / "train.py"
    script.write_text("print('training')\n")
    options = PlanOptions(script=[str(script)], world_sizes=[2], iters=10, warmup=1, launches=1, trace_steps=3)
    session, config, _, writers = _two_ranks_of_one_launch(tmp_path, 0, options=options)
    emit_all = functools.partial(_emit_all, session, config, writers)

    emit_all("config_start", warmup=1, iters=10)
    shown = emit_all("samples", phase="measure", first_iter=0, sec=[0.05] * 10)
    assert shown.status == "running" and not shown.analysing
    shown = emit_all("heartbeat", doing="traced step 1 of 5", trace=True)
    assert shown.status == "running" and shown.analysis_phase == "profiler trace"
    assert f"analysing {shown.heading}: profiler trace" in _status_line(session)
    emit_all("trace", path="traces/x/rank0.pt.trace.json.gz", steps=3, wall_s=1.0, note="no room")
    shown = emit_all("config_end", status="ok", iters=10, warmup_iters=1, ended_by="ddptop")
    assert shown.status == "ok" and not shown.analysing and session.snapshot().analysing() is None
    for writer in writers:
        writer.close()
    session.close()


@pytest.mark.parametrize("ending", ["reported", "launch ended"])
def test_a_ddp_configuration_is_analysing_between_its_end_and_its_analysis(tmp_path, ending):
    """Its steps ended well, its compute/communication split still runs: the views say so, until every rank
    has reported it or the launch ended without it."""
    session, config, name, writers = _two_ranks_of_one_launch(tmp_path, comm_iters=5)
    emit_all = functools.partial(_emit_all, session, config, writers)

    assert not emit_all("config_start", warmup=0, iters=10).analysing
    emit_all("samples", phase="measure", first_iter=0, sec=[0.05] * 10)
    shown = emit_all("config_end", status="ok")
    assert shown.status == "ok" and shown.analysing and session.snapshot().analysing() == shown
    assert _config_cells(shown, None)["status"].plain == "analysing"
    assert "analysing 1M/2P resnet18 bs4: compute vs communication" in _status_line(session)
    assert _table_status(session, "running") == "analysing"
    # a watched run whose ddptop died here: nothing analyses it any more, whatever its files last said
    assert (_table_status(session, RunPhase.WRITER_GONE) == "ok"
            and "analysing" not in _status_line(session, RunPhase.WRITER_GONE))
    if ending == "reported":
        shown = emit_all("comm", analysis_s=1.0)
    else:
        session.mark(what="launch_end", launch=name, exit_code=1, status="failed")
        (shown,) = session.snapshot().configs
    assert not shown.analysing and session.snapshot().analysing() is None
    assert _config_cells(shown, None)["status"].plain == "ok"
    assert "analysing" not in _status_line(session)
    for writer in writers:
        writer.close()
    session.close()


def _table_status(session, phase: str) -> str:
    """The status cell the configuration table draws for the only configuration, in a run in this phase."""
    from ddptop.tui.panels.configs import ConfigTable

    table = ConfigTable([])
    table.update_from(_run_snapshot(session, phase))
    (row,) = table.rows
    return table.get_cell(row, "status").plain


def _run_snapshot(session, phase: str):
    import dataclasses

    from ddptop.control import RecordedControl

    recorded = RecordedControl.of(os.path.join(os.path.dirname(__file__), "data", "recorded-run")).take_snapshot()
    return dataclasses.replace(recorded, session=session.snapshot(), phase=phase, live=phase == "running")


def _status_line(session, phase: str = "running") -> str:
    """The live view's status line over this session (a recorded run's snapshot supplies the rest)."""
    from ddptop.tui.panels.status import StatusLine

    line, shown = StatusLine(), []
    line.show_content = lambda text: shown.append(str(text))
    line.update_from(_run_snapshot(session, phase))
    return shown[0]


def test_a_configuration_between_its_launches_is_queued_not_running(tmp_path):
    """Measured in its first launch of two and waiting for the second: the table says so instead of
    "running", while another configuration runs; only once every rank ended that launch's round."""
    options = PlanOptions(models=["resnet18"], world_sizes=[2], batch_sizes=[4], iters=10, warmup=0, comm_iters=0,
                          baseline=False, launches=2)
    plan = build_plan(options, Inventory(problem="test"), cpu_count=2)
    session = Session.create(plan, rundir.create_run_dir(str(tmp_path / "run"), plan.name))
    first = plan.launches()[0]
    (config,) = first.configs
    name = f"01-{first.launch_key}"
    session.mark(what="launch_start", launch=name, world_size=2, backend=first.backend, configs=[config.config_id])
    events = os.path.join(rundir.launch_dir(session.run_dir, 1, first.launch_key, 0), "events")
    writers = [EventWriter(os.path.join(events, f"rank-{r}.jsonl"), r, 0.0) for r in range(2)]

    def emit(writer, kind, **fields):
        writer.emit(kind, config_id=config.config_id, **fields)
        writer.flush()
        session.refresh()
        (shown,) = session.snapshot().configs
        return shown

    for writer in writers:
        emit(writer, "config_start", warmup=0, iters=10, round=0, rounds=2)
        emit(writer, "samples", phase="measure", first_iter=0, sec=[0.05] * 10)
    shown = emit(writers[0], "config_end", status="ok", round=0, last=False)
    assert shown.launches_measured == 0  # rank 1 has not ended the round yet
    assert _config_cells(shown, None, measuring=False)["status"].plain == "running"
    shown = emit(writers[1], "config_end", status="ok", round=0, last=False)
    assert shown.status == "running" and (shown.launches_measured, shown.launches_planned) == (1, 2)
    assert _config_cells(shown, None, measuring=False)["status"].plain == "queued 2/2"
    assert _config_cells(shown, None, measuring=True)["status"].plain == "running"  # its second launch measures it
    for writer in writers:
        writer.close()
    session.close()


@pytest.mark.parametrize("oom", [False, True], ids=["crash", "out-of-memory"])
def test_a_failure_s_reason_is_the_first_error_in_time_not_the_first_read(tmp_path, oom):
    """Rank 1 fails and reports it; rank 0's collective then breaks (an echo: the connection closed by its
    peer). Rank 0's file happens to be read first: the reason, and the status (an out of memory is no crash),
    still name rank 1's error, the cause."""
    session, config, _, writers = _two_ranks_of_one_launch(tmp_path, comm_iters=0)
    for writer in writers:
        writer.emit("config_start", config_id=config.config_id, warmup=0, iters=10)
        writer.flush()
    cause, echo = writers[1], writers[0]
    error_type, message = ("OutOfMemoryError", "CUDA out of memory") if oom else ("RuntimeError", "injected failure")
    cause.emit("error", config_id=config.config_id, error_type=error_type, message=f"{message} on rank 1",
               traceback="", oom=oom)
    cause.emit("config_end", config_id=config.config_id, status="oom" if oom else "failed")
    time.sleep(0.01)
    echo.emit("error", config_id=config.config_id, error_type="RuntimeError",
              message="Connection closed by peer [127.0.0.1]:1234", traceback="", oom=False)
    echo.emit("config_end", config_id=config.config_id, status="failed")
    echo.flush()
    session.refresh()  # the echo alone so far
    (shown,) = session.snapshot().configs
    assert shown.status == "failed" and shown.reason == ("rank 0: RuntimeError: Connection closed by peer "
                                                         "[127.0.0.1]:1234")
    cause.flush()
    session.refresh()
    (shown,) = session.snapshot().configs
    if oom:
        assert shown.status == "oom"
        assert shown.reason == "out of memory: rank 1: OutOfMemoryError: CUDA out of memory on rank 1"
    else:
        assert shown.status == "failed" and shown.reason == "rank 1: RuntimeError: injected failure on rank 1"
    for writer in writers:
        writer.close()
    session.close()


def _write_agent_failures(launch_dir, root, *others) -> None:
    """agent.log's failure table in torchrun's own layout: ``root`` and each of ``others`` a failure as
    (rank, exit code, second it was stamped in); the index in brackets is no rank."""
    def block(index, failure):
        rank, code, second = failure
        signal_name = {-9: "SIGKILL", -15: "SIGTERM"}.get(code)
        exit_text = f"{code} (pid: 41{rank:02})" + (f"  ({signal_name})" if signal_name else "")
        traceback = (f"Signal {-code} ({signal_name}) received by PID 41{rank:02}" if signal_name
                     else "To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html")
        return (f"[{index}]:\n  time      : 2026-11-27_09:50:{second:02}\n  host      : localhost\n"
                f"  rank      : {rank} (local_rank: {rank})\n  exitcode  : {exit_text}\n  error_file: <N/A>\n"
                f"  traceback : {traceback}\n")

    listed = "".join(block(i + 1, failure) for i, failure in enumerate(others)) or "  <NO_OTHER_FAILURES>\n"
    os.makedirs(launch_dir, exist_ok=True)
    with open(os.path.join(launch_dir, "agent.log"), "w", encoding="utf-8") as handle:
        handle.write("torch.distributed.elastic.multiprocessing.errors.ChildFailedError: \n" + "=" * 60 +
                     "\nbench_kernels.ddp FAILED\n" + "-" * 60 + "\nFailures:\n" + listed + "-" * 60 +
                     "\nRoot Cause (first observed failure):\n" + block(0, root) + "=" * 60 + "\n")


def _cause(launch_dir, *reported_ranks):
    return SweepRunner._silent_death(launch_dir, SimpleNamespace(errors=[{"rank": r, "t": 1.0}
                                                                         for r in reported_ranks]))


@pytest.mark.parametrize("root_rank", [0, 1], ids=["tie-to-the-echo", "root-cause-is-the-kill"])
def test_a_silently_killed_rank_is_the_cause_whichever_failure_torchrun_calls_first(tmp_path, root_rank):
    """Rank 1 was SIGKILLed and rank 0's collective then broke, both noticed in one second. torchrun stamps a
    failure in whole seconds and breaks a tie towards the lower rank, so its root cause can be rank 0's echo.
    The rank that died without a word is named either way; one that reported its own error is not."""
    launch_dir = str(tmp_path / "launch")
    killed, echo = (1, -9, 1), (0, 1, 1)
    _write_agent_failures(launch_dir, *((killed, echo) if root_rank else (echo, killed)))
    assert rundir.failed_ranks(launch_dir) == [(r, c, f"2026-11-27_09:50:{t:02}")
                                               for r, c, t in ((killed, echo) if root_rank else (echo, killed))]
    assert _cause(launch_dir, 0) == "rank 1 killed by SIGKILL"
    assert _cause(launch_dir, 0, 1) is None  # both said what happened to them: nothing silent


@pytest.mark.parametrize("stopped", [(0, 143, 1), (0, -15, 1), (0, -9, 31), (0, 1, 3)],
                         ids=["its-handler-exited-143", "sigterm", "sigkill-30s-later", "exit-1-later"])
def test_a_rank_torchrun_stopped_after_a_reported_crash_is_no_cause(tmp_path, stopped):
    """Rank 1 crashed and said so; torchrun then stopped rank 0 before it could say anything: SIGTERM, which
    the kernel's handler turns into exit 143, or the default action (-15), or SIGKILL 30 s on when rank 0 was
    stuck in a wait; or rank 0 ended seconds later. None of these is a silent death: no cause is put in front
    of rank 1's error."""
    launch_dir = str(tmp_path / "launch")
    _write_agent_failures(launch_dir, (1, 1, 1), stopped)
    assert _cause(launch_dir, 1) is None


def test_a_sigterm_torchrun_saw_first_is_the_cause(tmp_path):
    """A SIGTERM from outside (a scheduler's preemption of one rank) that torchrun noticed first is the cause."""
    launch_dir = str(tmp_path / "launch")
    _write_agent_failures(launch_dir, (0, -15, 1), (1, 1, 1))
    assert _cause(launch_dir, 1) == "rank 0 killed by SIGTERM"


def test_a_launch_without_a_failure_table_names_no_silent_rank(tmp_path):
    """The recorded H100 out of memory lists its one failure; a clean agent.log lists none."""
    recorded = os.path.join(os.path.dirname(__file__), "data", "h100", "oom", "launches", "01-n1-nccl")
    assert rundir.failed_ranks(recorded) == [(0, 1, "2026-11-26_19:33:17")]
    clean = tmp_path / "clean"
    clean.mkdir()
    (clean / "agent.log").write_text("INFO Starting elastic_operator\nINFO all workers finished\n")
    assert rundir.failed_ranks(str(clean)) == []
    one = str(tmp_path / "one")
    _write_agent_failures(one, (1, -9, 5))
    assert rundir.failed_ranks(one) == [(1, -9, "2026-11-27_09:50:05")] and _cause(one) == "rank 1 killed by SIGKILL"


def _recorded_h100_oom() -> dict:
    """The error event of the real CUDA out of memory that ended the H100's batch sweep (tests/data/h100/oom)."""
    path = os.path.join(os.path.dirname(__file__), "data", "h100", "oom", "launches", "01-n1-nccl", "events",
                        "rank-0.jsonl")
    with open(path, encoding="utf-8") as handle:
        return next(e for e in map(json.loads, handle) if e["type"] == "error")


def test_a_cuda_out_of_memory_s_reason_keeps_its_figures_in_whole_sentences(tmp_path):
    """The H100's message (asked, capacity, free, in use, the cap, what PyTorch held; then torch's advice and a
    link) reads in whole sentences with every figure and without the advice, never cut mid-word."""
    recorded = _recorded_h100_oom()
    session, config, _, writers = _two_ranks_of_one_launch(tmp_path, comm_iters=0)
    for writer in writers:
        writer.emit("config_start", config_id=config.config_id, warmup=0, iters=10)
    writers[0].emit("error", config_id=config.config_id, error_type=recorded["error_type"],
                    message=recorded["message"], traceback=recorded["traceback"], oom=recorded["oom"])
    writers[0].emit("config_end", config_id=config.config_id, status="oom")
    for writer in writers:
        writer.flush()
    session.refresh()
    (shown,) = session.snapshot().configs
    assert shown.status == "oom"
    first_line = recorded["message"].splitlines()[0]
    advice = first_line.index(" If reserved but unallocated")
    assert "See documentation" in first_line[advice:]  # the recorded message does go on past its figures
    assert shown.reason == f"out of memory: rank 0: OutOfMemoryError: {first_line[:advice]} …"
    for figure in ("196.00 MiB", "79.18 GiB", "72.02 GiB is free", "7.15 GiB memory in use", "5.86 GiB allowed"):
        assert figure in shown.reason
    for writer in writers:
        writer.close()
    session.close()


@pytest.mark.parametrize("message, limit, expected", [
    ("One. Two. Three.", 100, "One. Two. Three."),
    ("One. Two. Three.", 12, "One. Two. …"),
    ("first line. still first\nsecond line", 100, "first line. still first …"),
    ("a sentence far longer than the limit allows", 20, "a sentence far …"),
])
def test_a_brief_message_keeps_whole_sentences_and_says_when_it_left_some_out(message, limit, expected):
    from ddptop.run.failure_reasons import brief_message

    assert brief_message(message, limit) == expected
    assert len(brief_message(message, limit)) <= max(limit, len(expected))
