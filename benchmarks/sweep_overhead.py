"""Sweep overhead: wall time of real `ddptop run --headless` sweeps and the share spent outside steps.

Runs, side by side in one process, the default CPU plan and the same plan with three batch sizes (3x the
configurations, still one launch per world size), and prints for each the wall time, the seconds inside
warm-up + measured steps, and the share outside them (launching, importing torch, forming the process
group, building models, tearing down). Amortising launches means the share falls as configurations grow.

    python benchmarks/sweep_overhead.py [--models resnet18] [--extra-args ...]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sweep(out: str, args: list[str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ddptop", "run", "--headless", "--out", out, *args],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep failed ({done.returncode}): {done.stderr or done.stdout}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    overhead = summary["overhead"]
    return {
        "configs": len(summary["configs"]),
        "launches": len(overhead["launches"]),
        "process_wall_s": wall,
        "sweep_wall_s": overhead["sweep_wall_s"],
        "iterations_s": overhead["iterations_s"],
        "outside": overhead["fraction_outside_iterations"],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    cases = {
        "default plan": [],
        "3 batch sizes": ["--batch-sizes", "8,16,32"],
    }
    rows = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, extra) in enumerate(cases.items()):
            rows[name] = sweep(os.path.join(tmp, f"run{index}"), extra + args.extra_args)
    print(f"{'case':16s} {'configs':>7s} {'launches':>8s} {'wall s':>8s} {'steps s':>8s} {'outside':>8s}")
    for name, row in rows.items():
        print(
            f"{name:16s} {row['configs']:7d} {row['launches']:8d} {row['process_wall_s']:8.1f} "
            f"{row['iterations_s']:8.1f} {100 * row['outside']:7.0f}%"
        )
    base, more = rows["default plan"], rows["3 batch sizes"]
    print(
        f"ratio: {more['configs'] / base['configs']:.1f}x the configurations cost "
        f"{more['process_wall_s'] / base['process_wall_s']:.2f}x the wall time; overhead seconds "
        f"{(more['sweep_wall_s'] - more['iterations_s']) / (base['sweep_wall_s'] - base['iterations_s']):.2f}x"
    )


if __name__ == "__main__":
    main()
