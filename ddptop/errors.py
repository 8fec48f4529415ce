"""Exit codes and the one base class of every error a user caused.

``cli.main`` catches ``DdptopError`` alone: each subclass carries a one-line message for stderr and the
exit code ``EXIT_BAD_INPUT``. A fault inside ddptop is not a ``DdptopError`` and keeps its traceback.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILED = 1  # a configuration failed (out of memory included, except where a batch sweep expects it)
EXIT_BAD_INPUT = 2
EXIT_VIEW_FAILED = 3  # the live view, the summary screen or watch raised: what was measured is saved, the traceback in ui-error.log
EXIT_INTERRUPTED = 130  # Ctrl-C, SIGTERM or SIGHUP: the ranks were stopped and the summary written


class DdptopError(ValueError):
    """Bad input from the user: printed as ``ddptop: error: <message>``, exit code 2."""

    exit_code = EXIT_BAD_INPUT


class PlanError(DdptopError):
    """A plan that cannot run (``ddptop.run.plan``): one line, before any launch."""


class UsageError(DdptopError):
    """A command line that cannot be obeyed (bad flag, missing terminal, ...)."""
