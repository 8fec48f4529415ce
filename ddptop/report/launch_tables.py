"""Launch to launch as a report block: the spread every interval includes (``analysis/launches.py``), each
launch's p50 beside its GPUs' state, and the sweep's overhead (what launching, initialising and tearing
down cost); ``report/sections.py`` places the blocks."""

from __future__ import annotations

from typing import Any

from ddptop import units
from ddptop.report.blocks import Block, Caption, Note, Part, Table
from ddptop.report.cells import config_name
from ddptop.report.schema import Summary

LAUNCH_HEADER = ("config", "launch", "steps", "p50 (95% CI, within the launch)", "used")


def launch_spread_line(summary: Summary) -> str:
    """What every interval covers: the launch-to-launch spread pooled over the sweep, or within one launch."""
    variance = summary.uncertainty.launch_variance if summary.uncertainty else None
    if not variance:
        return ("Intervals: within one launch only (a summary from before launches were replicated): an offset "
                "between launches is not in them, and speedups compare launches.")
    if not variance.estimated:
        return ("Intervals: within one launch only (one launch per configuration): an offset between launches "
                "is not in them, and speedups compare launches; --launches 2 or more measures it.")
    spread = variance.relative_sd
    return (f"Intervals: two levels. Launch-to-launch spread {units.estimate(spread, lambda v: units.percent(v, 1))}"
            + (", its estimate clamped at 0 (the launches' medians differ no more than their steps' noise explains),"
               if spread and spread.method and "clamped" in spread.method else "")
            + f" of the step time, pooled over {variance.configs} configurations' {variance.launches} "
            f"launches ({variance.df} degrees of freedom); every interval includes it.")


GPU_STATE_HEADER = "GPU busy clock, power, temp"


def _gpu_state_cell(state: dict[str, Any] | None) -> str:
    """A launch's GPUs over its window: the lowest busy SM clock, the mean power per GPU, the hottest GPU."""
    gpus = [g for g in (state or {}).values() if isinstance(g, dict)]
    clocks = [g["sm_clock_busy_mhz"] for g in gpus if g.get("sm_clock_busy_mhz")]
    power = [g["power_w"] for g in gpus if g.get("power_w") is not None]
    temps = [g["temp_max_c"] for g in gpus if g.get("temp_max_c") is not None]
    words = ([f"{min(clocks):.0f} MHz"] if clocks else []) + ([f"{sum(power) / len(power):.0f} W"] if power else [])
    return " ".join(words + ([f"{max(temps):.0f} °C"] if temps else [])) or "-"


def _with_gpu_state(summary: Summary) -> bool:
    """Whether any launch recorded its GPUs' state: the launch table's GPU column, header and rows alike."""
    return any(unit.gpu_state for entry in summary.configs for unit in entry.launches)


def launch_rows(summary: Summary) -> list[tuple[str, ...]]:
    with_gpus = _with_gpu_state(summary)
    rows: list[tuple[str, ...]] = []
    for entry in summary.configs:
        for unit in entry.launches:
            if unit.p50 is None:
                continue
            used = "yes" if unit.used is not False else "no: disturbed, measured again"
            if unit.used is not False and unit.disturbed:
                used = "yes, though disturbed (no quiet launch)"
            if unit.unsteady:
                used += "; not at steady state"
            rows.append((config_name(entry), unit.launch or "", str(unit.steps or "-"),
                         units.estimate(unit.p50, units.seconds))
                        + ((_gpu_state_cell(unit.gpu_state),) if with_gpus else ()) + (used,))
    return rows


def launches_block(summary: Summary) -> Block:
    parts: list[Part] = [Note(launch_spread_line(summary))]
    if any(len(e.launches) > 1 for e in summary.configs):
        header = LAUNCH_HEADER[:-1] + ((GPU_STATE_HEADER,) if _with_gpu_state(summary) else ()) + LAUNCH_HEADER[-1:]
        parts.append(Table(header, launch_rows(summary), first_left=True))
        unsteady = [f"{config_name(e)} {u.launch}: " + "; ".join(u.unsteady)
                    for e in summary.configs for u in e.launches if u.unsteady]
        if unsteady:
            parts.append(Note("Not at the state the other launches ran at (the GPUs' clocks, limits or temperature "
                              "differed): " + " | ".join(unsteady)))
    return Block("Launch to launch", parts)


def overhead_line(summary: Summary) -> str:
    overhead = summary.overhead
    analysis_s = overhead.analysis_s or 0
    setup = overhead.fraction_setup if overhead.fraction_setup is not None else overhead.fraction_outside_iterations
    extra = f", {units.seconds(analysis_s, 1, unit=True)} in communication analysis and collectives" if analysis_s else ""
    if overhead.trace_s:
        extra += f", {units.seconds(overhead.trace_s, 1, unit=True)} in profiler traces"
    return (
        f"Sweep wall time {units.seconds(overhead.sweep_wall_s, 1, unit=True)}, of which "
        f"{units.seconds(overhead.iterations_s, 1, unit=True)} in warm-up and "
        f"measured steps{extra}; {units.percent(setup)} went to launching, initialising and tearing down."
    )


def overhead_block(summary: Summary) -> Block:
    return Block(None, [Caption(overhead_line(summary))])
