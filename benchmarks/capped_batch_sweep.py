"""A batch sweep under a CPU memory cap, every strategy: how many launches it takes, its wall time, and the
seconds between one configuration's end and the next one's start inside a launch.

The sweep of tests/test_strategies.py (resnet18 at 32 px, batches 8 to 128 under a 140 MiB cap, DDP, ZeRO-1,
FSDP2 with and without resharding, N=2, one launch planned). Each strategy's ladder ends where the cap
refuses a step; whether a refusal ends its launch (a relaunch of the configurations after it) is what the
launch count shows. The gap between configurations is what a rank does between two of them: free the last
one (a garbage collection), meet the others at a barrier, build the next.

    python benchmarks/capped_batch_sweep.py [--rounds 1] [--base REV]

With ``--base REV`` each round runs the sweep in that revision (a temporary git worktree) and in this tree,
the order alternating from round to round, and prints both and their ratio (this / base).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, add_json_option, row, write_rows  # noqa: E402

PLAN = ["--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sweep", "--batch-sizes", "8",
        "--max-batch", "128", "--memory-cap-mb", "140", "--world-sizes", "2", "--strategies",
        "zero1,fsdp2,fsdp2_no_reshard", "--warmup", "1", "--iters", "3", "--launches", "1", "--comm-iters", "0",
        "--no-collectives", "--telemetry-interval", "0"]


def sweep(tree: str, out: str) -> dict:
    """The sweep in ``tree``'s own ddptop and kernels: its wall time (the sweep's own, from its first launch's
    start to its last one's end: the plots drawn after it are not in it), launches, gaps between configurations."""
    done = subprocess.run([sys.executable, "-m", "ddptop", "run", "--headless", "--out", out, *PLAN], cwd=tree,
                          env=dict(os.environ, PYTHONPATH=tree), capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        sys.exit(f"capped_batch_sweep: the sweep failed in {tree} ({done.returncode}): {done.stderr[-2000:]}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        wall = json.load(handle)["overhead"]["sweep_wall_s"]
    return {"wall": wall, "launches": len(glob.glob(os.path.join(out, "launches", "*"))), "gaps": gaps(out)}


def gaps(run_dir: str) -> list[float]:
    """Rank 0's seconds from each config_end to the next config_start, in every launch."""
    found = []
    for path in glob.glob(os.path.join(run_dir, "launches", "*", "events", "rank-0.jsonl")):
        ended = None
        with open(path, encoding="utf-8") as handle:
            for line in handle:
                event = json.loads(line)
                if event["type"] == "config_end":
                    ended = event["t"]
                elif event["type"] == "config_start" and ended is not None:
                    found.append(event["t"] - ended)
                    ended = None
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--base", help="a revision to measure beside this tree")
    args = parser.parse_args()
    results: dict[str, list[dict]] = {"base": [], "this": []}
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"this": REPO}
        if args.base:
            trees["base"] = os.path.join(tmp, "base")
            subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--quiet", trees["base"], args.base],
                           check=True)
        try:
            for number in range(args.rounds):
                order = sorted(trees, reverse=number % 2 == 1)  # base first, then this first, ...
                for which in order:
                    results[which].append(sweep(trees[which], os.path.join(tmp, f"{which}-{number}")))
        finally:
            if args.base:
                subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", trees["base"]], check=False)
    rows = []
    for which in ("base", "this"):
        runs = results[which]
        if not runs:
            continue
        wall = statistics.median(r["wall"] for r in runs)
        gap = statistics.median(g for r in runs for g in r["gaps"])
        launches = statistics.median(r["launches"] for r in runs)
        name = args.base if which == "base" else "this tree"
        walls = " ".join(f"{r['wall']:.1f}" for r in runs)
        print(f"{name}: walls {walls} s, {launches:.0f} launches, median {gap:.2f} s between configurations")
        if which == "this":
            rows = [row("capped batch sweep (4 strategies, N=2, 1 launch planned): wall time", f"{wall:.1f} s"),
                    row("capped batch sweep: launches run", f"{launches:.0f} launches"),
                    row("capped batch sweep: median seconds between configurations", f"{gap:.2f} s")]
    if results["base"]:
        ratios = [t["wall"] / b["wall"] for b, t in zip(results["base"], results["this"])]
        print(f"wall time, this / base, per round: {' '.join(f'{r:.2f}' for r in ratios)}")
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
