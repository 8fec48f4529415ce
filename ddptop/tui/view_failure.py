"""A view that raised: never a silent exit 0.

Textual hands every unhandled exception of an app to one method and then closes the app; ``FailureAwareApp``
keeps the traceback there instead of printing it over the closing tables. The command that ran the app then
calls ``report``: the traceback goes to ``ui-error.log`` in the run directory (or beside the summary
opened, or a temporary file where neither can be written), one line on stderr says what failed and where
its traceback is, and the command exits ``EXIT_VIEW_FAILED``. What the sweep measured and its summary are
saved before (``run_tui`` finishes the run whatever ended the app).
"""

from __future__ import annotations

import os
import sys
import tempfile
import traceback

from textual.app import App

from ddptop.control import display_path
from ddptop.errors import EXIT_VIEW_FAILED
from ddptop.protocol.layout import UI_ERROR_LOG


class FailureAwareApp(App[int]):
    """An app that remembers the first exception it closed on (``failure``: its traceback as text)."""

    failure: str | None = None

    def _handle_exception(self, error: Exception) -> None:
        # Textual's own door for every unhandled exception (a handler, a render, a worker that raises)
        if self.failure is None:
            self.failure = "".join(traceback.format_exception(error))
        super()._handle_exception(error)
        # its traceback goes to ui-error.log and a line says where (``report``), not over the closing tables
        getattr(self, "_exit_renderables", []).clear()


def report(failure: str, folder: str | None, what: str, note: str = "") -> int:
    """The traceback of ``what`` (the live view, the summary screen) into ``folder``'s ui-error.log, one line on
    stderr that says where (and ``note``: what was saved all the same); the exit code that says the view
    failed."""
    path = _write(failure, folder)
    last = failure.strip().splitlines()[-1] if failure.strip() else "an error"
    where = f"its traceback is in {display_path(path)}" if path else "its traceback follows"
    print(f"ddptop: {what} failed ({last}){'; ' + note if note else ''}; {where}", file=sys.stderr, flush=True)
    if path is None:
        print(failure, file=sys.stderr, flush=True)
    return EXIT_VIEW_FAILED


def _write(failure: str, folder: str | None) -> str | None:
    """The log written whole, in ``folder`` where it can be, else a temporary file of its own; None where
    neither could be written (a full disk)."""
    if folder:
        path = os.path.join(folder, UI_ERROR_LOG)
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(failure)
            return path
        except OSError:
            pass  # a read-only run of another user's, a full quota: a file of our own instead
    try:
        handle_fd, path = tempfile.mkstemp(prefix="ddptop-ui-error-", suffix=".log")
        with os.fdopen(handle_fd, "w", encoding="utf-8") as handle:
            handle.write(failure)
        return path
    except OSError:
        return None
