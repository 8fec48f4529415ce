"""Reading a summary document's figures for the consistency check (``ddptop.report.consistency``): a figure
and its interval of either shape (the flat pair ``X``/``X_ci``, the nested estimate ``{"value", "ci", ...}``),
and what the check reports, a ``Violation``."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ddptop.protocol.modelspec import ModelKind, model_kind

INTERVALS, VERDICTS, NOTHING_TO_JUDGE, TOTALS, COVERAGE = (
    "intervals", "verdicts", "nothing to judge", "totals", "coverage")
REL_TOL = 1e-6  # totals: relative tolerance of a product against its factors
CONTAIN_TOL = 1e-9  # intervals: a figure at an end, computed apart, may differ in the last bits
CHANGE_WORDS = frozenset({"slower", "faster", "equivalent", "within noise"})


@dataclass(frozen=True)
class Violation:
    """One contradiction: where (``scaling[0].rows[2].speedup``), what, and the values that contradict."""

    path: str
    message: str
    values: dict[str, Any] = field(default_factory=dict)
    invariant: str = ""

    def format(self) -> str:
        """One line: the path, the message and the values."""
        values = ", ".join(f"{key}={show(value)}" for key, value in self.values.items())
        return f"{self.path}: {self.message}" + (f" ({values})" if values else "")


def show(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(show(v) for v in value) + "]"
    return repr(value) if isinstance(value, str) else str(value)


# -- reading figures of either shape ------------------------------------------------------------------------


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_estimate(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """The nested shape: ``{"value": v, "ci": [low, high], ...}``."""
    return isinstance(value, Mapping) and "value" in value and "ci" in value


def number_of(value: Any) -> float | None:
    """A figure's number, of either shape; None where there is none (null, NaN, not a number)."""
    if is_estimate(value):
        value = value["value"]
    return float(value) if is_number(value) and not math.isnan(value) else None


def interval_of(ci: Any) -> tuple[float, float] | None:
    """An interval's (low, high); None for no interval (null, or an end null or NaN)."""
    if not isinstance(ci, (list, tuple)) or len(ci) != 2 or not all(is_number(end) for end in ci):
        return None
    low, high = float(ci[0]), float(ci[1])
    return None if math.isnan(low) or math.isnan(high) else (low, high)


def no_interval(ci: Any) -> bool:
    return ci is None or (isinstance(ci, (list, tuple)) and len(ci) == 2
                          and all(end is None or (is_number(end) and math.isnan(end)) for end in ci))


def figure_of(record: Any, name: str) -> tuple[float | None, tuple[float, float] | None]:
    """A record's figure and its interval, of either shape."""
    if not isinstance(record, Mapping):
        return None, None
    value = record.get(name)
    if is_estimate(value):
        return number_of(value), interval_of(value["ci"])
    return number_of(value), interval_of(record.get(f"{name}_ci"))


def at_most(a: float, b: float) -> bool:
    return a <= b or math.isclose(a, b, rel_tol=CONTAIN_TOL, abs_tol=1e-12)


def near(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=REL_TOL, abs_tol=1e-12)


def path_join(path: str, key: str) -> str:
    return f"{path}.{key}" if path else key


def records_of(items: Any) -> Iterable[Mapping[str, Any]]:
    """The objects of a list (anything else in it, or a list that is not one, is none)."""
    return [item if isinstance(item, Mapping) else {} for item in items] if isinstance(items, list) else []


def object_of(record: Any, key: str) -> Mapping[str, Any]:
    """``record[key]`` where it is an object; else an empty one (absent, null, of the wrong shape)."""
    found = record.get(key) if isinstance(record, Mapping) else None
    return found if isinstance(found, Mapping) else {}


def string_of(record: Any, key: str) -> str:
    """``record[key]`` where it is a string; else ""."""
    found = record.get(key) if isinstance(record, Mapping) else None
    return found if isinstance(found, str) else ""


def kind_of_entry(entry: Mapping[str, Any]) -> ModelKind:
    """A configuration document's model kind (``modelspec.model_kind``): what it answers for itself."""
    return model_kind(str(entry.get("model") or ""))
