"""What to run: a sweep of models x batch sizes x world sizes x backends, validated before anything starts.

A plan comes from command-line flags, a TOML file (same keys, underscores), or both (flags win); the options
themselves are defined once in ``ddptop.run.options``. ``build_plan`` resolves each group of them for this
machine in one small step; every problem is reported as one ``PlanError`` line and nothing is launched for
an invalid plan. The result is a ``ddptop.run.model.Plan``.

Batch semantics: with weak scaling (the default, as in PyTorch's DDP benchmark) each batch size is per rank
and the global batch grows with N; with strong scaling each batch size is the global batch, split evenly
over the N ranks, so it must divide by every world size.
"""

from __future__ import annotations

import os
import tomllib
from argparse import ArgumentTypeError
import dataclasses
from dataclasses import fields
from typing import Any

from bench_kernels.collectives import OPS as COLLECTIVE_OPS
from bench_kernels.collectives import parse_size
from bench_kernels.faults import FaultSpecError, parse_fault
from ddptop.errors import DdptopError
from ddptop.run import allocation
from ddptop.run.model import ConfigSpec, Launch, Plan
from ddptop.run.options import AMP_DTYPES, AUTO, BACKENDS, DEVICES, OPTIONS_BY_NAME, PlanOptions, toml_types
from ddptop.protocol import strategies as strategies_mod
from ddptop.protocol import variants as variants_mod
from ddptop.protocol.vocab import OnFailure, Scaling
from ddptop.protocol.catalog import TRANSFORMER_PRESETS
from ddptop.protocol.modelspec import (KINDS, Kind, ModelSpec, SpecError, parse_spec, registered, seq_len_of,
                                      seq_len_problem, spec_label)
from ddptop.protocol.workload import WorkloadFacts
from ddptop.telemetry.inventory import Inventory, devices_for

# Launches per configuration. Two are the fewest that measure the launch-to-launch spread; three are the
# fewest that see a 10% slowdown across 3% launch offsets in 80% of comparisons (two: about half), for about
# 6% more wall time than two on the default CPU plan (benchmarks/launch_cost.py, tests/test_launches.py).
DEFAULT_LAUNCHES = 3

__all__ = [  # ConfigSpec, Launch, Plan and PlanOptions live in ddptop.run.model and ddptop.run.options
    "ConfigSpec", "Launch", "Plan", "PlanError", "PlanOptions", "build_plan", "default_world_sizes",
    "read_plan_file", "usable_cpu_count",
]


class PlanError(DdptopError):
    """An invalid plan; the message is one line for the user."""


def default_world_sizes(device_count: int) -> list[int]:
    """1, 2, 4, ... up to the devices there are, plus the device count itself (e.g. 1,2,4,6 for 6 GPUs)."""
    sizes, n = [], 1
    while n <= device_count:
        sizes.append(n)
        n *= 2
    if device_count and sizes[-1] != device_count:
        sizes.append(device_count)
    return sizes


def _spanning_world_sizes(one_node: list[int], per_node: int, nnodes: int) -> list[int]:
    """One node's sizes up to its ranks per node, then whole nodes: 2, 4, ... and all of them (the 1M/1G ...
    1M/8G, 2M/8G rows of PyTorch's DDP benchmark)."""
    sizes = [n for n in one_node if n <= per_node]
    if per_node not in sizes:
        sizes.append(per_node)
    nodes = 2
    while nodes < nnodes:
        sizes.append(nodes * per_node)
        nodes *= 2
    if nnodes > 1:
        sizes.append(nnodes * per_node)
    return sizes


def usable_cpu_count(proc_root: str = "/") -> int:
    """The cores ddptop may use: its affinity (a SLURM job's or a container's cpuset), and no more than its
    cgroup's CPU time quota allows (``docker --cpus``, a Kubernetes limit: a quota of 2.5 cores is 2), so the
    ranks' threads never outnumber the CPU time the job has."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cores = os.cpu_count() or 1
    quota, _ = allocation.cpu_quota(proc_root)
    return min(cores, max(1, int(quota))) if quota is not None else cores


def _unique(values: list[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def build_plan(options: PlanOptions, inventory: Inventory, cpu_count: int | None = None) -> Plan:
    """Resolve defaults for this machine and validate; raise PlanError with one line on any problem.

    The steps run in a fixed order, so a plan with several problems always reports the same one first.
    """
    cpu_count = cpu_count or usable_cpu_count()
    device, devices, devices_skipped = _resolve_devices(options, inventory)
    on_gpu = device == "cuda"
    gpus = _resolve_gpus(options.gpus, device, len(inventory.usable_gpus))
    devices_per_node = (len(gpus) if gpus else len(inventory.usable_gpus)) if on_gpu else cpu_count

    specs = _parse_models(options.models or (["resnet50"] if on_gpu else ["resnet18"]))
    models = tuple(spec.text for spec in specs)
    batch_sizes = _unique(options.batch_sizes or ([32] if on_gpu else [16]))
    one_node_sizes = default_world_sizes(devices_per_node) if on_gpu else [1, 2]
    if options.tune:
        options = _tune_options(options, one_node_sizes, on_gpu)
    if options.search_budget is not None and not options.search_budget > 0:
        raise PlanError(f"--search-budget must be a positive number of seconds (got {options.search_budget:g})")
    nnodes = options.nnodes
    per_node = _ranks_per_node(nnodes, options.nproc_per_node, on_gpu, devices_per_node) or max(one_node_sizes)
    world_sizes = _unique(options.world_sizes or _spanning_world_sizes(one_node_sizes, per_node, nnodes))
    image_size = options.image_size or (224 if on_gpu else 64)
    measurement = _resolve_measurement(options, on_gpu)
    iters = measurement["iters"]

    scaling = _resolve_scaling(options.scaling)
    backends = _resolve_backends(options.backend, on_gpu)
    rank_devices, per_rank_devices = _rank_devices(inventory, gpus, on_gpu)
    backends = _check_mig(inventory, gpus, rank_devices, per_rank_devices, backends, options, world_sizes)
    _check_models(specs, image_size, options.num_classes)
    _check_sequences(specs, options.seq_len, options.image_size)
    _check_batch_sizes(batch_sizes)
    _check_world_sizes(world_sizes, batch_sizes, scaling, nnodes, per_node, on_gpu, devices_per_node)
    caps = _resolve_bucket_caps(options.bucket_cap_mb)
    batch_sizes = _resolve_batch_sweep(batch_sizes, options, on_gpu)
    if options.memory_cap_mb is not None and options.memory_cap_mb <= 0:
        raise PlanError(f"--memory-cap-mb must be positive (got {options.memory_cap_mb:g})")
    comm_iters = _resolve_comm_iters(options.comm_iters, iters if iters is not None else (50 if on_gpu else 20))
    trace_steps = 3 if options.trace_steps is None else options.trace_steps
    if trace_steps < 0:
        raise PlanError(f"--trace-steps cannot be negative (got {trace_steps})")
    collectives = _resolve_collectives(options, on_gpu)
    _check_gloo_collectives(collectives["collectives"], backends, on_gpu)
    _check_report_settings(options)
    _check_amp(options.amp, on_gpu)
    _check_cost_settings(options)
    threads = _threads_per_rank(options.threads_per_rank, cpu_count, world_sizes, nnodes, per_node)
    thread_counts = _check_threads(options, inventory, cpu_count, nnodes, devices)
    cpu_grid = _cpu_grid(thread_counts, world_sizes, cpu_count, device, devices)
    on_failure = _check_fault_handling(options)
    if options.compare_dp and not any(n > 1 for n in world_sizes):
        raise PlanError("--compare-dp needs a world size above 1 to compare at")

    resolved: dict[str, Any] = dict(
        models=models,
        batch_sizes=batch_sizes,
        world_sizes=world_sizes,
        scaling=scaling,
        backends=backends,
        device=device,
        gpus=gpus,
        image_size=image_size,
        **measurement,
        bucket_cap_mb=caps,
        threads_per_rank=threads,
        name=options.name or f"{'-'.join(spec_label(m) for m in models)}-{scaling}",
        comm_iters=comm_iters,
        trace_steps=trace_steps,
        **collectives,
        inject=tuple(options.inject or ()),
        hang_timeout=float(options.hang_timeout),
        on_failure=on_failure,
        nnodes=nnodes,
        nproc_per_node=per_node if nnodes > 1 else 0,
        rank_devices=rank_devices,
        per_rank_devices=per_rank_devices,
        **_resolve_variants(options.variants, on_gpu),
        # a preset's own length unless --seq-len; an hf model or a factory gets --seq-len where given
        seq_lens={s.text: n for s in specs if (n := seq_len_of(s, options.seq_len)) is not None},
        strategies=_resolve_strategies(options.strategies),
        hf_config=_check_hf_config(options.hf_config, specs),
        tokens_per_example={}, workloads={}, variant_reasons={},  # apply_facts' below, and the check's
        threads=thread_counts,
        cpu_grid=cpu_grid,
        cpu_cores=cpu_count,
        devices=devices,
        devices_skipped=devices_skipped,
    )
    # Every other field of the plan is the option as given (num_classes, amp, the cost weights, ...).
    kept = {f.name: getattr(options, f.name) for f in fields(Plan) if f.name not in resolved}
    return apply_facts(Plan(**resolved, **kept), {})


NO_IMAGES = "its batch holds no 4-D image tensor, so channels_last would measure DDP as written"
UNUSED_SET = "the workload sets find_unused_parameters=True already, so the variant would measure DDP as written"


def apply_facts(plan: Plan, facts: dict[str, WorkloadFacts]) -> Plan:
    """The plan with what is known of its models: each built-in's facts from its kind (``modelspec.KINDS``) and
    ``facts``, what the check of each factory and hf model found (``ddptop.run.workloads``): each one's tokens
    per example, and channels_last left out, with its reason, where no model's batch holds images (a factory
    not checked yet counts as an image model)."""
    known = {m: f for m in plan.models if (f := registered(m).facts(parse_spec(m), plan.seq_lens.get(m))) is not None}
    known.update(facts)
    tokens = {m: f.tokens_per_example for m, f in known.items() if f.tokens_per_example}
    without_images = [m for m in plan.models
                      if not (known[m].image_input if m in known else registered(m).image_input is not False)]
    if plan.channels_last and without_images:
        raise PlanError(f"--channels-last: {', '.join(without_images)}: {NO_IMAGES.split(', so')[0]}")
    variants, reasons = plan.variants, dict(plan.variant_reasons)
    if len(without_images) == len(plan.models):
        reasons.update({v: NO_IMAGES for v in variants if variants_mod.variant(v).channels_last})
    if plan.models and all(m in facts and facts[m].find_unused_parameters for m in plan.models):
        reasons.update({v: UNUSED_SET for v in variants if v == "find_unused_parameters"})
    variants = tuple(v for v in variants if v not in reasons)
    return dataclasses.replace(
        plan, tokens_per_example=tokens, variants=variants, variant_reasons=reasons,
        variants_skipped=plan.variants_skipped + tuple(v for v in reasons if v not in plan.variants_skipped),
        workloads={**plan.workloads, **{m: f.to_json() for m, f in facts.items()}})


# the whole search's default time budget (seconds): a tune of the default plan's model on 2 CPU cores takes
# about 5 minutes with every variant; a GPU node's 8 ranks and larger model, longer setups
SEARCH_BUDGET = {False: 600.0, True: 1800.0}


def _tune_options(options: PlanOptions, one_node_sizes: list[int], on_gpu: bool) -> PlanOptions:
    """ddptop tune's plan: the default (or given) model and batch at the largest world size of the node (or
    the one given), every variant of the catalog unless some are named; no no-DDP baseline, and no
    communication analysis, collective benchmark or traces unless asked (the first two time the default DDP,
    not a variant; the search keeps its time for the variants)."""
    return dataclasses.replace(
        options,
        models=(options.models or [])[:1] or None,
        batch_sizes=(options.batch_sizes or [])[:1] or None,
        world_sizes=options.world_sizes or [max(one_node_sizes)],
        baseline=False,
        comm_iters=0 if options.comm_iters is None else options.comm_iters,
        trace_steps=0 if options.trace_steps is None else options.trace_steps,
        collectives=[] if options.collectives is None else options.collectives,
        variants=options.variants or _default_tune_variants(options.models or []),
        search_budget=options.search_budget or SEARCH_BUDGET[on_gpu],
        name=options.name or "tune",
    )


def _default_tune_variants(models: list[str]) -> list[str]:
    """Every variant of the catalog (channels_last is left out with its reason for a model without image
    inputs: ``apply_facts``)."""
    return list(variants_mod.DEFAULT_TUNE)


def _resolve_variants(names: list[str] | None, on_gpu: bool) -> dict[str, tuple[str, ...]]:
    """The DDP variants to measure, the default first, and those left out on the CPU (autocast is measured on
    GPUs only; the summary says so); an unknown name is one line listing the known."""
    chosen = [variants_mod.DEFAULT]
    skipped: list[str] = []
    for name in names or ():
        if name not in variants_mod.CATALOG:
            raise PlanError(f"--variants: unknown variant {name!r} (known: {', '.join(variants_mod.CATALOG)})")
        target = skipped if variants_mod.CATALOG[name].cuda_only and not on_gpu else chosen
        if name not in target:
            target.append(name)
    return {"variants": tuple(chosen), "variants_skipped": tuple(skipped)}


def _resolve_strategies(names: list[str] | None) -> tuple[str, ...]:
    """The data-parallel strategies to measure, DDP first (always: the reference the others are read
    against); an unknown name is one line listing the known."""
    chosen = [strategies_mod.DDP]
    for name in names or ():
        if name not in strategies_mod.CATALOG:
            raise PlanError(f"--strategies: unknown strategy {name!r} (known: {', '.join(strategies_mod.CATALOG)})")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def _resolve_device(device: str, inventory: Inventory) -> str:
    """auto is cuda where a GPU is usable, else cpu."""
    if device not in DEVICES:
        raise PlanError(f"--device must be one of {', '.join(DEVICES)} (got {device!r})")
    usable = inventory.usable_gpus
    if device == "cuda" and not usable:
        raise PlanError(f"--device cuda, but no GPU is usable: {inventory.usable_problem}")
    return device if device != "auto" else ("cuda" if usable else "cpu")


COMPARED_DEVICES = ("cpu", "cuda")


def _resolve_devices(options: PlanOptions, inventory: Inventory) -> tuple[str, tuple[str, ...], dict[str, str]]:
    """The plan's device, the devices compared (--devices cpu,cuda) and those left out with the reason: the
    GPUs run the plan's usual sweep and the CPU its split of the cores beside them; without a usable GPU the
    plan is the CPU part alone, and says why."""
    asked = _unique(options.devices or [])
    if not asked:
        return _resolve_device(options.device, inventory), (), {}
    unknown = [d for d in asked if d not in COMPARED_DEVICES]
    if unknown or len(asked) != 2:
        raise PlanError(f"--devices compares the CPU with the GPUs: cpu,cuda (got {','.join(asked)}; one "
                        "device: --device)")
    if options.device != AUTO:
        raise PlanError("--device and --devices together: --devices cpu,cuda already names both")
    if inventory.usable_gpus:
        return "cuda", tuple(COMPARED_DEVICES), {}
    return "cpu", ("cpu",), {"cuda": f"no GPU is usable: {inventory.usable_problem}"}


def _check_threads(options: PlanOptions, inventory: Inventory, cpu_count: int, nnodes: int,
                   devices: tuple[str, ...]) -> tuple[int, ...]:
    """The thread counts of --threads, each at least 1 and at most the usable cores."""
    counts = tuple(sorted(_unique(options.threads or [])))
    asked = "--threads" if counts else "--devices"
    if (counts or devices) and nnodes > 1:
        raise PlanError("--threads and --devices measure one node: drop --nnodes")
    if (counts or devices) and options.tune:
        raise PlanError("ddptop tune measures one split of one device: drop --threads and --devices")
    # each of these compares configurations of one device and one thread count: not across a thread sweep
    for name, given in (("--strategies", [s for s in options.strategies or [] if s != strategies_mod.DDP]),
                        ("--variants", [v for v in options.variants or [] if v != variants_mod.DEFAULT]),
                        ("--compare-dp", options.compare_dp)):
        if (counts or devices) and given:
            raise PlanError(f"{name} and {asked} are measured one at a time: run them as two sweeps")
    if counts and not devices and _resolve_device(options.device, inventory) == "cuda":
        raise PlanError("--threads sweeps CPU ranks: add --device cpu, or --devices cpu,cuda for the GPUs beside")
    if counts and options.threads_per_rank is not None:
        raise PlanError("--threads sweeps the threads per rank: drop --threads-per-rank")
    for count in counts:
        if not 1 <= count <= cpu_count:
            raise PlanError(f"--threads {count}: each count must be 1 to the {cpu_count} usable cores")
    return counts


def _cpu_grid(threads: tuple[int, ...], world_sizes: tuple[int, ...], cpu_count: int, device: str,
              devices: tuple[str, ...]) -> tuple[tuple[int, int], ...]:
    """The (ranks, threads per rank) splits measured on the CPU: every pair whose cores fit those usable (a
    thread sweep), or each world size at its share of the cores (the CPU part of --devices without
    --threads). Empty when the CPU runs the plan's usual sweep."""
    cpu_part = device == "cuda" and "cpu" in devices
    if not threads and not cpu_part:
        return ()
    # the CPU part keeps the GPUs' world sizes whose ranks fit the cores; a CPU plan's are the user's own
    sizes = [n for n in world_sizes if n * min(threads or (1,)) <= cpu_count] if cpu_part else list(world_sizes)
    if not threads:
        return tuple((n, max(1, cpu_count // n)) for n in sizes)
    grid = tuple((n, t) for n in sizes for t in threads if n * t <= cpu_count)
    unplaced = [n for n in sizes if not any(size == n for size, _ in grid)]
    if unplaced or not grid:
        n = (unplaced or sizes or [0])[0]
        raise PlanError(f"--world-sizes {n} with --threads {min(threads)}: {n * min(threads)} cores, more than "
                        f"the {cpu_count} usable")
    return grid


def _resolve_gpus(indices: list[int] | None, device: str, visible: int) -> tuple[int, ...] | None:
    """The GPUs chosen with --gpus (None: every usable one)."""
    if indices is None:
        return None
    if device != "cuda":
        raise PlanError("--gpus needs GPUs, but this plan runs on the CPU")
    if len(set(indices)) != len(indices):
        raise PlanError(f"--gpus lists a GPU twice: {','.join(map(str, indices))}")
    for index in indices:
        if not 0 <= index < visible:
            raise PlanError(f"--gpus {index}: only GPUs 0..{visible - 1} are visible")
    return tuple(indices)


def _chosen_gpus(inventory: Inventory, gpus: tuple[int, ...] | None) -> list[Any]:
    usable = list(inventory.usable_gpus)
    return usable if gpus is None else [usable[p] for p in gpus]


def _rank_devices(inventory: Inventory, gpus: tuple[int, ...] | None, on_gpu: bool) -> tuple[tuple[str, ...], bool]:
    """Each local rank's device by UUID (from NVML), and whether each rank must see only its own (MIG)."""
    return devices_for(inventory, gpus) if on_gpu else ((), False)


def _check_mig(inventory: Inventory, gpus: tuple[int, ...] | None, rank_devices: tuple[str, ...],
               per_rank: bool, backends: tuple[str, ...], options: PlanOptions,
               world_sizes: tuple[int, ...]) -> tuple[str, ...]:
    """MIG instances: one per rank; NCCL will not put two ranks on instances of one GPU, DataParallel cannot
    drive them. With --backend auto such a plan uses gloo (which runs on CUDA tensors by host copies)."""
    if not per_rank:
        return backends
    if options.compare_dp:
        raise PlanError("--compare-dp: DataParallel drives several GPUs from one process, but a process may use "
                        "only one MIG instance")
    chosen = _chosen_gpus(inventory, gpus)
    largest = max((n for n in world_sizes), default=1)
    parents = [gpu.index for gpu in chosen[:largest]]
    if "nccl" not in backends or len(set(parents)) == len(parents):
        return backends
    if "nccl" in options.backend:
        raise PlanError("--backend nccl: NCCL does not run several ranks on MIG instances of one GPU; "
                        "use --backend gloo, or whole GPUs")
    return _unique(["gloo" if b == "nccl" else b for b in backends])


def _ranks_per_node(nnodes: int, per_node: int | None, on_gpu: bool, devices_per_node: int) -> int | None:
    """--nproc-per-node, checked against --nnodes and this node's devices (None: the default)."""
    if nnodes < 1:
        raise PlanError(f"--nnodes must be at least 1 (got {nnodes})")
    if per_node is not None:
        if per_node < 1:
            raise PlanError(f"--nproc-per-node must be at least 1 (got {per_node})")
        if on_gpu and per_node > devices_per_node:
            raise PlanError(f"--nproc-per-node {per_node}: only {devices_per_node} GPUs are usable on this node")
        if nnodes == 1:
            raise PlanError("--nproc-per-node only applies with --nnodes above 1")
    return per_node


def _resolve_scaling(scaling: str) -> Scaling:
    if scaling not in tuple(Scaling):
        raise PlanError(f"--scaling must be weak or strong (got {scaling!r})")
    return Scaling(scaling)


def _resolve_backends(requested: list[str], on_gpu: bool) -> tuple[str, ...]:
    """auto is nccl on GPUs and gloo on the CPU; a list sweeps them."""
    backends = []
    for backend in requested:
        if backend not in BACKENDS:
            raise PlanError(f"--backend must be auto, nccl or gloo (got {backend!r})")
        if backend == "nccl" and not on_gpu:
            raise PlanError("--backend nccl needs GPUs; use gloo (or auto) on the CPU")
        backends.append(backend if backend != "auto" else ("nccl" if on_gpu else "gloo"))
    return _unique(backends)


def _parse_models(given: list[str]) -> tuple[ModelSpec, ...]:
    """Each model spec parsed once (a factory file's path made absolute against this working directory, the
    check's and the ranks' alike), in order, each once."""
    specs: dict[str, ModelSpec] = {}
    for text in given:
        try:
            spec = parse_spec(text)
        except SpecError as exc:
            raise PlanError(str(exc)) from None
        specs.setdefault(spec.text, spec)
    return tuple(specs.values())


def _check_models(specs: tuple[ModelSpec, ...], image_size: int, num_classes: int) -> None:
    if not specs:
        raise PlanError("--models is empty")
    if image_size < 1:
        raise PlanError(f"--image-size must be positive (got {image_size})")
    if num_classes < 1:
        raise PlanError(f"--num-classes must be positive (got {num_classes})")
    for spec in specs:
        reason = KINDS[spec.kind].problem(spec, image_size)
        if reason:
            raise PlanError(reason)


def _check_sequences(specs: tuple[ModelSpec, ...], seq_len: int | None, image_size: int | None) -> None:
    """--seq-len is the transformer models' (each takes up to its context length), the hf models' and a
    factory's that takes a seq_len keyword; --image-size is the image models': given where no model takes it,
    it is refused rather than silently ignored."""
    token_models = [s.text for s in specs if KINDS[s.kind].token_input]
    if seq_len is not None:
        if all(KINDS[s.kind].token_input is False for s in specs):
            raise PlanError(f"--seq-len {seq_len}: no model here takes token sequences (the transformer models: "
                            f"{', '.join(TRANSFORMER_PRESETS)}, hf:<model_type>, or a factory taking seq_len)")
        for spec in specs:
            reason = seq_len_problem(spec, seq_len)
            if reason:
                raise PlanError(reason)
        if seq_len < 1:
            raise PlanError(f"--seq-len must be positive (got {seq_len})")
    if image_size is not None and token_models and len(token_models) == len(specs):
        raise PlanError(f"--image-size {image_size}: {', '.join(token_models)} {'takes' if len(token_models) == 1 else 'take'} "
                        "token sequences, not images "
                        "(their input size is --seq-len)")


def _check_hf_config(overrides: dict[str, Any] | None, specs: tuple[ModelSpec, ...]) -> dict[str, Any]:
    """hf_config's overrides: for the hf: models only, each a key and a number, true/false or text."""
    if not overrides:
        return {}
    if not any(s.kind is Kind.HF for s in specs):
        raise PlanError("hf_config: no hf:<model_type> model in this plan to apply it to")
    for key, value in overrides.items():
        if not key.isidentifier() or not isinstance(value, (int, float, str, bool)):
            raise PlanError(f"hf_config: {key} = {value!r} is not a config key with a number, true/false or text")
    return dict(overrides)


def _check_batch_sizes(batch_sizes: tuple[int, ...]) -> None:
    for batch in batch_sizes:
        if batch < 1:
            raise PlanError(f"batch size must be at least 1 (got {batch})")


def _check_world_sizes(
    world_sizes: tuple[int, ...],
    batch_sizes: tuple[int, ...],
    scaling: Scaling,
    nnodes: int,
    per_node: int,
    on_gpu: bool,
    devices_per_node: int,
) -> None:
    """Each world size fits the devices (or whole nodes), and strong scaling can split every batch over it."""
    for world_size in world_sizes:
        if world_size < 1:
            raise PlanError(f"world size must be at least 1 (got {world_size})")
        if nnodes > 1 and world_size > per_node:
            if world_size % per_node or world_size // per_node > nnodes:
                raise PlanError(
                    f"world size {world_size} spans nodes: it must be a multiple of {per_node} ranks per node "
                    f"(--nproc-per-node), on at most --nnodes {nnodes}"
                )
        elif on_gpu and world_size > devices_per_node:
            raise PlanError(f"world size {world_size} needs {world_size} GPUs, but {devices_per_node} are usable")
        if scaling == Scaling.STRONG:
            for batch in batch_sizes:
                if batch % world_size:
                    raise PlanError(
                        f"strong scaling splits the global batch {batch} over {world_size} ranks: "
                        "it must divide evenly"
                    )


def _count_or_auto(value: int | str | None, flag: str, least: int) -> int | None:
    """A fixed count (at least ``least``), or None for auto (also the default)."""
    if value is None or (isinstance(value, str) and value.strip().lower() == AUTO):
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise PlanError(f"{flag} must be auto or a whole number (got {value!r})")
    if value < least:
        raise PlanError(f"{flag} must be at least {least} (got {value})" if least else
                        f"{flag} cannot be negative (got {value})")
    return value


def _resolve_measurement(options: PlanOptions, on_gpu: bool) -> dict[str, Any]:
    """How each configuration is measured, as Plan fields: fixed counts, a time budget, or until precise.

    A fixed --iters N (and --warmup N) runs exactly that, as always. ``auto`` (the default) stops once the
    median's 95% interval is within --precision of it, between --min-iters and --max-iters steps and within
    --max-time-per-config seconds. A time budget measures about that long whatever --iters says. Limits
    that only auto uses are still checked, so a plan never carries a nonsensical one.
    """
    warmup = _count_or_auto(options.warmup, "--warmup", 0)
    iters = _count_or_auto(options.iters, "--iters", 1)
    time_budget = options.time_budget
    if time_budget is not None:
        if time_budget <= 0:
            raise PlanError(f"--time-budget must be positive seconds (got {time_budget})")
        if warmup == 0:
            raise PlanError("--time-budget needs at least one warm-up iteration to size the measurement")
    precision = options.precision if options.precision is not None else (0.02 if on_gpu else 0.05)
    if not 0 < precision < 1:
        raise PlanError(f"--precision must be a fraction between 0 and 1 (got {precision:g})")
    min_iters = options.min_iters if options.min_iters is not None else 10
    if min_iters < 1:
        raise PlanError(f"--min-iters must be at least 1 (got {min_iters})")
    max_iters = options.max_iters if options.max_iters is not None else (1000 if on_gpu else 200)
    if max_iters < min_iters:
        raise PlanError(f"--max-iters {max_iters} is below --min-iters {min_iters}")
    max_time = options.max_time_per_config if options.max_time_per_config is not None else (60.0 if on_gpu else 20.0)
    if max_time <= 0:
        raise PlanError(f"--max-time-per-config must be positive seconds (got {max_time:g})")
    max_warmup = options.max_warmup if options.max_warmup is not None else 50
    if max_warmup < 0:
        raise PlanError(f"--max-warmup cannot be negative (got {max_warmup})")
    launches, flag = options.launches, "--launches"
    if launches is None and options.rounds is not None:  # rounds were folded into launches
        launches, flag = options.rounds, "--rounds"
    if launches is None:
        launches = DEFAULT_LAUNCHES
    if launches < 1:
        raise PlanError(f"{flag} must be at least 1 (got {launches})")
    if options.launches is not None and options.rounds is not None and options.launches != options.rounds:
        raise PlanError(f"--rounds is the old name of --launches: give one (got {options.rounds} and {launches})")
    return {"warmup": warmup, "iters": iters, "time_budget": time_budget, "precision": float(precision),
            "min_iters": min_iters, "max_iters": max_iters, "max_time_per_config": float(max_time),
            "max_warmup": max_warmup, "launches_per_config": launches}


def _resolve_bucket_caps(requested: list[float] | float) -> tuple[float, ...]:
    """DDP bucket sizes in MiB; a bare number is one cap."""
    caps = requested if isinstance(requested, list) else [requested]
    caps = [float(c) for c in _unique(caps)]
    if not caps:
        raise PlanError("--bucket-cap-mb is empty")
    for cap in caps:
        if cap <= 0:
            raise PlanError(f"--bucket-cap-mb must be positive (got {cap:g})")
    return tuple(caps)


def _resolve_batch_sweep(batch_sizes: tuple[int, ...], options: PlanOptions, on_gpu: bool) -> tuple[int, ...]:
    """The batch sizes to run: as given, or the --batch-sweep ladder."""
    if options.batch_sweep:
        return _batch_ladder(batch_sizes, options.max_batch or (4096 if on_gpu else 256), options.scaling)
    if options.max_batch is not None:
        raise PlanError("--max-batch only applies with --batch-sweep")
    return batch_sizes


def _resolve_comm_iters(comm_iters: int | None, iters: int) -> int:
    comm_iters = comm_iters if comm_iters is not None else max(5, iters // 4)
    if comm_iters < 0:
        raise PlanError(f"--comm-iters cannot be negative (got {comm_iters})")
    return comm_iters


def _resolve_collectives(options: PlanOptions, on_gpu: bool) -> dict[str, Any]:
    """The collective benchmark's operations, message sizes and iterations, as Plan fields."""
    collectives = _unique(options.collectives if options.collectives is not None else ["allreduce"])
    for op in collectives:
        if op not in COLLECTIVE_OPS:
            raise PlanError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVE_OPS)}")
    try:
        coll_min = parse_size(options.coll_min_bytes)
        coll_max = parse_size(options.coll_max_bytes or ("1GiB" if on_gpu else "16MiB"))
    except ValueError as exc:
        raise PlanError(f"--coll-min-bytes/--coll-max-bytes: {exc}") from None
    if not 0 < coll_min <= coll_max:
        raise PlanError(f"collective sizes must satisfy 0 < min <= max (got {coll_min} and {coll_max} bytes)")
    coll_iters = options.coll_iters if options.coll_iters is not None else (20 if on_gpu else 10)
    if coll_iters < 1:
        raise PlanError(f"--coll-iters must be at least 1 (got {coll_iters})")
    return {"collectives": collectives, "coll_min_bytes": coll_min, "coll_max_bytes": coll_max,
            "coll_iters": coll_iters}


# What gloo runs on CUDA tensors, per the backend table of torch.distributed's documentation: broadcast and
# all_reduce (and barrier); all_gather and reduce_scatter are CPU-only there.
GLOO_CUDA_COLLECTIVES = ("allreduce", "broadcast")


def _check_gloo_collectives(ops: tuple[str, ...], backends: tuple[str, ...], on_gpu: bool) -> None:
    """Refuse before the sweep what gloo cannot run on GPU tensors, instead of failing at a launch's end."""
    unsupported = [op for op in ops if op not in GLOO_CUDA_COLLECTIVES]
    if on_gpu and "gloo" in backends and unsupported:
        raise PlanError(f"--collectives {','.join(unsupported)}: gloo runs only "
                        f"{' and '.join(GLOO_CUDA_COLLECTIVES)} on GPUs; use --backend nccl for them")


def _check_report_settings(options: PlanOptions) -> None:
    """What the report's recommendation, cost and data-volume figures are computed with."""
    if not 0 < options.efficiency_threshold <= 1:
        raise PlanError(f"--efficiency-threshold must be in (0, 1] (got {options.efficiency_threshold:g})")
    if options.price_per_gpu_hour is not None and options.price_per_gpu_hour < 0:
        raise PlanError("--price-per-gpu-hour cannot be negative")
    if options.epoch_examples < 1:
        raise PlanError(f"--epoch-examples must be positive (got {options.epoch_examples})")


def _check_amp(amp: str | None, on_gpu: bool) -> None:
    if amp is None:
        return
    if amp not in AMP_DTYPES:
        raise PlanError(f"--amp must be bf16 or fp16 (got {amp!r})")
    if not on_gpu:
        raise PlanError("--amp needs a GPU (CPU runs measure fp32)")


def _check_cost_settings(options: PlanOptions) -> None:
    """Threads and the service-unit weights the cost is charged with."""
    if options.threads_per_rank is not None and options.threads_per_rank < 1:
        raise PlanError(f"--threads-per-rank must be at least 1 (got {options.threads_per_rank})")
    for key in ("su_core_weight", "su_gpu_weight"):
        if getattr(options, key) < 0:
            raise PlanError(f"--{key.replace('_', '-')} cannot be negative")
    if options.cores_per_rank is not None and options.cores_per_rank < 0:
        raise PlanError("--cores-per-rank cannot be negative")
    if options.internode_gbps <= 0:
        raise PlanError(f"--internode-gbps must be positive (got {options.internode_gbps:g})")


def _threads_per_rank(
    fixed: int | None, cpu_count: int, world_sizes: tuple[int, ...], nnodes: int, per_node: int
) -> dict[int, int]:
    """CPU threads per rank at each world size (and at 1, for the baselines).

    Each rank gets an equal share of the cores this process may use, so N ranks never oversubscribe the node
    and N=1 is not starved (torchrun's own default is one thread per rank).
    """
    return {n: fixed or max(1, cpu_count // min(n, per_node if nnodes > 1 else n)) for n in (*world_sizes, 1)}


def _check_fault_handling(options: PlanOptions) -> OnFailure:
    """Injected faults parse, hangs are detected after a positive time, and a failure policy is known."""
    for text in options.inject or ():
        try:
            parse_fault(text)
        except FaultSpecError as exc:
            raise PlanError(str(exc)) from None
    if options.hang_timeout <= 0:
        raise PlanError(f"--hang-timeout must be positive seconds (got {options.hang_timeout:g})")
    if options.on_failure not in tuple(OnFailure):
        raise PlanError(f"--on-failure must be continue or stop (got {options.on_failure!r})")
    return OnFailure(options.on_failure)


def _batch_ladder(batch_sizes: tuple[int, ...], max_batch: int, scaling: str) -> tuple[int, ...]:
    """The batch-size sweep: the smallest given batch, doubled until ``max_batch`` (or out of memory)."""
    start = min(batch_sizes)
    if max_batch < start:
        raise PlanError(f"--max-batch {max_batch} is smaller than the first batch size {start}")
    ladder = [start]
    while ladder[-1] * 2 <= max_batch:
        ladder.append(ladder[-1] * 2)
    return tuple(ladder)


TUNE_KEYS = ("variants", "keep_slower")  # what a plan file's [tune] table may set (the rest is the plan's)


def read_plan_file(path: str) -> dict[str, Any]:
    """Read a TOML plan into option values; keys as PlanOptions (a string is accepted for a one-item list)."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise PlanError(f"plan file {path} does not exist") from None
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan file {path} is not valid TOML: {exc}") from None
    if isinstance(raw.get("plan"), dict) and len(raw) == 1:
        raw = raw["plan"]
    if isinstance(raw.get("tune"), dict):  # a [tune] table: ddptop tune's plan, with its own keys
        table = raw.pop("tune")
        wrong = [key for key in table if key.replace("-", "_") not in TUNE_KEYS]
        if wrong:
            raise PlanError(f"plan file {path}: unknown key {wrong[0]!r} in [tune] (known: {', '.join(TUNE_KEYS)})")
        raw = {**raw, **table, "tune": True}
    known = toml_types()
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key_name = key.replace("-", "_")
        expected = known.get(key_name)
        if expected is None:
            raise PlanError(f"plan file {path}: unknown key {key!r} (known: {', '.join(known)})")
        if expected[0] is list:
            item_type = expected[1]
            accepted = (float, int) if item_type is float else (item_type,)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                value = [value]
            if not isinstance(value, list) or not all(
                isinstance(v, accepted) and not isinstance(v, bool) for v in value
            ):
                raise PlanError(f"plan file {path}: {key} must be a list of {item_type.__name__}")
            if item_type is float:
                value = [float(v) for v in value]
        elif not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise PlanError(f"plan file {path}: {key} must be {' or '.join(t.__name__ for t in expected)}")
        elif OPTIONS_BY_NAME[key_name].parse is not None and isinstance(value, str):  # "auto" or a count
            try:
                value = OPTIONS_BY_NAME[key_name].parse(value)
            except ArgumentTypeError as exc:
                raise PlanError(f"plan file {path}: {key}: {exc}") from None
        values[key_name] = value
    return values
