"""What one telemetry tick costs the ddptop process, on the fake 8-GPU node.

Three things measured side by side, interleaved over several rounds, in CPU seconds of this process:
  bare     the NVML calls a tick needs, made directly on the fake (no ddptop code): the floor
  sampler  GpuSampler.sample(): the same calls plus N/A handling, caching and counter rates
  monitor  Monitor.sample_once(): sampler + psutil host (with the CPU other processes took: ddptop's
           process tree followed through /proc) and 4 rank processes + one JSON line to disk
The fake answers in Python, so "bare" is what the fake itself costs; a real driver's calls cost
differently (and some take the driver lock), so the ratio sampler/bare is the part ddptop controls.
Each tick's cost is also given as a share of a core at the default interval (1 s) and at the interval used
while a configuration's steps run on a GPU (ddptop.telemetry.monitor.FAST_INTERVAL).

    python benchmarks/telemetry_cost.py [--ticks 200] [--rounds 5]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pynvml  # noqa: E402

from benchmarks.common import add_json_option, row, write_rows  # noqa: E402
from ddptop.telemetry.fake.nvml import FakeNvml  # noqa: E402
from ddptop.telemetry.gpu import GpuSampler  # noqa: E402
from ddptop.telemetry.host import RankProcess  # noqa: E402
from ddptop.telemetry.monitor import FAST_INTERVAL, Monitor  # noqa: E402

FIELDS = [
    (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, 0),
    (pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES, 0),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX, 0xFFFFFFFF),
    (pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX, 0xFFFFFFFF),
]


def bare_tick(fake: FakeNvml, handles: list) -> None:
    for h in handles:
        fake.nvmlDeviceGetUtilizationRates(h)
        fake.nvmlDeviceGetMemoryInfo(h)
        fake.nvmlDeviceGetPowerUsage(h)
        fake.nvmlDeviceGetTotalEnergyConsumption(h)
        fake.nvmlDeviceGetTemperature(h, 0)
        fake.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_SM)
        fake.nvmlDeviceGetClockInfo(h, pynvml.NVML_CLOCK_MEM)
        fake.nvmlDeviceGetCurrentClocksEventReasons(h)
        fake.nvmlDeviceGetCurrPcieLinkGeneration(h)
        fake.nvmlDeviceGetCurrPcieLinkWidth(h)
        fake.nvmlDeviceGetFieldValues(h, FIELDS)
        fake.nvmlDeviceGetComputeRunningProcesses_v2(h)  # the dgx1 driver predates _v3
    try:
        fake.nvmlEventSetWait_v2(fake.nvmlEventSetCreate(), 0)
    except fake.NVMLError:  # the simulated binding's own class (a timeout: no event waiting)
        pass


def cpu_per_tick(tick, ticks: int) -> float:
    start = time.process_time()
    for _ in range(ticks):
        tick()
    return (time.process_time() - start) / ticks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    add_json_option(parser)
    args = parser.parse_args()

    sleepers = [subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"]) for _ in range(4)]
    refs = [RankProcess(p.pid, r, "bench", r, f"cuda:{r}", None) for r, p in enumerate(sleepers)]
    fake_bare, fake_sampler, fake_monitor = FakeNvml(), FakeNvml(), FakeNvml()
    for r, p in enumerate(sleepers):
        fake_monitor.attach_process(r, p.pid, 1 << 30)
    handles = [fake_bare.nvmlDeviceGetHandleByIndex(i) for i in range(8)]
    sampler = GpuSampler(fake_sampler).open()
    with tempfile.TemporaryDirectory() as tmp:
        monitor = Monitor(1.0, os.path.join(tmp, "telemetry.jsonl"), fake_monitor, lambda: refs).open()
        results: dict[str, list[float]] = {"bare": [], "sampler": [], "monitor": []}
        try:
            for _ in range(args.rounds):
                results["bare"].append(cpu_per_tick(lambda: bare_tick(fake_bare, handles), args.ticks))
                results["sampler"].append(cpu_per_tick(sampler.sample, args.ticks))
                results["monitor"].append(cpu_per_tick(monitor.sample_once, args.ticks))
            size = os.path.getsize(os.path.join(tmp, "telemetry.jsonl")) / (args.rounds * args.ticks)
        finally:
            monitor.stop()
            sampler.close()
            for p in sleepers:
                p.kill()
                p.wait()
    median = {k: statistics.median(v) for k, v in results.items()}
    print(f"Telemetry tick cost, 8 fake GPUs, 4 rank processes ({args.rounds} rounds x {args.ticks} ticks, median)")
    fast = f"at {FAST_INTERVAL:g} s"
    print(f"{'what':<10}{'CPU ms/tick':>12}{'% of a core at 1 s':>20}{f'% of a core {fast}':>23}{'vs bare':>9}")
    for key in ("bare", "sampler", "monitor"):
        ms = 1000 * median[key]
        print(f"{key:<10}{ms:>12.2f}{100 * median[key]:>19.2f}%{100 * median[key] / FAST_INTERVAL:>22.2f}%"
              f"{median[key] / median['bare']:>8.2f}x")
    print(f"timeline: {size:.0f} bytes per tick ({size * 3600 / 1e6:.1f} MB per hour at 1 s, "
          f"{size * 3600 / FAST_INTERVAL / 1e6:.1f} MB per hour of GPU steps {fast})")
    write_rows(args.json, [
        row("telemetry tick, 8 fake GPUs + host + 4 ranks", f"{1000 * median['monitor']:.2f} ms CPU = "
            f"{100 * median['monitor']:.2f}% of a core at 1 s, {100 * median['monitor'] / FAST_INTERVAL:.2f}% {fast} "
            f"(GPU steps); sampler {median['sampler'] / median['bare']:.2f}x the bare NVML calls"),
    ])


if __name__ == "__main__":
    main()
