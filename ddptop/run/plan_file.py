"""A plan in TOML (``--plan FILE``): its keys are the options' (``ddptop.run.options``), checked for their types."""

from __future__ import annotations

import tomllib
from argparse import ArgumentTypeError
from typing import Any

from ddptop.errors import PlanError
from ddptop.run.options import OPTIONS_BY_NAME, toml_types


TUNE_KEYS = ("variants", "keep_slower")  # what a plan file's [tune] table may set (the rest is the plan's)


def read_plan_file(path: str) -> dict[str, Any]:
    """Read a TOML plan into option values; keys as PlanOptions (a string is accepted for a one-item list)."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise PlanError(f"plan file {path} does not exist") from None
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan file {path} is not valid TOML: {exc}") from None
    if isinstance(raw.get("plan"), dict) and len(raw) == 1:
        raw = raw["plan"]
    if isinstance(raw.get("tune"), dict):  # a [tune] table: ddptop tune's plan, with its own keys
        table = raw.pop("tune")
        wrong = [key for key in table if key.replace("-", "_") not in TUNE_KEYS]
        if wrong:
            raise PlanError(f"plan file {path}: unknown key {wrong[0]!r} in [tune] (known: {', '.join(TUNE_KEYS)})")
        raw = {**raw, **table, "tune": True}
    known = toml_types()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key_name = key.replace("-", "_")
        expected = known.get(key_name)
        if expected is None:
            raise PlanError(f"plan file {path}: unknown key {key!r} (known: {', '.join(known)})")
        if expected[0] is list:
            item_type = expected[1]
            accepted = (float, int) if item_type is float else (item_type,)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                value = [value]
            if not isinstance(value, list) or not all(
                isinstance(v, accepted) and not isinstance(v, bool) for v in value
            ):
                raise PlanError(f"plan file {path}: {key} must be a list of {item_type.__name__}")
            if item_type is float:
                value = [float(v) for v in value]
        elif not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise PlanError(f"plan file {path}: {key} must be {' or '.join(t.__name__ for t in expected)}")
        elif OPTIONS_BY_NAME[key_name].parse is not None and isinstance(value, str):  # "auto" or a count
            try:
                value = OPTIONS_BY_NAME[key_name].parse(value)
            except ArgumentTypeError as exc:
                raise PlanError(f"plan file {path}: {key}: {exc}") from None
        values[key_name] = value
    return values
