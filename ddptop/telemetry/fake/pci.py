"""Where a simulated node's PCI devices are: the bus numbers its PCIe tree gets, as firmware numbers them, bus
ids as NVML and sysfs spell them, and the sysfs entries of its devices, which the topology reader walks as it
walks ``/sys``."""

from __future__ import annotations

import os
import tempfile

from ddptop.telemetry.fake.nodes import NodeProfile

NVSWITCHES = 4  # each GPU's links spread over this many NVSwitches, each a PCI device of its own


def new_sysfs(prefix: str) -> str:
    """An empty /sys of a simulated node, in a new temporary folder: its PCI devices and RDMA devices."""
    root = tempfile.mkdtemp(prefix=prefix)
    os.makedirs(os.path.join(root, "bus", "pci", "devices"))
    os.makedirs(os.path.join(root, "class", "infiniband"))
    return root


def add_pci_device(root: str, path: list[str], numa: int, nic: str | None = None) -> None:
    """A PCI device at ``path`` (from devices/, its own address last) with its numa_node file and its
    bus/pci/devices link, and for a NIC its class/infiniband entry: the parts of /sys the topology reader looks
    at. A device already there (two names at one address) is kept."""
    device = os.path.join(root, "devices", *path)
    os.makedirs(device, exist_ok=True)
    with open(os.path.join(device, "numa_node"), "w", encoding="ascii") as handle:
        handle.write(f"{numa}\n")
    link = os.path.join(root, "bus", "pci", "devices", path[-1])
    if not os.path.lexists(link):
        os.symlink(device, link)
    if nic is not None:
        entry = os.path.join(device, "infiniband", nic)
        os.makedirs(entry, exist_ok=True)
        os.symlink("../..", os.path.join(entry, "device"))
        os.symlink(entry, os.path.join(root, "class", "infiniband", nic))



class PciLayout:
    """Bus numbers for a profile's PCIe tree, given as firmware does: depth first, one bus per bridge's
    secondary side. Each host bridge's tree stays in one PCI domain (256 buses); a tree that does not fit
    in what is left of a domain starts the next one, so any tree the profile loader accepts fits."""

    def __init__(self, profile: NodeProfile) -> None:
        self.profile = profile
        self.endpoints: dict[tuple[str, str], tuple[int, str, list[str]]] = {}  # -> (switch, bdf, sysfs path)
        self._domain, self._next_bus = 0, 0
        roots = sorted({s.root for s in profile.switches})
        for root in roots:
            top = [i for i, s in enumerate(profile.switches) if s.root == root and s.parent is None]
            needed = 1 + sum(2 + len(self._below(i)) for i, s in enumerate(profile.switches) if s.root == root)
            if self._next_bus + needed > 256:
                self._domain, self._next_bus = self._domain + 1, 0
            host_bus = self._bus()
            host = [f"pci{self._domain:04x}:{host_bus:02x}"]
            for port, switch in enumerate(top):
                root_port = self._bdf(host_bus, 1 + port // 8, port % 8)  # root ports 01.0, 01.1, ...
                self._switch(switch, host + [root_port])
        if self._next_bus + NVSWITCHES > 256:
            self._domain, self._next_bus = self._domain + 1, 0
        self.nvswitches = [self._bdf(self._bus(), 0, 0) for _ in range(NVSWITCHES)]

    def _bus(self) -> int:
        self._next_bus += 1
        return self._next_bus - 1

    def _bdf(self, bus: int, device: int, function: int = 0) -> str:
        return f"{self._domain:04x}:{bus:02x}:{device:02x}.{function}"

    def _below(self, switch: int) -> list[tuple[str, str]]:
        """(kind, name) of the devices below a switch, NICs first: bus order."""
        nics = [("nic", name) for name, s in self.profile.nics if s == switch]
        gpus = [("gpu", str(i)) for i, gpu in enumerate(self.profile.gpus) if gpu.switch == switch]
        return nics + gpus

    def _switch(self, switch: int, above: list[str]) -> None:
        upstream = self._bdf(self._bus(), 0)
        internal = self._bus()
        children = [i for i, s in enumerate(self.profile.switches) if s.parent == switch]
        ports = [(kind, name) for kind, name in self._below(switch)] + [("switch", str(c)) for c in children]
        for position, (kind, name) in enumerate(ports):
            downstream = self._bdf(internal, position % 32, position // 32)
            if kind == "switch":
                self._switch(int(name), above + [upstream, downstream])
            else:
                bdf = self._bdf(self._bus(), 0)
                self.endpoints[(kind, name)] = (switch, bdf, above + [upstream, downstream, bdf])



def bus_key(bus_id: str) -> tuple[int, int, int, int] | None:
    """(domain, bus, device, function) of a bus id as NVML or sysfs spells it."""
    try:
        domain, bus, devfn = bus_id.strip().split(":")
        device, _, function = devfn.partition(".")
        return int(domain, 16), int(bus, 16), int(device, 16), int(function or "0", 16)
    except ValueError:
        return None


def nvml_bus_id(bdf: str) -> str:
    """sysfs's 0000:06:00.0 as NVML spells it: 00000000:06:00.0."""
    domain, rest = bdf.split(":", 1)
    return f"{int(domain, 16):08X}:{rest.upper()}"
