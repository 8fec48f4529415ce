"""What the launch as the unit of replication costs and buys: the default plan at --launches 1 (one launch per
world size, as ddptop measured before) beside --launches 3 (the default) and any other K, interleaved.

For each K: the sweep's wall time and its setup share, the width of the N=2 speedup interval, and how often
one run's speedup falls inside another run's interval (over every ordered pair of the K's runs): an interval
that knows the launch-to-launch spread should hold the other runs' speedups about as often as it claims.

    python benchmarks/launch_cost.py [--runs 3] [--launches 1,3] [--json rows.json] [--extra-args ...]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402
from benchmarks.sweep_overhead import run_sweep  # noqa: E402


def sweep(out: str, launches: int, extra: list[str]) -> dict:
    wall, summary = run_sweep(out, ["--launches", str(launches), *extra])
    overhead = summary["overhead"]
    top = max((r for t in summary["scaling"] for r in t["rows"]), key=lambda r: r["world_size"])
    return {"wall_s": wall, "setup": overhead.get("fraction_setup"), "speedup": top["speedup"],
            "speedup_ci": top.get("speedup_ci"), "world_size": top["world_size"],
            "spread": (summary["uncertainty"].get("launch_variance") or {}).get("relative_sd")}


def inside_share(runs: list[dict]) -> tuple[int, int]:
    """(pairs where run j's speedup lies in run i's interval, ordered pairs i != j)."""
    hits = pairs = 0
    for i, a in enumerate(runs):
        for j, b in enumerate(runs):
            if i != j and a["speedup_ci"]:
                pairs += 1
                hits += a["speedup_ci"][0] <= b["speedup"] <= a["speedup_ci"][1]
    return hits, pairs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--launches", default="1,3")
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    counts = [int(k) for k in args.launches.split(",")]
    results: dict[int, list[dict]] = {k: [] for k in counts}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            order = counts if run % 2 == 0 else counts[::-1]  # interleaved: drift falls on every K alike
            for k in order:
                results[k].append(sweep(os.path.join(tmp, f"k{k}-{run}"), k, args.extra_args))
                print(f"run {run} --launches {k}: {results[k][-1]}", flush=True)
    base = statistics.median(r["wall_s"] for r in results[counts[0]])
    print(f"\n{'launches':>8s} {'wall s (median)':>16s} {'vs first':>9s} {'setup':>6s} {'speedup half-width':>19s} "
          f"{'others inside':>14s}")
    rows = []
    for k, runs in results.items():
        wall = statistics.median(r["wall_s"] for r in runs)
        setup = statistics.median(r["setup"] or 0 for r in runs)
        widths = [(r["speedup_ci"][1] - r["speedup_ci"][0]) / 2 / r["speedup"] for r in runs if r["speedup_ci"]]
        width = statistics.median(widths) if widths else float("nan")
        hits, pairs = inside_share(runs)
        print(f"{k:8d} {wall:16.1f} {wall / base:8.2f}x {100 * setup:5.0f}% {100 * width:18.1f}% "
              f"{hits:6d} of {pairs}")
        rows.append(row(f"default plan, --launches {k}: wall time against --launches {counts[0]}, N={runs[0]['world_size']} "
                        f"speedup's relative half-width, other runs' speedups inside its interval",
                        f"{wall / base:.2f}x ({wall:.0f} s), ±{100 * width:.1f}%, {hits} of {pairs}"))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
