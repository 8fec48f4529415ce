"""Observer effect and fidelity: one DDP configuration timed with and without ddptop, runs interleaved.

Four ways of running the same configuration (default: resnet18, batch 16 per rank, 64 px, N=2, gloo on a
CPU machine), each round running all four in a rotated order so that a slow moment of the machine does not
fall on one of them only:

  reference   benchmarks/reference_ddp.py under torchrun: a hand-written DDP loop, nothing of ddptop
  bare        `ddptop run --headless --telemetry-interval 0`: ddptop's kernel and launcher, no sampling
  headless    `ddptop run --headless`: as a user runs it without a screen (telemetry every second)
  tui         `ddptop run` with the live view in a pseudo-terminal (160x50, default refresh and telemetry)

Fidelity is bare's p50 sec/iter over the reference's (does ddptop time the same step the same way?); the
observer effect is headless/reference and tui/reference (what watching costs the thing watched). Each run's
p50 (pooled over its ranks) is divided by the p50 of the reference run of the same round, so that a slow
spell of the machine cancels out; reported are the median of those per-round ratios, their range, and a 95%
bootstrap interval of the median. On a shared VM the spread between rounds can exceed the goal: then the
interval, not the ratio, is the honest figure. Next to each, the ddptop process's own CPU (children
excluded) per wall second while the configuration ran: on a box whose cores the ranks fill, that is the
time it can take from them.

    python benchmarks/observer.py [--rounds 6] [--iters 30] [--world-size 2]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psutil

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import REPO, PtyProgram, add_json_option, ddptop_env, row, write_rows  # noqa: E402
from ddptop.run.session import Session  # noqa: E402

MODES = ("reference", "bare", "headless", "tui")
GOAL_CPU, GOAL_GPU = 0.03, 0.01  # observer effect
GOAL_FIDELITY = 0.02


class Case:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.threads = max(1, (os.cpu_count() or 1) // args.world_size)
        self.device = "cpu"  # as the reference found it

    def ddptop_args(self, out: str) -> list[str]:
        a = self.args
        return [sys.executable, "-m", "ddptop", "run", "--out", out, "--models", a.model,
                "--batch-sizes", str(a.batch_size), "--image-size", str(a.image_size),
                "--world-sizes", str(a.world_size), "--warmup", str(a.warmup), "--iters", str(a.iters),
                "--threads-per-rank", str(self.threads), "--no-baseline", "--comm-iters", "0",
                "--no-collectives"]

    def run(self, mode: str, out: str) -> tuple[list[float], float | None]:
        """The run's step times, pooled over ranks, and the ddptop process's own CPU share (None for the
        reference): CPU seconds of that process alone, not its children, per wall second of the steps."""
        if mode == "reference":
            return self.reference(out), None
        argv = self.ddptop_args(out)
        if mode in ("bare", "headless"):
            extra = ["--headless", "--telemetry-interval", "0"] if mode == "bare" else ["--headless"]
            process = subprocess.Popen([*argv, *extra], cwd=REPO, env=ddptop_env(), stdout=subprocess.PIPE,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
            watch = CpuWatch(process.pid)
            output = process.communicate()[0]
            if process.returncode != 0:
                raise SystemExit(f"ddptop {mode} failed ({process.returncode}): {output[-2000:]!r}")
        else:
            screen = PtyProgram(argv, ddptop_env())
            watch = CpuWatch(screen.process.pid)
            wait_complete(os.path.join(out, "summary.json"), timeout=1800, alive=screen.process)
            screen.send(b"q")
            if screen.close() != 0:
                raise SystemExit(f"ddptop in the pty exited {screen.process.returncode}")
        times, (started, ended) = step_times(out)
        return times, watch.share(started, ended)

    def reference(self, out: str) -> list[float]:
        a = self.args
        result = out + ".json"
        done = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node",
             str(a.world_size), os.path.join(REPO, "benchmarks", "reference_ddp.py"), "--model", a.model,
             "--batch-size", str(a.batch_size), "--image-size", str(a.image_size), "--warmup", str(a.warmup),
             "--iters", str(a.iters), "--threads", str(self.threads), "--out", result],
            cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS=str(self.threads), GLOO_SOCKET_IFNAME="lo"),
            capture_output=True, text=True,
        )
        self.check(done)
        with open(result, encoding="utf-8") as handle:
            data = json.load(handle)
        self.device = data["device"]
        return [t for rank in data["sec_per_iter"] for t in rank]

    @staticmethod
    def check(done: subprocess.CompletedProcess) -> None:
        if done.returncode != 0:
            raise SystemExit(f"{done.args[2:5]} failed ({done.returncode}): {(done.stderr or done.stdout)[-2000:]}")


class CpuWatch(threading.Thread):
    """Follows one process's own CPU time (children excluded) until it ends, five times a second."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.process = psutil.Process(pid)
        self.readings: list[tuple[float, float]] = []  # (UNIX time, CPU seconds so far)
        self.start()

    def run(self) -> None:
        while True:
            try:
                times = self.process.cpu_times()
            except psutil.Error:
                return
            self.readings.append((time.time(), times.user + times.system))
            time.sleep(0.2)

    def share(self, start: float, end: float) -> float:
        """CPU seconds per wall second between two moments (start-up and the summary at the end are
        outside the steps, and cost the ranks nothing)."""
        self.join(timeout=5)
        inside = [r for r in self.readings if start <= r[0] <= end]
        if len(inside) < 2:
            return float("nan")
        (t0, c0), (t1, c1) = inside[0], inside[-1]
        return (c1 - c0) / (t1 - t0)


def wait_complete(path: str, timeout: float, alive: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(path, encoding="utf-8") as handle:
                if json.load(handle).get("complete"):
                    return
        except (OSError, ValueError):
            pass  # not there yet, or being replaced
        if alive.poll() is not None:
            raise SystemExit(f"ddptop exited ({alive.returncode}) before saving a complete summary")
        time.sleep(0.5)
    raise SystemExit(f"no complete summary within {timeout:g} s")


def step_times(run_dir: str) -> tuple[list[float], tuple[float, float]]:
    """Step times pooled over ranks, and when the configuration started and ended (its steps)."""
    session = Session.load(run_dir)
    (state,) = session.ordered_states()
    pooled = [s for rank in sorted(state.samples) for s in state.samples[rank]]
    return pooled, (state.started_t, state.ended_t)


def measure(args: argparse.Namespace) -> dict[str, dict]:
    case = Case(args)
    samples: dict[str, list[float]] = {m: [] for m in MODES}
    per_round: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        for index in range(args.rounds):
            order = MODES[index % len(MODES):] + MODES[:index % len(MODES)]
            for mode in order:
                started = time.perf_counter()
                times, share = case.run(mode, os.path.join(tmp, f"{mode}-{index}"))
                samples[mode] += times
                per_round[mode].append(statistics.median(times))
                if share is not None:
                    cpu[mode].append(share)
                print(f"  round {index + 1} {mode:<9} p50 {1000 * per_round[mode][-1]:7.1f} ms "
                      f"({len(times)} steps, {time.perf_counter() - started:.0f} s"
                      + (f", ddptop {100 * share:.1f}% of a core)" if share is not None else ")"), file=sys.stderr)
    results = {}
    for mode in MODES[1:]:
        # each run against the reference run of its own round: slow spells of the machine cancel out
        ratios = [m / r for m, r in zip(per_round[mode], per_round["reference"])]
        results[mode] = {
            "p50_s": statistics.median(samples[mode]),
            "ratio": statistics.median(ratios),
            "round_low": min(ratios), "round_high": max(ratios),
            "interval": bootstrap_median(ratios),
            "cpu_share": statistics.median(cpu[mode]),
        }
    results["reference"] = {"p50_s": statistics.median(samples["reference"]), "steps": len(samples["reference"]),
                            "device": case.device}
    return results


def verdict(low: float, high: float, goal: float) -> bool | None:
    """Met when the whole interval is within the goal, not met when it lies wholly outside; None (cannot
    tell) when the machine's noise is wider than the goal."""
    if 1 - goal <= low and high <= 1 + goal:
        return True
    if high < 1 - goal or low > 1 + goal:
        return False
    return None


def bootstrap_median(values: list[float], resamples: int = 2000, seed: int = 0) -> tuple[float, float]:
    """95% percentile-bootstrap interval of the median of ``values`` (here: one ratio per round)."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(resamples))
    return medians[int(0.025 * (resamples - 1))], medians[int(0.975 * (resamples - 1))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=30)
    add_json_option(parser)
    args = parser.parse_args()
    results = measure(args)
    ref = results["reference"]
    print(f"{args.model}, batch {args.batch_size}, {args.image_size} px, N={args.world_size}; {args.rounds} rounds "
          f"interleaved on {ref['device']}; reference p50 {1000 * ref['p50_s']:.1f} ms over {ref['steps']} steps")
    print(f"{'run':<10}{'p50 ms':>9}{'vs ref':>9}{'rounds':>16}{'95% interval':>17}{'ddptop CPU':>12}")
    rows = []
    for mode in MODES[1:]:
        r = results[mode]
        low, high = r["interval"]
        print(f"{mode:<10}{1000 * r['p50_s']:>9.1f}{r['ratio']:>9.3f}{r['round_low']:>8.3f}–{r['round_high']:<7.3f}"
              f"{low:>8.3f}–{high:<8.3f}{100 * r['cpu_share']:>10.1f}%")
        goal = GOAL_FIDELITY if mode == "bare" else GOAL_GPU if ref["device"] == "cuda" else GOAL_CPU
        what = "fidelity: ddptop p50 / reference p50" if mode == "bare" else f"observer effect: {mode} / reference"
        rows.append(row(what, f"{r['ratio']:.3f} (95% CI {low:.3f}–{high:.3f}; ddptop process "
                              f"{100 * r['cpu_share']:.1f}% of a core)",
                        f"within {100 * goal:g}%", verdict(low, high, goal)))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
