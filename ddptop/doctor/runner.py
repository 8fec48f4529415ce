"""Every check, in ``CHECKS`` order, on one shared context."""

from __future__ import annotations

from collections.abc import Callable

from ddptop.doctor.checks import CHECKS
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.result import Check


def run_doctor(skip_loop: bool = False, quick: bool = False,
               report: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check's result, each handed to ``report`` as it ends. ``quick``: nothing is launched (the store,
    the loop and nccl-tests are skipped); ``skip_loop``: the loop comparison alone is."""
    results: list[Check] = []
    with DoctorContext(skip_loop=skip_loop, quick=quick) as context:
        for check in CHECKS:
            result = check.run(context)
            results.append(result)
            if report is not None:
                report(result)
    return results
