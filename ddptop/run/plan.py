"""What to run: a sweep of models x batch sizes x world sizes x backends, validated before anything starts.

A plan comes from command-line flags, a TOML file (same keys, underscores), or both (flags win); the options
themselves are defined once in ``ddptop.run.options``. ``build_plan`` resolves each group of them for this
machine in one small step, each topic in a module of its own (``plan_devices``: where it runs;
``plan_models``: what it trains; ``plan_measurement``: how it measures; ``plan_file``: the TOML file); every
problem is reported as one ``PlanError`` line and nothing is launched for an invalid plan. The result is a
``ddptop.run.plan_records.Plan``.

Batch semantics: with weak scaling (the default, as in PyTorch's DDP benchmark) each batch size is per rank
and the global batch grows with N; with strong scaling each batch size is the global batch, split evenly
over the N ranks, so it must divide by every world size.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import fields
from typing import Any

from ddptop.errors import PlanError
from ddptop.protocol.modelspec import KINDS, seq_len_of, spec_label
from ddptop.run import plan_devices, plan_measurement, plan_models
from ddptop.run.plan_records import Plan, ranks_on_a_node
from ddptop.run.options import PlanOptions, unique
from ddptop.telemetry.allocation import usable_cpu_count
from ddptop.telemetry.inventory import Inventory


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


def script_options(options: PlanOptions) -> PlanOptions:
    """A script's plan: no no-DDP baseline, communication probe or collective benchmark (each would run ddptop's
    own kernel, not the script); its profiler trace runs over its own steps after the measured ones, so none
    with --script-to-end, where no step follows them."""
    traced = {"trace_steps": 0} if options.script_to_end else {}
    return dataclasses.replace(options, baseline=False, comm_iters=0, collectives=[], **traced)


def build_plan(options: PlanOptions, inventory: Inventory, cpu_count: int | None = None) -> Plan:
    """Resolve defaults for this machine and validate; raise PlanError with one line on any problem.

    The steps run in a fixed order, so a plan with several problems always reports the same one first.
    """
    cpu_count = cpu_count or usable_cpu_count()
    device, devices, devices_skipped = plan_devices.resolve_devices(options, inventory)
    on_gpu = device == "cuda"
    gpus = plan_devices.resolve_gpus(options.gpus, device, len(inventory.usable_gpus))
    devices_per_node = (len(gpus) if gpus else len(inventory.usable_gpus)) if on_gpu else cpu_count

    script = plan_models.parse_script_option(options)  # the user's own training script, as it is
    if script is not None:
        options = script_options(options)
    specs = (script[0],) if script else plan_models.parse_models(options.models or (["resnet50"] if on_gpu else ["resnet18"]))
    models = tuple(spec.text for spec in specs)
    # a model of a kind that draws its own batch (a script): 0 in its configuration, what it drew counted
    batch_sizes = (0,) if not all(KINDS[spec.kind].own_batch for spec in specs) else unique(options.batch_sizes or ([32] if on_gpu else [16]))
    one_node_sizes = default_world_sizes(devices_per_node) if on_gpu else [1, 2]
    if options.tune:
        options = plan_models.tune_options(options, one_node_sizes, on_gpu, script=script is not None)
    if options.search_budget is not None and not options.search_budget > 0:
        raise PlanError(f"--search-budget must be a positive number of seconds (got {options.search_budget:g})")
    nnodes = options.nnodes
    per_node = plan_devices.ranks_per_node(nnodes, options.nproc_per_node, on_gpu, devices_per_node) or max(one_node_sizes)
    world_sizes = unique(options.world_sizes or _spanning_world_sizes(one_node_sizes, per_node, nnodes))
    image_size = options.image_size or (224 if on_gpu else 64)
    measurement = plan_measurement.resolve_measurement(options, on_gpu)
    iters = measurement["iters"]

    scaling = plan_measurement.resolve_scaling(options.scaling)
    backends = plan_devices.resolve_backends(options.backend, on_gpu)
    rank_devices, per_rank_devices = plan_devices.rank_devices(inventory, gpus, on_gpu)
    backends = plan_devices.check_mig(inventory, gpus, rank_devices, per_rank_devices, backends, options, world_sizes)
    plan_models.check_models(specs, image_size, options.num_classes)
    plan_models.check_sequences(specs, options.seq_len, options.image_size)
    if script is None:
        plan_measurement.check_batch_sizes(batch_sizes)
    plan_measurement.check_world_sizes(world_sizes, batch_sizes, scaling, nnodes, per_node, on_gpu, devices_per_node)
    if script is not None and options.tune and len(world_sizes) > 1:
        raise PlanError(f"--world-sizes {','.join(map(str, world_sizes))}: a script's tune runs at one world size "
                        "(its first run there chooses the tries); tune each N apart")
    caps = plan_measurement.resolve_bucket_caps(options.bucket_cap_mb)
    if script is None:
        batch_sizes = plan_measurement.resolve_batch_sweep(batch_sizes, options, on_gpu)
    if options.memory_cap_mb is not None and options.memory_cap_mb <= 0:
        raise PlanError(f"--memory-cap-mb must be positive (got {options.memory_cap_mb:g})")
    comm_iters = plan_measurement.resolve_comm_iters(options.comm_iters, iters if iters is not None else (50 if on_gpu else 20))
    trace_steps = 3 if options.trace_steps is None else options.trace_steps
    if trace_steps < 0:
        raise PlanError(f"--trace-steps cannot be negative (got {trace_steps})")
    collectives = plan_measurement.resolve_collectives(options, on_gpu)
    plan_measurement.check_gloo_collectives(collectives["collectives"], backends, on_gpu)
    plan_measurement.check_report_settings(options)
    plan_measurement.check_amp(options.amp, on_gpu)
    plan_measurement.check_cost_settings(options)
    threads = plan_devices.threads_per_rank(options.threads_per_rank, cpu_count, world_sizes, nnodes, per_node)
    threads_from = ""
    if script is not None and options.tune and device == "cpu":  # the script as written at its own launch's threads
        (tuned,) = world_sizes
        threads[tuned], threads_from = plan_devices.as_written_threads(
            options.threads_per_rank, os.environ, threads[tuned], ranks_on_a_node(tuned, nnodes, per_node))
    thread_counts = plan_devices.check_threads(options, inventory, cpu_count, nnodes, devices)
    cpu_grid = plan_devices.cpu_grid(thread_counts, world_sizes, cpu_count, device, devices)
    on_failure = plan_measurement.check_fault_handling(options)
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
        name=options.name or f"{'-'.join(spec_label(m) for m in models)}-{'script' if script else scaling}",
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
        **{"script_tune": False, "script_tries": (), "not_tried": {},
           **plan_models.resolve_variants(options.variants, on_gpu, script=script is not None and options.tune)},
        # a preset's own length unless --seq-len; an hf model or a factory gets --seq-len where given
        seq_lens={s.text: n for s in specs if (n := seq_len_of(s, options.seq_len)) is not None},
        strategies=plan_models.resolve_strategies(options.strategies),
        hf_config=plan_models.check_hf_config(options.hf_config, specs),
        tokens_per_example={}, workloads={}, variant_reasons={},  # plan_models.apply_facts' below, and the check's
        threads=thread_counts,
        cpu_grid=cpu_grid,
        cpu_cores=cpu_count,
        devices=devices,
        devices_skipped=devices_skipped,
        script=script[1] if script else (),
        script_dir=os.getcwd() if script else "",
        script_named="file" if script else "",
        tries_why={}, script_loader="",  # the sweep's, after the script's first run
        threads_from=threads_from,
    )
    # Every other field of the plan is the option as given (num_classes, amp, the cost weights, ...).
    kept = {f.name: getattr(options, f.name) for f in fields(Plan) if f.name not in resolved}
    return plan_models.apply_facts(Plan(**resolved, **kept), {})


