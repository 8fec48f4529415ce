"""The signals that end a sweep early, handled in one way by every way of running one.

Ctrl-C (SIGINT), a scheduler's or ``kill``'s SIGTERM and a dropped SSH connection's SIGHUP all mean "stop the
ranks, save what was measured, exit 130". The frontends (headless, TUI) and a follower node install their own
handler for the three while they run and put the previous ones back after, so a caller (tests, an embedding
program) finds its handlers as it left them.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Callable, Iterator
from types import FrameType
from typing import Any

# SIGHUP is POSIX only; where it does not exist the other two still apply.
STOP_SIGNALS: tuple[signal.Signals, ...] = tuple(
    getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name)
)

Handler = Callable[[int, FrameType | None], Any]


@contextlib.contextmanager
def handle_stop_signals(handler: Handler, signals: tuple[signal.Signals, ...] = STOP_SIGNALS) -> Iterator[None]:
    """Call ``handler(signum, frame)`` for each of ``signals`` inside the block; restore the previous handlers
    on the way out, however the block ends. Must run in the main thread (Python delivers signals there)."""
    previous: dict[signal.Signals, Any] = {}
    try:
        for sig in signals:
            previous[sig] = signal.signal(sig, handler)
        yield
    finally:
        for sig, old in previous.items():
            # None: a handler not set from Python, which cannot be put back; the default is the nearest
            signal.signal(sig, old if old is not None else signal.SIG_DFL)
