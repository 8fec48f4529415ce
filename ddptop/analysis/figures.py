"""A figure and its interval from one computation: ``derive`` applies a formula to the points and to their
bootstrap replicates together, so that a figure's value and its 95% interval cannot be written apart.

A ``Measured`` is a point and its replicates (replicate i of every input comes from the same resample of the
steps, so a formula of several inputs applied replicate by replicate keeps their dependence). A figure made of
measured ones is ``derive(formula, *inputs)``: the formula once over the points, once over the replicates, a
new ``Measured`` that later figures derive from in turn (speedup from the step times, efficiency from the
speedup). ``Measured.estimate`` makes the summary's record of it (``records.Estimate``, the one estimate type of
ddptop): the replicates' percentile interval, widened to hold its value (``estimate``).
The formulas themselves are ``formulas``'s, written once for numbers and numpy arrays alike.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ddptop.records import BOOTSTRAP, Estimate, paired

CONFIDENCE = 0.95


@dataclass(frozen=True)
class Measured:
    """A figure's point and its replicates (None: too few steps to resample, or an input without them)."""
    value: float
    replicates: Any = None  # a numpy array; numpy is imported only where there are replicates (not by the view)

    def interval(self) -> list[float] | None:
        """The 95% percentile interval of the replicates, widened to hold the value; None without replicates
        or where none of them is finite."""
        return self.estimate().ci

    def estimate(self, method: str = BOOTSTRAP) -> Estimate:
        """The summary's record of it: the value, its interval and how both were obtained (``method``, unset
        without an interval)."""
        if self.replicates is None:
            return Estimate(value=self.value)
        return estimate(self.replicates, self.value, method=method)


def estimate(replicates: Any, value: float, confidence: float = CONFIDENCE, method: str = BOOTSTRAP) -> Estimate:
    """Percentile interval of ``replicates`` at ``confidence``, reported with the point ``value``: the summary's
    record of a figure (``records.Estimate``), its interval widened to hold the value; without one where no
    replicate is finite (nor where the value is not a number), ``method`` then unset.

    Percentile rather than basic or BCa: it maps through monotone functions (a ratio's interval is the
    interval of the ratio), stays inside the possible values, and BCa's acceleration needs a jackknife that
    blocks and rounds make costly; the small-sample expansion is already in the replicates.
    """
    import numpy as np

    reps = np.asarray(replicates, dtype=float)
    reps = reps[np.isfinite(reps)]
    if len(reps) == 0 or value != value:
        return Estimate(value=float(value))
    tail = (1 - confidence) / 2
    low, high = np.quantile(reps, [tail, 1 - tail])
    return Estimate(value=float(value), ci=[float(min(low, value)), float(max(high, value))], method=method)


def derive(formula: Callable[..., Any], *inputs: Measured | float, value: float | None = None) -> Measured:
    """``formula`` applied to the inputs' points and, where every measured input has replicates, to them
    together: one computation for the figure and its interval. Plain numbers are constants of the formula.
    ``value``: the figure's point where it was computed before (``uncertainty.propagate``); the formula then
    gives its replicates only."""
    if value is None:
        value = formula(*(i.value if isinstance(i, Measured) else i for i in inputs))
    measured = [i for i in inputs if isinstance(i, Measured)]
    if not measured or any(i.replicates is None for i in measured):
        return Measured(value, None)
    import numpy as np

    with np.errstate(divide="ignore", invalid="ignore"):
        replicates = formula(*(np.asarray(i.replicates, dtype=float) if isinstance(i, Measured) else i
                               for i in inputs))
    return Measured(value, np.asarray(replicates, dtype=float))


def put(row: dict[str, Any], key: str, figure: Measured | None) -> None:
    """A figure into a scaling or thread table's row in the flat shape that those rows still have: its value
    under ``key`` and its interval beside it under ``key_ci`` (read into one ``Estimate`` with the summary,
    ``records._fold_flat``); None for neither. Every other figure goes in as its ``Measured.estimate``."""
    row[key] = None if figure is None else figure.value
    row[f"{key}_ci"] = None if figure is None else figure.interval()


def paired_figure(value: float | None, ci: list[float] | None, method: str = BOOTSTRAP) -> Estimate | None:
    """A figure and its interval that a configuration's ``stats`` block holds apart (its p50 and ``p50_ci``) as
    one estimate, as the summary reads them (``records.paired``); None without a value."""
    return None if value is None else paired(value, ci, method)
