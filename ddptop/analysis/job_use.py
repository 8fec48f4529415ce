"""What a run used at its peak: the most CPU cores its ranks kept busy, their largest total memory (RSS) and
the fullest GPU's memory, each over the configurations' telemetry, with the configuration it came from.

Pure functions over the summary's configurations as JSON (``summary.json``'s ``configs``, or the entries
``ddptop.report.build`` is making), so that build stores it as the environment's ``peak_use`` beside what
the job was given (the environment's ``allocation``: ``ddptop.telemetry.allocation``), and the report sets
the two side by side.

Per configuration, from its telemetry (``ddptop.telemetry.timeline.window_figures``):

- cores busy: the sum over its ranks of each rank's mean CPU (percent of one core) over the configuration's
  time, in cores. A mean over the readings, not the busiest instant between two readings.
- RSS: the sum over its ranks of each rank's peak RSS. Pages the ranks share (the libraries they map) count
  once per rank, and the peaks need not coincide: a bound from above on what the ranks held at once.
- GPU memory: the memory in use on its fullest GPU (NVML's readings, or the allocator's peak where that is
  larger: the load table's "GPU mem peak"), and the GPUs it ran on. The telemetry keeps the fullest GPU's
  figure, not every GPU's, so the total over its GPUs is known only as a bound: that figure times the GPUs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

KEYS = ("cores_busy", "cores_busy_config", "rss_bytes", "rss_config", "gpu_memory_bytes", "gpu_memory_config",
        "gpu_memory_source", "gpus", "gpu_memory_total_at_most_bytes")

# the shares at which the report remarks on what the run used at its peak against what the job was given
FEW_CORES_BUSY = 0.5  # cores busy at peak below this share of the cores given
LITTLE_MEMORY_USED = 0.25  # the ranks' RSS at peak below this share of the memory limit
NEAR_MEMORY_LIMIT = 0.9  # ... at or above this share


def config_use(config: Mapping[str, Any]) -> dict[str, Any]:
    """One configuration's cores busy, total RSS and fullest GPU's memory (None: not sampled)."""
    load = config.get("telemetry")
    if not isinstance(load, Mapping):
        return {"cores_busy": None, "rss_bytes": None, "gpu_memory_bytes": None, "gpu_memory_source": None,
                "gpus": 0}
    ranks = [r for r in (load.get("ranks") or {}).values() if isinstance(r, Mapping)]
    cpus = [float(r["cpu_mean"]) for r in ranks if isinstance(r.get("cpu_mean"), (int, float))]
    rss = [int(r["peak_rss_bytes"]) for r in ranks if isinstance(r.get("peak_rss_bytes"), (int, float))
           and r["peak_rss_bytes"] > 0]
    gpus = [g for g in load.get("gpus") or () if isinstance(g, int)]
    memory, source = load.get("mem_peak_shown_bytes"), load.get("mem_peak_source")
    if memory is None:  # a summary saved before the shown figure was stored: NVML's own
        memory, source = load.get("mem_peak_bytes"), "nvml" if load.get("mem_peak_bytes") is not None else None
    return {
        "cores_busy": sum(cpus) / 100.0 if cpus else None,
        "rss_bytes": sum(rss) if rss else None,
        "gpu_memory_bytes": int(memory) if gpus and isinstance(memory, (int, float)) else None,
        "gpu_memory_source": source if gpus and memory is not None else None,
        "gpus": len(gpus),
    }


def peak_use(configs: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """The run's peak over its configurations, each figure with the configuration (its id) it came from:
    cores_busy, rss_bytes, gpu_memory_bytes (the fullest GPU; None where no GPU ran), gpu_memory_source,
    gpus (of that configuration) and gpu_memory_total_at_most_bytes (gpu_memory_bytes times gpus)."""
    found: dict[str, Any] = dict.fromkeys(KEYS)
    for config in configs:
        if not isinstance(config, Mapping):
            continue
        name = config.get("config_id")
        use = config_use(config)
        for key in ("cores_busy", "rss_bytes"):
            if use[key] is not None and (found[key] is None or use[key] > found[key]):
                found[key] = use[key]
                found[f"{key.removesuffix('_bytes')}_config"] = name
        if use["gpu_memory_bytes"] is not None and (found["gpu_memory_bytes"] is None
                                                    or use["gpu_memory_bytes"] > found["gpu_memory_bytes"]):
            found.update(gpu_memory_bytes=use["gpu_memory_bytes"], gpu_memory_config=name,
                         gpu_memory_source=use["gpu_memory_source"], gpus=use["gpus"],
                         gpu_memory_total_at_most_bytes=use["gpu_memory_bytes"] * use["gpus"])
    if found["cores_busy"] is not None:
        found["cores_busy"] = round(found["cores_busy"], 3)
    return found


def add_peak_use(environment: dict[str, Any], configs: Iterable[Mapping[str, Any]]) -> None:
    """Store the run's peak as ``environment["peak_use"]``: the summary's environment and configurations as
    JSON (``ddptop.report.build``'s ``env`` and ``entries``, or a loaded ``summary.json``'s)."""
    environment["peak_use"] = peak_use(configs)
