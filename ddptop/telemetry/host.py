"""Host and rank load from psutil: CPU per core, memory, load average; per rank CPU %, RSS and threads.

CPU percentages are measured between two calls (psutil keeps the previous times per ``Process`` object),
so the sampler keeps one ``Process`` per PID and the first reading of a new process has no CPU % yet.
A PID is only trusted while its creation time is unchanged, so a recycled PID is never mistaken for a rank.

Interference: each tick also says how much CPU the node gave to processes that are neither ddptop (with its
children: torchrun, the ranks, their workers) nor a rank: the system-wide busy CPU time since the previous
tick (``psutil.cpu_times``: user, nice, system) minus what ddptop's process tree used, in cores. ddptop's tree
is followed from the PIDs it knows (itself and the ranks) through ``/proc/<pid>/task/<tid>/children``, so a
tick reads a few small files per own process and never scans every process of the node. A child that ended
since the previous tick still counts as ddptop's: its parent's ``children_user``/``children_system`` grow by
its lifetime CPU when it is reaped. IRQ and softirq time (network interrupts a gloo allreduce causes) and
time the hypervisor gave to other machines (``steal``, recorded on its own) are not "other processes".
Memory pressure: available memory and the bytes swapped in and out since the previous tick.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable

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
        self.own = OwnCpu()
        self._swap: tuple[int, int] | None = self._swap_counters()

    def host(self, rank_pids: Iterable[int] = ()) -> dict[str, Any]:
        per_cpu = psutil.cpu_percent(None, percpu=True)
        memory = psutil.virtual_memory()
        try:
            load = list(os.getloadavg())
        except OSError:
            load = None
        reading = {
            "cpu": round(sum(per_cpu) / len(per_cpu), 1) if per_cpu else None,
            "per_cpu": [round(v, 1) for v in per_cpu],
            "mem_used": int(memory.total - memory.available),
            "mem_total": int(memory.total),
            "load": [round(v, 2) for v in load] if load else None,
            "ddptop_cpu": round(self._self.cpu_percent(None), 1),  # this process's own cost
            "mem_available": int(memory.available),
        }
        reading.update(self.own.sample(rank_pids))
        swap = self._swap_counters()
        if swap is not None and self._swap is not None:
            reading["swap_in"] = max(0, swap[0] - self._swap[0])  # bytes since the previous tick
            reading["swap_out"] = max(0, swap[1] - self._swap[1])
        self._swap = swap
        return reading

    @staticmethod
    def _swap_counters() -> tuple[int, int] | None:
        """Bytes swapped in and out since boot: /proc/vmstat on Linux (psutil.swap_memory reads more)."""
        if _PROC:
            try:
                with open("/proc/vmstat", "rb") as handle:
                    text = handle.read()
                pages = [int(text[i + len(k):text.index(b"\n", i + 1)]) for k in (b"\npswpin ", b"\npswpout ")
                         if (i := text.find(k)) >= 0]
                if len(pages) == 2:
                    return pages[0] * _PAGE, pages[1] * _PAGE
            except (OSError, ValueError):
                pass
        try:
            swap = psutil.swap_memory()
        except (OSError, RuntimeError):  # no swap accounting here (some containers)
            return None
        return int(swap.sin), int(swap.sout)

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


_BUSY_FIELDS = ("user", "nice", "system")  # guest time is already inside user and nice on Linux
_PROC = sys.platform.startswith("linux") and os.path.exists(f"/proc/{os.getpid()}/task")
_TICK = os.sysconf("SC_CLK_TCK") if _PROC else 100
_PAGE = os.sysconf("SC_PAGE_SIZE") if _PROC else 4096
_RESCAN_EVERY = 10  # ticks between psutil child scans where /proc (and its children files) is missing


class OwnCpu:
    """CPU used by processes other than ddptop's tree and its ranks, in cores, between two ``sample`` calls.

    Each tracked process's time is user + system + children_user + children_system (the last two: its
    reaped children's lifetimes), so a child that ends between two ticks is still counted as ddptop's; when
    a tracked process ends and its tracked parent reaps it, what was already counted of it is taken back.
    On Linux one read of /proc/<pid>/stat per tracked process gives all of it; elsewhere psutil does.
    """

    def __init__(self, root: int | None = None) -> None:
        self.root = os.getpid() if root is None else root
        self._known: dict[int, tuple[float, int]] = {}  # pid -> (cpu seconds, parent pid)
        self._busy, self._steal = _system_times()
        self._t = time.monotonic()
        self._ticks = 0
        self._scan(set(), first=True)

    def sample(self, rank_pids: Iterable[int] = ()) -> dict[str, Any]:
        now = time.monotonic()
        busy, steal = _system_times()
        own = self._scan(set(rank_pids))
        elapsed = now - self._t
        result: dict[str, Any] = {}
        if elapsed > 0:
            result["own_cpu_cores"] = round(own / elapsed, 3)
            result["other_cpu_cores"] = round(max(0.0, (busy - self._busy) - own) / elapsed, 3)
            if steal is not None and self._steal is not None:
                result["steal_cores"] = round(max(0.0, steal - self._steal) / elapsed, 3)
        self._busy, self._steal, self._t = busy, steal, now
        return result

    def _scan(self, extra: set[int], first: bool = False) -> float:
        """Seconds of CPU ddptop's tree used since the previous scan; refreshes the tracked set."""
        self._ticks += 1
        pids = {self.root} | extra | set(self._known)
        if _PROC:
            for pid in list(pids):
                pids.update(_children(pid, every_thread=pid == self.root))
        elif first or self._ticks % _RESCAN_EVERY == 0:
            try:
                pids.update(p.pid for p in psutil.Process(self.root).children(recursive=True))
            except (psutil.Error, OSError):
                pass
        since = time.time() - (time.monotonic() - self._t)  # the previous scan, on the wall clock
        used = 0.0
        seen: dict[int, tuple[float, int]] = {}
        for pid in pids:
            found = _process_times(pid)
            if found is None:
                continue
            total, ppid, started = found
            entry = self._known.get(pid)
            if entry is not None:
                used += total - entry[0]
            elif not first and pid != self.root and started >= since:
                used += total  # new since the previous scan: all of its time is since then
            seen[pid] = (total, ppid)
        for pid, (total, ppid) in self._known.items():
            if pid not in seen and ppid in seen:
                used -= total  # reaped by a tracked parent, whose children_* now hold its whole life
        self._known = seen
        return max(0.0, used)


def _children(pid: int, every_thread: bool) -> list[int]:
    """Direct children from /proc: of every thread (ddptop starts torchrun from a worker thread), or of the
    main thread only (torchrun and the ranks fork from it), to keep a tick cheap."""
    found: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task") if every_thread else [str(pid)]
    except OSError:
        return found
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", "rb") as handle:
                found.extend(int(word) for word in handle.read().split())
        except (OSError, ValueError):
            continue
    return found


def _process_times(pid: int) -> tuple[float, int, float] | None:
    """(user + system + reaped children's user + system seconds, parent PID, start on the wall clock)."""
    if _PROC:
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                fields = handle.read().rsplit(b")", 1)[1].split()
            ticks = int(fields[11]) + int(fields[12]) + int(fields[13]) + int(fields[14])
            return ticks / _TICK, int(fields[1]), _boot_time() + int(fields[19]) / _TICK
        except (OSError, ValueError, IndexError):
            return None
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            times = process.cpu_times()
            total = times.user + times.system + getattr(times, "children_user", 0.0)
            return total + getattr(times, "children_system", 0.0), process.ppid(), process.create_time()
    except (psutil.Error, OSError):
        return None


_BOOT: list[float] = []


def _boot_time() -> float:
    if not _BOOT:
        _BOOT.append(psutil.boot_time())
    return _BOOT[0]


def _system_times() -> tuple[float, float | None]:
    times = psutil.cpu_times()
    busy = sum(getattr(times, name, 0.0) for name in _BUSY_FIELDS)
    steal = getattr(times, "steal", None)
    return busy, steal
