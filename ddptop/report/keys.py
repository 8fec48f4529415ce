"""Summary keys that were renamed, so that summaries saved by earlier versions still render and diff.

The renderers ask for the current name only; ``value`` falls back to the name a summary of schema version 1
used. Keep old names here and nowhere else.
"""

from __future__ import annotations

from typing import Any, Mapping

# current name -> the name earlier summaries used for the same figure
RENAMED = {
    "comm_estimate_from_t1_s": "seed002_comm_estimate_s",  # scaling row
    "bandwidth_from_t1_gbs": "seed002_bandwidth_gbs",  # scaling row
    "grad_bytes_per_epoch": "seed004_bytes_per_epoch",  # scaling row's epoch
    "grad_values_per_epoch": "seed004_parameters_per_epoch",  # scaling row's epoch
}


def value(data: Mapping[str, Any] | None, key: str) -> Any:
    """``data[key]``, or the same figure under its earlier name; None when neither is there."""
    if not data:
        return None
    if key in data:
        return data[key]
    old = RENAMED.get(key)
    return data.get(old) if old else None
