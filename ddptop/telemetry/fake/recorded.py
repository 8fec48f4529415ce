"""A driver report (``ddptop doctor --report FILE``) read back: the driver's answers it holds, checked.

:func:`read_report` turns the file into a :class:`Recorded`: per GPU, each NVML answer as its value or
:class:`Refused` (the error code the driver returned), each NVLink's answers, the MIG instances and the
sysfs place; the common ancestor of each pair; the driver's word on NVLink far ends that are no listed GPU;
the NICs and their PCI paths. ``nodes.load_profile`` makes a node profile of it and ``replay.ReplayNvml``
answers from it. A file that is not such a report, or a damaged one, is :class:`ReportInvalid` in one line
naming the file and the place.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pynvml

from ddptop.protocol.json_file import JsonFileError, read_json_file
from ddptop.telemetry.fake.invalid import InvalidEntry

REPORT_SCHEMA = "ddptop-driver-report/1"
MIB = 1 << 20
P2P_INDEXES = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3, "pci": 4}  # NVML_P2P_CAPS_INDEX_*
FAKE_SUFFIX = " (FAKE)"  # what a simulated node adds to names; a report of one is replayed without it


class ReportInvalid(ValueError):
    """A file that cannot be replayed; the message (one line) names the file and the place."""


@dataclass(frozen=True)
class Refused:
    """An NVML error the driver answered, replayed as that return code."""

    code: int


@dataclass
class RecordedGpu:
    handle: Refused | None  # None: the handle opened
    answers: dict[str, Any] = field(default_factory=dict)  # name -> value or Refused
    nvlinks: list[dict[str, Any]] = field(default_factory=list)  # per link: state, version, remote_bus, remote_type
    mig: dict[int, dict[str, Any]] = field(default_factory=dict)  # slot -> handle, name, uuid, ids, memory
    sysfs_path: list[str] | None = None
    sysfs_numa: int | None = None
    bdf: str | None = None


@dataclass
class Recorded:
    gpus: list[RecordedGpu]
    ancestors: dict[tuple[int, int], Any]  # value or Refused
    p2p: dict[tuple[int, int, int], Any]  # (GPU, GPU, NVML_P2P_CAPS_INDEX_*) -> status or Refused
    lookups: dict[str, Any]  # NVLink far end's bus id -> Refused or a GPU
    nics: list[tuple[str, str | None, list[str] | None, int | None]]  # name, bdf, sysfs path, numa node
    topo: str | None  # ddptop topo as the machine printed it
    source: str  # the report's path
    driver_version: str = "unknown"
    nvml_version: str = "unknown"
    cuda_version: int = 0
    created: str = "undated"


def _answer(data: Any, place: str, kind: type | tuple[type, ...] | None = None) -> Any:
    """``{"value": v}`` -> v (of ``kind``); ``{"error": "NVML_ERROR_..."}`` -> Refused."""
    if not isinstance(data, dict) or ("value" in data) == ("error" in data):
        raise InvalidEntry(f"{place}: must be {{\"value\": ...}} or {{\"error\": \"NVML_ERROR_...\"}} (got {data!r:.60})")
    if "error" in data:
        name = data["error"]
        if name in ("NVML_LIBRARY_MISMATCH", "NVML_BINDING_LACKS"):
            return Refused(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        code = getattr(pynvml, name, None) if isinstance(name, str) and name.startswith("NVML_ERROR_") else None
        if not isinstance(code, int):
            raise InvalidEntry(f"{place}.error: {name!r:.60} is no NVML error")
        return Refused(code)
    value = data["value"]
    if kind is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is int):
        raise InvalidEntry(f"{place}.value: {value!r:.60} is not what NVML answers there")
    return value


def _need(table: Any, key: str, place: str) -> Any:
    if not isinstance(table, dict):
        raise InvalidEntry(f"{place}: must be an object")
    if key not in table:
        raise InvalidEntry(f"{place}: no {key}")
    return table[key]


def _words(value: Any, place: str) -> Any:
    if isinstance(value, Refused):
        return value
    if not isinstance(value, list) or not all(isinstance(w, int) and w >= 0 for w in value):
        raise InvalidEntry(f"{place}: must be a list of 64-bit words")
    return [bit + 64 * i for i, word in enumerate(value) for bit in range(64) if word >> bit & 1]


def _int_or_refused(data: Any, place: str) -> Any:
    return _answer(data, place, int)


def _pci_answer(data: Any, place: str) -> Any:
    value = _answer(data, place, dict)
    if isinstance(value, Refused):
        return value
    bus_id = _need(value, "bus_id", f"{place}.value")
    if not isinstance(bus_id, str) or len(bus_id.split(":")) != 3:
        raise InvalidEntry(f"{place}.value.bus_id: {bus_id!r:.60} is not a PCI bus id")
    return bus_id


def _memory(data: Any, place: str) -> Any:
    value = _answer(data, place, dict)
    if isinstance(value, Refused):
        return value
    total = _need(value, "total", f"{place}.value")
    if not isinstance(total, int) or total <= 0:
        raise InvalidEntry(f"{place}.value.total: must be a positive number of bytes")
    return total


def _path(value: Any, place: str) -> list[str] | None:
    if value is None:
        return None
    if (not isinstance(value, list) or not value or not all(isinstance(p, str) and p and "/" not in p
                                                              and p not in (".", "..") for p in value)):
        raise InvalidEntry(f"{place}: must be the sysfs path's parts (got {value!r:.60})")
    return list(value)


def _numa(value: Any, place: str) -> int | None:
    if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
        raise InvalidEntry(f"{place}: must be a NUMA node number or null")
    return value


def _process(entry: Any, place: str) -> tuple[int, int | None]:
    pid, used = _need(entry, "pid", place), _need(entry, "used_gpu_memory", place)
    if not isinstance(pid, int) or pid < 1 or not (used is None or isinstance(used, int) and used >= 0):
        raise InvalidEntry(f"{place}: must be a pid and its GPU memory in bytes (or null)")
    return pid, used


def _gpu(data: Any, index: int) -> RecordedGpu:
    place = f"gpus[{index}]"
    if _need(data, "index", place) != index:
        raise InvalidEntry(f"{place}.index: must be {index} (GPUs in NVML order)")
    handle = _answer(_need(data, "handle", place), f"{place}.handle", str)
    gpu = RecordedGpu(handle if isinstance(handle, Refused) else None)
    if gpu.handle is not None:
        return gpu
    answers = gpu.answers
    for key in ("name", "uuid"):
        answers[key] = _answer(_need(data, key, place), f"{place}.{key}", str)
    answers["bus_id"] = _pci_answer(_need(data, "pci", place), f"{place}.pci")
    answers["memory_total"] = _memory(_need(data, "memory", place), f"{place}.memory")
    answers["power_limit_mw"] = _int_or_refused(_need(data, "power_limit_mw", place), f"{place}.power_limit_mw")
    clocks = _need(data, "max_clock_mhz", place)
    for key in ("sm", "mem"):
        answers[f"max_clock_{key}"] = _int_or_refused(_need(clocks, key, f"{place}.max_clock_mhz"),
                                                      f"{place}.max_clock_mhz.{key}")
    pcie = _need(data, "pcie_max", place)
    for key in ("generation", "width"):
        answers[f"pcie_{key}"] = _int_or_refused(_need(pcie, key, f"{place}.pcie_max"), f"{place}.pcie_max.{key}")
    answers["numa_node_id"] = _int_or_refused(_need(data, "numa_node_id", place), f"{place}.numa_node_id")
    answers["cpu_affinity"] = _words(_answer(_need(data, "cpu_affinity", place), f"{place}.cpu_affinity", list),
                                     f"{place}.cpu_affinity.value")
    memory_affinity = _need(data, "memory_affinity", place)
    for key in ("node", "socket"):
        where = f"{place}.memory_affinity.{key}"
        answers[f"memory_affinity_{key}"] = _words(_answer(_need(memory_affinity, key, where[:-len(key) - 1]),
                                                           where, list), where + ".value")
    links = _need(data, "nvlinks", place)
    if not isinstance(links, list):
        raise InvalidEntry(f"{place}.nvlinks: must be a list")
    for position, link in enumerate(links):
        where = f"{place}.nvlinks[{position}]"
        if _need(link, "link", where) != position:
            raise InvalidEntry(f"{where}.link: must be {position} (links in order)")
        entry = {"state": _int_or_refused(_need(link, "state", where), f"{where}.state")}
        if not isinstance(entry["state"], Refused):
            entry["version"] = _int_or_refused(_need(link, "version", where), f"{where}.version")
            entry["remote_bus"] = _pci_answer(_need(link, "remote_pci", where), f"{where}.remote_pci")
            entry["remote_type"] = _int_or_refused(_need(link, "remote_device_type", where),
                                                   f"{where}.remote_device_type")
        gpu.nvlinks.append(entry)
    mode = _answer(_need(data, "mig_mode", place), f"{place}.mig_mode", list)
    if not isinstance(mode, Refused) and (len(mode) != 2 or not all(isinstance(m, int) for m in mode)):
        raise InvalidEntry(f"{place}.mig_mode.value: must be [current, pending]")
    answers["mig_mode"] = mode
    answers["max_mig_devices"] = _int_or_refused(_need(data, "max_mig_devices", place), f"{place}.max_mig_devices")
    instances = data.get("mig", [])
    if not isinstance(instances, list):
        raise InvalidEntry(f"{place}.mig: must be a list")
    for position, instance in enumerate(instances):
        where = f"{place}.mig[{position}]"
        slot = _need(instance, "slot", where)
        if not isinstance(slot, int) or slot < 0 or slot in gpu.mig:
            raise InvalidEntry(f"{where}.slot: must be a slot number listed once")
        handle = _answer(_need(instance, "handle", where), f"{where}.handle", str)
        entry = {"handle": handle}
        if not isinstance(handle, Refused):
            for key in ("name", "uuid"):
                entry[key] = _answer(_need(instance, key, where), f"{where}.{key}", str)
            for key in ("gpu_instance_id", "compute_instance_id"):
                entry[key] = _int_or_refused(_need(instance, key, where), f"{where}.{key}")
            entry["memory_total"] = _memory(_need(instance, "memory", where), f"{where}.memory")
        gpu.mig[slot] = entry
    for key, function in (("processes", "nvmlDeviceGetComputeRunningProcesses_v3"),
                          ("memory_v2", "nvmlDeviceGetMemoryInfo_v2"),
                          ("clock_event_reasons", "nvmlDeviceGetCurrentClocksEventReasons")):
        if key in data:
            answers[f"lacks:{function}"] = _answer(data[key], f"{place}.{key}")
    for key in ("processes", "processes_v2"):  # other jobs' processes then: the first call that answered
        listed = _answer(data[key], f"{place}.{key}", list) if key in data else None
        if isinstance(listed, list):
            answers["processes"] = [_process(entry, f"{place}.{key}.value[{i}]") for i, entry in enumerate(listed)]
            break
    if "gpm_support" in data:
        answers["gpm"] = _answer(data["gpm_support"], f"{place}.gpm_support")
    fields = data.get("fields", {})
    if not isinstance(fields, dict):
        raise InvalidEntry(f"{place}.fields: must be an object")
    answers["unsupported_fields"] = [name for name, answer in fields.items() if hasattr(pynvml, str(name))
                                     and isinstance(_answer(answer, f"{place}.fields.{name}"), Refused)]
    sysfs = _need(data, "sysfs", place)
    gpu.sysfs_path = _path(_need(sysfs, "path", f"{place}.sysfs"), f"{place}.sysfs.path")
    gpu.sysfs_numa = _numa(sysfs.get("numa_node"), f"{place}.sysfs.numa_node")
    gpu.bdf = gpu.sysfs_path[-1] if gpu.sysfs_path else None
    return gpu


def _recorded(data: Any, path: str) -> Recorded:
    if not isinstance(data, dict) or data.get("schema") != REPORT_SCHEMA:
        schema = data.get("schema") if isinstance(data, dict) else None
        raise InvalidEntry(f"not a ddptop doctor report (schema {schema!r:.40}, expected {REPORT_SCHEMA!r})")
    nvml = _need(data, "nvml", "report")
    if not isinstance(nvml, dict):
        raise InvalidEntry("nvml: must be an object")
    if nvml.get("problem"):
        raise InvalidEntry(f"the report holds no NVML answers to replay (its machine said: {nvml['problem']:.120})")
    listed = _need(data, "gpus", "report")
    if not isinstance(listed, list):
        raise InvalidEntry("gpus: must be a list")
    gpus = [_gpu(entry, index) for index, entry in enumerate(listed)]
    ancestors: dict[tuple[int, int], Any] = {}
    p2p: dict[tuple[int, int, int], Any] = {}
    pairs = _need(data, "pairs", "report")
    if not isinstance(pairs, list):
        raise InvalidEntry("pairs: must be a list")
    for position, pair in enumerate(pairs):
        where = f"pairs[{position}]"
        ends = _need(pair, "gpus", where)
        if (not isinstance(ends, list) or len(ends) != 2 or not all(isinstance(e, int) for e in ends)
                or not all(0 <= e < len(gpus) for e in ends) or ends[0] == ends[1]):
            raise InvalidEntry(f"{where}.gpus: must be two GPUs of the report (got {ends!r:.40})")
        ancestors[(ends[0], ends[1])] = _int_or_refused(_need(pair, "common_ancestor", where),
                                                        f"{where}.common_ancestor")
        statuses = pair.get("p2p_status", {})
        if not isinstance(statuses, dict):
            raise InvalidEntry(f"{where}.p2p_status: must be an object")
        for name, answer in statuses.items():
            if name not in P2P_INDEXES:
                raise InvalidEntry(f"{where}.p2p_status.{name}: unknown (known: {', '.join(P2P_INDEXES)})")
            p2p[(ends[0], ends[1], P2P_INDEXES[name])] = _int_or_refused(answer, f"{where}.p2p_status.{name}")
    lookups = {}
    if not isinstance(data.get("bus_id_lookups", {}), dict):
        raise InvalidEntry("bus_id_lookups: must be an object")
    for bus_id, answer in (data.get("bus_id_lookups") or {}).items():
        lookups[bus_id] = _answer(answer, f"bus_id_lookups.{bus_id}")
    nics = []
    entries = data.get("nics", [])
    if not isinstance(entries, list):
        raise InvalidEntry("nics: must be a list")
    for position, nic in enumerate(entries):
        where = f"nics[{position}]"
        name = _need(nic, "name", where)
        if not isinstance(name, str) or not name or "/" in name or name in (".", ".."):
            raise InvalidEntry(f"{where}.name: must be a device name such as mlx5_0")
        nic_path = _path(nic.get("path"), f"{where}.path")
        nics.append((name, nic_path[-1] if nic_path else None, nic_path, _numa(nic.get("numa_node"),
                                                                              f"{where}.numa_node")))
    rendered = (data.get("ddptop") or {}).get("topo") if isinstance(data.get("ddptop"), dict) else None
    created = data.get("created")
    return Recorded(gpus, ancestors, p2p, lookups, nics, rendered if isinstance(rendered, str) else None, path,
                    _version(nvml, "driver_version", str, "unknown"), _version(nvml, "nvml_version", str, "unknown"),
                    _version(nvml, "cuda_driver_version", int, 0), created if isinstance(created, str) else "undated")


def _version(nvml: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    if key not in nvml:
        return default
    value = _answer(nvml[key], f"nvml.{key}", kind)
    return default if isinstance(value, Refused) else value


def plain_name(name: Any) -> str:
    """A name as the driver gave it, without what a simulated node adds."""
    return name.removesuffix(FAKE_SUFFIX) if isinstance(name, str) else "(name not answered)"


def answered_bytes(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else MIB


def answered_id(value: Any) -> int:
    return value if isinstance(value, int) and value >= 0 else 0


def mig_profile(name: Any) -> str:
    """"NVIDIA A100-SXM4-40GB MIG 1g.5gb" -> "1g.5gb"."""
    if not isinstance(name, str) or " MIG " not in name:
        return "?"
    return plain_name(name).rsplit(" MIG ", 1)[1].strip() or "?"


def read_report(path: str) -> Recorded:
    """The answers the report at ``path`` holds; ReportInvalid in one line for anything else."""
    try:
        data = read_json_file(path)
    except JsonFileError as exc:
        if exc.missing:
            raise ReportInvalid(f"DDPTOP_FAKE_NVML={path!r}: no such report file") from None
        if exc.damaged:
            raise ReportInvalid(f"{path}: not a ddptop doctor report (damaged JSON: {exc.reason[:120]})") from None
        raise ReportInvalid(f"{path}: cannot read the report: {exc.reason}") from None
    try:
        return _recorded(data, path)
    except InvalidEntry as exc:
        raise ReportInvalid(f"{path}: {exc}") from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as exc:  # a shape no check above foresaw
        raise ReportInvalid(f"{path}: a damaged report ({type(exc).__name__}: {str(exc)[:100]})") from None
