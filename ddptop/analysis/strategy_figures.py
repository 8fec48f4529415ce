"""DDP, ZeRO-1 and FSDP2 side by side: examples/s with intervals, memory per rank, and the answer in words.

One table per model, world size, backend and bucket size that measured more than one strategy
(``--strategies``). Each strategy's row is read at the same batch for all (the largest batch every strategy
measured) and at its own largest batch (with ``--batch-sweep``, the largest that fits: the next one ran out
of memory). Examples/s come with the 95% intervals every figure of the summary has, and each strategy's
examples/s over DDP's with the interval of the ratio, from the same two-level replicates
(``analysis.intervals``), so a difference is called only beyond noise (``uncertainty.verdict``), as
``ddptop tune`` calls a variant. Memory per rank is the allocator's peak on a GPU and the kernel's count on
the CPU (``bench_kernels.strategy_wrappers.counted_memory``), the rank that holds most.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ddptop import units
from ddptop.protocol import strategies as catalog
from ddptop.analysis.figures import paired_figure
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT, FASTER, NOT_COMPARABLE, inverse
from ddptop.protocol import variants
from ddptop.records import Estimate, value_of

if TYPE_CHECKING:  # numpy and the bootstrap load when a summary is built, not with the live view's report blocks
    import numpy as np

PEAK, COUNTED = "allocator peak", "counted"


def memory_of(entry: Mapping[str, Any]) -> tuple[int | None, str | None]:
    """A configuration's memory per rank and what kind of figure it is (None where it has none)."""
    if entry.get("peak_memory_bytes") is not None:
        return entry["peak_memory_bytes"], PEAK
    if entry.get("counted_memory_bytes") is not None:
        return entry["counted_memory_bytes"], COUNTED
    return None, None


def _measured(entry: Mapping[str, Any] | None) -> bool:
    if not entry or entry["status"] != "ok":
        return False
    return bool((entry.get("stats") or {}).get("sec_iter", {}).get("p50"))


def _figures(entry: Mapping[str, Any]) -> dict[str, Any]:
    stats = entry.get("stats") or {}
    p50 = stats["sec_iter"]["p50"]
    return {"sec_iter": paired_figure(p50, stats.get("p50_ci")),
            "ex_sec_total": paired_figure(entry["global_batch"] / p50, stats.get("ex_sec_total_p50_ci"))}


def strategy_tables(entries: Sequence[Mapping[str, Any]], replicates: Mapping[str, np.ndarray] | None = None,
                    min_effect: float = DEFAULT_MIN_EFFECT, memory_cap_mb: float | None = None) -> list[dict[str, Any]]:
    """The strategy tables of a summary's configurations (``replicates``: each configuration's two-level
    replicates of its p50 step time, for the intervals of the ratios)."""
    groups: dict[tuple, dict[str, list[Mapping[str, Any]]]] = {}
    for entry in entries:
        if entry["mode"] != "ddp" or (entry.get("variant") or variants.DEFAULT) != variants.DEFAULT:
            continue
        key = (entry["model"], entry["world_size"], entry["backend"], entry.get("bucket_cap_mb"))
        groups.setdefault(key, {}).setdefault(entry.get("strategy") or catalog.DDP, []).append(entry)
    tables = []
    for (model, world_size, backend, cap), by_strategy in groups.items():
        if len(by_strategy) < 2:
            continue
        names = [name for name in catalog.CATALOG if name in by_strategy]
        ok_batches = [{e["batch_size"] for e in by_strategy[name] if _measured(e)} for name in names]
        common = set.intersection(*ok_batches) if ok_batches else set()
        batch = max(common) if common else min(e["batch_size"] for e in by_strategy[names[0]])
        at = {name: next((e for e in by_strategy[name] if e["batch_size"] == batch), None) for name in names}
        rows = [_row(name, at[name], by_strategy[name], batch) for name in names]
        base = rows[0] if names[0] == catalog.DDP else None
        for row in rows:
            _compare(row, base, replicates or {}, min_effect)
        table = {"model": model, "world_size": world_size, "backend": backend, "bucket_cap_mb": cap,
                 "batch_size": batch, "min_effect": min_effect, "memory_cap_mb": memory_cap_mb, "rows": rows}
        table.update(_answer(rows, replicates or {}, min_effect, memory_cap_mb))
        table["frontier"] = _frontier(names, by_strategy)
        tables.append(table)
    return tables


def _frontier(names: list[str], by_strategy: Mapping[str, list[Mapping[str, Any]]]) -> list[dict[str, Any]]:
    """The memory frontier: every measured batch of every strategy as memory per rank against examples/s."""
    points = []
    for name in names:
        for entry in sorted(by_strategy[name], key=lambda e: e["batch_size"]):
            memory, kind = memory_of(entry)
            if not _measured(entry) or memory is None:
                continue
            figures = _figures(entry)
            points.append({"strategy": name, "batch_size": entry["batch_size"], "memory_bytes": memory,
                           "memory_kind": kind, "ex_sec_total": figures["ex_sec_total"]})
    return points


def _row(name: str, entry: Mapping[str, Any] | None, sweep: list[Mapping[str, Any]], batch: int) -> dict[str, Any]:
    memory, kind = memory_of(entry) if entry else (None, None)
    row: dict[str, Any] = {
        "strategy": name, "what": catalog.strategy(name).what, "config_id": entry["config_id"] if entry else "",
        "status": entry["status"] if entry else "not_run", "batch_size": batch,
        "sec_iter": None, "ex_sec_total": None, "speedup": None, "verdict": NOT_COMPARABLE,
        "memory_bytes": memory, "memory_kind": kind,
        "memory_breakdown": dict(entry["counted_memory"]) if entry and entry.get("counted_memory") else None,
    }
    if entry is not None and _measured(entry):
        row.update(_figures(entry))
    fitted = sorted((e for e in sweep if _measured(e)), key=lambda e: e["batch_size"])
    if fitted:
        largest = fitted[-1]
        oom = [e["batch_size"] for e in sweep if e["status"] == "oom" and e["batch_size"] > largest["batch_size"]]
        figures = _figures(largest)
        row.update(largest_batch=largest["batch_size"], largest_batch_fits=bool(oom),
                   largest_ex_sec_total=figures["ex_sec_total"],
                   largest_memory_bytes=memory_of(largest)[0])
    else:
        row.update(largest_batch=None, largest_batch_fits=None, largest_ex_sec_total=None, largest_memory_bytes=None)
    return row


def _compare(row: dict[str, Any], base: dict[str, Any] | None, replicates: Mapping[str, np.ndarray],
             min_effect: float) -> None:
    """The row's examples/s over DDP's at the same batch, with the interval and the verdict."""
    from ddptop.analysis import uncertainty

    if base is None:
        return
    if row is base:
        if value_of(row["sec_iter"]):
            row.update(speedup=Estimate(value=1.0), verdict="the reference")
        return
    ratio = uncertainty.row_ratio(row, base, replicates)
    if ratio is not None:
        row.update(uncertainty.speedup_of(ratio, min_effect))


def _answer(rows: list[dict[str, Any]], replicates: Mapping[str, np.ndarray], min_effect: float,
            cap: float | None) -> dict[str, Any]:
    """Which strategy gives the most examples/s beyond noise (or that they cannot be told apart), and which
    fits the largest batch; in words too."""
    from ddptop.analysis import uncertainty

    measured = [r for r in rows if value_of(r["ex_sec_total"])]
    fastest, sentences = None, []
    if len(measured) >= 2:
        best = max(measured, key=lambda r: r["ex_sec_total"].value)
        ratios = {r["strategy"]: uncertainty.row_ratio(best, r, replicates) for r in measured if r is not best}
        verdicts = {name: uncertainty.verdict(ratio, min_effect) if ratio else NOT_COMPARABLE
                    for name, ratio in ratios.items()}
        tied = [name for name, v in verdicts.items() if v != FASTER]
        batch = f"at batch {best['batch_size']} per rank"
        if not tied:
            second = max((r for r in measured if r is not best), key=lambda r: r["ex_sec_total"].value)
            ratio = ratios[second["strategy"]]
            assert ratio is not None  # called faster: its ratio was measured
            fastest = best["strategy"]
            sentences.append(
                f"{best['strategy']} gives the most examples/s {batch}: "
                f"{units.estimate(best['ex_sec_total'], units.rate)}, "
                f"{units.with_interval(1 / ratio.value, inverse(ratio.ci), lambda v: units.number(v, 2, 'x'))} "
                f"the next best's ({second['strategy']}), beyond noise.")
        else:
            alike = [best["strategy"], *tied]
            sentences.append(
                f"{', '.join(alike[:-1])} and {alike[-1]} cannot be told apart in examples/s {batch} "
                f"(the difference is within noise or under ±{units.percent(min_effect)}); "
                f"{best['strategy']} measured highest: "
                f"{units.estimate(best['ex_sec_total'], units.rate)}.")
    fits = [r for r in rows if r["largest_batch"]]
    fits_largest = None
    if fits and any(r["largest_batch_fits"] for r in fits):
        top = max(r["largest_batch"] for r in fits)
        leaders = [r for r in fits if r["largest_batch"] == top]
        established = all(r["largest_batch_fits"] for r in fits if r not in leaders)
        others = ", ".join(f"{r['strategy']} {r['largest_batch']}" for r in fits if r not in leaders)
        under = f" under the {cap:g} MiB memory cap" if cap else ""
        if len(leaders) == 1 and established:
            fits_largest = leaders[0]["strategy"]
            sentences.append(f"{fits_largest} fits the largest batch{under}: {top} per rank"
                             + (f" ({others})." if others else "."))
        elif all(r["largest_batch_fits"] for r in fits):
            sentences.append(f"{' and '.join(r['strategy'] for r in leaders)} fit the largest batch{under}: "
                             f"{top} per rank" + (f" ({others})." if others else "."))
        else:
            sentences.append(f"{' and '.join(r['strategy'] for r in leaders)} fit the largest batch measured{under}, "
                             f"{top} per rank" + (f" ({others})" if others else "")
                             + "; the batch sweep did not reach out of memory for every one of them.")
    else:
        least = [r for r in rows if r["memory_bytes"] is not None]
        if least:
            low = min(least, key=lambda r: r["memory_bytes"])
            sentences.append(
                f"Which fits the largest batch was not measured (run --batch-sweep, with --memory-cap-mb on the "
                f"CPU); {low['strategy']} holds the least per rank at batch {low['batch_size']}: "
                f"{units.binary_bytes(low['memory_bytes'])} ({low['memory_kind']}).")
    return {"fastest": fastest, "fits_largest": fits_largest, "answer": " ".join(sentences)}
