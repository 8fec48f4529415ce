"""ddptop's NVML layer against nvitop's (``nvitop.api``), side by side on the simulated nodes.

    python benchmarks/nvml_layer.py [--ticks 100] [--rounds 5] [--json PATH]

Both read the same simulated node through the same real pynvml code: nvitop imports ``pynvml`` by name, so
this script (and only it) puts the simulated binding instance under that name before importing nvitop.
Per profile: which of the per-GPU figures ddptop shows each layer returns, and the CPU time of one tick
reading them for every GPU, alternating the two layers in each round (median of the rounds, as a ratio).
nvitop is not a dependency of ddptop: install it to run this (``pip install nvitop``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ddptop.telemetry import fake_driver  # noqa: E402
from ddptop.telemetry.fake_nodes import known_nodes  # noqa: E402
from ddptop.telemetry.fake_nvml import FakeNvml  # noqa: E402
from ddptop.telemetry.gpu import GpuSampler  # noqa: E402

# the per-GPU figures compared: each layer asked through its own API (ddptop's ECC, clock event reasons and
# GPM counters are left out: they were not looked up in nvitop's API, so no count would be fair)
FIELDS = ("name", "util", "mem_used", "mem_total", "power_w", "power_limit_w", "temp_c", "sm_clock_mhz",
          "mem_clock_mhz", "pcie_gen", "pcie_tx_bps", "nvlink_tx_bps", "processes", "mig")


def ddptop_tick(sampler: GpuSampler) -> dict[str, int]:
    readings = sampler.sample()
    got = {f: 0 for f in FIELDS}
    for r, static in zip(readings, sampler.static):
        values = {"name": static.name, "util": r.util, "mem_used": r.mem_used, "mem_total": r.mem_total,
                  "power_w": r.power_w, "power_limit_w": r.power_limit_w, "temp_c": r.temp_c,
                  "sm_clock_mhz": r.sm_clock_mhz, "mem_clock_mhz": r.mem_clock_mhz, "pcie_gen": r.pcie_gen,
                  "pcie_tx_bps": r.pcie_tx_bps, "nvlink_tx_bps": r.nvlink_tx_bps,
                  "processes": r.processes if "processes" not in r.na else None,
                  "mig": None}
        for key, value in values.items():
            got[key] += value is not None and value != "(unavailable)"
    return got


def nitop_tick(nvitop, devices) -> dict[str, int]:
    got = {f: 0 for f in FIELDS}
    na = nvitop.NA
    for device in devices:
        values = {"name": device.name(), "util": device.gpu_utilization(), "mem_used": device.memory_used(),
                  "mem_total": device.memory_total(), "power_w": device.power_usage(),
                  "power_limit_w": device.power_limit(), "temp_c": device.temperature(),
                  "sm_clock_mhz": device.sm_clock(), "mem_clock_mhz": device.memory_clock(),
                  "pcie_gen": device.current_pcie_link_generation() if hasattr(device, "current_pcie_link_generation") else na,
                  "pcie_tx_bps": device.pcie_tx_throughput(), "nvlink_tx_bps": device.nvlink_total_tx_throughput()
                  if hasattr(device, "nvlink_total_tx_throughput") else na,
                  "processes": device.processes(),
                  "mig": device.mig_devices() if device.is_mig_mode_enabled() else na}
        for key, value in values.items():
            got[key] += value is not na and value is not None
    return got


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    sys.modules["pynvml"] = fake_driver.binding()  # nvitop reads the simulated node through pynvml's code
    import nvitop

    results = []
    print(f"nvitop {nvitop.__version__}; per tick: every GPU's fields; CPU ms per tick, median of {args.rounds}")
    print(f"{'profile':<10} {'ddptop fields':>13} {'nvitop fields':>13} {'ddptop ms':>10} {'nvitop ms':>10} "
          f"{'nvitop/ddptop':>13}")
    for profile in known_nodes():
        fake = FakeNvml(profile)
        fake.nvmlInit()  # the node answers this thread's calls (nvitop's too)
        sampler = GpuSampler(fake).open()
        try:
            devices = nvitop.Device.all()
        except Exception as exc:  # noqa: BLE001 - what nvitop does on this node is the finding
            sampler.close()
            row = {"profile": profile, "ddptop_fields": sum(v > 0 for v in ddptop_tick(GpuSampler(fake).open()).values()),
                   "nvitop_error": f"{type(exc).__name__}: {exc}"}
            results.append(row)
            print(f"{profile:<10} {row['ddptop_fields']:>10}/{len(FIELDS)}   nvitop: Device.all() raised {row['nvitop_error']}")
            continue
        ours_cpu, theirs_cpu = [], []
        for _ in range(args.rounds):
            for layer in ("ddptop", "nvitop"):
                start = time.process_time()
                for _ in range(args.ticks):
                    if layer == "ddptop":
                        ours = ddptop_tick(sampler)
                    else:
                        fake_driver.activate(fake)
                        theirs = nitop_tick(nvitop, devices)
                spent = (time.process_time() - start) / args.ticks * 1e3
                (ours_cpu if layer == "ddptop" else theirs_cpu).append(spent)
        sampler.close()
        row = {"profile": profile, "ddptop_fields": sum(v > 0 for v in ours.values()),
               "nvitop_fields": sum(v > 0 for v in theirs.values()),
               "ddptop_ms": statistics.median(ours_cpu), "nvitop_ms": statistics.median(theirs_cpu)}
        row["ratio"] = row["nvitop_ms"] / row["ddptop_ms"]
        results.append(row)
        print(f"{profile:<10} {row['ddptop_fields']:>10}/{len(FIELDS)} {row['nvitop_fields']:>10}/{len(FIELDS)} "
              f"{row['ddptop_ms']:>10.2f} {row['nvitop_ms']:>10.2f} {row['ratio']:>12.2f}x")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(results, handle, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
