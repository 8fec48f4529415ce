"""The scaling summary as typed records: what ``summary.json`` holds, section by section.

``ddptop.report.build`` makes a ``Summary``; ``ddptop.report.store`` alone turns it into ``summary.json``
and back (upgrading older versions first); the tables, the diff, the plots, the summary screen and the live
scaling figures read its attributes, so a mistyped name is found by the type checker, not by a user.

Every record keeps what it was read from: keys this ddptop does not model are carried through untouched,
and the keys are written back in the order they were read, so a summary read and written again is the same
document byte for byte (``tests/test_summary_model.py``). A record made in code writes its fields in the
order they are declared, which is the order ``build`` has always written them in.

Parts that another module owns are kept as that module's JSON: the environment's free-form details, the
plan (``ddptop.run.plan_records.Plan.to_json``) beyond the fields read here, the topology
(``ddptop.telemetry.topology.Topology.from_json``) and the telemetry file's device list.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar, TypeVar

from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.protocol.modelspec import is_script, short_name

__all__ = [
    "SchemaError", "Record", "Summary", "Config", "StepFigures", "Percentiles", "RankSpread", "LaunchUnit",
    "Communication", "DdpLogging", "Buckets", "Achieved", "WindowLoad", "RankLoad", "GpuIdle", "Validity", "Straggler",
    "StragglerEvidence", "Unconfirmed", "ScriptSeen", "RankShare", "WaitStraggler", "DataWait", "StepLessWait", "Flops", "Trace", "TraceFile", "TraceBreakdown", "TraceSpread",
    "TraceKernel", "TraceCollective", "TraceGpuWork", "Verdict", "ScalingTable", "ScalingRow", "Amdahl", "Epoch",
    "Projection", "ProjectionPoint", "BatchTable", "BatchRow", "CollectiveTable", "CollectiveRow",
    "DpVsDdpRow", "TuneTable", "TuneRow", "StrategyTable", "StrategyRow", "FrontierPoint", "Ceiling", "Uncertainty", "LaunchVariance", "Overhead", "LaunchRecord", "TelemetrySource",
    "NodeRecord", "NodeLaunch", "Environment", "PlanRecord",
]

Interval = list[float]  # [low, high] of a 95% interval, as JSON writes a pair

R = TypeVar("R", bound="Record")


class SchemaError(ValueError):
    """A part of a summary of the wrong shape; the message names where (``configs[2].stats``)."""


@dataclass(kw_only=True)
class Record:
    """A JSON object with typed fields; the keys it does not model, and the order of all, kept as read."""

    _extra: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)
    _order: tuple[str, ...] = field(default=(), repr=False, compare=False)

    # fields written only when set, even by a record made in code
    _only_when_set: ClassVar[frozenset[str]] = frozenset()
    # per class: (field name, how to read its JSON value, its default) in declaration order
    _readers: ClassVar[dict[type, list[tuple[str, Callable[[Any, str], Any], Any]]]] = {}

    @classmethod
    def from_json(cls: type[R], data: Any, where: str = "summary") -> R:
        if not isinstance(data, dict):
            raise SchemaError(f"{where} is not a JSON object but {_json_kind(data)}")
        values: dict[str, Any] = {}
        for name, read, _ in _field_readers(cls):
            if name in data:
                values[name] = read(data[name], f"{where}.{name}")
        known = {name for name, _, _ in _field_readers(cls)}
        extra = {key: value for key, value in data.items() if key not in known}
        return cls(**values, _extra=extra, _order=tuple(data))

    def to_json(self) -> dict[str, Any]:
        """The JSON object: the keys it was read with in their order, then any field set since (or, for a
        record made in code, every field in declaration order)."""
        fields = {name: default for name, _, default in _field_readers(type(self))}
        out: dict[str, Any] = {}
        for key in self._order:
            if key in fields:
                out[key] = _to_json(getattr(self, key))
            elif key in self._extra:
                out[key] = self._extra[key]
        made_in_code = not self._order
        for name, default in fields.items():
            value = getattr(self, name)
            if name not in out and ((made_in_code and name not in self._only_when_set)
                                    or not _is_default(value, default)):
                out[name] = _to_json(value)
        for key, value in self._extra.items():
            out.setdefault(key, value)
        return out


def _json_kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean", type(None): "null"}.get(
        type(value), "a number" if isinstance(value, (int, float)) else type(value).__name__)


def _is_default(value: Any, default: Any) -> bool:
    return value is None if default is None else value == default


def _to_json(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_to_json(v) for v in value] if any(isinstance(v, Record) for v in value) else value
    if isinstance(value, dict):
        return {k: _to_json(v) for k, v in value.items()} if any(isinstance(v, Record) for v in value.values()) \
            else value
    return value


def _field_readers(cls: type) -> list[tuple[str, Callable[[Any, str], Any], Any]]:
    found = Record._readers.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        found = []
        for spec in dataclasses.fields(cls):
            if spec.name.startswith("_"):
                continue
            default = spec.default if spec.default is not dataclasses.MISSING else (
                spec.default_factory() if spec.default_factory is not dataclasses.MISSING else None)
            found.append((spec.name, _reader(hints[spec.name]), default))
        Record._readers[cls] = found
    return found


def _identity(value: Any, where: str) -> Any:
    return value


def _reader(hint: Any) -> Callable[[Any, str], Any]:
    """How to read one field's JSON value: records become records (in lists and dicts too); a list or an
    object must be one (damage is named, not met later by a reader); numbers and strings are kept as read."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(hint) if a is not type(None)]
        inner = _reader(options[0]) if len(options) == 1 else _identity
        if inner is _identity:
            return _identity
        return lambda value, where: None if value is None else inner(value, where)
    if isinstance(hint, type) and issubclass(hint, Record):
        return hint.from_json
    if origin is list:
        (item,) = typing.get_args(hint)
        read = _reader(item)

        def read_list(value: Any, where: str) -> Any:
            if not isinstance(value, (list, tuple)):  # a plan's lists are tuples until written
                raise SchemaError(f"{where} is not a JSON list but {_json_kind(value)}")
            return value if read is _identity else [read(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return read_list
    if origin is dict:
        _, item = typing.get_args(hint)
        read = _reader(item)

        def read_dict(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise SchemaError(f"{where} is not a JSON object but {_json_kind(value)}")
            return value if read is _identity else {k: read(v, f"{where}.{k}") for k, v in value.items()}
        return read_dict
    return _identity


# --- one configuration ---------------------------------------------------------------------------------

@dataclass(kw_only=True)
class Percentiles(Record):
    p50: float | None = None
    p75: float | None = None
    p90: float | None = None
    p95: float | None = None
    p99: float | None = None

    def at(self, name: str) -> float | None:
        """The percentile called ``name`` ("p90")."""
        return {"p50": self.p50, "p75": self.p75, "p90": self.p90, "p95": self.p95, "p99": self.p99}.get(name)


@dataclass(kw_only=True)
class RankSpread(Record):
    """The slowest rank's median against the others' (a straggler flag from the step times alone)."""
    rank: int | None = None
    ratio: float | None = None
    flagged: bool | None = None
    ratio_ci: Interval | None = None


@dataclass(kw_only=True)
class StepFigures(Record):
    """A configuration's step times (every rank's measured steps) and what follows from them."""
    n: int = 0
    mean: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    sec_iter: Percentiles = field(default_factory=Percentiles)
    ex_sec_replica: Percentiles = field(default_factory=Percentiles)
    ex_sec_total: Percentiles = field(default_factory=Percentiles)
    rank_medians: dict[str, float] = field(default_factory=dict)
    straggler: RankSpread | None = None
    p50_ci: Interval | None = None
    p50_precision: float | None = None
    p50_levels: str | None = None
    ex_sec_total_p50_ci: Interval | None = None
    ex_sec_replica_p50_ci: Interval | None = None
    # a transformer's (``analysis/tokens.py``): ex_sec_total x seq_len; absent for the image models
    tok_sec_total: Percentiles | None = None
    tok_sec_total_p50_ci: Interval | None = None


@dataclass(kw_only=True)
class LaunchUnit(Record):
    """One torchrun launch of a configuration: judged on its own, and whether the figures use it."""
    launch: str | None = None
    disturbed: bool | None = None
    reasons: list[str] = field(default_factory=list)
    used: bool | None = None
    steps: int | None = None
    p50: float | None = None
    p50_ci: Interval | None = None
    # per GPU index (a string) over the launch's window: busy SM clock, power, temperature, clock limits seen
    gpu_state: dict[str, Any] | None = None
    unsteady: list[str] = field(default_factory=list)  # why it was off the state its other launches ran at


@dataclass(kw_only=True)
class DdpLogging(Record):
    """DDP's own averages (``_get_ddp_logging_data``)."""
    forward_compute_s: float | None = None
    backward_compute_s: float | None = None
    backward_comm_s: float | None = None
    backward_compute_comm_overlap_s: float | None = None


@dataclass(kw_only=True)
class Achieved(Record):
    """The bus bandwidth DDP's bucket allreduces reached, and the collective kernel's at that size."""
    algbw_gbs: float | None = None
    busbw_gbs: float | None = None
    collective_bytes: int | None = None
    collective_busbw_gbs: float | None = None
    share_of_collective: float | None = None
    link: str | None = None
    link_peak_gbs: float | None = None
    link_share: float | None = None
    link_why: str | None = None


@dataclass(kw_only=True)
class Buckets(Record):
    """The gradient buckets' allreduces timed by a communication hook."""
    steps: int | None = None
    in_flight_s: float | None = None
    bytes_per_step: float | None = None
    mean_bucket_bytes: float | None = None
    achieved: Achieved | None = None


@dataclass(kw_only=True)
class Communication(Record):
    """Compute against communication: the step, the no_sync step, what is exposed."""
    step_s: float | None = None
    nosync_samples: int | None = None
    compute_s: float | None = None
    exposed_comm_s: float | None = None
    exposed_comm_fraction: float | None = None
    allreduce_bytes_per_rank: float | None = None
    ddp_logging: DdpLogging | None = None
    buckets: Buckets | None = None
    compute_s_ci: Interval | None = None
    exposed_comm_s_ci: Interval | None = None
    exposed_comm_fraction_ci: Interval | None = None


@dataclass(kw_only=True)
class RankLoad(Record):
    pid: int | None = None
    peak_rss_bytes: int | None = None
    threads_max: int | None = None
    gpu: int | None = None
    cpu_mean: float | None = None
    readings: int | None = None  # the readings behind cpu_mean


@dataclass(kw_only=True)
class GpuIdle(Record):
    """The GPUs' idle share over every used launch's measured steps, the host-bound verdict's evidence
    (``ddptop.analysis.step_bound.gpu_idle``)."""
    share: float | None = None
    share_ci: Interval | None = None
    readings: int | None = None
    blocks: int | None = None  # readings less than a second apart count as one
    launches: int | None = None
    rank_cpu_mean: float | None = None  # percent of one core, over the same readings


@dataclass(kw_only=True)
class WindowLoad(Record):
    """The telemetry over a configuration's measured window."""
    window_s: float | None = None
    readings: int | None = None
    coarse: bool | None = None
    gpus: list[int] = field(default_factory=list)
    util_mean: float | None = None
    util_max: float | None = None
    mem_peak_bytes: int | None = None
    power_mean_w: float | None = None
    energy_j: float | None = None
    energy_source: str | None = None
    energy_per_example_j: float | None = None
    sm_active_mean: float | None = None
    sm_occupancy_mean: float | None = None
    tensor_active_mean: float | None = None
    dram_active_mean: float | None = None
    host_cpu_mean: float | None = None
    ranks: dict[str, RankLoad] = field(default_factory=dict)
    gpu_idle: GpuIdle | None = None
    # the GPU memory peak the load table shows: NVML's mem_peak_bytes, or the allocator's peak where that is
    # larger (mem_peak_source "nvml" or "allocator"; ddptop.report.tables.memory_peak_shown)
    mem_peak_shown_bytes: int | None = None
    mem_peak_source: str | None = None

    def gpm(self, name: str) -> float | None:
        """One of the GPM counters' means by its key (``sm_active_mean``...)."""
        return {"sm_active_mean": self.sm_active_mean, "sm_occupancy_mean": self.sm_occupancy_mean,
                "tensor_active_mean": self.tensor_active_mean, "dram_active_mean": self.dram_active_mean}[name]


@dataclass(kw_only=True)
class Validity(Record):
    """Whether the node was quiet while the configuration was measured (``telemetry/validity.py``)."""
    disturbed: bool | None = None
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class StragglerEvidence(Record):
    """One way of telling a slow rank: its compute timed alone, how long the others wait, its step time."""
    rank: int | None = None
    ratio: float | None = None
    ratio_ci: Interval | None = None
    others_wait_s: float | None = None
    others_wait_s_ci: Interval | None = None
    steps: int | None = None
    too_few_steps: bool | None = None


@dataclass(kw_only=True)
class Unconfirmed(Record):
    rank: int | None = None
    evidence: str | None = None


@dataclass(kw_only=True)
class Straggler(Record):
    """The straggler named (``analysis/stragglers.py``), or the evidence that names none."""
    rank: int | None = None
    evidence: str | None = None
    unconfirmed: list[Unconfirmed] = field(default_factory=list)
    compute: StragglerEvidence | None = None
    allreduce_wait: StragglerEvidence | None = None
    step_time: StragglerEvidence | None = None


@dataclass(kw_only=True)
class Flops(Record):
    """FLOPs per step, FLOP/s achieved, and their share of the datasheet's and the measured peak."""
    per_step: float | None = None
    dtype: str | None = None
    achieved_per_device: float | None = None
    achieved_total: float | None = None
    device_name: str | None = None
    achieved_per_device_ci: Interval | None = None
    datasheet_peak: float | None = None
    datasheet_source: str | None = None
    mfu_datasheet: float | None = None
    mfu_datasheet_ci: Interval | None = None
    ceiling: float | None = None
    mfu_ceiling: float | None = None
    mfu_ceiling_ci: Interval | None = None
    source: str | None = None  # "counted" (torch's flop counter) or "workload" (its own flops(batch))
    uncounted_ops: list[str] = field(default_factory=list)  # ran without a FLOP formula: counted as 0


@dataclass(kw_only=True)
class TraceFile(Record):
    """A rank's profiler trace file."""
    rank: int = 0
    path: str = ""  # from the run directory
    size_bytes: int = 0


@dataclass(kw_only=True)
class TraceSpread(Record):
    """A figure of the trace over every kept step of every rank (``ddptop.analysis.traces.Spread``)."""
    median: float = 0.0
    low: float = 0.0
    high: float = 0.0
    n: int = 0


@dataclass(kw_only=True)
class TraceKernel(Record):
    """A kernel (a host op on the CPU) over every rank's kept steps."""
    name: str = ""
    kind: str = ""  # computation, communication, memory; host
    count: int = 0
    total_s: float = 0.0
    mean_s: float = 0.0
    share: float = 0.0  # of every rank's kernel (host op) time


@dataclass(kw_only=True)
class TraceCollective(Record):
    """A collective over every rank's kept steps: its NCCL kernels (gloo ops on the CPU) and their time."""
    name: str = ""
    count: int = 0
    total_s: float = 0.0


@dataclass(kw_only=True)
class TraceGpuWork(Record):
    """The GPU events the kept steps launched, over every rank."""
    count: int = 0
    total_s: float = 0.0
    computation_median_s: float | None = None  # the ranks' middle median computation kernel


@dataclass(kw_only=True)
class TraceBreakdown(Record):
    """Where the traced steps' time went, over every kept step of every rank
    (``ddptop.analysis.traces.combine``): each figure a share of its step."""
    device: str | None = None  # cuda (the device's own activity), cpu (the host's), mixed
    steps: int = 0  # rows: kept steps x ranks (x GPUs of a rank that drove several)
    figures: dict[str, TraceSpread | None] = field(default_factory=dict)  # idle_s, compute_s ... (window_s in s)
    overlap_share: TraceSpread | None = None  # of communication, under computation
    notes: list[str] = field(default_factory=list)
    kernels: list[TraceKernel] = field(default_factory=list)
    collectives: list[TraceCollective] = field(default_factory=list)
    gpu_work: TraceGpuWork | None = None


@dataclass(kw_only=True)
class Trace(Record):
    """A configuration's profiler trace (``ddptop.analysis.traces.ConfigTrace``): the files, what they cost,
    and the breakdown of every kept step of every rank."""
    files: list[TraceFile] = field(default_factory=list)
    steps: int | None = None  # kept steps per rank
    wall_s: float | None = None  # the profiled steps, the profiler's start and the export, on the slowest rank
    export_s: float | None = None
    traced_step_s: float | None = None  # the median traced step, against the measured p50
    untraced_step_s: float | None = None
    cost_ratio: float | None = None
    bytes_per_step: float | None = None  # file size per recorded step, the largest rank's
    breakdown: TraceBreakdown | None = None
    notes: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class Verdict(Record):
    """What bounds the step (``analysis/step_bound.py``)."""
    kind: str | None = None
    text: str = ""


@dataclass(kw_only=True)
class ScriptSeen(Record):
    """What the probe saw of a user's script (``config_end.script``, docs/wire-format.md)."""
    process_group: bool | None = None
    group_world_size: int | None = None
    launch_world_size: int | None = None
    optimizer_steps: int | None = None  # over every launch of the configuration
    spawned: int | None = None
    step_marks: str | None = None
    device_name: str | None = None
    probe_s: float | None = None
    loaders: list[dict[str, Any]] = field(default_factory=list)
    optimizer_steps_per_launch: list[int | None] | None = None  # each launch's, where there were several

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"loaders", "optimizer_steps_per_launch"})


@dataclass(kw_only=True)
class RankShare(Record):
    share: float | None = None
    share_ci: Interval | None = None


@dataclass(kw_only=True)
class WaitStraggler(Record):
    """The rank with the largest data wait against the others (``analysis/script_figures.py``)."""
    rank: int | None = None
    excess_share: float | None = None
    excess_share_ci: Interval | None = None
    others_busy_longer_s: float | None = None
    others_busy_longer_s_ci: Interval | None = None
    flagged: bool | None = None
    steps: int | None = None
    too_few_steps: bool | None = None


@dataclass(kw_only=True)
class DataWait(Record):
    """A script's wait for data as a share of its step, pooled over the ranks and per rank."""
    share: float | None = None
    share_ci: Interval | None = None
    levels: str | None = None  # "launches" or "within launch"
    launches: int | None = None
    steps: int | None = None
    per_rank: dict[str, RankShare] = field(default_factory=dict)
    straggler: WaitStraggler | None = None


@dataclass(kw_only=True)
class StepLessWait(Record):
    """A script's median step less its data wait, and its ratio to the smallest N's."""
    median_s: float | None = None
    median_s_ci: Interval | None = None
    reference_world_size: int | None = None
    levels: str | None = None
    ratio: float | None = None
    ratio_ci: Interval | None = None
    min_effect: float | None = None
    change: str | None = None  # uncertainty.verdict's words: slower (grew with N), equivalent, ...
    per_example: bool | None = None  # compared per example a rank draws (its batch changed with N)


@dataclass(kw_only=True)
class Config(Record):
    """One configuration of the sweep: its spec (``ddptop.run.plan_records.ConfigSpec.to_json``), how it ended,
    its steps (every rank's, by launch) and the figures made from them."""
    config_id: str = ""
    model: str = ""
    mode: str = "ddp"
    batch_size: int = 0
    global_batch: int = 0
    world_size: int = 1
    nnodes: int | None = None
    backend: str = ""
    device: str = ""
    scaling: str = "weak"
    image_size: int | None = None
    bucket_cap_mb: float | None = None
    amp: str | None = None
    channels_last: bool | None = None
    variant: str = "default"  # the DDP variant measured (ddptop tune; ddptop.protocol.variants)
    label: str = ""
    status: str = ""
    reason: str | None = None
    launch: str | None = None
    params: int | None = None
    grad_bytes: int | None = None
    notes: list[str] = field(default_factory=list)
    measured_iters: int | None = None
    stop_reason: str | None = None
    unstable: bool | None = None
    peak_memory_bytes: int | None = None
    analysis_error: str | None = None
    stats: StepFigures | None = None
    samples: dict[str, list[float]] = field(default_factory=dict)
    launches: list[LaunchUnit] = field(default_factory=list)
    launch_of_steps: dict[str, list[list[int]]] | None = None
    communication: Communication | None = None
    telemetry: WindowLoad | None = None
    validity: Validity | None = None
    straggler: Straggler | None = None
    flops: Flops | None = None
    verdict: Verdict | None = None
    seq_len: int | None = None  # tokens per example of a transformer model; None for the image models
    tokens_per_example: float | None = None  # a transformer's seq_len, a workload's tokens(batch) / batch
    flops_note: str | None = None  # why the step's FLOPs were not counted
    hf_config: dict[str, Any] | None = None  # an hf: model's config overrides from the plan
    strategy: str = "ddp"  # ddp, zero1, fsdp2, fsdp2_no_reshard (ddptop.protocol.strategies)
    # the CPU's per-rank memory, counted by the kernel (no allocator peak there): the rank that holds most,
    # every rank's, and the breakdown by kind (parameters, gradients, optimizer_state, gathered, inputs,
    # activations)
    counted_memory_bytes: int | None = None
    counted_memory_per_rank: dict[str, int] | None = None
    counted_memory: dict[str, int] | None = None
    trace: Trace | None = None  # the profiler trace taken after the measured steps, and its breakdown
    threads: int = 0  # each rank's threads in a thread sweep (--threads); 0: the plan's threads_per_rank
    # a user's script's (``ddptop run -- train.py``; ``build._script_fields``, ``analysis/script_figures.py``):
    # each measured step's data wait, examples and tokens per rank, what the probe saw, who ended it, what the
    # probe lost, the command, and the figures made of them
    step_values: dict[str, dict[str, list[Any]]] | None = None
    script: ScriptSeen | None = None
    script_per_rank: dict[str, ScriptSeen] | None = None
    ended_by: str | None = None
    probe_notes: list[str] | None = None
    command: list[str] | None = None
    data_wait: DataWait | None = None
    step_less_wait: StepLessWait | None = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({
        "trace", "threads", "step_values", "script", "script_per_rank", "ended_by", "probe_notes", "command",
        "data_wait", "step_less_wait"})

    @property
    def is_script(self) -> bool:
        return is_script(self.model)


# --- figures over several configurations ---------------------------------------------------------------

@dataclass(kw_only=True)
class Epoch(Record):
    """The data one epoch moves at a world size."""
    epoch_examples: int = 0
    steps_per_epoch: int = 0
    grad_values_per_epoch: int | None = None
    grad_bytes_per_epoch: int | None = None
    ring_bytes_per_rank_per_epoch: float | None = None


@dataclass(kw_only=True)
class ScalingRow(Record):
    """One world size of a scaling table."""
    world_size: int = 1
    sec_iter: float | None = None
    ex_sec_total: float | None = None
    speedup: float | None = None
    efficiency: float | None = None
    relative_cost: float | None = None
    relative_su: float | None = None
    reference_world_size: int | None = None
    config_id: str = ""
    label: str = ""
    cores: int | None = None
    karp_flatt: float | None = None
    cost_per_million: float | None = None
    epoch: Epoch | None = None
    examples_per_joule: float | None = None
    relative_energy: float | None = None
    compute_s: float | None = None
    exposed_comm_s: float | None = None
    exposed_comm_fraction: float | None = None
    bucket_comm_s: float | None = None
    comm_estimate_from_t1_s: float | None = None
    bandwidth_from_t1_gbs: float | None = None
    sec_iter_ci: Interval | None = None
    ex_sec_total_ci: Interval | None = None
    speedup_ci: Interval | None = None
    efficiency_ci: Interval | None = None
    relative_cost_ci: Interval | None = None
    relative_su_ci: Interval | None = None
    karp_flatt_ci: Interval | None = None
    tok_sec_total: float | None = None  # a transformer's: ex_sec_total x seq_len
    tok_sec_total_ci: Interval | None = None
    batch_per_rank: int | None = None  # a script's examples per rank per step as observed (None: not counted)
    global_batch: int | None = None  # a script's, over the ranks

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"batch_per_rank", "global_batch"})

    def figure(self, name: str) -> tuple[float | None, Interval | None]:
        """A figure that has an interval, by its name ("speedup"), with that interval."""
        return {
            "sec_iter": (self.sec_iter, self.sec_iter_ci), "ex_sec_total": (self.ex_sec_total, self.ex_sec_total_ci),
            "speedup": (self.speedup, self.speedup_ci), "efficiency": (self.efficiency, self.efficiency_ci),
            "relative_cost": (self.relative_cost, self.relative_cost_ci),
            "relative_su": (self.relative_su, self.relative_su_ci), "karp_flatt": (self.karp_flatt, self.karp_flatt_ci),
        }[name]


@dataclass(kw_only=True)
class Amdahl(Record):
    """Amdahl's law fitted to the speedups (``analysis/formulas.py``)."""
    serial_fraction: float = 0.0
    raw_serial_fraction: float = 0.0
    max_speedup: float | None = None
    rmse_speedup: float | None = None
    points: int = 0
    raw_serial_fraction_ci: Interval | None = None
    serial_fraction_ci: Interval | None = None
    max_speedup_ci: Interval | None = None


@dataclass(kw_only=True)
class ProjectionPoint(Record):
    world_size: int = 0
    nodes: int = 0
    sec_iter: float | None = None
    sec_iter_ci: Interval | None = None
    speedup: float | None = None
    speedup_ci: Interval | None = None
    efficiency: float | None = None
    efficiency_ci: Interval | None = None


@dataclass(kw_only=True)
class Projection(Record):
    """A model of the step beyond this node (``analysis/projection.py``), not a measurement."""
    assumptions: str = ""
    points: list[ProjectionPoint] = field(default_factory=list)


@dataclass(kw_only=True)
class ScalingTable(Record):
    """Speedup and efficiency of one model, batch, bucket size and backend over the world sizes."""
    recommendation: str | None = None
    efficiency_threshold: float | None = None
    amdahl: Amdahl | None = None
    model: str = ""
    batch_size: int = 0
    bucket_cap_mb: float | None = None
    batch_meaning: str = ""
    scaling: str = "weak"
    backend: str = ""
    reference_world_size: int = 1
    no_ddp_sec_iter: float | None = None
    ddp_overhead_at_reference: float | None = None
    rows: list[ScalingRow] = field(default_factory=list)
    ddp_overhead_at_reference_ci: Interval | None = None
    projection: Projection | None = None
    strategy: str = "ddp"  # ZeRO-1 and FSDP2 of --strategies: a table each (ddptop.protocol.strategies)
    device: str = ""  # the CPU part of a plan on GPUs (--devices cpu,cuda); "": the plan's device
    threads: int = 0  # a thread sweep's threads per rank (--threads); 0: the plan's share of the cores
    # a user's script's table: the batch as observed (``scaling`` is then weak, strong, changed, unknown or
    # single), that it has no no-DDP row, and why its ranks did not train one model together
    batch_observed: str | None = None
    no_ddp_note: str | None = None
    not_data_parallel: str | None = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"strategy", "device", "threads", "batch_observed",
                                                          "no_ddp_note", "not_data_parallel"})

    def series_label(self) -> str:
        """The table as a chart's series: model and batch, and the strategy, device and threads that tell it
        from the run's other tables."""
        if self.batch_observed is not None:  # a user's script: its batch is what it drew, which may change with N
            return short_name(self.model)
        return (f"{self.model} bs{self.batch_size}" + (f" {self.strategy}" if self.strategy != "ddp" else "")
                + (f" {self.device}" if self.device else "") + (f" x{self.threads}t" if self.threads else ""))


@dataclass(kw_only=True)
class BatchRow(Record):
    batch_size: int = 0
    global_batch: int = 0
    status: str = ""
    reason: str | None = None
    sec_iter: float | None = None
    sec_iter_ci: Interval | None = None
    ex_sec_total: float | None = None
    ex_sec_total_ci: Interval | None = None
    peak_memory_bytes: int | None = None
    counted_memory_bytes: int | None = None  # the CPU's counted per-rank memory

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"counted_memory_bytes"})


    tok_sec_total: float | None = None  # a transformer's: ex_sec_total x seq_len
    tok_sec_total_ci: Interval | None = None


@dataclass(kw_only=True)
class BatchTable(Record):
    """Throughput per batch size at one world size: the batch sweep up to out of memory."""
    model: str = ""
    world_size: int = 0
    backend: str = ""
    bucket_cap_mb: float | None = None
    rows: list[BatchRow] = field(default_factory=list)
    best_batch: int | None = None
    best_ex_sec_total: float | None = None
    first_oom_batch: int | None = None
    best_tok_sec_total: float | None = None  # a transformer's
    strategy: str = "ddp"  # the batch sweep of one strategy (ddptop.protocol.strategies)
    device: str = ""  # where a run measured two devices (--devices cpu,cuda)
    threads: int = 0  # a thread sweep's threads per rank (--threads)

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"strategy", "device", "threads"})


@dataclass(kw_only=True)
class CollectiveRow(Record):
    bytes: int = 0
    inplace: bool = True
    time_s: float | None = None
    ranks: int | None = None
    samples: int | None = None
    algbw_gbs: float | None = None
    busbw_gbs: float | None = None
    busbw_gbs_ci: Interval | None = None


@dataclass(kw_only=True)
class CollectiveTable(Record):
    """One collective's bandwidth over message sizes at one world size."""
    world_size: int = 0
    backend: str = ""
    op: str = ""
    busbw_factor: float = 1.0
    rows: list[CollectiveRow] = field(default_factory=list)
    peak_busbw_gbs: float | None = None
    peak_at_bytes: int | None = None
    link: str | None = None
    link_peak_gbs: float | None = None
    link_share: float | None = None
    link_why: str | None = None


@dataclass(kw_only=True)
class DpVsDdpRow(Record):
    model: str = ""
    batch_size: int = 0
    world_size: int = 0
    dp_status: str = ""
    dp_sec_iter: float | None = None
    ddp_sec_iter: float | None = None
    dp_ex_sec_total: float | None = None
    ddp_ex_sec_total: float | None = None
    ddp_speedup_over_dp: float | None = None
    dp_tok_sec_total: float | None = None  # a transformer's
    ddp_tok_sec_total: float | None = None


@dataclass(kw_only=True)
class CompileCost(Record):
    """torch.compile's cost and what it kept (``tuning.compile_cost``): the first step of each launch, which
    compiles, and the first launch's graphs, graph breaks, and graph splits against DDP's buckets."""
    first_step_s: list[float] = field(default_factory=list)
    graphs: int | None = None
    graph_breaks: int | None = None
    compiled_buckets: int | None = None
    ddp_buckets: int | None = None
    bucketing: str | None = None  # kept | lost | None (not known)


@dataclass(kw_only=True)
class NcclChoice(Record):
    """How many collectives of one kind NCCL ran with one algorithm and protocol (its TUNING log)."""
    collective: str = ""
    algorithm: str = ""
    protocol: str = ""
    count: int = 0
    min_bytes: int = 0
    max_bytes: int = 0


@dataclass(kw_only=True)
class TuneRow(Record):
    """One DDP variant against the default (``analysis/tuning.py``): its step time and examples/s, their
    ratio to the default's with the interval, and what changes in the arithmetic."""
    variant: str = ""
    what: str = ""
    math: str | None = None
    config_id: str = ""
    status: str = ""
    reason: str | None = None
    sec_iter: float | None = None
    sec_iter_ci: Interval | None = None
    ex_sec_total: float | None = None
    ex_sec_total_ci: Interval | None = None
    peak_memory_bytes: int | None = None
    max_rss_bytes: int | None = None
    step_ratio: float | None = None
    step_ratio_ci: Interval | None = None
    speedup: float | None = None  # examples/s over the default's
    speedup_ci: Interval | None = None
    verdict: str = ""
    paste: list[str] | None = None
    compiled: CompileCost | None = None  # the compile variant only
    # what NCCL's log says it used in the launches that measured the variant (a tune on GPUs), most used first
    nccl: list[NcclChoice] | None = None
    tok_sec_total: float | None = None  # a transformer's
    tok_sec_total_ci: Interval | None = None


@dataclass(kw_only=True)
class TuneTable(Record):
    """The variants of one model, batch, world size and backend, the default first, then best first."""
    model: str = ""
    batch_size: int = 0
    world_size: int = 0
    backend: str = ""
    min_effect: float = DEFAULT_MIN_EFFECT
    rows: list[TuneRow] = field(default_factory=list)
    # the faster variants set together, and DDP as written measured again beside them (fresh launches)
    combination: list[TuneRow] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # variant, why: not measured on this device
    recommended: list[str] = field(default_factory=list)


@dataclass(kw_only=True)
class StrategyRow(Record):
    """One data-parallel strategy (``analysis/strategies.py``): at the batch every strategy measured, its
    examples/s and their ratio to DDP's with the intervals, its memory per rank; and its largest batch."""
    strategy: str = ""
    what: str = ""
    config_id: str = ""
    status: str = ""
    batch_size: int = 0
    sec_iter: float | None = None
    sec_iter_ci: Interval | None = None
    ex_sec_total: float | None = None
    ex_sec_total_ci: Interval | None = None
    speedup: float | None = None  # examples/s over DDP's at the same batch
    speedup_ci: Interval | None = None
    verdict: str = ""
    memory_bytes: int | None = None  # per rank: the allocator's peak (GPU) or counted (CPU), the rank holding most
    memory_kind: str | None = None  # "allocator peak" or "counted"
    memory_breakdown: dict[str, int] | None = None  # counted: by kind
    largest_batch: int | None = None  # the largest batch measured
    largest_batch_fits: bool | None = None  # the next batch ran out of memory: the largest that fits
    largest_ex_sec_total: float | None = None
    largest_ex_sec_total_ci: Interval | None = None
    largest_memory_bytes: int | None = None


@dataclass(kw_only=True)
class FrontierPoint(Record):
    """One measured batch of one strategy: memory per rank against examples/s (the memory frontier)."""
    strategy: str = ""
    batch_size: int = 0
    memory_bytes: int | None = None
    memory_kind: str | None = None
    ex_sec_total: float | None = None
    ex_sec_total_ci: Interval | None = None


@dataclass(kw_only=True)
class StrategyTable(Record):
    """DDP, ZeRO-1 and FSDP2 of one model, world size, backend and bucket size, DDP first."""
    model: str = ""
    world_size: int = 0
    backend: str = ""
    bucket_cap_mb: float | None = None
    batch_size: int = 0  # the batch every strategy measured (the largest such)
    min_effect: float = DEFAULT_MIN_EFFECT
    memory_cap_mb: float | None = None
    rows: list[StrategyRow] = field(default_factory=list)
    fastest: str | None = None  # most examples/s beyond noise; None: they cannot be told apart
    fits_largest: str | None = None  # the largest batch that fits (a batch sweep to out of memory)
    answer: str = ""
    frontier: list[FrontierPoint] = field(default_factory=list)


@dataclass(kw_only=True)
class Ceiling(Record):
    """The best square matmul measured after the steps of the sweep's first launch, in one dtype."""
    device_name: str | None = None
    dtype: str | None = None
    flops_per_s: float = 0.0


@dataclass(kw_only=True)
class LaunchVariance(Record):
    """The launch-to-launch variance pooled over the configurations (``analysis/launches.py``)."""
    estimated: bool = False
    relative_sd: float | None = None
    relative_sd_ci: Interval | None = None
    df: int | None = None
    configs: int | None = None
    launches: int | None = None


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
    threads: list[dict[str, Any]] = field(default_factory=list)
    core_budget: list[dict[str, Any]] = field(default_factory=list)
    devices_compared: list[dict[str, Any]] = field(default_factory=list)

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"not_saved", "strategies", "threads", "core_budget",
                                                          "devices_compared"})

    def scaling_rows(self) -> dict[str, ScalingRow]:
        """Every scaling row by its configuration's id."""
        return {row.config_id: row for table in self.scaling for row in table.rows}
