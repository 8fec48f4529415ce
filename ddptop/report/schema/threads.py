"""The CPU's answers as typed records (``ddptop.analysis.threads``): the thread curve per world size
(``--threads``), the best ranks x threads split of the cores, and the CPU against the GPUs in service units
(``--devices``). Every figure with an interval is an ``Estimate``, as in the other tables."""

from __future__ import annotations

from dataclasses import dataclass, field

from ddptop.records import Estimate, Record
from ddptop.report.schema.tables import Amdahl


@dataclass(kw_only=True)
class ThreadRow(Record):
    """One thread count t of a thread curve: its step, examples/s, speedup over the fewest threads scaled to
    one thread, efficiency and, from one thread, Karp-Flatt's serial fraction."""
    threads: int = 0
    cores: int = 0
    config_id: str = ""
    label: str = ""
    sec_iter: Estimate | None = None
    ex_sec_total: Estimate | None = None
    speedup: Estimate | None = None
    efficiency: Estimate | None = None
    relative_cost: Estimate | None = None
    relative_su: Estimate | None = None
    karp_flatt: Estimate | None = None


@dataclass(kw_only=True)
class ThreadTable(Record):
    """The thread curve of one model, batch, backend and world size measured at two thread counts or more."""
    model: str = ""
    batch_size: int = 0
    batch_meaning: str = "per rank"
    backend: str = ""
    world_size: int = 1
    bucket_cap_mb: float | None = None
    reference_threads: int = 1
    rows: list[ThreadRow] = field(default_factory=list)
    amdahl: Amdahl | None = None
    efficiency_threshold: float | None = None
    recommendation: str | None = None


@dataclass(kw_only=True)
class BudgetCell(Record):
    """One ranks x threads split of the cores, measured."""
    world_size: int = 1
    threads: int = 1
    cores: int = 0
    config_id: str = ""
    global_batch: int | None = None
    sec_iter: float | None = None
    ex_sec_total: Estimate | None = None
    best: bool = False


@dataclass(kw_only=True)
class CoreBudget(Record):
    """Every split of the cores measured for one model, batch and backend, and the one that gives the most
    examples/s against the next best (``best_config_id`` only where that is beyond noise)."""
    model: str = ""
    batch_size: int = 0
    backend: str = ""
    bucket_cap_mb: float | None = None
    cores: int | None = None
    cells: list[BudgetCell] = field(default_factory=list)
    best_config_id: str | None = None
    measured_highest: str | None = None
    next_best: str | None = None
    ratio: Estimate | None = None  # the highest's examples/s over the next best's
    answer: str = ""


@dataclass(kw_only=True)
class DeviceSide(Record):
    """One device's fastest (or cheapest) configuration."""
    config_id: str = ""
    label: str = ""
    world_size: int = 1
    threads: int | None = None
    cores: float | None = None
    gpus: int = 0
    sec_iter: float | None = None
    ex_sec_total: Estimate | None = None
    su_hours_per_million: float | None = None


@dataclass(kw_only=True)
class DevicesCompared(Record):
    """The CPU against the GPUs for one model and batch: each device's fastest and cheapest, the GPUs' speedup
    (fastest against fastest) and relative cost per example (cheapest against cheapest), and the answer."""
    model: str = ""
    batch_size: int = 0
    batch_meaning: str = "per rank"
    cpu: DeviceSide | None = None
    cuda: DeviceSide | None = None
    cpu_cheapest: DeviceSide | None = None
    cuda_cheapest: DeviceSide | None = None
    gpu_speedup: Estimate | None = None
    relative_su: Estimate | None = None
    worth_it: bool | None = None
    su_core_weight: float | None = None
    su_gpu_weight: float | None = None
    answer: str = ""

    def side(self, name: str) -> DeviceSide | None:
        """``cpu``, ``cuda``, ``cpu_cheapest`` or ``cuda_cheapest`` by its name."""
        found: DeviceSide | None = {"cpu": self.cpu, "cuda": self.cuda, "cpu_cheapest": self.cpu_cheapest,
                                    "cuda_cheapest": self.cuda_cheapest}[name]
        return found
