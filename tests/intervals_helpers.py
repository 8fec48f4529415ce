"""Summaries without their confidence intervals: what a version 1 summary or the live view (which does not
bootstrap) holds, to compare with a saved version 2 summary."""

INTERVAL_KEYS = ("uncertainty", "p50_precision")


def without_intervals(value):
    if isinstance(value, dict):
        return {k: without_intervals(v) for k, v in value.items() if not k.endswith("_ci") and k not in INTERVAL_KEYS}
    if isinstance(value, list):
        return [without_intervals(v) for v in value]
    return value
