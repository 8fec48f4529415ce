"""What every doctor check gives back: a status, one line saying why, and the figures behind that line."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)
SHOWN = 3  # mismatches named in a check's line; doctor.json keeps them all


@dataclass
class Check:
    name: str
    status: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)  # the figures behind the line, for doctor.json


def listed(items: list[str]) -> str:
    """The first few of ``items`` for a check's line, and how many more there are."""
    shown = "; ".join(items[:SHOWN])
    return shown + (f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else "")
