"""The key footer fits the terminal (ddptop.tui.footer): its usual spacing where it can, compact where it must,
the palette's key dropped last; and watch/view leave out the keys only the sweep's own ddptop can act on."""

import asyncio

import pytest
from textual.app import App

from ddptop.tui.app import DdptopApp
from ddptop.tui.footer import FittingFooter
from ddptop.tui.screens import SummaryScreen

from .tui_helpers import wait_for

RECORDED = "tests/data/recorded-run"


class _LiveKeys(App):
    """A bare app with the live view's keys, so that the footer is measured on exactly what a sweep shows."""

    BINDINGS = DdptopApp.BINDINGS

    def compose(self):
        yield FittingFooter()


async def _footer(app, pilot):
    await wait_for(pilot, lambda: bool(app.screen.query("FooterKey")), timeout=30, step=0.05)
    await pilot.pause()
    footer = app.screen.query_one(FittingFooter)
    keys = [key for key in app.screen.query("FooterKey")]
    # where the keys must end: the screen's edge, or the palette's key docked at the right
    edge = min([k.region.x for k in keys if k.has_class("-command-palette")] + [app.screen.size.width])
    plain = [k for k in keys if not k.has_class("-command-palette")]
    return footer, [k.description for k in keys], max(k.region.right for k in plain) - edge


@pytest.mark.parametrize("width, compact, palette", [(160, False, True), (100, False, True), (90, True, False),
                                                     (80, True, False)])
def test_the_live_keys_fit_at_full_spacing_or_compact_and_every_one_is_whole(width, compact, palette):
    async def run():
        app = _LiveKeys()
        async with app.run_test(size=(width, 24)) as pilot:
            return await _footer(app, pilot)

    footer, keys, overrun = asyncio.run(run())
    assert (footer.compact, footer.show_command_palette) == (compact, palette)
    assert keys[:8] == ["Quit", "Save now", "Skip config", "Pause", "Summary", "Screenshot", "Traces", "Help"]
    assert overrun <= 0  # the last key, Help, whole, before the palette's key where that is shown
    assert ("palette" in keys) == palette


def test_a_resize_refits_the_footer():
    async def run():
        app = _LiveKeys()
        async with app.run_test(size=(160, 24)) as pilot:
            footer, _, wide_overrun = await _footer(app, pilot)
            wide = (footer.compact, footer.show_command_palette, wide_overrun)
            await pilot.resize_terminal(80, 24)
            await wait_for(pilot, lambda: app.screen.query_one(FittingFooter).compact, timeout=10, step=0.05)
            narrow = await _footer(app, pilot)
        return wide, narrow

    wide, (narrow, keys, overrun) = asyncio.run(run())
    assert wide[:2] == (False, True) and wide[2] <= 0  # at 160: full spacing, the palette's key, all whole
    assert narrow.compact and not narrow.show_command_palette and overrun <= 0
    assert "Help" in keys


def test_view_shows_no_save_or_skip_key_yet_says_why_when_one_is_pressed():
    async def run():
        app = DdptopApp.for_recorded(RECORDED)
        async with app.run_test(size=(80, 24)) as pilot:
            _, on_main, main_right = await _footer(app, pilot)
            await pilot.press("s")
            await pilot.pause()
            said = [str(n.message) for n in app._notifications]
            await pilot.press("r")
            await wait_for(pilot, lambda: isinstance(app.screen, SummaryScreen), timeout=60)
            _, on_summary, summary_right = await _footer(app, pilot)
        return on_summary, summary_right, on_main, main_right, said

    on_summary, summary_right, on_main, main_right, said = asyncio.run(run())
    for keys in (on_summary, on_main):
        assert "Save now" not in keys and "Skip config" not in keys and "Help" in keys
    assert on_summary[0] == "Back" and summary_right <= 0 and main_right <= 0
    assert any(message.startswith("Only looking") for message in said)
