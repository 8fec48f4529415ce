"""kernel vs plain DDP loop: ddptop's kernel against a plain torch DDP loop, same configuration, median steps."""

from __future__ import annotations

from typing import Any

from ddptop.doctor.context import DoctorContext
from ddptop.doctor.launch import Launched
from ddptop.doctor.result import FAIL, OK, SKIPPED, WARN, Check

NAME = "kernel vs plain DDP loop"
LOOP_TOLERANCE = 0.03  # ddptop's kernel within 3% of the plain loop's median step


def run(context: DoctorContext) -> Check:
    if context.quick:
        return Check(NAME, SKIPPED, "--quick: nothing is launched")
    if context.skip_loop:
        return Check(NAME, SKIPPED, "--skip-loop")
    shared = context.shared_launch
    assert shared.config is not None  # set whenever the loop is not skipped
    return check_reference_loop(shared.config, shared.plain, shared.plain_problem, shared.launched)


def _first_p50(summary: dict[str, Any] | None) -> float | None:
    try:
        return float(summary["configs"][0]["stats"]["sec_iter"]["p50"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def check_reference_loop(config: dict[str, Any], plain: dict | None, problem: str, launched: Launched) -> Check:
    """ddptop's kernel against a plain DDP loop on the same configuration: the ratio of their median steps."""
    data: dict[str, Any] = {"configuration": config}
    if plain is None:
        return Check(NAME, FAIL, problem, data)
    ours = _first_p50(launched.summary)
    data.update(plain_p50_s=plain["p50_s"], plain_steps=plain["steps"], ddptop_p50_s=ours)
    if ours is None:
        return Check(NAME, FAIL, f"ddptop's run gave no step time (exit {launched.returncode}: {launched.error})",
                     data)
    ratio = ours / plain["p50_s"]
    data["ratio"] = ratio
    what = f"{config['model']} {config['image_size']} px batch {config['batch_size']}, 1 rank {config['device']}"
    words = (f"median step {ours * 1e3:.1f} ms (ddptop) vs {plain['p50_s'] * 1e3:.1f} ms (plain loop): "
             f"ratio {ratio:.3f} ({what})")
    if abs(ratio - 1) <= LOOP_TOLERANCE:
        return Check(NAME, OK, words, data)
    return Check(NAME, WARN, f"{words}, outside ±{LOOP_TOLERANCE:.0%} (a busy or noisy machine? run doctor "
                             "again when it is quiet)", data)
