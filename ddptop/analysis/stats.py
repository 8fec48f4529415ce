"""Percentiles and scaling arithmetic. Pure functions on plain numbers; no I/O.

Definitions (also in docs/measurement.md):
- Percentiles pool every rank's measured step times (as PyTorch's DDP benchmark does), linear interpolation
  between order statistics (numpy's default). ex/sec at a percentile is ``batch / sec_iter`` at that
  percentile: per replica with the per-rank batch, aggregate with the global batch.
- Throughput X(N) = global batch / sec_iter(N). Speedup against the reference run (the smallest N measured,
  normally N=1) is S(N) = N_ref * X(N) / X(N_ref). For weak scaling (fixed per-rank batch b) this is
  N * t_ref / t(N) when N_ref = 1; for strong scaling (fixed global batch B) it is t_ref / t(N).
- Efficiency E = S / N. Relative cost (GPU-only, the N/s of "Benchmarking Parallel Programs") = N / S.
- Relative SU (that article's service units, SU = (w_core * cores + w_gpu * gpus) * walltime) compares the
  charge for the same amount of work: rate(N) * (t(N) / global batch(N)) over the same for the reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ddptop.records import Estimate, Record

PERCENTILES: tuple[int, ...] = (50, 75, 90, 95, 99)
STRAGGLER_RATIO = 1.05  # a rank whose median step is 5% slower than the ranks' median is marked


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    position = (len(sorted_values) - 1) * q / 100.0
    low = math.floor(position)
    high = min(low + 1, len(sorted_values) - 1)
    fraction = position - low
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * fraction


def median(values: Sequence[float]) -> float:
    return percentile(sorted(values), 50)


class SampleSet:
    """Step times arriving in batches, kept sorted and with running moments for cheap repeated summaries.

    A live view asks for percentiles several times a second while samples stream in: sorting everything
    each time is O(n log n) per look. Here new values wait until a look; then each batch is sorted alone
    and Timsort merges the sorted runs in linear time. Mean and variance are combined per batch (Chan,
    Golub and LeVeque) from exactly rounded sums (``math.fsum``), at the same moment.
    """

    def __init__(self, values: Sequence[float] = ()) -> None:
        self._ordered: list[float] = []
        self._pending: list[list[float]] = [list(values)] if len(values) else []
        self._mean = 0.0
        self._m2 = 0.0  # sum of squared deviations from the mean

    def __len__(self) -> int:
        return len(self._ordered) + sum(len(batch) for batch in self._pending)

    @property
    def n(self) -> int:
        return len(self)

    def extend_sorted(self, values: list[float]) -> None:
        """Add values already in ascending order (not copied: the caller must not change them)."""
        if values:
            self._pending.append(values)

    def _absorb(self) -> None:
        if not self._pending:
            return
        seen = len(self._ordered)
        for batch in self._pending:
            k = len(batch)
            batch_mean = math.fsum(batch) / k
            # deviations from the batch's own mean: sum(x^2) - k*mean^2 cancels catastrophically when the
            # steps are nearly equal (three steps of 0.7 s gave a spread of 1e-8 s instead of 0)
            batch_m2 = math.fsum((x - batch_mean) * (x - batch_mean) for x in batch)
            delta = batch_mean - self._mean
            total = seen + k
            self._mean += delta * k / total
            self._m2 += batch_m2 + delta * delta * seen * k / total
            seen = total
            batch.sort()  # sorted input stays as it is: one pass to see it
            self._ordered += batch
        self._ordered.sort()  # ascending runs: merged in linear time per run
        self._pending = []

    def ordered(self) -> list[float]:
        """Every value, ascending (the list is the set's own: do not change it)."""
        self._absorb()
        return self._ordered

    @property
    def mean(self) -> float:
        self._absorb()
        return self._mean

    def std(self) -> float:
        self._absorb()
        return math.sqrt(self._m2 / (len(self._ordered) - 1)) if len(self._ordered) > 1 else 0.0

    def exact_moments(self) -> tuple[float, float]:
        """Mean and standard deviation by two passes over the sorted values: the same bits whatever order
        the batches came in (a report rebuilt from the files equals the one saved live). O(n)."""
        ordered = self.ordered()
        mean = sum(ordered) / len(ordered)
        variance = sum((v - mean) ** 2 for v in ordered) / (len(ordered) - 1) if len(ordered) > 1 else 0.0
        return mean, math.sqrt(variance)

    def median(self) -> float:
        return percentile(self.ordered(), 50)


def sample_summary(
    samples: Sequence[float] | SampleSet, batch_per_replica: int, world_size: int, exact: bool = True
) -> dict:
    """Pooled percentiles of sec/iter with the matching per-replica and aggregate ex/sec.

    Percentiles are always exact. ``exact=False`` takes mean and std from the running moments (a live
    view's many looks); they differ from the two-pass figures in the last bits only.
    """
    values = samples if isinstance(samples, SampleSet) else SampleSet(samples)
    ordered = values.ordered()
    sec_iter = {f"p{q}": percentile(ordered, q) for q in PERCENTILES}
    mean, std = values.exact_moments() if exact else (values.mean, values.std())
    return {
        "n": values.n,
        "mean": mean,
        "std": std,
        "min": ordered[0],
        "max": ordered[-1],
        "sec_iter": sec_iter,
        "ex_sec_replica": {k: _rate(batch_per_replica, v) for k, v in sec_iter.items()},
        "ex_sec_total": {k: _rate(batch_per_replica * world_size, v) for k, v in sec_iter.items()},
    }


def _rate(examples: float, seconds: float) -> float | None:
    return examples / seconds if seconds > 0 else None


def rank_medians(samples_by_rank: Mapping[int, Sequence[float] | SampleSet]) -> dict[int, float]:
    return {
        rank: samples.median() if isinstance(samples, SampleSet) else median(samples)
        for rank, samples in sorted(samples_by_rank.items())
        if len(samples)
    }


def straggler(medians: Mapping[int, float]) -> dict | None:
    """The slowest rank by median step time and how much slower it is than the other ranks' median (the
    summary's ratio sets it against the others' pooled steps: with two ranks the two are one figure, where the
    median of every rank's, itself included, would sit halfway)."""
    if len(medians) < 2:
        return None
    slow_rank = max(medians, key=lambda r: medians[r])
    typical = median([value for rank, value in medians.items() if rank != slow_rank])
    ratio = medians[slow_rank] / typical if typical > 0 else math.inf
    return {"rank": slow_rank, "ratio": ratio, "flagged": ratio >= STRAGGLER_RATIO}


@dataclass(kw_only=True)
class RankSpread(Record):
    """The slowest rank's median against the others' (a straggler flag from the step times alone, ``straggler``):
    the live view's figure so far, and the summary's with its interval."""
    rank: int | None = None
    ratio: Estimate | None = None
    flagged: bool | None = None


@dataclass(frozen=True)
class ScalingPoint:
    world_size: int
    sec_iter: float  # the representative step time (p50)
    global_batch: int
    cores: float  # CPU cores the run occupied, for SU
    gpus: int
    replicates: Any = None  # the step time's bootstrap replicates (numpy), for every figure's interval


@dataclass(frozen=True)
class ScalingRows:
    """A scaling table's rows; each world size's speedup with its replicates (Amdahl's fit takes them) and
    Karp-Flatt's serial fraction (``figures.Measured``; None at the reference, or from a reference above one)."""
    rows: list[dict]
    speedups: dict[int, Any]
    karp_flatt: dict[int, Any]

def scaling_rows(points: Sequence[ScalingPoint], core_weight: float = 1.0, gpu_weight: float = 2.0) -> ScalingRows:
    """Speedup, efficiency, relative cost, relative SU and Karp-Flatt of each point against the smallest world
    size, each from one computation of its formula (``formulas``) over the point and, where every point has
    them, its replicates (``figures.derive``): value and 95% interval together.

    A point of unknown batch (0: a script whose examples were not counted) has no examples/s, and then no
    figure of the table counts work: speedup and the rest are None (step times alone cannot say how much
    work a step did)."""
    from ddptop.analysis import formulas
    from ddptop.analysis.figures import Measured, derive, put

    if not points:
        return ScalingRows([], {}, {})
    ordered = sorted(points, key=lambda p: p.world_size)
    with_intervals = all(p.replicates is not None for p in ordered)
    times = {p.world_size: Measured(p.sec_iter, p.replicates if with_intervals else None) for p in ordered}
    ref = ordered[0]
    counted = not any(p.global_batch <= 0 or p.sec_iter <= 0 for p in ordered)
    rows, speedups, karp_flatt = [], {}, {}
    if counted:
        ref_throughput = derive(formulas.throughput, ref.global_batch, times[ref.world_size])
        ref_charge = derive(formulas.service_units_per_example, ref.cores, ref.gpus, core_weight, gpu_weight,
                            times[ref.world_size], ref.global_batch)
    for point in ordered:
        n, t = point.world_size, times[point.world_size]
        row: dict[str, Any] = {"world_size": n}
        put(row, "sec_iter", t)
        throughput = derive(formulas.throughput, point.global_batch, t) \
            if point.global_batch > 0 and point.sec_iter > 0 else None
        put(row, "ex_sec_total", throughput)
        if counted and throughput is not None:
            speedup = derive(formulas.speedup, ref.world_size, throughput, ref_throughput)
            speedups[n] = speedup
            charge = derive(formulas.service_units_per_example, point.cores, point.gpus, core_weight, gpu_weight, t,
                            point.global_batch)
            put(row, "speedup", speedup)
            put(row, "efficiency", derive(formulas.efficiency, speedup, n))
            put(row, "relative_cost", derive(formulas.relative_cost, n, speedup))
            put(row, "relative_su", derive(formulas.ratio, charge, ref_charge) if ref_charge.value > 0 else None)
            # Karp-Flatt's serial fraction is one rank's: against a reference of one, beyond it
            karp_flatt[n] = (derive(formulas.karp_flatt_of, speedup, n)
                             if ref.world_size == 1 and n > 1 and speedup.value > 0 else None)
        else:
            for key in ("speedup", "efficiency", "relative_cost", "relative_su"):
                put(row, key, None)
        row["reference_world_size"] = ref.world_size
        if not with_intervals:  # no interval to give: the rows keep the flat shape's figures alone
            row = {k: v for k, v in row.items() if not k.endswith("_ci")}
        rows.append(row)
    return ScalingRows(rows, speedups, karp_flatt)


EFFICIENCY_THRESHOLD = 0.7
PLATEAU_GAIN = 0.10  # past the plateau, no larger N is 10% faster than it


def plateau(rows: Sequence[dict], gain: float = PLATEAU_GAIN) -> dict | None:
    """The smallest N (below the largest) that no larger N beats by ``gain``; None if speedup keeps growing."""
    ordered = sorted(rows, key=lambda r: r["world_size"])
    for position, row in enumerate(ordered[:-1]):
        best_after = max(r["speedup"] for r in ordered[position + 1 :])
        if best_after < row["speedup"] * (1 + gain):
            return row
    return None


def _interval(row: dict, key: str) -> tuple[float, float]:
    """A row's figure as (low, high): its 95% interval when it has one, else the figure twice."""
    ci = row.get(f"{key}_ci")
    return (ci[0], ci[1]) if ci else (row[key], row[key])


def _efficiency_side(row: dict, threshold: float) -> str:
    low, high = _interval(row, "efficiency")
    return "above" if low >= threshold else "below" if high < threshold else "unclear"


def _efficiency_text(row: dict) -> str:
    ci = row.get("efficiency_ci")
    return f"{row['efficiency']:.0%}" + (f", 95% CI {100 * ci[0]:.0f}–{ci[1]:.0%}" if ci else "")


def recommendation(rows: Sequence[dict], unit: str = "GPUs", threshold: float = EFFICIENCY_THRESHOLD,
                   symbol: str = "N") -> str:
    """Where adding devices stops paying, in plain words, from one scaling table's rows.

    With intervals (``efficiency_ci``, ``speedup_ci``) no sentence claims more than they allow: an
    efficiency whose interval includes the threshold is "within noise", and a plateau or a peak is said
    only when the intervals separate it. ``symbol`` names what the rows' ``world_size`` counts: N ranks, or
    t threads in a thread table.
    """
    if len(rows) < 2:
        return f"Only one {'world size' if symbol == 'N' else 'thread count'} was measured: nothing to compare."
    if any(r.get("speedup") is None for r in rows):
        return ("Examples per step unknown (not counted), so examples/s, speedup and efficiency are unknown: "
                "the step times alone cannot say how much work a step did.")
    ordered = sorted(rows, key=lambda r: r["world_size"])
    sides = [_efficiency_side(r, threshold) for r in ordered]
    largest = ordered[-1]
    words = []
    good = 0  # rows from the first whose efficiency is clearly at or above the threshold
    while good < len(ordered) and sides[good] == "above":
        good += 1
    if good <= 1:
        second = ordered[1]
        if sides[1] == "below":
            words.append(
                f"Efficiency falls below {threshold:.0%} already at {symbol}={second['world_size']} "
                f"({_efficiency_text(second)}): scaling out does not pay here; use {symbol}={ordered[0]['world_size']}."
            )
        else:
            words.append(
                f"At {symbol}={second['world_size']} efficiency is {_efficiency_text(second)}: whether it is below "
                f"{threshold:.0%} is within noise; measure longer (a smaller --precision) to decide."
            )
    elif good == len(ordered):
        words.append(
            f"Efficiency stays at or above {threshold:.0%} up to the largest {symbol} measured "
            f"({largest['world_size']}, {_efficiency_text(largest)}): adding {unit} still pays."
        )
    else:
        best, after = ordered[good - 1], ordered[good]
        if sides[good] == "below":
            words.append(
                f"Efficiency drops below {threshold:.0%} beyond {symbol}={best['world_size']} "
                f"({_efficiency_text(after)} at {symbol}={after['world_size']}): request {best['world_size']} {unit}."
            )
        else:
            words.append(
                f"Efficiency stays at or above {threshold:.0%} up to {symbol}={best['world_size']}; at "
                f"{symbol}={after['world_size']} it is {_efficiency_text(after)}, within noise of {threshold:.0%}: "
                f"request {best['world_size']} {unit}, or measure longer to decide on {after['world_size']}."
            )
    flat = plateau(ordered)
    if flat is not None and flat is not ordered[0]:  # a plateau from the start is said by the first sentence
        later = [r for r in ordered if r["world_size"] > flat["world_size"]]
        best_after = max(r["speedup"] for r in later)
        clear = max(_interval(r, "speedup")[1] for r in later) < _interval(flat, "speedup")[0] * (1 + PLATEAU_GAIN)
        if clear:
            words.append(
                f"Beyond {symbol}={flat['world_size']} speedup grows less than {PLATEAU_GAIN:.0%} "
                f"({flat['speedup']:.2f} to at most {best_after:.2f}): don't ask for more than "
                f"{flat['world_size']} {unit}."
            )
        else:
            words.append(
                f"Whether speedup still grows by {PLATEAU_GAIN:.0%} beyond {symbol}={flat['world_size']} "
                f"({flat['speedup']:.2f} to at most {best_after:.2f}) is within noise."
            )
    peak = max(ordered, key=lambda r: r["speedup"])
    if peak["speedup"] > largest["speedup"] * 1.02 and _interval(peak, "speedup")[0] > _interval(largest, "speedup")[1]:
        words.append(f"Speedup peaks at {symbol}={peak['world_size']} ({peak['speedup']:.2f}); more {unit} are slower.")
    return " ".join(words)
