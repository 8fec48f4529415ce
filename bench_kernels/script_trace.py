"""A profiler trace of a user's script, over steps it runs after its measured ones, driven by the probe's marks.

The kernel traces a step it can call (``bench_kernels.trace``); a script's steps are its own, so here the probe's
step marks drive the same schedule: at the step end where the measured steps are done (the same step on every
rank, as the ranks agreed on it) the profiler starts, each later step end calls ``prof.step()``, and after one
warm-up step and ``steps + 1`` active ones the profiler stops, writes the rank's ``.pt.trace.json.gz`` and the
probe ends the script as it would have without the trace. No measured step carries the profiler. The last active
step is in the file and left out of the breakdown, as the kernel's; the ``trace`` event carries the same fields.

Every traced step and the export say a heartbeat first, so the hang watch hears the rank; a failure of the
profiler costs the trace alone (a note), never the script; a script that ends inside the window keeps the steps
it traced.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from bench_kernels.errors import one_line
from bench_kernels.trace import PROFILER_WARMUP


class ScriptTrace:
    """The profiler over ``steps`` of a script's steps after its measured ones (``path``: the rank's file)."""

    def __init__(self, torch: Any, path: str, steps: int, device_type: str,
                 progress: Callable[[str], None]) -> None:
        self.torch = torch
        self.path = path
        self.steps = steps
        self.device_type = device_type
        self.progress = progress
        self.total = PROFILER_WARMUP + steps + 1  # the last active step is in the file, out of the breakdown
        self.step_s: list[float] = []
        self.prof: Any = None
        self.started = 0.0
        self.export_s: float | None = None
        self.note: str | None = None

    def start(self) -> bool:
        """Start the profiler at a step's end; False where it could not start (the note says why)."""
        from torch.profiler import ProfilerActivity, profile, schedule

        self.started = time.perf_counter()
        try:
            os.makedirs(os.path.dirname(self.path), exist_ok=True)
            activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if self.device_type == "cuda" else [])
            self.prof = profile(activities=activities,
                                schedule=schedule(wait=0, warmup=PROFILER_WARMUP, active=self.steps + 1, repeat=1),
                                on_trace_ready=self._export)
            self.prof.start()
        except Exception as exc:  # noqa: BLE001 - the trace is lost, never the script
            self.prof = None
            self.note = f"the profiler could not start: {one_line(exc)}"
            return False
        self.progress(f"traced step 1 of {self.total}")
        return True

    def step_ended(self, seconds: float) -> bool:
        """A traced step ended after ``seconds``: mark it for the profiler. True once the window is done (the
        file written, or the trace lost: the note says why)."""
        self.step_s.append(seconds)
        done = len(self.step_s) >= self.total
        self.progress("writing the trace" if done else f"traced step {len(self.step_s) + 1} of {self.total}")
        try:
            self.prof.step()
            if done:
                self.prof.stop()
        except Exception as exc:  # noqa: BLE001 - the trace is lost, never the script
            self.note = f"the profiler failed at traced step {len(self.step_s)}: {one_line(exc)}"
            return True
        return done

    def cut_short(self) -> None:
        """The script ended inside the window: stop the profiler, keeping the steps it traced (their file)."""
        if self.prof is None or len(self.step_s) >= self.total:
            return
        self.note = (f"the script ended after {len(self.step_s)} of its {self.total} traced steps (one warm-up, "
                     f"{self.kept} kept, one left out)")
        self.progress("writing the trace")
        try:
            self.prof.stop()
        except Exception as exc:  # noqa: BLE001
            self.note += f"; the profiler failed as it stopped: {one_line(exc)}"

    def _export(self, prof: Any) -> None:
        started = time.perf_counter()
        try:
            prof.export_chrome_trace(self.path)
        except Exception as exc:  # noqa: BLE001 - the trace is lost, never the script
            lost = f"the trace could not be written: {type(exc).__name__}: {exc}"
            self.note = f"{self.note}; {lost}" if self.note else lost
        self.export_s = time.perf_counter() - started

    @property
    def kept(self) -> int:
        """The traced steps the breakdown keeps: those after the warm-up, less the last one recorded."""
        return min(self.steps, max(0, len(self.step_s) - PROFILER_WARMUP - 1))

    def fields(self) -> dict[str, Any]:
        """The ``trace`` event's fields, as the kernel's (``bench_kernels.trace.trace_steps``)."""
        kept = self.step_s[PROFILER_WARMUP:PROFILER_WARMUP + self.kept]
        fields: dict[str, Any] = {"steps": self.kept, "step_s": kept, "wall_s": time.perf_counter() - self.started,
                                  "export_s": self.export_s, "note": self.note, "device": self.device_type}
        if self.export_s is not None and os.path.exists(self.path):
            fields["size_bytes"] = os.path.getsize(self.path)
        elif self.note is None:
            fields["note"] = "the profiler wrote no trace"
        return fields
