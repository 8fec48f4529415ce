"""``ddptop doctor``: what a user checks on a new node before trusting a sweep there.

Each check is ok, warn, fail or skipped, with one line saying why; the table is printed and saved as
doctor.json. NVML is read through ddptop's own door (``telemetry``); everything torch knows comes from a
subprocess (``bench_kernels.doctor_probe``), since this process never imports torch. What does not apply
(no GPU, no ``nvidia-smi``, no nccl-tests) is skipped with the reason, never an error.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from typing import Any

from ddptop import rundir
from ddptop.telemetry import nvml as nv

OK, WARN, FAIL, SKIPPED = "ok", "warn", "fail", "skipped"
LOOP_TOLERANCE = 0.03  # ddptop's kernel within 3% of the plain loop's median step
LOOP_STEPS = 30
TOPO_WORDS = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|N/A)$")


@dataclass
class Check:
    name: str
    status: str
    detail: str


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                          env=env)


def _plain_name(name: str) -> str:
    return name.removesuffix(" (FAKE)").strip()


# -- NVML and nvidia-smi -------------------------------------------------------------------------------------------


def check_nvml() -> tuple[Check, Any]:
    from ddptop.telemetry.inventory import read_inventory

    inventory = read_inventory()
    if inventory.problem and not inventory.gpus:
        return Check("NVML", SKIPPED, inventory.problem), inventory
    label = f" ({nv.FAKE_LABEL}: simulated node {os.environ.get(nv.FAKE_ENV)})" if inventory.fake else ""
    notes = f"; {'; '.join(inventory.notes)}" if inventory.notes else ""
    return Check("NVML", OK, f"{len(inventory.gpus)} GPU(s), driver {inventory.driver}{label}{notes}"), inventory


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id --format=csv,noheader,nounits``."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 4 and parts[0].isdigit():
            rows.append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2],
                         "memory_mib": int(float(parts[3])) if parts[3].replace(".", "").isdigit() else None})
    return rows


def parse_topo_matrix(text: str) -> dict[tuple[str, str], str]:
    """The cells of an ``nvidia-smi topo -m`` matrix keyed by (row, column)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.split() and line.split()[0].startswith("GPU0")), None)
    if header is None:
        return {}
    columns = [c for c in lines[header].split() if c not in ("CPU", "Affinity", "NUMA", "GPU", "NUMA Affinity")]
    cells: dict[tuple[str, str], str] = {}
    for line in lines[header + 1:]:
        parts = line.split()
        if not parts or parts[0].rstrip(":") == "Legend":
            break
        for column, value in zip(columns, parts[1:1 + len(columns)]):
            if TOPO_WORDS.match(value):
                cells[(parts[0], column)] = value
    return cells


def check_nvidia_smi(inventory: Any) -> list[Check]:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return [Check("nvidia-smi vs NVML", SKIPPED, "nvidia-smi is not on PATH")]
    if not inventory.gpus:
        return [Check("nvidia-smi vs NVML", SKIPPED, "NVML lists no GPU to compare")]
    checks = []
    done = _run([smi, "--query-gpu=index,name,uuid,memory.total,pci.bus_id", "--format=csv,noheader,nounits"], 60)
    listed = parse_query_gpu(done.stdout) if done.returncode == 0 else []
    if not listed:
        checks.append(Check("nvidia-smi vs NVML", FAIL, f"nvidia-smi --query-gpu gave nothing readable "
                                                         f"(exit {done.returncode}: {done.stderr.strip()[:120]})"))
    else:
        ours = {g.uuid: g for g in inventory.gpus if not g.is_mig}
        problems = []
        for row in listed:
            gpu = ours.get(row["uuid"])
            if gpu is None:
                problems.append(f"GPU {row['index']} ({row['uuid']}) not in NVML's list")
                continue
            if _plain_name(gpu.name) != row["name"]:
                problems.append(f"GPU {row['index']} named {row['name']!r} by nvidia-smi, {gpu.name!r} by NVML")
            if gpu.memory_total and row["memory_mib"] and abs(gpu.memory_total / 2**20 - row["memory_mib"]) > 1:
                problems.append(f"GPU {row['index']} memory {row['memory_mib']} MiB vs {gpu.memory_total >> 20} MiB")
        status = FAIL if problems else OK
        detail = "; ".join(problems[:3]) if problems else f"{len(listed)} GPU(s): names, UUIDs and memory agree"
        checks.append(Check("nvidia-smi vs NVML", status, detail))
    topo = _run([smi, "topo", "-m"], 60)
    theirs = parse_topo_matrix(topo.stdout) if topo.returncode == 0 else {}
    if not theirs:
        checks.append(Check("topo -m vs ddptop topo", SKIPPED, "nvidia-smi topo -m printed no matrix"))
        return checks
    from ddptop.telemetry.topology import read_topology

    matrix = read_topology().matrix
    mismatches = [f"{row}/{column}: nvidia-smi {word}, ddptop {matrix.get(row, {}).get(column, 'missing')}"
                  for (row, column), word in sorted(theirs.items())
                  if matrix.get(row, {}).get(column) != word]
    checks.append(Check("topo -m vs ddptop topo", FAIL if mismatches else OK,
                        "; ".join(mismatches[:3]) + (f" (+{len(mismatches) - 3} more)" if len(mismatches) > 3 else "")
                        if mismatches else f"{len(theirs)} cells agree"))
    return checks


# -- what torch sees -------------------------------------------------------------------------------------------------


def run_probe(loop_steps: int) -> tuple[dict[str, Any] | None, str | None]:
    command = [sys.executable, "-m", "bench_kernels.doctor_probe", "--loop-steps", str(loop_steps)]
    try:
        done = _run(command, 600)
    except subprocess.TimeoutExpired:
        return None, "the torch probe did not finish in 600 s"
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return None, f"the torch probe failed: {last[:200]}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), None
    except (ValueError, IndexError):
        return None, "the torch probe printed no JSON"


def check_versions(probe: dict[str, Any]) -> Check:
    v = probe["versions"]
    if v.get("torchvision") is None:
        return Check("torch / CUDA / NCCL", FAIL, f"torchvision does not import: {v.get('torchvision_error')}")
    return Check("torch / CUDA / NCCL", OK, f"torch {v['torch']}, CUDA {v.get('cuda') or '-'}, "
                                            f"NCCL {v.get('nccl') or '-'}, torchvision {v['torchvision']}")


def check_device_order(probe: dict[str, Any], inventory: Any) -> Check:
    devices = probe["devices"]
    if not devices:
        return Check("CUDA order vs NVML order", SKIPPED, "torch sees no CUDA device")
    nvml_order = [g.uuid for g in inventory.gpus if not g.is_mig]
    cuda_order = [d["uuid"] for d in devices]
    if None in cuda_order:
        return Check("CUDA order vs NVML order", SKIPPED, "this torch does not report device UUIDs")
    seen = [u for u in cuda_order if u in nvml_order]
    if seen == [u for u in nvml_order if u in seen]:
        return Check("CUDA order vs NVML order", OK, f"{len(seen)} device(s) in the same order")
    hint = "" if probe.get("cuda_device_order") == "PCI_BUS_ID" else " (ddptop sets CUDA_DEVICE_ORDER=PCI_BUS_ID " \
        "for its ranks; set it for your own scripts)"
    return Check("CUDA order vs NVML order", WARN, f"CUDA numbers the GPUs in another order than NVML{hint}")


def check_peer_access(probe: dict[str, Any]) -> Check:
    matrix = probe.get("peer_access") or []
    if not matrix:
        return Check("P2P access", SKIPPED, "fewer than two CUDA devices")
    from ddptop.telemetry.topology import read_topology

    links = read_topology().matrix
    off = [(a, b) for a, row in enumerate(matrix) for b, ok in enumerate(row) if ok is False]
    nvlinked_off = [(a, b) for a, b in off if links.get(f"GPU{a}", {}).get(f"GPU{b}", "").startswith("NV")]
    if nvlinked_off:
        return Check("P2P access", WARN, "no peer access between NVLinked GPUs " +
                     ", ".join(f"{a}-{b}" for a, b in nvlinked_off[:4]) + " (a container or driver setting?)")
    return Check("P2P access", OK, f"{len(matrix)} devices; no peer access for {len(off)} ordered pair(s)"
                 if off else f"every pair of {len(matrix)} devices has peer access")


def check_store(probe: dict[str, Any]) -> Check:
    store = probe.get("store")
    if not store:
        return Check("rendezvous store", SKIPPED, probe.get("store_error") or "not started")
    addresses = store["addresses"]
    loopback = all(a.startswith("127.") or a == "::1" for a in addresses) and addresses
    if loopback:
        return Check("rendezvous store", OK, f"a single-node launch's store listens on {', '.join(addresses)} only")
    return Check("rendezvous store", WARN, f"the store listens on {', '.join(addresses) or 'nothing'}: reachable "
                                           "from the network during a launch")


def check_reference_loop(probe: dict[str, Any], out_dir: str) -> Check:
    """ddptop's kernel against a plain DDP loop on the same configuration (resnet18, 32 px, batch 8, N=1)."""
    reference = probe.get("reference_loop")
    if not reference:
        return Check("kernel vs plain DDP loop", SKIPPED, "--skip-loop")
    run_dir = os.path.join(out_dir, "doctor-run")
    command = [sys.executable, "-m", "ddptop", "run", "--headless", "--out", run_dir, "--models", "resnet18",
               "--image-size", "32", "--num-classes", "10", "--batch-sizes", "8", "--world-sizes", "1",
               "--no-baseline", "--warmup", "3", "--iters", str(LOOP_STEPS), "--comm-iters", "0",
               "--no-collectives", "--telemetry-interval", "0"]
    done = _run(command, 600)
    try:
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
            config = json.load(handle)["configs"][0]
        ours = config["stats"]["sec_iter"]["p50"]
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return Check("kernel vs plain DDP loop", FAIL, f"ddptop's run gave no step time (exit {done.returncode})")
    ratio = ours / reference["p50_s"]
    words = (f"median step {ours * 1e3:.1f} ms vs {reference['p50_s'] * 1e3:.1f} ms for the plain loop: "
             f"ratio {ratio:.3f}")
    if abs(ratio - 1) <= LOOP_TOLERANCE:
        return Check("kernel vs plain DDP loop", OK, words)
    return Check("kernel vs plain DDP loop", WARN, words + f", outside ±{LOOP_TOLERANCE:.0%} (a busy or noisy "
                                                          "machine? run doctor again when it is quiet)")


def check_nccl_tests(inventory: Any) -> Check:
    binary = shutil.which("all_reduce_perf")
    if binary is None:
        return Check("nccl-tests all_reduce_perf", SKIPPED, "all_reduce_perf is not on PATH")
    if not inventory.gpus or inventory.fake:
        return Check("nccl-tests all_reduce_perf", SKIPPED, "no GPU to run it on")
    done = _run([binary, "-b", "64M", "-e", "64M", "-g", str(len(inventory.gpus))], 600)
    busbw = None
    for line in done.stdout.splitlines():
        parts = line.split()
        if parts and parts[0].isdigit() and len(parts) >= 8:
            busbw = float(parts[7])  # out-of-place busbw, GB/s (nccl-tests' column order)
    if busbw is None:
        return Check("nccl-tests all_reduce_perf", FAIL, f"no result line (exit {done.returncode})")
    return Check("nccl-tests all_reduce_perf", OK, f"64 MiB allreduce on {len(inventory.gpus)} GPUs: busbw "
                                                   f"{busbw:g} GB/s (compare ddptop's collective table)")


# -- the whole check ---------------------------------------------------------------------------------------------------


def run_doctor(out_dir: str, skip_loop: bool = False) -> list[Check]:
    checks: list[Check] = []
    nvml_check, inventory = check_nvml()
    checks.append(nvml_check)
    checks += check_nvidia_smi(inventory)
    probe, problem = run_probe(0 if skip_loop else LOOP_STEPS)
    if probe is None:
        checks.append(Check("torch probe", FAIL, problem or "no answer"))
    else:
        checks += [check_versions(probe), check_device_order(probe, inventory), check_peer_access(probe),
                   check_store(probe)]
        if skip_loop:
            checks.append(Check("kernel vs plain DDP loop", SKIPPED, "--skip-loop"))
        else:
            with tempfile.TemporaryDirectory(prefix="ddptop-doctor-") as scratch:
                checks.append(check_reference_loop(probe, scratch))
    checks.append(check_nccl_tests(inventory))
    return checks


def table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    return "\n".join(f"{c.status:<8} {c.name:<{width}}  {c.detail}" for c in checks) + "\n"


def save(checks: list[Check], out_dir: str) -> str:
    os.makedirs(out_dir, exist_ok=True)
    path = os.path.join(out_dir, "doctor.json")
    rundir.write_atomic(path, json.dumps({"checks": [asdict(c) for c in checks],
                                          "failed": sum(c.status == FAIL for c in checks)}, indent=2) + "\n")
    return path
