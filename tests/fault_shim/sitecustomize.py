"""A fault put into a real ddptop process by the tests (``PYTHONPATH=tests/fault_shim``): Python imports this
module at start-up. ``DDPTOP_TEST_FAULT=summary-screen`` makes the summary screen raise when it is shown, as a
chart handed a figure of the wrong type once did, so that a test can see what a person sees when a view fails."""

import os

if os.environ.get("DDPTOP_TEST_FAULT") == "summary-screen":
    from ddptop.tui import screens

    def _raise(self):
        raise TypeError("must be real number, not Estimate (a fault put in by the test)")

    screens.SummaryScreen.on_mount = _raise
