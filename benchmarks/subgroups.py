"""One launch for every world size, smaller ones as subgroups, against a launch per world size: same step times?

The question before ddptop could run a sweep's world sizes in one torchrun launch (each smaller N as a
``torch.distributed.new_group`` of the first N ranks, the other ranks waiting outside the timed region):
1. do the step times of each N match those of a launch of exactly N ranks, within noise (the comparison
   ``ddptop diff`` makes: the ratio of pooled medians with its 95% interval)?
2. do the waiting ranks stay off the CPU (they block in a gloo barrier), and what do they hold?
3. how much of the wall time is setup either way (launching, importing torch, forming the groups)?

Each round runs, in alternating order, a launch per N (``--nproc-per-node N``) and one launch of the largest
N; the worker (``--worker``) imports nothing of ddptop, so both sides are plain torch DDP on gloo.

    python benchmarks/subgroups.py [--rounds 3] [--sizes 1,2] [--steps 60] [--warmup 10]
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

from benchmarks.common import REPO, add_json_option, row, write_rows  # noqa: E402


# -- the worker: one torchrun rank ----------------------------------------------------------------------------

def worker(args: argparse.Namespace) -> None:
    started = time.time()
    import psutil
    import torch
    import torch.distributed as dist
    import torchvision

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    sizes = [n for n in args.sizes if n <= world] if args.layout == "one" else [world]
    result: dict = {"rank": rank, "world": world, "sizes": {}, "idle": {}}
    torch.manual_seed(0)
    for n in sizes:
        group = dist.new_group(list(range(n))) if n < world else None  # every rank takes part in new_group
        # the cores shared by the N measured ranks, as ddptop gives them: set per N, not per launch (a launch
        # of 2 would otherwise leave the subgroup of 1 on half the threads its own launch gets)
        torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
        if rank < n:
            model = torch.nn.parallel.DistributedDataParallel(
                torchvision.models.resnet18(num_classes=10), process_group=group)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
            images, labels = torch.randn(args.batch, 3, 32, 32), torch.randint(0, 10, (args.batch,))
            steps = []
            for step in range(args.warmup + args.steps):
                begin = time.perf_counter()
                optimizer.zero_grad(set_to_none=True)
                torch.nn.functional.cross_entropy(model(images), labels).backward()
                optimizer.step()
                if step >= args.warmup:
                    steps.append(time.perf_counter() - begin)
                if step == 0 and "first_step" not in result:
                    result["first_step"] = time.time() - started
            result["sizes"][n] = steps
            del model, optimizer
        else:  # outside the timed region: blocked until the measured ranks are done
            cpu, wall = time.process_time(), time.perf_counter()
            result["idle"][n] = {"rss": psutil.Process().memory_info().rss}
        dist.barrier()
        if rank >= n:
            result["idle"][n].update(cpu=time.process_time() - cpu, wall=time.perf_counter() - wall)
    with open(os.path.join(args.out, f"rank-{rank}.json"), "w", encoding="utf-8") as handle:
        json.dump(result, handle)
    dist.destroy_process_group()


# -- the driver -----------------------------------------------------------------------------------------------

def launch(args: argparse.Namespace, layout: str, nproc: int, out: str) -> tuple[float, list[dict]]:
    os.makedirs(out)
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}",
               os.path.abspath(__file__), "--worker", "--layout", layout, "--out", out,
               "--sizes", ",".join(map(str, args.sizes)), "--steps", str(args.steps), "--warmup", str(args.warmup),
               "--batch", str(args.batch)]
    # OMP_NUM_THREADS per launch, as ddptop sets it (the cores over the launch's ranks); the worker then sets
    # its threads per N. With OMP_NUM_THREADS at every core instead, N=1 in the shared launch ran 1.26x slower.
    env = dict(os.environ, OMP_NUM_THREADS=str(max(1, (os.cpu_count() or 1) // nproc)))
    begin = time.perf_counter()
    done = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - begin
    if done.returncode != 0:
        sys.exit(f"{layout} launch of {nproc} failed: {done.stderr[-2000:]}")
    results = []
    for name in sorted(os.listdir(out)):
        with open(os.path.join(out, name), encoding="utf-8") as handle:
            results.append(json.load(handle))
    return wall, results


def measure(args: argparse.Namespace) -> dict:
    samples: dict[str, dict[int, dict[int, list[float]]]] = {"separate": {}, "one": {}}
    walls = {"separate": 0.0, "one": 0.0}
    measured = {"separate": 0.0, "one": 0.0}
    idle = []
    with tempfile.TemporaryDirectory() as tmp:
        for number in range(args.rounds):
            order = ("separate", "one") if number % 2 == 0 else ("one", "separate")
            for layout in order:
                for nproc in args.sizes if layout == "separate" else [max(args.sizes)]:
                    print(f"round {number + 1}/{args.rounds}: {layout}, {nproc} rank(s)", flush=True)
                    wall, results = launch(args, layout, nproc, os.path.join(tmp, f"{number}-{layout}-{nproc}"))
                    walls[layout] += wall
                    for result in results:
                        for n, steps in result["sizes"].items():
                            # ranks of one round are one pool, rounds kept apart as the diff keeps them
                            samples[layout].setdefault(int(n), {}).setdefault(100 * number + result["rank"], []).extend(steps)
                            measured[layout] += sum(steps) / int(n)  # the ranks of an N run side by side
                        idle += [dict(v, n=int(n)) for n, v in result["idle"].items()]
    return {"samples": samples, "walls": walls, "measured": measured, "idle": idle}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--sizes", default="1,2")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--layout", choices=("separate", "one"), help=argparse.SUPPRESS)
    parser.add_argument("--out", help=argparse.SUPPRESS)
    add_json_option(parser)
    args = parser.parse_args()
    args.sizes = sorted(int(n) for n in args.sizes.split(","))
    if args.worker:
        worker(args)
        return
    from ddptop.analysis.uncertainty import compare

    found = measure(args)
    rows = []
    print(f"resnet18 bs{args.batch} 32 px, gloo, {args.rounds} rounds, {args.steps} measured steps per rank and N")
    for n in args.sizes:
        comparison = compare(found["samples"]["separate"][n], found["samples"]["one"][n])
        ratio = comparison.ratio
        text = f"p50 one launch / own launch {ratio.value:.3f} (95% CI {ratio.low:.3f}-{ratio.high:.3f}): {comparison.verdict}"
        print(f"  N={n}: {text}")
        rows.append(row(f"subgroups: N={n} in one launch of {max(args.sizes)} vs its own launch", text,
                        "within noise or equivalent", comparison.verdict in ("within noise", "equivalent")))
    for entry in found["idle"]:
        share = entry["cpu"] / entry["wall"] if entry["wall"] > 0 else 0.0
        print(f"  a waiting rank during N={entry['n']}: {100 * share:.2f}% of a core over {entry['wall']:.1f} s, "
              f"RSS {entry['rss'] / 2**20:.0f} MiB")
    worst = max((e["cpu"] / e["wall"] for e in found["idle"] if e["wall"] > 0), default=0.0)
    rows.append(row("subgroups: CPU of a rank waiting outside the timed region", f"{100 * worst:.2f}% of a core at most",
                    "asleep (< 1%)", worst < 0.01))
    for layout in ("separate", "one"):
        wall, inside = found["walls"][layout], found["measured"][layout]
        share = 1 - inside / wall if wall else 0.0
        print(f"  {layout:8s}: {wall:.1f} s of launches, {100 * share:.0f}% outside the measured steps (warm-up included)")
        rows.append(row(f"subgroups: wall time, {layout} launches", f"{wall:.1f} s, {100 * share:.0f}% setup"))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
