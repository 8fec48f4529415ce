"""Every GPU's utilisation, memory, power, clocks and links (one row each, and one per MIG instance where
they fit), and the host's load."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rich.text import Text

from ddptop.run.snapshot import RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.lines import LineTable
from ddptop.tui.panels.cached import CachedStatic

# (key, label, width, priority): fixed widths, so that cells updated in place never reflow the table; in a
# narrow window the lowest priority goes first (nvitop's compact mode), the load, memory and notes stay
GPU_COLUMNS = (
    ("gpu", "GPU", 4), ("name", "name", 22, 40), ("util", "util", 13), ("hist", "util hist.", 10, 20),
    # wide enough for 141/141 GiB and 1000/1000 W (H200, B200): a cell that fits is never cut mid-value
    ("mem", "memory", 13, 90), ("memgib", "GiB", 11, 80), ("power", "power W", 9, 60), ("temp", "temp", 4, 30),
    ("clock", "SM MHz", 6, 25), ("gpm", "SM/TC%", 6, 35), ("pcie", "PCIe GB/s", 9, 45),
    ("nvlink", "NVLink GB/s", 11, 50), ("rank", "rank", 5, 95), ("notes", "notes", 16, 85),
)


class GpuTable(LineTable):
    """Redrawn only when a new telemetry reading arrives (about once a second), whatever the frame rate.

    A multi-node run shows every node's GPUs, grouped by node ("node:GPU"); when they are more than the rows
    the panel has, the follower nodes (then node 0) shrink to one summary line each, from the last node on.
    A GPU in MIG mode says so in its util cell (NVML gives no utilisation there) and its notes ("MIG 7×
    1g.5gb"); its instances get a line each below it (memory, ranks) only when every such line fits.
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(GPU_COLUMNS, zebra_stripes=True, **kwargs)
        self._drawn_from: Any = None

    def update_from(self, snapshot: RunSnapshot) -> None:
        telemetry = snapshot.telemetry
        nodes = [(0, telemetry), *sorted(telemetry.nodes.items())]
        drawn_from = (tuple(node.latest for _, node in nodes), self._capacity())
        previous = self._drawn_from
        if (telemetry.latest is not None and previous is not None and drawn_from[1] == previous[1]
                and _same_readings(drawn_from[0], previous[0])):
            return
        self._drawn_from = drawn_from
        several = len(nodes) > 1
        per_node = [(node_rank, node, (node.latest or {}).get("gpus") or []) for node_rank, node in nodes]
        shown = sum(len(readings) for _, _, readings in per_node)
        if self.display != bool(shown):
            self.display = bool(shown)
        capacity = drawn_from[1]
        # MIG instance lines only when all of them fit beside every GPU's: else the GPU lines say it alone
        with_mig = shown + sum(len(r.get("mig") or ()) for _, _, readings in per_node for r in readings) <= capacity
        summarised: set[int] = set()
        for node_rank, _, readings in reversed(per_node[1:]):  # the last follower shrinks first
            if shown <= capacity:
                break
            if len(readings) > 1:
                summarised.add(node_rank)
                shown -= len(readings) - 1
        # still too many: node 0 shows what fits and one line for the rest of its GPUs
        first = per_node[0][2]
        keep = len(first) if shown <= capacity else max(1, len(first) - (shown - capacity) - 1)
        rows: dict[str, dict[str, Any]] = {}
        for node_rank, node, readings in per_node:
            ranks_on = _ranks_on(node.latest or {})
            if node_rank in summarised:
                rows[f"{node_rank}:*"] = _node_summary_cells(f"node {node_rank}", f"{node_rank}:*", readings,
                                                             node.recent, ranks_on)
                continue
            names = {g["index"]: g.get("name", "") for g in node.info.get("gpus") or []}
            modes = {g["index"]: g.get("mig_mode") for g in node.info.get("gpus") or []}
            rest = readings[keep:] if node_rank == 0 else []
            for reading in readings[:keep] if node_rank == 0 else readings:
                index = reading["index"]
                history = [
                    next((g.get("util") for g in r.get("gpus") or [] if g.get("index") == index), None)
                    for r in node.recent
                ]
                cells = _gpu_cells(reading, names.get(index, ""), history, ranks_on.get(index, []),
                                   modes.get(index) == "enabled")
                if several:
                    cells["gpu"] = f"{node_rank}:{index}"
                key = f"{node_rank}:{index}" if several else str(index)
                rows[key] = cells
                for instance in (reading.get("mig") or ()) if with_mig else ():
                    rows[f"{key}/mig{instance.get('slot')}"] = _mig_cells(instance)
            if rest:  # node 0's GPUs past the panel's rows, as one line after its others
                indices = {r["index"] for r in rest}
                history = [{"gpus": [g for g in r.get("gpus") or [] if g.get("index") in indices]} for r in node.recent]
                rows["rest"] = _node_summary_cells(f"GPUs {rest[0]['index']}-{rest[-1]['index']}",
                                                   f"+{len(rest)}", rest, history, ranks_on)
        if list(rows) != self.rows:
            self.clear()
        for key, cells in rows.items():
            self.set_row(key, cells)

    def _capacity(self) -> int:
        """GPU rows the panel can show: its max-height (40% of the overview in the app) less the header."""
        limit, parent = self.styles.max_height, self.parent
        size = getattr(parent, "size", None)
        if limit is None or size is None or not size.height:
            return 1_000
        return max(1, int(limit.resolve(size, self.app.size)) - 1)


def _same_readings(new: tuple[Any, ...], old: tuple[Any, ...] | None) -> bool:
    """Each node's newest record the same (by identity: records are never changed once read)."""
    return old is not None and len(new) == len(old) and all(x is y for x, y in zip(new, old))


def _ranks_on(latest: Mapping[str, Any]) -> dict[int, list[str]]:
    ranks_on: dict[int, list[str]] = {}
    for rank in latest.get("ranks") or []:
        for gpu in rank.get("gpus") or ([rank["gpu"]] if rank.get("gpu") is not None else []):
            ranks_on.setdefault(gpu, []).append(str(rank["rank"]))
    return ranks_on


def _node_summary_cells(what: str, key: str, readings: list[dict[str, Any]], recent: Any,
                        ranks_on: dict[int, list[str]]) -> dict[str, Any]:
    """One line for several GPUs (a node's, or those past the panel's rows): mean load and memory, summed
    memory and power, their ranks, how many have notes."""
    indices = {r["index"] for r in readings}

    def mean(values: list[Any]) -> float | None:
        known = [v for v in values if v is not None]
        return sum(known) / len(known) if known else None

    def total(key: str) -> float | None:
        known = [r[key] for r in readings if r.get(key) is not None]
        return sum(known) if known else None

    used, size = total("mem_used"), total("mem_total")
    power, limit = total("power_w"), total("power_limit_w")
    history = [mean([g.get("util") for g in r.get("gpus") or []]) for r in recent]
    noted = sum(1 for r in readings if _notes(r))
    temps = [r["temp_c"] for r in readings if r.get("temp_c") is not None]
    return {
        "gpu": key,
        "name": f"{what}: {len(readings)} GPUs",
        "util": fmt.bar(mean([r.get("util") for r in readings]), 8),
        "hist": fmt.sparkline(history, 10),
        "mem": fmt.bar(_percent(used, size), 8, fmt.MEMORY_THRESHOLDS),
        "memgib": fmt.pair(fmt.gib(used), fmt.gib(size)),
        "power": _power_cell(power, limit),
        "temp": _temp_cell(max(temps) if temps else None),
        "clock": "-", "gpm": "-", "pcie": "-", "nvlink": "-",
        "rank": ",".join(r for index in sorted(ranks_on) if index in indices for r in ranks_on[index]) or "-",
        "notes": Text(f"{noted} GPU(s) with notes" if noted else "", style="yellow"),
    }


def _notes(reading: dict[str, Any]) -> list[str]:
    """What a GPU's notes cell says: clock limits, lost, not accessible, Xid, uncorrected ECC."""
    notes = list(reading.get("throttle") or [])
    if reading.get("lost"):
        notes = ["GPU LOST"]
    elif reading.get("inaccessible"):  # not ours to use (another job's GPU, a container's cgroup)
        notes = ["not accessible"]
    if reading.get("xid"):
        notes.append("Xid " + ",".join(map(str, reading["xid"])))
    if reading.get("ecc_uncorrected"):
        notes.append(f"ECC {reading['ecc_uncorrected']}")
    return notes


def _percent(used: float | None, total: float | None) -> float | None:
    return 100 * used / total if used is not None and total else None


def _power_cell(power: float | None, limit: float | None) -> str:
    return "N/A" if power is None else f"{power:.0f}/{limit:.0f}" if limit else f"{power:.0f}"


def _temp_cell(temp: Any) -> str:
    return "N/A" if temp is None else f"{temp}C"


def _mig_summary(instances: list[dict[str, Any]]) -> str:
    """A MIG GPU's instances by profile, the way they were made: "MIG 7× 1g.5gb", "MIG 1× 4g.20gb 3× 1g.5gb"."""
    if not instances:
        return "MIG, no instance"
    counts: dict[str, int] = {}
    for instance in instances:
        profile = instance.get("profile") or "?"
        counts[profile] = counts.get(profile, 0) + 1
    return "MIG " + " ".join(f"{count}× {profile}" for profile, count in counts.items())


def _mig_cells(instance: dict[str, Any]) -> dict[str, Any]:
    """A MIG instance's line under its GPU: its profile where the util is, its own memory and ranks."""
    used, total = instance.get("mem_used"), instance.get("mem_total")
    gi = "" if instance.get("gpu_instance") is None else f" GI {instance['gpu_instance']}"
    ranks = [str(p["rank"]) for p in instance.get("processes") or () if p.get("rank") is not None]
    return {
        "gpu": "",
        "name": f"  MIG {instance.get('slot')}{gi}",
        "util": Text(f"  {instance.get('profile') or 'MIG'}", style="dim"),
        "hist": "",
        "mem": fmt.bar(_percent(used, total), 8, fmt.MEMORY_THRESHOLDS),
        "memgib": fmt.pair(fmt.gib(used), fmt.gib(total)),
        "power": "", "temp": "", "clock": "", "gpm": "", "pcie": "", "nvlink": "",
        "rank": ",".join(ranks) or "-",
        "notes": "",
    }


def _gpu_cells(reading: dict[str, Any], name: str, history: list[Any], ranks: list[str],
               mig: bool = False) -> dict[str, Any]:
    notes = _notes(reading)
    if mig or reading.get("mig"):
        notes.insert(0, _mig_summary(reading.get("mig") or []))
    return {
        "gpu": str(reading["index"]),
        "name": name.removeprefix("Tesla ").removeprefix("NVIDIA ")[:22],
        # NVML has no utilisation in MIG mode: said where the bar would be, not a bare N/A
        "util": Text("N/A (MIG)".ljust(13), style="dim") if mig and reading.get("util") is None
        else fmt.bar(reading.get("util"), 8),
        "hist": fmt.sparkline(history, 10),
        "mem": fmt.bar(_percent(reading.get("mem_used"), reading.get("mem_total")), 8, fmt.MEMORY_THRESHOLDS),
        "memgib": fmt.pair(fmt.gib(reading.get("mem_used")), fmt.gib(reading.get("mem_total"))),
        "power": _power_cell(reading.get("power_w"), reading.get("power_limit_w")),
        "temp": _temp_cell(reading.get("temp_c")),
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
    """The host's CPU, per-core load, memory and load average, and ddptop's own CPU; below them what the job
    was given (``given``: ``fmt.given``, this node's), where the run's environment says."""

    _drawn_from: Any = None

    def __init__(self, given: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.given = given

    def update_from(self, snapshot: RunSnapshot) -> None:
        telemetry = snapshot.telemetry
        nodes = [(0, telemetry), *sorted(telemetry.nodes.items())]
        drawn_from = tuple(node.latest for _, node in nodes)
        if telemetry.latest is not None and _same_readings(drawn_from, self._drawn_from):
            return  # no node has a new reading
        self._drawn_from = drawn_from
        line = Text()
        for node_rank, node in nodes:
            if len(nodes) > 1:  # a multi-node run: a line per node, each from its own sampler
                line.append(f"node {node_rank}  ", style="bold")
            _host_line(line, node)
            if node_rank != nodes[-1][0]:
                line.append("\n")
        used = fmt.peak(telemetry.peak)  # node 0's ranks: the others' peaks are their own samplers'
        if self.given or used:
            if line.plain and not line.plain.endswith("\n"):
                line.append("\n")
            if len(nodes) > 1:  # this ddptop's node: the others' were not read
                line.append("node 0  ", style="bold")
            # each on a line of its own: together they pass 80 columns
            line.append("\n".join(part for part in (self.given, used) if part))
        self.show_content(line)


def _host_line(line: Text, telemetry: Any) -> None:
    """One node's host reading appended to ``line``."""
    latest = telemetry.latest or {}
    readings = latest.get("gpus") or []
    host = latest.get("host")
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
