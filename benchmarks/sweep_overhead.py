"""Sweep overhead: wall time of real `ddptop run --headless` sweeps and the share spent outside steps.

Runs, side by side in one process, the default CPU plan, the same plan without the analysis phases
(no_sync/comm-hook steps and the collective benchmark), and the default plan with three batch sizes (3x the
configurations, still one launch per world size). Prints for each the wall time, the seconds inside
warm-up + measured steps, the seconds of analysis, and the share left for setup (launching, importing
torch, forming the process group, building models, tearing down). Amortising launches means that share
falls as configurations grow.

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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, add_json_option, row, write_rows  # noqa: E402


def run_sweep(out: str, args: list[str]) -> tuple[float, dict]:
    """One `ddptop run --headless` into ``out``: its wall time as this process saw it, and its summary."""
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "ddptop", "run", "--headless", "--out", out, *args],
        cwd=REPO, capture_output=True, text=True, stdin=subprocess.DEVNULL,
    )
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"sweep failed ({done.returncode}): {done.stderr or done.stdout}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        return wall, json.load(handle)


def sweep(out: str, args: list[str]) -> dict:
    wall, summary = run_sweep(out, args)
    overhead = summary["overhead"]
    return {
        "configs": len(summary["configs"]),
        "launches": len(overhead["launches"]),
        "process_wall_s": wall,
        "sweep_wall_s": overhead["sweep_wall_s"],
        "iterations_s": overhead["iterations_s"],
        "analysis_s": overhead.get("analysis_s") or 0.0,
        "setup": overhead.get("fraction_setup", overhead["fraction_outside_iterations"]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    cases = {
        "default plan": [],
        "no analysis": ["--comm-iters", "0", "--no-collectives"],
        "3 batch sizes": ["--batch-sizes", "8,16,32"],
    }
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, (name, extra) in enumerate(cases.items()):
            results[name] = sweep(os.path.join(tmp, f"run{index}"), extra + args.extra_args)
    print(f"{'case':16s} {'configs':>7s} {'launches':>8s} {'wall s':>8s} {'steps s':>8s} {'analysis s':>10s} "
          f"{'setup':>6s}")
    for name, result in results.items():
        print(
            f"{name:16s} {result['configs']:7d} {result['launches']:8d} {result['process_wall_s']:8.1f} "
            f"{result['iterations_s']:8.1f} {result['analysis_s']:10.1f} {100 * result['setup']:5.0f}%"
        )

    def setup_seconds(result: dict) -> float:
        return result["sweep_wall_s"] - result["iterations_s"] - result["analysis_s"]

    base, bare, more = results["default plan"], results["no analysis"], results["3 batch sizes"]
    print(f"analysis: the default plan takes {base['process_wall_s'] / bare['process_wall_s']:.2f}x the wall time "
          f"of the same plan without it")
    print(
        f"ratio: {more['configs'] / base['configs']:.1f}x the configurations cost "
        f"{more['process_wall_s'] / base['process_wall_s']:.2f}x the wall time; setup seconds "
        f"{setup_seconds(more) / setup_seconds(base):.2f}x"
    )
    write_rows(args.json, [
        row("sweep overhead: default plan, share of wall time outside steps and analysis",
            f"{100 * base['setup']:.0f}% of {base['process_wall_s']:.0f} s"),
        row("sweep overhead: 3x the configurations (still one launch per world size)",
            f"{setup_seconds(more) / setup_seconds(base):.2f}x the setup seconds"),
        row("analysis phases: default plan vs the same without them",
            f"{base['process_wall_s'] / bare['process_wall_s']:.2f}x the wall time"),
    ])


if __name__ == "__main__":
    main()
