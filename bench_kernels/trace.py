"""A short profiler trace of a configuration's step, taken after its measured steps.

``torch.profiler`` (Kineto) records CPU activity and, on a GPU, CUDA activity for a few steps run after the
configuration's last measured step and its communication probe, so no timed step carries the profiler. The
schedule is one warm-up step (the profiler's own start-up lands there), then ``steps + 1`` active steps, the
last of which ddptop's breakdown leaves out (the profiler may cut it short, as Holistic Trace Analysis
assumes too); ``prof.step()`` after every step marks the ``ProfilerStep#N`` spans. No ``record_shapes`` nor
``with_stack``: both hold tensors alive and break the step spans in Perfetto.

Each rank writes its own ``.pt.trace.json.gz`` (``export_chrome_trace`` compresses a ``.gz`` path) and says
in its event what only it knows: how many steps it kept, how long they and the export took, the file's size
and its device. ddptop breaks the file down (``ddptop.analysis.trace_breakdown``), so the figures come from
the file a user opens, and the rank spends no time on them.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

PROFILER_WARMUP = 1  # steps the profiler runs without recording: its own start-up lands there


class TracedStepFailed(Exception):
    """A traced step raised: the group may be inside a collective, so the rank cannot go on alone."""


def trace_steps(torch: Any, step: Callable[[], None], path: str, steps: int, device_type: str,
                progress: Callable[[str], None] = lambda doing: None) -> dict[str, Any]:
    """Profile ``steps`` kept steps of ``step`` into ``path``; the fields of the rank's ``trace`` event.
    ``progress`` is told what runs after each step and before the export (the hang watch hears the rank).

    A failure inside a step raises ``TracedStepFailed``; one in writing the file (a full disk, a trace too
    large) is said in the event's ``note`` and costs the trace alone."""
    from torch.profiler import ProfilerActivity, profile, schedule

    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
    except OSError as exc:  # read-only, full: the folder cannot be made, so no step is profiled
        return {"steps": steps, "step_s": [], "wall_s": 0.0, "export_s": None,
                "note": f"the trace could not be written: {type(exc).__name__}: {exc}"}
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device_type == "cuda" else [])
    exported: dict[str, Any] = {}

    def export(prof: Any) -> None:
        started = time.perf_counter()
        try:
            prof.export_chrome_trace(path)
        except Exception as exc:  # noqa: BLE001 - the trace is lost, never the configuration
            exported["note"] = f"the trace could not be written: {type(exc).__name__}: {exc}"
        exported["export_s"] = time.perf_counter() - started

    active = steps + 1  # the last is in the file, left out of the breakdown
    step_s: list[float] = []
    started = time.perf_counter()
    try:
        with profile(activities=activities, schedule=schedule(wait=0, warmup=PROFILER_WARMUP, active=active, repeat=1),
                     on_trace_ready=export) as prof:
            for index in range(PROFILER_WARMUP + active):
                begin = time.perf_counter()
                step()
                step_s.append(time.perf_counter() - begin)
                progress(f"traced step {index + 1} of {PROFILER_WARMUP + active}"
                         + ("; writing the trace" if index + 1 == PROFILER_WARMUP + active else ""))
                prof.step()
    except Exception as exc:
        raise TracedStepFailed(f"{type(exc).__name__}: {exc}") from exc
    wall_s = time.perf_counter() - started
    fields: dict[str, Any] = {"steps": steps, "step_s": step_s[PROFILER_WARMUP:PROFILER_WARMUP + steps],
                              "wall_s": wall_s, "export_s": exported.get("export_s"), "note": exported.get("note"),
                              "device": device_type}
    if fields["note"] is not None:
        return fields
    try:
        fields["size_bytes"] = os.path.getsize(path)
    except OSError as exc:  # written, then gone: nothing for ddptop to read
        fields["note"] = f"the trace could not be found after its export: {exc}"
    return fields
