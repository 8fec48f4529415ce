"""The load table and the host-bound verdict on the first real H100 run's files (tests/data/h100), each rebuilt
from its events as ``ddptop report --rebuild`` does (in a copy), and on synthetic inputs with known answers.

What the H100 showed: resnet50 bs32 at N=1 kept its rank at a full core while NVML saw the GPU idle about a
quarter of the time, and was called "compute only"; a tune row measured for under a second had one NVML
reading, taken after its window, of 1.4 GiB in use while the allocator had held 2.9 GiB.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import statistics

import pytest

from ddptop.report import build, sections

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
H100 = os.path.join(REPO, "tests", "data", "h100")
GIB = 1 << 30


def _rebuilt(tmp_path, name: str) -> tuple[dict, str, str]:
    """The run's summary rebuilt from a copy of its files, as JSON, its text report, and the copy's path."""
    run = tmp_path / name
    shutil.copytree(os.path.join(H100, name), run)
    summary, rebuilt = build.load_target(str(run), rebuild=True)
    assert rebuilt
    return summary.to_json(), sections.text_report(summary), str(run)


def _jsonl(path: str) -> list[dict]:
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _windows(run: str, config_id: str) -> list[tuple[float, float]]:
    """Rank 0's measured windows of one configuration, one per launch, from the events themselves."""
    found = []
    for launch in sorted(os.listdir(os.path.join(run, "launches"))):
        for event in _jsonl(os.path.join(run, "launches", launch, "events", "rank-0.jsonl")):
            if event["type"] == "config_end" and event.get("config_id") == config_id:
                found.append((event["t"] - event["measure_s"], event["t"]))
    return found


def _verdicts(report: str) -> dict[str, str]:
    lines = report.split("Why it is not faster (per configuration):\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return {line.split()[0]: line.split(None, 1)[1] for line in lines}


def _load_rows(report: str) -> tuple[list[str], dict[str, list[str]]]:
    """The load table's header and each row's cells (split at two spaces or more), by configuration name."""
    import re

    lines = report.split("Load during measured steps (telemetry)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    header = re.split(r"\s{2,}", lines[0].strip())
    rows = {}
    for line in lines[1:]:
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) == len(header):
            rows[cells[0]] = cells
    return header, rows


# -- B: host-bound on the GPU's idle share ----------------------------------------------------------------------------


def test_the_h100_s_resnet50_bs32_is_host_bound_with_its_idle_share_and_interval(tmp_path):
    """Both configurations of the default plan: the idle share is the readings' by hand (every reading a second or
    more into one of the three launches' measured windows, 1 - NVML utilisation), its interval clears 10%, and
    the line says the figure, its interval and what to change."""
    summary, report, run = _rebuilt(tmp_path, "default")
    records = [r for r in _jsonl(os.path.join(run, "telemetry.jsonl")) if r["type"] == "telemetry"]
    verdicts = _verdicts(report)
    assert len(summary["configs"]) == 2
    for entry in summary["configs"]:
        assert entry["verdict"]["kind"] == "host-bound", entry["verdict"]["text"]
        shares = [1 - r["gpus"][0]["util"] / 100 for start, end in _windows(run, entry["config_id"])
                  for r in records if start + 1.0 <= r["t"] <= end and r["ranks"]]
        assert len(shares) >= 20
        idle = entry["telemetry"]["gpu_idle"]
        share, share_ci = idle["share"]["value"], idle["share"]["ci"]
        assert idle["readings"] == len(shares) and idle["launches"] == 3
        assert share == pytest.approx(statistics.fmean(shares))
        half = (share_ci[1] - share_ci[0]) / 2
        t = 2.07 if len(shares) <= 24 else 2.06  # t(0.975) at 21-26 degrees of freedom, to 1%
        assert half == pytest.approx(t * statistics.stdev(shares) / math.sqrt(len(shares)), rel=0.02)
        assert share_ci[0] > summary["verdict_thresholds"]["host_idle_share"] == 0.10
        assert idle["rank_cpu_mean"] >= 99
        words = (f"host-bound: the GPU was idle {round(100 * share)}% of the measured steps (95% CI "
                 f"{round(100 * share_ci[0])}%–{round(100 * share_ci[1])}%, {len(shares)} readings in 3 "
                 "launches), the rank at 100% of a core — try a larger batch per GPU")
        assert verdicts[entry["config_id"]].startswith(words)
        assert "compute only" not in verdicts[entry["config_id"]]


def test_the_h100_tune_rows_are_not_called_host_bound_on_a_reading_or_two(tmp_path):
    """The tune's windows last 0.3-3 s: at one reading a second, none has the two readings a second into a window
    an interval needs beyond noise, so no row is host-bound (and none says a figure it cannot back)."""
    summary, report, _ = _rebuilt(tmp_path, "tune")
    assert len(summary["configs"]) == 4
    for entry in summary["configs"]:
        idle = entry["telemetry"]["gpu_idle"]
        share = idle["share"] if idle else None
        assert share is None or share["ci"] is None or share["ci"][0] <= 0.10, idle
        assert entry["verdict"]["kind"] != "host-bound"
    assert "host-bound" not in report


def test_a_cpu_run_gets_no_host_bound_verdict_from_the_rule(tmp_path):
    run = tmp_path / "cpu"
    shutil.copytree(os.path.join(REPO, "tests", "data", "recorded-cpu-run"), run)
    summary, _ = build.load_target(str(run), rebuild=True)
    assert summary.configs and all(c.device == "cpu" for c in summary.configs)
    assert all(c.verdict and c.verdict.kind != "host-bound" for c in summary.configs)
    assert all(c.telemetry is None or c.telemetry.gpu_idle is None for c in summary.configs)


# -- A: the readings behind each load figure, and a memory peak no larger figure contradicts ------------------------


def test_the_h100_tune_load_table_says_its_readings_and_shows_the_allocator_peak_nvml_missed(tmp_path):
    summary, report, run = _rebuilt(tmp_path, "tune")
    header, rows = _load_rows(report)
    assert header[1:3] == ["GPUs", "readings"] and "rank readings" in header
    column = {name: header.index(name) for name in ("readings", "GPU mem peak", "util mean", "util max")}
    by_id = {e["config_id"]: e for e in summary["configs"]}
    channels_last = by_id["resnet18/ddp/bs128/n1/nccl/channels_last"]
    load = channels_last["telemetry"]
    # NVML's one reading came after the 0.29 s window: kept as read, beside the allocator's larger peak
    records = [r for r in _jsonl(os.path.join(run, "telemetry.jsonl")) if r["type"] == "telemetry"]
    end = _windows(run, channels_last["config_id"])[-1][1]
    after = next(r for r in records if r["t"] > end)["gpus"][0]["mem_used"]
    allocated = max(event["peak_memory_bytes"] for launch in os.listdir(os.path.join(run, "launches"))
                    for event in _jsonl(os.path.join(run, "launches", launch, "events", "rank-0.jsonl"))
                    if event["type"] == "config_end" and event.get("config_id") == channels_last["config_id"])
    assert load["readings"] == 1 and load["coarse"] is True
    assert load["mem_peak_bytes"] == after < channels_last["peak_memory_bytes"] == allocated
    assert round(after / GIB, 1) == 1.4 and round(allocated / GIB, 1) == 2.9
    assert load["mem_peak_shown_bytes"] == channels_last["peak_memory_bytes"] and load["mem_peak_source"] == "allocator"
    row = rows["1M/1G channels_last resnet18 bs128"]
    assert row[column["readings"]] == "1 after" and row[column["GPU mem peak"]] == "2.9 GiB (allocator)"
    assert row[column["util mean"]] == row[column["util max"]] == "92%"
    assert '"(allocator)": the allocator\'s peak of the same configuration' in report
    # the default's one reading was inside its window, above the allocator's peak: NVML's figure stands
    default = by_id["resnet18/ddp/bs128/n1/nccl"]["telemetry"]
    assert default["mem_peak_source"] == "nvml" and default["mem_peak_shown_bytes"] == default["mem_peak_bytes"]
    assert rows["1M/1G resnet18 bs128"][column["readings"]] == "1"
    assert rows["1M/1G resnet18 bs128"][column["GPU mem peak"]] == "6.4 GiB"
    for entry in summary["configs"]:  # the rank figures' readings: every rank CPU reading counted
        for rank in entry["telemetry"]["ranks"].values():
            assert rank["readings"] >= 1


@pytest.mark.parametrize("name", ["default", "tune", "oom"])
def test_no_shown_gpu_memory_peak_is_below_the_allocator_s_peak_of_the_same_configuration(tmp_path, name):
    summary, report, _ = _rebuilt(tmp_path, name)
    shown = 0
    for entry in summary["configs"]:
        load = entry.get("telemetry") or {}
        if load.get("mem_peak_bytes") is None or entry.get("peak_memory_bytes") is None:
            continue
        shown += 1
        assert load["mem_peak_shown_bytes"] == max(load["mem_peak_bytes"], entry["peak_memory_bytes"])
        assert load["mem_peak_source"] == ("allocator" if entry["peak_memory_bytes"] > load["mem_peak_bytes"] else "nvml")
    assert shown >= 1


def test_the_memory_peak_shown_by_hand():
    from ddptop.report.load_tables import memory_peak_shown

    assert memory_peak_shown(1 * GIB, 2 * GIB, 1, "ddp", 1) == (2 * GIB, "allocator")
    assert memory_peak_shown(3 * GIB, 2 * GIB, 1, "ddp", 1) == (3 * GIB, "nvml")
    assert memory_peak_shown(1 * GIB, None, 1, "ddp", 1) == (1 * GIB, "nvml")
    assert memory_peak_shown(None, 2 * GIB, 1, "ddp", 1) == (None, None)  # no NVML reading: nothing to show
    # four ranks, two of them on GPUs these readings cover (another node's): no claim about the others' GPUs
    assert memory_peak_shown(1 * GIB, 2 * GIB, 2, "ddp", 4) == (1 * GIB, "nvml")
    assert memory_peak_shown(1 * GIB, 2 * GIB, 4, "ddp", 4) == (2 * GIB, "allocator")
    assert memory_peak_shown(1 * GIB, 2 * GIB, 1, "dp", 2) == (2 * GIB, "allocator")  # one process, two GPUs


def test_busy_readings_and_rank_readings_by_hand():
    """Two GPUs, launch L's rank and another launch's: only readings inside (start, end] that read both GPUs
    and one of L's ranks count, with the GPUs' mean utilisation; each rank's readings are its CPU readings."""
    from ddptop.telemetry import timeline

    def record(t, utils, ranks):
        return {"t": t, "gpus": [{"index": i, "util": u, "mem_used": GIB} for i, u in enumerate(utils)],
                "host": {"cpu": 50.0}, "ranks": ranks}

    rank_l = [{"rank": 0, "pid": 10, "launch": "L", "gpu": 0, "cpu": 100.0, "rss": GIB, "threads": 4},
              {"rank": 1, "pid": 11, "launch": "L", "gpu": 1, "cpu": 90.0, "rss": GIB, "threads": 4}]
    other = [{"rank": 0, "pid": 20, "launch": "M", "gpu": 0, "cpu": 100.0, "rss": GIB, "threads": 4}]
    records = [
        record(0.5, [0, 0], rank_l),  # before the window
        record(1.0, [80, 60], rank_l),
        record(2.0, [90, None], rank_l),  # GPU 1 not read: left out
        record(3.0, [70, 50], other),  # none of L's ranks: left out
        record(4.0, [100, 40], rank_l),
        record(6.0, [10, 10], rank_l),  # after the window
    ]
    found = timeline.busy_readings(records, [("L", 0.5, 5.0)])
    assert [(r["t"], r["util"], r["rank_cpu"], r["window"], r["start"]) for r in found] == [
        (1.0, 70.0, 95.0, 0, 0.5), (4.0, 70.0, 95.0, 0, 0.5)]
    assert timeline.busy_readings(records, [("N", 0.5, 5.0)]) == []  # no rank of that launch on a GPU
    figures = timeline.window_figures(records, 0.5, 5.0, "L", 100)
    assert figures["readings"] == 4 and figures["ranks"]["0"]["readings"] == 4
