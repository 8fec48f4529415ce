"""Host and rank load from psutil: CPU per core, memory, load average; per rank CPU %, RSS and threads.

CPU percentages are measured between two calls (psutil keeps the previous times per ``Process`` object),
so the sampler keeps one ``Process`` per PID and the first reading of a new process has no CPU % yet.
A PID is only trusted while its creation time is unchanged, so a recycled PID is never mistaken for a rank.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import psutil


@dataclass(frozen=True)
class RankProcess:
    """A rank of a running launch, as its hello event introduced it."""

    pid: int
    rank: int
    launch: str
    local_rank: int | None = None
    device: str | None = None  # "cuda:<local rank>" or "cpu"
    cuda_visible_devices: str | None = None  # as the rank saw it, to find its GPU without NVML's PID list
    host: str = ""


class HostSampler:
    def __init__(self) -> None:
        self._processes: dict[int, psutil.Process] = {}
        self._self = psutil.Process()
        self._self.cpu_percent(None)
        psutil.cpu_percent(None, percpu=True)  # the next call measures from here

    def host(self) -> dict[str, Any]:
        per_cpu = psutil.cpu_percent(None, percpu=True)
        memory = psutil.virtual_memory()
        try:
            load = list(os.getloadavg())
        except OSError:
            load = None
        return {
            "cpu": round(sum(per_cpu) / len(per_cpu), 1) if per_cpu else None,
            "per_cpu": [round(v, 1) for v in per_cpu],
            "mem_used": int(memory.total - memory.available),
            "mem_total": int(memory.total),
            "load": [round(v, 2) for v in load] if load else None,
            "ddptop_cpu": round(self._self.cpu_percent(None), 1),  # this process's own cost
        }

    def ranks(self, wanted: list[RankProcess]) -> list[dict[str, Any]]:
        readings = []
        alive = set()
        for ref in wanted:
            process, fresh = self._process(ref.pid)
            if process is None:
                continue
            try:
                with process.oneshot():
                    cpu = process.cpu_percent(None)
                    reading = {
                        "pid": ref.pid,
                        "rank": ref.rank,
                        "launch": ref.launch,
                        "cpu": None if fresh else round(cpu, 1),  # a first call has nothing to compare with
                        "rss": int(process.memory_info().rss),
                        "threads": process.num_threads(),
                        "status": process.status(),
                    }
            except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                self._processes.pop(ref.pid, None)
                continue
            alive.add(ref.pid)
            readings.append(reading)
        for pid in list(self._processes):
            if pid not in alive:
                del self._processes[pid]
        return readings

    def _process(self, pid: int) -> tuple[psutil.Process | None, bool]:
        """The cached Process for a PID (and False), or a new one (and True)."""
        process = self._processes.get(pid)
        try:
            if process is not None and process.is_running():  # is_running also checks the creation time
                return process, False
            process = psutil.Process(pid)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            self._processes.pop(pid, None)
            return None, False
        self._processes[pid] = process
        return process, True
