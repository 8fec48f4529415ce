"""How the two-level intervals do against launch offsets, on synthetic sweeps whose truth is known.

The same simulation the tests use (``ddptop.analysis.synthetic``: the default plan's shape, a plain-model
baseline and DDP at N=1 and N=2, each configuration in K launches with a lognormal offset of its own and
AR(1) steps inside), run over the grid the intervals are meant for: launch offsets of 1%, 3% and 10%, step
noise of 1% and 5%, 2 and 8 ranks, 2 to 4 launches. For each setting: how often the p50 and the N=2 speedup
intervals hold the truth, how often two identical sweeps are called different by ``ddptop diff`` and fail
``--fail-on-regression 5``, and how often a real 10% slowdown is called "slower".

    python benchmarks/launch_variance.py [--trials 200] [--resamples 400] [--quick] [--json rows.json]

``--quick`` runs the default setting alone (3% offsets, 5% noise, 2 ranks, 3 launches).
"""

from __future__ import annotations

import itertools
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import row, simulation_options, write_rows  # noqa: E402
from ddptop.analysis import synthetic  # noqa: E402
from ddptop.analysis.synthetic import Scenario  # noqa: E402

GOALS = {"p50_coverage": 0.92, "speedup_coverage": 0.92, "aa_false_calls": 0.05, "gate_false_fails": 0.02}
STEPS_PER_LAUNCH = {2: 80, 3: 60, 4: 50}  # the default plan's steps split between the launches


def scenarios(quick: bool) -> list[Scenario]:
    if quick:
        return [Scenario(launch_offset=0.03, step_noise=0.05, ranks=2, launches=3, steps=STEPS_PER_LAUNCH[3])]
    grid = itertools.product((0.01, 0.03, 0.10), (0.01, 0.05), (2, 8), (2, 3, 4))
    return [Scenario(launch_offset=offset, step_noise=noise, ranks=ranks, launches=k,
                     steps=STEPS_PER_LAUNCH[k] // (2 if ranks == 8 else 1))
            for offset, noise, ranks, k in grid]


def met(key: str, value: float) -> bool:
    goal = GOALS[key]
    return value >= goal if key.endswith("coverage") else value <= goal


def main() -> None:
    args = simulation_options(__doc__, "the default setting only")
    rows = []
    print(f"{'offset':>6} {'noise':>5} {'ranks':>5} {'K':>2}  {'p50 cov':>7} {'SU cov':>7} {'A/A':>6} "
          f"{'gate':>6} {'power':>6}  seconds")
    for index, scenario in enumerate(scenarios(args.quick)):
        start = time.perf_counter()
        rates = synthetic.check(scenario, args.trials, args.resamples, seed=index).rates()
        print(f"{scenario.launch_offset:>6.0%} {scenario.step_noise:>5.0%} {scenario.ranks:>5} {scenario.launches:>2}  "
              f"{rates['p50_coverage']:>7.1%} {rates['speedup_coverage']:>7.1%} {rates['aa_false_calls']:>6.1%} "
              f"{rates['gate_false_fails']:>6.1%} {rates['power']:>6.1%}  {time.perf_counter() - start:.0f}",
              flush=True)
        name = (f"{scenario.launch_offset:.0%} launch offset, {scenario.step_noise:.0%} step noise, "
                f"{scenario.ranks} ranks, {scenario.launches} launches")
        for key, goal in GOALS.items():
            sign = ">=" if key.endswith("coverage") else "<="
            rows.append(row(f"{name}: {key}", f"{rates[key]:.1%}", f"{sign} {goal:.0%}", met(key, rates[key])))
        power_goal = scenario.launch_offset == 0.03 and scenario.launches >= 3
        rows.append(row(f"{name}: a 10% slowdown called slower", f"{rates['power']:.1%}",
                        ">= 80%" if power_goal else "", rates["power"] >= 0.8 if power_goal else None))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
