"""Simulated GPU nodes as data: the schema of a node profile and its loader (``docs/fake-nodes.md``).

A profile is a TOML file: ``ddptop/telemetry/fake/profiles/<name>.toml`` for the shipped ones, chosen with
``DDPTOP_FAKE_NVML=<name>``, or any path (``DDPTOP_FAKE_NVML=path/to/node.toml``); a driver report that
``ddptop doctor --report`` wrote (``DDPTOP_FAKE_NVML=path/to/report.json``) is replayed (``replay``). It describes what NVML
and ``/sys`` would show on that machine: the driver (and which NVML functions it lacks), the CPU sockets,
the PCIe switches, the GPUs (model, memory, clocks, links, MIG instances, whether this process may open
them), the NICs, the NVLink wiring, and processes of other jobs. Nothing here runs a GPU.
"""

from __future__ import annotations

import os
import tomllib
import zlib
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from ddptop.protocol.kernel_files import parse_cpu_list
from ddptop.telemetry.fake.invalid import InvalidEntry

if TYPE_CHECKING:
    from ddptop.telemetry.fake.recorded import Recorded

NODES_DIR = os.path.join(os.path.dirname(__file__), "profiles")


class ProfileError(ValueError):
    """A profile that cannot be read; the message names the file and the key."""


@dataclass(frozen=True)
class MigInstance:
    profile: str  # "1g.10gb"
    memory_mib: int
    gpu_instance: int
    compute_instance: int = 0


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_mib: int
    power_limit_w: int
    sm_clock_max_mhz: int
    memory_clock_mhz: int
    pcie: tuple[int, int]  # (generation, width), the most the GPU and its slot allow
    nvlink_slots: int  # links NVML answers for (InvalidArgument past them); 0: NOT_SUPPORTED, a PCIe GPU
    switch: int  # the PCIe switch it hangs below
    cpu_affinity: str | None = None  # "0-19,40-59"; None: every CPU of the switch's socket
    accessible: bool = True  # False: NVML refuses its handle (NO_PERMISSION), as for another job's GPU
    mig: tuple[MigInstance, ...] = ()  # MIG mode on when not empty
    mig_capable: bool = False
    gpm: bool = False  # NVML GPM counters (Hopper and later)
    uuid: str = ""
    nvlink_version: int = 0  # NVLink generation (2: V100, 3: A100, 4: H100), as nvmlDeviceGetNvLinkVersion
    # the GPU's own NUMA node where its memory is one (Grace Hopper); None: NOT_SUPPORTED, as x86 drivers answer
    numa_node_id: int | None = None


@dataclass(frozen=True)
class Switch:
    socket: int
    root: int  # host bridge (PCIe root complex) number
    parent: int | None = None  # a switch above this one (PXB between their children)
    numa: int | None = None  # its NUMA node; None: the first of its socket's (NodeProfile.numa_of)


@dataclass(frozen=True)
class ForeignProcess:
    gpu: int
    pid: int
    used_mib: int | None  # None: NVML cannot say (usedGpuMemory is NOT_AVAILABLE)


@dataclass(frozen=True)
class NodeProfile:
    name: str
    description: str
    source: str
    driver_version: str
    nvml_version: str
    cuda_version: int
    lacks: frozenset[str]  # C functions this driver's NVML does not have
    unsupported_fields: frozenset[str]  # NVML_FI_* names answered NOT_SUPPORTED
    sockets: int
    cores_per_socket: int
    threads_per_core: int
    switches: tuple[Switch, ...]
    gpus: tuple[GpuSpec, ...]
    nics: tuple[tuple[str, int], ...]  # (name, switch)
    nvlink: str  # "none", "mesh" (GPU to GPU, pairs below) or "nvswitch" (every link ends at an NVSwitch)
    nvlink_pairs: dict[tuple[int, int], int] = field(default_factory=dict)  # both directions
    foreign_processes: tuple[ForeignProcess, ...] = ()
    counter_bits: int = 64  # PCIe/NVLink byte counters wrap at 2**bits
    numa_per_socket: int = 1  # AMD NPS4: 4 NUMA nodes per socket, numbered socket by socket
    # what NVML reports between host bridges of one NUMA node: NODE, or SYS as some platforms do
    between_host_bridges: str = "NODE"
    # a driver report's answers (``replay.load_report``): the node answers from them, not from the layout above
    recorded: Any = None

    def numa_of(self, switch: int) -> int:
        spec = self.switches[switch]
        return spec.numa if spec.numa is not None else spec.socket * self.numa_per_socket

    def numa_cpus(self, numa: int) -> list[int]:
        """A NUMA node's CPUs: an equal share of its socket's cores, then those cores' sibling threads."""
        cores = self.cores_per_socket // self.numa_per_socket
        total = self.sockets * self.cores_per_socket
        return [thread * total + numa * cores + core for thread in range(self.threads_per_core)
                for core in range(cores)]


def known_nodes() -> list[str]:
    try:
        return sorted(name[:-5] for name in os.listdir(NODES_DIR) if name.endswith(".toml"))
    except OSError:
        return []


def profile_path(choice: str) -> str:
    """The file of ``DDPTOP_FAKE_NVML=<choice>``: a shipped node's name or a path; ValueError otherwise."""
    if choice.endswith(".toml") or os.sep in choice:
        if not os.path.isfile(choice):
            raise ProfileError(f"DDPTOP_FAKE_NVML={choice!r}: no such profile file")
        return choice
    path = os.path.join(NODES_DIR, f"{choice}.toml")
    if not os.path.isfile(path):
        raise ProfileError(f"DDPTOP_FAKE_NVML={choice!r} is not a known fake node "
                           f"(known: {', '.join(known_nodes())}; or a path to a .toml profile)")
    return path


def load_profile(choice: str) -> NodeProfile:
    """The node ``DDPTOP_FAKE_NVML=<choice>`` names: a shipped profile, a profile file, or a driver report
    (``ddptop doctor --report``, a ``.json`` file) replayed; ProfileError in one line otherwise."""
    if choice.endswith(".json"):
        from ddptop.telemetry.fake.recorded import ReportInvalid, read_report  # a report's reader: only for one

        try:
            recorded = read_report(choice)
        except ReportInvalid as exc:
            raise ProfileError(str(exc)) from None
        return _report_profile(recorded, "report:" + os.path.basename(choice)[:-5])
    path = profile_path(choice)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path}: {exc}") from None
    try:
        return _profile(os.path.basename(path)[:-5], data)
    except InvalidEntry as exc:
        raise ProfileError(f"{path}: {exc}") from None


# The keys each table may hold: anything else is a typo (cpu_afinity) that would silently change nothing.
_TOP_KEYS = {"description", "source", "driver", "cpu", "pcie", "gpu", "gpus", "nics", "nvlink", "processes"}
_DRIVER_KEYS = {"version", "nvml_version", "cuda_version", "lacks", "unsupported_fields", "counter_bits"}
_CPU_KEYS = {"sockets", "cores_per_socket", "threads_per_core", "numa_per_socket"}
_PCIE_KEYS = {"switches", "between_host_bridges"}
_SWITCH_KEYS = {"socket", "root", "parent", "numa"}
_GPU_KEYS = {"name", "memory_mib", "power_limit_w", "sm_clock_max_mhz", "memory_clock_mhz", "pcie", "nvlink_slots",
             "nvlink_version", "switch", "cpu_affinity", "accessible", "mig", "mig_capable", "gpm", "uuid",
             "numa_node_id"}
_MIG_KEYS = {"profile", "memory_mib", "gpu_instance", "compute_instance"}
_NIC_KEYS = {"name", "switch"}
_NVLINK_KEYS = {"kind", "pairs"}
_PROCESS_KEYS = {"gpu", "pid", "used_mib"}


def _table(value: Any, place: str, allowed: set[str]) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidEntry(f"{place}: must be a table (got {value!r})")
    unknown = sorted(set(value) - allowed)
    if unknown:
        raise InvalidEntry(f"{place}.{unknown[0]}: unknown key (known: {', '.join(sorted(allowed))})")
    return value


def _tables(value: Any, place: str, allowed: set[str]) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise InvalidEntry(f"{place}: must be an array of tables (got {value!r})")
    return [_table(entry, f"{place}[{i}]", allowed) for i, entry in enumerate(value)]


def _need(table: dict[str, Any], key: str, place: str) -> Any:
    if key not in table:
        raise InvalidEntry(f"{place}: no {key}")
    return table[key]


def _int(value: Any, place: str, low: int | None = 0, high: int | None = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidEntry(f"{place}: must be an integer (got {value!r})")
    if (low is not None and value < low) or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise InvalidEntry(f"{place}: {value} is out of range ({bounds})")
    return value


def _bool(value: Any, place: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidEntry(f"{place}: must be true or false (got {value!r})")
    return value


def _text(value: Any, place: str) -> str:
    if not isinstance(value, str):
        raise InvalidEntry(f"{place}: must be a string (got {value!r})")
    return value


def _names(value: Any, place: str) -> frozenset[str]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InvalidEntry(f"{place}: must be a list of names (got {value!r})")
    return frozenset(value)


def _cpu_list(text: str, place: str) -> list[int]:
    """"0-19,40-59" -> [0, ..., 19, 40, ..., 59]; InvalidEntry naming ``place`` for anything else."""
    try:
        return parse_cpu_list(text, strict=True)
    except ValueError as exc:
        raise InvalidEntry(f"{place}: {exc}") from None


def _profile(name: str, data: dict[str, Any]) -> NodeProfile:
    _table(data, "profile", _TOP_KEYS)
    driver = _table(_need(data, "driver", "profile"), "driver", _DRIVER_KEYS)
    cpu = _table(_need(data, "cpu", "profile"), "cpu", _CPU_KEYS)
    pcie = _table(_need(data, "pcie", "profile"), "pcie", _PCIE_KEYS)
    sockets = _int(_need(cpu, "sockets", "cpu"), "cpu.sockets", 1)
    cores = _int(_need(cpu, "cores_per_socket", "cpu"), "cpu.cores_per_socket", 1)
    threads = _int(cpu.get("threads_per_core", 1), "cpu.threads_per_core", 1)
    cpu_count = sockets * cores * threads
    per_socket = _int(cpu.get("numa_per_socket", 1), "cpu.numa_per_socket", 1)
    if cores % per_socket:
        raise InvalidEntry(f"cpu.numa_per_socket: {per_socket} does not divide cores_per_socket {cores}")
    between = pcie.get("between_host_bridges", "NODE")
    if between not in ("NODE", "SYS"):
        raise InvalidEntry(f"pcie.between_host_bridges: must be NODE or SYS (got {between!r})")
    switch_entries = _tables(_need(pcie, "switches", "pcie"), "pcie.switches", _SWITCH_KEYS)
    switches: list[Switch] = []
    for index, entry in enumerate(switch_entries):
        place = f"pcie.switches[{index}]"
        parent = entry.get("parent")
        if parent is not None:
            _int(parent, f"{place}.parent")
            if not parent < len(switch_entries):
                raise InvalidEntry(f"{place}.parent: {parent} names no switch (there are {len(switch_entries)})")
            if parent >= index:  # listed above its children, so a tree can never loop
                raise InvalidEntry(f"{place}.parent: {parent} must be a switch listed before this one")
        socket = _int(_need(entry, "socket", place), f"{place}.socket", 0, sockets - 1)
        numa = entry.get("numa")
        if numa is not None:
            first = socket * per_socket
            _int(numa, f"{place}.numa", first, first + per_socket - 1)  # one of its own socket's nodes
        made = Switch(socket, _int(_need(entry, "root", place), f"{place}.root"), parent, numa)
        if parent is not None and made.root != switches[parent].root:
            raise InvalidEntry(f"{place}: below switch {parent} but on another root")
        same_root = next((s for s in switches if s.root == made.root), None)
        if same_root is not None and (same_root.socket, same_root.numa) != (made.socket, made.numa):
            raise InvalidEntry(f"{place}: root {made.root} is on another socket or NUMA node in an earlier switch")
        switches.append(made)
    defaults = _table(data.get("gpu", {}), "gpu", _GPU_KEYS)
    gpus = []
    for index, entry in enumerate(_tables(_need(data, "gpus", "profile"), "gpus", _GPU_KEYS)):
        place = f"gpus[{index}]"
        spec = {**defaults, **entry}

        def need(key: str) -> Any:
            if key not in spec:
                raise InvalidEntry(f"{place}: no {key} (nor a default in [gpu])")
            return spec[key]

        def at(key: str) -> str:  # where a value was written: this GPU's table or the [gpu] defaults
            return f"{place}.{key}" if key in entry else f"gpu.{key}"

        mig = tuple(MigInstance(_text(_need(m, "profile", f"{place}.mig[{i}]"), f"{place}.mig[{i}].profile"),
                                _int(_need(m, "memory_mib", f"{place}.mig[{i}]"), f"{place}.mig[{i}].memory_mib", 1),
                                _int(_need(m, "gpu_instance", f"{place}.mig[{i}]"), f"{place}.mig[{i}].gpu_instance"),
                                _int(m.get("compute_instance", 0), f"{place}.mig[{i}].compute_instance"))
                    for i, m in enumerate(_tables(spec.get("mig", []), f"{place}.mig", _MIG_KEYS)))
        link = need("pcie")
        if not (isinstance(link, list) and len(link) == 2):
            raise InvalidEntry(f"{at('pcie')}: must be [generation, width] (got {link!r})")
        switch = _int(need("switch"), at("switch"))
        if not switch < len(switches):
            raise InvalidEntry(f"{at('switch')} {switch} names no switch (there are {len(switches)})")
        affinity = spec.get("cpu_affinity")
        if affinity is not None:
            outside = [c for c in _cpu_list(_text(affinity, at("cpu_affinity")), at("cpu_affinity"))
                       if c >= cpu_count]
            if outside:
                raise InvalidEntry(f"{at('cpu_affinity')}: CPU {outside[0]} is not one of the {cpu_count} CPUs of [cpu]")
        gpu = GpuSpec(
            name=_text(need("name"), at("name")), memory_mib=_int(need("memory_mib"), at("memory_mib"), 1),
            power_limit_w=_int(need("power_limit_w"), at("power_limit_w"), 1),
            sm_clock_max_mhz=_int(need("sm_clock_max_mhz"), at("sm_clock_max_mhz"), 1),
            memory_clock_mhz=_int(need("memory_clock_mhz"), at("memory_clock_mhz"), 1),
            pcie=(_int(link[0], at("pcie") + "[0]", 1, 6), _int(link[1], at("pcie") + "[1]", 1, 32)),
            nvlink_slots=_int(spec.get("nvlink_slots", 0), at("nvlink_slots"), 0, 18),
            nvlink_version=_int(spec.get("nvlink_version", 0), at("nvlink_version"), 0, 5),
            switch=switch, cpu_affinity=affinity,
            accessible=_bool(spec.get("accessible", True), at("accessible")), mig=mig,
            mig_capable=_bool(spec.get("mig_capable", bool(mig)), at("mig_capable")),
            gpm=_bool(spec.get("gpm", False), at("gpm")),
            numa_node_id=None if spec.get("numa_node_id") is None else _int(spec["numa_node_id"], at("numa_node_id")),
            uuid=_text(spec.get("uuid") or f"GPU-fa4e{index:04x}-0000-4000-8000-{zlib.crc32(name.encode()):012x}",
                       at("uuid")))
        gpus.append(gpu)
    links = _table(data.get("nvlink", {}), "nvlink", _NVLINK_KEYS)
    kind = links.get("kind", "none")
    if kind not in ("none", "mesh", "nvswitch"):
        raise InvalidEntry(f"nvlink.kind: must be none, mesh or nvswitch (got {kind!r})")
    pairs: dict[tuple[int, int], int] = {}
    listed = links.get("pairs", [])
    if not isinstance(listed, list):
        raise InvalidEntry(f"nvlink.pairs: must be a list of [GPU, GPU, links] (got {listed!r})")
    for i, pair in enumerate(listed):
        place = f"nvlink.pairs[{i}]"
        if not (isinstance(pair, list) and len(pair) == 3):
            raise InvalidEntry(f"{place}: must be [GPU, GPU, links] (got {pair!r})")
        a, b = (_int(pair[k], f"{place}[{k}]", 0, len(gpus) - 1) for k in (0, 1))
        if a == b or (a, b) in pairs:
            raise InvalidEntry(f"{place}: {'a GPU linked to itself' if a == b else f'GPUs {a} and {b} listed twice'}")
        pairs[(a, b)] = pairs[(b, a)] = _int(pair[2], f"{place}[2]", 1)
    for index, gpu in enumerate(gpus):
        wired = sum(count for (a, _), count in pairs.items() if a == index)
        if wired > gpu.nvlink_slots:
            raise InvalidEntry(f"nvlink.pairs: GPU {index} has {wired} NVLinks, more than its {gpu.nvlink_slots} "
                           "nvlink_slots")
    nics = []
    nic_entries = _tables(data.get("nics", []), "nics", _NIC_KEYS)
    for i, entry in enumerate(nic_entries):
        switch = _int(_need(entry, "switch", f"nics[{i}]"), f"nics[{i}].switch")
        if not switch < len(switches):
            raise InvalidEntry(f"nics[{i}].switch {switch} names no switch (there are {len(switches)})")
        nics.append((_text(_need(entry, "name", f"nics[{i}]"), f"nics[{i}].name"), switch))
    _check_buses(switches, [gpu.switch for gpu in gpus] + [switch for _, switch in nics])
    processes = []
    for i, entry in enumerate(_tables(data.get("processes", []), "processes", _PROCESS_KEYS)):
        place = f"processes[{i}]"
        used = entry.get("used_mib")
        processes.append(ForeignProcess(_int(_need(entry, "gpu", place), f"{place}.gpu", 0, len(gpus) - 1),
                                        _int(_need(entry, "pid", place), f"{place}.pid", 1),
                                        None if used is None else _int(used, f"{place}.used_mib")))
    return NodeProfile(
        name=name, description=_text(data.get("description", ""), "description"),
        source=_text(data.get("source", ""), "source"),
        driver_version=_text(_need(driver, "version", "driver"), "driver.version"),
        nvml_version=_text(_need(driver, "nvml_version", "driver"), "driver.nvml_version"),
        cuda_version=_int(_need(driver, "cuda_version", "driver"), "driver.cuda_version"),
        lacks=_names(driver.get("lacks", []), "driver.lacks"),
        unsupported_fields=_known_fields(driver.get("unsupported_fields", [])),
        sockets=sockets, cores_per_socket=cores, threads_per_core=threads, switches=tuple(switches),
        gpus=tuple(gpus), nics=tuple(nics), nvlink=kind, nvlink_pairs=pairs, foreign_processes=tuple(processes),
        counter_bits=_int(driver.get("counter_bits", 64), "driver.counter_bits", 8, 64), numa_per_socket=per_socket,
        between_host_bridges=between,
    )


def _check_buses(switches: list[Switch], endpoint_switches: list[int]) -> None:
    """A host bridge's tree lives in one PCI domain of 256 buses: its own, two per switch (upstream port
    and internal bus) and one per device below a switch port."""
    needed: dict[int, int] = {}
    for index, switch in enumerate(switches):
        needed[switch.root] = needed.get(switch.root, 1) + 2 + endpoint_switches.count(index)
    for root, buses in needed.items():
        if buses > 256:
            raise InvalidEntry(f"pcie.switches: root {root} needs {buses} PCI buses, more than a domain's 256")


def _known_fields(value: Any) -> frozenset[str]:
    import pynvml

    names = _names(value, "driver.unsupported_fields")
    unknown = sorted(n for n in names if not n.startswith("NVML_FI_") or not hasattr(pynvml, n))
    if unknown:
        raise InvalidEntry(f"driver.unsupported_fields: {unknown[0]} is no NVML field")
    return names


def _report_profile(recorded: "Recorded", name: str) -> NodeProfile:
    """A node profile of a driver report's machine; its ``recorded`` answers are what ``replay`` gives back."""
    import pynvml

    from ddptop.telemetry.fake.recorded import MIB, Refused, answered_bytes, answered_id, mig_profile, plain_name

    lacks: set[str] = set()
    unsupported: set[str] = set()
    specs = []
    processes = [ForeignProcess(index, pid, None if used is None else round(used / MIB))
                 for index, gpu in enumerate(recorded.gpus) for pid, used in gpu.answers.get("processes", ())]
    for index, gpu in enumerate(recorded.gpus):
        answers = gpu.answers
        for key, answer in answers.items():
            if key.startswith("lacks:") and isinstance(answer, Refused) and answer.code == \
                    pynvml.NVML_ERROR_FUNCTION_NOT_FOUND:
                lacks.add(key[len("lacks:"):])
        unsupported.update(answers.get("unsupported_fields", ()))

        def number(key: str, default: int) -> int:
            value = answers.get(key)
            return value if isinstance(value, int) and value > 0 else default

        mode = answers.get("mig_mode")
        enabled = isinstance(mode, list) and mode[0] == pynvml.NVML_DEVICE_MIG_ENABLE
        mig = tuple(MigInstance(mig_profile(entry.get("name")), max(1, answered_bytes(entry.get("memory_total")) // MIB),
                                answered_id(entry.get("gpu_instance_id")), answered_id(entry.get("compute_instance_id")))
                    for slot, entry in sorted(gpu.mig.items()) if not isinstance(entry["handle"], Refused)) \
            if enabled else ()
        links = [link for link in gpu.nvlinks if not isinstance(link["state"], Refused)]
        specs.append(GpuSpec(
            name=plain_name(answers.get("name")), memory_mib=max(1, answered_bytes(answers.get("memory_total")) // MIB),
            power_limit_w=max(1, number("power_limit_mw", 1000) // 1000),
            sm_clock_max_mhz=number("max_clock_sm", 1), memory_clock_mhz=number("max_clock_mem", 1),
            pcie=(number("pcie_generation", 1), number("pcie_width", 1)), nvlink_slots=min(18, len(links)),
            switch=0, accessible=not (isinstance(gpu.handle, Refused)
                                      and gpu.handle.code == pynvml.NVML_ERROR_NO_PERMISSION),
            mig=mig, mig_capable=not isinstance(mode, Refused) and mode is not None,
            gpm=answers.get("gpm") == 1, uuid=uuid if isinstance(uuid := answers.get("uuid"), str) else "",
            numa_node_id=answers.get("numa_node_id") if isinstance(answers.get("numa_node_id"), int) else None))
    return NodeProfile(
        name=name, description=f"the machine of the driver report {recorded.source}",
        source=f"ddptop doctor --report, {recorded.created}", driver_version=recorded.driver_version,
        nvml_version=recorded.nvml_version, cuda_version=recorded.cuda_version,
        lacks=frozenset(lacks), unsupported_fields=frozenset(unsupported), sockets=1, cores_per_socket=1,
        threads_per_core=1, switches=(Switch(0, 0),), gpus=tuple(specs), nics=tuple((n[0], 0) for n in recorded.nics),
        nvlink="none", foreign_processes=tuple(processes), recorded=recorded)


def with_changes(profile: NodeProfile, **changes: Any) -> NodeProfile:
    return replace(profile, **changes)
