"""Every output a summary has, rendered once: ``check(summary, where)`` raises where one of them cannot be.

Beside the consistency check (``consistency``: does the summary contradict itself?), this one asks whether a
user can see it at all: the text report and the closing lines of a run, Markdown, CSV, the JSON written and
read back as the same document, the summary screen's sections, its speedup chart drawn by the screen's own
function on a real plotext figure and built to text, the ASCII chart of ``--ascii``, and ``ddptop diff`` of the summary against itself, text,
Markdown and JSON. ``plots_dir`` adds the plots themselves (matplotlib, about a second). The summary screen
under Textual is the view's own check (``ddptop.tui.summary_check``), which runs this one first.

``ddptop.report.build`` runs it on every summary it makes when ``DDPTOP_CHECK_SUMMARIES=1`` (the test suite
sets it), so that no summary any test builds reaches a user unrendered.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any

from ddptop.report.schema import Summary

# few resamples: the check reads whether the diff renders, not its intervals' last digit
DIFF_RESAMPLES = 200


class UnrenderableSummary(RuntimeError):
    """An output that failed on a summary: which summary, which output, and the traceback (the error's, or
    the text of one that was raised elsewhere, as a view's)."""

    def __init__(self, where: str, output: str, error: BaseException | str) -> None:
        self.where, self.output = where, output
        self.trace = error if isinstance(error, str) else "".join(traceback.format_exception(error))
        last = self.trace.strip().splitlines()[-1] if self.trace.strip() else "no traceback"
        super().__init__(f"{where}: the {output} failed: {last}\n{self.trace}")


def _round_trip(summary: Summary) -> str:
    """summary.json as written, read back and written again: the same text (the same document)."""
    text = json.dumps(summary.to_json(), indent=2)
    again = Summary.from_json(json.loads(text)).to_json()
    if json.dumps(again, indent=2) != text:
        document = json.loads(text)
        changed = sorted(k for k in set(document) | set(again) if document.get(k) != again.get(k))
        raise ValueError(f"read back, summary.json differs in {', '.join(changed) or 'the order of its keys'}")
    return text


def _diff(summary: Summary) -> Callable[[str], str]:
    """``diff`` of the summary against itself, compared once (a bootstrap of every launch) and rendered in each
    form on asking."""
    from ddptop.report import diff  # numpy: the bootstrap of the launches

    compared: dict[str, Any] = {}

    def rendered(form: str) -> str:
        if not compared:
            compared.update(diff.diff_summaries(summary, summary, resamples=DIFF_RESAMPLES))
        return json.dumps(compared) if form == "json" else diff.diff_text(compared, markdown=form == "md")

    return rendered


# the summary screen's chart sizes: beside the tables in 160x50, over the whole of 80x24
CHART_SIZES = ((60, 46), (80, 20))


def _plotext_chart(summary: Summary) -> str:
    """The summary screen's speedup chart, drawn by the screen's own function on a real plotext figure and
    built to text at the screen's sizes (plotext reads the numbers only when it builds)."""
    from ddptop.report import chart_data

    built = []
    for width, height in CHART_SIZES:
        figure = chart_data.plotext_figure()
        chart_data.draw_speedup(figure, summary, ["blue", "green"])
        figure.plotsize(width, height)
        built.append(figure.build())
    return "\n".join(built)


def _ascii_chart(summary: Summary) -> str:
    from ddptop.report import chart_data

    return "\n".join(line for size in CHART_SIZES for line in chart_data.ascii_speedup_lines(summary, *size))


def _plots(summary: Summary, plots_dir: str) -> str:
    from ddptop.report import plots  # matplotlib

    return ", ".join(plots.save_plots(summary, plots_dir))


def renderers(plots_dir: str | None = None) -> dict[str, Callable[[Summary], Any]]:
    """Each output by the name a failure gives it."""
    from ddptop.report import csv_table, sections

    diffs: dict[int, Callable[[str], str]] = {}

    def diffed(summary: Summary) -> Callable[[str], str]:  # the three forms of one comparison
        return diffs.setdefault(id(summary), _diff(summary))
    from ddptop.report.store import summary_paths

    found: dict[str, Callable[[Summary], Any]] = {
        "text report": sections.text_report,
        "closing lines": lambda s: sections.closing_text(s, summary_paths(s.run_dir or "RUN_DIR")),
        "Markdown": sections.markdown,
        "CSV": csv_table.csv_text,
        "JSON round trip": _round_trip,
        "summary screen's sections": lambda s: [sections.screen_sections(s, topology) for topology in (True, False)],
        "speedup chart (plotext)": _plotext_chart,
        "speedup chart (ASCII)": _ascii_chart,
        "diff against itself (text)": lambda s: diffed(s)("text"),
        "diff against itself (Markdown)": lambda s: diffed(s)("md"),
        "diff against itself (JSON)": lambda s: diffed(s)("json"),
    }
    if plots_dir is not None:
        found["plots"] = lambda s: _plots(s, plots_dir)
    return found


def check(summary: Summary, where: str, plots_dir: str | None = None) -> None:
    """Render the summary in every output; raise ``UnrenderableSummary`` naming the first that fails."""
    for name, render in renderers(plots_dir).items():
        try:
            render(summary)
        except Exception as exc:  # any fault of any output is the finding
            raise UnrenderableSummary(where, name, exc) from exc
