"""Typed JSON records: a JSON object with typed fields (``Record``), read and written back as read, and the
one record of a figure with its uncertainty (``Estimate``) that every figure of the summary uses. The
summary's records (``ddptop.report.schema``) and the analysis's own (a trace's breakdown) are declared with
it, so that a record the analysis makes is the one the summary holds. Standard library only.

``Estimate`` is ddptop's one estimate type: the analysis makes its intervals as estimates
(``analysis/figures.estimate``) and puts them under the figures' keys (a script's data wait and step less
wait, the stragglers' evidence, FLOP/s and MFU, the GPUs' idle share, the tune and strategy rows, the core
budget and the CPU against the GPUs, the projection beyond the node, the launch spread), and a record takes
one made in code as it is. Summaries before schema version 3 held a figure and its interval side by side
(``speedup``, ``speedup_ci``), and some of the analysis' figures still come that way: the scaling and thread
tables' rows and what they carry (``stats.scaling_rows``, ``intervals.add_scaling_intervals``, ``threads``), a
configuration's ``stats`` (``p50_ci``) and ``communication`` (``intervals``), the collectives' bus bandwidth.
A record reads that flat shape into one ``Estimate`` (``_fold_flat``; ``paired`` where the analysis pairs a
figure the stats block holds apart), and every record writes it nested: ``{"value": 1.84, "ci": [1.71, 1.93],
"level": 0.95, "method": "..."}``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar

Interval = list[float]  # [low, high] of a 95% interval, as JSON writes a pair

R = TypeVar("R", bound="Record")

# How an estimate's interval was obtained (``Estimate.method``).
BOOTSTRAP = "block bootstrap within each launch"
OVER_LAUNCHES = "bootstrap over launches"  # two levels: the launch is the unit (``analysis/launches.py``)
MODEL = "model"  # a projection beyond what was measured (``analysis/projection.py``)
MOMENTS = "moment estimate, chi-square interval"  # the launch-to-launch spread (``analysis/launches.py``)
ONE_LAUNCH = "block bootstrap within this launch"  # a launch's own figure: one level, whatever the run's
STUDENT_T = "Student's t over one-second blocks of readings, clamped to [0, 1]"  # a telemetry share (step_bound)
CLAMPED_AT_0 = ", clamped at 0 (the point and each replicate alike)"  # appended to a method: the estimator's floor
CLAMPED_TO_01 = ", clamped to [0, 1] (the point and each replicate alike)"
AS_RECORDED = "as recorded by an older ddptop"  # read from a summary written before the estimate record
DROPPED = "the value lay outside its interval, which was dropped:"


class SchemaError(ValueError):
    """A part of a summary of the wrong shape; the message names where (``configs[2].stats``)."""


@dataclass(kw_only=True)
class Record:
    """A JSON object with typed fields; the keys it does not model, and the order of all, kept as read."""

    _extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    # fields written only when set, even by a record made in code
    _only_when_set: ClassVar[frozenset[str]] = frozenset()
    # per class: (field name, how to read its JSON value, its default) in declaration order
    _readers: ClassVar[dict[type, list[tuple[str, Callable[[Any, str], Any], Any]]]] = {}

    # an estimate's interval key in the flat shape, where it is not ``<field>_ci`` (StepFigures' p50_ci)
    _flat_intervals: ClassVar[dict[str, str]] = {}
    # an estimate whose value the flat shape kept elsewhere in the record: field -> (record field, key)
    _flat_values: ClassVar[dict[str, tuple[str, str]]] = {}
    # how this record's estimates were obtained when the flat shape does not say (``<field>_method``), and
    # where one of its figures was obtained otherwise (a clamped estimator: field -> its method)
    _flat_method: ClassVar[str] = BOOTSTRAP
    _flat_methods: ClassVar[dict[str, str]] = {}

    @classmethod
    def from_json(cls: type[R], data: Any, where: str = "summary") -> R:
        if not isinstance(data, dict):
            raise SchemaError(f"{where} is not a JSON object but {_json_kind(data)}")
        values: dict[str, Any] = {}
        consumed: set[str] = set()
        for name, read, _ in _field_readers(cls):
            if isinstance(data.get(name), Estimate):  # made by the analysis, not yet written
                values[name] = data[name]
            elif name in _estimate_fields(cls) and not isinstance(data.get(name), dict):
                found = _fold_flat(cls, data, name, f"{where}.{name}", consumed)
                if found is not None:
                    values[name] = found
            elif name in data:
                values[name] = read(data[name], f"{where}.{name}")
        known = {name for name, _, _ in _field_readers(cls)} | consumed
        extra = {key: value for key, value in data.items() if key not in known}
        try:
            return cls(**values, _extra=extra, _order=tuple(data))
        except SchemaError as exc:
            raise SchemaError(f"{where}: {exc}") from None

    def to_json(self) -> dict[str, Any]:
        """The JSON object: the keys it was read with in their order, then any field set since (or, for a
        record made in code, every field in declaration order)."""
        fields = {name: default for name, _, default in _field_readers(type(self))}
        out: dict[str, Any] = {}
        for key in self._order:
            if key in fields:
                out[key] = _to_json(getattr(self, key))
            elif key in self._extra:
                out[key] = self._extra[key]
        made_in_code = not self._order
        for name, default in fields.items():
            value = getattr(self, name)
            if name not in out and ((made_in_code and name not in self._only_when_set)
                                    or not _is_default(value, default)):
                out[name] = _to_json(value)
        for key, value in self._extra.items():
            out.setdefault(key, value)
        return out


@dataclass(kw_only=True)
class Estimate(Record):
    """A figure of the summary with its uncertainty: the value, its interval ``[low, high]`` at ``level``
    (0.95), and how both were obtained (``method``). The value always lies inside its interval: the
    constructor refuses one outside. ``ci`` is None for a figure that has no interval (too few steps, or
    one taken as exact such as the reference's speedup of 1 by definition)."""
    value: float = 0.0
    ci: Interval | None = None
    level: float = 0.95
    method: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.value, bool) or not isinstance(self.value, (int, float)):
            raise SchemaError(f"an estimate's value is a number, not {self.value!r}")
        ci = self.ci
        if ci is None:
            return
        if len(ci) != 2 or any(not isinstance(c, (int, float)) for c in ci):
            raise SchemaError(f"an interval is [low, high], not {ci!r}")
        low, high = float(ci[0]), float(ci[1])
        if low != low or high != high:  # NaN: no replicate was finite
            self.ci = None
            return
        if not _inside(self.value, low, high):
            raise SchemaError(f"the value {self.value!r} lies outside its interval [{low!r}, {high!r}]")
        self.ci = [low, high]

    @property
    def dropped(self) -> bool:
        """Whether an interval was dropped for not holding its value (see ``DROPPED``)."""
        return DROPPED in (self.method or "")

    @property
    def low(self) -> float | None:
        return self.ci[0] if self.ci else None

    @property
    def high(self) -> float | None:
        return self.ci[1] if self.ci else None

    def includes(self, x: float) -> bool:
        """Whether the interval holds ``x`` (no interval: nothing can be said, False)."""
        return bool(self.ci) and self.ci[0] <= x <= self.ci[1]  # type: ignore[index]

    def rel_half_width(self) -> float | None:
        """Half the interval's width relative to the value (0.02: +-2%); None without an interval or where the
        value is 0 or not finite."""
        if not self.ci or self.value == 0 or not math.isfinite(self.value):
            return None
        return (self.ci[1] - self.ci[0]) / 2 / abs(self.value)


def _inside(value: float, low: float, high: float) -> bool:
    slack = 1e-9 * max(abs(low), abs(high), 1e-12)  # rounding in a formula applied to the replicates
    return low - slack <= value <= high + slack


def over_launches(method: str | None) -> str | None:
    """A bootstrap's method once the launch is its unit (two levels): the rest of it (a clamp) kept."""
    return OVER_LAUNCHES + method[len(BOOTSTRAP):] if method and method.startswith(BOOTSTRAP) else method


def value_of(found: Estimate | None) -> float | None:
    """An estimate's value, None for none: where a figure is used as a plain number."""
    return None if found is None else found.value


def ci_of(found: Estimate | None) -> Interval | None:
    """An estimate's interval, None for none (or for an estimate without one)."""
    return None if found is None else found.ci


_ESTIMATE_FIELDS: dict[type, frozenset[str]] = {}
_lenient_flat = False  # reading a summary written before the estimate record (``reading_older``)


@contextlib.contextmanager
def reading_older() -> Iterator[None]:
    """Read a summary that an older ddptop wrote: an estimate whose value lay outside its own interval is
    kept without that interval (and says so) instead of refused."""
    global _lenient_flat
    before, _lenient_flat = _lenient_flat, True
    try:
        yield
    finally:
        _lenient_flat = before


def estimates_in(found: Any, path: str = "") -> Iterator[tuple[str, Estimate]]:
    """Every estimate below a record (its lists and dicts too), with its path (``scaling[0].rows[1].speedup``)."""
    if isinstance(found, Estimate):
        yield path, found
    elif isinstance(found, Record):
        for name, _, _ in _field_readers(type(found)):
            yield from estimates_in(getattr(found, name), f"{path}.{name}" if path else name)
    elif isinstance(found, list):
        for i, item in enumerate(found):
            yield from estimates_in(item, f"{path}[{i}]")
    elif isinstance(found, dict):
        for key, item in found.items():
            yield from estimates_in(item, f"{path}.{key}")


def _estimate_fields(cls: type) -> frozenset[str]:
    found = _ESTIMATE_FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = frozenset(spec.name for spec in dataclasses.fields(cls)
                          if not spec.name.startswith("_") and Estimate in _hint_types(hints[spec.name]))
        _ESTIMATE_FIELDS[cls] = found
    return found


def _hint_types(hint: Any) -> tuple[Any, ...]:
    origin = typing.get_origin(hint)
    return typing.get_args(hint) if origin in (typing.Union, types.UnionType) else (hint,)


def _fold_flat(cls: Any, data: dict[str, Any], name: str, where: str, consumed: set[str]) -> Estimate | None:
    """An estimate from the flat shape that analysis writes and summaries before schema version 3 hold: the
    value under its name (or elsewhere, ``_flat_values``), its interval beside it as ``<name>_ci`` and
    its method as ``<name>_method``. Those keys are then this estimate's, not kept as unknown."""
    interval_key = cls._flat_intervals.get(name, f"{name}_ci")
    method_key = f"{name}_method"
    consumed.update((interval_key, method_key))
    if name in cls._flat_values:
        holder, key = cls._flat_values[name]
        value = (data.get(holder) or {}).get(key) if isinstance(data.get(holder), dict) else None
    else:
        value = data.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise SchemaError(f"{where} is not a number but {_json_kind(value)}")
    ci = data.get(interval_key)
    if ci is not None and not isinstance(ci, (list, tuple)):
        raise SchemaError(f"{where}'s interval is not a JSON list but {_json_kind(ci)}")
    levels = data.get("levels", data.get("p50_levels"))  # how the record's own figures were bootstrapped
    default = cls._flat_methods.get(name, cls._flat_method)
    default = over_launches(default) if levels == "launches" else default
    said = data.get(method_key)  # a method written beside the figure is kept, with an interval or without
    try:
        found = paired(value, ci, said or default)
    except SchemaError as exc:
        raise SchemaError(f"{where}: {exc}") from None
    if said and ci is None:
        found.method = said
    return found


def paired(value: float, ci: Interval | tuple[float, float] | None, method: str | None) -> Estimate:
    """The estimate of a figure and an interval that were computed apart (a step time's p50 and its interval
    in a configuration's ``stats``), as ``_fold_flat`` reads them: ``method`` only with an interval."""
    if ci is not None and len(ci) == 2 and all(isinstance(c, (int, float)) for c in ci) \
            and not _inside(float(value), float(ci[0]), float(ci[1])):
        # a value outside its own interval (an older ddptop's launch spread clamped at 0): never shown as if
        # the interval held it, nor a summary lost over it; the record keeps the value and says why it has no
        # interval (``ddptop.report.consistency`` reports it in a summary this ddptop made)
        return Estimate(value=float(value), ci=None, method=f"{AS_RECORDED if _lenient_flat else method}: "
                        f"{DROPPED} [{ci[0]:.4g}, {ci[1]:.4g}]")
    return Estimate(value=float(value), ci=list(ci) if ci is not None else None,
                    method=method if ci is not None else None)


def flat_json(record: Record) -> dict[str, Any]:
    """A record in the flat shape (the inverse of ``_fold_flat``): each estimate as its value under its name,
    ``<name>_ci`` and ``<name>_method`` beside it, as an output that keeps figures side by side writes them
    (``ddptop diff --format json``)."""
    out: dict[str, Any] = {}
    for key, value in record.to_json().items():
        found = getattr(record, key, None)
        if key in _estimate_fields(type(record)) and (found is None or isinstance(found, Estimate)):
            out[key] = None if found is None else found.value
            out[f"{key}_ci"] = None if found is None else found.ci
            out[f"{key}_method"] = None if found is None else found.method
        else:
            out[key] = value
    return out


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _is_default(value: Any, default: Any) -> bool:
    return value is None if default is None else value == default


def _to_json(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_to_json(v) for v in value] if any(isinstance(v, Record) for v in value) else value
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()} if any(isinstance(v, Record) for v in value.values()) \
            else value
    return value


def _field_readers(cls: type) -> list[tuple[str, Callable[[Any, str], Any], Any]]:
    found = Record._readers.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = []
        for spec in dataclasses.fields(cls):
            if spec.name.startswith("_"):
                continue
            default = spec.default if spec.default is not dataclasses.MISSING else (
                spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None)
            found.append((spec.name, _reader(hints[spec.name]), default))
        Record._readers[cls] = found
    return found


def _identity(value: Any, where: str) -> Any:
    return value


def _reader(hint: Any) -> Callable[[Any, str], Any]:
    """How to read one field's JSON value: records become records (in lists and dicts too); a list or an
    object must be one (damage is named, not met later by a reader); numbers and strings are kept as read."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = _reader(options[0]) if len(options) == 1 else _identity
        if inner is _identity:
            return _identity
        return lambda value, where: None if value is None else inner(value, where)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json
    if origin is list:
        (item,) = typing.get_args(hint)
        read = _reader(item)

        def read_list(value: Any, where: str) -> Any:
            if not isinstance(value, (list, tuple)):  # a plan's lists are tuples until written
                raise SchemaError(f"{where} is not a JSON list but {_json_kind(value)}")
            return value if read is _identity else [read(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return read_list
    if origin is dict:
        _, item = typing.get_args(hint)
        read = _reader(item)

        def read_dict(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise SchemaError(f"{where} is not a JSON object but {_json_kind(value)}")
            return value if read is _identity else {k: read(v, f"{where}.{k}") for k, v in value.items()}
        return read_dict
    return _identity
