"""Whether a summary contradicts itself: ``check(document)`` lists every place where it does.

It reads the JSON document (``summary.json`` as a dict, ``Summary.to_json()``), not the typed records, so it
reads summaries of every version, and either shape of a figure with its interval: the flat pair
(``speedup`` beside ``speedup_ci: [low, high]``) and the nested estimate (``{"value": v, "ci": [low, high],
"level": 0.95, "method": ...}`` in the figure's place). What is checked (docs/summary-schema.md, "Invariants"):

1. **intervals**: every figure lies inside its 95% interval, and every interval has low <= high; no estimate
   of a summary this ddptop made had its interval dropped for not holding its value, and a median's estimate
   (``stats.p50``) is the percentile beside it (``stats.sec_iter.p50``). A null or NaN
   interval is no interval; infinite ends are fine where the figure lies between them. An ``X_ci`` whose
   figure cannot be found (no ``X`` beside it, nor one of the named special places) is reported.
2. **verdicts**: the words match their figures. A script's step less its data wait said "within X% of" its
   reference needs the ratio's interval inside [1 - X, 1 + X], "grown"/"grew" needs it above 1, "fell"/"shrank"
   below 1; a change's word (slower, faster, equivalent, within noise) is the one its interval gives; a
   verdict's kind (communication-bound, compute-bound, host-bound, input-bound, waiting on the other ranks)
   is one its figures allow; a straggler flagged clears its threshold beyond noise; a scaling table's
   recommendation says of efficiency only what the efficiencies' intervals allow; a best split, a "worth it".
3. **nothing to judge**: a scaling table of ranks that each train alone (not data-parallel, "no scaling to
   judge") has no Amdahl fit nor projection; one of a single world size has no Amdahl fit.
4. **totals**: examples/s over all ranks is the per-rank figure times the ranks (a script's: times its
   global batch over its batch per rank) at every percentile and at the p50's interval, and is the global
   batch over the step; a global batch is the batch per rank times the ranks (a benchmark's configuration, a
   batch sweep's row).
5. **coverage**: every configuration measured has a row, or a note naming it, in each table that lists
   configurations of its kind: the scaling tables (DDP as written and each strategy), the tuning tables (a
   variant), DataParallel against DDP, the load table and the validity judgement (where the run had
   telemetry), the script's data-wait table, and, where the report writes them, the compute vs
   communication table and the compute (FLOP/s) table.

``ddptop.report.store`` runs it on every summary it saves when ``DDPTOP_CHECK_SUMMARIES=1`` (the test suite
sets it), and raises ``InconsistentSummary`` listing every violation.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ddptop.analysis import step_bound
from ddptop.protocol.modelspec import with_batch
from ddptop.records import AS_RECORDED, DROPPED
from ddptop.report.consistency_figures import (COVERAGE, INTERVALS, NOTHING_TO_JUDGE, TOTALS, VERDICTS, Violation,
                                               at_most, interval_of, is_estimate, is_number, kind_of_entry, near,
                                               no_interval, number_of, object_of, path_join, records_of, string_of)
from ddptop.report.consistency_verdicts import verdicts

__all__ = ["check", "Violation", "InconsistentSummary", "INTERVALS", "VERDICTS", "NOTHING_TO_JUDGE", "TOTALS",
           "COVERAGE"]


class InconsistentSummary(RuntimeError):
    """A summary that contradicts itself (``DDPTOP_CHECK_SUMMARIES=1``): a fault in ddptop, not the user's."""

    def __init__(self, where: str, violations: list[Violation]) -> None:
        self.violations = violations
        lines = "\n".join(f"  {v.format()}" for v in violations)
        super().__init__(f"{where} contradicts itself in {len(violations)} place(s):\n{lines}")


def check(summary: Mapping[str, Any]) -> list[Violation]:
    """Every contradiction in a summary document, in the order of the invariants above."""
    found: list[Violation] = []
    _walk_intervals(summary, "", found)
    verdicts(summary, found)
    _nothing_to_judge(summary, found)
    _totals(summary, found)
    _coverage(summary, found)
    return found


# -- 1. every figure inside its interval --------------------------------------------------------------------


# a median's estimate beside its percentiles (the value twice: stats.p50 and stats.sec_iter.p50)
MEDIANS = {"p50": "sec_iter", "ex_sec_total_p50": "ex_sec_total", "ex_sec_replica_p50": "ex_sec_replica",
           "tok_sec_total_p50": "tok_sec_total"}


def _walk_intervals(node: Any, path: str, found: list[Violation]) -> None:
    if isinstance(node, Mapping):
        if is_estimate(node):
            _inside(node["value"], node["ci"], path, path_join(path, "ci"), found)
            _not_dropped(node, path, found)
        for name, percentiles in MEDIANS.items():
            if is_estimate(node.get(name)) and isinstance(node.get(percentiles), Mapping):
                value, shown = number_of(node[name]), number_of(node[percentiles].get("p50"))
                if value is not None and shown is not None and not near(value, shown):
                    found.append(Violation(path_join(path, name), f"median differs from {percentiles}.p50",
                                           {"value": value, "p50": shown}, INTERVALS))
        if {"median", "low", "high"} <= set(node) and all(is_number(node[k]) for k in ("median", "low", "high")):
            _inside(node["median"], [node["low"], node["high"]], path_join(path, "median"), path, found)
        for key, value in node.items():
            if isinstance(key, str) and key.endswith("_ci") and len(key) > 3:
                _pair(node, key, path, found)
            if isinstance(value, (Mapping, list)):
                _walk_intervals(value, path_join(path, str(key)), found)
    elif isinstance(node, list):
        for index, item in enumerate(node):
            if isinstance(item, (Mapping, list)):
                _walk_intervals(item, f"{path}[{index}]", found)


def _pair(node: Mapping[str, Any], key: str, path: str, found: list[Violation]) -> None:
    """``X_ci`` and its figure: ``X`` beside it; the step statistics' ``p50_ci`` is ``sec_iter.p50``'s and their
    ``Y_p50_ci`` is ``Y.p50``'s (``ex_sec_total_p50_ci``, ``ex_sec_replica_p50_ci``, ``tok_sec_total_p50_ci``)."""
    name, ci = key[:-3], node[key]
    if name in node:
        where, value = path_join(path, name), node[name]
    elif name == "p50" and isinstance(node.get("sec_iter"), Mapping):
        where, value = path_join(path, "sec_iter.p50"), node["sec_iter"].get("p50")
    elif name.endswith("_p50") and isinstance(node.get(name[:-4]), Mapping):
        where, value = path_join(path, f"{name[:-4]}.p50"), node[name[:-4]].get("p50")
    else:
        found.append(Violation(path_join(path, key), f"an interval with no figure it belongs to (no {name!r} beside "
                               "it)", {"ci": ci}, INTERVALS))
        return
    _inside(value, ci, where, path_join(path, key), found)


def _not_dropped(estimate: Mapping[str, Any], path: str, found: list[Violation]) -> None:
    """An estimate whose interval was dropped for not holding its value: a summary of an older ddptop may hold
    one (said so in its method); one this ddptop made is a figure and an interval from two methods."""
    method = estimate.get("method")
    if isinstance(method, str) and DROPPED in method and not method.startswith(AS_RECORDED):
        found.append(Violation(path, "its value lay outside its interval, which was dropped",
                               {"value": estimate.get("value"), "method": method}, INTERVALS))


def _inside(value: Any, ci: Any, where: str, ci_where: str, found: list[Violation]) -> None:
    if no_interval(ci):
        return
    ends = interval_of(ci)
    if ends is None:
        found.append(Violation(ci_where, "not an interval: two numbers [low, high] or null", {"ci": ci}, INTERVALS))
        return
    low, high = ends
    if low > high:
        found.append(Violation(ci_where, "interval's low end above its high end", {"low": low, "high": high},
                               INTERVALS))
        return
    figure = number_of(value)
    if figure is None:
        if not is_estimate(value) and value is not None and not is_number(value):
            return  # a record, not a figure: its interval is read where the figure is
        found.append(Violation(where, "an interval with no figure inside it (the figure is null or NaN)",
                               {"value": value, "ci": [low, high]}, INTERVALS))
    elif not (at_most(low, figure) and at_most(figure, high)):
        found.append(Violation(where, "figure outside its 95% interval", {"value": figure, "ci": [low, high]},
                               INTERVALS))


# -- 2. verdict words against their figures: ``consistency_verdicts``
# -- 3. nothing fitted where there is nothing to judge ------------------------------------------------------


def _nothing_to_judge(summary: Mapping[str, Any], found: list[Violation]) -> None:
    kinds = {entry.get("config_id"): object_of(entry, "verdict").get("kind")
             for entry in records_of(summary.get("configs"))}
    for t, table in enumerate(records_of(summary.get("scaling"))):
        path = f"scaling[{t}]"
        text = string_of(table, "recommendation")
        rows = list(records_of(table.get("rows")))
        alone = [row.get("config_id") for row in rows
                 if kinds.get(row.get("config_id")) == step_bound.NOT_DATA_PARALLEL]
        why = ("not_data_parallel" if table.get("not_data_parallel") else "no scaling to judge"
               if text.startswith("No scaling to judge") else f"rows not data-parallel: {alone}" if alone else None)
        if why is not None:
            for key in ("amdahl", "projection"):
                fitted = table.get(key)
                if fitted and (key == "amdahl" or (fitted.get("points") if isinstance(fitted, Mapping) else True)):
                    found.append(Violation(f"{path}.{key}", f"a {'fit' if key == 'amdahl' else 'projection'} where "
                                           "the table says there is no scaling to judge", {"why": why},
                                           NOTHING_TO_JUDGE))
        elif len(rows) < 2 and table.get("amdahl"):
            found.append(Violation(f"{path}.amdahl", "Amdahl's law fitted to a single world size",
                                   {"rows": len(rows)}, NOTHING_TO_JUDGE))


# -- 4. totals are the per-rank figures times the ranks -----------------------------------------------------


def _totals(summary: Mapping[str, Any], found: list[Violation]) -> None:
    for i, entry in enumerate(records_of(summary.get("configs"))):
        path = f"configs[{i}]"
        own_batch = kind_of_entry(entry).own_batch  # else a batch per rank of its median rank, as drawn
        n, batch, global_batch = (number_of(entry.get(k)) for k in ("world_size", "batch_size", "global_batch"))
        if own_batch and n and batch and global_batch and not near(global_batch, batch * n):
            found.append(Violation(f"{path}.global_batch", "not the batch per rank times the ranks",
                                   {"global_batch": global_batch, "batch_size": batch, "world_size": n}, TOTALS))
        # a script's batch per rank is its median rank's: its total is its counted global batch
        factor = n if own_batch else (global_batch / batch if batch and global_batch else None)
        stats = object_of(entry, "stats")
        total, replica, step = (object_of(stats, k) for k in ("ex_sec_total", "ex_sec_replica", "sec_iter"))
        for p in total:
            t, r, s = number_of(total.get(p)), number_of(replica.get(p)), number_of(step.get(p))
            if factor and t is not None and r is not None and not near(t, r * factor):
                found.append(Violation(f"{path}.stats.ex_sec_total.{p}", "not the per-rank examples/s times the ranks",
                                       {"ex_sec_total": t, "ex_sec_replica": r, "factor": factor}, TOTALS))
            if global_batch and t is not None and s and not near(t, global_batch / s):
                found.append(Violation(f"{path}.stats.ex_sec_total.{p}", "not the global batch over the step",
                                       {"ex_sec_total": t, "global_batch": global_batch, "sec_iter": s}, TOTALS))
        total_ci = interval_of(stats.get("ex_sec_total_p50_ci"))
        replica_ci = interval_of(stats.get("ex_sec_replica_p50_ci"))
        if factor and total_ci and replica_ci and not all(near(a, b * factor) for a, b in zip(total_ci, replica_ci)):
            found.append(Violation(f"{path}.stats.ex_sec_total_p50_ci", "not the per-rank interval times the ranks",
                                   {"ex_sec_total_p50_ci": list(total_ci), "ex_sec_replica_p50_ci": list(replica_ci),
                                    "factor": factor}, TOTALS))
    for t, table in enumerate(records_of(summary.get("batch_throughput"))):
        n = number_of(table.get("world_size"))
        for r, row in enumerate(records_of(table.get("rows"))):
            batch, global_batch = number_of(row.get("batch_size")), number_of(row.get("global_batch"))
            if n and batch and global_batch and not near(global_batch, batch * n):
                found.append(Violation(f"batch_throughput[{t}].rows[{r}].global_batch",
                                       "not the batch per rank times the ranks",
                                       {"global_batch": global_batch, "batch_size": batch, "world_size": n}, TOTALS))


# -- 5. every configuration measured has a row or a note ----------------------------------------------------


def _strings(node: Any) -> Iterable[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, Mapping):
        for value in node.values():
            yield from _strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from _strings(value)


class _Notes:
    """The notes the report writes under each table that lists configurations, rendered from the summary once
    asked for (a note may be made from the figures rather than stored): table -> its notes' texts; and for the
    tables whose rows only the report makes (compute vs communication, FLOP/s), their rows' first cells."""

    def __init__(self, summary: Mapping[str, Any]) -> None:
        self.summary = summary
        self.found: dict[str, list[str]] | None = None
        self.tables: set[str] = set()  # the report's tables that have rows

    def of(self, table: str) -> list[str]:
        if self.found is None:
            self.found = self._render()
        return self.found.get(table, [])

    def has_rows(self, table: str) -> bool:
        self.of(table)
        return table in self.tables

    def _render(self) -> dict[str, list[str]]:
        from ddptop.report import (blocks, communication_tables, compute_tables, load_tables, scaling_tables,
                                   tuning_tables)
        from ddptop.report.schema import SchemaError, Summary

        try:
            typed = Summary.from_json(dict(self.summary))
        except SchemaError:  # a part of the wrong shape: only the stored notes can name a configuration
            return {}
        makers = {"scaling": scaling_tables.scaling_block, "tuning": tuning_tables.tuning_block,
                  "dp_vs_ddp": scaling_tables.dp_block, "load": load_tables.load_block,
                  "communication": communication_tables.communication_block, "compute": compute_tables.compute_block}
        found: dict[str, list[str]] = {}
        for table, make in makers.items():
            for part in make(typed).parts:
                if isinstance(part, (blocks.Note, blocks.Caption)):
                    found.setdefault(table, []).append(part.text)
                elif isinstance(part, blocks.Lines):
                    found.setdefault(table, []).extend(part.lines)
                elif isinstance(part, blocks.Table) and table in ROWS_RENDERED and part.rows:
                    self.tables.add(table)
                    found.setdefault(table, []).extend(row[0] for row in part.rows)
        return found


# the report's tables whose rows are made from the configurations as it writes them (no list of ids stored):
# where one has rows, every configuration measured is a row or named in its note
ROWS_RENDERED = {"communication": "the compute vs communication table", "compute": "the compute (FLOP/s) table"}


def _coverage(summary: Mapping[str, Any], found: list[Violation]) -> None:
    configs = list(records_of(summary.get("configs")))
    measured = [(i, e) for i, e in enumerate(configs) if isinstance(e.get("stats"), Mapping)
                and isinstance(e.get("config_id"), str)]
    in_scaling = {row.get("config_id") for table in records_of(summary.get("scaling"))
                  for row in records_of(table.get("rows"))}
    in_tuning = {row.get("config_id") for table in records_of(summary.get("tuning")) for part in ("rows", "combination")
                 for row in records_of(table.get(part))}
    dp_rows = {(row.get("model"), row.get("batch_size"), row.get("world_size"))
               for row in records_of(summary.get("dp_vs_ddp"))}
    with_load = any(e.get("telemetry") for e in configs)
    with_validity = any(e.get("validity") for e in configs)
    rendered = _Notes(summary)

    def named(entry: Mapping[str, Any], table: str, stored: Any) -> bool:
        """A note of the table names the configuration: one stored in ``stored``, or one the report writes
        (by its id, or by the name its rows give it: label, model and batch, a script by its command alone)."""
        names = [entry["config_id"],
                 f"{entry.get('label')} {with_batch(str(entry.get('model')), entry.get('batch_size') or 0)}"]
        return any(name in text for text in _strings(stored) for name in names[:1]) or any(
            name in text for text in rendered.of(table) for name in names)

    def missing(i: int, entry: Mapping[str, Any], table: str, key: str) -> None:
        found.append(Violation(f"configs[{i}].{key}", f"measured, but neither a row of {table} nor named in a note",
                               {"config_id": entry["config_id"]}, COVERAGE))

    for i, entry in measured:
        config_id, mode = entry["config_id"], entry.get("mode")
        default = (entry.get("variant") or "default") == "default"
        if mode == "ddp" and default and config_id not in in_scaling and not named(entry, "scaling",
                                                                                   summary.get("scaling")):
            missing(i, entry, "the scaling tables", "config_id")
        if mode == "ddp" and not default and config_id not in in_tuning and not named(entry, "tuning",
                                                                                      summary.get("tuning")):
            missing(i, entry, "the tuning tables", "variant")
        if mode == "dp" and (entry.get("model"), entry.get("batch_size"), entry.get("world_size")) not in dp_rows \
                and not named(entry, "dp_vs_ddp", summary.get("dp_vs_ddp")):
            missing(i, entry, "DataParallel against DDP", "mode")
        if with_load and not entry.get("telemetry") and not named(entry, "load", summary.get("telemetry")):
            missing(i, entry, "the load table", "telemetry")
        if with_validity and not entry.get("validity") and not named(entry, "load", summary.get("telemetry")):
            missing(i, entry, "the validity judgement (was the node quiet)", "validity")
        for table, what in ROWS_RENDERED.items():
            if rendered.has_rows(table) and not named(entry, table, None):
                missing(i, entry, what, "config_id")
        if kind_of_entry(entry).data_wait and not isinstance(entry.get("step_less_wait"), Mapping) \
                and not entry.get("probe_notes"):
            missing(i, entry, "the script's data-wait table (its step less data wait)", "step_less_wait")
