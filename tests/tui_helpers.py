"""Waiting on a Textual app under Pilot: conditions are polled, never slept on blindly."""

import time


async def wait_for(pilot, condition, timeout: float = 240.0, step: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the TUI"
        await pilot.pause(step)


async def screen_text(app, pilot, selector: str, timeout: float = 30.0) -> str:
    """A widget's text on the current screen once mounted: a pushed screen composes a moment later."""
    await wait_for(pilot, lambda: bool(app.screen.query(selector)), timeout, step=0.05)
    return str(app.screen.query_one(selector).render())


async def summary_text(app, pilot) -> str:
    # the screen composes its blocks a moment after it is pushed, and a table inside its sideways scroller a
    # moment after that: wait for their text, every table's included, not the container
    def composed() -> bool:
        scrollers = app.screen.query("#summary-tables HorizontalScroll")
        return (bool(app.screen.query("#summary-tables")) and bool(app.screen.plain_text())
                and all(scroller.query(".table") for scroller in scrollers))

    await wait_for(pilot, composed, 30.0, step=0.05)
    return app.screen.plain_text()


async def first_frame(pilot) -> None:
    """Snapshots are taken off the UI thread and drawn when they arrive: wait for the first two (the first
    may land before the first layout has settled; the chart then redraws at its final size)."""
    await wait_for(pilot, lambda: pilot.app.frames_shown >= 2, timeout=30, step=0.02)


async def settled(pilot) -> None:
    """A finished run drawn in full (no more snapshots are taken): what a snapshot test compares."""
    await wait_for(pilot, lambda: pilot.app.settled, timeout=30, step=0.02)


async def open_summary(pilot) -> None:
    await first_frame(pilot)
    await pilot.press("r")
    await wait_for(pilot, lambda: bool(pilot.app.screen.query("#summary-tables")), timeout=30, step=0.02)


async def tune_standing(app, pilot) -> list[tuple[str, str]]:
    """The Tune tab's rows as (variant, status), once the tab is shown."""
    await pilot.press("5")
    await pilot.pause()
    panel = app.query_one("#tune")
    return [(panel.get_cell(row, "variant"), str(panel.get_cell(row, "status"))) for row in panel.rows]
