"""Summaries without their confidence intervals: what a version 1 summary or the live view (which does not
bootstrap) holds, to compare with a saved version 2 summary."""

INTERVAL_KEYS = ("uncertainty", "p50_precision")


def without_intervals(value):
    if isinstance(value, dict) and set(value) == {"value", "ci", "level", "method"}:  # an estimate record
        return {**value, "ci": None, "method": None}
    if isinstance(value, dict):
        return {k: without_intervals(v) for k, v in value.items() if not k.endswith("_ci") and k not in INTERVAL_KEYS}
    if isinstance(value, list):
        return [without_intervals(v) for v in value]
    return value


ESTIMATE_KEYS = {"value", "ci", "level", "method"}
IN_PERCENTILES = ("p50", "ex_sec_total_p50", "ex_sec_replica_p50", "tok_sec_total_p50")  # stats' medians


def flat_shape(found):
    """A summary document with each estimate record as analysis writes it (and summaries before version 3 held
    it): the value under its name and its interval beside it as ``<name>_ci`` (a median's value is in the
    percentiles already, its interval ``p50_ci``, ``ex_sec_total_p50_ci``...)."""
    if isinstance(found, list):
        return [flat_shape(item) for item in found]
    if not isinstance(found, dict):
        return found
    out = {}
    for key, value in found.items():
        if isinstance(value, dict) and set(value) == ESTIMATE_KEYS:
            if key in IN_PERCENTILES and "sec_iter" in found:
                out["p50_ci" if key == "p50" else f"{key}_ci"] = value["ci"]
            else:
                out[key], out[f"{key}_ci"] = value["value"], value["ci"]
        else:
            out[key] = flat_shape(value)
    return out
