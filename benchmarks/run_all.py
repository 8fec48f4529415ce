"""Run every benchmark and print one table of figures against their goals.

Each script runs in its own process (what it measures must not share an interpreter with another) and
writes its rows to a JSON file; this script prints them together. --quick shortens the long ones.

    python benchmarks/run_all.py [--quick] [--only observer,ingest] [--json all.json]
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

from benchmarks.common import REPO  # noqa: E402

# name -> (arguments, arguments with --quick)
BENCHMARKS: dict[str, tuple[list[str], list[str]]] = {
    "startup": ([], ["--repeat", "3"]),
    "ingest": ([], ["--repeat", "2"]),
    "tui_cost": ([], ["--rounds", "2"]),
    "terminal_cost": ([], ["--seconds", "5"]),
    "telemetry_cost": ([], ["--rounds", "3"]),
    "observer": ([], ["--rounds", "3", "--iters", "20"]),
    "sweep_overhead": ([], []),
    "adaptive": ([], ["--rounds", "1"]),
    "subgroups": ([], ["--rounds", "2"]),
    "launch_variance": ([], ["--quick", "--trials", "100"]),
    "tail_interval": ([], ["--quick", "--trials", "100"]),
    "launch_spread": ([], ["--launches", "3"]),
    "launch_cost": ([], ["--runs", "1"]),
    "tune_cost": ([], ["--runs", "1"]),
    "capped_batch_sweep": ([], []),
    "protocol_cost": ([], ["--rounds", "3", "--steps", "15"]),
    "trace_cost": ([], ["--rounds", "1"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds and repeats")
    parser.add_argument("--only", help="comma-separated benchmark names: " + ", ".join(BENCHMARKS))
    parser.add_argument("--json", metavar="PATH", help="also write every row here")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(BENCHMARKS)
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        sys.exit(f"run_all: unknown benchmark {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    rows, failed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            full, quick = BENCHMARKS[name]
            out = os.path.join(tmp, f"{name}.json")
            started = time.perf_counter()
            print(f"--- {name}", flush=True)
            done = subprocess.run([sys.executable, os.path.join(REPO, "benchmarks", f"{name}.py"),
                                   *(quick if args.quick else full), "--json", out], cwd=REPO)
            print(f"    ({time.perf_counter() - started:.0f} s)", flush=True)
            if done.returncode != 0 or not os.path.exists(out):
                failed.append(name)
                continue
            with open(out, encoding="utf-8") as handle:
                rows += [dict(r, benchmark=name) for r in json.load(handle)]
    print()
    print_table(rows)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(rows, handle, indent=1)
    if failed:
        sys.exit(f"run_all: {', '.join(failed)} failed")


def print_table(rows: list[dict]) -> None:
    verdict = {True: "met", False: "NOT MET", None: "noise wider than the goal"}
    widths = [max(len(r[key]) for r in rows) if rows else 0 for key in ("what", "figure", "goal")]
    widths = [max(w, len(h)) for w, h in zip(widths, ("what", "figure", "goal"))]
    print(f"{'what':<{widths[0]}}  {'figure':<{widths[1]}}  {'goal':<{widths[2]}}")
    for r in rows:
        said = verdict[r["met"]] if r["goal"] else ""
        print(f"{r['what']:<{widths[0]}}  {r['figure']:<{widths[1]}}  {r['goal']:<{widths[2]}}  {said}")


if __name__ == "__main__":
    main()
