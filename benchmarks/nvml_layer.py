"""ddptop's NVML layer against nvitop's (``nvitop.api``), side by side on the simulated nodes.

    python benchmarks/nvml_layer.py [--ticks 200] [--rounds 5] [--profiles dgx1,...] [--json PATH]

nvitop is not a dependency of ddptop: install it to run this (``pip install nvitop``).

How both layers reach the same simulated node. The simulation lives in a second instance of the installed
``pynvml`` file (``fake_library.binding()``); the ``pynvml`` module itself is never pointed at it. nvitop does
``import pynvml`` once, when it is imported, so this script puts that binding instance under the name
``pynvml`` for the length of nvitop's import and puts the real module back afterwards. From then on nvitop's
calls cross the same pynvml code and the same C callbacks as ddptop's. Each node is checked to be the one
answering (names end in "(FAKE)", UUIDs equal ddptop's, no callback error).

A function a profile's driver lacks is simulated as present but answering FUNCTION_NOT_FOUND when called.
A real driver that lacks it has no such symbol, and nvitop picks its versioned calls (``_v3`` processes,
``_v2`` memory) by looking the symbol up, so by default the script removes those functions from the library
the binding sees, as dlsym would. ``--lacks-at-call`` keeps the simulation's behaviour instead; the report
always lists the cells that change between the two.

(1) Coverage, on a node with steady readings and one process (this one, 512 MiB) attached to every GPU it
may use: for each field ddptop shows per GPU, how many GPUs each layer returns a value for. ddptop through
``GpuSampler(node).sample()`` (two readings, for the rates), ``read_inventory`` (MIG) and ``read_topology``
(the matrix); nvitop through ``Device``/``MigDevice``. A cell marked ``r`` was read through nvitop's
pass-through (``device.curr_pcie_link_width()`` becomes ``pynvml.nvmlDeviceGetCurrPcieLinkWidth(handle)``,
nvitop adds nothing); ``*`` marks a miss because nvitop calls a function (or field) the simulated library
does not have, which real drivers have; ``-``: no such reading in nvitop's API.

(2) CPU per tick: ``time.process_time`` of ``--ticks`` ticks, each reading the same fields of every GPU
(ddptop: ``sampler.sample()``; nvitop: the equivalent calls inside ``device.oneshot()``), the two layers
alternating (which goes first alternates too), ``--rounds`` rounds, median per layer, reported as
nvitop/ddptop.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
from importlib.metadata import version
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pynvml  # noqa: E402  (the real module: only its constants are read here)

from ddptop.telemetry.fake.driver import library as fake_library  # noqa: E402
from ddptop.telemetry.fake.nodes import known_nodes  # noqa: E402
from ddptop.telemetry.fake.nvml import FakeNvml  # noqa: E402
from ddptop.telemetry.gpu import GpuSampler  # noqa: E402
from ddptop.telemetry.inventory import read_inventory  # noqa: E402
from ddptop.telemetry.topology import read_topology  # noqa: E402

PROCESS_BYTES = 512 << 20
# field key -> label; per GPU unless said per node
FIELDS = {
    "name": "name",
    "uuid": "UUID",
    "util": "GPU utilisation",
    "mem_total": "memory total",
    "mem_used": "memory used",
    "mem_v2": "  used, reserved apart (v2)",
    "power": "power",
    "power_limit": "power limit",
    "temp": "temperature",
    "sm_clock": "SM clock",
    "mem_clock": "memory clock",
    "pcie_link": "PCIe gen and width",
    "pcie_tx": "PCIe tx",
    "pcie_rx": "PCIe rx",
    "nvlink_tx": "NVLink tx",
    "nvlink_rx": "NVLink rx",
    "processes": "processes + used memory",
    "ecc": "ECC uncorrected",
    "clock_reasons": "clock event reasons",
    "mig": "MIG instances (node)",
    "topology": "topology matrix (GPU pairs)",
}
NVITOP_RAW = {"pcie_link", "clock_reasons"}  # read only through nvitop's pass-through
NVITOP_NONE = {"topology"}  # nothing in nvitop's API
# what nvitop calls for a field, where the simulated library may lack it ("field:" an NVML field id)
NVITOP_NEEDS = {
    "power_limit": ("nvmlDeviceGetPowerManagementLimit",),
    "pcie_tx": ("nvmlDeviceGetPcieThroughput",),
    "pcie_rx": ("nvmlDeviceGetPcieThroughput",),
    "nvlink_tx": ("field:NVML_FI_DEV_NVLINK_LINK_COUNT",),
    "nvlink_rx": ("field:NVML_FI_DEV_NVLINK_LINK_COUNT",),
}


class DlsymLibrary:
    """The simulated library as a driver without ``lacks`` presents it: those symbols are not there."""

    def __init__(self, library: Any, lacks: set[str], asked: set[str]) -> None:
        self._library, self._lacks, self._asked = library, lacks, asked

    def __getattr__(self, name: str) -> Any:
        if name in self._lacks:
            raise AttributeError(name)
        if name.startswith("nvml") and name not in fake_library.FUNCTIONS and name != "nvmlErrorString":
            self._asked.add(name)  # a function no simulated driver has
        return getattr(self._library, name)


def import_nvitop() -> Any:
    binding = fake_library.binding()
    real = sys.modules["pynvml"]
    sys.modules["pynvml"] = binding
    try:
        import nvitop
        from nvitop.api import libnvml
    finally:
        sys.modules["pynvml"] = real
    assert libnvml._pynvml is binding, "nvitop did not take the simulated binding"
    libnvml.LOGGER.disabled = True  # it logs a traceback for each function the simulated library lacks
    return nvitop


class Node:
    """One simulated node, and the library view both layers see while it answers."""

    def __init__(self, nvitop: Any, profile: str, steady: bool, lacks_at_call: bool) -> None:
        self.nvitop = nvitop
        self.fake = FakeNvml(profile, steady=steady)
        self.asked: set[str] = set()
        binding = fake_library.binding()
        library = binding.nvmlLib
        library = getattr(library, "_library", library)
        lacks = set() if lacks_at_call else set(self.fake.lacks)
        binding.nvmlLib = DlsymLibrary(library, lacks, self.asked)
        binding._nvmlGetFunctionPointer_cache.clear()
        libnvml = nvitop.api.libnvml
        for name in [k for k in vars(libnvml) if k.startswith("__get_") and k.endswith("_version_suffix")]:
            setattr(libnvml, name, None)  # nvitop probes once per process: once per node here
        libnvml.UNKNOWN_FUNCTIONS.clear()
        self.usable = [i for i in range(self.fake.count) if i not in self.fake.denied]
        for index in self.usable:
            self.fake.attach_process(index, os.getpid(), PROCESS_BYTES)
        self.fake.nvmlInit()
        self.sampler = GpuSampler(self.fake).open()
        fake_library.activate(self.fake)
        self.all_error = None
        try:
            self.devices = nvitop.Device.all()
        except Exception as exc:  # noqa: BLE001 - what nvitop does on this node is a finding
            self.all_error = f"{type(exc).__name__}: {exc}"
            self.devices = []
            for index in range(self.fake.count):  # what a caller must write instead: GPU by GPU
                try:
                    self.devices.append(nvitop.Device(index))
                except nvitop.NVMLError:
                    pass

    def check(self) -> list[str]:
        """Why nvitop might not be reading this node; empty when it is."""
        problems = []
        ours = {s.index: s.uuid for s in self.sampler.static if s.uuid}
        theirs = {d.index: d.uuid() for d in self.devices}
        if ours != theirs:
            problems.append(f"UUIDs differ: ddptop {ours} nvitop {theirs}")
        if not all(str(d.name()).endswith("(FAKE)") for d in self.devices):
            problems.append("a device name is not the simulated node's")
        problems += self.fake.callback_errors
        return problems

    def close(self) -> None:
        self.sampler.close()


def present(value: Any, na: Any) -> bool:
    return value is not None and value is not na and not (isinstance(value, str) and value == na)


def raw(device: Any, name: str, *args: Any) -> Any:
    try:
        return getattr(device, name)(*args)
    except Exception:  # noqa: BLE001 - the pass-through raises what pynvml raises
        return None


def coverage(node: Node) -> dict[str, tuple[int, int, int]]:
    """field -> (ddptop count, nvitop count or -1 when nvitop has no such reading, denominator)."""
    nvitop, fake = node.nvitop, node.fake
    na = nvitop.NA
    sampler = node.sampler
    sampler.sample()
    time.sleep(0.05)
    readings = {r.index: r for r in sampler.sample()}
    ours = {key: 0 for key in FIELDS}
    theirs = {key: 0 for key in FIELDS}
    pid = os.getpid()
    for index in node.usable:
        r, static = readings[index], sampler.static[index]
        node_used = fake.memory(index, None)[2]
        got = {
            "name": static.name not in ("(unavailable)", "(unknown)"), "uuid": static.uuid,
            "util": r.util, "mem_total": r.mem_total, "mem_used": r.mem_used,
            "mem_v2": r.mem_used is not None and r.mem_used == node_used,
            "power": r.power_w, "power_limit": r.power_limit_w, "temp": r.temp_c,
            "sm_clock": r.sm_clock_mhz, "mem_clock": r.mem_clock_mhz,
            "pcie_link": r.pcie_gen is not None and r.pcie_width is not None,
            "pcie_tx": r.pcie_tx_bps, "pcie_rx": r.pcie_rx_bps,
            "nvlink_tx": r.nvlink_tx_bps, "nvlink_rx": r.nvlink_rx_bps,
            "processes": any(p["pid"] == pid and p["gpu_memory"] == PROCESS_BYTES for p in r.processes),
            "ecc": r.ecc_uncorrected, "clock_reasons": r.throttle,
        }
        for key, value in got.items():
            ours[key] += value is not None and value is not False
    fake_library.activate(fake)
    for device in node.devices:
        device.nvlink_total_tx_throughput()  # nvitop's NVLink rates need a first reading too
    time.sleep(0.05)
    for device in node.devices:
        with device.oneshot():
            used = device.memory_used()
            listed = device.processes().get(pid)
            got = {
                "name": device.name(), "uuid": device.uuid(), "util": device.gpu_utilization(),
                "mem_total": device.memory_total(), "mem_used": used,
                "mem_v2": used == fake.memory(device.index, None)[2] or None,
                "power": device.power_usage(), "power_limit": device.power_limit(),
                "temp": device.temperature(), "sm_clock": device.sm_clock(), "mem_clock": device.memory_clock(),
                "pcie_link": raw(device, "curr_pcie_link_generation") is not None
                and raw(device, "curr_pcie_link_width") is not None or None,
                "pcie_tx": device.pcie_tx_throughput(), "pcie_rx": device.pcie_rx_throughput(),
                "nvlink_tx": device.nvlink_total_tx_throughput(), "nvlink_rx": device.nvlink_total_rx_throughput(),
                "processes": listed is not None and listed.gpu_memory() == PROCESS_BYTES or None,
                "ecc": device.total_volatile_uncorrected_ecc_errors(),
                "clock_reasons": raw(device, "current_clocks_event_reasons"),
            }
        for key, value in got.items():
            theirs[key] += present(value, na)
    # per node: MIG instances and the topology matrix
    expected_mig = sum(len(fake.profile.gpus[i].mig) for i in node.usable)
    ours["mig"] = sum(gpu.is_mig for gpu in read_inventory(fake).gpus)
    theirs["mig"] = sum(len(d.mig_devices()) for d in node.devices)
    topo = read_topology(fake)
    pairs = [(i, j) for i in node.usable for j in node.usable if i != j]
    ours["topology"] = sum(topo.link(i, j) not in ("N/A", "", None) for i, j in pairs)
    result = {}
    for key in FIELDS:
        total = expected_mig if key == "mig" else len(pairs) if key == "topology" else len(node.usable)
        result[key] = (ours[key], -1 if key in NVITOP_NONE else theirs[key], total)
    return result


def simulation_lacks(node: Node, key: str) -> bool:
    """Whether nvitop's miss on this field is the simulated library's: it lacks what nvitop calls."""
    for need in NVITOP_NEEDS.get(key, ()):
        if need.startswith("field:"):
            field_id = getattr(pynvml, need[len("field:"):])
            linked = [i for i in node.usable if node.fake.profile.gpus[i].nvlink_slots]
            if linked and node.fake.field(linked[0], field_id) is None:
                return True
        elif need not in fake_library.FUNCTIONS:
            return True
    return False


def nvitop_tick(devices: list[Any]) -> None:
    for device in devices:
        with device.oneshot():
            device.name(), device.uuid(), device.gpu_utilization(), device.memory_utilization()
            device.memory_used(), device.memory_total(), device.power_usage(), device.power_limit()
            raw(device, "total_energy_consumption")
            device.temperature(), device.sm_clock(), device.memory_clock()
            raw(device, "current_clocks_event_reasons")
            raw(device, "curr_pcie_link_generation"), raw(device, "curr_pcie_link_width")
            device.pcie_tx_throughput(), device.pcie_rx_throughput()
            device.nvlink_total_tx_throughput(), device.nvlink_total_rx_throughput()
            device.total_volatile_uncorrected_ecc_errors()
            [process.gpu_memory() for process in device.processes().values()]


def cpu_per_tick(node: Node, ticks: int, rounds: int) -> tuple[float, float]:
    """Median CPU ms per tick of ddptop's sampler and of nvitop, measured alternately."""
    node.sampler.sample()
    fake_library.activate(node.fake)
    nvitop_tick(node.devices)
    spent: dict[str, list[float]] = {"ddptop": [], "nvitop": []}
    for number in range(rounds):
        for layer in (("ddptop", "nvitop") if number % 2 == 0 else ("nvitop", "ddptop")):
            gc.collect()
            start = time.process_time()
            if layer == "ddptop":
                for _ in range(ticks):
                    node.sampler.sample()
            else:
                fake_library.activate(node.fake)
                for _ in range(ticks):
                    nvitop_tick(node.devices)
            spent[layer].append((time.process_time() - start) / ticks * 1e3)
    return statistics.median(spent["ddptop"]), statistics.median(spent["nvitop"])


def cell(ours: int, theirs: int, total: int, key: str, starred: bool) -> str:
    if total == 0:
        return "n/a"
    mark = "" if theirs < 0 else ("r" if key in NVITOP_RAW else "") + ("*" if starred and theirs < total else "")
    return f"{ours}|{'-' if theirs < 0 else theirs}{mark}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--profiles", help="comma-separated (default: every shipped node)")
    parser.add_argument("--lacks-at-call", action="store_true",
                        help="a driver's missing functions found by lookup, failing when called (as simulated)")
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    nvitop = import_nvitop()
    profiles = args.profiles.split(",") if args.profiles else list(known_nodes())
    report: dict[str, Any] = {"nvitop": nvitop.__version__, "nvidia_ml_py": version("nvidia-ml-py"), "profiles": {}}
    print(f"nvitop {report['nvitop']}, nvidia-ml-py {report['nvidia_ml_py']}; simulated nodes only "
          f"(missing driver functions {'found, failing when called' if args.lacks_at_call else 'absent at lookup'})")
    asked: set[str] = set()
    for profile in profiles:
        row: dict[str, Any] = {}
        for mode, lacks_at_call in (("chosen", args.lacks_at_call), ("other", not args.lacks_at_call)):
            node = Node(nvitop, profile, steady=True, lacks_at_call=lacks_at_call)
            try:
                problems = node.check()
                counts = coverage(node)
                problems += node.fake.callback_errors
                if mode == "chosen":
                    row.update(coverage=counts, device_all_error=node.all_error, problems=problems,
                               gpus=len(node.usable), gpus_listed=node.fake.count,
                               driver=str(nvitop.Device.driver_version()),
                               starred=[k for k in FIELDS if simulation_lacks(node, k)])
                    asked |= node.asked
                else:
                    row["other_mode_changes"] = {k: [list(row["coverage"][k]), list(v)]
                                                 for k, v in counts.items() if list(v) != list(row["coverage"][k])}
            finally:
                node.close()
        node = Node(nvitop, profile, steady=False, lacks_at_call=args.lacks_at_call)
        try:
            ours_ms, theirs_ms = cpu_per_tick(node, args.ticks, args.rounds)
            problems = node.fake.callback_errors
        finally:
            node.close()
        row.update(ddptop_ms=ours_ms, nvitop_ms=theirs_ms, ratio=theirs_ms / ours_ms)
        row["problems"] += problems
        report["profiles"][profile] = row
    report["simulation_lacks"] = sorted(asked)

    rows = report["profiles"]
    width = max(len(label) for label in FIELDS.values())
    print("\nGPUs with a value, ddptop|nvitop (r: via pass-through; *: simulation lacks nvitop's call; -: not in its API)")
    print(f"{'':<{width}} " + " ".join(f"{p:>10}" for p in rows))
    for key, label in FIELDS.items():
        cells = [cell(*rows[p]["coverage"][key], key, key in rows[p]["starred"]) for p in rows]
        print(f"{label:<{width}} " + " ".join(f"{c:>10}" for c in cells))
    print(f"{'GPUs usable / listed':<{width}} " + " ".join(f"{str(rows[p]['gpus']) + '/' + str(rows[p]['gpus_listed']):>10}"
                                                       for p in rows))
    print(f"\nCPU per tick, every GPU's fields, median of {args.rounds} rounds of {args.ticks} ticks")
    print(f"{'profile':<10} {'ddptop ms':>10} {'nvitop ms':>10} {'nvitop/ddptop':>14}")
    for profile, row in rows.items():
        print(f"{profile:<10} {row['ddptop_ms']:>10.3f} {row['nvitop_ms']:>10.3f} {row['ratio']:>13.2f}x")
    for profile, row in rows.items():
        if row["device_all_error"]:
            print(f"{profile}: nvitop.Device.all() raised {row['device_all_error']} (read GPU by GPU above)")
        for problem in row["problems"]:
            print(f"{profile}: NOT THE SIMULATED NODE? {problem}")
        changed = ", ".join(f"{FIELDS[k].strip()} {a[0]}|{a[1]}->{b[0]}|{b[1]}"
                            for k, (a, b) in row["other_mode_changes"].items())
        if changed:
            other = "absent at lookup" if args.lacks_at_call else "failing when called"
            print(f"{profile}, missing functions {other}: {changed}")
    lacked = [name.replace("nvmlDeviceGet", "") for name in report["simulation_lacks"]]
    print("nvitop asked for nvmlDeviceGet..., which the simulated library lacks: " + ", ".join(lacked[:3]) + ",\n  "
          + ", ".join(lacked[3:]))
    if args.json:
        with open(args.json, "w", encoding="utf-8") as handle:
            json.dump(report, handle, indent=1)
    return 1 if any(row["problems"] for row in rows.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
