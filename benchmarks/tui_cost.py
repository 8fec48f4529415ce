"""What the TUI costs while a sweep streams: CPU of the view, and the delay from a step written to shown.

A writer thread plays two ranks of one configuration, appending ``samples`` events to their event files at
``--rate`` steps per second in total (flushed every 100 ms, as ranks do); the monitor samples the fake 8-GPU
node every second; the TUI takes a snapshot ``--fps`` times a second in its worker thread and draws it, under Textual's headless Pilot (no real terminal, so the
cost of writing escape codes to one is not included). Reported:
  view CPU     CPU seconds per wall second of the process, minus the writer thread's own CPU
  delay        per flush: first frame drawn from a snapshot that holds that flush's steps, minus the write time

    python benchmarks/tui_cost.py [--rounds 3] [--seconds 10] [--rate 1000] [--fps 4]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402
from ddptop.run import rundir  # noqa: E402
from ddptop.control import RunControl  # noqa: E402
from ddptop.live.live_run import create_live_run  # noqa: E402
from ddptop.run.plan import PlanOptions  # noqa: E402
from ddptop.protocol.layout import events_path  # noqa: E402
from ddptop.protocol.wire import EventWriter  # noqa: E402
from ddptop.telemetry.inventory import Inventory  # noqa: E402
from ddptop.telemetry.nvml import FAKE_ENV  # noqa: E402
from ddptop.tui.app import DdptopApp  # noqa: E402
from ddptop.run.snapshot import RunPhase  # noqa: E402


class StreamedControl(RunControl):
    """The view's side of a run the writer thread below plays: read-only, always running."""

    def _phase(self) -> tuple[RunPhase, str | None]:
        return RunPhase.RUNNING, "the benchmark's writer thread"


class StreamingRanks(threading.Thread):
    def __init__(self, run_dir: str, config_id: str, rate: float, stop: threading.Event) -> None:
        super().__init__(daemon=True)
        launch = rundir.launch_dir(run_dir, 1, "n2-gloo", 0)
        self.writers = [EventWriter(events_path(launch, r), r, 0.1) for r in range(2)]
        self.config_id = config_id
        self.per_flush = max(1, int(rate / 2 / 10))  # per rank, 10 flushes a second
        self.stop = stop
        self.written: list[tuple[float, int]] = []  # (time, cumulative steps of both ranks)
        self.cpu_s = 0.0

    def run(self) -> None:
        for rank, writer in enumerate(self.writers):
            writer.emit("hello", world_size=2, host=os.uname().nodename, pid=os.getpid(), device="cpu")
            writer.emit("config_start", config_id=self.config_id, warmup=0, iters=10**9)
            writer.flush()
        total, index = 0, 0
        while not self.stop.is_set():
            began = time.thread_time()
            for writer in self.writers:
                writer.emit("samples", config_id=self.config_id, phase="measure", first_iter=index,
                            sec=[0.05 + 0.001 * (i % 7) for i in range(self.per_flush)])
                writer.flush()
            index += self.per_flush
            total += 2 * self.per_flush
            self.written.append((time.monotonic(), total))
            self.cpu_s += time.thread_time() - began
            self.stop.wait(0.1)


async def measure(args: argparse.Namespace, run_dir: str) -> dict[str, float]:
    os.environ[FAKE_ENV] = "dgx1"  # the monitor samples the fake 8-GPU node through the real code path
    options = PlanOptions(models=["resnet18"], world_sizes=[2], batch_sizes=[16], baseline=False, iters=10**6)
    live = create_live_run(options, run_dir, telemetry_interval=1.0, inventory=Inventory(problem="benchmark"),
                           cpu_count=2)  # assembled as for a real run; its sweep is never started
    plan, session, monitor = live.plan, live.session, live.monitor
    assert monitor is not None
    session.mark(what="launch_start", launch="01-n2-gloo", world_size=2, backend="gloo",
                 configs=[plan.configs()[0].config_id])
    app = DdptopApp(StreamedControl(session, monitor, live.topology), fps=args.fps)
    seen: list[tuple[float, int]] = []
    original = app.show_snapshot
    config_id = plan.configs()[0].config_id

    def recording_frame(snapshot) -> None:
        original(snapshot)
        shown = next(c for c in snapshot.session.configs if c.config_id == config_id)
        seen.append((time.monotonic(), shown.sample_count))

    app.show_snapshot = recording_frame  # type: ignore[method-assign]
    stop = threading.Event()
    ranks = StreamingRanks(run_dir, plan.configs()[0].config_id, args.rate, stop)
    async with app.run_test(size=(160, 50)) as pilot:
        monitor.start()
        ranks.start()
        await pilot.pause(2.0)  # warm up: first layouts, first telemetry
        shares, writer_shares = [], []
        for _ in range(args.rounds):
            cpu0, wall0, writer0 = time.process_time(), time.monotonic(), ranks.cpu_s
            await pilot.pause(args.seconds)
            cpu, wall, writer_cpu = time.process_time() - cpu0, time.monotonic() - wall0, ranks.cpu_s - writer0
            shares.append((cpu - writer_cpu) / wall)
            writer_shares.append(writer_cpu / wall)
        stop.set()
        ranks.join()
        monitor.stop()
    delays = []
    for written_t, total in ranks.written:
        shown = next((t for t, count in seen if t >= written_t and count >= total), None)
        if shown is not None:
            delays.append(shown - written_t)
    delays.sort()
    return {
        "view_cpu": statistics.median(shares),
        "view_cpu_low": min(shares),
        "view_cpu_high": max(shares),
        "writer_cpu": statistics.median(writer_shares),
        "steps_per_s": ranks.written[-1][1] / (ranks.written[-1][0] - ranks.written[0][0]),
        "delay_p50": statistics.median(delays),
        "delay_p95": delays[int(0.95 * (len(delays) - 1))],
        "delay_max": delays[-1],
        "frames": len(seen),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=10.0, help="length of one measured round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=float, default=1000.0, help="steps per second, both ranks together")
    parser.add_argument("--fps", type=float, default=4.0)
    add_json_option(parser)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        result = asyncio.run(measure(args, os.path.join(tmp, "run")))
    print(f"TUI at {args.fps:g} fps, 8 fake GPUs, {result['steps_per_s']:.0f} steps/s streamed, "
          f"{args.rounds} rounds of {args.seconds:g} s")
    print(f"  view CPU: {100 * result['view_cpu']:.1f}% of one core, median (rounds "
          f"{100 * result['view_cpu_low']:.1f}–{100 * result['view_cpu_high']:.1f}%; writer thread "
          f"{100 * result['writer_cpu']:.1f}%, excluded)")
    print(f"  write-to-screen delay: p50 {1000 * result['delay_p50']:.0f} ms, p95 {1000 * result['delay_p95']:.0f} ms, "
          f"max {1000 * result['delay_max']:.0f} ms over {result['frames']} frames")
    write_rows(args.json, [
        row(f"TUI CPU, 8 fake GPUs, {result['steps_per_s']:.0f} steps/s streamed, {args.fps:g} fps",
            f"{100 * result['view_cpu']:.1f}% of a core", "< 5%", result["view_cpu"] < 0.05),
        row("delay from a step written to a frame that has it",
            f"p50 {1000 * result['delay_p50']:.0f} ms, p95 {1000 * result['delay_p95']:.0f} ms, "
            f"max {1000 * result['delay_max']:.0f} ms", "<= 250 ms (p95)", result["delay_p95"] <= 0.25),
    ])


if __name__ == "__main__":
    main()
