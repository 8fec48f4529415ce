"""The step's p95 beside a tune's examples/s: how often its two-level interval holds the true p95, and what it
costs beside the p50's, measured side by side in one run.

Synthetic sweeps of the default plan's shape (``ddptop.analysis.synthetic``: each configuration in K launches
with a lognormal offset of its own and AR(1) steps inside), the launch variance pooled from the medians as the
summary pools it. The true p95 is the one of a launch without offset: truth x (1 + noise x z_0.95), what the
log-scale centre estimates, as the p50's truth is the median without offset. Each launch measures 60 steps,
so 2 launches reach the 100 steps a p95's interval needs (``precision.tail_steps``).

    python benchmarks/tail_interval.py [--trials 200] [--resamples 400] [--quick] [--json rows.json]
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from statistics import NormalDist

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import row, simulation_options, write_rows  # noqa: E402
from ddptop.analysis import launches, synthetic, uncertainty  # noqa: E402
from ddptop.analysis.synthetic import DEFAULT_SWEEP, Scenario  # noqa: E402
from ddptop.protocol import precision  # noqa: E402

GOAL = 0.92  # the p50's own goal (benchmarks/launch_variance.py)
STEPS = 60
SLOW = "ddp n2"


def scenarios(quick: bool) -> list[Scenario]:
    if quick:
        return [Scenario(launch_offset=0.03, step_noise=0.05, ranks=2, launches=2, steps=STEPS)]
    return [Scenario(launch_offset=offset, step_noise=0.05, ranks=2, launches=k, steps=STEPS)
            for offset, k in itertools.product((0.01, 0.03, 0.10), (2, 3))]


def check(scenario: Scenario, trials: int, resamples: int, seed: int) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    z = NormalDist().inv_cdf(precision.TAIL)
    truth = DEFAULT_SWEEP[SLOW] * (1 + scenario.step_noise * z)
    covered, widths, p50_s, p95_s = 0, [], 0.0, 0.0
    for _ in range(trials):
        configs = synthetic.sweep(rng, DEFAULT_SWEEP, scenario)
        units = {c.config_id: launches.split_by_launch(c.samples, c.launch_of_steps) for c in configs}
        start = time.perf_counter()
        medians = [launches.config_launches(name, split, resamples) for name, split in units.items()]
        variance = launches.pool_variance(medians, resamples)
        launches.replicates(next(m for m in medians if m.config_id == SLOW), variance)
        p50_s += time.perf_counter() - start
        start = time.perf_counter()
        tail = launches.config_launches(SLOW, units[SLOW], resamples, q=precision.TAIL)
        estimate = uncertainty.estimate(launches.replicates(tail, variance), tail.value)
        p95_s += (time.perf_counter() - start) * len(medians)  # as if every configuration had its p95
        covered += estimate.includes(truth)
        widths.append(estimate.rel_half_width() or 0.0)
    return {"coverage": covered / trials, "half_width": float(np.median(widths)), "cost_ratio": p95_s / p50_s}


def main() -> None:
    args = simulation_options(__doc__, "3%% offsets, 2 launches only")
    rows = []
    print(f"{'offset':>6} {'K':>2}  {'p95 cov':>7} {'half-width':>10} {'p95/p50 cost':>12}")
    for index, scenario in enumerate(scenarios(args.quick)):
        found = check(scenario, args.trials, args.resamples, seed=index)
        print(f"{scenario.launch_offset:>6.0%} {scenario.launches:>2}  {found['coverage']:>7.1%} "
              f"{found['half_width']:>10.1%} {found['cost_ratio']:>11.2f}x", flush=True)
        name = f"p95, {scenario.launch_offset:.0%} launch offset, {scenario.launches} launches of {STEPS} steps"
        rows.append(row(f"{name}: coverage", f"{found['coverage']:.1%}", f">= {GOAL:.0%}", found["coverage"] >= GOAL))
        rows.append(row(f"{name}: cost beside the p50's intervals", f"{found['cost_ratio']:.2f}x"))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
