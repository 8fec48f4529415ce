"""How a user's script synchronised its gradients, from what the probe saw (``bench_kernels.probe_sync``):
the models it wrapped for data parallelism, the synchronisations and micro-batches of each measured step, and
DDP's own timers; and what the verdict may say of them.

- **the ranks train alone** (``alone_reason``): a configuration above one rank whose process group holds the
  launch's ranks but in which no gradient was synchronised: no DDP, FSDP or ZeroRedundancyOptimizer made and no
  collective called by the script in the measured steps, or DDP and FSDP models whose every measured forward ran
  with synchronisation off (``no_sync()``, ``set_requires_gradient_sync(False)``). Its step times are not a
  scaling measurement.
- **gradients synchronised on every micro-batch**: k forwards a step (k >= 2) of the model that ran the most,
  each of them synchronising (the most common measured step), where turning synchronisation off for the first
  k - 1 (DDP's and FSDP's ``no_sync()``, fully_shard's ``set_requires_gradient_sync``) would synchronise once.
- **exposed communication** per step: DDP's backward communication less its overlap with the backward's
  compute (its timers, averaged over the measured steps' synchronisations, times the synchronisations a step),
  per rank and launch. It **grew** against the smallest N where its growth exceeds the spread of those values
  at both world sizes and ``DEFAULT_MIN_EFFECT`` of the reference step, and covers at least
  ``COMM_SHARE_OF_GROWTH`` of the low end of the step's own growth: only then is a grown step "waiting on the
  other ranks"; a grown step whose exposed communication did not grow so is compute that grew, and one without
  DDP's timers is said not to be measured.

Standard library only; ``script_figures`` adds the figures (``grad_sync``) to a summary entry.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ddptop import units
from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.records import ci_of, value_of

DDP, FSDP, FULLY_SHARD, ZERO = "DistributedDataParallel", "FullyShardedDataParallel", "fully_shard", "ZeroRedundancyOptimizer"
COUNTED = (DDP, FSDP, FULLY_SHARD)  # kinds whose micro-batches and synchronisations the probe counts a step
COMM_SHARE_OF_GROWTH = 0.5  # exposed communication's growth against the low end of the step's: waiting, not compute


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def measured_steps(wrapper: Mapping[str, Any]) -> int:
    return sum(int(n) for _, _, n in wrapper.get("sync_steps") or ())


def per_step(wrapper: Mapping[str, Any], name: str, less: str | None = None) -> float | None:
    """One of DDP's timers a measured step: its average over the synchronisations DDP recorded, times the
    synchronisations a step (``iterations`` over the measured steps); ``less`` another timer taken off first."""
    logging = wrapper.get("ddp_logging")
    if not isinstance(logging, Mapping) or _number(logging.get(name)) is None:
        return None
    value = float(logging[name]) - (_number(logging.get(less)) or 0.0 if less else 0.0)
    iterations, steps = _number(logging.get("iterations")), measured_steps(wrapper)
    scale = iterations / steps if iterations and steps else 1.0
    return max(0.0, value) * scale


def wrappers_over_launches(seen: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]] | None:
    """The wrappers each launch's probe saw, put together by position: each counted model's measured steps
    summed over every launch (``sync_steps``), a DDP model's exposed and whole backward communication a step
    listed per launch (``exposed_comm_s``, ``backward_comm_s``); the rest as the last launch saw it. None where
    no launch's probe looked (a probe older than the record)."""
    lists: list[list[Mapping[str, Any]]] = [s["wrappers"] for s in seen if isinstance(s.get("wrappers"), list)]
    if not lists:
        return None
    merged = []
    for i, last in enumerate(lists[-1]):
        wrapper = dict(last)
        kind = wrapper.get("kind")
        same = [found[i] for found in lists if i < len(found) and found[i].get("kind") == kind]
        if kind in COUNTED and "sync_steps" in wrapper:
            counts: dict[tuple[int, int], int] = {}
            for found in same:
                for micro, syncs, n in found.get("sync_steps") or ():
                    counts[(micro, syncs)] = counts.get((micro, syncs), 0) + n
            wrapper["sync_steps"] = [[micro, syncs, n] for (micro, syncs), n in sorted(counts.items())]
        if kind == DDP:
            for key, name, less in (("exposed_comm_s", "backward_comm_s", "backward_compute_comm_overlap_s"),
                                    ("backward_comm_s", "backward_comm_s", None)):
                wrapper[key] = [v for v in (per_step(found, name, less) for found in same) if v is not None]
        merged.append(wrapper)
    return merged


def synchronises(seen: Mapping[str, Any] | None) -> bool | None:
    """Whether the script synchronised gradients in the measured steps, as far as the probe could tell: False
    where it wrapped no model and called no collective of its own, or where its counted models' forwards all
    ran with synchronisation off; None where the probe did not look or could not count."""
    if not seen or not isinstance(seen.get("wrappers"), list):
        return None
    wrappers = [w for w in seen["wrappers"] if isinstance(w, Mapping)]
    # ZeRO, and FSDP as a probe that did not count its forwards recorded it: taken to synchronise
    if seen.get("collectives") or any(w.get("kind") not in COUNTED or (w.get("kind") != DDP and "sync_steps" not in w)
                                      for w in wrappers):
        return True
    counted = [w.get("sync_steps") or [] for w in wrappers]
    if any(syncs for found in counted for _, syncs, _ in found):
        return True
    if seen.get("wrappers_incomplete"):
        return None  # a wrapper may have been made unseen
    if not wrappers:
        return False
    if not all(counted) or not any(micro for found in counted for micro, _, _ in found):
        return None  # a model's forwards not counted (compiled, a forward of its own, counting failed)
    return False


def alone_reason(seen: Mapping[str, Any]) -> str | None:
    """Why ranks in one process group of the launch's size each train alone; None where they synchronise or
    nothing tells."""
    if synchronises(seen) is not False:
        return None
    group = seen.get("group_world_size")
    wrappers = [w for w in seen.get("wrappers") or () if isinstance(w, Mapping)]
    if not wrappers:
        return (f"not data-parallel: the ranks train alone (a process group of {group} ranks, but no model wrapped "
                "for data parallelism: no DistributedDataParallel, FSDP or ZeroRedundancyOptimizer, and no "
                "collective of its own in the measured steps: no gradient was synchronised)")
    kinds = sorted({str(w.get("kind")) for w in wrappers})
    off = " or ".join(dict.fromkeys("after set_requires_gradient_sync(False)" if kind == FULLY_SHARD
                                    else "inside no_sync()" for kind in kinds))
    models = f"{kinds[0]} model" if len(kinds) == 1 else f"models ({', '.join(kinds)})"
    return (f"not data-parallel: the ranks train alone (its {models} synchronised no gradient in "
            f"the measured steps: every forward ran {off})")


def micro_batches_run(sync_steps: Iterable[Sequence[int]] | None) -> int:
    """The micro-batches a counted model ran over its measured steps ([micro-batches, syncs, steps] each): the
    main model of a script is the one that ran the most (the first where none were counted)."""
    return sum(micro * n for micro, _, n in sync_steps or ())


def main_wrapper(seen: Mapping[str, Any] | None, kinds: Sequence[str] = COUNTED) -> Mapping[str, Any] | None:
    """The model of one of ``kinds`` that ran the most micro-batches in the measured steps (``micro_batches_run``)."""
    found = [w for w in (seen or {}).get("wrappers") or () if isinstance(w, Mapping) and w.get("kind") in kinds]
    return max(found, key=lambda w: micro_batches_run(w.get("sync_steps")), default=None)


def typical_step(wrapper: Mapping[str, Any]) -> tuple[int, int] | None:
    """The (micro-batches, synchronisations) most measured steps ran."""
    found = wrapper.get("sync_steps") or []
    if not found:
        return None
    micro, syncs, _ = max(found, key=lambda item: (item[2], item[0]))
    return int(micro), int(syncs)


def _exposed(entry: Mapping[str, Any], key: str = "exposed_comm_s") -> list[float] | None:
    """Each rank's and launch's exposed communication a step (``key``: or its whole backward communication),
    summed over its DDP models; None without DDP's timers; [0.0] for a configuration that synchronised nothing
    (serial: no communication to expose)."""
    per_rank = entry.get("script_per_rank") or {}
    seen = entry.get("script") or {}
    if not isinstance(seen.get("wrappers"), list):
        return None
    serial = seen.get("process_group") is False or ((entry.get("world_size") or 1) == 1 and not seen["wrappers"])
    if serial or synchronises(seen) is False:
        return [0.0]
    values: list[float] = []
    for found in per_rank.values() if per_rank else [seen]:
        ddp = [w for w in found.get("wrappers") or () if isinstance(w, Mapping) and w.get("kind") == DDP]
        if not ddp or len(ddp) != len(found.get("wrappers") or ()):
            return None  # FSDP, ZeRO: no timers of their own
        lists = [w.get(key) or [] for w in ddp]
        if not all(lists):
            return None
        values += [sum(parts) for parts in zip(*lists)]
    return values or None


def _scale(reference: Mapping[str, Any], entry: Mapping[str, Any]) -> float:
    ref_batch, batch = reference.get("batch_size") or 0, entry.get("batch_size") or 0
    if reference.get("global_batch") and entry.get("global_batch") and ref_batch > 0 and batch > 0:
        return ref_batch / batch
    return 1.0


def grad_sync(entry: Mapping[str, Any], reference: Mapping[str, Any] | None,
              threads: Mapping[int, int] | None = None) -> dict[str, Any] | None:
    """A script configuration's gradient synchronisation as measured (``grad_sync`` in the summary), against the
    smallest N's (``reference``) where its step less data wait was compared with it; None where the probe did
    not look."""
    seen = entry.get("script") or {}
    if not isinstance(seen.get("wrappers"), list):
        return None
    wrappers = [w for w in seen["wrappers"] if isinstance(w, Mapping)]
    main = main_wrapper(seen)
    typical = typical_step(main) if main else None
    step = ((entry.get("stats") or {}).get("sec_iter") or {}).get("p50")
    found: dict[str, Any] = {
        "wrappers": len(wrappers),
        "kinds": sorted({str(w.get("kind")) for w in wrappers}),
        "site": main.get("site") if main else (wrappers[0].get("site") if wrappers else None),
        "via": main.get("via") if main else (wrappers[0].get("via") if wrappers else None),
        "synchronises": synchronises(seen),
        "collectives": seen.get("collectives"),
    }
    if main is not None:
        found.update(kind=main.get("kind"), steps=measured_steps(main) or None, micro_batches=typical[0] if typical else None,
                     syncs=typical[1] if typical else None,
                     every_micro_batch=bool(typical and typical[0] >= 2 and typical[1] == typical[0]),
                     comm_hook=main.get("comm_hook"))
    exposed = _exposed(entry)
    if exposed:
        found["exposed_comm_s"] = statistics.median(exposed)
        found["exposed_comm_range_s"] = [min(exposed), max(exposed)]
        backward = _exposed(entry, "backward_comm_s")
        found["backward_comm_s"] = statistics.median(backward) if backward else None
        found["exposed_comm_share"] = found["exposed_comm_s"] / step if step else None
    n = entry.get("world_size") or 1
    if threads:  # a thread sweep's or a thread try's own count, else the plan's at that N
        found["threads_per_rank"] = entry.get("threads") or threads.get(n)
    less = entry.get("step_less_wait") or {}
    if reference is None or reference.get("config_id") == entry.get("config_id") or less.get("ratio") is None:
        return found
    found["reference_world_size"] = reference.get("world_size")
    if threads:
        found["reference_threads_per_rank"] = reference.get("threads") or threads.get(reference.get("world_size") or 1)
    ref_exposed = _exposed(reference)
    ref_less = value_of((reference.get("step_less_wait") or {}).get("median_s"))
    if not exposed or not ref_exposed or not ref_less:
        return found
    scale = _scale(reference, entry)
    growth = statistics.median(exposed) * scale - statistics.median(ref_exposed)
    noise = (max(exposed) - min(exposed)) * scale + max(ref_exposed) - min(ref_exposed)
    ci = ci_of(less["ratio"])
    step_growth_low = (ci[0] - 1) * ref_less if ci else None
    found.update(reference_exposed_comm_s=statistics.median(ref_exposed), comm_growth_s=growth,
                 step_growth_low_s=step_growth_low)
    found["comm_grew"] = bool(growth > noise and growth > DEFAULT_MIN_EFFECT * ref_less and (
        step_growth_low is None or step_growth_low <= 0 or growth >= COMM_SHARE_OF_GROWTH * step_growth_low))
    return found


# -- in words ----------------------------------------------------------------------------------------------------


def site_words(site: str | None, via: str | None = None) -> str:
    """" at train.py:52" where the script made it; " (through accelerate/accelerator.py:2060)" after it where a
    library the script called made it."""
    return (f" at {site}" if site else "") + (f" (through {via})" if via else "")


def _fix_words(kind: str, k: int) -> str:
    """How a model of ``kind`` synchronises once over k micro-batches."""
    if kind == FULLY_SHARD:
        return (f"call model.set_requires_gradient_sync(False) before the first {k - 1} micro-batches and "
                "(True) before the last, to reduce its gradients once a step (the unsharded gradients are kept "
                "between: more memory)")
    text = f"wrap the first {k - 1} micro-batches' forward and backward in model.no_sync() to synchronise once a step"
    return text + (" (FSDP keeps the unsharded gradients between: more memory)" if kind == FSDP else "")


def every_micro_batch_words(sync: Mapping[str, Any]) -> str | None:
    """'gradients synchronised on every micro-batch: ...' with what it costs and the fix; None where the script
    synchronises fewer times than it runs micro-batches (it turns synchronisation off already) or runs one a
    step."""
    if not sync.get("every_micro_batch"):
        return None
    k, kind = int(sync["micro_batches"]), str(sync.get("kind") or DDP)
    text = (f"gradients synchronised on every micro-batch: {k} micro-batches a step, each synchronising its "
            f"gradients across the ranks ({kind} made{site_words(sync.get('site'), sync.get('via'))})")
    backward, exposed, share = sync.get("backward_comm_s"), sync.get("exposed_comm_s"), sync.get("exposed_comm_share")
    if backward is not None and exposed is not None:
        text += (f"; DDP's timers: its backward communication {units.milliseconds(backward)} a step, "
                 f"{units.milliseconds(exposed)} of it exposed" + (f" ({units.percent(share)} of the step)" if share else ""))
    return f"{text} — {_fix_words(kind, k)}"


def threads_words(sync: Mapping[str, Any], world_size: int) -> str | None:
    """Each rank's threads at the reference and at N, where ddptop's split of the cores changed them."""
    mine, ref = sync.get("threads_per_rank"), sync.get("reference_threads_per_rank")
    if not mine or not ref or mine == ref:
        return None
    return (f"each rank ran {ref} thread{'s' if ref != 1 else ''} at N={sync.get('reference_world_size')} and "
            f"{mine} at N={world_size} (ddptop split the cores among the ranks)")


def comm_words(sync: Mapping[str, Any]) -> str:
    """DDP's exposed communication a step here and at the reference, and how much of the growth it covers."""
    return (f"DDP's exposed communication (backward allreduce less its overlap with compute, its own timers) "
            f"{units.milliseconds(sync.get('exposed_comm_s'))} a step against "
            f"{units.milliseconds(sync.get('reference_exposed_comm_s'))} at N={sync.get('reference_world_size')}")


def seen_lines(seen: Mapping[str, Any] | None) -> list[str]:
    """The wrappers as the report lists them: kind, where made, its arguments, and per counted model the
    synchronisations and micro-batches of its measured steps."""
    lines = []
    for wrapper in (seen or {}).get("wrappers") or ():
        if not isinstance(wrapper, Mapping):
            continue
        args = ", ".join(f"{k}={v}" for k, v in (wrapper.get("args") or {}).items())
        line = f"{wrapper.get('kind')}{site_words(wrapper.get('site'), wrapper.get('via'))}" + (f" ({args})" if args else "")
        if (wrapper.get("modules") or 1) > 1:
            line += f" on {wrapper['modules']} modules"
        if wrapper.get("rewrapped"):
            line += ", wrapping a model another wrapper already holds"
        if wrapper.get("comm_hook"):
            line += f", comm hook {wrapper['comm_hook']}"
        kind, steps = wrapper.get("kind"), wrapper.get("sync_steps")
        if kind == ZERO:
            line += ": shards the optimizer's state; it synchronises no gradient itself"
        elif not steps:  # counting failed, a compiled forward, or a probe that did not count this kind
            line += ": its synchronisations not counted"
        elif kind != DDP and not any(micro for micro, _, _ in steps):
            line += ": ran no forward as the root in the measured steps (an inner module's are counted on its root)"
        else:
            line += ": " + ", ".join(f"{syncs} sync{'s' if syncs != 1 else ''} over {micro} micro-batch"
                                     f"{'es' if micro != 1 else ''} a step ({n} step{'s' if n != 1 else ''})"
                                     for micro, syncs, n in steps)
        lines.append(line)
    if (seen or {}).get("wrappers_incomplete"):
        lines.append("the probe may have missed models wrapped for data parallelism (more than it keeps, or a hook "
                     "that failed: its notes say)")
    elif isinstance((seen or {}).get("wrappers"), list) and not seen["wrappers"] and (  # type: ignore[index]
            (seen or {}).get("launch_world_size") or 1) > 1:  # one rank alone needs none
        lines.append("no model wrapped for data parallelism (DistributedDataParallel, FSDP, ZeroRedundancyOptimizer)")
    if (seen or {}).get("collectives"):
        lines.append(f"{seen['collectives']} collective calls of its own in the measured steps")  # type: ignore[index]
    return lines
