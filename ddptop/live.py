"""A sweep in progress, as every frontend drives it: start, skip, stop, save now, finish.

``LiveRun`` owns the sweep thread and the telemetry monitor. Frontends (the headless progress view and the
TUI) only read the session and the monitor at their own frame rate and call these methods; ``finish``
always stops the monitor, reads every event left on disk and writes the summary, whatever ended the run.
"""

from __future__ import annotations

import threading
from typing import Any

from ddptop.cluster import Cluster
from ddptop.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ddptop.model import Plan
from ddptop.protocol.vocab import FAILED, Status
from ddptop.report import summary as summary_mod
from ddptop.session import Session
from ddptop.sweep import SweepRunner
from ddptop.telemetry.monitor import Monitor


class LiveRun:
    def __init__(
        self,
        plan: Plan,
        session: Session,
        environment: dict[str, Any],
        monitor: Monitor | None = None,
        cluster: Cluster | None = None,
    ) -> None:
        self.plan = plan
        self.session = session
        self.environment = environment
        self.monitor = monitor
        self.runner = SweepRunner(plan, session, cluster=cluster)
        self.interrupted = False
        self.summary: dict[str, Any] | None = None
        self.paths: dict[str, str] | None = None
        self._worker = threading.Thread(target=self.runner.run, name="ddptop-sweep", daemon=True)
        self._finished = False
        self._save_lock = threading.Lock()
        self._finish_lock = threading.Lock()  # finish may be called from a signal's thread and the main one

    def start(self) -> "LiveRun":
        if self.monitor is not None:
            self.monitor.start()
        self._worker.start()
        return self

    @property
    def running(self) -> bool:
        return self._worker.is_alive()

    def join(self, timeout: float | None = None) -> None:
        self._worker.join(timeout)

    def skip(self) -> None:
        """End the running configuration (status ``skipped``) and go on with the next."""
        self.runner.request_skip()

    def stop(self) -> None:
        """Stop the ranks cleanly; what was measured is kept (exit code 130)."""
        self.interrupted = True
        self.runner.request_stop()

    def save_now(self) -> dict[str, str]:
        """Write the summary of what is measured so far, without stopping."""
        with self._save_lock:
            self.session.refresh()
            summary = summary_mod.build_summary(self.session, self.environment)
            return summary_mod.save_summary(summary, self.session.run_dir)

    def finish(self) -> int:
        """Wait for the sweep, write the final summary; the exit code (0 ok, 1 a failure, 130 stopped)."""
        with self._finish_lock:
            if not self._finished:
                self._finish_once()
        return self.exit_code()

    def _finish_once(self) -> None:
        self._finished = True
        self._worker.join()
        if self.monitor is not None:
            self.monitor.stop()  # before the summary, which reads the whole timeline
        with self._save_lock:
            self.session.refresh(final=True)
            self.summary = summary_mod.build_summary(self.session, self.environment)
            self.paths = summary_mod.save_summary(self.summary, self.session.run_dir)
            self.paths.update(summary_mod.save_plots_safely(self.summary, self.session.run_dir))
        self.session.close()

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        # A batch sweep runs until out of memory on purpose: there "oom" is the answer, not a fault.
        faults = {Status.FAILED} if self.plan.batch_sweep else FAILED
        if self.summary and any(c["status"] in faults for c in self.summary["configs"]):
            return EXIT_FAILED
        return EXIT_OK
