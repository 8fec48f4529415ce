"""Where the run ran and what it planned: the environment and the plan (summary.md's first parts: the host,
the versions, what the job was given against what it used at its peak, how the ranks were bound), the
topology matrix and the nodes of a multi-node sweep."""

from __future__ import annotations

from typing import Any

from ddptop import units
from ddptop.analysis.job_use import FEW_CORES_BUSY, LITTLE_MEMORY_USED, NEAR_MEMORY_LIMIT
from ddptop.protocol.kernel_files import cpu_ranges
from ddptop.report.blocks import Block, Verbatim
from ddptop.report.schema import PlanRecord, Summary
from ddptop.telemetry.topology import Topology, format_matrix


def environment_markdown(summary: Summary) -> list[str]:
    env = summary.environment
    versions = env.versions
    return [
        f"- host: {env.hostname or '?'} ({env.platform or '?'})",
        f"- CPU: {env.cpu_model or '?'}, {env.usable_cpus if env.usable_cpus is not None else '?'} usable cores",
        f"- GPUs: {', '.join(g['name'] for g in env.gpus) or 'none'}"
        + (f" (driver {env.driver})" if env.driver else "")
        + (f"; NVML: {env.nvml}" if env.nvml not in (None, "ok") else ""),
        f"- torch {versions.get('torch', '?')}, torchvision {versions.get('torchvision', '?')}, "
        f"torch built for CUDA {versions.get('cuda') or '-'}, cuDNN {versions.get('cudnn') or '-'}, NCCL {versions.get('nccl') or '-'}",
        f"- ddptop {env.ddptop or '?'}, Python {env.python or '?'}",
        *_launch_setup_lines(env.launch_setup),
        *_allocation_lines(summary),
        "",
    ]


def _allocation_lines(summary: Summary) -> list[str]:
    """What the job was given (environment.allocation) and what the run used at its peak
    (environment.peak_use), and what the two say side by side; nothing for a summary saved without them."""
    saved = summary.environment.to_json()
    given = saved.get("allocation") if isinstance(saved.get("allocation"), dict) else None
    used = saved.get("peak_use") if isinstance(saved.get("peak_use"), dict) else None
    lines = []
    if given is not None:
        lines.append(f"- given: {_given_text(given, len(summary.environment.gpus))}")
    if used is not None and (used_text := _used_text(used)):
        lines.append(f"- used at peak: {used_text}")
    if given is not None and used is not None and (notes := _use_notes(given, used)):
        lines.append(f"- note: {'; '.join(notes)}")
    return lines


def given_cores(given: dict[str, Any]) -> float | None:
    """The cores the job may keep busy: its CPUs, or its CPU quota where that is fewer."""
    cores, quota = given.get("cores_count"), given.get("cpu_quota_cores")
    found = [float(v) for v in (cores, quota) if isinstance(v, (int, float)) and v > 0]
    return min(found) if found else None


def _given_text(given: dict[str, Any], gpus: int) -> str:
    parts = []
    if isinstance(given.get("cores_count"), int):
        cores = given.get("cores") or []
        parts.append(f"{given['cores_count']} cores" + (f" (affinity {cpu_ranges(cores)})" if cores else ""))
    if isinstance(given.get("cpu_quota_cores"), (int, float)):
        parts.append(f"CPU quota {given['cpu_quota_cores']:.3g} cores (cgroup)")
    if given.get("memory_limit_bytes") is not None:
        parts.append(f"memory limit {units.binary_bytes(given['memory_limit_bytes'])} (cgroup)")
    elif given.get("memory_total_bytes") is not None:
        parts.append(f"no memory limit ({units.binary_bytes(given['memory_total_bytes'])} on the host)")
    visible = given.get("gpus_visible")
    parts.append(units.count(gpus, "GPU") + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible is not None else ""))
    text = ", ".join(parts)
    slurm = given.get("slurm")
    if isinstance(slurm, dict) and slurm:
        text += f" — SLURM job {slurm.get('job_id', '?')}" + (f": {', '.join(found)}" if (found := _slurm_parts(slurm)) else "")
    return text


def _slurm_parts(slurm: dict[str, Any]) -> list[str]:
    parts = []
    if isinstance(slurm.get("job_num_nodes"), int) and slurm["job_num_nodes"] > 1:
        parts.append(units.count(slurm["job_num_nodes"], "node"))
    if slurm.get("cpus_on_node") is not None:
        parts.append(f"{units.count(slurm['cpus_on_node'], 'CPU')} on this node")
    if slurm.get("ntasks") is not None and slurm.get("cpus_per_task") is not None:
        parts.append(f"{units.count(slurm['ntasks'], 'task')} of {units.count(slurm['cpus_per_task'], 'CPU')}")
    elif slurm.get("cpus_per_task") is not None:
        parts.append(f"{units.count(slurm['cpus_per_task'], 'CPU')} per task")
    for key, what in (("mem_per_node_mib", "per node"), ("mem_per_cpu_mib", "per CPU")):
        mib = slurm.get(key)
        if isinstance(mib, int):
            parts.append(f"{units.binary_bytes(mib * units.MIB) if mib else 'all memory'} {what}")
    if slurm.get("gpus_on_node") is not None:
        parts.append(f"{units.count(slurm['gpus_on_node'], 'GPU')} on this node")
    elif slurm.get("gpus_per_node") is not None:
        parts.append(f"{units.count(slurm['gpus_per_node'], 'GPU')} per node")
    if slurm.get("job_gpus") is not None:
        parts.append(f"GPU ids {slurm['job_gpus']}")
    return parts


def _used_text(used: dict[str, Any]) -> str:
    figures = []  # (text, the configuration it came from)
    if used.get("cores_busy") is not None:
        figures.append((f"{used['cores_busy']:.1f} cores busy", used.get("cores_busy_config")))
    if used.get("rss_bytes") is not None:
        figures.append((f"{units.binary_bytes(used['rss_bytes'])} RSS", used.get("rss_config")))
    if used.get("gpu_memory_bytes") is not None:
        gpus = used.get("gpus") or 1
        figures.append((f"{units.binary_bytes(used['gpu_memory_bytes'])} GPU memory"
                        + (f" on the fullest of {gpus} GPUs" if gpus > 1 else ""), used.get("gpu_memory_config")))
    if not figures:
        return ""
    if len({config for _, config in figures}) == 1:
        config = figures[0][1]
        return ", ".join(text for text, _ in figures) + (f" ({config})" if config else "")
    return ", ".join(text + (f" ({config})" if config else "") for text, config in figures)


def _use_notes(given: dict[str, Any], used: dict[str, Any]) -> list[str]:
    """Where the run used far less than the job was given, or came near a limit: observations, each short."""
    notes = []
    cores, busy = given_cores(given), used.get("cores_busy")
    if cores is not None and isinstance(busy, (int, float)) and busy < FEW_CORES_BUSY * cores:
        notes.append(f"the busiest configuration kept {busy:.1f} of the {cores:g} cores given busy")
    limit, rss = given.get("memory_limit_bytes"), used.get("rss_bytes")
    if isinstance(limit, int) and limit > 0 and isinstance(rss, int):
        share = rss / limit
        if share >= NEAR_MEMORY_LIMIT:
            # the ranks' peaks summed: shared pages count once per rank, so this is an upper bound
            notes.append(f"the ranks' RSS came to at most {units.percent(share)} of the memory limit")
        elif share < LITTLE_MEMORY_USED:
            notes.append(f"the ranks' RSS stayed at or below {units.percent(share)} of the memory limit")
    return notes


def _launch_setup_lines(setup: dict[str, Any]) -> list[str]:
    """How the ranks were bound, and whether the GPU setup of the launches differed (summaries before these
    were recorded: nothing)."""
    hows = sorted({r["binding"] for e in setup.values() for r in (e.get("ranks") or {}).values() if r.get("binding")})
    gpu = {repr(sorted(e["gpu_setup"].items())) for e in setup.values() if isinstance(e.get("gpu_setup"), dict)}
    lines = [f"- ranks' CPUs: {'; '.join(hows)} (each rank's: environment.launch_setup)"] if hows else []
    if len(gpu) > 1:
        lines.append("- the launches' GPU setup (cuDNN flags, NCCL environment) differs: environment.launch_setup")
    return lines


def _measured_how(plan: PlanRecord) -> str:
    if plan.time_budget:
        return f"time budget {plan.time_budget} s"
    if plan.iters is not None:
        return f"{plan.iters} measured steps"
    return (f"measured to ±{plan.precision or 0:.1%} of the median ({plan.min_iters}-{plan.max_iters} steps, at most "
            f"{plan.max_time_per_config or 0:g} s)")


def _splits_text(plan: PlanRecord) -> str:
    """The CPU's ranks x threads splits of a thread sweep or of --devices cpu,cuda, and a device left out."""
    text = ""
    if plan.cpu_grid:
        where = "; the CPU beside them" if "cuda" in plan.devices else ""
        text += f"{where}; ranks x threads on the CPU: {', '.join(f'{n}x{t}' for n, t in plan.cpu_grid)}"
    for device, why in plan.devices_skipped.items():
        text += f"; {device} not measured: {why}"
    return text


def plan_markdown(summary: Summary) -> list[str]:
    plan = summary.plan
    return [
        f"- models: {', '.join(plan.models)}; batch sizes: {', '.join(map(str, plan.batch_sizes))} "
        f"({'per rank, weak' if plan.scaling == 'weak' else 'global, strong'} scaling)",
        f"- world sizes: {', '.join(map(str, plan.world_sizes))} on {plan.device}; "
        f"backends: {', '.join(plan.backends)}" + _splits_text(plan),
        f"- image {plan.image_size} px, {plan.num_classes} classes, "
        f"warm-up {plan.warmup if plan.warmup is not None else 'auto'}, "
        + _measured_how(plan)
        + (f", {plan.launches_per_config} launches per configuration" if (plan.launches_per_config or 1) > 1
           else f", {plan.rounds} rounds in one launch" if (plan.rounds or 1) > 1 else "")
        + f", bucket_cap_mb {', '.join(f'{c:g}' for c in plan.bucket_caps())}"
        + (f", AMP {plan.amp}" if plan.amp else "")
        + (", channels_last" if plan.channels_last else ""),
        "",
    ]


def topology_text(summary: Summary) -> str:
    """The topology matrix the summary saved (PyTorch's DDP benchmark prints it before its results)."""
    data = summary.topology
    if not data:
        return "Topology: not recorded\n"
    topo = Topology.from_json(data)
    if not topo.devices:
        return f"Topology: {topo.problem or 'no GPU or RDMA NIC found'}\n"
    return "--- topology (nvidia-smi topo -m) ---\n\n" + format_matrix(topo)


def topology_block(summary: Summary) -> Block:
    return Block(None, [Verbatim(topology_text(summary))])


def nodes_text(summary: Summary) -> str:
    """A multi-node sweep: each node, its process and what its torchrun agents did."""
    nodes = summary.nodes
    if not nodes:
        return ""
    lines = [f"Nodes ({len(nodes)}; launches on one node ran on node 0)"]
    for node in nodes:
        where = f"{node.host or '?'} pid {node.pid or '?'}"
        if node.problem:
            lines.append(f"  node {node.node_rank}  {where}: {node.problem}")
            continue
        done = ", ".join(f"{l.launch} {l.status}" for l in node.launches) or "no launch"
        lines.append(f"  node {node.node_rank}  {where} ({node.role}): {done}")
    return "\n".join(lines) + "\n"


def nodes_block(summary: Summary) -> Block:
    found = nodes_text(summary)
    return Block(None, [Verbatim(found)]) if found else Block()
