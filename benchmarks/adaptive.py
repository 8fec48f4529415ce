"""Adaptive measurement against fixed iteration counts: wall time of the sweep and precision reached.

The default plan runs headless with the fixed counts it used before ``--iters auto`` (``--iters 20
--warmup 3`` on the CPU, ``--iters 50 --warmup 5`` on a GPU) and with the new defaults, alternating from
round to round so that a drifting machine favours neither. Reported per mode: the sweep's wall time, the
measured steps, and the precision each configuration's p50 was known to (the half-width of its bootstrap
95% interval, relative to the p50, from summary.json), then the per-round ratios auto / fixed.

    python benchmarks/adaptive.py [--rounds 2] [--json rows.json] [-- extra ddptop run flags]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, add_json_option, ddptop_env, row, write_rows  # noqa: E402

MODES = {"fixed": ["--iters", "20", "--warmup", "3"], "auto": []}  # the CPU defaults before --iters auto


def sweep(run_dir: str, flags: list[str], extra: list[str]) -> dict:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ddptop", "run", "--headless", "--out", run_dir, *flags, *extra],
                          cwd=REPO, env=ddptop_env(), capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"adaptive: ddptop run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    configs = [c for c in summary["configs"] if c["stats"]]
    return {
        "wall_s": wall,
        "steps": sum(c["stats"]["n"] for c in configs),
        "precision": statistics.median(c["stats"]["p50_precision"] for c in configs),
        "worst": max(c["stats"]["p50_precision"] for c in configs),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    add_json_option(parser)
    args, extra = parser.parse_known_args()
    extra = [a for a in extra if a != "--"]
    results: dict[str, list[dict]] = {mode: [] for mode in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            order = list(MODES) if number % 2 == 0 else list(reversed(MODES))
            for mode in order:
                print(f"round {number + 1}/{args.rounds}: {mode}", flush=True)
                results[mode].append(sweep(os.path.join(tmp, f"{mode}-{number}"), MODES[mode], extra))
    for mode, runs in results.items():
        print(f"{mode:6s} wall " + " ".join(f"{r['wall_s']:.1f}s" for r in runs)
              + "  steps " + " ".join(str(r["steps"]) for r in runs)
              + "  median precision " + " ".join(f"±{100 * r['precision']:.1f}%" for r in runs)
              + "  worst " + " ".join(f"±{100 * r['worst']:.1f}%" for r in runs))
    wall_ratio = [a["wall_s"] / f["wall_s"] for a, f in zip(results["auto"], results["fixed"])]
    precision_ratio = [a["precision"] / f["precision"] for a, f in zip(results["auto"], results["fixed"])]
    print(f"auto / fixed: wall {statistics.median(wall_ratio):.2f} ({min(wall_ratio):.2f}-{max(wall_ratio):.2f}), "
          f"median half-width {statistics.median(precision_ratio):.2f} "
          f"({min(precision_ratio):.2f}-{max(precision_ratio):.2f}) (below 1: tighter)")
    write_rows(args.json, [
        row("default plan wall time, --iters auto / fixed 20", f"{statistics.median(wall_ratio):.2f}x "
            f"(rounds {min(wall_ratio):.2f}-{max(wall_ratio):.2f})", "<= 1.1x on a quiet machine",
            True if max(wall_ratio) <= 1.1 else False if min(wall_ratio) > 1.1 else None),
        row("median p50 half-width, --iters auto / fixed 20", f"{statistics.median(precision_ratio):.2f}x "
            f"(rounds {min(precision_ratio):.2f}-{max(precision_ratio):.2f})"),
    ])


if __name__ == "__main__":
    main()
