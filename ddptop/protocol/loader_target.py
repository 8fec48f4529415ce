"""How ``ddptop tune -- train.py`` names the training loader a try is set on, written by the analysis
(``analysis.script_tries``) and read by the script probe (``bench_kernels.script_loaders``): the line that made
it, "train.py:40" (every loader made there), or its line and its settings as the script gave them,
"train.py:40#num_workers=0,pin_memory=False,persistent_workers=False", where another loader made at that line
has other settings. Standard library only (the probe imports it inside torchrun workers)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

SETTINGS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor")  # as the probe records a loader's
MATCHED = SETTINGS[:3]  # those a target names a loader by (as given to its call: prefetch_factor's default differs)
SEPARATOR = "#"


def settings_words(settings: Mapping[str, Any]) -> str:
    """The part of a target that names a loader by its settings: "num_workers=0,pin_memory=False,..."."""
    return ",".join(f"{name}={settings.get(name)}" for name in MATCHED)


def target(line: str, settings: Mapping[str, Any] | None = None) -> str:
    """The target of the loaders made at ``line``, those given ``settings`` alone where named."""
    return line if settings is None else f"{line}{SEPARATOR}{settings_words(settings)}"


def line_of(site: str) -> str:
    """A target's line (a site without a target's settings is its own line)."""
    return site.split(SEPARATOR, 1)[0]


def targets(chosen: str, made_at: str, given: Callable[[], Mapping[str, Any]]) -> bool:
    """Whether the loader made at ``made_at`` with the settings ``given()`` (its call's, defaults applied) is the
    ``chosen`` target: its line, and where the target names them, those settings."""
    line, _, settings = chosen.partition(SEPARATOR)
    return line == made_at and (not settings or settings == settings_words(given()))
