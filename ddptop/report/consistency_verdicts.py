"""The consistency check's second invariant (``ddptop.report.consistency``): the summary's verdict words match
their figures. Structured records are read wherever the summary stores them (a change's word beside its
ratio and interval, a verdict's kind beside the figures it rests on, a row's verdict, a flag, a best split);
a sentence is read only where nothing structured holds its claim (a script's verdict about its step less its
data wait, a scaling table's recommendation), and then by its fixed forms alone."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ddptop.analysis import step_bound
from ddptop.report.consistency_figures import kind_of_entry
from ddptop.analysis.stats import STRAGGLER_RATIO
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT, classify_change
from ddptop.report.consistency_figures import (CHANGE_WORDS, VERDICTS, Violation, at_most, figure_of, is_number,
                                               number_of, object_of, records_of, string_of)

_PERCENT = r"(\d+(?:\.\d+)?)%"
_LESS_WAIT = re.compile(r"the step less its data wait is (\d+(?:\.\d+)?)x N=\d+'s")
_WITHIN = re.compile(r"\bwithin " + _PERCENT + r" of it\b")
_MARGIN = r"(?: beyond noise)?(?: \((?:by )?more than " + _PERCENT + r"\))?"  # step_change.change_words, and before it
_GREW = re.compile(r"\b(?:grew|grown)\b" + _MARGIN)
_FELL = re.compile(r"\b(?:fell|fallen|shrank|shrunk)\b" + _MARGIN)


def verdicts(summary: Mapping[str, Any], found: list[Violation]) -> None:
    """Every verdict of the summary against its figures; what contradicts them goes to ``found``."""
    thresholds = object_of(summary, "verdict_thresholds")
    for i, entry in enumerate(records_of(summary.get("configs"))):
        path = f"configs[{i}]"
        _script_change(entry, path, found)
        _kind(entry, path, thresholds, found)
        _stragglers(entry, path, found)
    for t, table in enumerate(records_of(summary.get("tuning"))):
        margin = number_of(table.get("min_effect"))
        margin = DEFAULT_MIN_EFFECT if margin is None else margin
        for part in ("rows", "combination"):
            for r, row in enumerate(records_of(table.get(part))):
                _change_word(row, "step_ratio", False, margin, f"tuning[{t}].{part}[{r}]", found)
        words = {row.get("variant"): row.get("verdict") for part in ("rows", "combination")
                 for row in records_of(table.get(part))}
        for name in table.get("recommended") or ():
            if name in words and words[name] != "faster":
                found.append(Violation(f"tuning[{t}].recommended", "a variant recommended that is not faster",
                                       {"variant": name, "verdict": words[name]}, VERDICTS))
    for t, table in enumerate(records_of(summary.get("strategies"))):
        margin = number_of(table.get("min_effect"))
        margin = DEFAULT_MIN_EFFECT if margin is None else margin
        for r, row in enumerate(records_of(table.get("rows"))):
            _change_word(row, "speedup", True, margin, f"strategies[{t}].rows[{r}]", found)
    for t, table in enumerate(records_of(summary.get("scaling"))):
        _recommendation(table, "world_size", f"scaling[{t}]", found)
    for t, table in enumerate(records_of(summary.get("threads"))):
        _recommendation(table, "threads", f"threads[{t}]", found)
    for t, table in enumerate(records_of(summary.get("core_budget"))):
        _best_split(table, f"core_budget[{t}]", found)
    for t, table in enumerate(records_of(summary.get("devices_compared"))):
        _worth_it(table, f"devices_compared[{t}]", found)


def _script_change(entry: Mapping[str, Any], path: str, found: list[Violation]) -> None:
    """A script's step less its data wait against the smallest N: the change's word, and the verdict's words."""
    less = entry.get("step_less_wait")
    if not isinstance(less, Mapping):
        return
    ratio, ci = figure_of(less, "ratio")
    margin = number_of(less.get("min_effect"))
    margin = DEFAULT_MIN_EFFECT if margin is None else margin
    change = less.get("change")
    if ci is not None and change in CHANGE_WORDS and classify_change(ci[0], ci[1], margin) != change:
        found.append(Violation(f"{path}.step_less_wait.change", "the change's word is not the one its interval gives",
                               {"change": change, "ratio": ratio, "ci": list(ci), "min_effect": margin,
                                "interval_gives": classify_change(ci[0], ci[1], margin)}, VERDICTS))
    verdict = object_of(entry, "verdict")
    text = string_of(verdict, "text")
    part = next((p for p in text.split("; ") if _LESS_WAIT.search(p)), None)
    if part is None or ratio is None:
        return
    where, shown = f"{path}.verdict.text", _LESS_WAIT.search(part)
    values: dict[str, Any] = {"ratio": ratio, "ci": list(ci) if ci else None, "text": part}
    if shown and abs(float(shown.group(1)) - ratio) > 0.0051:
        found.append(Violation(where, "the sentence's ratio is not the figure's", values, VERDICTS))
    within, grew, fell = _WITHIN.search(part), _GREW.search(part), _FELL.search(part)
    if within:
        x = float(within.group(1)) / 100
        if ci is None or not (at_most(1 - x, ci[0]) and at_most(ci[1], 1 + x)):
            found.append(Violation(where, f"says within {within.group(1)}% of it: the ratio's interval is not "
                                   f"inside [{1 - x:g}, {1 + x:g}]", values, VERDICTS))
    if grew:
        x = float(grew.group(1)) / 100 if grew.group(1) else 0.0
        if ci is None or not ci[0] > 1 + x:
            found.append(Violation(where, f"says it grew: the ratio's interval is not above {1 + x:g}", values,
                                   VERDICTS))
    if fell:
        x = float(fell.group(1)) / 100 if fell.group(1) else 0.0
        if ci is None or not ci[1] < 1 - x:
            found.append(Violation(where, f"says it fell: the ratio's interval is not below {1 - x:g}", values,
                                   VERDICTS))


def _kind(entry: Mapping[str, Any], path: str, thresholds: Mapping[str, Any], found: list[Violation]) -> None:
    """A verdict's kind against the figures it rests on (``step_bound``), read with the summary's thresholds."""
    verdict = entry.get("verdict")
    kind = verdict.get("kind") if isinstance(verdict, Mapping) else None
    if not isinstance(kind, str):
        return

    def limit(name: str, default: float) -> float:
        value = number_of(thresholds.get(name))
        return default if value is None else value

    def wrong(why: str, values: dict[str, Any]) -> None:
        found.append(Violation(f"{path}.verdict.kind", f"{kind!r} but {why}", {"kind": kind, **values}, VERDICTS))

    def share_clears(record: Mapping[str, Any], name: str, default: float, what: str) -> None:
        """A share said to be above a threshold: its interval's low end must be above it."""
        share, share_ci = figure_of(record, "share")
        bound = limit(name, default)
        if share_ci is None or not share_ci[0] > bound:
            wrong(f"{what}'s interval does not clear {bound:g}",
                  {"share": share, "ci": list(share_ci) if share_ci else None})

    communication = object_of(entry, "communication")
    fraction, comm_ci = figure_of(communication, "exposed_comm_fraction")
    # a no_sync() pair measured its communication (not DDP's own timers, as a script's)
    pair = not kind_of_entry(entry).comm_from_ddp_timers and entry.get("mode") == "ddp" and (number_of(entry.get("world_size")) or 1) >= 2
    if kind == step_bound.COMMUNICATION:
        bound = limit("comm_bound", step_bound.COMM_BOUND)
        if comm_ci is None or comm_ci[0] < bound:
            wrong(f"exposed communication's interval does not clear {bound:g}",
                  {"exposed_comm_fraction": fraction, "ci": list(comm_ci) if comm_ci else None})
    elif kind == step_bound.COMPUTE and pair and fraction is not None:
        minor = limit("comm_minor", step_bound.COMM_MINOR)
        if comm_ci is None or comm_ci[1] >= minor:
            wrong(f"exposed communication's interval does not stay under {minor:g}",
                  {"exposed_comm_fraction": fraction, "ci": list(comm_ci) if comm_ci else None})
    elif kind == step_bound.HOST and not entry.get("trace") and isinstance(
            (entry.get("telemetry") or {}).get("gpu_idle"), Mapping):  # a summary from before it: nothing to read
        share_clears(entry["telemetry"]["gpu_idle"], "host_idle_share", step_bound.HOST_IDLE_SHARE,
                     "the GPUs' idle share")
    elif kind == step_bound.INPUT:
        share_clears(object_of(entry, "data_wait"), "input_bound_share", step_bound.INPUT_BOUND_SHARE,
                     "the data wait")
    elif kind == step_bound.WAITING:
        less = object_of(entry, "step_less_wait")
        if less.get("change") != "slower":
            wrong("the step less its data wait did not grow beyond noise",
                  {"change": less.get("change"), "ratio": figure_of(less, "ratio")[0]})
        sync = entry.get("grad_sync")
        if isinstance(sync, Mapping) and sync.get("comm_grew") is not True:  # a summary from before it: nothing to read
            wrong("DDP's exposed communication did not grow beyond noise (or was not measured)",
                  {"comm_grew": sync.get("comm_grew"), "comm_growth_s": sync.get("comm_growth_s")})


def _stragglers(entry: Mapping[str, Any], path: str, found: list[Violation]) -> None:
    """A rank flagged only where its interval clears the threshold (the step times', the data wait's)."""
    stats = object_of(entry, "stats")
    spread = stats.get("straggler")
    if isinstance(spread, Mapping) and spread.get("flagged") is True:
        ratio, ci = figure_of(spread, "ratio")
        if ci is not None and ci[0] < STRAGGLER_RATIO:
            found.append(Violation(f"{path}.stats.straggler.flagged", f"flagged, but the interval's low end is under "
                                   f"{STRAGGLER_RATIO:g}", {"ratio": ratio, "ci": list(ci)}, VERDICTS))
    wait = object_of(entry, "data_wait")
    slow = wait.get("straggler")
    if isinstance(slow, Mapping) and slow.get("flagged") is True:
        excess, ci = figure_of(slow, "excess_share")
        share = STRAGGLER_RATIO - 1
        if ci is None or ci[0] < share or slow.get("too_few_steps") is True:
            found.append(Violation(f"{path}.data_wait.straggler.flagged", f"flagged, but not {share:g} of the step "
                                   "above the others beyond noise on enough steps",
                                   {"excess_share": excess, "ci": list(ci) if ci else None,
                                    "too_few_steps": slow.get("too_few_steps")}, VERDICTS))


def _change_word(row: Mapping[str, Any], name: str, inverse: bool, margin: float, path: str,
                 found: list[Violation]) -> None:
    """A row's verdict word against its step-time ratio's interval (``inverse``: the figure is a speedup, the
    step-time ratio's inverse)."""
    word = row.get("verdict")
    value, ci = figure_of(row, name)
    if word not in CHANGE_WORDS or ci is None:
        return
    ratio = (1 / ci[1], 1 / ci[0]) if inverse and ci[0] > 0 else ci
    given = classify_change(ratio[0], ratio[1], margin)
    if given != word:
        found.append(Violation(f"{path}.verdict", "the verdict is not the one its interval gives",
                               {"verdict": word, name: value, "ci": list(ci), "min_effect": margin,
                                "interval_gives": given}, VERDICTS))


_FALLS = re.compile(r"Efficiency falls below " + _PERCENT + r" already at [Nt]=(\d+)")
_DROPS = re.compile(r"Efficiency drops below " + _PERCENT + r" beyond [Nt]=(\d+) \(.*? at [Nt]=(\d+)\)")
_STAYS_ALL = re.compile(r"Efficiency stays at or above " + _PERCENT + r" up to the largest [Nt] measured")
_STAYS_UP_TO = re.compile(r"Efficiency stays at or above " + _PERCENT + r" up to [Nt]=(\d+);")
_UNCLEAR = re.compile(r"[Nt]=(\d+) (?:efficiency is|it is) [^:]*?(?:: whether it is below|, within noise of) "
                      + _PERCENT)
_PEAKS = re.compile(r"Speedup peaks at [Nt]=(\d+) \(")


def _recommendation(table: Mapping[str, Any], size: str, path: str, found: list[Violation]) -> None:
    """What a scaling (or thread) table's recommendation says of efficiency against the efficiencies'
    intervals; no structured record holds it, so the sentence is read, by its fixed forms only."""
    text = table.get("recommendation")
    if not isinstance(text, str):
        return
    rows = {int(row[size]): (r, row) for r, row in enumerate(records_of(table.get("rows")))
            if is_number(row.get(size))}

    def efficiency(n: int) -> tuple[str, float | None, tuple[float, float] | None] | None:
        if n not in rows:
            return None
        r, row = rows[n]
        value, ci = figure_of(row, "efficiency")
        return f"{path}.rows[{r}].efficiency", value, ci if ci else ((value, value) if value is not None else None)

    def claim(n: int, threshold: float, side: str) -> None:
        got = efficiency(n)
        if got is None:
            found.append(Violation(f"{path}.recommendation", f"speaks of {size} {n}, which has no row",
                                   {"text": text}, VERDICTS))
            return
        where, value, ends = got
        ok = ends is not None and (ends[0] >= threshold if side == "above" else ends[1] < threshold if side == "below"
                                   else ends[0] < threshold <= ends[1])
        if not ok:
            words = {"above": "at or above", "below": "below", "unclear": "within noise of"}[side]
            found.append(Violation(where, f"the recommendation says {words} {threshold:.0%}; the interval does not",
                                   {"efficiency": value, "ci": list(ends) if ends else None, "text": text},
                                   VERDICTS))

    ordered = sorted(rows)
    for match in _FALLS.finditer(text):
        claim(int(match.group(2)), float(match.group(1)) / 100, "below")
    for match in _DROPS.finditer(text):
        threshold = float(match.group(1)) / 100
        claim(int(match.group(3)), threshold, "below")
        for n in ordered[1:]:
            if n <= int(match.group(2)):
                claim(n, threshold, "above")
    for match in _STAYS_ALL.finditer(text):
        for n in ordered:
            claim(n, float(match.group(1)) / 100, "above")
    for match in _STAYS_UP_TO.finditer(text):
        for n in ordered:
            if n <= int(match.group(2)):
                claim(n, float(match.group(1)) / 100, "above")
    for match in _UNCLEAR.finditer(text):
        claim(int(match.group(1)), float(match.group(2)) / 100, "unclear")
    for match in _PEAKS.finditer(text):
        peak = int(match.group(1))
        if peak in rows and ordered:
            peak_ci, last_ci = figure_of(rows[peak][1], "speedup")[1], figure_of(rows[ordered[-1]][1], "speedup")[1]
            if peak_ci and last_ci and not peak_ci[0] > last_ci[1]:
                found.append(Violation(f"{path}.recommendation", "says speedup peaks before the largest size; the "
                                       "intervals overlap", {"peak_ci": list(peak_ci), "largest_ci": list(last_ci)},
                                       VERDICTS))


def _best_split(table: Mapping[str, Any], path: str, found: list[Violation]) -> None:
    """A best split of the cores is named only beyond noise (``threads.beyond_noise``)."""
    if "best_config_id" not in table:
        return
    ratio, ci = figure_of(table, "ratio")
    clear = ci is not None and ci[0] > 1 + DEFAULT_MIN_EFFECT
    named = table.get("best_config_id") is not None
    if named != clear:
        said = "names a best split" if named else "names no best split"
        found.append(Violation(f"{path}.best_config_id", f"{said}, but the ratio's interval says otherwise",
                               {"best_config_id": table.get("best_config_id"), "ratio": ratio,
                                "ci": list(ci) if ci else None}, VERDICTS))


def _worth_it(table: Mapping[str, Any], path: str, found: list[Violation]) -> None:
    """The GPUs worth it only where an example costs fewer service units beyond noise; not where more."""
    cost, ci = figure_of(table, "relative_su")
    if ci is None or "worth_it" not in table:
        return
    given = True if ci[1] < 1 - DEFAULT_MIN_EFFECT else False if ci[0] > 1 + DEFAULT_MIN_EFFECT else None
    if table["worth_it"] != given:
        found.append(Violation(f"{path}.worth_it", "not what the relative cost's interval says",
                               {"worth_it": table["worth_it"], "relative_su": cost, "ci": list(ci),
                                "interval_gives": given}, VERDICTS))
