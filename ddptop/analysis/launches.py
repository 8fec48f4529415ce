"""Intervals with two levels: the launch is the unit of replication, the step the unit within it.

A torchrun launch carries an offset that no step inside it can show (cuDNN's algorithm picks, NCCL's rings,
clocks, where the OS put the ranks). Speedup, efficiency and every diff compare configurations measured in
different launches, so an interval built from one launch's steps alone is too narrow for them. The model,
on the log scale where a launch offset is relative:

    log m[c, j] = mu[c] + u[c, j] + e[c, j]

``m[c, j]`` is the pooled median step time of configuration ``c`` in its launch ``j``; ``u`` the launch
offset, independent across launches with one variance ``tau^2`` for the whole sweep (a property of the node
and the stack, shared by every configuration: with 2-3 launches per configuration a per-configuration
estimate would have 1-2 degrees of freedom); ``e`` the within-launch sampling error of that median, whose
variance ``s^2[c, j]`` the circular block bootstrap gives (``uncertainty.median_replicates``).

- **tau^2** is estimated by the method of moments of a one-way random-effects model (DerSimonian and Laird's
  estimator with the within-launch variances known), pooled over every configuration with two or more
  launches: ``tau^2 = max(0, (SS - W) / df)`` with ``SS`` the sum over configurations of the squared
  deviations of ``log m[c, j]`` from their configuration's mean, ``W = sum_c (K_c - 1)/K_c sum_j s^2[c, j]``
  its expected share from the within-launch error, and ``df = sum_c (K_c - 1)``.
- **Its uncertainty** is carried by drawing, once per replicate and shared by every configuration, the
  between-launch mean square from its scaled inverse chi-square distribution (``SS / chi^2_df``): with few
  degrees of freedom the draws have a heavy tail, as a t interval's would. The within share is not taken off
  the draws (it errs wide where launches are as quiet as the steps inside them).
- **A configuration's replicate** ``r`` is ``mean_j log m[c, j] + mean_j d[c, j, r] + sqrt(tau^2_r / K_c) z[c, r]``:
  ``d`` the launch's own bootstrap replicates as log deviations from its median (so each launch keeps its
  block structure and small-sample expansion), ``z`` standard normal. Speedup, efficiency and the ratios of
  a diff are then the formula applied to these replicates, as before (``uncertainty.propagate``).

Assumptions: offsets are lognormal and independent between launches (interleaving the world sizes' launches
keeps slow drift of the machine from posing as scaling); their relative size is the same for every
configuration of the sweep; configurations measured inside one launch are treated as independent, which is
conservative for a comparison between them. With one launch for every configuration ``tau^2`` cannot be
estimated: the intervals are then within-launch only and say so (``LaunchVariance.estimated`` is false).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ddptop.analysis import uncertainty
from ddptop.analysis.launch_spread import LaunchSpread
from ddptop.records import Estimate, flat_json

METHOD = (
    "two levels: launch offsets pooled over the sweep's configurations (one-way random-effects model on the "
    "log median, method-of-moments variance with its chi-square uncertainty), each launch's steps resampled "
    "by the circular block bootstrap"
)
WITHIN_ONLY = "within-launch only: one launch per configuration, so the launch-to-launch spread is not in it"
VARIANCE_SEED = 0x1A0C4  # the shared draws of tau^2: the same for every configuration of a summary


def _seed(name: str) -> int:
    return zlib.crc32(name.encode())


def _robust_variance(deviations: np.ndarray) -> float:
    """Variance of bootstrap log deviations read from their central 95% (a normal's), not from their
    moments: a few wild replicates of a short launch should not set the whole sweep's tau^2."""
    finite = deviations[np.isfinite(deviations)]
    if len(finite) < 2:
        return 0.0
    low, high = np.quantile(finite, [0.025, 0.975])
    return float(((high - low) / (2 * 1.959963984540054)) ** 2)


@dataclass
class LaunchSteps:
    """One launch's share of a configuration: its steps by rank, its pooled median and bootstrap deviations."""

    name: str
    samples: dict[int, list[float]]
    median: float
    deviations: np.ndarray  # log(replicate / median)

    @property
    def variance(self) -> float:
        return _robust_variance(self.deviations)

    @property
    def steps(self) -> int:
        return sum(len(v) for v in self.samples.values())


@dataclass
class ConfigLaunches:
    """A configuration's steps split by the launch that measured them."""

    config_id: str
    value: float  # the pooled median over the launches used (the p50 the tables show)
    units: list[LaunchSteps]
    salt: str = ""  # seeds this configuration's draws apart from another run's of the same id

    @property
    def count(self) -> int:
        return len(self.units)

    def log_medians(self) -> np.ndarray:
        return np.log([u.median for u in self.units])

    @property
    def centre(self) -> float:
        """The launches' medians averaged on the log scale, each launch weighing the same: the random-effects
        model's estimate, where the replicates are centred (a pooled median of two launches far apart can
        sit at the edge of either)."""
        return float(np.exp(self.log_medians().mean()))


def split_by_launch(samples_by_rank: Mapping[int, Sequence[float]],
                    launch_of_steps: Mapping[int, Sequence[str]] | None) -> dict[str, dict[int, list[float]]]:
    """``{launch: {rank: steps}}`` in the order the launches first appear; one unnamed launch without labels."""
    units: dict[str, dict[int, list[float]]] = {}
    for rank, values in samples_by_rank.items():
        labels = launch_of_steps.get(rank) if launch_of_steps is not None else None
        if labels is None or len(labels) != len(values):
            labels = [""] * len(values)
        for label, value in zip(labels, values):
            units.setdefault(label, {}).setdefault(int(rank), []).append(float(value))
    return units


def config_launches(config_id: str, units: Mapping[str, Mapping[int, Sequence[float]]],
                    resamples: int = uncertainty.RESAMPLES, salt: str = "", q: float = 0.5) -> ConfigLaunches:
    """Each launch's median and within-launch bootstrap, seeded by the configuration and the launch (and
    ``salt``: the two sides of a comparison must not share their random draws); of the ``q`` quantile where
    given (the p95's replicates take the launch offsets the medians' pooled variance gives: an offset scales a
    launch's steps alike)."""
    fitted = []
    pooled: list[float] = []
    for name, given in units.items():
        samples = {r: list(v) for r, v in given.items() if len(v)}
        if not samples:
            continue
        seed = _seed(f"{salt}{config_id}/{name}" + (f"/q{q:g}" if q != 0.5 else ""))
        reps = uncertainty.median_replicates(samples, resamples=resamples, seed=seed, q=q)
        median = uncertainty.pooled_median(samples, q)
        with np.errstate(divide="ignore", invalid="ignore"):
            deviations = np.log(reps / median) if median > 0 else np.zeros(resamples)
        fitted.append(LaunchSteps(name, samples, median, deviations))
        pooled += [v for values in samples.values() for v in values]
    if not fitted:
        raise ValueError("no step times")
    return ConfigLaunches(config_id, uncertainty.quantile(pooled, q), fitted, salt)


@dataclass
class LaunchVariance:
    """The launch-to-launch variance of the log median, pooled over configurations."""

    between_ss: float = 0.0  # SS: squared deviations of launch log-medians from their configuration's mean
    within_share: float = 0.0  # W: SS's expected part from the within-launch error alone
    df: int = 0  # sum over configurations of (launches - 1)
    configs: int = 0  # configurations that had two launches or more
    launches: int = 0  # their launches
    resamples: int = uncertainty.RESAMPLES
    _draws: np.ndarray | None = field(default=None, repr=False)

    @property
    def estimated(self) -> bool:
        return self.df > 0

    @property
    def tau2(self) -> float | None:
        """The point estimate of tau^2 (None without two launches of any configuration)."""
        if not self.estimated:
            return None
        return max(0.0, (self.between_ss - self.within_share) / self.df)

    @property
    def relative_sd(self) -> float | None:
        """exp(tau) - 1: one launch offset's typical size as a fraction of the step time (0.03: 3%)."""
        tau2 = self.tau2
        return None if tau2 is None else math.expm1(math.sqrt(tau2))

    @cached_property
    def tau2_draws(self) -> np.ndarray:
        """tau^2 replicates, shared by every configuration (zeros when it cannot be estimated)."""
        if not self.estimated:
            return np.zeros(self.resamples)
        rng = np.random.default_rng(VARIANCE_SEED)
        chi2 = rng.chisquare(self.df, self.resamples)
        # The within-launch share is not taken off the draws: the bootstrap's own widening makes it an
        # overestimate, and taking it off left p50 intervals at 91-92% coverage with two launches (the
        # launch level then carries some within-launch noise twice, which errs wide).
        return self.between_ss / np.maximum(chi2, 1e-12)

    def relative_sd_interval(self) -> list[float] | None:
        """95% interval of exp(tau) - 1 by the point estimate's own method: the moment estimator
        ``max(0, (SS - W) / df)`` with SS drawn from its scaled chi-square distribution, so that the point
        (the draw at chi^2 = df) lies inside it, clamped at 0 as the point is (the low end is often 0 with
        few df). The configurations' replicates keep ``tau2_draws``, which err wide (see there)."""
        if not self.estimated:
            return None
        moments = np.maximum(self.tau2_draws - self.within_share / self.df, 0.0)
        return uncertainty.estimate(np.expm1(np.sqrt(moments)), self.relative_sd or 0.0).ci

    def relative_sd_method(self) -> str:
        """How the spread and its interval were obtained, and whether the estimate was clamped at 0."""
        clamped = self.estimated and self.between_ss <= self.within_share
        return ("moment estimate with a chi-square interval"
                + (", clamped at 0: the launches' medians differ no more than their steps' noise explains"
                   if clamped else ""))

    def record(self) -> LaunchSpread:
        """The summary's record of it (``uncertainty.launch_variance``)."""
        interval = self.relative_sd_interval()
        spread = (Estimate(value=self.relative_sd or 0.0, ci=interval,
                           method=self.relative_sd_method() if interval else None)
                  if self.relative_sd is not None else None)
        return LaunchSpread(estimated=self.estimated, relative_sd=spread, tau2=self.tau2, df=self.df,
                            configs=self.configs, launches=self.launches, between_ss=self.between_ss,
                            within_share=self.within_share, method=METHOD if self.estimated else WITHIN_ONLY)

    def to_json(self) -> dict[str, Any]:
        """Its record in the flat shape, each figure beside its interval (``records.flat_json``): an output that
        keeps figures side by side (``ddptop diff --format json``); the summary holds ``record()``."""
        return flat_json(self.record())


def pool_variance(configs: Sequence[ConfigLaunches], resamples: int = uncertainty.RESAMPLES) -> LaunchVariance:
    """tau^2's moment estimate from every configuration with two launches or more (see the module)."""
    pooled = LaunchVariance(resamples=resamples)
    for config in configs:
        k = config.count
        if k < 2:
            continue
        y = config.log_medians()
        pooled.between_ss += float(np.sum((y - y.mean()) ** 2))
        pooled.within_share += (k - 1) / k * sum(unit.variance for unit in config.units)
        pooled.df += k - 1
        pooled.configs += 1
        pooled.launches += k
    return pooled


def replicates(config: ConfigLaunches, variance: LaunchVariance) -> np.ndarray:
    """Replicates of the configuration's pooled median with both levels (see the module)."""
    k = config.count
    resamples = variance.resamples
    within = np.zeros(resamples)
    for unit in config.units:
        deviations = unit.deviations[:resamples]
        within += np.where(np.isfinite(deviations), deviations, 0.0) / k
    z = np.random.default_rng(_seed(f"{config.salt}{config.config_id}/launch-offset")).standard_normal(resamples)
    offsets = np.sqrt(variance.tau2_draws / k) * z
    return config.centre * np.exp(within + offsets)


def estimates(configs: Sequence[ConfigLaunches], variance: LaunchVariance | None = None,
              ) -> tuple[LaunchVariance, dict[str, np.ndarray]]:
    """The pooled variance (computed from ``configs`` unless given) and every configuration's replicates."""
    variance = variance if variance is not None else pool_variance(configs)
    return variance, {c.config_id: replicates(c, variance) for c in configs}
