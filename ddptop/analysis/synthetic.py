"""Synthetic sweeps whose truth is known, for checking the intervals (tests/ and benchmarks/ share them).

A sweep here is what ddptop measures: configurations, each in several launches, each launch a set of ranks
stepping in lockstep. Step times are AR(1) around the configuration's true median, ranks sharing most of
their noise (DDP keeps them in step), and every launch carries a lognormal offset of its own that no step
inside it can reveal (cuDNN's picks, NCCL's rings, clocks, placement).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ddptop.analysis import launches, uncertainty
from ddptop.records import Estimate


def ar1(rng: np.random.Generator, n: int, phi: float, ranks: int = 1, shared: float = 0.7) -> np.ndarray:
    """(ranks, n) standard-normal AR(1) series; ``shared`` of each rank's variance is common to all ranks."""
    burn = 50
    noise = rng.standard_normal((ranks + 1, n + burn))
    scale = math.sqrt(1 - phi * phi)
    # the recursion on Python floats, a row at a time: the same operations in the same order as on numpy's
    # columns (so the same values to the bit), without a numpy call per step on arrays of a few elements
    rows = []
    for innovations in noise.tolist():
        level = innovations[0]
        row = [level]
        for e in innovations[1:]:
            level = phi * level + scale * e
            row.append(level)
        rows.append(row)
    x = np.array(rows)[:, burn:]
    return math.sqrt(shared) * x[0] + math.sqrt(1 - shared) * x[1:]


@dataclass(frozen=True)
class Scenario:
    launch_offset: float = 0.03  # standard deviation of a launch's log offset (0.03: about 3%)
    step_noise: float = 0.05  # relative standard deviation of a step around its launch's level
    ranks: int = 2
    launches: int = 3  # per configuration (ddptop's default)
    steps: int = 100  # measured steps per rank in each launch
    phi: float = 0.5  # the steps' lag-1 autocorrelation


@dataclass
class SyntheticConfig:
    config_id: str
    truth: float  # the true median step time, without any launch's offset
    samples: dict[int, list[float]]  # rank -> steps of every launch, launch after launch
    launch_of_steps: dict[int, list[str]]  # rank -> the launch of each step


def measure(rng: np.random.Generator, config_id: str, truth: float, scenario: Scenario) -> SyntheticConfig:
    """One configuration measured in ``scenario.launches`` launches."""
    samples: dict[int, list[float]] = {r: [] for r in range(scenario.ranks)}
    labels: dict[int, list[str]] = {r: [] for r in range(scenario.ranks)}
    for j in range(scenario.launches):
        level = truth * math.exp(scenario.launch_offset * rng.standard_normal())
        z = ar1(rng, scenario.steps, scenario.phi, scenario.ranks)
        for r in range(scenario.ranks):
            samples[r] += list(level * (1 + scenario.step_noise * z[r]))
            labels[r] += [f"{config_id}/launch-{j}"] * scenario.steps
    return SyntheticConfig(config_id, truth, samples, labels)


def sweep(rng: np.random.Generator, truths: dict[str, float], scenario: Scenario) -> list[SyntheticConfig]:
    """Every configuration of a sweep, each in its own launches."""
    return [measure(rng, config_id, truth, scenario) for config_id, truth in truths.items()]


# the default plan's shape: a plain-model baseline and DDP at N=1, DDP at N=2 (truths in seconds)
DEFAULT_SWEEP = {"no ddp": 0.100, "ddp n1": 0.105, "ddp n2": 0.130}


@dataclass
class Checked:
    """How the intervals did over many synthetic sweeps of one scenario."""

    trials: int = 0
    p50_covered: int = 0  # the slowest configuration's p50 interval held its true median
    speedup_covered: int = 0  # the N=2 speedup's interval held the true speedup
    aa_calls: int = 0  # two sweeps of one truth: a change was called for the slowest configuration
    gate_fails: int = 0  # ... and --fail-on-regression 5 would have failed
    slower_called: int = 0  # a real slowdown of ``effect`` called "slower"
    widths: list[float] = field(default_factory=list)  # the p50 interval's relative half-widths

    def rates(self) -> dict[str, float]:
        n = max(1, self.trials)
        return {"p50_coverage": self.p50_covered / n, "speedup_coverage": self.speedup_covered / n,
                "aa_false_calls": self.aa_calls / n, "gate_false_fails": self.gate_fails / n,
                "power": self.slower_called / n,
                "median_half_width": float(np.median(self.widths)) if self.widths else math.nan}


def check(scenario: Scenario, trials: int, resamples: int = 400, seed: int = 0, effect: float = 0.10,
          two_levels: bool = True, min_effect: float = 0.02, gate: float = 0.05) -> Checked:
    """Run ``trials`` synthetic sweeps of the default plan's shape through ddptop's own intervals, as the
    summary (a sweep's variance pooled over its configurations) and ``ddptop diff`` (pooled over both
    sweeps) build them. ``two_levels`` False: every launch's steps pooled as if one launch (within-launch
    intervals, what ddptop did before the launch became the unit)."""
    rng = np.random.default_rng(seed)
    slow_id = "ddp n2"
    truth_speedup = 2 * DEFAULT_SWEEP["ddp n1"] / DEFAULT_SWEEP[slow_id]
    slower = {k: v * (1 + effect if k == slow_id else 1) for k, v in DEFAULT_SWEEP.items()}
    result = Checked()

    def fit(configs: list[SyntheticConfig], salt: str) -> dict[str, launches.ConfigLaunches]:
        return {c.config_id: launches.config_launches(
            c.config_id, launches.split_by_launch(c.samples, c.launch_of_steps if two_levels else None),
            resamples, salt) for c in configs}

    def ratio(a: dict[str, launches.ConfigLaunches], b: dict[str, launches.ConfigLaunches]) -> Estimate:
        variance = launches.pool_variance([*a.values(), *b.values()], resamples)
        reps_a, reps_b = launches.replicates(a[slow_id], variance), launches.replicates(b[slow_id], variance)
        return uncertainty.propagate(lambda x, y: y / x, reps_a, reps_b, value=b[slow_id].value / a[slow_id].value)

    for _ in range(trials):
        a = fit(sweep(rng, DEFAULT_SWEEP, scenario), "a/")
        b = fit(sweep(rng, DEFAULT_SWEEP, scenario), "b/")
        c = fit(sweep(rng, slower, scenario), "c/")
        variance = launches.pool_variance(list(a.values()), resamples)
        reps = {k: launches.replicates(v, variance) for k, v in a.items()}
        p50 = uncertainty.estimate(reps[slow_id], a[slow_id].value)
        speedup = uncertainty.propagate(lambda t1, t2: 2 * t1 / t2, reps["ddp n1"], reps[slow_id],
                                        value=2 * a["ddp n1"].value / a[slow_id].value)
        same, changed = ratio(a, b), ratio(a, c)
        result.trials += 1
        result.p50_covered += p50.includes(DEFAULT_SWEEP[slow_id])
        result.speedup_covered += speedup.includes(truth_speedup)
        result.aa_calls += uncertainty.verdict(same, min_effect) in (uncertainty.SLOWER, uncertainty.FASTER)
        result.gate_fails += uncertainty.verdict(same, min_effect) == uncertainty.SLOWER and (same.low or 1) - 1 > gate
        result.slower_called += uncertainty.verdict(changed, min_effect) == uncertainty.SLOWER
        result.widths.append(p50.rel_half_width() or 0.0)
    return result


# -- the gradient noise scale with a known answer --------------------------------------------------------------


@dataclass(frozen=True)
class GradientProblem:
    """Per-example gradients of a least-squares fit at fixed parameters away from its optimum, (x.w - y) x over a
    fixed dataset: tr(Sigma) and |G|^2, and so the true noise scale, computed over every example."""

    grads: np.ndarray  # (examples, features)
    trace: float
    true_sq: float
    x: np.ndarray  # the dataset, (examples, features) and (examples,), and the parameters the gradients are at
    y: np.ndarray
    w: np.ndarray

    @property
    def b_noise(self) -> float:
        return self.trace / self.true_sq


def gradient_problem(seed: int = 0, examples: int = 4000, features: int = 16, noise: float = 2.0,
                     offset: float = 0.3) -> GradientProblem:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(examples, features))
    y = x @ rng.normal(size=features) + rng.normal(scale=noise, size=examples)
    w = rng.normal(scale=offset, size=features)
    grads = (x @ w - y)[:, None] * x
    mean = grads.mean(axis=0)
    return GradientProblem(grads, float(np.mean(np.sum((grads - mean) ** 2, axis=1))), float(mean @ mean), x, y, w)


def synchronisations(grads: np.ndarray, ranks: int, batch: int, steps: int, rng: np.random.Generator
                     ) -> tuple[np.ndarray, np.ndarray]:
    """What DDP holds at each of ``steps`` synchronisations, each rank's ``batch`` drawn independently from the
    dataset: the mean over the ranks of each local gradient's squared norm, and the averaged gradient's."""
    picks = rng.integers(0, len(grads), size=(steps, ranks, batch))
    local = grads[picks].mean(axis=2)  # (steps, ranks, features)
    return np.mean(np.sum(local ** 2, axis=2), axis=1), np.sum(local.mean(axis=1) ** 2, axis=1)
