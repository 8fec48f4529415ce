"""``ddptop doctor --report FILE``: everything ddptop reads from the driver, in one JSON file a user can send.

The file holds NVML's raw answers behind ``ddptop gpus`` and ``ddptop topo`` (each GPU's identity, memory,
power limit, clocks, PCIe maxima, NUMA and CPU affinity, every NVLink's state and far end, MIG mode and
instances; the common PCIe ancestor and P2P status of every ordered pair of GPUs; what the driver says of an
NVLink's far end that is no listed GPU), the driver's and NVML's versions, the NICs ddptop found in sysfs with
their PCI paths and each GPU's, ``nvidia-smi topo -m`` as nvidia-smi printed it (or why there is none), and
ddptop's own ``ddptop topo`` at the time. Each NVML answer is ``{"value": ...}`` or ``{"error": "NVML_ERROR_..."}``
(``NVML_LIBRARY_MISMATCH``: the binding's versioned call is missing from this driver; ``NVML_BINDING_LACKS``:
the installed nvidia-ml-py has no such function).

The file replays as a simulated node: ``DDPTOP_FAKE_NVML=FILE ddptop topo`` (``ddptop.telemetry.fake.replay``)
prints the matrix recorded in it. The NVML calls are made through the same module every ddptop command uses
(``ddptop.telemetry.nvml.load``), so under ``DDPTOP_FAKE_NVML`` the report is the simulated node's.
"""

from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict
from typing import Any

import ddptop
from ddptop.doctor.commands import run_command
from ddptop.doctor.parsing import last_line
from ddptop.errors import DdptopError
from ddptop.protocol import storage
from ddptop.telemetry import nvml as nv
from ddptop.telemetry.fake.recorded import P2P_INDEXES, REPORT_SCHEMA
from ddptop.telemetry.gpu import COUNTERS, GpuSampler
from ddptop.telemetry.topology import (CPU_SET_WORDS, NUMA_SET_WORDS, format_matrix, list_nics, pci_device,
                                       read_topology, sysfs_bdf)


class ReportError(DdptopError):
    """The report cannot be written where --report says; one line for the user."""


def _error_names(nvml: Any) -> dict[int, str]:
    try:
        import pynvml

        names = [name for name in dir(pynvml) if name.startswith("NVML_ERROR_")]
    except ImportError:  # pragma: no cover - nvidia-ml-py is a dependency
        names = []
    found: dict[int, str] = {}
    for name in names:
        code = getattr(nvml, name, None)
        if isinstance(code, int):
            found.setdefault(code, name)
    return found


class _Asker:
    """NVML's answers as JSON: ``{"value": ...}`` or ``{"error": name}``, never an exception."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.codes = _error_names(nvml)

    def raw(self, function: str, *args: Any) -> tuple[Any, dict[str, Any] | None]:
        """(the value, None) or (None, the error answer)."""
        try:
            return getattr(self.nvml, function)(*args), None
        except AttributeError:
            return None, {"error": "NVML_BINDING_LACKS"}
        except Exception as exc:
            mismatch = getattr(self.nvml, "NVMLLibraryMismatchError", None)
            if isinstance(mismatch, type) and isinstance(exc, mismatch):
                return None, {"error": "NVML_LIBRARY_MISMATCH"}
            code = getattr(exc, "value", None)
            if isinstance(code, int):
                return None, {"error": self.codes.get(code, f"NVML_ERROR_CODE_{code}")}
            return None, {"error": "NVML_ERROR_UNKNOWN", "text": f"{type(exc).__name__}: {exc}"[:200]}

    def ask(self, function: str, *args: Any, convert: Any = None) -> dict[str, Any]:
        value, error = self.raw(function, *args)
        if error is not None:
            return error
        return {"value": convert(value) if convert is not None else _plain(value)}


def _plain(value: Any) -> Any:
    if isinstance(value, bytes):
        return value.decode(errors="replace")
    if isinstance(value, (int, float, str, bool)) or value is None:
        return value
    try:
        return [_plain(v) for v in value]
    except TypeError:
        return str(value)


def _pci(info: Any) -> dict[str, Any]:
    return {"bus_id": nv.text(info.busId), "bus_id_legacy": nv.text(info.busIdLegacy), "domain": int(info.domain),
            "bus": int(info.bus), "device": int(info.device), "pci_device_id": int(info.pciDeviceId),
            "pci_subsystem_id": int(info.pciSubSystemId)}


def _memory(info: Any) -> dict[str, Any]:
    return {"total": int(info.total), "used": int(info.used), "free": int(info.free)}


def _processes(listed: Any) -> list[dict[str, Any]]:
    return [{"pid": int(p.pid), "used_gpu_memory": None if p.usedGpuMemory is None else int(p.usedGpuMemory)}
            for p in listed]


def _fields(asker: _Asker, handle: Any) -> dict[str, Any]:
    """Each counter ddptop reads as a field value: supported or the error NVML put in that field."""
    ids = [(name, getattr(asker.nvml, name, None)) for name, _scope, _unit in COUNTERS.values()]
    known = [(name, fid) for name, fid in ids if isinstance(fid, int)]
    values, error = asker.raw("nvmlDeviceGetFieldValues", handle, [fid for _, fid in known])
    if error is not None:
        return {name: error for name, _ in known}
    answers = {}
    for (name, _), value in zip(known, values):
        code = int(value.nvmlReturn)
        answers[name] = {"value": "supported"} if code == 0 else {"error": asker.codes.get(code, str(code))}
    return answers


def _nvlinks(asker: _Asker, handle: Any) -> list[dict[str, Any]]:
    """Every link NVML answers for, in order, up to and with the answer that ends the list (as ddptop asks)."""
    links = []
    for link in range(int(getattr(asker.nvml, "NVML_NVLINK_MAX_LINKS", 18))):
        try:
            state = asker.nvml.nvmlDeviceGetNvLinkState(handle, link)
        except Exception as exc:  # NOT_SUPPORTED (a PCIe GPU), INVALID_ARGUMENT (past the last link), ...
            links.append({"link": link, "state": asker.ask("nvmlDeviceGetNvLinkState", handle, link)})
            if nv.reason_of(asker.nvml, exc).permanent:
                break
            continue
        links.append({
            "link": link, "state": {"value": int(state)},
            "version": asker.ask("nvmlDeviceGetNvLinkVersion", handle, link, convert=int),
            "remote_pci": asker.ask("nvmlDeviceGetNvLinkRemotePciInfo", handle, link, convert=_pci),
            "remote_device_type": asker.ask("nvmlDeviceGetNvLinkRemoteDeviceType", handle, link, convert=int),
        })
    return links


def _mig(asker: _Asker, handle: Any, entry: dict[str, Any]) -> None:
    entry["mig_mode"] = asker.ask("nvmlDeviceGetMigMode", handle, convert=lambda v: [int(x) for x in v])
    enabled = entry["mig_mode"].get("value", [0])[0] == getattr(asker.nvml, "NVML_DEVICE_MIG_ENABLE", 1)
    entry["max_mig_devices"] = asker.ask("nvmlDeviceGetMaxMigDeviceCount", handle, convert=int)
    entry["mig"] = []
    if not enabled:
        return
    for slot in range(int(entry["max_mig_devices"].get("value") or 0)):
        mig, error = asker.raw("nvmlDeviceGetMigDeviceHandleByIndex", handle, slot)
        if error is not None:
            entry["mig"].append({"slot": slot, "handle": error})
            continue
        entry["mig"].append({
            "slot": slot, "handle": {"value": "opened"},
            "name": asker.ask("nvmlDeviceGetName", mig), "uuid": asker.ask("nvmlDeviceGetUUID", mig),
            "gpu_instance_id": asker.ask("nvmlDeviceGetGpuInstanceId", mig, convert=int),
            "compute_instance_id": asker.ask("nvmlDeviceGetComputeInstanceId", mig, convert=int),
            "memory": asker.ask("nvmlDeviceGetMemoryInfo", mig, convert=_memory),
        })


def _gpu(asker: _Asker, index: int, root: str) -> tuple[dict[str, Any], Any]:
    nvml = asker.nvml
    handle, error = asker.raw("nvmlDeviceGetHandleByIndex", index)
    entry: dict[str, Any] = {"index": index, "handle": error or {"value": "opened"}}
    if error is not None:
        return entry, None
    entry["name"] = asker.ask("nvmlDeviceGetName", handle)
    entry["uuid"] = asker.ask("nvmlDeviceGetUUID", handle)
    entry["pci"] = asker.ask("nvmlDeviceGetPciInfo", handle, convert=_pci)
    entry["memory"] = asker.ask("nvmlDeviceGetMemoryInfo", handle, convert=_memory)
    entry["memory_v2"] = asker.ask("nvmlDeviceGetMemoryInfo", handle, getattr(nvml, "nvmlMemory_v2", 0x02000028),
                                   convert=lambda m: {**_memory(m), "reserved": int(m.reserved)})
    entry["power_limit_mw"] = asker.ask("nvmlDeviceGetEnforcedPowerLimit", handle, convert=int)
    entry["max_clock_mhz"] = {
        "sm": asker.ask("nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_SM", 1), convert=int),
        "mem": asker.ask("nvmlDeviceGetMaxClockInfo", handle, getattr(nvml, "NVML_CLOCK_MEM", 2), convert=int)}
    entry["pcie_max"] = {"generation": asker.ask("nvmlDeviceGetMaxPcieLinkGeneration", handle, convert=int),
                         "width": asker.ask("nvmlDeviceGetMaxPcieLinkWidth", handle, convert=int)}
    entry["pcie_current"] = {"generation": asker.ask("nvmlDeviceGetCurrPcieLinkGeneration", handle, convert=int),
                             "width": asker.ask("nvmlDeviceGetCurrPcieLinkWidth", handle, convert=int)}
    entry["numa_node_id"] = asker.ask("nvmlDeviceGetNumaNodeId", handle, convert=int)
    words = lambda value: [int(w) for w in value]  # noqa: E731 - 64-bit words of a bit mask
    entry["cpu_affinity"] = asker.ask("nvmlDeviceGetCpuAffinity", handle, CPU_SET_WORDS, convert=words)
    entry["memory_affinity"] = {
        scope: asker.ask("nvmlDeviceGetMemoryAffinity", handle, NUMA_SET_WORDS,
                         getattr(nvml, f"NVML_AFFINITY_SCOPE_{scope.upper()}", number), convert=words)
        for scope, number in (("node", 0), ("socket", 1))}
    entry["nvlinks"] = _nvlinks(asker, handle)
    _mig(asker, handle, entry)
    entry["gpm_support"] = asker.ask("nvmlGpmQueryDeviceSupport", handle, convert=lambda s: int(s.isSupportedDevice))
    entry["clock_event_reasons"] = asker.ask("nvmlDeviceGetCurrentClocksEventReasons", handle, convert=int)
    entry["processes"] = asker.ask("nvmlDeviceGetComputeRunningProcesses", handle, convert=_processes)
    entry["processes_v2"] = asker.ask("nvmlDeviceGetComputeRunningProcesses_v2", handle, convert=_processes)
    entry["fields"] = _fields(asker, handle)
    bdf = sysfs_bdf(entry["pci"]["value"]["bus_id"]) if "value" in entry["pci"] else None
    device = pci_device(root, f"GPU{index}", bdf)
    entry["sysfs"] = {"bdf": device.bdf, "path": device.path, "numa_node": device.numa}
    return entry, handle


def read_driver(nvml_module: Any | None = None, sysfs_root: str | None = None) -> dict[str, Any]:
    """NVML's raw answers and the PCI devices in sysfs: the report's ``nvml``, ``gpus``, ``pairs``,
    ``bus_id_lookups`` and ``nics``."""
    try:
        nvml, fake = nv.load(nvml_module)
        nv.init(nvml)
    except nv.NvmlUnavailable as exc:
        return {"nvml": {"problem": str(exc)}, "gpus": [], "pairs": [], "bus_id_lookups": {}, "nics": []}
    asker = _Asker(nvml)
    root = sysfs_root or getattr(nvml, "DDPTOP_SYSFS_ROOT", None) or "/sys"
    found: dict[str, Any] = {"nvml": {"problem": None, "simulated": fake}}
    gpus: list[dict[str, Any]] = []
    pairs: list[dict[str, Any]] = []
    lookups: dict[str, Any] = {}
    try:
        found["nvml"].update({
            "driver_version": asker.ask("nvmlSystemGetDriverVersion"),
            "nvml_version": asker.ask("nvmlSystemGetNVMLVersion"),
            "cuda_driver_version": asker.ask("nvmlSystemGetCudaDriverVersion", convert=int),
            "count": asker.ask("nvmlDeviceGetCount", convert=int)})
        handles = []
        for index in range(int(found["nvml"]["count"].get("value") or 0)):
            entry, handle = _gpu(asker, index, root)
            gpus.append(entry)
            handles.append(handle)
        for i, first in enumerate(handles):
            for j, second in enumerate(handles):
                if i == j or first is None or second is None:
                    continue
                pairs.append({"gpus": [i, j],
                              "common_ancestor": asker.ask("nvmlDeviceGetTopologyCommonAncestor", first, second,
                                                           convert=int),
                              "p2p_status": {name: asker.ask("nvmlDeviceGetP2PStatus", first, second, number,
                                                             convert=int)
                                             for name, number in P2P_INDEXES.items()}})
        listed = {sysfs_bdf(g["pci"]["value"]["bus_id"]) for g in gpus if "value" in g.get("pci", {})}
        for gpu in gpus:
            for link in gpu.get("nvlinks", ()):
                remote = link.get("remote_pci", {}).get("value")
                if remote and sysfs_bdf(remote["bus_id"]) not in listed and remote["bus_id"] not in lookups:
                    lookups[remote["bus_id"]] = asker.ask("nvmlDeviceGetHandleByPciBusId", remote["bus_id"],
                                                          convert=lambda _h: "a GPU")
    finally:
        nv.shutdown(nvml)
    found.update(gpus=gpus, pairs=pairs, bus_id_lookups=lookups)
    found["nics"] = [{"name": nic.name, "bdf": nic.bdf, "path": nic.path, "numa_node": nic.numa}
                     for nic in list_nics(root)]
    return found


def nvidia_smi_topology(smi: str | None) -> dict[str, Any]:
    if smi is None:
        return {"path": None, "topo_m": None, "problem": "nvidia-smi is not on PATH"}
    done = run_command([smi, "topo", "-m"], 60)
    if done.returncode != 0:
        return {"path": smi, "topo_m": None,
                "problem": f"nvidia-smi topo -m exited {done.returncode}: {last_line(done.stderr or done.stdout)}"}
    return {"path": smi, "topo_m": done.stdout, "problem": None}


def build_report(smi: str | None) -> dict[str, Any]:
    """The whole report: the driver's answers, nvidia-smi's matrix, and ddptop's own views of them."""
    report: dict[str, Any] = {"schema": REPORT_SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                              "ddptop_version": ddptop.__version__, "fake_nvml": os.environ.get(nv.FAKE_ENV) or None}
    report.update(read_driver())
    report["nvidia_smi"] = nvidia_smi_topology(smi)
    topo = read_topology()
    with GpuSampler() as sampler:
        static = [asdict(s) for s in sampler.static]
    report["ddptop"] = {"topo": format_matrix(topo), "topo_json": topo.to_json(), "gpus": static}
    return report


def save_report(report: dict[str, Any], path: str) -> str:
    """``report`` written atomically at ``path`` (user-only); ReportError in one line when it cannot be."""
    check_report_path(path)
    try:
        storage.write_json(path, report)
        os.chmod(path, 0o600)
    except OSError as exc:
        raise ReportError(f"cannot write --report {path}: {storage.describe_os_error(exc, path)}") from None
    return path


def check_report_path(path: str) -> None:
    """--report's file can be written: checked before any NVML call or check runs."""
    directory = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise ReportError(f"--report {path} is a directory; name a file")
    if not os.path.isdir(directory):
        raise ReportError(f"--report {path}: no such directory {directory}")
    if not os.access(directory, os.W_OK) or (os.path.exists(path) and not os.access(path, os.W_OK)):
        raise ReportError(f"--report {path}: not writable")


def write_report(path: str) -> dict[str, Any]:
    """The report of this machine (or of the simulated node DDPTOP_FAKE_NVML names), saved at ``path``."""
    report = build_report(shutil.which("nvidia-smi"))
    save_report(report, path)
    return report


def add_checks(report: dict[str, Any], checks: list[Any], path: str) -> None:
    """The doctor's checks, once they ended, written into the report too (one file to send)."""
    from ddptop.doctor.output import check_json

    report["checks"] = [check_json(c) for c in checks]
    save_report(report, path)
