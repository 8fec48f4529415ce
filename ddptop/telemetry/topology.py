"""The node's GPU/NIC/CPU topology, as ``nvidia-smi topo -m`` prints it, read from NVML and sysfs.

Between two GPUs: NV# when they share # NVLinks (directly, or through NVSwitches), otherwise NVML's common
PCIe ancestor. NICs (RDMA devices in ``/sys/class/infiniband``) are invisible to NVML, so paths that
involve a NIC are classified from the PCIe tree in sysfs: a shared switch is PIX, more switches PXB, the
same host bridge PHB, another NUMA node SYS. Between host bridges of one NUMA node platforms differ (NVML
says NODE on most, SYS on some), so such a path takes NVML's word for a GPU on the NIC's host bridge; where
no GPU shares it, the cell is ddptop's own NODE, marked ``NODE*`` in the printed matrix (``inferred``).

As current nvidia-smi prints it, NICs are named NIC0, NIC1, ... in the matrix with a NIC legend below (the
JSON keeps their own names), and each GPU row ends with its CPU affinity, its NUMA affinity (the CPU side's
node) and its GPU NUMA ID (the GPU's own NUMA node where GPU memory is one, N/A on x86).
"""

from __future__ import annotations

import glob
import os
import re
from dataclasses import dataclass, field
from collections.abc import Mapping, Sequence
from typing import Any

from ddptop.protocol.kernel_files import cpu_ranges, parse_cpu_list, read_kernel_file
from ddptop.telemetry import nvml as nv

LEGEND = (
    ("X", "Self"),
    ("SYS", "Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)"),
    ("NODE", "Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node"),
    ("PHB", "Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)"),
    ("PXB", "Connection traversing multiple PCIe switches (without traversing the PCIe Host Bridge)"),
    ("PIX", "Connection traversing a single PCIe switch"),
    ("NV#", "Connection traversing a bonded set of # NVLinks"),
)
INFERRED_LEGEND = ("*", "ddptop's inference from the PCIe tree in sysfs: a NIC with no GPU on its host bridge "
                   "to take NVML's word from (some platforms report SYS where this says NODE)")
# Closest first: the order in which a pair of GPUs is "better connected".
LINK_RANK = {"X": 0, "NV": 1, "PIX": 2, "PXB": 3, "PHB": 4, "NODE": 5, "SYS": 6}

CPU_SET_WORDS = 16  # 64-bit words of the affinity mask: up to 1024 CPUs
NUMA_SET_WORDS = 1  # 64-bit words of the NUMA node mask: up to 64 nodes

# GB/s per link and direction, by NVLink generation: P100 20; V100, A100 and H100 25 (6, 12 and 18 links:
# 300, 600 and 900 GB/s both directions, NVIDIA's datasheets); Blackwell 50 (18 links, 1.8 TB/s)
NVLINK_GBS_PER_LINK = {1: 20.0, 2: 25.0, 3: 25.0, 4: 25.0, 5: 50.0}
# GB/s per lane and direction after line coding, by PCIe generation (8b/10b to gen 2, 128b/130b from gen 3)
PCIE_GBS_PER_LANE = {1: 0.25, 2: 0.5, 3: 0.985, 4: 1.969, 5: 3.938, 6: 7.877}


@dataclass
class PciDevice:
    name: str
    bdf: str | None  # sysfs form, 0000:06:00.0
    path: list[str] | None  # sysfs components from the root complex down to the device
    numa: int | None


@dataclass
class Topology:
    gpus: list[str] = field(default_factory=list)  # "GPU0", ...
    nics: list[str] = field(default_factory=list)  # "mlx5_0", ...
    matrix: dict[str, dict[str, str]] = field(default_factory=dict)
    cpu_affinity: dict[str, str] = field(default_factory=dict)
    numa_affinity: dict[str, str] = field(default_factory=dict)
    # the GPU's own NUMA node (nvmlDeviceGetNumaNodeId), "N/A" where NVML has none (x86); empty in topologies
    # saved before ddptop read it, which then print no GPU NUMA ID column
    gpu_numa_id: dict[str, str] = field(default_factory=dict)
    fake: bool = False
    problem: str | None = None  # why GPUs are missing
    notes: list[str] = field(default_factory=list)
    # per GPU: NVLink generation, active links, their peak, PCIe generation x width and its peak (links_of)
    links: dict[str, dict[str, Any]] = field(default_factory=dict)
    # this machine's CPUs (read_cpu_layout): sockets, cores, NUMA nodes and the CPUs ddptop may use
    cpu: dict[str, Any] = field(default_factory=dict)
    # [row, column] of NIC cells that are ddptop's inference from sysfs, not NVML's word (printed with a *)
    inferred: list[list[str]] = field(default_factory=list)

    @property
    def devices(self) -> list[str]:
        return self.gpus + self.nics

    def to_json(self) -> dict[str, Any]:
        return {
            "gpus": self.gpus,
            "nics": self.nics,
            "matrix": self.matrix,
            "cpu_affinity": self.cpu_affinity,
            "numa_affinity": self.numa_affinity,
            "gpu_numa_id": self.gpu_numa_id,
            "fake": self.fake,
            "problem": self.problem,
            "notes": self.notes,
            "links": self.links,
            "cpu": self.cpu,
            "inferred": self.inferred,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Topology":
        return cls(**{k: data.get(k, v) for k, v in cls().to_json().items()})

    def link(self, a: int, b: int) -> str:
        return self.matrix.get(f"GPU{a}", {}).get(f"GPU{b}", "N/A")


def sysfs_bdf(bus_id: str) -> str:
    """NVML's 00000000:06:00.0 as sysfs spells it: 0000:06:00.0."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) != 3:
        return bus_id.lower()
    domain, bus, devfn = parts
    try:
        return f"{int(domain, 16):04x}:{bus}:{devfn}"
    except ValueError:
        return bus_id.lower()


def _read_int(path: str) -> int | None:
    text = read_kernel_file(path)
    if text is None:
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return value if value >= 0 else None


def _pci_path(sysfs_root: str, device_dir: str) -> list[str] | None:
    real = os.path.realpath(device_dir)
    devices = os.path.realpath(os.path.join(sysfs_root, "devices"))
    if not real.startswith(devices + os.sep):
        return None
    parts = real[len(devices) + 1 :].split(os.sep)
    return parts if parts and parts[0].startswith("pci") else None


def pci_device(sysfs_root: str, name: str, bdf: str | None) -> PciDevice:
    if bdf is None:
        return PciDevice(name, None, None, None)
    device_dir = os.path.join(sysfs_root, "bus", "pci", "devices", bdf)
    return PciDevice(name, bdf, _pci_path(sysfs_root, device_dir), _read_int(os.path.join(device_dir, "numa_node")))


def list_nics(sysfs_root: str) -> list[PciDevice]:
    """RDMA devices (what NCCL uses between nodes), in name order."""
    base = os.path.join(sysfs_root, "class", "infiniband")
    try:
        names = os.listdir(base)
    except OSError:
        return []
    nics = []
    for name in sorted(names, key=_natural_key):
        device_dir = os.path.join(base, name, "device")
        path = _pci_path(sysfs_root, device_dir)
        bdf = path[-1] if path else None
        nics.append(PciDevice(name, bdf, path, _read_int(os.path.join(device_dir, "numa_node"))))
    return nics


def _natural_key(name: str) -> list[Any]:
    return [int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name)]


def pci_link(a: PciDevice, b: PciDevice) -> str:
    """PIX/PXB/PHB/NODE/SYS between two PCIe devices from their sysfs paths."""
    if a.path is None or b.path is None:
        return "N/A"
    if a.path == b.path:
        return "X"
    if a.path[0] != b.path[0]:  # different host bridges
        if a.numa is not None and b.numa is not None and a.numa != b.numa:
            return "SYS"
        return "NODE"
    bridges_a, bridges_b = a.path[1:-1], b.path[1:-1]
    common = 0
    for x, y in zip(bridges_a, bridges_b):
        if x != y:
            break
        common += 1
    if common == 0:
        return "PHB"
    # Below the deepest shared bridge each side crosses its own downstream port; one each = one switch.
    if len(bridges_a) - common <= 1 and len(bridges_b) - common <= 1:
        return "PIX"
    return "PXB"


def _set_bits(words: Any) -> list[int]:
    """The numbers an NVML bit mask holds (64-bit words, the lowest first): a CPU or NUMA node set."""
    return [w * 64 + bit for w, word in enumerate(list(words)) for bit in range(64) if int(word) >> bit & 1]


def _affinity(nvml: Any, handle: Any) -> str:
    words = nv.call(nvml, "nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS)
    if isinstance(words, nv.Unavailable):
        return "N/A"
    return cpu_ranges(_set_bits(words)) or "N/A"


def _numa_affinity(nvml: Any, handle: Any, device: PciDevice) -> str:
    """The NUMA node(s) whose CPUs and memory are nearest a GPU: its PCI device's numa_node in sysfs, else
    NVML's memory affinity. Not nvmlDeviceGetNumaNodeId: that is the GPU's own node where GPU memory is one
    (Grace Hopper), and NOT_SUPPORTED on x86."""
    if device.numa is not None:
        return str(device.numa)
    scope = getattr(nvml, "NVML_AFFINITY_SCOPE_NODE", 0)
    words = nv.call(nvml, "nvmlDeviceGetMemoryAffinity", handle, NUMA_SET_WORDS, scope)
    if isinstance(words, nv.Unavailable):
        return "N/A"
    return cpu_ranges(_set_bits(words)) or "N/A"


def _gpu_numa_id(nvml: Any, handle: Any) -> str:
    """The GPU's own NUMA node, as nvidia-smi's "GPU NUMA ID" column: NVML answers it where GPU memory is a NUMA
    node (Grace Hopper); x86 drivers answer NOT_SUPPORTED, printed N/A."""
    node = nv.call(nvml, "nvmlDeviceGetNumaNodeId", handle)
    if isinstance(node, nv.Unavailable) or int(node) < 0:
        return "N/A"
    return str(int(node))


def _nvml_ancestor(nvml: Any, first: Any, second: Any) -> str | None:
    level = nv.call(nvml, "nvmlDeviceGetTopologyCommonAncestor", first, second)
    if isinstance(level, nv.Unavailable):
        return None
    names = {
        nvml.NVML_TOPOLOGY_INTERNAL: "PIX",  # two GPUs on one board (K80): behind the board's own switch
        nvml.NVML_TOPOLOGY_SINGLE: "PIX",
        nvml.NVML_TOPOLOGY_MULTIPLE: "PXB",
        nvml.NVML_TOPOLOGY_HOSTBRIDGE: "PHB",
        nvml.NVML_TOPOLOGY_NODE: "NODE",
        nvml.NVML_TOPOLOGY_SYSTEM: "SYS",
    }
    return names.get(int(level))


def _nvlinks(nvml: Any, handles: list[Any], bus_ids: list[str], active: list[int],
             versions: list[int | None]) -> tuple[dict[tuple[int, int], int], list[int]]:
    """Links per GPU pair, and per GPU the links that end at an NVSwitch; fills each GPU's active link count
    and NVLink generation into ``active`` and ``versions``.

    ``handles`` holds None for a GPU NVML could not open; it is skipped, and indices stay NVML's. The far end
    of a link is named by NVML's remote device type: a link to a GPU this process cannot see (a container
    given GPUs 0 and 5 of a DGX-1) is neither a pair nor a switch link. Drivers without that query name the
    far end only by its bus id: a GPU NVML listed makes a pair; otherwise the driver is asked whether a GPU
    sits there at all (one this process may not open answers NO_PERMISSION, an NVSwitch NOT_FOUND), and only a
    far end that is no GPU, on a node where no link joins two listed GPUs, is taken for an NVSwitch.
    """
    by_bus = {bdf: i for i, bdf in enumerate(bus_ids) if bdf}
    pairs: dict[tuple[int, int], int] = {}
    to_switch = [0] * len(handles)
    untyped: list[tuple[int, str]] = []  # (GPU, far end's bus id) of links whose far end NVML did not type
    active[:] = [0] * len(handles)
    versions[:] = [None] * len(handles)
    max_links = int(getattr(nvml, "NVML_NVLINK_MAX_LINKS", 18))
    switch_type = getattr(nvml, "NVML_NVLINK_DEVICE_TYPE_SWITCH", 2)
    for i, handle in enumerate(handles):
        if handle is None:
            continue
        for link in range(max_links):
            state = nv.call(nvml, "nvmlDeviceGetNvLinkState", handle, link)
            if isinstance(state, nv.Unavailable):
                # NOT_SUPPORTED: a PCIe GPU, no link will answer; INVALID_ARGUMENT: past this GPU's last link
                if state.permanent:
                    break
                continue
            if int(state) != nvml.NVML_FEATURE_ENABLED:
                continue
            active[i] += 1
            if versions[i] is None:
                version = nv.call(nvml, "nvmlDeviceGetNvLinkVersion", handle, link)
                versions[i] = None if isinstance(version, nv.Unavailable) else int(version)
            remote = nv.call(nvml, "nvmlDeviceGetNvLinkRemotePciInfo", handle, link)
            if isinstance(remote, nv.Unavailable):
                continue
            remote_bus = nv.text(remote.busId)
            peer = by_bus.get(sysfs_bdf(remote_bus))
            kind = nv.call(nvml, "nvmlDeviceGetNvLinkRemoteDeviceType", handle, link)
            if isinstance(kind, nv.Unavailable):
                if peer is None:
                    untyped.append((i, remote_bus))
                    continue
                kind = None
            if int(kind if kind is not None else -1) == switch_type:
                to_switch[i] += 1
            elif peer is not None and peer != i:
                pairs[(i, peer)] = pairs.get((i, peer), 0) + 1
    mesh = bool(pairs)  # NVSwitch systems have no direct GPU-to-GPU link
    is_gpu: dict[str, bool | None] = {}
    for i, remote_bus in untyped:
        if remote_bus not in is_gpu:
            is_gpu[remote_bus] = _gpu_at(nvml, remote_bus)
        if not is_gpu[remote_bus] and not mesh:
            to_switch[i] += 1
    return pairs, to_switch


def _gpu_at(nvml: Any, bus_id: str) -> bool | None:
    """Whether the driver knows a GPU at ``bus_id``, openable by this process or not; None: it cannot say."""
    try:
        nvml.nvmlDeviceGetHandleByPciBusId(bus_id)
        return True
    except AttributeError:  # a binding without the call
        return None
    except Exception as exc:
        code = getattr(exc, "value", None)
        if code == getattr(nvml, "NVML_ERROR_NOT_FOUND", object()):
            return False
        gpu_there = ("NVML_ERROR_NO_PERMISSION", "NVML_ERROR_GPU_IS_LOST", "NVML_ERROR_INSUFFICIENT_POWER")
        return True if any(code == getattr(nvml, name, object()) for name in gpu_there) else None


def read_topology(nvml_module: Any | None = None, sysfs_root: str | None = None) -> Topology:
    topo = Topology()
    handles: list[Any] = []
    bus_ids: list[str] = []
    nvml = None
    try:
        nvml, topo.fake = nv.load(nvml_module)
        nv.init(nvml)
    except nv.NvmlUnavailable as exc:
        topo.problem = str(exc)
        nvml = None
    root = sysfs_root or (getattr(nvml, "DDPTOP_SYSFS_ROOT", None) if nvml is not None else None) or "/sys"
    try:
        if nvml is not None:
            count = nv.call(nvml, "nvmlDeviceGetCount")
            if isinstance(count, nv.Unavailable):
                topo.problem = f"NVML could not count GPUs: {count.reason}"
                count = 0
            for index in range(count):
                handle = nv.call(nvml, "nvmlDeviceGetHandleByIndex", index)
                pci = nv.call(nvml, "nvmlDeviceGetPciInfo", handle) if not isinstance(handle, nv.Unavailable) else handle
                if isinstance(pci, nv.Unavailable):
                    topo.notes.append(f"GPU{index}: {pci.reason}")
                    handles.append(None)
                    bus_ids.append("")
                    continue
                handles.append(handle)
                bus_ids.append(sysfs_bdf(nv.text(pci.busId)))
            pcie = _fill_gpus(topo, nvml, handles, bus_ids, root)
            if count == 0 and topo.problem is None:
                topo.problem = "NVML sees no GPU"
        _fill_nics(topo, root, bus_ids, pcie if nvml is not None else {})
    finally:
        if nvml is not None:
            nv.shutdown(nvml)
    topo.cpu = read_cpu_layout(sysfs_root or "/sys")  # the real machine's, also beside a simulated node
    return topo


def read_cpu_layout(sysfs_root: str = "/sys") -> dict[str, Any]:
    """Sockets, physical cores, logical CPUs and NUMA nodes (each with its CPUs) from sysfs, and the CPUs
    this process may run on (a SLURM job or a container often gets fewer than the machine has)."""
    cpu_dir = os.path.join(sysfs_root, "devices", "system", "cpu")
    logical = parse_cpu_list(read_kernel_file(os.path.join(cpu_dir, "online")) or "")
    packages: set[str] = set()
    cores: set[tuple[str, str]] = set()
    for cpu in logical:
        topology_dir = os.path.join(cpu_dir, f"cpu{cpu}", "topology")
        package, core = (read_kernel_file(os.path.join(topology_dir, name))
                         for name in ("physical_package_id", "core_id"))
        if package is not None:
            packages.add(package)
            if core is not None:
                cores.add((package, core))
    numa: dict[str, str] = {}
    for path in sorted(glob.glob(os.path.join(sysfs_root, "devices", "system", "node", "node[0-9]*")),
                       key=lambda p: int(os.path.basename(p)[4:])):
        listed = read_kernel_file(os.path.join(path, "cpulist"))
        if listed:
            numa[os.path.basename(path)[4:]] = listed
    try:
        allowed = cpu_ranges(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        allowed = None
    return {
        "logical": len(logical) or os.cpu_count(),
        "cores": len(cores) or None,
        "sockets": len(packages) or None,
        "numa": numa,
        "allowed": allowed,
    }


# threads per rank at each world size (the plan's threads_per_rank), or the (ranks, threads) splits of a
# thread sweep, a world size once per thread count
ThreadSplits = Mapping[int, int] | Sequence[tuple[int, int]]


def format_cpus(cpu: dict[str, Any], threads_per_rank: ThreadSplits | None = None, fake: bool = False) -> list[str]:
    """The CPU part of the Topology tab: what a CPU-only user needs, and what each GPU's affinity refers to."""
    if not cpu:
        return []
    sockets, cores = cpu.get("sockets"), cpu.get("cores")
    counts = [f"{sockets} socket(s)" if sockets else None, f"{cores} physical cores" if cores else None,
              f"{cpu.get('logical')} logical CPUs"]
    whose = "this machine (not of the simulated node above)" if fake else "this machine"
    lines = [f"CPUs of {whose}: " + ", ".join(c for c in counts if c)]
    for node, cpus in (cpu.get("numa") or {}).items():
        lines.append(f"  NUMA node {node}: CPUs {cpus}")
    if cpu.get("allowed"):
        lines.append(f"  ddptop and its ranks may run on CPUs {cpu['allowed']} (this process's affinity: a "
                     "SLURM job or a container may allow fewer than the machine has)")
    if threads_per_rank:
        pairs = sorted(threads_per_rank.items() if isinstance(threads_per_rank, Mapping) else threads_per_rank)
        per = ", ".join(f"N={n}: {t}" for n, t in pairs)
        lines.append("  Unless --no-bind-cores, each CPU rank runs on CPUs of its own among those, each GPU rank on "
                     "its GPU's NUMA node (each rank's hello says which), with this many threads (OMP_NUM_THREADS) "
                     f"per rank: {per}")
    return lines


def _link_peaks(nvml: Any, handle: Any, active: int, version: int | None) -> dict[str, Any]:
    """One GPU's links and their peaks, GB/s in one direction (what a ring's bus bandwidth is measured
    against): every active NVLink at its generation's rate, and PCIe at the most the GPU and slot allow."""
    found: dict[str, Any] = {"nvlink_active": active, "nvlink_version": version}
    per_link = NVLINK_GBS_PER_LINK.get(version or 0)
    found["nvlink_gbs"] = active * per_link if active and per_link else None
    for key, function in (("pcie_gen_max", "nvmlDeviceGetMaxPcieLinkGeneration"),
                          ("pcie_width_max", "nvmlDeviceGetMaxPcieLinkWidth")):
        value = nv.call(nvml, function, handle)
        found[key] = None if isinstance(value, nv.Unavailable) else int(value)
    lane = PCIE_GBS_PER_LANE.get(found["pcie_gen_max"] or 0)
    found["pcie_gbs"] = lane * found["pcie_width_max"] if lane and found["pcie_width_max"] else None
    return found


def _fill_gpus(topo: Topology, nvml: Any, handles: list[Any], bus_ids: list[str],
               root: str) -> dict[tuple[int, int], str]:
    """Fills the GPU rows; returns NVML's PCIe word for each pair of GPUs it could open (NVLinks aside)."""
    pcie: dict[tuple[int, int], str] = {}
    active: list[int] = []
    versions: list[int | None] = []
    links, switch_links = _nvlinks(nvml, handles, bus_ids, active, versions)
    devices = [pci_device(root, f"GPU{i}", bus_ids[i] or None) for i in range(len(handles))]
    topo.gpus = [f"GPU{i}" for i in range(len(handles))]
    for i, first in enumerate(handles):
        row = topo.matrix.setdefault(f"GPU{i}", {})
        for j, second in enumerate(handles):
            if i == j or first is None or second is None:
                row[f"GPU{j}"] = "X" if i == j else "N/A"
                continue
            pcie[(i, j)] = _nvml_ancestor(nvml, first, second) or pci_link(devices[i], devices[j])
            if links.get((i, j)):
                row[f"GPU{j}"] = f"NV{links[(i, j)]}"
            elif switch_links[i] and switch_links[j]:
                row[f"GPU{j}"] = f"NV{min(switch_links[i], switch_links[j])}"  # through NVSwitches
            else:
                row[f"GPU{j}"] = pcie[(i, j)]
        if first is None:
            topo.cpu_affinity[f"GPU{i}"] = topo.numa_affinity[f"GPU{i}"] = topo.gpu_numa_id[f"GPU{i}"] = "N/A"
            continue
        topo.cpu_affinity[f"GPU{i}"] = _affinity(nvml, first)
        topo.links[f"GPU{i}"] = _link_peaks(nvml, first, active[i], versions[i])
        topo.numa_affinity[f"GPU{i}"] = _numa_affinity(nvml, first, devices[i])
        topo.gpu_numa_id[f"GPU{i}"] = _gpu_numa_id(nvml, first)
    return pcie


def _fill_nics(topo: Topology, root: str, bus_ids: list[str], pcie: dict[tuple[int, int], str]) -> None:
    nics = list_nics(root)
    if not nics:
        return
    gpus = [pci_device(root, f"GPU{i}", bdf or None) for i, bdf in enumerate(bus_ids)]
    topo.nics = [nic.name for nic in nics]
    # per NIC, the closest GPU on its own host bridge: NVML's word for that GPU stands for the NIC
    partner: dict[str, int | None] = {}
    for nic in nics:
        near = [(LINK_RANK[cell], i) for i, gpu in enumerate(gpus)
                if (cell := pci_link(gpu, nic)) in ("PIX", "PXB", "PHB")]
        partner[nic.name] = min(near)[1] if near else None

    def across_bridges(a: PciDevice, b: PciDevice) -> bool:
        return a.path is not None and b.path is not None and a.path[0] != b.path[0]

    def cell_of(nic: PciDevice, other: PciDevice, other_gpu: int | None) -> str:
        cell = pci_link(nic, other)
        if not across_bridges(nic, other):
            return cell
        mine = partner[nic.name]
        theirs = other_gpu if other_gpu is not None else partner.get(other.name)
        if mine is not None and theirs is not None and (mine, theirs) in pcie:
            return pcie[(mine, theirs)]
        if cell == "NODE":  # NVML might say SYS on this platform; nothing to ask it about
            topo.inferred += [[nic.name, other.name], [other.name, nic.name]]
        return cell

    for nic in nics:
        row = topo.matrix.setdefault(nic.name, {})
        for i, gpu in enumerate(gpus):
            cell = cell_of(nic, gpu, i)
            row[gpu.name] = cell
            topo.matrix.setdefault(gpu.name, {})[nic.name] = cell
        for other in nics:
            if other is nic:
                row[other.name] = "X"
            elif other.name not in row:
                row[other.name] = topo.matrix.setdefault(other.name, {})[nic.name] = cell_of(nic, other, None)


def nic_labels(topo: Topology) -> dict[str, str]:
    """Each NIC's name in the printed matrix: NIC0, NIC1, ... in ``topo.nics`` order, as nvidia-smi names them."""
    return {name: f"NIC{i}" for i, name in enumerate(topo.nics)}


def format_matrix(topo: Topology, threads_per_rank: ThreadSplits | None = None) -> str:
    """The matrix and legends, in current nvidia-smi's layout (NICs as NIC0.. with a NIC legend, a GPU NUMA ID
    column), then the machine's CPUs (and, given the plan's ``threads_per_rank``, how the ranks use them)."""
    lines: list[str] = []
    if topo.fake:
        lines.append(f"{nv.FAKE_LABEL}: simulated node from {nv.FAKE_ENV}; not this machine's hardware\n")
    if topo.problem:
        lines.append(f"GPUs: none shown ({topo.problem})")
    names = topo.devices
    if not names:
        lines.append("No GPU or RDMA NIC found.")
        return _with_cpus(lines, topo, threads_per_rank)
    labels = {**{name: name for name in topo.gpus}, **nic_labels(topo)}
    width = max(8, max(len(labels[n]) for n in names) + 2)
    cpu_width = max([16] + [len(text) + 2 for text in topo.cpu_affinity.values()])
    header = " " * width + "".join(f"{labels[n]:<{width}}" for n in names)
    if topo.gpus:
        header += f"{'CPU Affinity':<{cpu_width}}" + ("NUMA Affinity   GPU NUMA ID" if topo.gpu_numa_id
                                                     else "NUMA Affinity")
    lines.append(header.rstrip())
    inferred = {(row, column) for row, column in topo.inferred}
    for row_name in names:
        marked = [topo.matrix.get(row_name, {}).get(col, "N/A") + ("*" if (row_name, col) in inferred else "")
                  for col in names]
        cells = "".join(f"{word:<{width}}" for word in marked)
        line = f"{labels[row_name]:<{width}}" + cells
        if row_name in topo.cpu_affinity:
            line += f"{topo.cpu_affinity[row_name]:<{cpu_width}}{topo.numa_affinity.get(row_name, 'N/A'):<16}"
            line += topo.gpu_numa_id.get(row_name, "N/A") if topo.gpu_numa_id else ""
        lines.append(line.rstrip())
    lines.append("")
    lines.append("Legend:")
    lines.append("")
    for key, words in LEGEND + ((INFERRED_LEGEND,) if inferred else ()):
        lines.append(f"  {key:<4}  = {words}")  # two spaces after every key: views align the sentences
    if topo.nics:
        lines += ["", "NIC Legend:", ""]
        lines += [f"  {label}: {name}" for name, label in nic_labels(topo).items()]
    for note in topo.notes:
        lines.append(f"Note: {note}")
    return _with_cpus(lines, topo, threads_per_rank)


def _with_cpus(lines: list[str], topo: Topology, threads_per_rank: ThreadSplits | None) -> str:
    """The tab's text: ``lines``, then the machine's CPUs after a blank line."""
    cpus = format_cpus(topo.cpu, threads_per_rank, topo.fake)
    return "\n".join(lines + ([""] + cpus if cpus else [])) + "\n"

