"""The summary screen of a summary, opened as a person would: ``check_screens`` raises where it cannot be.

It runs the core's check of every other output first (``ddptop.report.outputs``: the text report, Markdown,
CSV, the JSON round trip, the plots, the speedup chart built by plotext, ``diff`` against itself), then opens
the summary screen under Textual's Pilot at 80x24 (the chart below the tables: ``g`` shows it and the tables
again) and 160x50 (the chart beside them), each also with ``--ascii``, and the Traces screen (``x``) where
the summary has traces. ``tests/test_every_output.py`` runs it on every run in ``tests/data``.
"""

from __future__ import annotations

import asyncio
import contextlib
import traceback
from collections.abc import Iterator

from ddptop.report import outputs
from ddptop.report.schema import Summary
from ddptop.tui import format as fmt

SIZES = ((80, 24), (160, 50))


@contextlib.contextmanager
def _ascii(on: bool) -> Iterator[None]:
    """The view's ASCII switch for one app (``--ascii`` sets it for the whole process)."""
    before = fmt.ASCII
    fmt.ASCII = on
    try:
        yield
    finally:
        fmt.ASCII = before


async def _open(summary: Summary, where: str, size: tuple[int, int]) -> str | None:
    """The summary screen at ``size``, its keys pressed; the traceback where it raised, else None."""
    from ddptop.tui.app import SummaryApp
    from ddptop.tui.screens import SummaryScreen, TracesScreen, has_speedup_chart

    app = SummaryApp(summary, {"json": where})
    try:
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            if not isinstance(app.screen, SummaryScreen):
                return f"the summary screen did not open: {type(app.screen).__name__} is shown"
            if has_speedup_chart(summary):
                for _ in range(2):  # in a narrow window, the chart over the whole screen and the tables again
                    await pilot.press("g")
                    await pilot.pause()
            if any(entry.trace is not None for entry in summary.configs):
                await pilot.press("x")
                await pilot.pause()
                if not isinstance(app.screen, TracesScreen):
                    return f"the traces screen did not open: {type(app.screen).__name__} is shown"
                await pilot.press("escape")
                await pilot.pause()
    except Exception as exc:  # Pilot raises what the app raised: the finding
        return app.failure or "".join(traceback.format_exception(exc))
    return app.failure


async def check_screens(summary: Summary, where: str, plots_dir: str | None = None) -> None:
    """Every output of ``outputs.check``, then the summary screen at each size, with and without ``--ascii``;
    raise ``outputs.UnrenderableSummary`` naming the first that failed."""
    outputs.check(summary, where, plots_dir)
    for size in SIZES:
        for ascii in (False, True):
            with _ascii(ascii):
                failure = await _open(summary, where, size)
            if failure:
                name = f"summary screen at {size[0]}x{size[1]}" + (" with --ascii" if ascii else "")
                raise outputs.UnrenderableSummary(where, name, failure)


def check_everywhere(summary: Summary, where: str, plots_dir: str | None = None) -> None:
    """``check_screens`` from code that runs no event loop of its own."""
    asyncio.run(check_screens(summary, where, plots_dir))
