"""How often the gradient noise scale's 95% interval holds the true B_noise, over simulated data-parallel runs of
a problem whose noise scale is known exactly (``ddptop.analysis.synthetic.gradient_problem``: a least-squares
fit's per-example gradients over a fixed dataset), at several ranks, local batches and lengths; and what the
estimate costs a summary.

    python benchmarks/noise_coverage.py [--trials 300] [--resamples 1000] [--quick]
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddptop.analysis import noise_scale, synthetic  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=300)
    parser.add_argument("--resamples", type=int, default=1000)
    parser.add_argument("--quick", action="store_true", help="one shape, 100 trials")
    args = parser.parse_args()
    problem = synthetic.gradient_problem()
    shapes = [(2, 16, 200)] if args.quick else list(itertools.product((2, 4, 8), (4, 32), (100, 400)))
    trials = 100 if args.quick else args.trials
    print(f"true B_noise {problem.b_noise:.1f} (tr(Sigma) {problem.trace:.3g}, |G|^2 {problem.true_sq:.3g})")
    for ranks, batch, syncs in shapes:
        rng = np.random.default_rng(ranks * 1000 + batch * 10 + syncs)
        covered, widths, unresolved, spent = 0, [], 0, 0.0
        for trial in range(trials):
            small, big = synthetic.synchronisations(problem.grads, ranks, batch, syncs, rng)
            started = time.perf_counter()
            found = noise_scale.estimate(small, big, batch, batch * ranks, resamples=args.resamples, seed=trial)
            spent += time.perf_counter() - started
            assert found is not None
            low, high = found.b_noise.interval() or (np.nan, np.nan)
            covered += low <= problem.b_noise <= high
            unresolved += not found.resolved
            if found.resolved:
                widths.append((high - low) / 2 / found.b_noise.value)
        half = f"{100 * float(np.median(widths)):.0f}%" if widths else "-"
        print(f"N={ranks} local batch {batch:>2} ({batch * ranks:>3} global), {syncs} syncs: covered "
              f"{100 * covered / trials:.1f}% of {trials}, median half-width {half}, not resolved "
              f"{unresolved}, {1e3 * spent / trials:.1f} ms an estimate")
    return 0


if __name__ == "__main__":
    sys.exit(main())
