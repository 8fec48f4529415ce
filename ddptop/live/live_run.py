"""A sweep in progress, as every frontend drives it: start, skip, stop, save now, finish.

``create_live_run`` is the one place a run is put together (plan, run directory, environment, topology,
session, telemetry monitor); the CLI, the tests and the benchmarks all start runs through it. ``LiveRun``
owns the sweep thread and the telemetry monitor. Frontends (the headless progress view and the TUI) read
snapshots at their own frame rate and call these methods; ``finish`` always stops the monitor, reads every
event left on disk and writes the summary, whatever ended the run.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

from ddptop.run.cluster import Cluster
from ddptop.errors import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK
from ddptop.run.plan_records import Plan
from ddptop.run.options import PlanOptions
from ddptop.protocol import variants
from ddptop.protocol.vocab import FAILED, Status
from ddptop.report import store
from ddptop.report.schema import Summary
from ddptop.run.session import Session
from ddptop.run.sweep import SweepRunner
from ddptop.protocol.layout import ENVIRONMENT_FILE, TIMELINE_FILE, TOPOLOGY_FILE
from ddptop.protocol.storage import describe_os_error, write_json
from ddptop.protocol.wire import EventsUnwritable
from ddptop.run import environment
from ddptop.run.plan import build_plan
from ddptop.run.workloads import check_workloads
from ddptop.run.rundir import RunDirError, create_run_dir
from ddptop.telemetry.inventory import read_inventory
from ddptop.telemetry.monitor import Monitor
from ddptop.telemetry.topology import Topology, read_topology


class LiveRun:
    def __init__(
        self,
        plan: Plan,
        session: Session,
        environment: dict[str, Any],
        monitor: Monitor | None = None,
        cluster: Cluster | None = None,
        topology: Topology | None = None,
        fallback_dir: str | None = None,
        plots: bool = True,
    ) -> None:
        self.plan = plan
        self.plots = plots  # drawn after the summary is saved (--no-plots: not at all)
        self.fallback_dir = fallback_dir  # the summary's second home (store.save_summary)
        self.session = session
        self.environment = environment
        self.monitor = monitor
        self.topology = topology
        self.runner = SweepRunner(plan, session, cluster=cluster)
        self.interrupted = False
        self.summary: Summary | None = None
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
            from ddptop.report import build  # numpy: loaded with the summary, not with the live view
            summary = build.build_summary(self.session, self.environment)
            return store.save_summary(summary, self.session.run_dir, self.fallback_dir)

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
        self.session.close()  # its last line, before what could not be saved is told
        with self._save_lock:
            self.session.refresh(final=True)
            from ddptop.report import build  # numpy: loaded with the summary, not with the live view
            kept = self.monitor.unsaved if self.monitor is not None else None
            topology = self.topology.to_json() if self.topology is not None else None
            self.summary = build.build_summary(self.session, self.environment, kept, topology)
            not_saved = self.not_saved()
            if not_saved:
                self.summary.not_saved = not_saved
            self.paths = store.save_summary(self.summary, self.session.run_dir, self.fallback_dir,
                                            {TIMELINE_FILE: kept} if kept else None)
            if self.plots and "fallback" not in self.paths and "save_error" not in self.paths:
                self.paths.update(store.save_plots_safely(self.summary, self.session.run_dir))

    def not_saved(self) -> dict[str, str]:
        """Run-directory files a full disk (a quota, ...) stopped, and why: their data is in memory only."""
        found = dict(self.session.not_saved)
        if self.monitor is not None and self.monitor.not_saved:
            found[TIMELINE_FILE] = self.monitor.not_saved
        if self.runner.storage_stop is not None:  # removed or read-only: none of its files can be trusted whole
            found["run directory"] = self.runner.storage_stop.removeprefix("sweep stopped: ")
        return found

    def exit_code(self) -> int:
        if self.interrupted:
            return EXIT_INTERRUPTED
        # A batch sweep runs until out of memory on purpose: there "oom" is the answer, not a fault; and a
        # script's try (ddptop tune -- train.py) that the script or torch refuses is not applicable, an answer
        # too: only the script as written failing is a fault.
        faults = {Status.FAILED} if self.plan.batch_sweep else FAILED
        if self.summary and any(c.status in faults and not (c.kind.own_program and not variants.as_written(c.variant))
                                for c in self.summary.configs):
            return EXIT_FAILED
        if (self.paths and self.paths.get("save_error")) or (self.summary and self.summary.not_saved):
            return EXIT_FAILED  # measured, but not all saved where it belongs
        return EXIT_OK


def gpu_steps_run(session: Session) -> bool:
    """Whether a configuration's warm-up or measured steps run on a GPU now: the telemetry reads faster then
    (``Monitor.fast_while``), so a short measured window gets readings of its own."""
    running = session.measuring()
    state = session.configs.get(running) if running else None
    return state is not None and state.spec.device == "cuda"


def create_live_run(
    options: PlanOptions,
    out: str | None = None,
    telemetry_interval: float = 1.0,
    cluster: Cluster | None = None,
    inventory: Any | None = None,
    cpu_count: int | None = None,
    fallback_dir: str | None = None,
    plots: bool = True,
    progress: Callable[[str], None] | None = None,
) -> LiveRun:
    """Validate the plan, then write the run directory's first files and wire session, monitor and sweep.

    Raises a ``DdptopError`` (one line for the user) before anything is written if the plan is invalid or one
    of its own models (a factory, an hf: model) cannot run or its check makes no progress for the plan's hang
    timeout (``ddptop.run.workloads``); ``progress`` is told one line as each phase of that check starts.
    ``inventory`` defaults to this node's GPUs as NVML reports them.
    """
    inventory = inventory if inventory is not None else read_inventory()
    plan = check_workloads(build_plan(options, inventory, cpu_count), progress)
    run_dir = create_run_dir(out, plan.name)
    env = environment.collect(inventory)
    topology = read_topology()
    try:
        write_json(os.path.join(run_dir, ENVIRONMENT_FILE), env)
        write_json(os.path.join(run_dir, TOPOLOGY_FILE), topology.to_json())
        session = Session.create(plan, run_dir)
    except OSError as exc:  # a full disk or quota before anything ran: one line, nothing measured to lose
        raise RunDirError(f"cannot write the run directory {run_dir}: "
                          f"{describe_os_error(exc, exc.filename or run_dir)}") from None
    except EventsUnwritable as exc:
        raise RunDirError(f"cannot write the run directory {run_dir}: {exc}") from None
    monitor = None
    if telemetry_interval > 0:
        monitor = Monitor(telemetry_interval, os.path.join(run_dir, TIMELINE_FILE), None, session.rank_processes,
                          fast_while=lambda: gpu_steps_run(session))
    return LiveRun(plan, session, env, monitor, cluster, topology, fallback_dir, plots)
