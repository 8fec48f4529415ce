"""Simulated GPU nodes as data: the schema of a node profile and its loader (``docs/fake-nodes.md``).

A profile is a TOML file: ``ddptop/telemetry/fake/profiles/<name>.toml`` for the shipped ones, chosen with
``DDPTOP_FAKE_NVML=<name>``, or any path (``DDPTOP_FAKE_NVML=path/to/node.toml``). It describes what NVML
and ``/sys`` would show on that machine: the driver (and which NVML functions it lacks), the CPU sockets,
the PCIe switches, the GPUs (model, memory, clocks, links, MIG instances, whether this process may open
them), the NICs, the NVLink wiring, and processes of other jobs. Nothing here runs a GPU.
"""

from __future__ import annotations

import os
import tomllib
import zlib
from dataclasses import dataclass, field, replace
from typing import Any

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


@dataclass(frozen=True)
class Switch:
    socket: int
    root: int  # host bridge (PCIe root complex) number
    parent: int | None = None  # a switch above this one (PXB between their children)


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

    def socket_cpus(self, socket: int) -> list[int]:
        cores = self.cores_per_socket
        total = self.sockets * cores
        return [thread * total + socket * cores + core for thread in range(self.threads_per_core)
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
    path = profile_path(choice)
    try:
        with open(path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise ProfileError(f"{path}: {exc}") from None
    try:
        return _profile(os.path.basename(path)[:-5], data)
    except (KeyError, TypeError, ValueError) as exc:
        raise ProfileError(f"{path}: {type(exc).__name__}: {exc}") from None


def _profile(name: str, data: dict[str, Any]) -> NodeProfile:
    driver, cpu, pcie = data["driver"], data["cpu"], data["pcie"]
    switches = tuple(Switch(int(s["socket"]), int(s["root"]), s.get("parent")) for s in pcie["switches"])
    defaults = data.get("gpu", {})
    gpus = []
    for index, entry in enumerate(data["gpus"]):
        spec = {**defaults, **entry}
        mig = tuple(MigInstance(m["profile"], int(m["memory_mib"]), int(m["gpu_instance"]),
                                int(m.get("compute_instance", 0))) for m in spec.get("mig", ()))
        gpu = GpuSpec(
            name=spec["name"], memory_mib=int(spec["memory_mib"]), power_limit_w=int(spec["power_limit_w"]),
            sm_clock_max_mhz=int(spec["sm_clock_max_mhz"]), memory_clock_mhz=int(spec["memory_clock_mhz"]),
            pcie=(int(spec["pcie"][0]), int(spec["pcie"][1])), nvlink_slots=int(spec.get("nvlink_slots", 0)),
            nvlink_version=int(spec.get("nvlink_version", 0)),
            switch=int(spec["switch"]), cpu_affinity=spec.get("cpu_affinity"),
            accessible=bool(spec.get("accessible", True)), mig=mig,
            mig_capable=bool(spec.get("mig_capable", bool(mig))), gpm=bool(spec.get("gpm", False)),
            uuid=spec.get("uuid") or f"GPU-fa4e{index:04x}-0000-4000-8000-{zlib.crc32(name.encode()):012x}")
        if not 0 <= gpu.switch < len(switches):
            raise ValueError(f"gpus[{index}].switch {gpu.switch} names no switch")
        gpus.append(gpu)
    links = data.get("nvlink", {})
    kind = links.get("kind", "none")
    if kind not in ("none", "mesh", "nvswitch"):
        raise ValueError(f"nvlink.kind must be none, mesh or nvswitch (got {kind!r})")
    pairs: dict[tuple[int, int], int] = {}
    for a, b, count in links.get("pairs", ()):
        pairs[(int(a), int(b))] = pairs[(int(b), int(a))] = int(count)
    return NodeProfile(
        name=name, description=data.get("description", ""), source=data.get("source", ""),
        driver_version=str(driver["version"]), nvml_version=str(driver["nvml_version"]),
        cuda_version=int(driver["cuda_version"]), lacks=frozenset(driver.get("lacks", ())),
        unsupported_fields=frozenset(driver.get("unsupported_fields", ())),
        sockets=int(cpu["sockets"]), cores_per_socket=int(cpu["cores_per_socket"]),
        threads_per_core=int(cpu.get("threads_per_core", 1)), switches=switches, gpus=tuple(gpus),
        nics=tuple((n["name"], int(n["switch"])) for n in data.get("nics", ())), nvlink=kind, nvlink_pairs=pairs,
        foreign_processes=tuple(ForeignProcess(int(p["gpu"]), int(p["pid"]), p.get("used_mib"))
                                for p in data.get("processes", ())),
        counter_bits=int(driver.get("counter_bits", 64)),
    )


def with_changes(profile: NodeProfile, **changes: Any) -> NodeProfile:
    return replace(profile, **changes)
