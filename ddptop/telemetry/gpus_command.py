"""``ddptop gpus``: one look at every GPU, its processes and the host, as text or JSON.

Two readings ``interval`` apart, so that rates (PCIe, NVLink, CPU %) have something to be measured
against; everything else is from the second reading. A GPU in MIG mode has a line per instance under it
(profile, memory, processes), as nvidia-smi lists them; in JSON each GPU has ``mig_mode`` and ``mig``.
"""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

import psutil

from ddptop import units
from ddptop.telemetry import nvml as nv
from ddptop.telemetry.gpu import GpuSampler
from ddptop.telemetry.host import HostSampler


def _process_owner(pid: int) -> dict[str, Any]:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return {"user": process.username(), "command": " ".join(process.cmdline()) or process.name()}
    except psutil.NoSuchProcess:
        return {"user": None, "command": "(not in this PID namespace)"}
    except psutil.AccessDenied:
        return {"user": None, "command": "(access denied)"}


def take_snapshot(interval: float = 0.5, nvml_module: Any | None = None) -> dict[str, Any]:
    with GpuSampler(nvml_module) as sampler:
        host = HostSampler()
        sampler.sample()
        time.sleep(interval)
        readings = sampler.sample()
        host_reading = host.host()
        gpus = []
        processes = []
        for static, reading in zip(sampler.static, readings):
            entry = asdict(static)
            entry.update(reading.to_json())
            entry["na"] = reading.na
            gpus.append(entry)
            on_instance = {p["pid"]: m["slot"] for m in reading.mig for p in m.get("processes") or ()}
            listed = {process["pid"] for process in reading.processes}
            # the GPU's list, then any process only its instance's handle told of
            extra = [p for m in reading.mig for p in m.get("processes") or () if p["pid"] not in listed]
            for process in [*reading.processes, *extra]:
                mig = {"mig": on_instance[process["pid"]]} if process["pid"] in on_instance else {}
                processes.append({"gpu": reading.index, **mig, **process, **_process_owner(process["pid"])})
        return {
            "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "fake": sampler.fake,
            "fake_label": nv.FAKE_LABEL if sampler.fake else None,
            "nvml": sampler.problem or "ok",
            "driver": sampler.driver,
            "gpus": gpus,
            "processes": processes,
            "host": host_reading,
        }


def _bandwidth(value: float | None) -> str:
    return units.gbps(value, from_bytes=True, compact=True, missing=units.NA)


def _mig_line(instance: dict[str, Any]) -> str:
    """A MIG instance under its GPU: its profile and GPU instance id in the name column, its own memory in
    the memory column, its processes last."""
    gi = "" if instance.get("gpu_instance") is None else f" GI {instance['gpu_instance']}"
    label = f"  MIG {instance['slot']} {instance.get('profile') or '?'}{gi}"
    memory = units.pair(instance.get("mem_used"), instance.get("mem_total"), units.gib)
    if "processes" not in instance:
        who = f"processes: {(instance.get('na') or {}).get('processes', units.NA)}"
    else:
        who = "processes: " + (", ".join(str(p["pid"]) for p in instance["processes"]) or "none")
    return f"{'':>3}  {label[:27]:<28}{'':>10}  {memory:>11}  {who}"


def _process_place(process: dict[str, Any]) -> str:
    return f"{process['gpu']} MIG {process['mig']}" if process.get("mig") is not None else str(process["gpu"])


def snapshot_text(snap: dict[str, Any]) -> str:
    lines = [f"ddptop gpus  {snap['time']}  driver {snap['driver'] or '-'}  NVML {snap['nvml']}"]
    if snap["fake"]:
        lines.append(f"{nv.FAKE_LABEL}: simulated GPUs from {nv.FAKE_ENV}; not this machine's hardware")
    if snap["gpus"]:
        header = (
            f"{'GPU':>3}  {'name':<28}{'util':>5}{'mem':>5}  {'memory GiB':>11}  {'power W':>9}  {'temp':>4}"
            f"  {'SM/mem MHz':>10}  {'PCIe GB/s':>9}  {'NVLink GB/s':>11}  notes"
        )
        lines += ["", header]
        for gpu in snap["gpus"]:
            if gpu.get("lost"):
                lines.append(f"{gpu['index']:>3}  {gpu['name'][:27]:<28}GPU lost: {gpu['na'].get('all', '')}")
                continue
            if gpu.get("inaccessible"):  # another job's GPU, or outside a container's cgroup
                lines.append(f"{gpu['index']:>3}  {'(not accessible)':<28}{gpu['inaccessible']}")
                continue
            notes = list(gpu.get("throttle") or [])
            if gpu.get("ecc_uncorrected"):
                notes.append(f"{gpu['ecc_uncorrected']} uncorrected ECC")
            if gpu.get("xid"):
                notes.append("Xid " + ",".join(map(str, gpu["xid"])))
            name = gpu["name"].removeprefix("Tesla ").removeprefix("NVIDIA ")  # as nvidia-smi's own table
            util = units.percent(gpu.get("util"), fraction=False, missing=units.NA)
            mem_util = units.percent(gpu.get("mem_util"), fraction=False, missing=units.NA)
            power = units.pair(gpu.get("power_w"), gpu.get("power_limit_w"), lambda v: units.number(v, 0))
            clocks = units.pair(gpu.get("sm_clock_mhz"), gpu.get("mem_clock_mhz"), lambda v: units.number(v, 0))
            temp = units.number(gpu.get("temp_c"), 0, "C", missing=units.NA)
            if gpu.get("mig_mode") == "enabled":
                notes.insert(0, f"MIG: {len(gpu.get('mig') or [])} instance(s)")
            lines.append(
                f"{gpu['index']:>3}  {name[:27]:<28}{util:>5}{mem_util:>5}  "
                f"{units.pair(gpu.get('mem_used'), gpu.get('mem_total'), units.gib):>11}  {power:>9}  {temp:>4}  "
                f"{clocks:>10}  {units.pair(gpu.get('pcie_tx_bps'), gpu.get('pcie_rx_bps'), _bandwidth):>9}  "
                f"{units.pair(gpu.get('nvlink_tx_bps'), gpu.get('nvlink_rx_bps'), _bandwidth):>11}  {', '.join(notes)}"
            )
            lines += [_mig_line(instance) for instance in gpu.get("mig") or ()]
        unavailable: dict[str, list[int]] = {}
        for gpu in snap["gpus"]:
            for key, reason in (gpu.get("na") or {}).items():
                if key != "all":
                    unavailable.setdefault(f"{key}: {reason}", []).append(gpu["index"])
        if unavailable:
            lines += ["", "N/A (tx/rx are transmit/receive):"]
            lines += [f"  {what} (GPU {','.join(map(str, idx))})" for what, idx in sorted(unavailable.items())]
        lines += ["", "Processes:"]
        if snap["processes"]:
            where = [_process_place(process) for process in snap["processes"]]
            width = max(3, *map(len, where))  # "0 MIG 3" only where a process is in a MIG instance
            lines.append(f"  {'GPU':>{width}}  {'PID':>8}  {'GPU mem':>8}  {'user':<10}  command")
            for process, place in zip(snap["processes"], where):
                memory = process.get("gpu_memory")
                mem = units.NA if memory is None else units.gib(memory) + " GiB"
                lines.append(
                    f"  {place:>{width}}  {process['pid']:>8}  {mem:>8}  {(process.get('user') or '-')[:10]:<10}  "
                    f"{(process.get('command') or '')[:80]}"
                )
        else:
            lines.append("  none")
    else:
        lines.append(f"No GPU: {snap['nvml']}. Host telemetry below still works.")
    host = snap["host"]
    per_cpu = " ".join(f"{v:.0f}" for v in host.get("per_cpu") or [])
    load = " ".join(f"{v:.2f}" for v in host.get("load") or []) or "N/A"
    lines += [
        "",
        f"Host: {len(host.get('per_cpu') or [])} CPUs at {host.get('cpu', 0):.0f}% (per core: {per_cpu}), "
        f"memory {units.gib(host.get('mem_used'))}/{units.gib(host.get('mem_total'))} GiB, load {load}",
    ]
    return "\n".join(line.rstrip() for line in lines) + "\n"
