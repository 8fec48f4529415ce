"""The live view's own CPU as a user meets it: in tmux (160x50) against a bare pseudo-terminal of the same size
and against ``--headless``, after the same warm-up, side by side in rounds of alternating order.

A real tiny-model sweep (``tests.tiny_models:tiny_cnn``, batch 2, 16 px, one rank, the fake 8-GPU node) streams
steps; once its measured steps have begun, each scenario waits ``--settle`` seconds (what has piled up by then
counts: a frame whose cost grows with the steps or the telemetry held shows here and not in a 2 s window) and
then reads the ddptop process's own user+system CPU over ``--seconds`` (psutil; its rank excluded).

    python benchmarks/tmux_cost.py [--rounds 2] [--settle 20] [--seconds 30] [--scenarios tmux,pty,headless]
                                   [--fps F]   (the live view's frame rate; default: ddptop's)

The goal: the live view within 2 points of a core of headless, in tmux as in a bare terminal.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, add_json_option, ddptop_env, row, write_rows  # noqa: E402
from benchmarks.terminal_cost import in_pty, measuring, wait_until, window  # noqa: E402

SWEEP = ["--models", "tests.tiny_models:tiny_cnn", "--image-size", "16", "--num-classes", "10", "--batch-sizes", "2",
         "--world-sizes", "1", "--no-baseline", "--warmup", "1", "--comm-iters", "0", "--no-collectives",
         "--iters", "100000000", "--max-time-per-config", "900", "--no-trace"]
GOAL_POINTS = 2.0


def ddptop_pid(out: str) -> int | None:
    """The ddptop process writing ``out`` (not its ranks, whose command lines do not name it)."""
    for process in psutil.process_iter(["pid", "cmdline"]):
        command = process.info["cmdline"] or []
        if "ddptop" in command and out in command:
            return process.info["pid"]
    return None


FRAMES: list[str] = []  # --fps F for the live view, where given


def in_tmux(out: str, env: dict, settle: float, seconds: float) -> float:
    session = f"ddptop-cost-{os.getpid()}"
    command = " ".join([sys.executable, "-m", "ddptop", "run", "--out", out, *FRAMES, *SWEEP])
    settings = [f"{k}={v}" for k, v in env.items() if k in ("PYTHONPATH", "DDPTOP_FAKE_NVML")]
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "160", "-y", "50",
                    f"env {' '.join(settings)} {command}"], cwd=REPO, check=True)
    try:
        wait_until(lambda: measuring(out) and ddptop_pid(out) is not None)
        time.sleep(settle)
        return window(ddptop_pid(out), lambda: 0, seconds)[0]
    finally:
        subprocess.run(["tmux", "send-keys", "-t", session, "q"], check=False)
        time.sleep(3)
        subprocess.run(["tmux", "kill-session", "-t", session], check=False, capture_output=True)


def in_bare_pty(out: str, env: dict, settle: float, seconds: float) -> float:
    return in_pty([sys.executable, "-m", "ddptop", "run", "--out", out, *FRAMES, *SWEEP], (160, 50), seconds,
                  lambda: measuring(out), env, settle)[0]


def headless(out: str, env: dict, settle: float, seconds: float) -> float:
    with open(out + ".log", "w", encoding="utf-8") as log:
        process = subprocess.Popen([sys.executable, "-m", "ddptop", "run", "--headless", "--out", out, *SWEEP],
                                   cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_until(lambda: measuring(out))
            time.sleep(settle)
            return window(process.pid, lambda: 0, seconds)[0]
        finally:
            os.killpg(process.pid, 15)
            process.wait(timeout=60)


SCENARIOS = {"tmux": in_tmux, "pty": in_bare_pty, "headless": headless}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--settle", type=float, default=20.0, help="seconds after the measured steps begin")
    parser.add_argument("--seconds", type=float, default=30.0, help="length of each measured window")
    parser.add_argument("--scenarios", default="tmux,pty,headless")
    parser.add_argument("--fps", type=float, help="the live view's frames per second (default: ddptop's)")
    add_json_option(parser)
    args = parser.parse_args()
    if args.fps:
        FRAMES[:] = ["--fps", f"{args.fps:g}"]
    names = [n for n in args.scenarios.split(",") if n]
    if "tmux" in names and shutil.which("tmux") is None:
        raise SystemExit("tmux is not installed")
    env = ddptop_env(DDPTOP_FAKE_NVML="dgx1")
    shares: dict[str, list[float]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(args.rounds):
            order = names if round_index % 2 == 0 else names[::-1]
            for name in order:
                out = os.path.join(tmp, f"{name}-{round_index}")
                shares[name].append(100 * SCENARIOS[name](out, env, args.settle, args.seconds))
                print(f"round {round_index + 1}: {name:9s} {shares[name][-1]:.1f}% of a core", flush=True)
    rows = []
    base = min(shares.get("headless") or [0.0])
    for name in names:
        low, high = min(shares[name]), max(shares[name])
        over = max(shares[name]) - base if name != "headless" else None
        rows.append(row(f"ddptop's own CPU, {name} (160x50), {args.settle:g} s in, {args.seconds:g} s windows",
                        f"{low:.1f}-{high:.1f}% of a core" + (f" ({over:+.1f} points over headless at most)"
                                                              if over is not None else ""),
                        f"<= {GOAL_POINTS:g} points over headless" if over is not None else "",
                        None if over is None else over <= GOAL_POINTS))
        print(rows[-1]["what"], ":", rows[-1]["figure"])
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
