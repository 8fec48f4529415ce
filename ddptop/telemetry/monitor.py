"""The telemetry monitor: one background thread sampling GPUs (NVML) and host/ranks (psutil).

Each tick makes one ``telemetry`` record (wire format, rank -1) with every GPU's reading, the host's load
and each running rank's process load, each rank tied to its GPU (NVML's process list, or the rank's
``cuda:<local rank>`` under its CUDA_VISIBLE_DEVICES when NVML cannot see its PID, as in containers).
A process on a GPU that is not a rank is marked ``"foreign": true`` when NVML's PIDs are this PID
namespace's (a rank on that GPU was found by its PID), and ``"foreign": "unknown"`` when they are not (the
ranks on that GPU were placed through CUDA_VISIBLE_DEVICES: NVML shows host PIDs, which cannot be told
apart). A GPU process of this ddptop's own process tree (a new launch's rank whose hello is not read yet) is
marked ``"launch": true``, never foreign. The host part says how much CPU other processes took (``ddptop.telemetry.host``).
Records are appended to ``telemetry.jsonl`` in the run directory as they are taken, so the timeline
survives a crash, and the last ``keep`` stay in memory for live views. Where the file cannot take them
(a full disk, a quota), ``not_saved`` says why and every later record is kept in ``unsaved`` for the
summary and for the fallback directory.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
from dataclasses import asdict
from typing import Any, Callable

import psutil

from ddptop.telemetry import nvml as nv
from ddptop.telemetry.gpu import GpuReading, GpuSampler
from ddptop.telemetry.host import HostSampler, RankProcess
from ddptop.telemetry.inventory import filter_visible
from ddptop.telemetry.running_peak import PeakUse
from ddptop.protocol.wire import EventsUnwritable, EventWriter, make_event

DEFAULT_INTERVAL = 1.0
# the interval while a configuration's steps run on a GPU (``fast_while``): a measured window of a second gets
# readings of its own, and NVML's memory in use more chances at its peak (docs/telemetry.md: what it costs)
FAST_INTERVAL = 0.25
UNSAVED_LIMIT = 100_000  # records kept in memory once the file is full (~300 MB at most)


def own_process_tree() -> set[int]:
    """The PIDs of this process's descendants (its launches' agents and ranks), read when NVML lists a GPU process
    that is not a known rank; empty where they cannot be listed."""
    try:
        return {child.pid for child in psutil.Process().children(recursive=True)}
    except psutil.Error:
        return set()


class Monitor:
    def __init__(
        self,
        interval: float = DEFAULT_INTERVAL,
        timeline_path: str | None = None,
        nvml_module: Any | None = None,
        rank_processes: Callable[[], list[RankProcess]] = list,
        keep: int = 600,
        fast_while: Callable[[], bool] | None = None,
        fast_interval: float = FAST_INTERVAL,
    ) -> None:
        self.interval = interval
        self.fast_while = fast_while  # True while steps run on a GPU: sample every fast_interval then
        self.fast_interval = min(fast_interval, interval)
        self.timeline_path = timeline_path
        self.rank_processes = rank_processes
        self.gpu = GpuSampler(nvml_module)
        self.host: HostSampler | None = None
        self.records: collections.deque[dict[str, Any]] = collections.deque(maxlen=keep)
        self._peak = PeakUse()  # over every reading, not only those ``records`` keeps
        self.sample_cpu_s: collections.deque[float] = collections.deque(maxlen=256)  # own CPU per tick
        self.errors = 0
        self.last_error: str | None = None
        self._writer: EventWriter | None = None
        self.not_saved: str | None = None  # why the timeline file stopped taking records
        self.unsaved: list[dict[str, Any]] = []  # the records since, for the summary and the fallback
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._opened = False
        self._info_written = False
        self._info: dict[str, Any] | None = None

    # -- lifecycle ----------------------------------------------------------------------------------------
    def open(self) -> "Monitor":
        if not self._opened:
            self.gpu.open()
            self.host = HostSampler()
            if self.timeline_path:
                self._writer = EventWriter(self.timeline_path, -1, 0.0)
            self._opened = True
        return self

    def info(self) -> dict[str, Any]:
        """What does not change during a run: which NVML, which GPUs (built once, after open)."""
        if self._info is not None:
            return self._info
        info = {
            "fake": self.gpu.fake,
            "fake_label": nv.FAKE_LABEL if self.gpu.fake else None,
            "nvml": self.gpu.problem or "ok",
            "driver": self.gpu.driver,
            "interval": self.interval,
            "gpus": [asdict(s) for s in self.gpu.static],
        }
        if self.fast_while is not None:
            info["fast_interval"] = self.fast_interval
        if self._opened:
            self._info = info
        return info

    def start(self) -> "Monitor":
        """Sample in a thread of its own, which also opens NVML (its first call can take a while: never on
        the caller's thread, the UI's). Starting a started monitor does nothing."""
        if self._thread is None:
            self._thread = threading.Thread(target=self._loop, name="ddptop-telemetry", daemon=True)
            self._thread.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop sampling. A sampler thread still inside an NVML call after ``timeout`` (a hung driver) keeps
        NVML: freeing its event set or shutting the library down under that call is undefined behaviour in
        the driver, and the process's exit releases both anyway."""
        self._stop.set()
        stuck = False
        if self._thread is not None:
            self._thread.join(timeout=max(5.0, 3 * self.interval) if timeout is None else timeout)
            stuck = self._thread.is_alive()
            self._thread = None
        if self._writer is not None and not stuck:
            with contextlib.suppress(EventsUnwritable):  # said in not_saved already
                self._writer.close()
            self._writer = None
        if stuck:
            self.errors += 1
            self.last_error = "the telemetry thread was stuck in an NVML call at the end; NVML left open"
            return
        self.gpu.close()

    def __enter__(self) -> "Monitor":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def _loop(self) -> None:
        while not self._stop.is_set():
            began = time.monotonic()
            try:
                self.sample_once()
            except Exception as exc:  # a sampler bug must not end the timeline, nor the sweep
                self.errors += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
            # until the next tick, asking every fast interval: steps that start mid-wait are read fast from then on
            while True:
                left = began + self.current_interval() - time.monotonic()
                if left <= 0 or self._stop.wait(min(left, self.fast_interval)):
                    break

    def current_interval(self) -> float:
        """Seconds from one tick's start to the next: ``fast_interval`` while ``fast_while()`` says steps run on
        a GPU, ``interval`` otherwise (a ``fast_while`` that fails counts as no)."""
        if self.fast_while is None:
            return self.interval
        try:
            fast = bool(self.fast_while())
        except Exception:  # a session being rebuilt: read at the usual pace
            fast = False
        return self.fast_interval if fast else self.interval

    # -- sampling -----------------------------------------------------------------------------------------------
    def sample_once(self) -> dict[str, Any]:
        self.open()
        assert self.host is not None
        cpu_before = time.thread_time()
        wanted = self.rank_processes()
        before = time.time()
        gpus = self.gpu.sample()
        # the record's time is the GPUs': their energy counters are differenced over records' times, and the
        # host's and the ranks' readings after them can take a while on a busy node (0.2 s once on CI: +43%)
        read_t = (before + time.time()) / 2
        host = self.host.host(ref.pid for ref in wanted)
        ranks = self.host.ranks(wanted)
        self._attach_ranks(gpus, ranks, wanted)
        fields: dict[str, Any] = {"gpus": [g.to_json() for g in gpus], "host": host, "ranks": ranks}
        if not self._info_written:
            fields["info"] = self.info()  # the first record says which NVML and GPUs the rest are about
            self._info_written = True
        record = make_event("telemetry", -1, t=read_t, **fields)  # the same record in memory and on disk
        with self._lock:
            self.records.append(record)
            self._peak.add(record)
        if self.not_saved is not None:
            self._keep_unsaved(record)
        elif self._writer is not None:
            self._writer.emit_event(record)
            try:
                self._writer.flush()
            except EventsUnwritable as exc:  # a full disk: the view says so, the records stay in memory
                self.not_saved = str(exc)
                self._keep_unsaved(record)
        self.sample_cpu_s.append(time.thread_time() - cpu_before)
        return record

    def _keep_unsaved(self, record: dict[str, Any]) -> None:
        if len(self.unsaved) >= UNSAVED_LIMIT:  # hours at a fast interval: thin to every other record
            del self.unsaved[::2]
        self.unsaved.append(record)

    def _attach_ranks(self, gpus: list[GpuReading], ranks: list[dict[str, Any]], wanted: list[RankProcess]) -> None:
        by_pid = {r["pid"]: r for r in ranks}
        for reading in gpus:
            for process in reading.processes:
                rank = by_pid.get(process["pid"])
                if rank is not None:
                    process["rank"] = rank["rank"]
                    # one process on several GPUs (DataParallel): every one of them, the first as "gpu"
                    rank.setdefault("gpus", []).append(reading.index)
                    rank.setdefault("gpu", reading.index)
            for instance in reading.mig:  # which MIG instance each rank is on, for the GPU panel
                for process in instance.get("processes") or ():
                    rank = by_pid.get(process["pid"])
                    if rank is not None:
                        process["rank"] = rank["rank"]
                        rank.setdefault("gpu", reading.index)
        refs = {ref.pid: ref for ref in wanted}
        for rank in ranks:
            ref = refs.get(rank["pid"])
            if "gpu" in rank or ref is None or not (ref.device or "").startswith("cuda:"):
                continue
            try:
                local = int((ref.device or "").split(":", 1)[1])
            except ValueError:
                continue
            visible = filter_visible(self.gpu.static, ref.cuda_visible_devices)
            if 0 <= local < len(visible):
                rank["gpu"] = visible[local].index
        placed = {rank["gpu"] for rank in ranks if "gpu" in rank}
        own: set[int] | None = None
        for reading in gpus:
            tied = any("rank" in process for process in reading.processes)
            for process in reading.processes:
                if "rank" in process:
                    continue
                if own is None:
                    own = own_process_tree()
                if process["pid"] in own:
                    # a rank of a launch this ddptop started whose hello is not read yet: NVML lists it on its GPU
                    # as soon as it opens a context, before it says hello
                    process["launch"] = True
                    continue
                # PIDs comparable (a rank matched here) or no rank on this GPU: surely not a rank
                process["foreign"] = True if tied or reading.index not in placed else "unknown"

    def refresh(self) -> None:
        """Nothing to read: the thread fills ``records`` (the same interface as TimelineFollower)."""

    def latest(self) -> dict[str, Any] | None:
        with self._lock:
            return self.records[-1] if self.records else None

    def recent(self, count: int | None = None) -> list[dict[str, Any]]:
        with self._lock:
            items = list(self.records)
        return items if count is None else items[-count:]

    def peak(self) -> dict[str, Any]:
        """What the ranks used at their peak over every reading so far (``PeakUse``)."""
        with self._lock:
            return self._peak.as_dict()
