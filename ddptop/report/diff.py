"""Compare two summaries, like PyTorch's DDP benchmark ``diff.py``, and say which changes beat the noise.

Configurations are matched by id. For each: p50/p75/p95 of sec/iter in A and B and the change in percent,
then whether the change is larger than run-to-run noise: a two-sided Mann-Whitney U test on the raw step
times of both runs, and a bootstrap interval of the change in median. A change counts ("faster"/"slower")
only when the test rejects at ``alpha`` and the interval excludes zero; otherwise it is "within noise".
"""

from __future__ import annotations

import json
from typing import Any

from ddptop import units
from ddptop.analysis import formulas

DIFF_PERCENTILES = ("p50", "p75", "p95")
IGNORED_ENVIRONMENT_KEYS = ("collected", "pid")
IGNORED_PLAN_KEYS = ("name",)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix.rstrip("."): data}


def differing_keys(a: dict[str, Any], b: dict[str, Any], ignored: tuple[str, ...] = ()) -> list[dict[str, Any]]:
    flat_a, flat_b = _flatten(a), _flatten(b)
    rows = []
    for key in sorted(set(flat_a) | set(flat_b)):
        if key.split(".")[0] in ignored:
            continue
        value_a, value_b = flat_a.get(key), flat_b.get(key)
        if value_a != value_b:
            rows.append({"key": key, "a": value_a, "b": value_b})
    return rows


def _pooled(entry: dict[str, Any]) -> list[float]:
    samples = entry.get("samples") or {}
    return [s for rank in sorted(samples, key=int) for s in samples[rank]]


def compare_config(a: dict[str, Any], b: dict[str, Any], alpha: float) -> dict[str, Any]:
    row: dict[str, Any] = {"config_id": a["config_id"], "label": a["label"], "status_a": a["status"],
                           "status_b": b["status"]}
    stats_a, stats_b = a.get("stats"), b.get("stats")
    for p in DIFF_PERCENTILES:
        value_a = stats_a["sec_iter"][p] if stats_a else None
        value_b = stats_b["sec_iter"][p] if stats_b else None
        row[f"{p}_a"], row[f"{p}_b"] = value_a, value_b
        row[f"{p}_change"] = (value_b / value_a - 1) if value_a and value_b is not None else None
    samples_a, samples_b = _pooled(a), _pooled(b)
    row["samples_a"], row["samples_b"] = len(samples_a), len(samples_b)
    test = formulas.mann_whitney(samples_a, samples_b)
    interval = formulas.bootstrap_median_change(samples_a, samples_b)
    row["p_value"] = test["p_value"] if test else None
    row["median_change_interval"] = list(interval) if interval else None
    if test is None or interval is None:
        row["verdict"] = "not comparable"
    elif test["p_value"] < alpha and (interval[0] > 0 or interval[1] < 0):
        row["verdict"] = "slower" if interval[0] > 0 else "faster"
    else:
        row["verdict"] = "within noise"
    return row


def diff_summaries(a: dict[str, Any], b: dict[str, Any], alpha: float = 0.05) -> dict[str, Any]:
    configs_a = {e["config_id"]: e for e in a["configs"]}
    configs_b = {e["config_id"]: e for e in b["configs"]}
    common = [c for c in configs_a if c in configs_b]
    scaling_b = {row["config_id"]: row for t in b["scaling"] for row in t["rows"]}
    scaling = []
    for table in a["scaling"]:
        for row in table["rows"]:
            other = scaling_b.get(row["config_id"])
            if other is not None:
                scaling.append({"config_id": row["config_id"], "label": row["label"],
                                "speedup_a": row["speedup"], "speedup_b": other["speedup"],
                                "efficiency_a": row["efficiency"], "efficiency_b": other["efficiency"]})
    return {
        "a": {"name": a.get("name"), "run_dir": a.get("run_dir"), "created": a.get("created")},
        "b": {"name": b.get("name"), "run_dir": b.get("run_dir"), "created": b.get("created")},
        "alpha": alpha,
        "environment": differing_keys(a.get("environment") or {}, b.get("environment") or {},
                                      IGNORED_ENVIRONMENT_KEYS),
        "plan": differing_keys(a.get("plan") or {}, b.get("plan") or {}, IGNORED_PLAN_KEYS),
        "configs": [compare_config(configs_a[c], configs_b[c], alpha) for c in common],
        "only_a": [c for c in configs_a if c not in configs_b],
        "only_b": [c for c in configs_b if c not in configs_a],
        "scaling": scaling,
    }


def _value(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _change(value: float | None) -> str:
    return units.percent(value, 1, signed=True)


CONFIG_HEADER = ("config", *(f"{p} A" for p in DIFF_PERCENTILES), *(f"{p} B" for p in DIFF_PERCENTILES),
                 *(f"{p} change" for p in DIFF_PERCENTILES), "p-value", "median change 95% CI", "verdict")


def _config_cells(row: dict[str, Any]) -> tuple[str, ...]:
    interval = row["median_change_interval"]
    return (
        row["config_id"],
        *(units.seconds(row[f"{p}_a"]) for p in DIFF_PERCENTILES),
        *(units.seconds(row[f"{p}_b"]) for p in DIFF_PERCENTILES),
        *(_change(row[f"{p}_change"]) for p in DIFF_PERCENTILES),
        units.significant(row["p_value"]),
        "-" if interval is None else f"{_change(interval[0])} .. {_change(interval[1])}",
        row["verdict"] + ("" if row["status_a"] == row["status_b"] == "ok" else f" ({row['status_a']}/{row['status_b']})"),
    )


def diff_text(diff: dict[str, Any], markdown: bool = False) -> str:
    from ddptop.report.tables import aligned, markdown_table

    render = markdown_table if markdown else (lambda h, r: aligned(h, r, first_left=True))
    out = [f"A: {diff['a']['run_dir']} ({diff['a']['name']})", f"B: {diff['b']['run_dir']} ({diff['b']['name']})", ""]
    for section in ("environment", "plan"):
        rows = [(d["key"], _value(d["a"]), _value(d["b"])) for d in diff[section]]
        out.append(f"{section.capitalize()}: " + (f"{len(rows)} keys differ" if rows else "the same"))
        if rows:
            out += render(("key", "A", "B"), rows)
        out.append("")
    out.append(f"Step time, sec/iter (a change counts when Mann-Whitney p < {diff['alpha']:g} "
               "and the bootstrap interval excludes 0)")
    out += render(CONFIG_HEADER, [_config_cells(r) for r in diff["configs"]]) if diff["configs"] else ["  none in common"]
    for side in ("a", "b"):
        only = diff[f"only_{side}"]
        if only:
            out.append(f"Only in {side.upper()}: {', '.join(only)}")
    if diff["scaling"]:
        out += ["", "Scaling"]
        out += render(
            ("config", "speedup A", "speedup B", "efficiency A", "efficiency B"),
            [(r["config_id"], units.number(r["speedup_a"]), units.number(r["speedup_b"]),
              units.percent(r["efficiency_a"]), units.percent(r["efficiency_b"])) for r in diff["scaling"]],
        )
    return "\n".join(out).rstrip() + "\n"
