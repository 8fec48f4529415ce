"""``ddptop doctor``: what a user checks on a new node before trusting a sweep there.

Each check is ok, warn, fail or skipped, with one line saying why; the lines are printed as the checks end
and saved as doctor.json. NVML is read through ddptop's own door (``ddptop.telemetry``: ``nvml``,
``inventory``, ``topology``); what torch knows comes from a subprocess (``bench_kernels.doctor_probe``), since
this process never imports torch; what a launch does is watched from outside, on a real ``ddptop run``.
What does not apply (no GPU, no ``nvidia-smi``, no nccl-tests) is skipped with the reason, never an error.

    NVML                        ddptop's NVML: GPUs, driver, GPUs it may not open
    nvidia-smi vs NVML          ``nvidia-smi --query-gpu``: the same GPUs, indices, names, memory, PCI bus IDs
    topo -m vs ddptop topo      ``nvidia-smi topo -m`` against ``ddptop topo``, cell by cell
    torch / CUDA / NCCL         versions; torchvision importable; a CUDA torch where NVML sees GPUs
    CUDA order vs NVML order    cuda:k against NVML's numbering (PCI bus order)
    P2P access                  peer access between CUDA devices, against the NVLinks NVML reports
    rendezvous store            where a real single-node launch's store (and anything else of it) listens
    kernel vs plain DDP loop    ddptop's kernel against a plain torch DDP loop, same configuration, median steps
    nccl-tests all_reduce_perf  one 64 MiB allreduce, against ddptop's collective benchmark on 2+ GPUs
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddptop import rundir
from ddptop.errors import DdptopError
from ddptop.telemetry import nvml as nv

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
STATUSES = (OK, WARN, FAIL, SKIPPED)
DOCTOR_FILE = "doctor.json"
SCHEMA = "ddptop-doctor/1"

NVML_CHECK = "NVML"
SMI_CHECK = "nvidia-smi vs NVML"
TOPO_CHECK = "topo -m vs ddptop topo"
VERSIONS_CHECK = "torch / CUDA / NCCL"
ORDER_CHECK = "CUDA order vs NVML order"
P2P_CHECK = "P2P access"
STORE_CHECK = "rendezvous store"
LOOP_CHECK = "kernel vs plain DDP loop"
NCCL_TESTS_CHECK = "nccl-tests all_reduce_perf"
CHECK_NAMES = (NVML_CHECK, SMI_CHECK, TOPO_CHECK, VERSIONS_CHECK, ORDER_CHECK, P2P_CHECK, STORE_CHECK, LOOP_CHECK,
               NCCL_TESTS_CHECK)

LOOP_TOLERANCE = 0.03  # ddptop's kernel within 3% of the plain loop's median step
# the configuration both sides run: (model, image size, classes, batch, warm-up steps, measured steps)
LOOP_CPU = ("resnet18", 32, 10, 8, 5, 30)
LOOP_GPU = ("resnet18", 224, 1000, 32, 20, 100)
MEMORY_TOLERANCE = 0.02  # nvidia-smi's memory.total against NVML's, as a fraction
NCCL_TESTS_BYTES = 64 * 2**20  # all_reduce_perf -b 64M -e 64M (nccl-tests' M is 2**20)
NCCL_TESTS_TOLERANCE = 0.10  # ddptop's allreduce busbw within 10% of nccl-tests' at the same size
SHOWN = 3  # mismatches named in a check's line; doctor.json keeps them all

TOPO_WORD = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|N/A)$")
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")


class DoctorError(DdptopError):
    """doctor.json cannot be written where --out says; one line for the user."""


@dataclass
class Check:
    name: str
    status: str
    detail: str
    data: dict[str, Any] = field(default_factory=dict)  # the figures behind the line, for doctor.json

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "status": self.status, "detail": self.detail, "data": self.data}


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, -1, "", f"no answer within {timeout:g} s")
    except OSError as exc:
        return subprocess.CompletedProcess(command, -1, "", f"cannot run {command[0]}: {exc.strerror or exc}")


def _last_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "no output"


def _listed(items: list[str]) -> str:
    shown = "; ".join(items[:SHOWN])
    return shown + (f" (+{len(items) - SHOWN} more)" if len(items) > SHOWN else "")


def _plain_name(name: str) -> str:
    return name.removesuffix(f" ({nv.FAKE_LABEL})").strip()


def _bare_uuid(uuid: str | None) -> str:
    """A UUID without NVML's "GPU-"/"MIG-" before it, lower case: CUDA gives the bare form."""
    text = (uuid or "").strip().lower()
    return text.split("-", 1)[1] if text.startswith(("gpu-", "mig-")) else text


# -- NVML -------------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class NvmlGpu:
    index: int  # NVML's index: PCI bus order, before CUDA_VISIBLE_DEVICES
    name: str
    uuid: str
    memory_mib: float | None
    bus_id: str | None  # sysfs form, 0000:06:00.0


@dataclass
class NvmlView:
    """What NVML says, through ddptop's door: every GPU it lists (before CUDA_VISIBLE_DEVICES), the
    inventory a sweep would use, or why NVML cannot be read."""

    unavailable: str | None = None
    gpus: list[NvmlGpu] = field(default_factory=list)
    refused: list[tuple[int, str]] = field(default_factory=list)  # (NVML index, why NVML would not open it)
    inventory: Any = None
    fake: bool = False

    @property
    def index_of_uuid(self) -> dict[str, int]:
        found = {_bare_uuid(g.uuid): g.index for g in self.gpus}
        for gpu in getattr(self.inventory, "gpus", ()):  # MIG instances: their GPU's index
            found.setdefault(_bare_uuid(gpu.uuid), gpu.index)
        return found


def read_nvml() -> NvmlView:
    from ddptop.telemetry.inventory import read_inventory
    from ddptop.telemetry.topology import sysfs_bdf

    try:
        nvml, fake = nv.load()
        nv.init(nvml)
    except nv.NvmlUnavailable as exc:
        return NvmlView(unavailable=str(exc))
    view = NvmlView(fake=fake)
    try:
        count = nv.call(nvml, "nvmlDeviceGetCount")
        for index in range(0 if isinstance(count, nv.Unavailable) else int(count)):
            handle = nv.call(nvml, "nvmlDeviceGetHandleByIndex", index)
            if isinstance(handle, nv.Unavailable):
                view.refused.append((index, handle.reason))
                continue
            name, uuid = nv.call(nvml, "nvmlDeviceGetName", handle), nv.call(nvml, "nvmlDeviceGetUUID", handle)
            if isinstance(name, nv.Unavailable) or isinstance(uuid, nv.Unavailable):
                view.refused.append((index, (name if isinstance(name, nv.Unavailable) else uuid).reason))
                continue
            memory = nv.call(nvml, "nvmlDeviceGetMemoryInfo", handle)
            pci = nv.call(nvml, "nvmlDeviceGetPciInfo", handle)
            view.gpus.append(NvmlGpu(
                index, _plain_name(nv.text(name)), nv.text(uuid),
                None if isinstance(memory, nv.Unavailable) else int(memory.total) / 2**20,
                None if isinstance(pci, nv.Unavailable) else sysfs_bdf(nv.text(pci.busId))))
        if isinstance(count, nv.Unavailable):
            view.unavailable = f"NVML could not count the GPUs: {count.reason}"
    finally:
        nv.shutdown(nvml)
    view.inventory = read_inventory()
    return view


def check_nvml(view: NvmlView) -> Check:
    if view.unavailable and not view.gpus:
        return Check(NVML_CHECK, SKIPPED, view.unavailable)
    inventory = view.inventory
    label = f" ({nv.FAKE_LABEL}: simulated node {os.environ.get(nv.FAKE_ENV)})" if view.fake else ""
    data = {"driver": inventory.driver, "nvml_version": inventory.nvml_version, "fake": view.fake,
            "gpus": [{"index": g.index, "name": g.name, "uuid": g.uuid, "memory_mib": g.memory_mib,
                      "bus_id": g.bus_id} for g in view.gpus],
            "usable": [g.uuid for g in inventory.gpus], "refused": [list(r) for r in view.refused],
            "notes": list(inventory.notes)}
    reasons: dict[str, list[str]] = {}
    for index, reason in view.refused:
        reasons.setdefault(reason, []).append(str(index))
    notes = [f"GPU{'s' if len(found) > 1 else ''} {', '.join(found)} not accessible ({reason})"
             for reason, found in reasons.items()]
    notes += [note for note in inventory.notes if "not accessible" not in note]
    said = f"; {_listed(notes)}" if notes else ""
    if not inventory.gpus:
        return Check(NVML_CHECK, WARN, f"driver {inventory.driver or '?'}{label}: {inventory.problem}{said}", data)
    mig = sum(g.is_mig for g in inventory.gpus)
    count = f"{len(view.gpus)} GPU(s)" + (f" with {mig} MIG instance(s)" if mig else "")
    if "CUDA_VISIBLE_DEVICES" in os.environ:
        count += f", {len(inventory.gpus)} visible"
    return Check(NVML_CHECK, OK, f"{count}, driver {inventory.driver}{label}{said}", data)


# -- nvidia-smi -------------------------------------------------------------------------------------------------------


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id --format=csv,noheader,nounits``."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            memory = float(parts[3])
        except ValueError:  # [N/A], [Not Supported]
            memory = None
        rows.append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2],
                     "memory_mib": int(memory) if memory is not None else None,
                     "bus_id": parts[4] if len(parts) > 4 else None})
    return rows


def parse_topo_matrix(text: str) -> dict[tuple[str, str], str]:
    """The cells of an ``nvidia-smi topo -m`` matrix keyed by (row, column), in the printed order.

    The columns are the header's device names (up to "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"); a
    "NIC Legend" (newer drivers print NIC0, NIC1, ... and name them below) renames them to their devices, as
    ``ddptop topo`` names them."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.split() and line.split()[0].startswith("GPU0")), None)
    if header is None:
        return {}
    columns = []
    for word in lines[header].split():
        if word in ("CPU", "NUMA", "GPU"):
            break
        columns.append(word)
    rename = {m.group(1): m.group(2) for m in map(_NIC_LEGEND.match, lines[header:]) if m}
    cells: dict[tuple[str, str], str] = {}
    for line in lines[header + 1:]:
        parts = line.split()
        if not parts or parts[0].rstrip(":") == "Legend" or len(parts) < 2 or not TOPO_WORD.match(parts[1]):
            break
        row = rename.get(parts[0], parts[0])
        for column, value in zip(columns, parts[1:1 + len(columns)]):
            if TOPO_WORD.match(value):
                cells[(row, rename.get(column, column))] = value
    return cells


def check_nvidia_smi(view: NvmlView, smi: str | None) -> Check:
    if smi is None:
        return Check(SMI_CHECK, SKIPPED, "nvidia-smi is not on PATH")
    done = _run([smi, "--query-gpu=index,name,uuid,memory.total,pci.bus_id", "--format=csv,noheader,nounits"], 60)
    listed = parse_query_gpu(done.stdout) if done.returncode == 0 else []
    if view.unavailable and not view.gpus:
        if listed:
            return Check(SMI_CHECK, WARN, f"nvidia-smi lists {len(listed)} GPU(s) but ddptop cannot read NVML "
                                          f"({view.unavailable}): no GPU telemetry or topology", {"nvidia_smi": listed})
        return Check(SMI_CHECK, SKIPPED, "neither NVML nor nvidia-smi lists a GPU (nvidia-smi: "
                                         f"{_last_line(done.stdout + done.stderr)})")
    if not listed:
        return Check(SMI_CHECK, FAIL, f"nvidia-smi --query-gpu gave no GPU (exit {done.returncode}: "
                                      f"{_last_line(done.stderr or done.stdout)}) while NVML lists {len(view.gpus)}")
    ours = {_bare_uuid(g.uuid): g for g in view.gpus}
    theirs = {_bare_uuid(r["uuid"]): r for r in listed}
    problems = [f"GPU {r['index']} ({r['uuid']}) listed by nvidia-smi, not by NVML"
                for key, r in theirs.items() if key not in ours]
    problems += [f"NVML's GPU {g.index} ({g.uuid}) not listed by nvidia-smi" for key, g in ours.items()
                 if key not in theirs]
    from ddptop.telemetry.topology import sysfs_bdf

    for key, row in theirs.items():
        gpu = ours.get(key)
        if gpu is None:
            continue
        where = f"GPU {gpu.index}"
        if row["index"] != gpu.index:
            problems.append(f"{where} is index {row['index']} in nvidia-smi")
        if row["name"] != gpu.name:
            problems.append(f"{where} named {row['name']!r} by nvidia-smi, {gpu.name!r} by NVML")
        if gpu.memory_mib and row["memory_mib"] and abs(row["memory_mib"] - gpu.memory_mib) > max(
                1.0, MEMORY_TOLERANCE * gpu.memory_mib):
            problems.append(f"{where} memory {row['memory_mib']} MiB in nvidia-smi, {gpu.memory_mib:.0f} MiB in NVML")
        if gpu.bus_id and row["bus_id"] and sysfs_bdf(row["bus_id"]) != gpu.bus_id:
            problems.append(f"{where} on PCI bus {row['bus_id']} in nvidia-smi, {gpu.bus_id} in NVML")
    data = {"nvidia_smi": listed, "mismatches": problems}
    if problems:
        return Check(SMI_CHECK, FAIL, _listed(problems), data)
    return Check(SMI_CHECK, OK, f"{len(listed)} GPU(s): indices, names, UUIDs, memory and PCI bus IDs agree", data)


def check_topology(view: NvmlView, smi: str | None) -> Check:
    """``nvidia-smi topo -m`` against ``ddptop topo``: the words each prints, cell by cell."""
    if smi is None:
        return Check(TOPO_CHECK, SKIPPED, "nvidia-smi is not on PATH")
    done = _run([smi, "topo", "-m"], 60)
    theirs = parse_topo_matrix(done.stdout) if done.returncode == 0 else {}
    if not theirs:
        return Check(TOPO_CHECK, SKIPPED,
                     f"nvidia-smi topo -m printed no matrix ({_last_line(done.stderr or done.stdout)})")
    from ddptop.telemetry.topology import format_matrix, read_topology

    topo = read_topology()
    ours = parse_topo_matrix(format_matrix(topo))
    if not ours:
        return Check(TOPO_CHECK, WARN, f"ddptop topo shows no matrix ({topo.problem or 'no GPU'}); nvidia-smi shows "
                                       f"{len(theirs)} cells")
    mismatches = [f"{row}/{column}: nvidia-smi {word}, ddptop {ours.get((row, column), 'nothing')}"
                  for (row, column), word in theirs.items() if ours.get((row, column)) != word]
    mismatches += [f"{row}/{column}: nvidia-smi nothing, ddptop {word}"
                   for (row, column), word in ours.items() if (row, column) not in theirs]
    data = {"cells": len(theirs), "mismatches": mismatches}
    if mismatches:
        return Check(TOPO_CHECK, FAIL, f"{len(mismatches)} of {len(theirs)} cells differ: {_listed(mismatches)}", data)
    return Check(TOPO_CHECK, OK, f"{len(theirs)} cells agree", data)


# -- what torch sees --------------------------------------------------------------------------------------------------


def _probe(arguments: list[str], env: dict[str, str] | None = None, timeout: float = 600) -> tuple[dict | None, str]:
    done = _run([sys.executable, "-m", "bench_kernels.doctor_probe", *arguments], timeout, env)
    if done.returncode != 0:
        return None, f"the torch probe failed: {_last_line(done.stderr, 200)}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, "the torch probe printed no JSON"


def check_versions(probe: dict[str, Any], view: NvmlView) -> Check:
    v = probe["versions"]
    said = (f"torch {v['torch']}, " + (f"HIP {v['hip']}" if v.get("hip") else f"CUDA {v.get('cuda') or '-'}")
            + f", NCCL {v.get('nccl') or '-'}, torchvision {v.get('torchvision') or '-'}")
    data = {"versions": v, "cuda_problem": probe.get("cuda_problem")}
    if not v.get("distributed"):
        return Check(VERSIONS_CHECK, FAIL, f"{said}: this torch has no torch.distributed", data)
    if v.get("torchvision") is None:
        return Check(VERSIONS_CHECK, FAIL, f"{said}: torchvision does not import ({v.get('torchvision_error')})", data)
    usable = [] if view.fake or view.inventory is None else list(view.inventory.gpus)
    if usable and not (v.get("cuda") or v.get("hip")):
        return Check(VERSIONS_CHECK, FAIL, f"{said}: NVML sees {len(usable)} GPU(s) but this torch is a CPU-only "
                                           "build", data)
    if usable and not probe["devices"]:
        why = probe.get("cuda_problem") or "torch.cuda.is_available() is False (driver older than this CUDA?)"
        return Check(VERSIONS_CHECK, FAIL, f"{said}: NVML sees {len(usable)} GPU(s) but torch sees none: {why}", data)
    if probe["devices"] and not v.get("nccl_available"):
        return Check(VERSIONS_CHECK, WARN, f"{said}: GPUs but no NCCL in this torch (gloo only)", data)
    return Check(VERSIONS_CHECK, OK, said, data)


def check_device_order(probe: dict[str, Any], view: NvmlView) -> Check:
    devices = probe["devices"]
    if not devices:
        return Check(ORDER_CHECK, SKIPPED, "torch sees no CUDA device")
    if view.fake:
        return Check(ORDER_CHECK, SKIPPED, f"NVML is simulated ({nv.FAKE_ENV}): no real order to compare with")
    if not view.gpus:
        return Check(ORDER_CHECK, SKIPPED, f"no NVML to compare with ({view.unavailable or 'no GPU'})")
    if any(d["uuid"] is None for d in devices):
        return Check(ORDER_CHECK, SKIPPED, "this torch does not report device UUIDs")
    index_of = view.index_of_uuid
    order = [index_of.get(_bare_uuid(d["uuid"])) for d in devices]
    data = {"cuda_to_nvml": order, "cuda_device_order": probe.get("cuda_device_order"),
            "cuda_visible_devices": probe.get("cuda_visible_devices")}
    unknown = [f"cuda:{d['index']} ({d['uuid']})" for d, i in zip(devices, order) if i is None]
    if unknown:
        return Check(ORDER_CHECK, WARN, f"not in NVML's list: {_listed(unknown)}", data)
    mapping = ", ".join(f"cuda:{k}=GPU{i}" for k, i in enumerate(order))
    if order == sorted(order):
        return Check(ORDER_CHECK, OK, f"{len(order)} device(s) in NVML's order ({mapping})", data)
    by_pci = probe.get("cuda_device_order") == "PCI_BUS_ID"
    visible = probe.get("cuda_visible_devices")
    if by_pci and visible:
        return Check(ORDER_CHECK, OK, f"{mapping}: the order CUDA_VISIBLE_DEVICES={visible} asks for", data)
    if by_pci:
        return Check(ORDER_CHECK, WARN, f"{mapping} although CUDA_DEVICE_ORDER=PCI_BUS_ID", data)
    return Check(ORDER_CHECK, WARN, f"{mapping}: CUDA numbers the GPUs fastest first, NVML and nvidia-smi by PCI bus "
                                    "(ddptop sets CUDA_DEVICE_ORDER=PCI_BUS_ID for its ranks; set it for your own "
                                    "scripts)", data)


def check_peer_access(probe: dict[str, Any], view: NvmlView, links: dict[str, dict[str, str]] | None = None) -> Check:
    """Peer access between CUDA devices; ``links`` is ddptop's topology matrix (read here when not given),
    whose GPUs are NVML's: each CUDA device is found there by its UUID."""
    if probe.get("peer_access_error"):
        return Check(P2P_CHECK, FAIL, f"torch.cuda.can_device_access_peer failed: {probe['peer_access_error']}")
    matrix = probe.get("peer_access") or []
    if not matrix:
        return Check(P2P_CHECK, SKIPPED, "fewer than two CUDA devices")
    if links is None:
        from ddptop.telemetry.topology import read_topology

        links = read_topology().matrix
    index_of = view.index_of_uuid
    nvml_of = [index_of.get(_bare_uuid(d["uuid"])) for d in probe["devices"]]

    def link(a: int, b: int) -> str:
        if nvml_of[a] is None or nvml_of[b] is None:
            return "?"
        return links.get(f"GPU{nvml_of[a]}", {}).get(f"GPU{nvml_of[b]}", "?")

    off = [(a, b) for a, row in enumerate(matrix) for b, ok in enumerate(row) if ok is False]
    data = {"peer_access": matrix, "off": [[a, b, link(a, b)] for a, b in off]}
    nvlinked_off = [f"cuda:{a}-cuda:{b} ({link(a, b)})" for a, b in off if link(a, b).startswith("NV")]
    if nvlinked_off:
        return Check(P2P_CHECK, WARN, "no peer access between GPUs NVML reports NVLinked: " + _listed(nvlinked_off)
                     + " (NCCL falls back to slower paths; a container or driver setting?)", data)
    if off:
        return Check(P2P_CHECK, OK, f"{len(matrix)} devices; no peer access for {len(off)} ordered pair(s), none of "
                                    "them NVLinked", data)
    return Check(P2P_CHECK, OK, f"every pair of {len(matrix)} devices has peer access", data)


# -- a real launch, watched -------------------------------------------------------------------------------------------


@dataclass
class Launched:
    """One ``ddptop run`` the doctor started: how it ended, its summary, and every listening socket seen in
    its processes while it ran (role: "store" for torchrun's agent, which holds the rendezvous store;
    "rank" for the workers; "ddptop" for the run's own process)."""

    returncode: int | None
    wall_s: float
    summary: dict[str, Any] | None
    listeners: list[dict[str, Any]]
    error: str


def _listening(root: Any, seen: dict[tuple, dict[str, Any]]) -> None:
    import psutil

    try:
        agents = {p.pid for p in root.children()}
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        try:  # psutil < 6 names it connections
            connections = getattr(proc, "net_connections", None) or proc.connections
            connections = connections(kind="inet")
        except psutil.Error:
            continue
        for conn in connections:
            if conn.status != psutil.CONN_LISTEN:
                continue
            role = "ddptop" if proc.pid == root.pid else "store" if proc.pid in agents else "rank"
            key = (conn.laddr.ip, conn.laddr.port, role)
            if key not in seen:
                with contextlib.suppress(psutil.Error):
                    seen[key] = {"ip": conn.laddr.ip, "port": conn.laddr.port, "role": role,
                                 "command": " ".join(proc.cmdline()[1:4])}


def launch_and_watch(arguments: list[str], scratch: str, timeout: float = 600) -> Launched:
    """``ddptop run --headless`` with ``arguments`` in a fresh run directory under ``scratch``, its process tree
    watched for listening sockets until it ends: every 0.1 s until the store is seen, then once a second, so
    that the watching costs the measured steps next to nothing."""
    import psutil

    run_dir = os.path.join(scratch, f"run-{len(os.listdir(scratch))}")
    command = [sys.executable, "-m", "ddptop", "run", "--headless", "--out", run_dir, "--telemetry-interval", "0",
               *arguments]
    seen: dict[tuple, dict[str, Any]] = {}
    start = time.monotonic()
    with open(os.path.join(scratch, "run.log"), "w+", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            root = psutil.Process(process.pid)
            while time.monotonic() - start < timeout:
                _listening(root, seen)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(1.0 if any(s["role"] == "store" for s in seen.values()) else 0.1)
                    break
        finally:
            if process.poll() is None:
                process.terminate()  # ddptop stops its ranks on SIGTERM
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        log.seek(0)
        output = log.read()
    summary = None
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
            summary = json.load(handle)
    said = [text for text in output.splitlines() if "failed" in text or "error:" in text]
    return Launched(process.returncode, time.monotonic() - start, summary, list(seen.values()),
                    "" if process.returncode == 0 else _last_line(said[0] if said else output, 200))


def _is_loopback(ip: str) -> bool:
    import ipaddress

    try:
        return ipaddress.ip_address(ip.split("%")[0]).is_loopback
    except ValueError:
        return False


def check_store(launched: Launched | None, skipped: str = "") -> Check:
    if launched is None:
        return Check(STORE_CHECK, SKIPPED, skipped)
    data = {"listeners": launched.listeners, "launch_exit": launched.returncode}
    store = sorted({f"{s['ip']}:{s['port']}" for s in launched.listeners if s["role"] == "store"})
    wide = [s for s in launched.listeners if not _is_loopback(s["ip"])]
    if wide:
        shown = [f"{s['role']} on {s['ip']}:{s['port']}" for s in wide]
        return Check(STORE_CHECK, WARN, f"a single-node launch listens beyond loopback: {_listed(shown)}: reachable "
                                        "from the network while it runs", data)
    if not store:
        why = f"the launch failed: {launched.error}" if launched.returncode else "it ended before it was seen"
        return Check(STORE_CHECK, SKIPPED, f"no listening store seen during a single-node launch ({why})", data)
    others = len(launched.listeners) - len(store)
    rest = f"; {others} other socket(s) of the launch on loopback too" if others else ""
    return Check(STORE_CHECK, OK, f"a single-node launch's store listened on {', '.join(store)} only{rest}", data)


def loop_configuration(on_gpu: bool) -> dict[str, Any]:
    model, size, classes, batch, warmup, steps = LOOP_GPU if on_gpu else LOOP_CPU
    from ddptop.plan import usable_cpu_count

    return {"model": model, "image_size": size, "num_classes": classes, "batch_size": batch, "warmup": warmup,
            "steps": steps, "threads": usable_cpu_count(), "device": "cuda" if on_gpu else "cpu", "world_size": 1}


def loop_run_arguments(config: dict[str, Any]) -> list[str]:
    """ddptop's run of the loop's configuration: one rank, exactly these steps, nothing else measured."""
    return ["--models", config["model"], "--image-size", str(config["image_size"]), "--num-classes",
            str(config["num_classes"]), "--batch-sizes", str(config["batch_size"]), "--world-sizes", "1",
            "--warmup", str(config["warmup"]), "--iters", str(config["steps"]), "--threads-per-rank",
            str(config["threads"]), "--device", config["device"], "--no-baseline", "--comm-iters", "0",
            "--no-collectives"]


def reference_loop(config: dict[str, Any], view: NvmlView) -> tuple[dict | None, str]:
    """The plain loop's step times, in a torch subprocess given the environment ddptop's rank gets: the same
    threads, and on a GPU node the GPU ddptop's rank 0 uses (NVML's first usable one)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(config["threads"]))
    if config["device"] == "cuda":
        env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
        env["CUDA_VISIBLE_DEVICES"] = view.inventory.usable_gpus[0].uuid
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return _probe(["loop", "--model", config["model"], "--image-size", str(config["image_size"]),
                   "--num-classes", str(config["num_classes"]), "--batch-size", str(config["batch_size"]),
                   "--warmup", str(config["warmup"]), "--steps", str(config["steps"]),
                   "--threads", str(config["threads"])], env)


def _first_p50(summary: dict[str, Any] | None) -> float | None:
    try:
        return float(summary["configs"][0]["stats"]["sec_iter"]["p50"])  # type: ignore[index]
    except (KeyError, IndexError, TypeError, ValueError):
        return None


def check_reference_loop(config: dict[str, Any], plain: dict | None, problem: str,
                         launched: Launched) -> Check:
    """ddptop's kernel against a plain DDP loop on the same configuration: the ratio of their median steps."""
    data: dict[str, Any] = {"configuration": config}
    if plain is None:
        return Check(LOOP_CHECK, FAIL, problem, data)
    ours = _first_p50(launched.summary)
    data.update(plain_p50_s=plain["p50_s"], plain_steps=plain["steps"], ddptop_p50_s=ours)
    if ours is None:
        return Check(LOOP_CHECK, FAIL, f"ddptop's run gave no step time (exit {launched.returncode}: {launched.error})",
                     data)
    ratio = ours / plain["p50_s"]
    data["ratio"] = ratio
    what = f"{config['model']} {config['image_size']} px batch {config['batch_size']}, 1 rank {config['device']}"
    words = (f"median step {ours * 1e3:.1f} ms (ddptop) vs {plain['p50_s'] * 1e3:.1f} ms (plain loop): "
             f"ratio {ratio:.3f} ({what})")
    if abs(ratio - 1) <= LOOP_TOLERANCE:
        return Check(LOOP_CHECK, OK, words, data)
    return Check(LOOP_CHECK, WARN, f"{words}, outside ±{LOOP_TOLERANCE:.0%} (a busy or noisy machine? run doctor "
                                   "again when it is quiet)", data)


# -- nccl-tests -------------------------------------------------------------------------------------------------------


def parse_all_reduce_perf(text: str, size: int = NCCL_TESTS_BYTES) -> float | None:
    """nccl-tests' out-of-place busbw (GB/s) at ``size`` bytes: the column its header names "busbw" first
    (its columns moved between versions); else its closing "Avg bus bandwidth" line."""
    column = None
    for line in text.splitlines():
        words = line.lstrip("#").split()
        if line.startswith("#") and "busbw" in words and "size" in words:
            column = words.index("busbw") - words.index("size")
            continue
        parts = line.split()
        if column is not None and len(parts) > column and parts[0] == str(size):
            with contextlib.suppress(ValueError):
                return float(parts[column])
    match = re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", text)
    return float(match.group(1)) if match else None


def _ddptop_busbw(summary: dict[str, Any] | None, world_size: int) -> float | None:
    for table in (summary or {}).get("collectives") or []:
        if table.get("op") == "allreduce" and table.get("world_size") == world_size:
            for row in table.get("rows") or []:
                if row.get("bytes") == NCCL_TESTS_BYTES and not row.get("inplace") and row.get("busbw_gbs"):
                    return float(row["busbw_gbs"])
    return None


def check_nccl_tests(view: NvmlView, launch: Callable[[list[str]], Launched] | None) -> Check:
    binary = shutil.which("all_reduce_perf")
    if binary is None:
        return Check(NCCL_TESTS_CHECK, SKIPPED, "all_reduce_perf (nccl-tests) is not on PATH")
    usable = list(view.inventory.usable_gpus) if view.inventory is not None else []
    if not usable:
        return Check(NCCL_TESTS_CHECK, SKIPPED, "no GPU to run it on" + (f" ({nv.FAKE_ENV}: simulated GPUs)"
                                                                         if view.fake else ""))
    if any(g.is_mig for g in usable):
        return Check(NCCL_TESTS_CHECK, SKIPPED, "MIG instances: NCCL runs one per process")
    count = len(usable)
    if count < 2:
        return Check(NCCL_TESTS_CHECK, SKIPPED, "one GPU: an allreduce moves nothing between GPUs")
    if launch is None:
        return Check(NCCL_TESTS_CHECK, SKIPPED, "--quick: nothing is launched")
    env = dict(os.environ, CUDA_VISIBLE_DEVICES=",".join(g.uuid for g in usable))
    done = _run([binary, "-b", "64M", "-e", "64M", "-g", str(count)], 600, env)
    theirs = parse_all_reduce_perf(done.stdout)
    if theirs is None:
        return Check(NCCL_TESTS_CHECK, FAIL, f"all_reduce_perf gave no result (exit {done.returncode}: "
                                             f"{_last_line(done.stderr or done.stdout)})")
    launched = launch(["--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "8",
                       "--world-sizes", str(count), "--backend", "nccl", "--no-baseline", "--warmup", "1",
                       "--iters", "3", "--comm-iters", "0", "--collectives", "allreduce", "--coll-min-bytes",
                       "64MiB", "--coll-max-bytes", "64MiB"])
    ours = _ddptop_busbw(launched.summary, count)
    data = {"gpus": count, "bytes": NCCL_TESTS_BYTES, "nccl_tests_busbw_gbs": theirs, "ddptop_busbw_gbs": ours}
    words = f"64 MiB allreduce on {count} GPUs: busbw {theirs:.1f} GB/s (nccl-tests)"
    if ours is None:
        return Check(NCCL_TESTS_CHECK, OK, f"{words}; ddptop's collective benchmark gave none (exit "
                                           f"{launched.returncode}: {launched.error})", data)
    ratio = ours / theirs if theirs else None
    data["ratio"] = ratio
    words += f", {ours:.1f} GB/s (ddptop, torch.distributed)"
    if ratio is not None and ratio >= 1 - NCCL_TESTS_TOLERANCE:
        return Check(NCCL_TESTS_CHECK, OK, f"{words}: ratio {ratio:.2f}", data)
    return Check(NCCL_TESTS_CHECK, WARN, f"{words}: ratio {ratio:.2f}, more than {NCCL_TESTS_TOLERANCE:.0%} below "
                                         "nccl-tests" if ratio is not None else words, data)


# -- the whole check --------------------------------------------------------------------------------------------------


def run_doctor(skip_loop: bool = False, quick: bool = False,
               report: Callable[[Check], None] | None = None) -> list[Check]:
    """Every check in ``CHECK_NAMES`` order, each handed to ``report`` as it ends. ``quick``: nothing is
    launched (the store, the loop and nccl-tests are skipped); ``skip_loop``: the loop comparison alone is."""
    checks: list[Check] = []

    def add(check: Check) -> None:
        checks.append(check)
        if report is not None:
            report(check)

    view = read_nvml()
    add(check_nvml(view))
    smi = shutil.which("nvidia-smi")
    add(check_nvidia_smi(view, smi))
    add(check_topology(view, smi))
    probe, problem = _probe(["facts"])
    if probe is None:
        for name in (VERSIONS_CHECK, ORDER_CHECK, P2P_CHECK):
            add(Check(name, FAIL if name == VERSIONS_CHECK else SKIPPED,
                      problem if name == VERSIONS_CHECK else "torch could not be asked"))
    else:
        add(check_versions(probe, view))
        add(check_device_order(probe, view))
        add(check_peer_access(probe, view))
    if quick:
        add(check_store(None, "--quick: nothing is launched"))
        add(Check(LOOP_CHECK, SKIPPED, "--quick: nothing is launched"))
        add(check_nccl_tests(view, None))
        return checks
    with tempfile.TemporaryDirectory(prefix="ddptop-doctor-") as scratch:
        def launch(arguments: list[str]) -> Launched:
            return launch_and_watch(arguments, scratch)

        on_gpu = bool(view.inventory is not None and view.inventory.usable_gpus and probe and probe["devices"])
        if skip_loop:
            # the smallest launch there is, watched for its store: one rank, one step (batch 2: BatchNorm needs it)
            launched = launch(["--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sizes",
                               "2", "--world-sizes", "1", "--no-baseline", "--warmup", "0", "--iters", "1",
                               "--comm-iters", "0", "--no-collectives"])
            add(check_store(launched))
            add(Check(LOOP_CHECK, SKIPPED, "--skip-loop"))
        else:
            config = loop_configuration(on_gpu)
            plain, problem = reference_loop(config, view)
            launched = launch(loop_run_arguments(config))
            add(check_store(launched))
            add(check_reference_loop(config, plain, problem, launched))
        add(check_nccl_tests(view, launch))
    return checks


def line(check: Check) -> str:
    width = max(len(name) for name in CHECK_NAMES)
    return f"{check.status:<8} {check.name:<{width}}  {check.detail}"


def table(checks: list[Check]) -> str:
    return "".join(line(c) + "\n" for c in checks)


def prepare_out(out_dir: str) -> None:
    """``--out`` made (user-only) and found writable before any check runs, so a bad path costs no launch."""
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
    except OSError as exc:
        raise DoctorError(f"cannot create --out {out_dir}: {(exc.strerror or str(exc)).lower()}") from None
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK):
        raise DoctorError(f"--out {out_dir} is not a writable directory")


def save(checks: list[Check], out_dir: str) -> str:
    """doctor.json in ``out_dir`` (created user-only if missing), written atomically."""
    path = os.path.join(out_dir, DOCTOR_FILE)
    failed = sum(c.status == FAIL for c in checks)
    document = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "fake_nvml": os.environ.get(nv.FAKE_ENV) or None,
                "counts": {s: sum(c.status == s for c in checks) for s in STATUSES}, "failed": failed,
                "checks": [c.to_json() for c in checks]}
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        rundir.write_json(path, document)
    except OSError as exc:
        raise DoctorError(f"cannot save the checks: {rundir.describe_os_error(exc, path)} in {out_dir}") from None
    return path
