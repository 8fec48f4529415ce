"""Time left: the running configuration's from its progress, the sweep's from the configurations ended."""

import pytest

from ddptop.run import eta
from ddptop.run.snapshot import ConfigSnapshot, SessionSnapshot

T0 = 1_000_000.0


def config(name, status, progress=0.0, started=None, ended=None):
    return ConfigSnapshot(config_id=name, label=name, model="m", mode="ddp", batch_size=1, backend="gloo",
                          status=status, reason=None, progress=progress, sample_count=0, revision=0, stats=None,
                          started_t=started, ended_t=ended)


def session(*configs, measuring=None):
    return SessionSnapshot(run_dir="r", plan_name="p", configs=configs, launches=(), ranks=(), started_t=T0,
                           ended_t=None, last_event_t=None, writer=None, events_applied=0, measuring=measuring)


def test_a_running_configuration_projects_its_time_so_far_by_its_progress():
    running = config("a", "running", progress=0.25, started=T0 + 10)
    assert eta.config_remaining(running, T0 + 20) == pytest.approx(30.0)  # 10 s for a quarter: 30 s to go
    assert eta.config_remaining(config("a", "running", progress=0.01, started=T0), T0 + 5) is None  # too early
    assert eta.config_remaining(config("a", "ok", progress=1.0, started=T0, ended=T0 + 5), T0 + 9) is None


def test_the_sweep_adds_the_mean_wall_time_per_ended_configuration_for_each_pending_one():
    # one configuration ended 20 s into the sweep (its launch included); the running one needs 30 s more
    ended = config("a", "ok", progress=1.0, started=T0 + 5, ended=T0 + 20)
    running = config("b", "running", progress=0.25, started=T0 + 30)
    snapshot = session(ended, running, config("c", "pending"), config("d", "pending"), measuring="b")
    assert eta.sweep_remaining(snapshot, T0 + 40) == pytest.approx(30.0 + 2 * 20.0)
    # nothing ended yet: no figure for the pending ones, so none for the sweep
    assert eta.sweep_remaining(session(running, config("c", "pending"), measuring="b"), T0 + 40) is None
    # the last configuration running: the sweep's time left is its own
    assert eta.sweep_remaining(session(ended, running, measuring="b"), T0 + 40) == pytest.approx(30.0)
