"""The hang rule on real files: startup gets a grace period, then silence is counted from the last event."""

import os
import time

from ddptop.protocol.wire import encode, make_event
from ddptop.run.hang_watch import STARTUP_GRACE, HangWatch


def test_startup_is_not_a_hang_but_silence_after_events_is(tmp_path):
    events = tmp_path / "events"
    events.mkdir()
    watch = HangWatch(str(events), timeout=4)
    watch.started -= 60  # a minute of importing torch on a busy node, no event yet
    (events / "rank-0.jsonl").write_bytes(b"")  # the rank opened its file but wrote nothing
    assert watch.silent_for() is None
    watch.started -= STARTUP_GRACE
    assert watch.silent_for() is not None and "no rank started" in watch.reason(watch.silent_for())
    # events arrive: the short timeout now applies, from the newest event of any rank
    for rank, age in ((0, 10), (1, 2)):
        path = events / f"rank-{rank}.jsonl"
        path.write_bytes(b"{}\n")
        os.utime(path, (time.time() - age, time.time() - age))
    assert watch.silent_for() is None  # rank 1 spoke 2 s ago
    os.utime(events / "rank-1.jsonl", (time.time() - 6, time.time() - 6))
    silent = watch.silent_for()
    assert 6 <= silent < 7
    assert "rank-0 10 s ago, rank-1 6 s ago" in watch.reason(silent)


def test_a_rank_setting_up_a_configuration_gets_the_startup_grace_and_then_the_timeout_again(tmp_path):
    """A rank's last event says it is building its model (a setup heartbeat, as the kernel writes it before
    every configuration and before a compiled first step): its silence is allowed the startup grace, not the
    short timeout; once it has written anything else the timeout applies again."""
    events = tmp_path / "events"
    events.mkdir()
    watch = HangWatch(str(events), timeout=4)
    hello = encode(make_event("hello", 0, world_size=1, host="h", pid=1, device="cpu"))
    building = encode(make_event("heartbeat", 0, config_id="big/ddp/bs1/n1/gloo",
                                 doing="building the model, counting its FLOPs, wrapping it", setup=True))
    path = events / "rank-0.jsonl"

    def written(data: bytes, age: float) -> None:
        path.write_bytes(data)
        os.utime(path, (time.time() - age, time.time() - age))

    written(hello + building, 60)  # a minute into building a large model
    assert watch.silent_for() is None
    written(hello + building, STARTUP_GRACE + 1)
    silent = watch.silent_for()
    assert silent is not None and "while setting up a configuration" in watch.reason(silent)
    started = encode(make_event("config_start", 0, config_id="big/ddp/bs1/n1/gloo", warmup=2, iters=4))
    written(hello + building + started, 6)  # built; then silent in its steps for longer than the timeout
    silent = watch.silent_for()
    assert silent is not None and "--hang-timeout 4" in watch.reason(silent)
    progress = encode(make_event("heartbeat", 0, config_id="big/ddp/bs1/n1/gloo", doing="traced step 1 of 4"))
    written(hello + building + started + progress, 6)  # a heartbeat that is no setup: the timeout stands
    assert watch.silent_for() is not None


def test_a_script_past_its_setup_is_held_to_the_timeout_and_told_how_a_step_is_seen(tmp_path):
    """A script's probe says 'setup' until the script draws its first batch, then a heartbeat that is no setup:
    from there the short timeout applies, and a launch silent past it without any step of the script is told
    how ddptop sees a step (the optimizer's post-hook, ddptop_probe.step in explicit mode)."""
    events = tmp_path / "events"
    events.mkdir()
    watch = HangWatch(str(events), timeout=4)
    config_id = "script:/tmp/train.py/n1/gloo"
    setup = encode(make_event("heartbeat", 0, config_id=config_id, doing="the script's setup, until its first step",
                              setup=True))
    drew = encode(make_event("heartbeat", 0, config_id=config_id,
                             doing="the script's first step: it drew a batch, no optimizer step yet"))
    path = events / "rank-0.jsonl"
    path.write_bytes(setup)
    os.utime(path, (time.time() - 6, time.time() - 6))
    assert watch.silent_for() is None  # its setup: the startup grace
    path.write_bytes(setup + drew)
    os.utime(path, (time.time() - 6, time.time() - 6))
    silent = watch.silent_for()
    assert silent is not None
    reason = watch.reason(silent, script_without_step=True)
    assert reason.startswith("hang: no training step seen from the script in 6 s (--hang-timeout 4")
    for words in ("optimizer step post-hook", "ddptop_probe.step", "torch.multiprocessing.spawn", "rank-0 6 s ago"):
        assert words in reason
    assert "no training step" not in watch.reason(silent)  # a kernel's, or a script that stepped: as before
