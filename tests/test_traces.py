"""The profiler trace of each configuration: the kernel that writes it, its place in the plan, ddptop's
breakdown of the ranks' files (and a recorded run's events where the files are gone), the summary, the report,
the verdict and the views. The interval arithmetic itself is tests/test_trace_breakdown.py's."""

from __future__ import annotations

import gzip
import json
import os
import shutil
import tempfile

import pytest

from ddptop.analysis import step_bound, traces
from ddptop.analysis.trace_breakdown import breakdown
from ddptop.analysis.trace_file import read_trace
from ddptop.report import build, sections
from ddptop.records import Estimate
from ddptop.report.schema import Summary, Trace
from ddptop.report.trace_tables import breakdown_line

from .conftest import ddptop

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RECORDED = os.path.join(REPO, "tests", "data", "recorded-run")
GLOO_TRACES = [os.path.join(REPO, "tests", "data", "traces", f"gloo-rank{r}.pt.trace.json.gz") for r in (0, 1)]


# -- a trace in Kineto's format, written by hand ------------------------------------------------------------

def kineto_trace(steps: int, kernels_per_step: int, kernel_us: float, gap_us: float, queued: bool = False,
                 memcpy_us: float = 0.0) -> dict:
    """``steps + 1`` ProfilerStep spans (the last is left out by the breakdown), each with ``kernels_per_step``
    kernels of ``kernel_us`` with ``gap_us`` of idle GPU between them. Each kernel is launched ``gap_us`` after
    the previous one ended (the GPU waits for the host), or, ``queued``, all at the step's start (the gaps are
    then not the host's). A ``memcpy_us`` copy ends each step."""
    events: list[dict] = []
    correlation = 0
    start = 1000.0
    span = kernels_per_step * (kernel_us + gap_us) + memcpy_us + gap_us
    for step in range(steps + 1):
        events.append({"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{step + 1}", "pid": 1, "tid": 1,
                       "ts": start, "dur": span})
        at = start + gap_us
        work = [("kernel", "volta_sgemm_128x64_nn", kernel_us)] * kernels_per_step
        work += [("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", memcpy_us)] if memcpy_us else []
        for cat, name, duration in work:
            correlation += 1
            launch = start + 0.5 if queued else at - 1.0
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": launch, "dur": 0.5, "args": {"correlation": correlation}})
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": at, "dur": duration,
                           "args": {"device": 0, "stream": 7, "correlation": correlation}})
            at += duration + gap_us
        start += span
    return {"traceEvents": events}


def trace_event(device: str, rank: int = 0) -> dict:
    """A rank's ``trace`` event as bench_kernels.trace writes it."""
    return {"rank": rank, "path": f"traces/c/rank{rank}.pt.trace.json.gz", "size_bytes": 40_000, "steps": 3,
            "wall_s": 0.5, "export_s": 0.1, "step_s": [0.001] * 3, "note": None, "device": device}


def write_trace(run_dir: str, event: dict, trace: dict) -> None:
    """The rank's trace file where its event says it is."""
    path = os.path.join(run_dir, event["path"])
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with gzip.open(path, "wt", encoding="utf-8") as handle:
        json.dump(trace, handle)


def traced(per_rank: dict[int, dict], device: str, p50: float = 0.001, **event) -> traces.ConfigTrace:
    """A configuration's trace as ddptop makes it: each rank's trace written to its file, its event as the
    rank sends it, and the files broken down."""
    with tempfile.TemporaryDirectory() as run_dir:
        events = {}
        for rank, trace in per_rank.items():
            events[rank] = {**trace_event(device, rank), **event.get(f"rank{rank}", {})}
            write_trace(run_dir, events[rank], trace)
        found = traces.config_trace(events, p50, run_dir)
    assert found is not None
    return found


def gpu_entry(trace: dict, **changes) -> dict:
    """A one-GPU configuration's summary entry whose trace is ``trace``."""
    entry = {"stats": {"sec_iter": {"p50": 0.001}}, "device": "cuda", "mode": "ddp", "world_size": 1,
             "trace": traced({0: trace}, "cuda").to_json()}
    entry.update(changes)
    return entry


def as_summary(trace: traces.ConfigTrace) -> Trace:
    """The trace as the summary holds it."""
    return Trace.from_json(json.loads(json.dumps(trace.to_json())))


# -- the summary's trace ---------------------------------------------------------------------------------------

def test_the_summary_puts_every_ranks_trace_together_with_its_cost():
    trace = kineto_trace(3, 4, 100.0, 20.0)
    found = traced({0: trace, 1: trace}, "cuda", rank0={"step_s": [0.0011] * 3, "size_bytes": 40_000},
                   rank1={"step_s": [0.0013] * 3, "size_bytes": 48_000})
    assert [f.rank for f in found.files] == [0, 1]
    assert found.steps == 3 and found.cost_ratio == pytest.approx(1.2)  # median of 1.1 and 1.3 ms
    assert found.bytes_per_step == 48_000 / 4  # the largest file over its 4 recorded steps (the last left out)
    assert found.wall_s == pytest.approx(0.5)  # the ranks spent no time on the breakdown
    assert found.breakdown is not None and found.breakdown.steps == 6  # 3 kept steps on each of 2 ranks
    idle = traces.figure(found, "idle_s")
    # each step: 4 kernels of 100 us with 20 us before each and after the last: 100 of 500 us idle
    assert idle is not None and idle.median == pytest.approx(0.2) and idle.low == pytest.approx(0.2)
    assert traces.on_gpu(found) and traces.config_trace({}, 0.001) is None


def test_a_rank_whose_trace_could_not_be_written_is_said_and_costs_the_others_nothing(tmp_path):
    written = trace_event("cuda", 0)
    write_trace(str(tmp_path), written, kineto_trace(3, 4, 100.0, 20.0))
    lost = {"rank": 1, "path": "traces/c/rank1.pt.trace.json.gz", "steps": 3, "wall_s": 0.4, "step_s": [0.001] * 3,
            "note": "the trace could not be written: OSError: [Errno 28] No space left on device"}
    found = traces.config_trace({0: written, 1: lost}, 0.001, str(tmp_path))
    assert found is not None and found.breakdown is not None
    assert [f.rank for f in found.files] == [0] and found.breakdown.steps == 3
    assert any("No space left on device" in note for note in found.notes)


def test_a_trace_file_gone_since_is_said_and_the_rest_is_reported(tmp_path):
    events = {rank: trace_event("cuda", rank) for rank in (0, 1)}
    write_trace(str(tmp_path), events[0], kineto_trace(3, 4, 100.0, 20.0))
    found = traces.config_trace(events, 0.001, str(tmp_path))
    assert found is not None and found.breakdown is not None and found.breakdown.steps == 3
    assert [f.rank for f in found.files] == [0, 1]  # both were written
    assert len(found.notes) == 1 and found.notes[0].startswith("the trace could not be read: ")
    assert "rank1.pt.trace.json.gz" in found.notes[0]


def test_a_run_recorded_when_the_ranks_broke_their_files_down_reads_the_files_and_else_its_events(tmp_path):
    """Its events carry each rank's breakdown and no device: the file is broken down where it is there (on the
    device its breakdown names, so a CUDA trace without kernels stays a window alone), the event's breakdown
    is used where it is gone, and the two agree."""
    steps_only = {"traceEvents": [e for e in kineto_trace(3, 4, 100.0, 60.0)["traceEvents"]
                                  if e["cat"] == "user_annotation"]}
    recorded = {}
    for rank, trace in ((0, kineto_trace(3, 4, 100.0, 60.0)), (1, steps_only)):
        event = {**trace_event("cuda", rank), "breakdown_s": 0.05, "breakdown": breakdown(trace, "cuda").to_json()}
        del event["device"]
        write_trace(str(tmp_path), event, trace)
        recorded[rank] = event
    from_files = traces.config_trace(recorded, 0.001, str(tmp_path), device="cpu")
    assert from_files is not None and from_files.wall_s == pytest.approx(0.55)  # the ranks' breakdown took time then
    assert from_files.notes == [breakdown(steps_only, "cuda").note]
    shutil.rmtree(tmp_path / "traces")
    assert traces.config_trace(recorded, 0.001, str(tmp_path), device="cpu") == from_files
    assert traces.config_trace(recorded, 0.001) == from_files  # no run directory: the events alone


def test_the_breakdown_comes_from_the_file_when_there_is_one(tmp_path):
    event = {**trace_event("cuda"), "breakdown": breakdown(kineto_trace(3, 4, 100.0, 2.0), "cuda").to_json()}
    write_trace(str(tmp_path), event, kineto_trace(3, 4, 100.0, 60.0))  # not the trace the event's figures are of
    found = traces.config_trace({0: event}, 0.001, str(tmp_path))
    assert traces.figure(found, "idle_s").median == pytest.approx(300 / 700)


def test_a_dataparallel_trace_is_said_to_be_over_its_gpus_not_one_rank():
    """One process on two GPUs: each step is broken down per GPU, and the report's line and table say the
    spread is over 3 steps x 2 GPUs, not 3 steps x 1 rank."""
    trace = kineto_trace(3, 4, 100.0, 20.0)
    replica = [dict(e, pid=1, args=dict(e["args"], device=1, correlation=e["args"]["correlation"] + 10_000))
               for e in trace["traceEvents"] if e.get("cat") == "kernel"]
    launches = [dict(e, args=dict(e["args"], correlation=e["args"]["correlation"] + 10_000))
                for e in trace["traceEvents"] if e.get("cat") == "cuda_runtime"]
    found = traced({0: {"traceEvents": trace["traceEvents"] + replica + launches}}, "cuda")
    assert found.breakdown is not None and found.breakdown.steps == 6 and found.steps == 3
    assert traces.broken_down_over(found) == (2, "GPU")
    assert breakdown_line(as_summary(found)).endswith("(of the step, 3 steps x 2 GPUs)")
    one_rank = traced({0: trace}, "cuda")
    assert breakdown_line(as_summary(one_rank)).endswith("(of the step, 3 steps x 1 rank)")


# -- a run directory: the summary rebuilt, the live view ------------------------------------------------------

N2 = "resnet18/ddp/bs4/n2/gloo"


def recorded_with_traces(run: str, carried: bool) -> str:
    """The recorded run with the real gloo trace of each of its two ranks on its N=2 DDP configuration: each
    file where bench_kernels.trace writes it, each rank's event as it sends it now, or (``carried``) as ranks
    sent it when they broke their files down themselves."""
    from ddptop.protocol.layout import trace_file

    shutil.copytree(RECORDED, run)
    for rank, source in enumerate(GLOO_TRACES):
        path = trace_file(N2, rank)
        os.makedirs(os.path.join(run, os.path.dirname(path)), exist_ok=True)
        shutil.copy(source, os.path.join(run, path))
        event = {"v": 1, "type": "trace", "t": 1795236997.9, "rank": rank, "config_id": N2, "path": path,
                 "steps": 3, "step_s": [0.15, 0.16, 0.17], "wall_s": 1.2, "export_s": 0.3, "note": None,
                 "size_bytes": os.path.getsize(source)}
        if carried:
            event.update(breakdown_s=0.05, breakdown=breakdown(read_trace(source), "cpu").to_json())
        else:
            event["device"] = "cpu"
        events = os.path.join(run, "launches", "02-n2-gloo", "events", f"rank-{rank}.jsonl")
        with open(events, encoding="utf-8") as handle:
            lines = handle.read().splitlines()
        lines.insert(next(i for i, line in enumerate(lines) if '"type":"bye"' in line), json.dumps(event))
        with open(events, "w", encoding="utf-8") as handle:
            handle.write("\n".join(lines) + "\n")
    return run


def test_a_run_recorded_when_ranks_broke_their_files_down_reports_the_same_with_its_files_or_without(tmp_path):
    """A run whose events carry the ranks' breakdowns: its files are broken down again where they are, the
    events' breakdowns are used where they are gone, and the report is the same either way."""
    run = recorded_with_traces(str(tmp_path / "run"), carried=True)
    with_files, _ = build.load_target(run, rebuild=True)
    shutil.rmtree(os.path.join(run, "traces"))
    without, _ = build.load_target(run, rebuild=True)
    entry = next(c for c in with_files.configs if c.config_id == N2)
    assert entry.trace is not None and entry.trace.breakdown is not None and entry.trace.breakdown.steps == 6
    assert [c.to_json() for c in without.configs] == [c.to_json() for c in with_files.configs]
    assert sections.text_of("trace", without) == sections.text_of("trace", with_files)


def test_the_summary_and_the_live_view_break_the_ranks_files_down(tmp_path):
    """A run recorded now: the events carry no breakdown; the summary rebuilt from the run directory, and a
    view's snapshot of it, have the breakdown of the files."""
    run = recorded_with_traces(str(tmp_path / "run"), carried=False)
    summary, _ = build.load_target(run, rebuild=True)
    entry = next(c for c in summary.configs if c.config_id == N2)
    expected = traced({r: read_trace(path) for r, path in enumerate(GLOO_TRACES)}, "cpu")
    assert entry.trace is not None and entry.trace.breakdown is not None
    assert entry.trace.breakdown.to_json() == expected.breakdown.to_json()
    assert entry.trace.wall_s == 1.2  # the profiled steps and the export alone

    from ddptop.control import RecordedControl

    control = RecordedControl.of(run)
    shown = next(c for c in control.take_snapshot().session.configs if c.config_id == N2)
    assert shown.trace is not None and shown.trace.breakdown == expected.breakdown
    # the session's own snapshot holds the events' figures alone: the files are read off its lock
    assert next(c for c in control.session.snapshot().configs if c.config_id == N2).trace.breakdown is None
    assert next(c for c in control.take_snapshot().session.configs if c.config_id == N2) is shown  # read once


# -- the verdict -----------------------------------------------------------------------------------------------

def test_a_gpu_waiting_for_the_host_in_every_traced_step_is_host_bound_with_its_numbers():
    said = step_bound.verdict(gpu_entry(kineto_trace(3, 4, 100.0, 60.0)))
    # each step: 4 x 100 us of kernels in 4 x 60 + 60 us of gaps: 300 of 700 us idle, all of it waiting for the host
    assert said["kind"] == step_bound.HOST
    assert said["text"].startswith("host-bound: the GPU sat idle 43% of the step (every one of 3 traced steps 43%–43%), "
                                   "43% waiting for the host"), said["text"]


def test_kernels_as_short_as_their_launch_make_it_launch_bound():
    said = step_bound.verdict(gpu_entry(kineto_trace(3, 50, 4.0, 4.0)))
    assert said["kind"] == step_bound.HOST and said["text"].startswith("launch-bound:"), said["text"]
    assert "its median kernel runs 4 us" in said["text"]


def test_a_trace_the_profiler_slowed_is_not_taken_for_the_measured_steps_unless_nvml_agrees():
    slowed = gpu_entry(kineto_trace(3, 4, 100.0, 60.0))
    slowed["trace"]["cost_ratio"] = 1.5  # its steps ran 1.5x the measured p50 under the profiler
    said = step_bound.verdict(slowed)
    assert said["kind"] == step_bound.COMPUTE, said["text"]
    assert "the traced steps left the GPU idle but ran 1.50x the measured p50 under the profiler" in said["text"]
    nvml = {"share": Estimate(value=0.4, ci=[0.3, 0.5]), "readings": 9, "launches": 1, "rank_cpu_mean": 99.0}
    slowed["telemetry"] = {"gpu_idle": nvml}  # NVML's interval over the measured steps decides then
    said = step_bound.verdict(slowed)
    assert said["kind"] == step_bound.HOST and said["text"].startswith("host-bound: the GPU was idle 40%"), said["text"]


def test_nvml_is_quoted_as_agreeing_only_when_its_interval_says_host_bound():
    entry = gpu_entry(kineto_trace(3, 4, 100.0, 60.0))
    entry["telemetry"] = {"gpu_idle": {"share": Estimate(value=0.02, ci=[0.0, 0.05]), "rank_cpu_mean": 50.0}}
    assert "; NVML read: idle 2% of the measured steps (95% CI 0%–5%)" in step_bound.verdict(entry)["text"]
    entry["telemetry"] = {"gpu_idle": {"share": Estimate(value=0.4, ci=[0.3, 0.5]), "rank_cpu_mean": 99.0}}
    assert "; NVML agrees: idle 40% of the measured steps (95% CI 30%–50%)" in step_bound.verdict(entry)["text"]


def test_a_gpu_busy_but_for_queued_gaps_is_not_host_bound():
    # the same gaps, but every kernel was launched at the step's start: the GPU did not wait for the host
    said = step_bound.verdict(gpu_entry(kineto_trace(3, 4, 100.0, 60.0, queued=True)))
    assert said["kind"] == step_bound.COMPUTE and "host-bound" not in said["text"], said["text"]


def test_memory_copies_in_every_step_are_said():
    said = step_bound.verdict(gpu_entry(kineto_trace(3, 4, 100.0, 2.0, memcpy_us=200.0)))
    assert "memory copies (Memcpy/Memset) take 33% of every traced step" in said["text"], said["text"]


def test_a_cuda_trace_without_kernels_is_said_and_never_read_as_an_idle_gpu():
    steps_only = {"traceEvents": [e for e in kineto_trace(3, 4, 100.0, 60.0)["traceEvents"]
                                  if e["cat"] == "user_annotation"]}
    entry = gpu_entry(steps_only)
    found = traces.ConfigTrace.from_json(entry["trace"])
    assert not traces.on_gpu(found) and traces.figure(found, "idle_s") is None
    said = step_bound.verdict(entry)
    assert said["kind"] != step_bound.HOST and "trace: the trace holds no GPU kernel" in said["text"], said["text"]


def test_nvml_calling_it_host_bound_against_the_trace_is_said_not_concluded():
    idle = {"share": Estimate(value=0.4, ci=[0.3, 0.5]), "readings": 9, "launches": 1, "rank_cpu_mean": 99.0}
    entry = gpu_entry(kineto_trace(3, 4, 100.0, 2.0), telemetry={"gpu_idle": idle})
    said = step_bound.verdict(entry)
    assert said["kind"] == step_bound.COMPUTE
    assert "NVML read the GPU idle 40% of the measured steps, which the traced steps did not show" in said["text"]


def test_the_communication_verdict_gains_the_traced_overlap_from_a_real_gloo_trace():
    entry = {"stats": {"sec_iter": {"p50": 0.012}}, "device": "cpu", "mode": "ddp", "world_size": 2,
             "communication": {"exposed_comm_fraction": 0.2, "exposed_comm_fraction_ci": [0.15, 0.25]},
             "trace": traced({r: read_trace(path) for r, path in enumerate(GLOO_TRACES)}, "cpu", 0.012).to_json()}
    said = step_bound.verdict(entry)
    assert "traced (host: gloo's threads): communication " in said["text"] and " of it under compute" in said["text"]


# -- the report ------------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def traced_summary() -> Summary:
    """The recorded run's summary with the real gloo trace (2 ranks) on its N=2 DDP configuration."""
    built, _ = build.load_target(RECORDED, rebuild=True)
    document = built.to_json()
    entry = next(c for c in document["configs"] if c["mode"] == "ddp" and c["world_size"] == 2)
    entry["trace"] = traced({r: read_trace(path) for r, path in enumerate(GLOO_TRACES)}, "cpu",
                            entry["stats"]["sec_iter"]["p50"]).to_json()
    entry["communication"] = {"step_s": 0.2, "compute_s": 0.15, "exposed_comm_s": 0.05,
                              "exposed_comm_fraction": 0.25, "exposed_comm_fraction_ci": [0.2, 0.3]}
    return Summary.from_json(document)


def test_the_report_shows_the_breakdown_the_agreement_and_how_to_open_the_files(traced_summary):
    markdown = sections.markdown(traced_summary)
    part = markdown.split("## Where the step's time goes (profiler trace)")[1].split("\n## ")[0]
    assert "| host |" in part.replace("  ", " ") or " host " in part
    entry = next(c for c in traced_summary.configs if c.trace is not None)
    assert f"`{entry.config_id}`" in part and "exposed communication: no_sync() 25% (20–30%), trace " in part
    assert "gloo:all_reduce" in part and "traces/c/rank0.pt.trace.json.gz" in part
    assert "https://ui.perfetto.dev" in part and "chrome://tracing" in part
    text = sections.text_of("trace", traced_summary)
    assert text.startswith("Where the step's time goes") and "3x2" in text  # 3 steps on each of 2 ranks


def test_a_summary_with_a_trace_reads_and_writes_back_the_same(traced_summary):
    document = json.loads(json.dumps(traced_summary.to_json()))
    assert json.loads(json.dumps(Summary.from_json(document).to_json())) == document
    assert traced_summary.to_json()["configs"][0].get("trace") is None  # written only where there is one


# -- the plan --------------------------------------------------------------------------------------------------

def test_every_configuration_is_traced_by_default_and_the_flags_turn_it_off():
    from ddptop.run.plan import PlanOptions, build_plan
    from ddptop.telemetry.inventory import Inventory

    def steps(**options) -> set[int]:
        plan = build_plan(PlanOptions(device="cpu", world_sizes=[1, 2], **options),
                          Inventory(problem="NVML unavailable: test"), cpu_count=2)
        return {c.trace_steps for c in plan.configs()}

    assert steps() == {3} and steps(trace_steps=5) == {5} and steps(trace_steps=0) == {0}
    assert steps(tune=True) == {0}  # a tune keeps its time for the variants unless asked


def test_a_negative_trace_step_count_is_one_line_and_exit_2():
    done = ddptop("run", "--headless", "--device", "cpu", "--trace-steps", "-1")
    assert done.returncode == 2 and done.stderr.strip() == "ddptop: error: --trace-steps cannot be negative (got -1)", done.stderr


def test_no_trace_is_the_same_as_zero_steps():
    import argparse

    from ddptop.run.options import add_run_arguments  # the command line's own parser

    parser = argparse.ArgumentParser()
    add_run_arguments(parser)
    assert parser.parse_args(["--no-trace"]).trace_steps == 0
    assert parser.parse_args(["--trace-steps", "5"]).trace_steps == 5 and parser.parse_args([]).trace_steps is None


# -- the kernel ------------------------------------------------------------------------------------------------

def test_a_traced_ddp_step_writes_a_file_that_breaks_down_into_steps_that_add_up(one_rank_group, tmp_path):
    from bench_kernels.trace import trace_steps
    from bench_kernels.training import build_training

    from .conftest import tiny_config

    torch = one_rank_group
    training = build_training(tiny_config(), torch.device("cpu"), 0, 0)
    path = str(tmp_path / "traces" / "c" / "rank0.pt.trace.json.gz")
    fields = trace_steps(torch, training.step_through(training.net), path, 3, "cpu")
    assert fields["note"] is None and len(fields["step_s"]) == 3 and fields["size_bytes"] == os.path.getsize(path)
    assert fields["device"] == "cpu" and "breakdown" not in fields  # ddptop breaks the file down, not the rank
    with gzip.open(path, "rt", encoding="utf-8") as handle:
        names = [e.get("name", "") for e in json.load(handle)["traceEvents"]]
    assert sorted(n for n in names if n.startswith("ProfilerStep#")) == [f"ProfilerStep#{i}" for i in (1, 2, 3, 4)]
    found = breakdown(read_trace(path), fields["device"])
    assert found.device == "cpu" and [s.step for s in found.steps] == [1, 2, 3]  # the 4th left out
    for step in found.steps:
        assert step.busy_s + step.idle_s == pytest.approx(step.window_s, rel=1e-9)
    assert any(c.name == "gloo:all_reduce" for c in found.collectives)  # DDP's allreduce, alone in its group


# -- the views -------------------------------------------------------------------------------------------------

def test_the_summary_screen_lists_each_trace_and_its_files_on_x(traced_summary):
    import asyncio

    from ddptop.tui.app import SummaryApp
    from ddptop.tui.screens import TracesScreen

    from .tui_helpers import screen_text, summary_text

    async def drive():
        app = SummaryApp(traced_summary, None)
        async with app.run_test(size=(120, 50)) as pilot:
            summary = await summary_text(app, pilot)
            await pilot.press("x")
            listed = await screen_text(app, pilot, "#traces-text")
            shown = isinstance(app.screen, TracesScreen)
            await pilot.press("escape")
            await pilot.pause()
            back = not isinstance(app.screen, TracesScreen)
        return summary, listed, shown, back

    summary, listed, shown, back = asyncio.run(drive())
    assert "Where the step's time goes" in summary
    entry = next(c for c in traced_summary.configs if c.trace is not None)
    assert shown and back and listed.startswith("Profiler traces") and entry.config_id in listed
    assert "host thread idle " in listed and "gloo:all_reduce" in listed
    assert "rank 0: " in listed and "rank0.pt.trace.json.gz" in listed and "rank 1: " in listed
    assert "https://ui.perfetto.dev" in listed


def test_before_any_trace_the_list_says_how_traces_come():
    from ddptop.tui.screens import traces_text

    text = traces_text([], "/runs/r")
    assert "No trace yet" in text and "--no-trace" in text


def test_the_live_table_shows_the_traced_idle_share():
    import dataclasses

    from ddptop.run.snapshot import ConfigSnapshot
    from ddptop.tui.panels.configs import _config_cells

    config = ConfigSnapshot(config_id="c", label="1M/1G", model="resnet50", mode="ddp", batch_size=32, backend="nccl",
                            status="ok", reason=None, progress=1.0, sample_count=10, revision=1, stats=None)
    assert _config_cells(config, None)["idle"] == "-"
    with_trace = dataclasses.replace(config, trace=traced({0: kineto_trace(3, 4, 100.0, 60.0)}, "cuda"))
    assert _config_cells(with_trace, None)["idle"] == "43%"


# -- a real sweep ----------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_every_configuration_of_a_real_gloo_sweep_has_its_trace_on_every_rank(cpu_sweep):
    """The suite's shared sweep (resnet18, N = 1 and 2, gloo; tests/conftest.py), traced by default: every
    configuration's file on every rank opens as JSON with its ProfilerStep spans, its breakdown adds up to the
    step, the summary has its cost, the report its part, and DDP's own averages are the measured steps' alone."""
    assert cpu_sweep.returncode == 0, cpu_sweep.stderr + cpu_sweep.stdout
    summary = cpu_sweep.summary()
    for entry in summary["configs"]:
        trace = entry["trace"]
        assert [f["rank"] for f in trace["files"]] == list(range(entry["world_size"])), entry["config_id"]
        for found in trace["files"]:
            path = os.path.join(cpu_sweep.run_dir, found["path"])
            assert found["path"].startswith("traces/") and os.path.getsize(path) == found["size_bytes"]
            with gzip.open(path, "rt", encoding="utf-8") as handle:
                names = [e.get("name", "") for e in json.load(handle)["traceEvents"]]
            assert sum(n.startswith("ProfilerStep#") for n in names) == trace["steps"] + 1  # the last left out
            steps = breakdown(read_trace(path), "cpu").steps
            assert len(steps) == trace["steps"] == 3
            for step in steps:
                assert step.busy_s + step.idle_s == pytest.approx(step.window_s, rel=1e-9)
        assert trace["breakdown"]["steps"] == 3 * entry["world_size"] and trace["cost_ratio"] > 0
        assert trace["bytes_per_step"] > 0 and trace["wall_s"] > 0
    n2 = next(c for c in summary["configs"] if c["mode"] == "ddp" and c["world_size"] == 2)
    assert any(c["name"] == "gloo:all_reduce" for c in n2["trace"]["breakdown"]["collectives"])
    assert "traced (host: gloo's threads): communication " in n2["verdict"]["text"]
    logging = n2["communication"]["ddp_logging"]
    assert logging["iterations"] == n2["measured_iters"]  # DDP's averages were read before the traced steps ran
    assert summary["overhead"]["trace_s"] > 0
    with open(os.path.join(cpu_sweep.run_dir, "summary.md"), encoding="utf-8") as handle:
        assert "## Where the step's time goes (profiler trace)" in handle.read()


def test_a_trace_that_cannot_be_written_costs_the_trace_alone_and_says_why(one_rank_group, tmp_path):
    """A folder that cannot be made (a file in its place, as a full or read-only disk would refuse it): no step
    is profiled, the rank goes on, and the event's note says why; a written trace tells the hang watch of
    every step and of the export."""
    from bench_kernels.trace import trace_steps
    from bench_kernels.training import build_training

    from .conftest import tiny_config

    torch = one_rank_group
    training = build_training(tiny_config(), torch.device("cpu"), 0, 0)
    (tmp_path / "traces").write_text("a file where the folder goes")
    said = []
    fields = trace_steps(torch, training.step_through(training.net), str(tmp_path / "traces" / "c" / "rank0.pt.trace.json.gz"),
                         3, "cpu", said.append)
    assert fields["note"].startswith("the trace could not be written: ") and "breakdown" not in fields
    assert said == [] and fields["step_s"] == []
    fields = trace_steps(torch, training.step_through(training.net), str(tmp_path / "ok" / "rank0.pt.trace.json.gz"),
                         2, "cpu", said.append)
    assert fields["note"] is None and len(said) == 4 and said[-1] == "traced step 4 of 4; writing the trace"
