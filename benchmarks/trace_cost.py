"""What the profiler trace of every configuration costs a sweep: the same plan traced (the default) and with
``--no-trace``, side by side, the order alternating from round to round.

Each round runs both sweeps as real ``ddptop run --headless`` processes. Reported: the traced sweep's wall
time over the untraced one's per round (their geometric mean, lowest and highest), the share of the traced
sweep's wall time its traces took (the summary's ``overhead.trace_s``: the ranks' profiled steps and export),
the traced steps' median over the measured p50 (the profiler's cost per step), and the trace's size per
recorded step. A trace costs a few steps per configuration whatever the plan, so its share falls as the
measured steps grow: the default plan is the case that decides whether tracing is on by default.

    python benchmarks/trace_cost.py [--rounds 2] [--extra-args ...] [-- train.py ARGS]
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402
from benchmarks.sweep_overhead import run_sweep  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[])
    argv = sys.argv[1:]
    script = argv[argv.index("--"):] if "--" in argv else []  # a user's script, traced over its own steps
    args = parser.parse_args(argv[:len(argv) - len(script)])
    args.extra_args += script
    ratios, shares, costs, sizes, walls = [], [], [], [], {"traced": [], "untraced": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = ["traced", "untraced"] if index % 2 == 0 else ["untraced", "traced"]
            measured = {}
            for case in order:
                extra = [] if case == "traced" else ["--no-trace"]
                out = os.path.join(tmp, f"{case}{index}")
                measured[case] = run_sweep(out, ["--no-plots", *extra, *args.extra_args])
                walls[case].append(measured[case][0])
            ratios.append(measured["traced"][0] / measured["untraced"][0])
            summary = measured["traced"][1]
            shares.append((summary["overhead"].get("trace_s") or 0.0) / summary["overhead"]["sweep_wall_s"])
            for entry in summary["configs"]:
                trace = entry.get("trace") or {}
                if trace.get("cost_ratio") is not None:
                    costs.append(trace["cost_ratio"])
                if trace.get("bytes_per_step") is not None:
                    sizes.append(trace["bytes_per_step"])
            print(f"round {index + 1}: traced {measured['traced'][0]:.1f} s, untraced {measured['untraced'][0]:.1f} s, "
                  f"ratio {ratios[-1]:.3f}, traces {100 * shares[-1]:.1f}% of the traced sweep", flush=True)
    mean = math.exp(statistics.fmean(math.log(r) for r in ratios))
    print(f"traced / untraced sweep wall time: {mean:.3f} (rounds {min(ratios):.3f}–{max(ratios):.3f}); "
          f"medians {statistics.median(walls['traced']):.1f} s and {statistics.median(walls['untraced']):.1f} s")
    print(f"traces' share of the traced sweep: {100 * statistics.median(shares):.1f}% "
          f"({100 * min(shares):.1f}–{100 * max(shares):.1f}%)")
    print(f"traced step / measured p50: median {statistics.median(costs):.2f} over {len(costs)} configurations "
          f"({min(costs):.2f}–{max(costs):.2f}); trace per recorded step: median "
          f"{statistics.median(sizes) / 1024:.1f} KiB ({min(sizes) / 1024:.1f}–{max(sizes) / 1024:.1f})")
    write_rows(args.json, [
        row("profiler traces: the sweep traced against --no-trace",
            f"{mean:.3f}x the wall time ({min(ratios):.3f}–{max(ratios):.3f} over {len(ratios)} rounds)"),
        row("profiler traces: their share of the traced sweep's wall time",
            f"{100 * statistics.median(shares):.1f}%"),
        row("profiler traces: traced step over the measured p50, size per recorded step",
            f"{statistics.median(costs):.2f}x, {statistics.median(sizes) / 1024:.1f} KiB"),
    ])


if __name__ == "__main__":
    main()
