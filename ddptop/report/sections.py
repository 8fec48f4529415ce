"""The report's parts, listed once in order: the terminal report, summary.md, the text a run ends with and
the summary screen all walk ``SECTIONS``, so a new part is added in one place and keeps its place in each.

The order is Markdown's. One part moves: the terminal prints the topology first (``lead``), as PyTorch's
DDP benchmark prints its ``nvidia-smi topo -m`` matrix before its results, and the summary screen shows it
last and only when asked, since the live view beside it has a Topology panel of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Literal

from ddptop.report import (batch_tables, blocks, communication_tables, compute_tables, environment_tables,
                           launch_tables, load_tables, problem_tables, scaling_tables, script_tables, strategy_tables,
                           thread_tables, trace_tables, tuning_tables)
from ddptop.report.schema import Summary


@dataclass(frozen=True)
class Section:
    """One part of the report: the block it builds, and where it is shown."""

    key: str
    title: str  # the Markdown heading; the terminal block writes its own, with details
    block: Callable[[Summary], blocks.Block] | None  # the part's content, rendered by each form's writer
    markdown_only: Callable[[Summary], list[str]] | None = None  # a part only summary.md has: its lines
    on_screen: bool = False  # the summary screen shows it
    always: bool = False  # written even when empty, so a reader sees that there was nothing
    lead: bool = False  # the terminal prints it before every other part
    screen_style: str = ""  # the style of the block's first line, its heading, on the summary screen
    screen_empty: str = ""  # what the summary screen says in its place when it is empty

    def text(self, summary: Summary) -> str | None:
        """The terminal block, ending in a newline; "" when empty; None for a part only summary.md has."""
        return None if self.block is None else blocks.text(self.block(summary))

    def markdown(self, summary: Summary) -> list[str]:
        """The lines under the part's ``##`` heading; [] when empty."""
        if self.markdown_only is not None:
            return self.markdown_only(summary)
        return blocks.markdown(self.block(summary)) if self.block is not None else []


SECTIONS: tuple[Section, ...] = (
    Section("environment", "Environment", None, environment_tables.environment_markdown, always=True),
    Section("plan", "Plan", None, environment_tables.plan_markdown, always=True),
    Section("benchmark", "Step time per configuration", scaling_tables.benchmark_block, always=True),
    Section("tuning", "Tuning: DDP variants against the default", tuning_tables.tuning_block, on_screen=True),
    Section("scaling", "Scaling", scaling_tables.scaling_block, on_screen=True, always=True,
            screen_empty="No scaling table: no configuration finished.\n"),
    Section("devices", "CPU against GPU", thread_tables.devices_block, on_screen=True),
    Section("threads", "Threads per rank", thread_tables.thread_block, on_screen=True),
    Section("core_budget", "Core budget: ranks x threads", thread_tables.core_budget_block, on_screen=True),
    Section("script", "The script: data wait and what the probe saw", script_tables.script_block, on_screen=True),
    Section("communication", "Compute vs communication", communication_tables.communication_block, on_screen=True),
    Section("trace", "Where the step's time goes (profiler trace)", trace_tables.trace_block, on_screen=True),
    Section("launches", "Launch to launch", launch_tables.launches_block, always=True),
    Section("stragglers", "Stragglers", communication_tables.stragglers_block, on_screen=True),
    Section("compute", "Compute: FLOP/s and MFU", compute_tables.compute_block, on_screen=True),
    Section("verdict", "Why it is not faster", compute_tables.verdict_block, on_screen=True),
    Section("dp_vs_ddp", "DataParallel vs DDP", scaling_tables.dp_block, on_screen=True),
    Section("batch_throughput", "Throughput per batch size", batch_tables.batch_block, on_screen=True),
    Section("strategies", "Strategies: DDP, ZeRO-1, FSDP2", strategy_tables.strategy_block, on_screen=True),
    Section("frontier", "Memory frontier", strategy_tables.frontier_block, on_screen=True),
    Section("collectives", "Collective bandwidth", communication_tables.collectives_block, on_screen=True),
    Section("load", "Load during measured steps", load_tables.load_block, on_screen=True),
    Section("topology", "Topology", environment_tables.topology_block, always=True, lead=True),
    Section("problems", "Not measured in full", problem_tables.not_measured_block, on_screen=True,
            screen_style="bold yellow"),
    Section("disturbed", "Disturbed while measured", problem_tables.disturbed_block, on_screen=True,
            screen_style="bold yellow"),
    Section("damaged", "Read around damaged files", problem_tables.damaged_block, on_screen=True),
    Section("nodes", "Nodes", environment_tables.nodes_block),
    Section("overhead", "Overhead", launch_tables.overhead_block, on_screen=True, always=True),
)

BY_KEY = {section.key: section for section in SECTIONS}


def text_of(key: str, summary: Summary) -> str:
    """One part's terminal block ("" when empty)."""
    return BY_KEY[key].text(summary) or ""


def markdown_of(key: str, summary: Summary) -> list[str]:
    """One part's Markdown lines ([] when empty)."""
    return BY_KEY[key].markdown(summary)


def shown(summary: Summary, form: Literal["text", "markdown"]) -> list[tuple[Section, Any]]:
    """The sections one form writes for this summary, in the order it writes them, each with its content."""
    pairs: list[tuple[Section, str | list[str]]]
    if form == "text":
        ordered = [s for s in SECTIONS if s.lead] + [s for s in SECTIONS if not s.lead]
        pairs = [(s, s.text(summary) or "") for s in ordered if s.block is not None]
    else:
        pairs = [(s, s.markdown(summary)) for s in SECTIONS]
    return [(section, content) for section, content in pairs if content or section.always]


def text_report(summary: Summary) -> str:
    """The report for a terminal: the blocks with a blank line between them."""
    return "\n".join(block for _, block in shown(summary, "text")).rstrip() + "\n"


def markdown(summary: Summary) -> str:
    """summary.md: a title, then one ``##`` heading per section."""
    lines = [f"# ddptop summary: {summary.name}", ""]
    if summary.complete is False:
        lines += ["**Incomplete:** the sweep did not finish; these are the configurations measured so far.", ""]
    for section, body in shown(summary, "markdown"):
        lines += [f"## {section.title}", ""] + body
    return "\n".join(lines)


def closing_text(summary: Summary, paths: dict[str, str]) -> str:
    """What a run prints when it ends: the report, then where the summary files are, or why they are not
    where they should be and how to write them later."""
    answered = thread_tables.answers(summary)  # --threads, --devices: their answers last, where they are read
    text = text_report(summary) + ("\nAnswers\n" + "".join(f"  {line}\n" for line in answered) if answered else "")
    text += saved_line(summary, paths)
    if paths.get("plots"):
        text += f"Plots: {paths['plots']}/ (PNG and SVG)\n"
    elif paths.get("plots_error"):
        text += f"Plots not drawn: {paths['plots_error']}\n"
    return text


def saved_line(summary: Summary, paths: dict[str, str]) -> str:
    """Where the summary went; where a full disk (a quota, ...) stopped a file, one line first that says
    what was not saved and how to save it later."""
    run_dir = summary.run_dir or "RUN_DIR"
    lost = "; ".join((summary.not_saved or {}).values())
    # the run directory's events lack what a full disk stopped: the summary from memory is the whole record
    later = (f"keep this summary, it holds every figure ({lost}, so a rebuild from the files would lack them)"
             if lost else f"once there is room: ddptop report {run_dir} --rebuild")
    if "json" not in paths:
        return (f"Summary not saved: {paths.get('save_error')}; the fallback failed too "
                f"({paths.get('fallback_error')}). Free some space, then run: ddptop report {run_dir} --rebuild\n")
    line = f"Summary: {paths['json']}  {paths['md']}  {paths['csv']}\n"
    if paths.get("save_error"):
        line = (f"Summary not saved in {run_dir}: {paths['save_error']}; written to {paths['fallback']} instead. "
                f"{later[0].upper()}{later[1:]}\n") + line
    elif lost:
        line = f"Not saved in {run_dir}: {lost}; the summary was made from memory and holds every figure\n" + line
    return line


def screen_sections(summary: Summary, with_topology: bool) -> list[tuple[str | None, str, str]]:
    """What the summary screen shows, as (heading or None, body, the heading's style) in order.

    Each block is followed by a blank line. The topology comes last, only ``with_topology`` (a summary opened
    on its own, with no Topology panel beside it).
    """
    out: list[tuple[str | None, str, str]] = []
    for section in SECTIONS:
        if not section.on_screen or section.block is None:
            continue
        block = section.text(summary) or section.screen_empty
        if not block:
            continue
        if section.screen_style:
            heading, _, body = block.partition("\n")
            out.append((heading + "\n", body + "\n", section.screen_style))
        else:
            out.append((None, block + "\n", ""))
    if with_topology:
        out.append((None, environment_tables.topology_text(summary), ""))
    return out
