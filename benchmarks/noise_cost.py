"""What measuring the gradient noise scale costs a user's training at N=2 on the CPU: examples/train.py under
ddptop's probe in two ranks (torchrun, gloo), with and without the probe's gradient-norm hook, side by side in
one run, the order alternating from round to round.

The hook (``bench_kernels.probe_noise``) replaces DDP's built-in averaging allreduce by its Python form and
takes each bucket's norm before and after it; without it, ``ScriptNoise.attach`` is a no-op and DDP runs as the
script wrote it. The script times its own steps and rank 0 prints their median; a round's figure is the ratio
of the medians (with / without). Reported: the geometric mean of the ratios with a 95% bootstrap interval and
the medians, against the goal of 3% of the step; and the norms' own work a step measured in this process (on a
machine whose speed drifts, the side-by-side interval can be wider than the goal).

    python benchmarks/noise_cost.py [--rounds 6] [--steps 200] [--hidden 896] [--batch-size 64]
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.common import add_json_option, geometric_interval, row, write_rows  # noqa: E402
from benchmarks.probe_cost import TRAIN, free_port, write_spec  # noqa: E402
from ddptop.protocol.launchspec import DEFAULT_FLUSH_INTERVAL  # noqa: E402

GOAL = 0.03  # the hook's cost, a share of the step
# the probe as the rank runs it, without the gradient-norm hook
WITHOUT_NOISE = ("import runpy, sys; import bench_kernels.probe_noise as noise; "
                 "noise.ScriptNoise.attach = lambda self, model: None; "
                 "sys.argv[0] = 'script_probe'; runpy.run_module('bench_kernels.script_probe', run_name='__main__')")
CASES = ("without the hook", "with the hook")


def median_step(case: str, spec: str, script: list[str]) -> float:
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--master-port",
                str(free_port())]
    start = ["--no-python", sys.executable, "-c", WITHOUT_NOISE] if case == CASES[0] else ["-m",
                                                                                            "bench_kernels.script_probe"]
    env = dict(os.environ, PYTHONPATH=REPO, OMP_NUM_THREADS="1")
    done = subprocess.run([*launcher, *start, "--spec", spec, "--", *script], cwd=REPO, env=env,
                          capture_output=True, text=True)
    found = re.search(r"median step ([\d.]+) ms", done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"noise_cost: {case} failed:\n{done.stdout[-1000:]}{done.stderr[-2000:]}")
    return float(found.group(1)) / 1000


def norms_per_step(hidden: int, features: int = 64, classes: int = 10, repeat: int = 200) -> float:
    """The norms' own work a step, in this process on one thread: both sides of every gradient value of
    examples/train.py's model (one bucket at DDP's 25 MB), and reading them back, as the hook does."""
    import time

    import torch

    from bench_kernels.gradient_norms import GradientNorms

    torch.set_num_threads(1)
    values = features * hidden + hidden + hidden * hidden + hidden + hidden * classes + classes
    buffer = torch.randn(values)
    norms = GradientNorms(torch)
    start = time.perf_counter()
    for _ in range(repeat):
        norms.before(0, buffer)
        norms.after(buffer)
        norms.take()
    return (time.perf_counter() - start) / repeat


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    script = [TRAIN, "--report", "--steps", str(args.steps), "--hidden", str(args.hidden), "--batch-size",
              str(args.batch_size), "--examples", str(2 * args.batch_size * (args.steps + 1))]
    figures: dict[str, list[float]] = {case: [] for case in CASES}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for case in CASES[index % 2:] + CASES[:index % 2]:
                spec = write_spec(os.path.join(tmp, f"round{index}-{case.replace(' ', '-')}"), DEFAULT_FLUSH_INTERVAL,
                                  world_size=2)
                figures[case].append(median_step(case, spec, script))
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(f"{c} {figures[c][-1] * 1e3:.3f} ms" for c in CASES),
                  file=sys.stderr, flush=True)
    mean, low, high = geometric_interval([a / b for a, b in zip(figures[CASES[1]], figures[CASES[0]])])
    medians = {case: float(np.median(values)) for case, values in figures.items()}
    rows = [row(f"examples/train.py's step at N=2 (gloo, CPU) under the probe, with / without its gradient-norm "
                f"hook ({args.rounds} rounds, {args.steps} steps, batch {args.batch_size} a rank, hidden "
                f"{args.hidden}, 1 thread a rank)",
                f"{mean:.4f} (95% {low:.4f}-{high:.4f}); medians {medians[CASES[1]] * 1e3:.3f} ms against "
                f"{medians[CASES[0]] * 1e3:.3f} ms",
                f"under {1 + GOAL:.2f} (the interval's high end)", high < 1 + GOAL)]
    work = norms_per_step(args.hidden)
    rows.append(row(f"the norms' own work a step (both sides of the {args.hidden}-wide model's gradient, one thread), "
                    "against the median step without the hook",
                    f"{work * 1e6:.0f} µs, {work / medians[CASES[0]]:.2%} of the step",
                    f"under {GOAL:.0%}", work / medians[CASES[0]] < GOAL))
    for entry in rows:
        print(f"{entry['what']}: {entry['figure']} (goal: {entry['goal']}: {'met' if entry['met'] else 'NOT met'})")
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
