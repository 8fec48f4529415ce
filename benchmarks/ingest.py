"""Ingest: how many events a session parses and aggregates per second.

Eight ranks' event files of one configuration are written first (``samples`` events of --steps-per-event
steps each, as ranks flush them, plus hello/config_start), then a fresh Session loads the run directory
(one refresh over every file) and asks for the configuration's percentiles, as a frame does. Reported: events per second and
steps per second of that refresh (best of --repeat fresh sessions, each reading the same files).

    python benchmarks/ingest.py [--events 200000] [--steps-per-event 1 10]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402
from ddptop.run import rundir  # noqa: E402
from ddptop.run.plan import PlanOptions, build_plan  # noqa: E402
from ddptop.run.session import Session  # noqa: E402
from ddptop.telemetry.inventory import Inventory  # noqa: E402
from ddptop.protocol import wire  # noqa: E402
from ddptop.protocol.layout import events_path  # noqa: E402
from ddptop.protocol.wire import EventWriter  # noqa: E402

RANKS = 8


def write_events(run_dir: str, config_id: str, events: int, steps: int) -> int:
    launch = rundir.launch_dir(run_dir, 1, "n8-gloo", 0)
    written = 0
    for rank in range(RANKS):
        writer = EventWriter(events_path(launch, rank), rank, 10.0)
        writer.emit("hello", world_size=RANKS, host="bench", pid=1000 + rank, device="cpu")
        writer.emit("config_start", config_id=config_id, warmup=0, iters=10**9)
        for index in range(events // RANKS):
            writer.emit("samples", config_id=config_id, phase="measure", first_iter=index * steps,
                        sec=[0.05 + 0.0001 * ((index + i) % 97) for i in range(steps)])
            if index % 1000 == 999:
                writer.flush()
        writer.close()
        written += events // RANKS + 2
    return written


def measure(events: int, steps: int, repeat: int) -> dict[str, float]:
    options = PlanOptions(models=["resnet18"], world_sizes=[8], batch_sizes=[16], baseline=False)
    plan = build_plan(options, Inventory(problem="benchmark"), cpu_count=8)
    config_id = plan.configs()[0].config_id
    best = float("inf")
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = rundir.create_run_dir(os.path.join(tmp, "run"), "bench")
        Session.create(plan, run_dir).close()
        total = write_events(run_dir, config_id, events, steps)
        files = rundir.event_files(run_dir)
        parse = {"line by line, json": float("inf"), "batched, json": float("inf"), "batched, fast": float("inf")}
        for _ in range(repeat):  # the parsing and checking alone, three ways, side by side
            start = time.perf_counter()
            for path in files:
                with open(path, "rb") as handle:
                    [wire.decode(line) for line in handle.read().split(b"\n") if line]
            parse["line by line, json"] = min(parse["line by line, json"], time.perf_counter() - start)
            for name, loads in (("batched, json", wire._stdlib_loads), ("batched, fast", wire.batch_loads)):
                chosen, wire.batch_loads = wire.batch_loads, loads
                try:
                    start = time.perf_counter()
                    for path in files:
                        wire.EventFileReader(path).read_new()
                    parse[name] = min(parse[name], time.perf_counter() - start)
                finally:
                    wire.batch_loads = chosen
        for _ in range(repeat):
            start = time.perf_counter()
            session = Session.load(run_dir)  # one refresh: reads and applies every file from the start
            summary = session.configs[config_id].summary()
            best = min(best, time.perf_counter() - start)
            applied = session.events_applied - 1  # less the runner's own hello
            assert applied == total and summary is not None and summary["n"] == (events // RANKS) * RANKS * steps
    return {"events": total, "seconds": best, "events_per_s": total / best, "steps_per_s": total * steps / best,
            "parse_s": parse, "fast_parser": wire.fast_loads() is not None}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--steps-per-event", type=int, nargs="+", default=[1, 10])
    parser.add_argument("--repeat", type=int, default=3)
    add_json_option(parser)
    args = parser.parse_args()
    rows = []
    for steps in args.steps_per_event:
        result = measure(args.events, steps, args.repeat)
        print(f"ingest, {steps} step(s) per event: {result['events']:,} events from {RANKS} rank files in "
              f"{result['seconds']:.2f} s = {result['events_per_s']:,.0f} events/s ({result['steps_per_s']:,.0f} steps/s)")
        base = result["parse_s"]["line by line, json"]
        print("  parsing and checking alone: " + ", ".join(
            f"{name} {seconds:.2f} s ({base / seconds:.2f}x)" for name, seconds in result["parse_s"].items()))
        if not result["fast_parser"]:
            print("  (orjson is not installed: 'fast' is json here)")
        rows.append(row(f"ingest, {steps} step(s) per event", f"{result['events_per_s']:,.0f} events/s",
                        ">= 200,000 events/s", result["events_per_s"] >= 200_000))
    write_rows(args.json, rows)


if __name__ == "__main__":
    main()
