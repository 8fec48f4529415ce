"""Startup: `ddptop --help`, and the live view's first frame in a real pseudo-terminal, without torch.

  --help        wall seconds of `python -m ddptop --help` (median of --repeat fresh interpreters)
  first frame   wall seconds from spawning `ddptop run` in a pty until its status line is on the screen
                (drawn with the plan's configurations at the first paint, before the first snapshot of the
                run directory; median of --repeat); then the TUI process's memory map is read: torch must
                not be loaded (the ranks import it, ddptop never does)

    python benchmarks/startup.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, PtyProgram, add_json_option, ddptop_env, row, write_rows  # noqa: E402


def help_seconds() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "ddptop", "--help"], cwd=REPO, check=True, capture_output=True)
    return time.perf_counter() - start


def torch_loaded(pid: int) -> bool:
    with open(f"/proc/{pid}/maps", encoding="utf-8", errors="replace") as handle:
        return any("libtorch" in line or "/torch/_C" in line for line in handle)


PLAN = ["--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "4", "--iters", "2",
        "--warmup", "1"]


def first_frame(out: str, plan: list[str], timeout: float = 30.0) -> tuple[float, float, bool]:
    """Seconds until the status line is drawn, until the GPU table is (8 fake GPUs: a first useful frame),
    and whether the TUI process had torch loaded then."""
    screen = PtyProgram([sys.executable, "-m", "ddptop", "run", "--out", out, *plan], ddptop_env(DDPTOP_FAKE_NVML="dgx1"))
    try:
        shown = screen.wait_for(b"configurations", timeout)
        gpus = screen.wait_for(b"V100", timeout)
        loaded = torch_loaded(screen.process.pid)
    finally:
        os.killpg(screen.process.pid, signal.SIGTERM)  # the TUI stops its ranks and saves, as on a dropped link
        screen.close()
    return shown, gpus, loaded


def measure(repeat: int) -> dict[str, float | bool]:
    helps, frames, useful, defaults, loaded = [], [], [], [], False
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(repeat):  # interleaved, so that a slow moment of the machine hits all
            helps.append(help_seconds())
            seconds, gpus, torch_in = first_frame(os.path.join(tmp, f"run{index}"), PLAN)
            frames.append(seconds)
            useful.append(gpus)
            defaults.append(first_frame(os.path.join(tmp, f"default{index}"), [])[1])  # `ddptop`, default plan
            loaded = loaded or torch_in
    return {"help_s": statistics.median(helps), "first_frame_s": statistics.median(frames),
            "first_frame_max_s": max(frames), "useful_s": statistics.median(useful), "useful_max_s": max(useful),
            "default_s": statistics.median(defaults), "default_max_s": max(defaults), "torch_in_tui": loaded}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    add_json_option(parser)
    args = parser.parse_args()
    result = measure(args.repeat)
    print(f"ddptop --help: {result['help_s']:.2f} s (median of {args.repeat})")
    print(f"first frame of the live view in a pty: {result['first_frame_s']:.2f} s median, "
          f"{result['first_frame_max_s']:.2f} s max; with the GPU table: {result['useful_s']:.2f} s "
          f"(max {result['useful_max_s']:.2f} s); default plan: {result['default_s']:.2f} s "
          f"(max {result['default_max_s']:.2f} s); torch loaded in the TUI process: {result['torch_in_tui']}")
    write_rows(args.json, [
        row("ddptop --help", f"{result['help_s']:.2f} s", "<= 0.3 s", result["help_s"] <= 0.3),
        row("first frame of the live view in a pty", f"{result['first_frame_s']:.2f} s "
            f"(max {result['first_frame_max_s']:.2f} s)", "<= 0.5 s", result["first_frame_s"] <= 0.5),
        row("first frame with the GPU table (8 fake GPUs), default plan", f"{result['default_s']:.2f} s "
            f"(max {result['default_max_s']:.2f} s)", "<= 0.5 s", result["default_s"] <= 0.5),
        row("torch loaded in the TUI process", "yes" if result["torch_in_tui"] else "no", "no",
            not result["torch_in_tui"]),
    ])
    if result["torch_in_tui"]:
        sys.exit("the TUI process loaded torch")


if __name__ == "__main__":
    main()
