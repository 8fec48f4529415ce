"""The launch-to-launch spread as the summary holds it, declared where it is estimated (``launches``) and read
without numpy: the summary's schema names it, and the live view loads the schema before any statistics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from ddptop.records import MOMENTS, Estimate, Record


@dataclass(kw_only=True)
class LaunchSpread(Record):
    """The launch-to-launch variance as the summary holds it (``LaunchVariance.record``): whether it could be
    estimated, one launch offset's typical size with its interval, and the moments behind it."""
    estimated: bool = False
    relative_sd: Estimate | None = None
    tau2: float | None = None
    df: int | None = None
    configs: int | None = None
    launches: int | None = None
    between_ss: float | None = None
    within_share: float | None = None
    method: str | None = None

    _flat_method: ClassVar[str] = MOMENTS
