"""Launch-to-launch spread with the ranks bound to cores and without: does binding narrow it?

One configuration (resnet18 at 32 px, batch 8 per rank, N=2, gloo on the CPU by default) is run in
``--launches`` separate ddptop sweeps of one torchrun launch each with ``--bind-cores`` and as many with
``--no-bind-cores``, interleaved, the order swapped every pair (bound, unbound, unbound, bound, ...) so that
a drifting machine favours neither. Each launch gives one p50 (the median of both ranks' measured steps);
each side's spread is the coefficient of variation of its launch p50s. Reported side by side, with the
ratio of the two spreads (bound / unbound) and its 95% interval twice: a bootstrap over the launches of each
side, and the F interval on the ratio of the standard deviations of log p50 (which assumes them normal).
With a handful of launches a side the bootstrap's interval is too narrow; the F interval is the one to read.

    python benchmarks/launch_spread.py [--launches 5] [--model resnet18] [--batch 8] [--image-size 32]
                                       [--warmup 5] [--iters 40] [--json rows.json]
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, add_json_option, ddptop_env, row, write_rows  # noqa: E402

SIDES = {"bound": "--bind-cores", "unbound": "--no-bind-cores"}
RESAMPLES = 10_000


def one_launch_flags() -> list[str]:
    """One torchrun launch per sweep where ddptop would otherwise repeat each launch (--launches)."""
    from ddptop.run.options import OPTIONS_BY_NAME

    return ["--launches", "1"] if "launches" in OPTIONS_BY_NAME else []


def sweep(run_dir: str, side: str, args: argparse.Namespace) -> list[dict]:
    """One ddptop sweep; each of its launches' p50 (seconds) and how rank 0 said it was bound."""
    flags = ["--models", args.model, "--batch-sizes", str(args.batch), "--world-sizes", "2", "--image-size",
             str(args.image_size), "--num-classes", "10", "--device", "cpu", "--backend", "gloo",
             "--warmup", str(args.warmup), "--iters", str(args.iters), "--no-collectives", "--comm-iters", "0",
             "--telemetry-interval", "0", SIDES[side], *one_launch_flags()]
    done = subprocess.run([sys.executable, "-m", "ddptop", "run", "--headless", "--out", run_dir, *flags],
                          cwd=REPO, env=ddptop_env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"launch_spread: ddptop run failed:\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    launches = []
    for launch in sorted(glob.glob(os.path.join(run_dir, "launches", "*"))):
        steps, how = [], None
        for path in glob.glob(os.path.join(launch, "events", "rank-*.jsonl")):
            with open(path, encoding="utf-8") as handle:
                for event in map(json.loads, handle):
                    if event["type"] == "samples" and event["phase"] == "measure":
                        steps.extend(event["sec"])
                    elif event["type"] == "hello" and event["rank"] == 0:
                        how = f"{event.get('binding')}, CPUs {event.get('cores')}"
        if steps:
            launches.append({"p50": statistics.median(steps), "binding": how})
    return launches


def cv(values: list[float]) -> float:
    return statistics.stdev(values) / statistics.fmean(values)


def bootstrap_ratio(a: list[float], b: list[float], seed: int = 0) -> tuple[float, float]:
    """95% percentile interval of cv(a) / cv(b), the launches of each side resampled apart."""
    import numpy as np

    rng = np.random.default_rng(seed)
    x, y = np.asarray(a), np.asarray(b)
    xs = x[rng.integers(0, len(x), (RESAMPLES, len(x)))]
    ys = y[rng.integers(0, len(y), (RESAMPLES, len(y)))]
    sx, sy = xs.std(axis=1, ddof=1), ys.std(axis=1, ddof=1)
    spread = (sx > 0) & (sy > 0)  # a resample of one launch repeated has no spread: left out on either side
    ratios = (sx / xs.mean(axis=1))[spread] / (sy / ys.mean(axis=1))[spread]
    low, high = np.percentile(ratios, [2.5, 97.5])
    return float(low), float(high)


def f_ratio(a: list[float], b: list[float]) -> tuple[float, float, float] | None:
    """sd(log a) / sd(log b) and its 95% F interval (None without scipy)."""
    try:
        from scipy.stats import f
    except ImportError:
        return None
    sa, sb = statistics.stdev(map(math.log, a)), statistics.stdev(map(math.log, b))
    if sb == 0:
        return None
    variance_ratio, da, db = (sa / sb) ** 2, len(a) - 1, len(b) - 1
    return (sa / sb, math.sqrt(variance_ratio / f.ppf(0.975, da, db)),
            math.sqrt(variance_ratio / f.ppf(0.025, da, db)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--launches", type=int, default=5, help="launches per side (default 5)")
    parser.add_argument("--model", default="resnet18", help="e.g. tests.tiny_models:tiny_cnn for a quick look")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--image-size", type=int, default=32)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=40)
    add_json_option(parser)
    args = parser.parse_args()
    if args.launches < 2:
        parser.error("--launches must be at least 2 (a spread needs two launches)")
    found: dict[str, list[dict]] = {side: [] for side in SIDES}
    with tempfile.TemporaryDirectory() as tmp:
        for pair in range(args.launches):
            order = list(SIDES) if pair % 2 == 0 else list(reversed(SIDES))
            for side in order:
                print(f"pair {pair + 1}/{args.launches}: {side}", flush=True)
                found[side] += sweep(os.path.join(tmp, f"{pair}-{side}"), side, args)
    p50s = {side: [launch["p50"] for launch in found[side]] for side in SIDES}
    print(f"\n{args.model} bs{args.batch} {args.image_size} px, N=2 gloo on the CPU, {args.warmup} warm-up and "
          f"{args.iters} measured steps per launch, {os.cpu_count()} CPUs")
    for side in SIDES:
        shown = " ".join(f"{1e3 * p:.2f}" for p in p50s[side])
        print(f"  {side:8s} launch p50s (ms): {shown}")
        print(f"  {'':8s} median {1e3 * statistics.median(p50s[side]):.2f} ms, CV {100 * cv(p50s[side]):.2f}%; "
              f"rank 0: {'; '.join(sorted({str(launch['binding']) for launch in found[side]}))}")
    ratio = cv(p50s["bound"]) / cv(p50s["unbound"]) if cv(p50s["unbound"]) else math.inf
    low, high = bootstrap_ratio(p50s["bound"], p50s["unbound"])
    text = f"CV bound / unbound {ratio:.2f} (bootstrap 95% CI {low:.2f}-{high:.2f}"
    by_f = f_ratio(p50s["bound"], p50s["unbound"])
    if by_f:
        text += f"; sd of log p50 {by_f[0]:.2f}, F 95% CI {by_f[1]:.2f}-{by_f[2]:.2f}"
    text += ")"
    print(f"  {text}")
    verdict = "narrower" if high < 1 else "wider" if low > 1 else "not distinguishable"
    print(f"  binding makes the launch-to-launch spread: {verdict} "
          f"({len(p50s['bound'])} + {len(p50s['unbound'])} launches)")
    rows = [row(f"launch spread: CV of launch p50s, {side}", f"{100 * cv(p50s[side]):.2f}% over {len(p50s[side])}")
            for side in SIDES]
    rows.append(row("launch spread: bound / unbound", text, "below 1 (narrower)", high < 1))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
