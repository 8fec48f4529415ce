"""What ddptop tune's search saves: a tune beside the same tune with every variant measured in every launch
(--keep-slower, none dropped), interleaved, on the same node.

For each: the wall time, the launches each variant got, and the answer (the variants recommended); the ratio
of the wall times is the search's saving, and the answers should agree (a dropped variant was slower beyond
noise, so it could not have been recommended).

    python benchmarks/tune_cost.py [--runs 2] [--json rows.json] [--extra-args ...]

The default arguments are a small tune that finishes in about a minute on 2 CPU cores (the tiny CNN of the
tests, every variant, three launches of 30 steps); pass ``--extra-args`` to tune something else, e.g. the
default plan's model (``--extra-args --models resnet18``, about 5 minutes a run on 2 cores).
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

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402

SMALL = ["--models", "tests.tiny_models:tiny_cnn", "--batch-sizes", "8", "--image-size", "32", "--warmup", "3",
         "--iters", "30", "--launches", "3"]


def tune(out: str, args: list[str]) -> dict:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "ddptop", "tune", "--headless", "--out", out, *args], cwd=REPO,
                          capture_output=True, text=True, stdin=subprocess.DEVNULL, env=dict(os.environ, PYTHONPATH=REPO))
    wall = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"tune failed ({done.returncode}): {done.stderr[-2000:] or done.stdout[-2000:]}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as handle:
        summary = json.load(handle)
    (table,) = summary["tuning"]
    launches = {c["variant"]: len(c["launches"]) for c in summary["configs"]}
    return {"wall_s": wall, "launches": sum(launches.values()), "recommended": table["recommended"],
            "dropped": sorted(r["variant"] for r in table["rows"] if (r["reason"] or "").startswith("dropped"))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--extra-args", nargs=argparse.REMAINDER, default=[])
    args = parser.parse_args()
    base = [*SMALL, *args.extra_args]
    kinds = {"search": base, "every launch": [*base, "--keep-slower"]}
    results: dict[str, list[dict]] = {kind: [] for kind in kinds}
    with tempfile.TemporaryDirectory() as tmp:
        for run in range(args.runs):
            order = list(kinds) if run % 2 == 0 else list(kinds)[::-1]  # interleaved: drift falls on both alike
            for kind in order:
                results[kind].append(tune(os.path.join(tmp, f"{kind.replace(' ', '-')}-{run}"), kinds[kind]))
                print(f"run {run} {kind}: {results[kind][-1]}", flush=True)
    search = statistics.median(r["wall_s"] for r in results["search"])
    every = statistics.median(r["wall_s"] for r in results["every launch"])
    configs_launched = {kind: statistics.median(r["launches"] for r in runs) for kind, runs in results.items()}
    print(f"\nsearch {search:.1f} s, every launch {every:.1f} s: {search / every:.2f}x; configuration-launches "
          f"{configs_launched['search']:.0f} vs {configs_launched['every launch']:.0f}")
    write_rows(args.json, [row(
        "ddptop tune's search against every variant in every launch (--keep-slower): wall time, "
        "configuration-launches",
        f"{search / every:.2f}x ({search:.0f} s vs {every:.0f} s), {configs_launched['search']:.0f} vs "
        f"{configs_launched['every launch']:.0f}")])


if __name__ == "__main__":
    main()
