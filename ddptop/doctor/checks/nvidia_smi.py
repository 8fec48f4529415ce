"""nvidia-smi vs NVML: ``nvidia-smi --query-gpu`` lists the same GPUs, indices, names, memory and PCI bus IDs."""

from __future__ import annotations

from ddptop.doctor.commands import run_command
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.nvml_view import NvmlView
from ddptop.doctor.parsing import bare_uuid, last_line, parse_query_gpu
from ddptop.doctor.result import FAIL, OK, SKIPPED, WARN, Check, listed
from ddptop.telemetry.topology import sysfs_bdf

NAME = "nvidia-smi vs NVML"
MEMORY_TOLERANCE = 0.02  # nvidia-smi's memory.total against NVML's, as a fraction


def run(context: DoctorContext) -> Check:
    return check_nvidia_smi(context.view, context.smi)


def check_nvidia_smi(view: NvmlView, smi: str | None) -> Check:
    if smi is None:
        return Check(NAME, SKIPPED, "nvidia-smi is not on PATH")
    done = run_command([smi, "--query-gpu=index,name,uuid,memory.total,pci.bus_id", "--format=csv,noheader,nounits"],
                       60)
    listed_by_smi = parse_query_gpu(done.stdout) if done.returncode == 0 else []
    if view.unavailable and not view.gpus:
        if listed_by_smi:
            return Check(NAME, WARN, f"nvidia-smi lists {len(listed_by_smi)} GPU(s) but ddptop cannot read NVML "
                                     f"({view.unavailable}): no GPU telemetry or topology",
                         {"nvidia_smi": listed_by_smi})
        return Check(NAME, SKIPPED, "neither NVML nor nvidia-smi lists a GPU (nvidia-smi: "
                                    f"{last_line(done.stdout + done.stderr)})")
    if not listed_by_smi:
        return Check(NAME, FAIL, f"nvidia-smi --query-gpu gave no GPU (exit {done.returncode}: "
                                 f"{last_line(done.stderr or done.stdout)}) while NVML lists {len(view.gpus)}")
    ours = {bare_uuid(g.uuid): g for g in view.gpus}
    theirs = {bare_uuid(r["uuid"]): r for r in listed_by_smi}
    problems = [f"GPU {r['index']} ({r['uuid']}) listed by nvidia-smi, not by NVML"
                for key, r in theirs.items() if key not in ours]
    problems += [f"NVML's GPU {g.index} ({g.uuid}) not listed by nvidia-smi" for key, g in ours.items()
                 if key not in theirs]
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
    data = {"nvidia_smi": listed_by_smi, "mismatches": problems}
    if problems:
        return Check(NAME, FAIL, listed(problems), data)
    return Check(NAME, OK, f"{len(listed_by_smi)} GPU(s): indices, names, UUIDs, memory and PCI bus IDs agree", data)
