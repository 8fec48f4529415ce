"""What ``ddptop tune -- train.py`` tries on a script, chosen from what its first run measured (the script as
written, one launch at the tune's world size): only what can help a step held back the way this one is, each try
with why it was chosen, and every kind of setting not tried with why not.

- **the loader's settings**, where the step waited for its batches at least ``INPUT_BOUND_SHARE`` of its time: on
  the training loader (the loader whose batches the steps drew most, by the line that made it), ``num_workers``
  up to the cores a rank has (with ``persistent_workers``), ``persistent_workers`` and a larger
  ``prefetch_factor`` where it has workers, ``pin_memory`` on a GPU;
- **DDP's settings**, where a DDP model synchronised across more than one rank and its exposed communication
  (its own timers: backward communication less its overlap with compute) was at least ``COMM_SHARE`` of the
  step, or was not measured: the bucket size, ``gradient_as_bucket_view``, and ``static_graph`` unless DDP's own
  logging data says the graph cannot be static;
- ``find_unused_parameters=False`` where the script sets it True: its graph walk costs every step; should a
  parameter go unused after all, DDP refuses and the try is "not applicable" with its error;
- **no_sync**, where a DDP model synchronised on every one of k micro-batches a step;
- **CPU threads**, where CPU ranks ran another count than their share of the cores (torchrun's 1 a rank, or the
  environment's OMP_NUM_THREADS): that share, unless the script sets its own with ``torch.set_num_threads``.

A try the user names (``--variants``) is tried as named; the loader's tries still need the first run to find the
training loader. Standard library only (the sweep's runner calls it between launches).
"""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ddptop import units
from ddptop.analysis import script_steps, script_sync
from ddptop.analysis.script_steps import INPUT_BOUND_SHARE
from ddptop.protocol import loader_target
from ddptop.protocol import variants as catalog
from ddptop.protocol.loader_target import MATCHED, SETTINGS

# DDP's static graph with micro-batches run under no_sync(): its first backward fails an internal assert, and where
# that is worked around its gradients stop being all-reduced (pytorch/pytorch#187732, open in torch 2.14)
STATIC_BREAKS = ("DDP's static graph does not support micro-batches under no_sync(): its first backward fails "
                 "(expect_autograd_hooks_), and a torch that gets past it stops all-reducing the gradients "
                 "(pytorch/pytorch#187732)")
STATIC_WITH_NO_SYNC = f"the script runs micro-batches without synchronising (no_sync()); {STATIC_BREAKS}"
COMM_SHARE = 0.05  # exposed communication at least this share of the step: DDP's settings may shorten the step
MORE_PREFETCH = 4  # the prefetch_factor tried where a loader with workers prefetches fewer (torch's default is 2)

# the kinds of setting, as the report names what was not tried
LOADER, DDP_SETTINGS, NO_SYNC = "the loader's settings", "DDP's settings", "no_sync"
THREADS = "CPU threads"


@dataclass
class Facts:
    """What the script's first run measured that the choice goes by."""

    world_size: int
    device: str  # cpu or cuda
    cores_per_rank: int
    step_s: float | None  # the median step
    data_wait_share: float | None  # of the step, the ranks' timed waits for batches pooled
    seen: Mapping[str, Any]  # config_end.script of rank 0
    threads_per_rank: int = 0  # on the CPU, the threads the launch gave each rank (0: on GPUs)
    threads_from: str = ""  # where that count came from (plan_devices.as_written_threads)


@dataclass
class Choice:
    tries: dict[str, str] = field(default_factory=dict)  # variant name -> why it is tried
    not_tried: dict[str, str] = field(default_factory=dict)  # kind of setting -> why not
    loader_site: str = ""  # the training loader's line, where the loader's settings are tried


def training_loader(seen: Mapping[str, Any]) -> tuple[Mapping[str, Any], str] | None:
    """The loader the steps drew most batches from, and the target the probe sets a try on: its line, or its line
    and its settings as the script gave them where another loader made at that line has other settings (an
    evaluation loader from the same helper; ``protocol.loader_target``)."""
    loaders = [r for r in seen.get("loaders") or () if isinstance(r, Mapping) and (r.get("batches") or 0) > 0]
    if not loaders:
        return None
    best = max(loaders, key=lambda r: r.get("batches") or 0)
    at = str(best.get("at") or "")
    if not at:
        return None
    others = [r for r in seen.get("loaders") or () if isinstance(r, Mapping) and r.get("at") == at
              and any(r.get(k) != best.get(k) for k in MATCHED)]
    return best, loader_target.target(at, best if others else None)


def script_loader_lines(seen: Mapping[str, Any]) -> list[str]:
    """Where a library's line made the training loader (Lightning makes it again from the one the script's
    train_dataloader() returns; accelerate's prepare() wraps the script's): the lines of the script's own code
    that made or led to a loader with the same settings that no batch was drawn from, the candidates for the
    script's own call (``script_patch.loader_call`` tells which holds a DataLoader call); none where the script's
    own loader made the steps."""
    found = training_loader(seen)
    if found is None or not found[0].get("library"):
        return []
    training = found[0]
    lines = []
    for record in seen.get("loaders") or ():
        if (isinstance(record, Mapping) and not record.get("batches")
                and all(record.get(k) == training.get(k) for k in SETTINGS)):
            line = str(record.get("from") if record.get("library") else record.get("at"))
            if line not in lines:
                lines.append(line)
    return lines


def _loader_tries(facts: Facts, choice: Choice, asked: Sequence[str] | None) -> None:
    share = facts.data_wait_share
    found = training_loader(facts.seen)
    if found is None:
        if asked is None or any(catalog.variant(n).loader_kwargs for n in asked):
            choice.not_tried[LOADER] = ("no DataLoader made the steps' batches (the probe times "
                                        "torch.utils.data.DataLoader's)")
        return
    loader, target = found
    choice.loader_site = target
    if asked is not None:
        return
    if share is None:
        choice.not_tried[LOADER] = "the steps' waits for batches were not timed"
        return
    if share < INPUT_BOUND_SHARE:
        choice.not_tried[LOADER] = (f"the steps waited for their batches {units.percent(share)} of their time, under "
                                    f"{units.percent(INPUT_BOUND_SHARE)}: the loader does not hold the step back")
        return
    why = f"the steps waited for their batches {units.percent(share)} of their time ({loader.get('at')})"
    found_workers = loader.get("num_workers")
    workers = found_workers if isinstance(found_workers, int) else 0
    cores = max(1, facts.cores_per_rank)
    more = sorted({n for n in (max(1, cores // 2), cores) if n > workers})
    for n in more:
        choice.tries[f"{catalog.WORKERS}{n}"] = (f"{why}, made with num_workers={workers}; each rank has {cores} "
                                                 f"core{'s' if cores != 1 else ''}")
    if not more:
        choice.not_tried["num_workers"] = f"the loader has {workers} workers already, each rank {cores} cores"
    if workers > 0 and not loader.get("persistent_workers"):
        choice.tries[catalog.PERSISTENT] = f"{why}; its workers start again at every pass over the data"
    prefetch = loader.get("prefetch_factor")
    if workers > 0 and isinstance(prefetch, int) and prefetch < MORE_PREFETCH:
        choice.tries[f"{catalog.PREFETCH}{MORE_PREFETCH}"] = f"{why}; each worker holds {prefetch} batches ahead"
    if facts.device == "cuda" and not loader.get("pin_memory"):
        choice.tries[catalog.PIN_MEMORY] = f"{why}; its batches are copied to the GPU from pageable memory"
    elif facts.device != "cuda":
        choice.not_tried[catalog.PIN_MEMORY] = "pinned memory speeds copies to a GPU only"


def _exposed_share(ddp: Mapping[str, Any], step_s: float | None) -> float | None:
    exposed = script_sync.per_step(ddp, "backward_comm_s", "backward_compute_comm_overlap_s")
    return exposed / step_s if exposed is not None and step_s else None


def _ddp_tries(facts: Facts, choice: Choice) -> None:
    ddp = script_sync.main_wrapper(facts.seen, (script_sync.DDP,))
    if ddp is None:
        kinds = sorted({str(w.get("kind")) for w in facts.seen.get("wrappers") or () if isinstance(w, Mapping)})
        made = f"it made {', '.join(kinds)}" if kinds else "it made no model for data parallelism"
        alone = script_steps.data_parallel_problem(facts.seen)  # its ranks each train alone: said first
        choice.not_tried[DDP_SETTINGS] = (f"{alone + '; ' if alone else ''}the script made no DistributedDataParallel "
                                          f"model ({made})")
        return
    given = ddp.get("args")
    args: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    site = script_sync.site_words(ddp.get("site"), ddp.get("via")).strip()
    if args.get("find_unused_parameters") == "True":
        choice.tries[catalog.UNUSED_OFF] = (f"the script sets find_unused_parameters=True ({site}): DDP walks the "
                                            "autograd graph for unused parameters every step")
    typical = script_sync.typical_step(ddp)
    static = args.get("static_graph") == "True"
    every = typical is not None and typical[0] > 1 and typical[1] == typical[0]  # each micro-batch synchronised
    if every and static:
        choice.not_tried[NO_SYNC] = f"the script sets static_graph=True ({site}); {STATIC_BREAKS}"
    elif every and typical is not None:
        choice.tries[f"{catalog.NO_SYNC}{typical[0]}"] = (f"its {typical[0]} micro-batches a step each synchronised "
                                                          f"their gradients ({site})")
    elif typical is not None and typical[0] > 1:
        choice.not_tried[NO_SYNC] = (f"the script synchronises {typical[1]} time{'s' if typical[1] != 1 else ''} over "
                                     f"{typical[0]} micro-batches already")
    if facts.world_size < 2:
        choice.not_tried[DDP_SETTINGS] = "one rank has no gradients to exchange"
        return
    share = _exposed_share(ddp, facts.step_s)
    if share is not None and share < COMM_SHARE:
        choice.not_tried[DDP_SETTINGS] = (f"DDP's exposed communication was {units.percent(share)} of the step (its "
                                          f"timers), under {units.percent(COMM_SHARE)}: little for its buckets to win")
        return
    why = (f"DDP's exposed communication was {units.percent(share)} of the step (its timers)" if share is not None
           else "DDP's exposed communication was not measured (no timers)")
    given_cap = args.get("bucket_cap_mb")
    for name in ("bucket_cap_mb_10", "bucket_cap_mb_100"):
        if given_cap is None or float(catalog.variant(name).bucket_cap_mb or 0) != _float(given_cap):
            choice.tries[name] = why
    if args.get("gradient_as_bucket_view") != "True":
        choice.tries["gradient_as_bucket_view"] = f"{why}; and it saves a copy of every gradient"
    if static:
        return
    if typical is not None and typical[1] < typical[0]:
        choice.not_tried["static_graph"] = STATIC_WITH_NO_SYNC
    elif ddp.get("can_set_static_graph") is False:
        choice.not_tried["static_graph"] = "DDP's logging data says the graph cannot be static (can_set_static_graph)"
    else:
        choice.tries["static_graph"] = why


def _float(text: Any) -> float | None:
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def choose(facts: Facts, asked: Sequence[str] | None = None) -> Choice:
    """The tries for a script from its first run (``asked``: the ones the user named, tried as named, their
    loader's line found)."""
    choice = Choice()
    _loader_tries(facts, choice, asked)
    if asked is not None:
        choice.tries = {name: "asked for (--variants)" for name in asked}
        return choice
    _ddp_tries(facts, choice)
    _thread_tries(facts, choice)
    return choice


def _thread_tries(facts: Facts, choice: Choice) -> None:
    """On the CPU, the ranks' share of the cores where the script ran with another thread count: fewer leave
    cores idle, more oversubscribe them (the script's own torch.set_num_threads is its choice, not tried)."""
    if facts.device != "cpu" or not facts.threads_per_rank:
        choice.not_tried[THREADS] = "the ranks train on GPUs"
        return
    given, share = facts.threads_per_rank, facts.cores_per_rank
    ran = facts.seen.get("threads")
    if isinstance(ran, int) and ran != given:
        choice.not_tried[THREADS] = (f"the script sets its own thread count (torch.set_num_threads({ran}) in place "
                                     f"of the launch's {given})")
        return
    origin = f" ({facts.threads_from})" if facts.threads_from else ""
    if given == share:
        choice.not_tried[THREADS] = f"each rank ran its share of the cores already: {_threads(given)}{origin}"
        return
    how = "left cores idle" if given < share else "oversubscribed the cores"
    choice.tries[f"{catalog.THREADS}{share}"] = (f"each rank ran {_threads(given)}{origin}, which {how}: its share "
                                                 f"of the cores ddptop may use is {share}")


def _threads(count: int) -> str:
    return f"{count} thread{'s' if count != 1 else ''}"


def median_step(samples: Mapping[Any, Sequence[float]]) -> float | None:
    values = [v for steps in samples.values() for v in steps]
    return statistics.median(values) if values else None
