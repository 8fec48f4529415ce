"""What ddptop's probe costs a user's training script: examples/train.py alone, under the probe without its
gradient-synchronisation hooks, and under the whole probe, side by side in one run, the order rotating from
round to round.

Each round runs the script three times as one process on the CPU, each in a process group of one rank (gloo,
as torchrun's environment makes it: the script wraps its model in DistributedDataParallel, so the hooks on
DDP's constructor and forward and the collectives' count are exercised), one thread, no loader workers, a step
of about 10 ms by default: ``python examples/train.py --report``, ``python -m bench_kernels.script_probe --spec
launch.json -- examples/train.py --report`` with ``GradSync.install`` replaced by a no-op, and the same with the
probe whole; the configuration's ``script_to_end`` set so that the script runs all its steps under the probe
(and no trace is taken). The script times its own steps (``time.perf_counter()`` around each, the probe's work
at the optimizer's step and around each batch inside) and prints their median; a round's figures are the
ratios of the medians (probe / alone, and probe / probe without the hooks: the hooks' own cost). Reported: the
geometric mean of each ratio with a 95% bootstrap interval, the medians, and the probe's own work per step as
it counts it (``config_end.script.probe_s`` over the steps): the step's end (DDP's micro-batches and syncs
counted there), each batch's count, and the streaming of the samples (a JSON event and a write at most every
``--flush-interval``, the launch's, or the probe's own ``SCRIPT_FLUSH_INTERVAL``, 0.5 s, where that is longer).

    python benchmarks/probe_cost.py [--rounds 5] [--steps 300] [--hidden 896] [--batch-size 64] [--flush-interval 0.1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.common import add_json_option, geometric_interval, row, write_rows  # noqa: E402
from bench_kernels.script_probe import SCRIPT_FLUSH_INTERVAL  # noqa: E402
from ddptop.protocol.launchspec import DEFAULT_FLUSH_INTERVAL, LaunchSpec, RunConfig  # noqa: E402
from ddptop.protocol.vocab import Mode, Scaling  # noqa: E402

TRAIN = os.path.join(REPO, "examples", "train.py")
STEP_GOAL_S = 50e-6  # the probe's own work a step


def write_spec(folder: str, flush_interval: float, world_size: int = 1) -> str:
    """The launch spec of a script run to its end under the probe, on the CPU with gloo, in ``folder``."""
    os.makedirs(os.path.join(folder, "events"), exist_ok=True)
    cfg = RunConfig(config_id=f"train/n{world_size}", model="script", mode=Mode.DDP, batch_size=1,
                    global_batch=world_size, world_size=world_size, nnodes=1, backend="gloo", device="cpu",
                    scaling=Scaling.WEAK, image_size=0, num_classes=0, warmup=5, iters=10, time_budget=None,
                    bucket_cap_mb=25.0, amp=None, channels_last=False, script_to_end=True)
    spec = LaunchSpec(launch_id=f"01-n{world_size}-gloo", events_dir=os.path.join(folder, "events"), device="cpu",
                      backend="gloo", threads_per_rank=1, configs=(cfg,), flush_interval=flush_interval)
    path = os.path.join(folder, "launch.json")
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(spec.dumps())
    return path


# the probe as the rank runs it, its synchronisation hooks left out (what the rest of it costs alone)
WITHOUT_HOOKS = ("import runpy, sys; import bench_kernels.probe_sync as sync; sync.GradSync.install = lambda self: None; "
                 "sys.argv[0] = 'script_probe'; runpy.run_module('bench_kernels.script_probe', run_name='__main__')")
CASES = ("alone", "no hooks", "probe")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def median_step(command: list[str]) -> float:
    env = dict(os.environ)
    # a process group of one rank, as torchrun's environment makes it: the script wraps its model in DDP
    env.update(PYTHONPATH=REPO, OMP_NUM_THREADS="1", WORLD_SIZE="1", RANK="0", LOCAL_RANK="0", LOCAL_WORLD_SIZE="1",
               MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    found = re.search(r"median step ([\d.]+) ms", done.stdout)
    if done.returncode != 0 or found is None:
        sys.exit(f"probe_cost: {' '.join(command)} failed:\n{done.stdout[-1000:]}{done.stderr[-2000:]}")
    return float(found.group(1)) / 1000


def probe_work_per_step(events_dir: str) -> float:
    with open(os.path.join(events_dir, "rank-0.jsonl"), encoding="utf-8") as handle:
        events = [json.loads(line) for line in handle]
    (end,) = [e for e in events if e["type"] == "config_end"]
    return end["script"]["probe_s"] / (end["iters"] + end["warmup_iters"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--hidden", type=int, default=896)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--flush-interval", type=float, default=DEFAULT_FLUSH_INTERVAL,
                        help="the launch's seconds between writes of the rank's events")
    args = parser.parse_args()
    script = [TRAIN, "--report", "--steps", str(args.steps), "--hidden", str(args.hidden), "--batch-size",
              str(args.batch_size), "--examples", str(args.batch_size * (args.steps + 1))]
    figures: dict[str, list[float]] = {case: [] for case in CASES}
    work: dict[str, list[float]] = {"no hooks": [], "probe": []}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            for case in CASES[index % 3:] + CASES[:index % 3]:
                if case == "alone":
                    figures[case].append(median_step([sys.executable, *script]))
                    continue
                folder = os.path.join(tmp, f"round{index}-{case.replace(' ', '-')}")
                spec = write_spec(folder, args.flush_interval)
                start = ["-c", WITHOUT_HOOKS] if case == "no hooks" else ["-m", "bench_kernels.script_probe"]
                figures[case].append(median_step([sys.executable, *start, "--spec", spec, "--", *script]))
                work[case].append(probe_work_per_step(os.path.join(folder, "events")))
            print(f"round {index + 1}/{args.rounds}: " + ", ".join(f"{c} {figures[c][-1] * 1e3:.3f} ms" for c in CASES)
                  + f"; the probe's work {work['no hooks'][-1] * 1e6:.1f} µs a step without the hooks, "
                  f"{work['probe'][-1] * 1e6:.1f} with them", file=sys.stderr, flush=True)
    medians = {case: float(np.median(values)) for case, values in figures.items()}
    rows = []
    for over, what, base in (("probe", "under the probe / alone", "alone"),
                             ("probe", "under the probe / under the probe without its synchronisation hooks", "no hooks")):
        mean, low, high = geometric_interval([a / b for a, b in zip(figures[over], figures[base])])
        rows.append(row(f"examples/train.py's step (DDP, one rank) {what} ({args.rounds} rounds, {args.steps} steps, "
                        f"batch {args.batch_size}, hidden {args.hidden}, 1 thread)",
                        f"{mean:.4f} (95% {low:.4f}-{high:.4f}); medians {medians[over] * 1e3:.3f} ms against "
                        f"{medians[base] * 1e3:.3f} ms ({(medians[over] - medians[base]) * 1e6:+.1f} µs)",
                        "within the noise (the interval reaches 1)", low <= 1.0))
    for case, label in (("no hooks", "without its synchronisation hooks"), ("probe", "with them")):
        rows.append(row(f"the probe's own work a step, {label} (config_end.script.probe_s over the steps; events "
                        f"written every {max(args.flush_interval, SCRIPT_FLUSH_INTERVAL)} s at most)",
                        f"median {np.median(work[case]) * 1e6:.1f} µs (rounds {min(work[case]) * 1e6:.1f}-"
                        f"{max(work[case]) * 1e6:.1f} µs)",
                        f"under {STEP_GOAL_S * 1e6:.0f} µs", float(np.median(work[case])) < STEP_GOAL_S))
    for entry in rows:
        print(f"{entry['what']}: {entry['figure']} (goal: {entry['goal']}: {'met' if entry['met'] else 'NOT met'})")
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
