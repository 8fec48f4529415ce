"""Two revisions of ddptop measured side by side, in one run: is the change faster, slower, or noise?

The base revision is checked out in a temporary git worktree; each round runs every chosen benchmark once
in each tree, the order alternating from round to round so that a machine drifting in one direction
favours neither. Each benchmark script runs in its own process from its own tree (its own code, its own
version of the script). A row is matched by its position in the script's output, and its figure is the
first number of its text (CPU share, p50, events/s...). Reported per row: both trees' figures in every
round, and the median over rounds of the per-round ratio (this tree / base) with its range.

    python benchmarks/compare_revisions.py BASE_REV [--this REV] [--rounds 3] [--only tui_cost,ingest,startup]
                                           [--quick]

Without ``--this`` the other side is this working tree as it is; with it, a second worktree of that revision.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO  # noqa: E402
from benchmarks.run_all import BENCHMARKS  # noqa: E402

NUMBER = re.compile(r"(?<![A-Za-z\d.])-?\d+(?:,\d{3})*(?:\.\d+)?")  # not the 50 of "p50"


def first_number(text: str) -> float | None:
    found = NUMBER.search(text)
    return float(found.group(0).replace(",", "")) if found else None


def run_rows(tree: str, name: str, arguments: list[str], out: str) -> list[dict]:
    env = dict(os.environ, PYTHONPATH=tree)  # the tree's own ddptop, not the installed one
    done = subprocess.run([sys.executable, os.path.join(tree, "benchmarks", f"{name}.py"), *arguments, "--json", out],
                          cwd=tree, env=env, capture_output=True, text=True)
    if done.returncode != 0 or not os.path.exists(out):
        raise SystemExit(f"compare_revisions: {name} failed in {tree}:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    with open(out, encoding="utf-8") as handle:
        return json.load(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("base", help="the revision to compare against (a commit, tag or branch)")
    parser.add_argument("--this", help="measure this revision instead of the working tree")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", default="tui_cost,ingest,startup", help="benchmarks to run (run_all.py's names)")
    parser.add_argument("--quick", action="store_true", help="each benchmark's shorter arguments")
    args = parser.parse_args()
    names = args.only.split(",")
    unknown = [n for n in names if n not in BENCHMARKS]
    if unknown:
        sys.exit(f"compare_revisions: unknown benchmark {', '.join(unknown)} (known: {', '.join(BENCHMARKS)})")
    with tempfile.TemporaryDirectory() as tmp:
        trees = {"base": os.path.join(tmp, "base"), "this": os.path.join(tmp, "this") if args.this else REPO}
        revisions = {"base": args.base, "this": args.this}
        made = []
        try:
            for which, revision in revisions.items():
                if revision:
                    subprocess.run(["git", "-C", REPO, "worktree", "add", "--detach", "--quiet", trees[which], revision],
                                   check=True)
                    made.append(trees[which])
            figures = measure(args, names, trees, tmp)
        finally:
            for tree in made:
                subprocess.run(["git", "-C", REPO, "worktree", "remove", "--force", tree], check=False)
    report(figures, args.base, args.this or "this working tree")


def measure(args: argparse.Namespace, names: list[str], trees: dict[str, str], tmp: str) -> dict:
    # (benchmark, row index) -> {"what": text, "base": [...], "this": [...]}
    figures: dict[tuple[str, int], dict] = {}
    for number in range(args.rounds):
        order = ["base", "this"] if number % 2 == 0 else ["this", "base"]
        for name in names:
            full, quick = BENCHMARKS[name]
            for which in order:
                print(f"round {number + 1}/{args.rounds}: {name} ({which})", flush=True)
                rows = run_rows(trees[which], name, quick if args.quick else full, os.path.join(tmp, "rows.json"))
                for index, found in enumerate(rows):
                    entry = figures.setdefault((name, index), {"what": found["what"], "base": [], "this": []})
                    entry[which].append(first_number(found["figure"]))
    return figures


def report(figures: dict, base: str, this: str) -> None:
    print(f"\n{this} against {base}: the first number of each figure, per round; ratio = this / base")
    for (name, _index), entry in figures.items():
        pairs = [(b, t) for b, t in zip(entry["base"], entry["this"]) if b and t is not None]
        ratios = sorted(t / b for b, t in pairs)
        base_text = " ".join(f"{v:g}" for v in entry["base"] if v is not None)
        this_text = " ".join(f"{v:g}" for v in entry["this"] if v is not None)
        ratio_text = (f"{statistics.median(ratios):.2f} ({ratios[0]:.2f}-{ratios[-1]:.2f})" if ratios else "-")
        print(f"[{name}] {entry['what']}\n    base: {base_text}\n    this: {this_text}\n    ratio: {ratio_text}")


if __name__ == "__main__":
    main()
