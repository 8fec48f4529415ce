"""What every rank program shares, whatever it runs: ``bench_kernels.ddp`` (ddptop's own measured steps) and
``bench_kernels.script_probe`` (a user's training script).

A rank reads its launch spec, dies with its torchrun agent, opens its events file, turns SIGTERM and SIGINT
into an exception that leaves through the flush path, says where its events could not be written, and, once
every event is written, exits without the interpreter's teardown. Its CPU binding and ``hello`` are
``bench_kernels.hello``'s, its ``error`` event's fields ``bench_kernels.errors``'.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import sys
from typing import Any

from ddptop.protocol.launchspec import LaunchSpec, LaunchSpecError
from ddptop.protocol.layout import events_name
from ddptop.protocol.wire import UNWRITABLE_MARK, EventWriter


def read_launch_spec(path: str, program: str) -> LaunchSpec | None:
    """The launch spec, or None after one line on stderr naming its problem (the rank then exits 2): before any
    event file exists, torchrun's log is where this shows."""
    try:
        return LaunchSpec.read(path)
    except LaunchSpecError as exc:
        print(f"{program}: {exc}", file=sys.stderr)
        return None


def events_writer(spec: LaunchSpec, rank: int, flush_interval: float | None = None) -> EventWriter:
    """This rank's events file, opened for appending (OSError where it cannot even be opened), written at most
    every ``flush_interval`` seconds (the launch's by default)."""
    interval = spec.flush_interval if flush_interval is None else flush_interval
    return EventWriter(os.path.join(spec.events_dir, events_name(rank)), rank, interval)


def report_unwritable(rank: int | str, reason: str) -> None:
    """The one line a rank whose events file cannot be written leaves on stderr, where ddptop reads it."""
    print(f"{UNWRITABLE_MARK}rank {rank}: {reason}", file=sys.stderr, flush=True)


def die_with_parent() -> None:
    """Ask Linux to SIGTERM this worker if its torchrun agent dies, so no orphan keeps a GPU busy."""
    if not sys.platform.startswith("linux"):
        return
    try:
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the agent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
    except OSError:
        pass


STOPS_RECEIVED: list[str] = []  # the stop signals this process itself received (raise_on_stop_signals), by name


def raise_on_stop_signals(exception: type[BaseException], only_here: bool = False) -> None:
    """SIGTERM and SIGINT (torchrun shutting the group down) raise ``exception`` with the signal's name, so the
    rank leaves through its normal flush path. With ``only_here``, a process forked from this one (a DataLoader's
    worker, which inherits the handler and gets the group's signal too) ends as it would have without it."""
    owner = os.getpid()

    def on_signal(signum: int, frame: Any) -> None:
        if only_here and os.getpid() != owner:
            if signum == signal.SIGINT:
                signal.default_int_handler(signum, frame)  # KeyboardInterrupt, which a loader's worker expects
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        name = signal.Signals(signum).name
        STOPS_RECEIVED.append(name)  # kept: an error its stop causes (a loader's worker killed) may come out first
        raise exception(name)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)


def max_rss_bytes() -> int | None:
    try:
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB
    except (ImportError, OSError):
        return None


def exit_without_teardown() -> None:
    """Leave with 0 and skip the interpreter's teardown, once the rank has finished: every event is written
    and closed by now and the process group destroyed. The C++ objects torch and gloo leave to static
    destructors have been seen to abort such a rank ("terminate called without an active exception",
    SIGABRT), which its torchrun agent then reports as a failed launch. A failing rank exits the usual way:
    the order in which ranks die is how the root cause of a failure is told from its echoes."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing more to say there anyway
            stream.flush()
    os._exit(0)
