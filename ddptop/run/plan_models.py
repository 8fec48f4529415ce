"""What a plan trains: its model specs (parsed once, checked by their kind: ``ddptop.protocol.modelspec``), the
facts known of each, the DDP variants and strategies, and ``ddptop tune``'s plan. Each step one ``PlanError``
line for what cannot run."""

from __future__ import annotations

import dataclasses
from typing import Any

from ddptop.errors import PlanError
from ddptop.protocol import strategies as strategies_mod
from ddptop.protocol import variants as variants_mod
from ddptop.protocol.catalog import TRANSFORMER_PRESETS
from ddptop.protocol.modelspec import KINDS, Kind, ModelSpec, SpecError, parse_script, parse_spec, seq_len_problem
from ddptop.protocol.workload import WorkloadFacts
from ddptop.run.plan_records import Plan
from ddptop.run.options import OPTIONS_BY_NAME, PlanOptions

# What describes a kernel (its model, its batch, its step, what ddptop measures beside it): refused beside a
# script, which chooses its own. World sizes, launches, the measurement's length, devices, telemetry, faults,
# nodes, cost and output apply to a script as to a kernel.
KERNEL_ONLY = ("models", "batch_sizes", "scaling", "image_size", "seq_len", "num_classes", "hf_config", "bucket_cap_mb",
               "amp", "channels_last", "broadcast_buffers", "threads", "devices", "variants", "strategies",
               "keep_slower", "search_budget", "tune", "comm_iters", "collectives", "coll_min_bytes",
               "coll_max_bytes", "coll_iters", "batch_sweep", "max_batch", "memory_cap_mb", "compare_dp", "inject")


NO_IMAGES = "its batch holds no 4-D image tensor, so channels_last would measure DDP as written"


# the catalog's variants the probe can set on a script's DDP call
SCRIPT_VARIANTS = tuple(v.name for v in variants_mod.CATALOG.values()
                        if v.name != variants_mod.DEFAULT and variants_mod.applies_to_script(v))

UNUSED_SET = "the workload sets find_unused_parameters=True already, so the variant would measure DDP as written"


def apply_facts(plan: Plan, facts: dict[str, WorkloadFacts]) -> Plan:
    """The plan with what is known of its models: each built-in's facts from its kind (``modelspec.KINDS``) and
    ``facts``, what the check of each factory and hf model found (``ddptop.run.workloads``): each one's tokens
    per example, and channels_last left out, with its reason, where no model's batch holds images (a factory
    not checked yet counts as an image model)."""
    kinds = {m: (spec, KINDS[spec.kind]) for m in plan.models for spec in (parse_spec(m),)}  # each parsed once
    known = {m: f for m, (spec, kind) in kinds.items() if (f := kind.facts(spec, plan.seq_lens.get(m))) is not None}
    known.update(facts)
    tokens = {m: f.tokens_per_example for m, f in known.items() if f.tokens_per_example}
    without_images = [m for m, (_, kind) in kinds.items()
                      if not (known[m].image_input if m in known else kind.image_input is not False)]
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


def tune_options(options: PlanOptions, one_node_sizes: list[int], on_gpu: bool, script: bool = False) -> PlanOptions:
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
        # a script's: chosen after its first run unless named
        variants=options.variants or ([] if script else default_tune_variants(options.models or [])),
        search_budget=options.search_budget or SEARCH_BUDGET[on_gpu],
        name=options.name or "tune",
    )


def default_tune_variants(models: list[str]) -> list[str]:
    """Every variant of the catalog (channels_last is left out with its reason for a model without image
    inputs: ``apply_facts``)."""
    return list(variants_mod.DEFAULT_TUNE)


def resolve_variants(names: list[str] | None, on_gpu: bool, script: bool = False) -> dict[str, Any]:
    """The DDP variants to measure, the default first, and those left out on the CPU (autocast is measured on
    GPUs only; the summary says so); an unknown name is one line listing the known. A script's tune measures the
    script as written first: its tries (``script_tries``, those named) join the plan after that run."""
    if script:
        return resolve_script_tries(names, on_gpu)
    chosen = [variants_mod.DEFAULT]
    skipped: list[str] = []
    for name in names or ():
        if name not in variants_mod.CATALOG:
            raise PlanError(f"--variants: unknown variant {name!r} (known: {', '.join(variants_mod.CATALOG)})")
        target = skipped if variants_mod.CATALOG[name].cuda_only and not on_gpu else chosen
        if name not in target:
            target.append(name)
    return {"variants": tuple(chosen), "variants_skipped": tuple(skipped)}


def resolve_script_tries(names: list[str] | None, on_gpu: bool) -> dict[str, Any]:
    """``ddptop tune -- train.py``'s plan: the script as written alone until its first run, the tries named
    (none: chosen from that run), a GPU-only one on the CPU not tried with its reason."""
    tries: list[str] = []
    skipped: dict[str, str] = {}
    for name in names or ():
        try:
            chosen = variants_mod.variant(name)
        except ValueError:
            chosen = None
        if (chosen is None or variants_mod.JOIN in name or variants_mod.as_written(name)
                or not variants_mod.applies_to_script(chosen)):
            raise PlanError(f"--variants {name}: not a try of a script's own calls (those it can: "
                            f"{', '.join([*SCRIPT_VARIANTS, *variants_mod.SCRIPT_ONLY])})")
        if chosen.cuda_only and not on_gpu:
            skipped[name] = chosen.cpu_why or "measured on GPUs only"
        elif name not in tries:
            tries.append(name)
    return {"variants": (variants_mod.DEFAULT,), "variants_skipped": (), "script_tune": True,
            "script_tries": tuple(tries), "not_tried": skipped}


def resolve_strategies(names: list[str] | None) -> tuple[str, ...]:
    """The data-parallel strategies to measure, DDP first (always: the reference the others are read
    against); an unknown name is one line listing the known."""
    chosen = [strategies_mod.DDP]
    for name in names or ():
        if name not in strategies_mod.CATALOG:
            raise PlanError(f"--strategies: unknown strategy {name!r} (known: {', '.join(strategies_mod.CATALOG)})")
        if name not in chosen:
            chosen.append(name)
    return tuple(chosen)


def parse_models(given: list[str]) -> tuple[ModelSpec, ...]:
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


def parse_script_option(options: PlanOptions) -> tuple[ModelSpec, tuple[str, ...]] | None:
    """The user's script (what followed ``--``): its spec and the command each rank runs, or None for a plan
    of kernels. Flags that describe a kernel are refused beside it, in one line."""
    if options.script is None:
        if options.script_to_end:
            raise PlanError("--script-to-end needs a script: ddptop run --script-to-end -- train.py ARGS")
        return None
    def as_given(value: Any) -> Any:
        return list(value) if isinstance(value, (list, tuple)) else value

    # ddptop tune -- train.py: the tune's own flags apply, its tries those the probe sets on the script's DDP call
    tuning = ("tune", "variants", "search_budget", "keep_slower") if options.tune else ()
    given = [o for o in KERNEL_ONLY if o not in tuning
             and as_given(getattr(options, o)) != as_given(OPTIONS_BY_NAME[o].default)]
    if given:
        # each with its other spellings: the user may have typed either
        flags = ", ".join("/".join([OPTIONS_BY_NAME[o].spelling, *(f.spelling for f in OPTIONS_BY_NAME[o].also)])
                          for o in given)
        raise PlanError(f"{flags} describe{'s' if len(given) == 1 else ''} ddptop's own kernels, not a script, "
                        "which chooses its own model, batch and step (a script takes world sizes, launches, "
                        "iterations and output flags)")
    try:
        return parse_script(options.script)
    except SpecError as exc:
        raise PlanError(str(exc)) from None


def check_models(specs: tuple[ModelSpec, ...], image_size: int, num_classes: int) -> None:
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


def check_sequences(specs: tuple[ModelSpec, ...], seq_len: int | None, image_size: int | None) -> None:
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


def check_hf_config(overrides: dict[str, Any] | None, specs: tuple[ModelSpec, ...]) -> dict[str, Any]:
    """hf_config's overrides: for the hf: models only, each a key and a number, true/false or text."""
    if not overrides:
        return {}
    if not any(s.kind is Kind.HF for s in specs):
        raise PlanError("hf_config: no hf:<model_type> model in this plan to apply it to")
    for key, value in overrides.items():
        if not key.isidentifier() or not isinstance(value, (int, float, str, bool)):
            raise PlanError(f"hf_config: {key} = {value!r} is not a config key with a number, true/false or text")
    return dict(overrides)
