"""What the live view costs as a real terminal sees it: the ddptop process's CPU and the bytes it writes to
the terminal per second, in a pseudo-terminal of 80x24 and of 160x50 (as over SSH), side by side in one run.

Scenarios, each measured over the same window length:
  replay    ``ddptop watch`` of a run another process writes: two ranks streaming ``--rate`` steps/s in all
            (flushed every 100 ms, as ranks do) and one telemetry record of 8 fake GPUs a second, copied
            from tests/data/recorded-run with fresh times; no torch anywhere
  sweep     ``ddptop run`` of a real tiny-model sweep (one rank, about 1,000 steps/s on this machine) with
            the fake 8-GPU node sampled by the real monitor; the window lies inside the measured steps
  headless  the same sweep with ``--headless`` (progress lines to a file), for comparison
  idle      ``ddptop view tests/data/recorded-run``: a finished run on the screen, after it settled

    python benchmarks/terminal_cost.py [--seconds 10] [--rate 1000] [--fps 2,4] [--sizes 80x24,160x50]

``--fps`` takes a list: replay and sweep are measured at each frame rate (the goals apply to the default).

CPU: the process's own user+system seconds per wall second (its ranks excluded), read by psutil.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, PtyProgram, add_json_option, ddptop_env, row, write_rows  # noqa: E402
from ddptop.run.options import DEFAULT_FPS  # noqa: E402

RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")
CONFIG = "resnet18/ddp/bs4/n2/gloo"
TINY = ["--models", "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "2",
        "--world-sizes", "1", "--no-baseline", "--warmup", "1", "--comm-iters", "0", "--no-collectives",
        "--iters", "100000000", "--max-time-per-config", "600"]


# -- the replay writer: a separate process, so that its CPU is not the view's ----------------------------------

def replay_writer(run_dir: str, rate: float) -> None:
    from ddptop.run import rundir
    from ddptop.protocol.layout import events_path
    from ddptop.protocol.wire import EventWriter, make_event

    os.makedirs(run_dir, mode=0o700)
    for name in ("plan.json", "environment.json", "topology.json"):
        shutil.copy(os.path.join(RECORDED, name), run_dir)
    runner = EventWriter(os.path.join(run_dir, "runner.jsonl"), -1, 0.0)
    runner.emit("hello", world_size=0, host=os.uname().nodename, pid=os.getpid(), device="-")
    runner.emit("mark", data={"what": "launch_start", "launch": "01-n2-gloo", "world_size": 2, "backend": "gloo",
                              "configs": [CONFIG]})
    runner.flush()
    launch = rundir.launch_dir(run_dir, 1, "n2-gloo", 0)
    ranks = [EventWriter(events_path(launch, r), r, 0.1) for r in range(2)]
    for rank, writer in enumerate(ranks):
        writer.emit("hello", world_size=2, host=os.uname().nodename, pid=os.getpid(), device="cpu", local_rank=rank)
        writer.emit("config_start", config_id=CONFIG, model="resnet18", mode="ddp", batch_size=4, world_size=2,
                    warmup=0, iters=10**9)
        writer.flush()
    with open(os.path.join(RECORDED, "telemetry.jsonl"), encoding="utf-8") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    timeline = EventWriter(os.path.join(run_dir, "telemetry.jsonl"), -1, 0.0)
    per_flush = max(1, int(rate / 2 / 10))
    index, tick, next_telemetry = 0, 0, time.monotonic()
    while True:
        for writer in ranks:
            writer.emit("samples", config_id=CONFIG, phase="measure", first_iter=index, of=10**9,
                        sec=[0.05 + 0.001 * (i % 7) for i in range(per_flush)])
            writer.flush()
        index += per_flush
        if time.monotonic() >= next_telemetry:
            record = dict(records[tick % len(records)])
            fields = {k: v for k, v in record.items() if k not in ("v", "type", "t", "rank")}
            if tick:
                fields.pop("info", None)
            timeline.emit_event(make_event("telemetry", -1, **fields))
            timeline.flush()
            tick += 1
            next_telemetry += 1.0
        time.sleep(0.1)


# -- measuring ---------------------------------------------------------------------------------------------------

def window(program_pid: int, output_size, seconds: float) -> tuple[float, float]:
    """CPU share of the process and bytes/s written to its terminal over ``seconds``."""
    process = psutil.Process(program_pid)
    cpu0, bytes0, wall0 = sum(process.cpu_times()[:2]), output_size(), time.monotonic()
    time.sleep(seconds)
    cpu1, bytes1, wall1 = sum(process.cpu_times()[:2]), output_size(), time.monotonic()
    return (cpu1 - cpu0) / (wall1 - wall0), (bytes1 - bytes0) / (wall1 - wall0)


def measuring(out: str) -> bool:
    """The sweep is inside its measured steps (a ``measure`` samples event is on disk)."""
    for path in glob.glob(os.path.join(out, "launches", "*", "events", "rank-0.jsonl")):
        with open(path, encoding="utf-8") as handle:
            if '"measure"' in handle.read():
                return True
    return False


def wait_until(check, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise SystemExit("the benchmark's run never got where it should")
        time.sleep(0.2)


def in_pty(argv: list[str], size: tuple[int, int], seconds: float, ready, env: dict, settle: float) -> tuple[float, float]:
    screen = PtyProgram(argv, env, columns=size[0], lines=size[1])
    try:
        wait_until(lambda: ready() and screen.process.poll() is None)
        time.sleep(settle)

        def size_now() -> int:
            with screen.lock:
                return len(screen.output)

        return window(screen.process.pid, size_now, seconds)
    finally:
        screen.send(b"q")
        time.sleep(0.5)
        if screen.process.poll() is None:
            os.killpg(screen.process.pid, 15)
        screen.close(timeout=30)


def replay(args: argparse.Namespace, run: str, size: tuple[int, int], env: dict, fps: float) -> tuple[float, float]:
    writer = subprocess.Popen([sys.executable, __file__, "--replay-writer", run, "--rate", str(args.rate)], env=env)
    try:
        wait_until(lambda: os.path.exists(os.path.join(run, "telemetry.jsonl")))
        return in_pty([sys.executable, "-m", "ddptop", "watch", run, "--fps", str(fps)], size, args.seconds,
                      lambda: True, env, settle=3.0)
    finally:
        writer.terminate()
        writer.wait()


def measure(args: argparse.Namespace) -> dict[str, dict[str, tuple[float, float]]]:
    """Figures by scenario (with its frame rate where it has one), then by terminal size."""
    env = ddptop_env(DDPTOP_FAKE_NVML="dgx1")
    python = sys.executable
    results: dict[str, dict[str, tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in args.sizes:
            label = f"{size[0]}x{size[1]}"
            for fps in args.fps:
                run = os.path.join(tmp, f"replay-{label}-{fps:g}")
                if "replay" in args.scenarios:
                    results.setdefault(f"replay {fps:g}fps", {})[label] = replay(args, run, size, env, fps)
                out = os.path.join(tmp, f"sweep-{label}-{fps:g}")
                if "sweep" in args.scenarios:
                    results.setdefault(f"sweep {fps:g}fps", {})[label] = in_pty(
                        [python, "-m", "ddptop", "run", "--out", out, "--fps", str(fps), *TINY], size, args.seconds,
                        lambda out=out: measuring(out), env, settle=2.0)
            if "idle" in args.scenarios:
                results.setdefault("idle", {})[label] = in_pty(
                    [python, "-m", "ddptop", "view", RECORDED, "--fps", str(args.fps[0])], size, args.seconds,
                    lambda: True, env, settle=4.0)
        if "headless" not in args.scenarios:
            return results
        out = os.path.join(tmp, "headless")
        with open(os.path.join(tmp, "headless.log"), "w", encoding="utf-8") as log:
            process = subprocess.Popen([python, "-m", "ddptop", "run", "--headless", "--out", out, *TINY],
                                       cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                wait_until(lambda: measuring(out))
                time.sleep(2.0)
                results["headless"] = {"log file": window(process.pid, lambda: os.path.getsize(log.name), args.seconds)}
            finally:
                os.killpg(process.pid, 15)
                process.wait(timeout=60)
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of each measured window")
    parser.add_argument("--rate", type=float, default=1000.0, help="replay: steps per second, both ranks together")
    parser.add_argument("--fps", default=f"{DEFAULT_FPS:g}", help="frame rates, comma-separated (default: ddptop's)")
    parser.add_argument("--sizes", default="80x24,160x50")
    parser.add_argument("--scenarios", default="replay,sweep,idle,headless")
    parser.add_argument("--replay-writer", metavar="RUN_DIR", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    if args.replay_writer:
        replay_writer(args.replay_writer, args.rate)
        return
    args.sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    args.scenarios = set(args.scenarios.split(","))
    args.fps = [float(f) for f in args.fps.split(",")]
    results = measure(args)
    print(f"The live view in a pseudo-terminal, 8 fake GPUs, windows of {args.seconds:g} s "
          f"(ddptop's default: {DEFAULT_FPS:g} fps)")
    print(f"  {'scenario':14s} {'terminal':9s} {'CPU (one core)':>15s} {'to terminal':>12s}")
    rows = []
    for scenario, by_size in results.items():
        for label, (cpu, rate) in by_size.items():
            print(f"  {scenario:14s} {label:9s} {100 * cpu:14.1f}% {rate / 1000:9.1f} KB/s")
            goal, met = "", None
            if scenario in (f"replay {DEFAULT_FPS:g}fps", f"sweep {DEFAULT_FPS:g}fps") and label == "160x50":
                goal, met = "<= 2% of a core, <= 20 KB/s", cpu <= 0.02 and rate <= 20_000
            elif scenario == "idle":
                goal, met = "<= 0.5% of a core", cpu <= 0.005
            rows.append(row(f"live view, {scenario}, {label}", f"{100 * cpu:.1f}% of a core, {rate / 1000:.1f} KB/s",
                            goal, met))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
