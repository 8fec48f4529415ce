"""What the workload protocol costs the built-in models: their DDP step through this tree against another
revision's, side by side in one run.

Every built-in model is a workload of ``ddptop.protocol.workload`` (its batch from ``make_batch``, its loss
from ``loss(net, batch)``); before, the kernel called ``loss_fn(net(inputs), targets)`` itself. Each round
runs, for each model, one process per tree (the base revision checked out in a temporary git worktree), the
order alternating from round to round: the tree's own kernel builds the configuration (a DDP wrapper on a
one-rank gloo group, on the CPU), warms up, then times steps with ``time.perf_counter()`` around each. A
round's figure is the ratio of the two medians (this tree / base); reported per model: the geometric mean of
the ratios over the rounds with a 95% bootstrap interval, and both trees' medians.

    python benchmarks/protocol_cost.py [--base REV] [--rounds 5] [--steps 30] [--threads 1]

The default base is the revision before the protocol (``PROTOCOL_PARENT``).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

from benchmarks.common import add_json_option, geometric_interval, row, write_rows  # noqa: E402

PROTOCOL_PARENT = "5be6ccb"  # the last revision whose kernel built its own inputs, targets and loss
MODELS = {"resnet18": {"batch": 16, "seq_len": None}, "gpt-tiny": {"batch": 8, "seq_len": 128}}

MEASURE = r"""
import json, statistics, sys, time
import torch, torch.distributed as dist
model, batch, seq_len, steps, threads = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
torch.set_num_threads(threads)
dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Mode, Scaling
try:
    from bench_kernels.training import build_training as build
except ImportError:  # before the protocol
    from bench_kernels.workload import build_workload as build
cfg = RunConfig(config_id="c", model=model, mode=Mode.DDP, batch_size=batch, global_batch=batch, world_size=1,
                nnodes=1, backend="gloo", device="cpu", scaling=Scaling.WEAK, image_size=64, num_classes=1000,
                warmup=5, iters=steps, time_budget=None, bucket_cap_mb=25.0, amp=None, channels_last=False,
                seq_len=int(seq_len) if seq_len != "-" else None)
built = build(cfg, torch.device("cpu"), 0, 0)
step = built.step_through(built.net)
for _ in range(5):
    step()
times = []
for _ in range(steps):
    start = time.perf_counter()
    step()
    times.append(time.perf_counter() - start)
print(json.dumps({"median": statistics.median(times)}))
"""


def median_step(tree: str, model: str, steps: int, threads: int) -> float:
    settings = MODELS[model]
    done = subprocess.run(
        [sys.executable, "-c", MEASURE, model, str(settings["batch"]), str(settings["seq_len"] or "-"), str(steps),
         str(threads)],
        cwd=tree, env=dict(os.environ, PYTHONPATH=tree, OMP_NUM_THREADS=str(threads)), capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"protocol_cost: {model} failed in {tree}:\n{done.stderr[-2000:]}")
    return float(json.loads(done.stdout.strip().splitlines()[-1])["median"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_json_option(parser)
    parser.add_argument("--base", default=PROTOCOL_PARENT)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        base = os.path.join(tmp, "base")
        subprocess.run(["git", "worktree", "add", "--detach", base, args.base], cwd=REPO, check=True,
                       capture_output=True)
        try:
            figures: dict[str, dict[str, list[float]]] = {m: {"this": [], "base": []} for m in MODELS}
            for round_index in range(args.rounds):
                trees = [("this", REPO), ("base", base)]
                for model in MODELS:
                    for name, tree in trees if round_index % 2 == 0 else trees[::-1]:
                        figures[model][name].append(median_step(tree, model, args.steps, args.threads))
                print(f"round {round_index + 1}/{args.rounds} done", file=sys.stderr, flush=True)
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", base], cwd=REPO, capture_output=True)
    rows = []
    for model, pair in figures.items():
        ratios = [a / b for a, b in zip(pair["this"], pair["base"])]
        mean, low, high = geometric_interval(ratios)
        rows.append(row(
            f"{model} DDP step, this tree / {args.base} ({args.rounds} rounds, {args.steps} steps, "
            f"{args.threads} thread{'s' if args.threads > 1 else ''})",
            f"{mean:.3f} (95% {low:.3f}-{high:.3f}); medians {np.median(pair['this']) * 1e3:.1f} ms against "
            f"{np.median(pair['base']) * 1e3:.1f} ms",
            "not slower beyond noise (the interval reaches 1 or below)", low <= 1.0))
    for entry in rows:
        print(f"{entry['what']}: {entry['figure']}")
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
