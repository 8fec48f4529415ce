"""A script's profiler trace, driven by the probe's step marks after its measured steps
(``bench_kernels.script_trace``), and broken down by ddptop as a kernel's (``ddptop.analysis.traces``)."""

from __future__ import annotations

import os

import pytest

torch = pytest.importorskip("torch")

from ddptop.analysis import traces  # noqa: E402
from ddptop.protocol.layout import trace_file  # noqa: E402
from tests.test_script_probe import InProcess, _model_and_loader, _train, of_type, steps  # noqa: E402

CONFIG = "train/n1"


def _traced_run(tmp_path, loop_steps=1000, trace_steps=2, run_dir=None):
    """The probe over a plain loop of ``loop_steps`` steps (2 warm-up, 6 measured), tracing ``trace_steps``."""
    relative = trace_file(CONFIG, 0)
    run = InProcess(tmp_path, trace_to=(str(run_dir or tmp_path), relative), warmup=2, iters=6,
                    trace_steps=trace_steps)
    model, loader = _model_and_loader(batches=400)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    ended_by = run.run(lambda: _train(model, loader, optimizer, steps=loop_steps))
    return run, ended_by, relative


def test_the_steps_after_the_measured_ones_are_traced_and_the_file_broken_down(tmp_path):
    run, ended_by, relative = _traced_run(tmp_path)
    events = run.events()
    (trace,) = of_type(events, "trace")
    (end,) = of_type(events, "config_end")
    assert ended_by == "ddptop" and end["ended_by"] == "ddptop"
    # the measured steps are the plan's, none of them traced; the traced ones ran after: 1 warm-up, 2 kept, 1 out
    assert end["iters"] == 6 and len(steps(events, "measure")) == 6
    assert end["script"]["optimizer_steps"] == 2 + 6 + 1 + 2 + 1
    assert trace["path"] == relative and trace["steps"] == 2 and len(trace["step_s"]) == 2
    assert trace["note"] is None and trace["size_bytes"] == os.path.getsize(tmp_path / relative) > 0
    assert trace["device"] == "cpu" and trace["wall_s"] >= sum(trace["step_s"])
    heard = [e["doing"] for e in of_type(events, "heartbeat")]
    assert "traced step 1 of 4" in heard and "writing the trace" in heard
    # the trace event comes before config_end, as the kernel's: the configuration ends with its trace known
    kinds = [e["type"] for e in events]
    assert kinds.index("trace") < kinds.index("config_end")
    found = traces.config_trace({0: trace}, measured_p50=0.001, run_dir=str(tmp_path))
    assert found is not None and found.breakdown is not None and found.steps == 2
    assert found.breakdown.device == "cpu" and not found.notes


def test_a_script_that_ends_inside_the_window_keeps_the_steps_it_traced(tmp_path):
    run, ended_by, relative = _traced_run(tmp_path, loop_steps=2 + 6 + 3, trace_steps=3)
    events = run.events()
    (trace,) = of_type(events, "trace")
    assert ended_by == "script"
    assert trace["note"] == ("the script ended after 3 of its 5 traced steps (one warm-up, 1 kept, one left out)")
    assert trace["steps"] == 1 and len(trace["step_s"]) == 1 and trace["size_bytes"] > 0
    (end,) = of_type(events, "config_end")
    assert end["iters"] == 6


def test_a_trace_that_cannot_be_written_costs_the_trace_and_the_script_ends_as_planned(tmp_path):
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    run, ended_by, _ = _traced_run(tmp_path, run_dir=blocked)
    events = run.events()
    (trace,) = of_type(events, "trace")
    assert trace["note"].startswith("the profiler could not start: NotADirectoryError")
    assert "size_bytes" not in trace and trace["steps"] == 0
    (end,) = of_type(events, "config_end")
    assert ended_by == "ddptop" and end["iters"] == 6 and end["script"]["optimizer_steps"] == 2 + 6


def test_no_trace_without_its_steps(tmp_path):
    run, ended_by, _ = _traced_run(tmp_path, trace_steps=0)
    assert of_type(run.events(), "trace") == [] and ended_by == "ddptop"
