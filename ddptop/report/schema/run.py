"""The run as a whole: its uncertainty, overhead, launches, telemetry source, nodes, environment and plan,
and the ``Summary`` that holds every part."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddptop.analysis.launch_spread import LaunchSpread
from ddptop.report.schema.config import Config
from ddptop.records import Record, estimates_in, over_launches
from ddptop.report.schema.threads import CoreBudget, DevicesCompared, ThreadTable
from ddptop.report.schema.tables import BatchTable, Ceiling, CollectiveTable, DpVsDdpRow, ScalingRow, ScalingTable, StrategyTable, TuneTable

# the launch-to-launch variance pooled over the configurations: declared where it is estimated
LaunchVariance = LaunchSpread

@dataclass(kw_only=True)
class Uncertainty(Record):
    method: str | None = None
    confidence: float | None = None
    resamples: int | None = None
    launch_variance: LaunchVariance | None = None


@dataclass(kw_only=True)
class LaunchRecord(Record):
    launch: str | None = None
    world_size: int | None = None
    backend: str | None = None
    status: str | None = None
    exit_code: int | None = None
    reason: str | None = None
    wall_s: float | None = None


@dataclass(kw_only=True)
class Overhead(Record):
    """How much of the sweep's wall time went to anything but warm-up and measured steps."""
    sweep_wall_s: float = 0.0
    launch_wall_s: float | None = None
    iterations_s: float = 0.0
    analysis_s: float | None = None
    fraction_outside_iterations: float | None = None
    fraction_setup: float | None = None
    launches: list[LaunchRecord] = field(default_factory=list)
    trace_s: float | None = None  # the configurations' profiler traces: traced steps, export, breakdown

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"trace_s"})


@dataclass(kw_only=True)
class TelemetrySource(Record):
    """Where the telemetry came from: the timeline file, its readings, the devices it saw."""
    file: str | None = None
    readings: int | None = None
    malformed_lines: int | None = None
    info: dict[str, Any] | None = None  # None: no reading said what the devices were


@dataclass(kw_only=True)
class NodeLaunch(Record):
    launch: str | None = None
    status: str | None = None
    exit_code: int | None = None


@dataclass(kw_only=True)
class NodeRecord(Record):
    """One node of a multi-node sweep: its process and what its torchrun agents did."""
    node_rank: int = 0
    host: str | None = None
    pid: int | None = None
    role: str | None = None
    launches: list[NodeLaunch] = field(default_factory=list)
    files: dict[str, str] = field(default_factory=dict)
    problem: str | None = None


@dataclass(kw_only=True)
class Environment(Record):
    """The node, its software and each launch's setup; the rest of what was collected is kept as read."""
    hostname: str | None = None
    platform: str | None = None
    python: str | None = None
    ddptop: str | None = None
    cpu_model: str | None = None
    usable_cpus: int | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    driver: str | None = None
    nvml: str | None = None
    versions: dict[str, str | None] = field(default_factory=dict)
    launch_setup: dict[str, Any] = field(default_factory=dict)


@dataclass(kw_only=True)
class PlanRecord(Record):
    """The sweep's plan as saved (``ddptop.run.plan_records.Plan.to_json``): the fields the report reads; every
    other one is kept as read (``to_json`` gives the whole plan, which ``diff`` compares)."""
    models: list[str] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)
    world_sizes: list[int] = field(default_factory=list)
    scaling: str = "weak"
    backends: list[str] = field(default_factory=list)
    device: str = ""
    image_size: int | None = None
    num_classes: int | None = None
    warmup: int | None = None
    iters: int | None = None
    time_budget: float | None = None
    bucket_cap_mb: list[float] | float | None = None  # one number in plans written before it became a list
    amp: str | None = None
    channels_last: bool | None = None
    name: str | None = None
    price_per_gpu_hour: float | None = None
    precision: float | None = None
    min_iters: int | None = None
    max_iters: int | None = None
    max_time_per_config: float | None = None
    launches_per_config: int | None = None
    rounds: int | None = None
    seq_len: int | None = None  # --seq-len (None: each transformer model's own)
    threads: list[int] = field(default_factory=list)  # --threads
    cpu_grid: list[list[int]] = field(default_factory=list)  # the (ranks, threads) splits measured on the CPU
    cpu_cores: int | None = None
    devices: list[str] = field(default_factory=list)  # --devices cpu,cuda
    devices_skipped: dict[str, str] = field(default_factory=dict)

    def threads_for(self, world_size: int) -> int | None:
        """Each rank's threads at a world size as the plan gave them (None: a plan without the record)."""
        found = self._extra.get("threads_per_rank")
        return found.get(str(world_size)) if isinstance(found, dict) else None

    def script_command(self) -> tuple[list[str], str]:
        """A script's plan: the command its ranks ran (its path absolute) and the folder ddptop started in;
        ([], "") for a plan of kernels."""
        command, folder = self._extra.get("script"), self._extra.get("script_dir")
        if not isinstance(command, list) or not all(isinstance(word, str) for word in command):
            return [], ""
        return command, folder if isinstance(folder, str) else ""

    def bucket_caps(self) -> list[float]:
        caps = self.bucket_cap_mb
        return list(caps) if isinstance(caps, (list, tuple)) else [caps] if caps is not None else []


@dataclass(kw_only=True)
class Summary(Record):
    """Everything a run measured (``ddptop.report.build.build_summary``), as ``summary.json`` holds it."""
    schema: str = ""
    schema_version: int = 0
    created: str | None = None
    run_dir: str | None = None
    name: str | None = None
    complete: bool | None = None
    environment: Environment = field(default_factory=Environment)
    plan: PlanRecord = field(default_factory=PlanRecord)
    status_counts: dict[str, int] = field(default_factory=dict)
    configs: list[Config] = field(default_factory=list)
    verdict_thresholds: dict[str, float] = field(default_factory=dict)
    ceilings: list[Ceiling] = field(default_factory=list)
    uncertainty: Uncertainty | None = None
    scaling: list[ScalingTable] = field(default_factory=list)
    batch_throughput: list[BatchTable] = field(default_factory=list)
    dp_vs_ddp: list[DpVsDdpRow] = field(default_factory=list)
    tuning: list[TuneTable] = field(default_factory=list)
    collectives: list[CollectiveTable] = field(default_factory=list)
    overhead: Overhead = field(default_factory=Overhead)
    telemetry: TelemetrySource | None = None
    topology: dict[str, Any] | None = None
    nodes: list[NodeRecord] = field(default_factory=list)
    malformed_event_lines: int | None = None
    damaged: dict[str, str] = field(default_factory=dict)
    # not saved: what a full disk kept out of the run directory's files (the summary was made from memory)
    not_saved: dict[str, str] | None = None
    strategies: list[StrategyTable] = field(default_factory=list)  # --strategies: DDP, ZeRO-1, FSDP2 side by side
    # --threads and --devices (ddptop.analysis.threads): the thread curve per world size, the best ranks x
    # threads split of the cores, and the CPU against the GPUs in service units
    threads: list[ThreadTable] = field(default_factory=list)
    core_budget: list[CoreBudget] = field(default_factory=list)
    devices_compared: list[DevicesCompared] = field(default_factory=list)

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"not_saved", "strategies", "threads", "core_budget",
                                                          "devices_compared"})

    def __post_init__(self) -> None:
        # with the launch-to-launch spread estimated, every configuration's replicates have both levels, and
        # so has every figure made of them
        variance = self.uncertainty.launch_variance if self.uncertainty else None
        if variance is not None and variance.estimated:
            for _, found in estimates_in(self):  # a launch's own figures (ONE_LAUNCH) stay one level
                found.method = over_launches(found.method)

    def scaling_rows(self) -> dict[str, ScalingRow]:
        """Every scaling row by its configuration's id."""
        return {row.config_id: row for table in self.scaling for row in table.rows}
