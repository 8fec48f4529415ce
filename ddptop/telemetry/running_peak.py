"""What the ranks used at their peak so far, from the telemetry readings as they arrive (no Textual, no torch).

The live view's host line says what the job was given beside this; the saved summary's own peak
(``ddptop.analysis.job_use``) comes from the configurations' measured windows instead. A reading counts:
the ranks' CPU added up (in cores, from psutil's percent of one core), their RSS added up (an upper bound:
pages they share count once per rank), and the most memory used on any GPU that holds a rank.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class PeakUse:
    """The largest figures over every reading given to ``add``; ``as_dict`` holds None for one never read."""

    def __init__(self) -> None:
        self.cores_busy: float | None = None
        self.rss_bytes: int | None = None
        self.gpu_memory_bytes: int | None = None

    def add(self, record: Mapping[str, Any]) -> None:
        ranks = [r for r in _listed(record.get("ranks")) if isinstance(r, Mapping)]
        cpu = [float(r["cpu"]) for r in ranks if isinstance(r.get("cpu"), (int, float))]
        rss = [int(r["rss"]) for r in ranks if isinstance(r.get("rss"), (int, float))]
        if cpu:
            self.cores_busy = max(self.cores_busy or 0.0, sum(cpu) / 100.0)
        if rss:
            self.rss_bytes = max(self.rss_bytes or 0, sum(rss))
        # a damaged line may hold any JSON in any place: only what has the shape a reading has counts
        with_ranks = {g for r in ranks for g in _listed(r.get("gpus")) if isinstance(g, int)}
        for gpu in _listed(record.get("gpus")):
            if not isinstance(gpu, Mapping) or not isinstance(gpu.get("index"), int):
                continue
            used = gpu.get("mem_used")
            if gpu["index"] in with_ranks and isinstance(used, (int, float)):
                self.gpu_memory_bytes = max(self.gpu_memory_bytes or 0, int(used))

    def as_dict(self) -> dict[str, Any]:
        return {"cores_busy": self.cores_busy, "rss_bytes": self.rss_bytes, "gpu_memory_bytes": self.gpu_memory_bytes}


def _listed(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
