"""Every GPU's utilisation, memory, power, clocks and links (one row each), and the host's load."""

from __future__ import annotations

from typing import Any

from rich.text import Text

from ddptop.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable
from ddptop.tui.panels.cached import CachedStatic

# (key, label, width, priority): fixed widths, so that cells updated in place never reflow the table; in a
# narrow window the lowest priority goes first (nvitop's compact mode), the load, memory and notes stay
GPU_COLUMNS = (
    ("gpu", "GPU", 3), ("name", "name", 22, 40), ("util", "util", 13), ("hist", "util hist.", 10, 20),
    # wide enough for 141/141 GiB and 1000/1000 W (H200, B200): a cell that fits is never cut mid-value
    ("mem", "memory", 13, 90), ("memgib", "GiB", 11, 80), ("power", "power W", 9, 60), ("temp", "temp", 4, 30),
    ("clock", "SM MHz", 6, 25), ("gpm", "SM/TC%", 6, 35), ("pcie", "PCIe GB/s", 9, 45),
    ("nvlink", "NVLink GB/s", 11, 50), ("rank", "rank", 5, 95), ("notes", "notes", 16, 85),
)


class GpuTable(LineTable):
    """Redrawn only when a new telemetry reading arrives (about once a second), whatever the frame rate."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(GPU_COLUMNS, zebra_stripes=True, **kwargs)
        self._drawn_from: Any = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        telemetry = snapshot.telemetry
        latest = telemetry.latest
        if latest is not None and latest is self._drawn_from:
            return
        self._drawn_from = latest
        names = {g["index"]: g.get("name", "") for g in telemetry.info.get("gpus") or []}
        readings = (latest or {}).get("gpus") or []
        ranks_on: dict[int, list[str]] = {}
        for rank in (latest or {}).get("ranks") or []:
            for gpu in rank.get("gpus") or ([rank["gpu"]] if rank.get("gpu") is not None else []):
                ranks_on.setdefault(gpu, []).append(str(rank["rank"]))
        if self.display != bool(readings):
            self.display = bool(readings)
        for reading in readings:
            index = reading["index"]
            history = [
                next((g.get("util") for g in r.get("gpus") or [] if g.get("index") == index), None)
                for r in telemetry.recent
            ]
            self.set_row(str(index), _gpu_cells(reading, names.get(index, ""), history, ranks_on.get(index, [])))


def _gpu_cells(reading: dict[str, Any], name: str, history: list[Any], ranks: list[str]) -> dict[str, Any]:
    mem_pct = (
        100 * reading["mem_used"] / reading["mem_total"]
        if reading.get("mem_used") is not None and reading.get("mem_total")
        else None
    )
    notes = list(reading.get("throttle") or [])
    if reading.get("lost"):
        notes = ["GPU LOST"]
    elif reading.get("inaccessible"):  # not ours to use (another job's GPU, a container's cgroup)
        notes = ["not accessible"]
    if reading.get("xid"):
        notes.append("Xid " + ",".join(map(str, reading["xid"])))
    if reading.get("ecc_uncorrected"):
        notes.append(f"ECC {reading['ecc_uncorrected']}")
    power = reading.get("power_w")
    limit = reading.get("power_limit_w")
    return {
        "gpu": str(reading["index"]),
        "name": name.removeprefix("Tesla ").removeprefix("NVIDIA ")[:22],
        "util": fmt.bar(reading.get("util"), 8),
        "hist": fmt.sparkline(history, 10),
        "mem": fmt.bar(mem_pct, 8, fmt.MEMORY_THRESHOLDS),
        "memgib": fmt.pair(fmt.gib(reading.get("mem_used")), fmt.gib(reading.get("mem_total"))),
        "power": "N/A" if power is None else f"{power:.0f}/{limit:.0f}" if limit else f"{power:.0f}",
        "temp": "N/A" if reading.get("temp_c") is None else f"{reading['temp_c']}C",
        "clock": "N/A" if reading.get("sm_clock_mhz") is None else str(reading["sm_clock_mhz"]),
        # GPM (Hopper and later): SM active / tensor pipe active, where NVML util counts any kernel at all
        "gpm": "-" if reading.get("sm_active") is None
        else f"{reading['sm_active']:.0f}/{reading.get('tensor_active') or 0:.0f}",
        "pcie": fmt.pair(fmt.gbps(reading.get("pcie_tx_bps")), fmt.gbps(reading.get("pcie_rx_bps"))),
        "nvlink": fmt.pair(fmt.gbps(reading.get("nvlink_tx_bps")), fmt.gbps(reading.get("nvlink_rx_bps"))),
        "rank": ",".join(ranks) or "-",
        "notes": Text(", ".join(notes), style="bold red" if reading.get("lost") else "yellow"),
    }


class HostLine(CachedStatic):
    """The host's CPU, per-core load, memory and load average, and ddptop's own CPU."""

    _drawn_from: Any = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        telemetry = snapshot.telemetry
        if telemetry.latest is not None and telemetry.latest is self._drawn_from:
            return
        self._drawn_from = telemetry.latest
        latest = telemetry.latest or {}
        readings = latest.get("gpus") or []
        host = latest.get("host")
        line = Text()
        if not readings:
            line.append(f"GPUs: {telemetry.info.get('nvml', 'no telemetry')}\n", style="yellow")
        if host:
            line.append("Host CPU ")
            line.append_text(fmt.bar(host.get("cpu"), 10))
            line.append("  cores ")
            line.append_text(fmt.sparkline(host.get("per_cpu") or [], len(host.get("per_cpu") or []) or 1))
            line.append(f"  mem {fmt.gib(host.get('mem_used'))}/{fmt.gib(host.get('mem_total'))} GiB")
            if host.get("load"):
                line.append(f"  load {' '.join(f'{v:.2f}' for v in host['load'])}")
            line.append(f"  ddptop {host.get('ddptop_cpu', 0):.0f}%")
        elif not readings:
            line.append("Host: no reading yet")
        self.show_content(line)
