"""``ddptop tune -- train.py`` between the script's first run and its tries: the facts that run measured, the
tries they call for (``analysis.script_tries``), and the plan that holds them.

The sweep runs the script as written first, one launch; then, if it ran well, this adds the tries to the plan
(in plan.json, so a rebuild from the files finds them), each with why it is tried and every kind of setting not
tried with why not, and the sweep runs the plan's other launches in its interleaved order (A B C C B A). If the
script as written failed, no try runs: its own error is the tune's answer.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddptop.analysis import script_tries
from ddptop.protocol import variants
from ddptop.protocol.vocab import FAILED
from ddptop.run.config_state import ConfigState
from ddptop.run.plan_records import ConfigSpec, Plan

NO_TRY = variants.NO_TRY


@dataclass(frozen=True)
class Tries:
    plan: Plan  # with the tries, why each, what was not tried and the training loader's line
    added: list[ConfigSpec]  # the tries' configurations
    nothing: str | None = None  # why no try runs (the script as written failed, nothing to try): None when some do


def facts_of(plan: Plan, state: ConfigState) -> script_tries.Facts:
    """What the script's first run measured, for the choice."""
    spec = state.spec
    end = state.latest_end()  # rank 0's, of its first launch
    figures = state.script_figures(None)
    return script_tries.Facts(
        world_size=spec.world_size,
        device=spec.device,
        cores_per_rank=plan.core_share(spec.world_size),
        step_s=script_tries.median_step(state.samples),
        data_wait_share=figures.data_wait if figures else None,
        seen=end.get("script") or {},
        threads_per_rank=plan.threads_for(spec.world_size, spec.threads) if spec.device == "cpu" else 0,
        threads_from=plan.threads_from,
    )


def add_tries(plan: Plan, state: ConfigState) -> Tries:
    """The plan with the script's tries, after its first run (``state``: the script as written)."""
    if state.status in FAILED or not state.ended_round(0):
        why = f"the script as written did not run well ({state.reason or state.status}): its own error is above"
        return Tries(replace(plan, not_tried={**plan.not_tried, NO_TRY: why}), [], why)
    choice = script_tries.choose(facts_of(plan, state), plan.script_tries or None)
    not_tried = {**plan.not_tried, **choice.not_tried}
    tries = {}
    for name, why in choice.tries.items():
        if variants.variant(name).loader_kwargs and not choice.loader_site:
            continue  # the first run found no training loader to set it on: said in not_tried
        tries[name] = why
    if not tries:
        not_tried.setdefault(NO_TRY, "nothing the first run measured calls for a try")
    chosen = replace(plan, variants=(variants.DEFAULT, *tries), tries_why=tries, not_tried=not_tried,
                     script_loader=choice.loader_site)
    added = [c for c in chosen.configs() if not variants.as_written(c.variant)]
    return Tries(chosen, added, None if tries else not_tried[NO_TRY])
