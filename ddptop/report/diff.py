"""Compare two summaries, like PyTorch's DDP benchmark ``diff.py``, and say which changes beat the noise.

Configurations are matched by id, a user's script's named as typed (``pairing_key``: two checkouts of one
script pair by its name and arguments, not by their absolute paths). For each: p50/p75/p95 of sec/iter in A and B and the change in percent,
then the ratio B/A of the pooled median step time with its 95% interval, with two levels
(``analysis.launches``): each launch's saved steps block-bootstrapped, and the launch-to-launch variance
pooled over every configuration of both summaries (two runs compare launches, whose offsets no step inside
one can show). A summary whose configurations had one launch each gives within-launch intervals only, and
the comparison says so. A change is called only when the interval lies beyond the
margin: "slower" when its low end is above 1 + min_effect, "faster" when its high end is below
1 - min_effect; "equivalent" when the whole interval lies within the margin; otherwise "within noise".
"""

from __future__ import annotations

import json
from typing import Any

from ddptop import units
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT, NOT_COMPARABLE, SLOWER
from ddptop.report.blocks import aligned, markdown_table
from ddptop.protocol import variants
from ddptop.protocol.modelspec import (SCRIPT_PREFIX, SpecError, display_name, is_script, model_kind, parse_spec,
                                      script_spec_text)
from ddptop.report.schema import ci_of, value_of, Config, PlanRecord, Summary, TuneTable

DIFF_PERCENTILES = ("p50", "p75", "p95")
IGNORED_ENVIRONMENT_KEYS = ("collected", "pid")
IGNORED_PLAN_KEYS = ("name",)


def _flatten(data: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(data, dict):
        flat: dict[str, Any] = {}
        for key, value in data.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    if isinstance(data, tuple):  # a summary built in this process holds tuples where one read from JSON holds lists
        data = list(data)
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


def pairing_key(entry: Config, plan: PlanRecord) -> str:
    """The name a configuration is paired by with the other run's: its id, where a user's script's part is its
    command as typed (``script:train.py ARGS``), so that two checkouts of one script pair and another
    argument is another configuration. The script's part of an id is its file (this ddptop), its spec as typed
    or, from an older ddptop, its absolute path (or a module by its name alone), which is named as typed from
    the plan's command and the folder ddptop started in (``modelspec.script_spec_text``); a kernel's id as it is."""
    model = entry.model
    if not is_script(model):
        return entry.config_id
    head = next((h for h in (model, display_name(model)) if entry.config_id.startswith(h + "/")), None)
    if head is None:
        return entry.config_id
    tail = entry.config_id[len(head):]
    command, folder = plan.script_command()
    try:
        spec = parse_spec(model, cwd="/")
    except SpecError:
        return entry.config_id
    if not command or model[len(SCRIPT_PREFIX):] != spec.target:  # named as typed already
        return model + tail
    return script_spec_text(command, folder or "/") + tail


def _used_units(config: Config) -> dict[str, dict[int, list[float]]]:
    """A configuration's steps split by the launches its figures use."""
    from ddptop.analysis import intervals  # numpy: loaded when summaries are compared

    return intervals.used_units_of(config.samples, [(u.launch, u.used) for u in config.launches],
                                   config.launch_of_steps)


def compare_config(a: Config, b: Config, min_effect: float = DEFAULT_MIN_EFFECT,
                   resamples: int | None = None, variance: Any = None) -> dict[str, Any]:
    """One configuration of A against B. ``variance`` is the launch-to-launch variance pooled over both
    summaries (``comparison_variance``); without it, it is pooled over this configuration's launches alone."""
    from ddptop.analysis import launches, uncertainty  # numpy: loaded when summaries are compared

    row: dict[str, Any] = {"config_id": a.config_id, "label": a.label, "status_a": a.status,
                           "status_b": b.status}
    # a side measured on a disturbed node: the verdict stands, with the reason beside it
    row["disturbed"] = {side: entry.validity.reasons or ["disturbed"]
                        for side, entry in (("a", a), ("b", b)) if entry.validity and entry.validity.disturbed}
    stats_a, stats_b = a.stats, b.stats
    for p in DIFF_PERCENTILES:
        value_a = stats_a.sec_iter.at(p) if stats_a else None
        value_b = stats_b.sec_iter.at(p) if stats_b else None
        row[f"{p}_a"], row[f"{p}_b"] = value_a, value_b
        row[f"{p}_change"] = (value_b / value_a - 1) if value_a and value_b is not None else None
    units_a, units_b = _used_units(a), _used_units(b)
    row["samples_a"] = sum(len(v) for unit in units_a.values() for v in unit.values())
    row["samples_b"] = sum(len(v) for unit in units_b.values() for v in unit.values())
    row["launches_a"], row["launches_b"] = len(units_a), len(units_b)
    row["ratio"] = row["ratio_ci"] = None
    row["min_effect"] = min_effect
    if not row["samples_a"] or not row["samples_b"] or not stats_a or not stats_b:
        row["verdict"] = NOT_COMPARABLE
        return row
    count = resamples or uncertainty.RESAMPLES
    fit_a = launches.config_launches(a.config_id, units_a, count, salt="a/")
    fit_b = launches.config_launches(b.config_id, units_b, count, salt="b/")
    if variance is None:
        variance = launches.pool_variance([fit_a, fit_b], count)
    reps_a, reps_b = launches.replicates(fit_a, variance), launches.replicates(fit_b, variance)
    ratio = uncertainty.step_ratio(reps_a, reps_b, fit_b.value / fit_a.value)
    row["ratio"] = ratio.value
    row["ratio_ci"] = ratio.ci
    row["verdict"] = uncertainty.verdict(ratio, min_effect)
    row["levels"] = "launches" if variance.estimated else "within launch"
    return row


def comparison_variance(a: Summary, b: Summary, resamples: int | None = None) -> Any:
    """The launch-to-launch variance pooled over every configuration of both summaries: the spread of the
    node and the stack, shared by both runs when they ran on the same kind of node."""
    from ddptop.analysis import launches, uncertainty  # numpy: loaded when summaries are compared

    count = resamples or uncertainty.RESAMPLES
    fitted = [launches.config_launches(c.config_id, _used_units(c), count, salt)
              for summary, salt in ((a, "a/"), (b, "b/")) for c in summary.configs if c.stats and c.samples]
    return launches.pool_variance(fitted, count)


def regressions(diff: dict[str, Any], threshold: float = 0.0) -> list[dict[str, Any]]:
    """Configurations slower by more than ``threshold`` (0.05: 5%) beyond noise: the low end of the ratio's
    interval above 1 + threshold (and above the margin: the verdict is "slower")."""
    return [
        {"config_id": r["config_id"], "change": r["ratio"] - 1, "ratio_ci": r["ratio_ci"]}
        for r in diff["configs"]
        if r["verdict"] == SLOWER and r["ratio_ci"] is not None and r["ratio_ci"][0] - 1 > threshold
    ]


def diff_summaries(a: Summary, b: Summary, min_effect: float = DEFAULT_MIN_EFFECT,
                   resamples: int | None = None) -> dict[str, Any]:
    from ddptop.analysis import launches, uncertainty  # numpy: loaded when summaries are compared

    variance = comparison_variance(a, b, resamples)
    keys_a = {e.config_id: pairing_key(e, a.plan) for e in a.configs}
    keys_b = {e.config_id: pairing_key(e, b.plan) for e in b.configs}
    configs_a = {keys_a[e.config_id]: e for e in a.configs}
    configs_b = {keys_b[e.config_id]: e for e in b.configs}
    common = [c for c in configs_a if c in configs_b]
    scaling_b = {keys_b.get(key, key): row for key, row in b.scaling_rows().items()}
    scaling = []
    for table in a.scaling:
        for row in table.rows:
            key = keys_a.get(row.config_id, row.config_id)
            other = scaling_b.get(key)
            if other is not None:
                scaling.append({"config_id": key, "label": row.label,
                                "speedup_a": value_of(row.speedup), "speedup_b": value_of(other.speedup),
                                "efficiency_a": value_of(row.efficiency), "efficiency_b": value_of(other.efficiency),
                                "time_to_loss_speedup_a": value_of(row.time_to_loss_speedup),
                                "time_to_loss_speedup_b": value_of(other.time_to_loss_speedup)})
    diff = {
        "a": {"name": a.name, "run_dir": a.run_dir, "created": a.created},
        "b": {"name": b.name, "run_dir": b.run_dir, "created": b.created},
        "min_effect": min_effect,
        "confidence": uncertainty.CONFIDENCE,
        "method": launches.METHOD if variance.estimated else f"{uncertainty.METHOD}; {launches.WITHIN_ONLY}",
        "environment": differing_keys(a.environment.to_json(), b.environment.to_json(), IGNORED_ENVIRONMENT_KEYS),
        "plan": differing_keys(a.plan.to_json(), b.plan.to_json(), IGNORED_PLAN_KEYS),
        "launch_variance": variance.to_json(),
        "configs": [dict(compare_config(configs_a[c], configs_b[c], min_effect, resamples, variance), config_id=c)
                    for c in common],
        "only_a": [c for c in configs_a if c not in configs_b],
        "only_b": [c for c in configs_b if c not in configs_a],
        "scaling": scaling,
        "gradient_noise": [noise_change(c, configs_a[c], configs_b[c]) for c in common
                           if configs_a[c].gradient_noise is not None or configs_b[c].gradient_noise is not None],
    }
    diff["regressions"] = regressions(diff)
    diff["tuning"] = tuning_changes(a, b)
    return diff


def tuning_changes(a: Summary, b: Summary) -> list[dict[str, Any]]:
    """``ddptop tune``'s answer in both runs, for each model, batch, world size and backend tuned in both:
    each variant's examples/s against its own run's default, with the interval and the verdict, and what
    each run recommends. The ratios are within each run (a variant against the default of the same launches),
    so a node that changed between the runs moves both sides of a ratio alike."""
    def key(table: TuneTable) -> tuple:  # a script's batch is its own: its tries are one table, as in tuning
        return table.model, table.batch_size if model_kind(table.model).own_batch else 0, table.world_size, table.backend

    tables_b = {key(t): t for t in b.tuning}
    changes = []
    for table in a.tuning:
        other = tables_b.get(key(table))
        if other is None:
            continue
        rows_b = {row.variant: row for row in [*other.rows, *other.combination]}
        rows = []
        for row in [*table.rows, *table.combination]:
            theirs = rows_b.get(row.variant)
            if theirs is not None and not variants.as_written(row.variant):
                rows.append({"variant": row.variant, "what": row.what,
                             "speedup_a": value_of(row.speedup), "speedup_ci_a": ci_of(row.speedup), "verdict_a": row.verdict,
                             "speedup_b": value_of(theirs.speedup), "speedup_ci_b": ci_of(theirs.speedup),
                             "verdict_b": theirs.verdict})
        changes.append({"model": table.model, "batch_size": table.batch_size, "world_size": table.world_size,
                        "backend": table.backend, "rows": rows,
                        "recommended_a": list(table.recommended), "recommended_b": list(other.recommended)})
    return changes


def _speedup(value: float | None, interval: Any) -> str:
    return units.with_interval(value, interval, lambda v: units.number(v, 2, "x"))


def _noise(row: dict[str, Any], side: str) -> str:
    value = row[f"b_noise_{side}"]
    return row[f"words_{side}"] if value is None else units.with_interval(value, row[f"b_noise_ci_{side}"],
                                                                          units.significant)


def _value(value: Any) -> str:
    text = json.dumps(value) if not isinstance(value, str) else value
    return text if len(text) <= 40 else text[:37] + "..."


def _change(value: float | None) -> str:
    return units.percent(value, 1, signed=True)


CONFIG_HEADER = ("config", *(f"{p} A" for p in DIFF_PERCENTILES), *(f"{p} B" for p in DIFF_PERCENTILES),
                 *(f"{p} change" for p in DIFF_PERCENTILES), "p50 B/A", "95% CI", "verdict")


def _config_cells(row: dict[str, Any]) -> tuple[str, ...]:
    interval = row["ratio_ci"]
    return (
        row["config_id"],
        *(units.seconds(row[f"{p}_a"]) for p in DIFF_PERCENTILES),
        *(units.seconds(row[f"{p}_b"]) for p in DIFF_PERCENTILES),
        *(_change(row[f"{p}_change"]) for p in DIFF_PERCENTILES),
        "-" if row["ratio"] is None else f"{row['ratio']:.3f}",
        "-" if interval is None else f"{interval[0]:.3f} .. {interval[1]:.3f}",
        row["verdict"] + ("" if row["status_a"] == row["status_b"] == "ok" else f" ({row['status_a']}/{row['status_b']})")
        + "".join(f"; {side.upper()} disturbed: {reasons[0]}" for side, reasons in (row.get("disturbed") or {}).items()),
    )


def _levels_text(variance: dict[str, Any] | None) -> str:
    """What the intervals cover, in words."""
    if not variance or not variance.get("estimated"):
        return ("within-launch only: one launch per configuration, so an offset between the runs' launches "
                "can pose as a change; measure with --launches 2 or more")
    return (f"two levels: each launch's steps block-bootstrapped, and the launch-to-launch spread "
            f"{units.percent(variance['relative_sd'], 1)} pooled over both runs' {variance['configs']} "
            f"configurations, {variance['df']} degrees of freedom")


NOISE_APART = "apart"  # the two 95% intervals do not overlap: a change the data can tell (conservatively)
NOISE_WITHIN = "cannot tell apart"


def noise_change(config_id: str, a: Config, b: Config) -> dict[str, Any]:
    """A configuration's gradient noise scale in both runs: each with its interval (None where not measured or
    not resolved), and whether the intervals are apart. Disjoint 95% intervals differ at well under 5%; the
    test is conservative, and overlapping ones are said not to be told apart rather than to be equal."""
    found: dict[str, Any] = {"config_id": config_id}
    for side, entry in (("a", a), ("b", b)):
        noise = entry.gradient_noise
        estimate = noise.b_noise if noise is not None and noise.resolved else None
        found[f"b_noise_{side}"], found[f"b_noise_ci_{side}"] = value_of(estimate), ci_of(estimate)
        found[f"words_{side}"] = noise.words() if noise is not None else "not measured"
    ci_a, ci_b = found["b_noise_ci_a"], found["b_noise_ci_b"]
    found["verdict"] = (None if not ci_a or not ci_b else
                        NOISE_APART if ci_a[1] < ci_b[0] or ci_b[1] < ci_a[0] else NOISE_WITHIN)
    return found


def diff_text(diff: dict[str, Any], markdown: bool = False) -> str:
    render = markdown_table if markdown else (lambda h, r: aligned(h, r, first_left=True))
    out = [f"A: {diff['a']['run_dir']} ({diff['a']['name']})", f"B: {diff['b']['run_dir']} ({diff['b']['name']})", ""]
    for section in ("environment", "plan"):
        rows = [(d["key"], _value(d["a"]), _value(d["b"])) for d in diff[section]]
        out.append(f"{section.capitalize()}: " + (f"{len(rows)} keys differ" if rows else "the same"))
        if rows:
            out += render(("key", "A", "B"), rows)
        out.append("")
    margin = diff["min_effect"]
    out.append(f"Step time, sec/iter; B/A = ratio of the pooled medians with its {diff['confidence']:.0%} interval "
               f"({_levels_text(diff.get('launch_variance'))}). A change is called when the interval lies beyond "
               f"{1 - margin:.3g}..{1 + margin:.3g}; inside it: equivalent")
    out += render(CONFIG_HEADER, [_config_cells(r) for r in diff["configs"]]) if diff["configs"] else ["  none in common"]
    for side in ("a", "b"):
        only = diff[f"only_{side}"]
        if only:
            out.append(f"Only in {side.upper()}: {', '.join(only)}")
    slower = diff["regressions"]
    out.append("Regressions: " + (", ".join(f"{r['config_id']} ({_change(r['change'])})" for r in slower)
                                  if slower else "none beyond the noise"))
    if diff["scaling"]:
        out += ["", "Scaling"]
        to_loss = any(r.get("time_to_loss_speedup_a") is not None or r.get("time_to_loss_speedup_b") is not None
                      for r in diff["scaling"])
        out += render(
            ("config", "speedup A", "speedup B", "efficiency A", "efficiency B")
            + (("to-loss speedup A", "to-loss speedup B") if to_loss else ()),
            [(r["config_id"], units.number(r["speedup_a"]), units.number(r["speedup_b"]),
              units.percent(r["efficiency_a"]), units.percent(r["efficiency_b"]))
             + ((units.number(r.get("time_to_loss_speedup_a")), units.number(r.get("time_to_loss_speedup_b")))
                if to_loss else ()) for r in diff["scaling"]],
        )
    if diff.get("gradient_noise"):
        out += ["", "Gradient noise scale B_noise (examples, 95% interval); apart: the intervals do not overlap"]
        out += render(("config", "A", "B", "change"),
                      [(r["config_id"], _noise(r, "a"), _noise(r, "b"), r["verdict"] or "-")
                       for r in diff["gradient_noise"]])
    for table in diff.get("tuning") or []:
        kind = model_kind(table["model"])
        batch = f"batch {table['batch_size']} per rank" if kind.own_batch else "its own batch"
        out += ["", f"Tuning: {table['model']}, {batch} at N={table['world_size']} ({table['backend']}); each "
                    f"variant's examples/s against {kind.as_written} in its own run"]
        out += render(("variant", "A vs default", "verdict A", "B vs default", "verdict B"),
                      [(r["what"], _speedup(r["speedup_a"], r["speedup_ci_a"]), r["verdict_a"],
                        _speedup(r["speedup_b"], r["speedup_ci_b"]), r["verdict_b"]) for r in table["rows"]])
        for side in ("a", "b"):
            chosen = table[f"recommended_{side}"]
            out.append(f"Recommended in {side.upper()}: " + (", ".join(chosen) if chosen else
                                                             "nothing beats the default beyond noise"))
    return "\n".join(out).rstrip() + "\n"
