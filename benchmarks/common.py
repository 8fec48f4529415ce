"""What the benchmark scripts share: the repository path, a program in a pseudo-terminal, result rows.

Every script prints its own report; given ``--json PATH`` it also writes its rows there, for run_all.py's
table. A row is one measured figure: what, the figure as text, the goal as text, and whether it was met
(None where there is no goal).
"""

from __future__ import annotations

import argparse
import fcntl
import json
import math
import os
import pty
import signal
import struct
import subprocess
import termios
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def row(what: str, figure: str, goal: str = "", met: bool | None = None) -> dict:
    return {"what": what, "figure": figure, "goal": goal, "met": met}


def add_json_option(parser) -> None:
    parser.add_argument("--json", metavar="PATH", help="also write the result rows here (for run_all.py)")


def simulation_options(doc: str, quick: str) -> argparse.Namespace:
    """The options of a simulation of ddptop's intervals (launch_variance.py, tail_interval.py): --json, the
    synthetic sweeps (--trials), the bootstrap's --resamples and --quick (``quick`` says what it keeps)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument("--resamples", type=int, default=400)
    parser.add_argument("--quick", action="store_true", help=quick)
    return parser.parse_args()


def geometric_interval(ratios: list[float], resamples: int = 10000, seed: int = 0) -> tuple[float, float, float]:
    """The geometric mean of ``ratios`` and its 95% percentile-bootstrap interval."""
    import numpy  # the benchmarks that compare ratios only

    logs = numpy.log(numpy.asarray(ratios))
    rng = numpy.random.default_rng(seed)
    means = rng.choice(logs, size=(resamples, len(logs)), replace=True).mean(axis=1)
    low, high = numpy.percentile(means, [2.5, 97.5])
    return math.exp(logs.mean()), math.exp(low), math.exp(high)


def write_rows(path: str | None, rows: list[dict]) -> None:
    if path:
        with open(path, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)


def ddptop_env(**extra: str) -> dict:
    return dict(os.environ, PYTHONPATH=REPO, **extra)


class PtyProgram:
    """A program in a pseudo-terminal of a given size, as over SSH: its screen output drained by a thread."""

    def __init__(self, argv: list[str], env: dict, columns: int = 160, lines: int = 50) -> None:
        master, slave = pty.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", lines, columns, 0, 0))
        env = dict(env, TERM=env.get("TERM", "xterm-256color"), COLUMNS=str(columns), LINES=str(lines))
        self.started = time.perf_counter()
        self.process = subprocess.Popen(argv, cwd=REPO, env=env, stdin=slave, stdout=slave, stderr=slave,
                                        start_new_session=True)
        os.close(slave)
        self.master = master
        self.output = bytearray()
        self.lock = threading.Lock()
        self.drainer = threading.Thread(target=self._drain, daemon=True)
        self.drainer.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self.master, 65536)
            except OSError:
                return  # the program closed its side
            if not data:
                return
            with self.lock:
                self.output += data

    def seen(self, text: bytes) -> bool:
        with self.lock:
            return text in self.output

    def wait_for(self, text: bytes, timeout: float) -> float:
        """Seconds from the start until ``text`` was written to the screen."""
        deadline = time.perf_counter() + timeout
        while not self.seen(text):
            if time.perf_counter() > deadline or self.process.poll() is not None:
                with self.lock:
                    tail = bytes(self.output[-500:])
                raise SystemExit(f"{text!r} never appeared on the screen; it said: {tail!r}")
            time.sleep(0.02)
        return time.perf_counter() - self.started

    def send(self, keys: bytes) -> None:
        os.write(self.master, keys)

    def close(self, timeout: float = 60.0) -> int:
        """Wait for the program to end (SIGTERM to its group after ``timeout``); its exit status."""
        try:
            return self.process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGTERM)
            return self.process.wait(timeout=60)
        finally:
            self.drainer.join(timeout=5)
            os.close(self.master)
