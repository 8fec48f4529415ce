"""The telemetry's pace: every ``--telemetry-interval`` seconds, and every ``FAST_INTERVAL`` while a
configuration's steps run on a GPU, so that a measured window of about a second has readings of its own.
The sampling loop runs on a stand-in clock: which ticks it takes is exact, no time is measured."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from ddptop.live.live_run import create_live_run, gpu_steps_run
from ddptop.run.options import PlanOptions
from ddptop.telemetry import monitor as monitor_module
from ddptop.telemetry.fake.nvml import FakeNvml
from ddptop.telemetry.monitor import FAST_INTERVAL, Monitor


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class Stop:
    """The monitor's stop event on the stand-in clock: waiting moves the clock; set from ``until`` on."""

    def __init__(self, clock: Clock, until: float) -> None:
        self.clock, self.until = clock, until

    def is_set(self) -> bool:
        return self.clock.now >= self.until

    def wait(self, timeout: float) -> bool:
        self.clock.now += timeout
        return self.is_set()

    def set(self) -> None:
        self.until = self.clock.now


def ticks_of(monkeypatch, interval: float, fast_while, until: float) -> list[float]:
    clock = Clock()
    monkeypatch.setattr(monitor_module.time, "monotonic", clock)
    monitor = Monitor(interval, None, FakeNvml(steady=True), fast_while=lambda: fast_while(clock.now))
    taken: list[float] = []
    monitor.sample_once = lambda: taken.append(clock.now)  # type: ignore[method-assign]
    monitor._stop = Stop(clock, until)  # type: ignore[assignment]
    monitor._loop()
    return taken


def test_ticks_come_every_fast_interval_while_gpu_steps_run_and_every_interval_otherwise(monkeypatch):
    """Steps on a GPU from t=2 to t=4: a tick a second before, every quarter second during (the first as soon
    as they start, mid-wait), and a second after the last fast tick once they end."""
    assert FAST_INTERVAL == 0.25
    taken = ticks_of(monkeypatch, 1.0, lambda now: 2.0 <= now < 4.0, until=6.0)
    assert taken == [0.0, 1.0] + [2.0 + 0.25 * i for i in range(8)] + [4.75, 5.75]
    assert ticks_of(monkeypatch, 1.0, lambda now: False, until=4.0) == [0.0, 1.0, 2.0, 3.0]


def test_the_fast_interval_is_never_slower_than_the_interval_asked_for_and_a_failing_check_reads_slow():
    steps = [False]
    monitor = Monitor(1.0, None, FakeNvml(steady=True), fast_while=lambda: steps[0])
    assert monitor.current_interval() == 1.0
    steps[0] = True
    assert monitor.current_interval() == FAST_INTERVAL
    assert Monitor(0.1, None, FakeNvml(steady=True), fast_while=lambda: True).current_interval() == 0.1
    assert Monitor(1.0, None, FakeNvml(steady=True)).current_interval() == 1.0  # no check: the interval alone

    def broken() -> bool:
        raise RuntimeError("session being rebuilt")

    assert Monitor(1.0, None, FakeNvml(steady=True), fast_while=broken).current_interval() == 1.0
    info = Monitor(1.0, None, FakeNvml(steady=True), fast_while=lambda: False).open().info()
    assert info["interval"] == 1.0 and info["fast_interval"] == FAST_INTERVAL


@pytest.mark.parametrize(("running", "device", "fast"), [("a", "cuda", True), ("a", "cpu", False), (None, "cuda", False)])
def test_a_live_run_reads_fast_while_a_configuration_on_a_gpu_runs(running, device, fast):
    session = SimpleNamespace(measuring=lambda: running, configs={"a": SimpleNamespace(spec=SimpleNamespace(device=device))})
    assert gpu_steps_run(session) is fast  # type: ignore[arg-type]


def test_the_live_run_s_monitor_asks_its_session(tmp_path):
    options = PlanOptions(models=["resnet18"], batch_sizes=[4], world_sizes=[1], image_size=32, num_classes=10,
                          warmup=2, iters=6, launches=1, comm_iters=0, collectives=[])
    live = create_live_run(options, str(tmp_path / "run"), telemetry_interval=1.0, plots=False)
    assert live.monitor is not None and live.monitor.fast_while is not None
    assert live.monitor.fast_while() is False and live.monitor.current_interval() == 1.0  # nothing runs yet
