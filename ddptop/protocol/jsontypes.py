"""Whether a JSON value is of a dataclass field's type: a damaged file's value of the wrong type is refused
where it is read, not met later as a TypeError deep in a table. Standard library only."""

from __future__ import annotations

import enum
import functools
import math
import types
import typing
from typing import Any, Union


@functools.cache
def hints(cls: type) -> dict[str, Any]:
    """A dataclass's field types, resolved (the modules use ``from __future__ import annotations``)."""
    return typing.get_type_hints(cls)


def fits(value: Any, hint: Any) -> bool:
    """``value`` (as ``json.load`` gives it: lists for tuples, string keys) is of type ``hint``. Types this
    check does not know pass: it refuses what is surely wrong, it does not prove what is right."""
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (Union, types.UnionType):
        return any(fits(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
    if hint is str:
        return isinstance(value, str)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return any(value == member.value for member in hint)
    if origin in (tuple, list):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return isinstance(value, (list, tuple)) and all(fits(v, args[0]) for v in value) if args else True
    if origin is dict:
        key_type, value_type = typing.get_args(hint)
        return isinstance(value, dict) and all(
            (fits(k, key_type) or (key_type is int and isinstance(k, str) and k.lstrip("-").isdigit()))
            and fits(v, value_type)
            for k, v in value.items()
        )
    return True


def wrong_fields(cls: type, data: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """The fields of ``data`` whose values are not of ``cls``'s types, as ``name=value`` for one line."""
    found = hints(cls)
    return [f"{name}={data[name]!r}"[:80] for name in found
            if name in data and name not in skip and not fits(data[name], found[name])]
