"""ddptop tune's answer: each DDP variant against DDP as written, with the interval of the ratio, ranked.

A variant is one configuration of the sweep (``ddptop.protocol.variants``), measured in the same launches as
the default, interleaved (the plan rotates the configurations of a launch). Its step time is compared with
the default's as a ratio of the pooled medians, from the same two-level replicates as every other figure of
the summary (``analysis.intervals``: each launch bootstrapped, the launch-to-launch variance pooled over the
sweep), so a ratio carries the offsets between launches. A variant is called faster or slower only when the
ratio's interval lies beyond ``min_effect`` (``uncertainty.verdict``), and only a faster one is recommended.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ddptop.analysis import launches, script_patch, script_sync, script_tries, uncertainty
from ddptop.analysis.figures import paired_figure
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.protocol import variants as catalog
from ddptop.protocol.modelspec import PATCH, model_kind
from ddptop.protocol.vocab import Mode
from ddptop.records import Estimate, value_of


def _group_key(entry: Mapping[str, Any]) -> tuple:
    """A table's: model, batch, world size, backend; a script's batch is what it drew (none where a try failed
    before its first step), the same script's tries one table whatever they drew."""
    batch = entry["batch_size"] if model_kind(entry["model"]).own_batch else 0
    return entry["model"], batch, entry["world_size"], entry["backend"]


def compile_cost(launches: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """What torch.compile cost and kept, from each launch's first step (``bench_kernels.compiled``): the first
    step's seconds in every launch (each compiles anew; Inductor's cache on disk makes later launches quicker),
    and the first launch's graphs, graph breaks and graph splits against DDP's buckets. ``bucketing``: "kept"
    when DDPOptimizer split the backward at as many buckets as DDP made (each allreduce can still overlap the
    backward), "lost" when fewer, None when not known."""
    def number(value: Any) -> float | None:
        return value if isinstance(value, (int, float)) and not isinstance(value, bool) else None

    seconds = [s for s in (number(launch.get("first_step_s")) for launch in launches) if s is not None]
    if not launches or not seconds:
        return None
    first = launches[0]
    split, buckets = number(first.get("compiled_buckets")), number(first.get("ddp_buckets"))
    return {
        "first_step_s": seconds,
        "graphs": number(first.get("graphs")),
        "graph_breaks": number(first.get("graph_breaks")),
        "compiled_buckets": split,
        "ddp_buckets": buckets,
        "bucketing": None if split is None or buckets is None else "kept" if split >= buckets else "lost",
    }


def _row(entry: Mapping[str, Any], keywords: Mapping[str, Any] | None,
         compiles: Sequence[Mapping[str, Any]] = (), nccl: Sequence[Mapping[str, Any]] | None = None,
         script_dir: str = "", script_file: str = "", own_loader: str | None = None) -> dict[str, Any]:
    chosen = catalog.variant(entry.get("variant") or catalog.DEFAULT)
    stats = entry.get("stats") or {}
    not_applied = not_applied_reason(entry, chosen)
    found = {
        "variant": chosen.name,
        "what": chosen.what,
        "math": chosen.math,
        "config_id": entry["config_id"],
        "status": entry["status"],
        "reason": entry.get("reason"),
        "sec_iter": paired_figure((stats.get("sec_iter") or {}).get("p50"), stats.get("p50_ci")),
        "ex_sec_total": paired_figure((stats.get("ex_sec_total") or {}).get("p50"), stats.get("ex_sec_total_p50_ci")),
        # the step's tail beside the objective (intervals.add_tail_intervals: where enough steps were measured)
        "sec_iter_p95": paired_figure(stats.get("sec_iter_p95"), stats.get("sec_iter_p95_ci")),
        "p95_steps": stats.get("p95_steps"),
        "peak_memory_bytes": entry.get("peak_memory_bytes"),
        "max_rss_bytes": entry.get("max_rss_bytes"),
        "step_ratio": None, "speedup": None,
        "verdict": ("the default" if chosen.name == catalog.DEFAULT else "measured again" if chosen.name == catalog.AGAIN
                    else not_applied or uncertainty.NOT_COMPARABLE),
        "paste": None, "patch": None, "patch_folder": None,
        "compiled": compile_cost(compiles),
        "nccl": list(nccl) if nccl else None,
    }
    if not not_applied:
        found.update(_paste(entry, chosen, keywords, script_dir, script_file, own_loader))
    return found


# a script's try that the probe set on no call: the script made no DistributedDataParallel model (FSDP, ZeRO, its
# own collectives), no loader at the training loader's line, or set its own threads over the launch's, so it
# measured the script as written once more
NOT_APPLIED_PREFIX = "not applied: "
NOT_APPLIED = f"{NOT_APPLIED_PREFIX}no DDP call"
NOT_APPLIED_LOADER = f"{NOT_APPLIED_PREFIX}no DataLoader made at its line"
NOT_APPLIED_THREADS = f"{NOT_APPLIED_PREFIX}the script sets its own thread count"


def not_applied_reason(entry: Mapping[str, Any], chosen: catalog.Variant) -> str | None:
    """Why a script's try measured the script as written once more (a part of it set on no call), or None."""
    seen = entry.get("script")
    if catalog.as_written(chosen.name) or not isinstance(seen, Mapping):
        return None
    if (catalog.script_ddp_arguments(chosen.name) or chosen.no_sync_every) and seen.get("tried_on") == 0:
        return NOT_APPLIED
    if chosen.loader_kwargs and seen.get("loader_tried_on") == 0:
        return NOT_APPLIED_LOADER
    if chosen.threads and isinstance(seen.get("threads"), int) and seen["threads"] != chosen.threads:
        return f"{NOT_APPLIED_THREADS} (torch.set_num_threads({seen['threads']}))"
    return None


def _paste(entry: Mapping[str, Any], chosen: catalog.Variant, keywords: Mapping[str, Any] | None,
           script_dir: str, script_file: str = "", own_loader: str | None = None) -> dict[str, Any]:
    """The lines to paste for a kernel's variant; for a script's try, its change at the lines that made its calls
    and the patch of what can be patched (``script_patch.try_change``, against the script's files as they are
    now), the lines of the patch's own beside them."""
    if model_kind(entry["model"]).answer != PATCH:
        return {"paste": catalog.paste_lines(chosen, keywords or {}) if keywords or chosen.strategy else None}
    if catalog.as_written(chosen.name):
        return {}
    ddp = script_sync.main_wrapper(entry.get("script") if isinstance(entry.get("script"), Mapping) else None,
                                   (script_sync.DDP,))
    lines, change = script_patch.try_change(chosen, ddp, str(entry.get("loader_site") or ""), own_loader,
                                            script_dir, script_file)
    if change is None:
        return {"paste": lines}
    return {"paste": lines + [f"  {line}" for line in change.lines], "patch": change.patch,
            "patch_folder": change.folder if change.patch else None}


def tuning_tables(entries: Sequence[Mapping[str, Any]], replicates: Mapping[str, np.ndarray],
                  keywords: Mapping[str, Mapping[str, Any]], min_effect: float = DEFAULT_MIN_EFFECT,
                  skipped: Sequence[str] = (), compiles: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                  nccl: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
                  reasons: Mapping[str, str] | None = None, tried: Mapping[str, str] | None = None,
                  not_tried: Mapping[str, str] | None = None, script_dir: str = "", script_file: str = ""
                  ) -> list[dict[str, Any]]:
    """One table per model, batch, world size and backend that has variants: the default first, then each
    variant by its examples/s against the default's (best first); the combination of the faster ones, if the
    search measured one, against DDP as written measured again beside it; and what is recommended (the
    combination first when it is faster beyond noise, then every single variant that is). ``replicates``:
    the two-level replicates of each configuration's p50 (``intervals.add_step_intervals``); ``keywords``:
    the DDP keywords each configuration's ranks passed (their config_start), for the lines to paste;
    ``skipped``: the variants asked for but not measured (said under the table, with ``reasons``' why, else
    the GPU-only one); ``compiles``:
    torch.compile's first step in each launch of a compiled configuration; ``nccl``: the algorithms and
    protocols NCCL's log says it used in the launches of each configuration (``ddptop.telemetry.nccl_log``);
    ``tried`` and ``not_tried``: a script's tune, why each try was tried and why each kind of setting was not
    (``analysis.script_tries``; a script's table stands with no try at all, to say why)."""
    compiles, nccl, reasons = compiles or {}, nccl or {}, reasons or {}
    tried, not_tried = tried or {}, not_tried or {}

    def row(entry: Mapping[str, Any], own_loader: str | None = None) -> dict[str, Any]:
        config_id = entry["config_id"]
        return _row(entry, keywords.get(config_id), compiles.get(config_id, ()), nccl.get(config_id), script_dir,
                    script_file, own_loader)

    groups: dict[tuple, list[Mapping[str, Any]]] = {}
    for entry in entries:
        # ZeRO-1 and FSDP2 as tune's candidates (variants), not as --strategies measures them beside a sweep
        if entry["mode"] == Mode.DDP and ((entry.get("strategy") or "ddp") == "ddp"
                                          or (entry.get("variant") or catalog.DEFAULT) != catalog.DEFAULT):
            groups.setdefault(_group_key(entry), []).append(entry)
    tables = []
    for (model, batch, world_size, backend), members in groups.items():
        named = {e.get("variant") or catalog.DEFAULT: e for e in members}
        default, again = named.get(catalog.DEFAULT), named.get(catalog.AGAIN)
        singles = [e for name, e in named.items() if not catalog.as_written(name)
                   and catalog.JOIN not in name]
        # no try measured: a table all the same where the answer is the user's script's, to say why
        if default is None or not (singles or (not_tried and model_kind(default["model"]).answer == PATCH)):
            continue
        base = row(default)
        seen = default.get("script")  # a script's loader a library made again from its own: the script's line
        mine = [line for line in (script_tries.script_loader_lines(seen) if isinstance(seen, Mapping) else [])
                if script_patch.loader_call(script_dir, line)]
        own = mine[0] if len(mine) == 1 else None  # two of the script's alike: which one is not known
        rows = [_compare(row(e, own), base, replicates, min_effect) for e in singles]
        rows.sort(key=lambda r: (r["speedup"] is None, -(value_of(r["speedup"]) or 0.0)))
        # the combination, against DDP as written measured again beside it in launches of their own
        combination: list[dict[str, Any]] = []
        if again is not None:
            fresh = row(again)
            combination = [fresh] + [_compare(row(e, own), fresh, replicates, min_effect)
                                     for name, e in named.items() if catalog.JOIN in name]
        faster = [r["variant"] for r in rows if r["verdict"] == uncertainty.FASTER]
        tables.append({
            "model": model, "batch_size": batch, "world_size": world_size, "backend": backend,
            "min_effect": min_effect, "rows": [base, *rows], "combination": combination,
            "skipped": [{"variant": name, "why": reasons.get(name) or catalog.variant(name).cpu_why
                         or "measured on GPUs only"}
                        for name in skipped],
            "recommended": [r["variant"] for r in combination if r["verdict"] == uncertainty.FASTER] + faster,
            "tried": [{"variant": name, "why": why} for name, why in tried.items()],
            "not_tried": [{"what": what, "why": why} for what, why in not_tried.items()],
        })
    return tables


def _compare(row: dict[str, Any], base: dict[str, Any], replicates: Mapping[str, np.ndarray],
             min_effect: float) -> dict[str, Any]:
    """The variant's step time over the default's, with its interval and the verdict; examples/s is its
    inverse (both measure the same global batch)."""
    ratio = (uncertainty.row_ratio(row, base, replicates)
             if not str(row["verdict"]).startswith(NOT_APPLIED_PREFIX) else None)
    if ratio is not None:
        row.update(step_ratio=ratio, **uncertainty.speedup_of(ratio, min_effect))
    return row


def standing(units: Mapping[str, Mapping[str, Mapping[int, Sequence[float]]]], default_id: str,
             min_effect: float = DEFAULT_MIN_EFFECT) -> dict[str, tuple[str, Estimate]]:
    """Each variant's verdict against the default and its step-time ratio, from the launches measured so far
    (``units``: configuration id -> launch -> rank -> steps); empty until the launch-to-launch variance can
    be estimated (two launches of a configuration or more): within one launch, an offset between launches
    would pass for a difference between variants."""
    fitted = [launches.config_launches(config_id, found) for config_id, found in units.items() if found]
    variance, replicates = launches.estimates(fitted)
    base = replicates.get(default_id)
    if not variance.estimated or base is None:
        return {}
    centres = {c.config_id: c.centre for c in fitted}
    found = {}
    for config_id, ours in replicates.items():
        if config_id != default_id:
            ratio = uncertainty.step_ratio(base, ours, centres[config_id] / centres[default_id])
            found[config_id] = (uncertainty.verdict(ratio, min_effect), ratio)
    return found


def slower_so_far(units: Mapping[str, Mapping[str, Mapping[int, Sequence[float]]]], default_id: str,
                  min_effect: float = DEFAULT_MIN_EFFECT) -> dict[str, Estimate]:
    """The variants already slower than the default beyond noise (``standing``): the search drops these
    before their next launch."""
    return {config_id: ratio for config_id, (verdict, ratio) in standing(units, default_id, min_effect).items()
            if verdict == uncertainty.SLOWER}
