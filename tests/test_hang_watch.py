"""The hang rule on real files: startup gets a grace period, then silence is counted from the last event."""

import os
import time

from ddptop.run.sweep import STARTUP_GRACE, HangWatch


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
