"""One configuration of the sweep as the summary holds it: its step figures, launches, communication, load,
validity, straggler, FLOPs, verdict and what the probe saw of a user's script."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from ddptop.analysis import gradient_noise, stats
from ddptop.protocol.modelspec import ModelKind, model_kind
from ddptop.records import BOOTSTRAP, CLAMPED_AT_0, ONE_LAUNCH, STUDENT_T, Estimate, Record
from ddptop.report.schema.trace import Trace

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


# the slowest rank's median against the others': declared where it is computed
RankSpread = stats.RankSpread
# the gradient noise scale over the configuration's synchronisations: declared where it is estimated
GradientNoise = gradient_noise.GradientNoise


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
    p50_precision: float | None = None
    p50_levels: str | None = None
    # a transformer's (``analysis/tokens.py``): ex_sec_total x seq_len; absent for the image models
    tok_sec_total: Percentiles | None = None
    # the medians with their intervals: sec/iter, examples/s over all ranks and per rank, tokens/s
    p50: Estimate | None = None
    ex_sec_total_p50: Estimate | None = None
    ex_sec_replica_p50: Estimate | None = None
    tok_sec_total_p50: Estimate | None = None
    # a tune's: the step's p95 over the launches used with its interval (enough steps), and the steps it had
    sec_iter_p95: Estimate | None = None
    p95_steps: int | None = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"sec_iter_p95", "p95_steps"})
    _flat_intervals: ClassVar[dict[str, str]] = {"p50": "p50_ci"}
    _flat_values: ClassVar[dict[str, tuple[str, str]]] = {
        "p50": ("sec_iter", "p50"), "ex_sec_total_p50": ("ex_sec_total", "p50"),
        "ex_sec_replica_p50": ("ex_sec_replica", "p50"), "tok_sec_total_p50": ("tok_sec_total", "p50")}


@dataclass(kw_only=True)
class LaunchUnit(Record):
    """One torchrun launch of a configuration: judged on its own, and whether the figures use it."""
    launch: str | None = None
    disturbed: bool | None = None
    reasons: list[str] = field(default_factory=list)
    used: bool | None = None
    steps: int | None = None
    p50: Estimate | None = None
    # per GPU index (a string) over the launch's window: busy SM clock, power, temperature, clock limits seen
    gpu_state: dict[str, Any] | None = None
    unsteady: list[str] = field(default_factory=list)  # why it was off the state its other launches ran at

    _flat_method: ClassVar[str] = ONE_LAUNCH


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
    compute_s: Estimate | None = None
    exposed_comm_s: Estimate | None = None
    exposed_comm_fraction: Estimate | None = None
    allreduce_bytes_per_rank: float | None = None

    _flat_methods: ClassVar[dict[str, str]] = {  # synchronising cannot speed a step up (analysis/intervals.py)
        "exposed_comm_s": BOOTSTRAP + CLAMPED_AT_0, "exposed_comm_fraction": BOOTSTRAP + CLAMPED_AT_0}
    ddp_logging: DdpLogging | None = None
    buckets: Buckets | None = None


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
    share: Estimate | None = None
    readings: int | None = None
    blocks: int | None = None  # readings less than a second apart count as one
    launches: int | None = None
    rank_cpu_mean: float | None = None  # percent of one core, over the same readings

    _flat_method: ClassVar[str] = STUDENT_T


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
    ratio: Estimate | None = None
    others_wait_s: Estimate | None = None
    steps: int | None = None
    too_few_steps: bool | None = None


@dataclass(kw_only=True)
class Unconfirmed(Record):
    rank: int | None = None
    evidence: str | None = None


@dataclass(kw_only=True)
class Straggler(Record):
    """The straggler named (``analysis/stragglers.py``), or the evidence that names none; the named rank's
    figures beside it: its compute (or, without the analysis, its step time) over the others' (``ratio``), and
    how much longer the others wait for it (``others_wait_s``), where they named it."""
    rank: int | None = None
    evidence: str | None = None
    unconfirmed: list[Unconfirmed] = field(default_factory=list)
    ratio: Estimate | None = None
    others_wait_s: Estimate | None = None
    compute: StragglerEvidence | None = None
    allreduce_wait: StragglerEvidence | None = None
    step_time: StragglerEvidence | None = None


@dataclass(kw_only=True)
class Flops(Record):
    """FLOPs per step, FLOP/s achieved, and their share of the datasheet's and the measured peak."""
    per_step: float | None = None
    dtype: str | None = None
    achieved_per_device: Estimate | None = None
    achieved_total: float | None = None
    device_name: str | None = None
    datasheet_peak: float | None = None
    datasheet_source: str | None = None
    mfu_datasheet: Estimate | None = None
    ceiling: float | None = None
    mfu_ceiling: Estimate | None = None
    source: str | None = None  # "counted" (torch's flop counter) or "workload" (its own flops(batch))
    uncounted_ops: list[str] = field(default_factory=list)  # ran without a FLOP formula: counted as 0


@dataclass(kw_only=True)
class Verdict(Record):
    """What bounds the step (``analysis/step_bound.py``)."""
    kind: str | None = None
    text: str = ""


@dataclass(kw_only=True)
class WrapperSeen(Record):
    """A model the script wrapped for data parallelism (``bench_kernels.probe_sync``): its kind, where it was
    made, the arguments that shape its communication as given; for DDP and FSDP (both kinds), each measured
    step's micro-batches and synchronisations ([micro-batches, syncs, steps] over every launch; FSDP's counted on
    its root); for DDP, its own timers over the measured steps (the last launch's; its backward communication a
    step, whole and exposed, per launch)."""
    kind: str | None = None
    site: str | None = None  # path:line of the user's code that led to the constructor's call
    via: str | None = None  # path:line of the library's call that made it, where a framework did (accelerate)
    modules: int | None = None  # FSDP: the modules one line sharded (a loop over the blocks, auto-wrapping)
    args: dict[str, str] = field(default_factory=dict)
    rewrapped: bool | None = None
    sync_steps: list[list[int]] | None = None
    ddp_logging: DdpLogging | None = None
    comm_hook: str | None = None
    exposed_comm_s: list[float] | None = None
    backward_comm_s: list[float] | None = None
    can_set_static_graph: bool | None = None  # DDP's own word at the end of the script's steps (its logging data)

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"via", "modules", "sync_steps", "ddp_logging", "comm_hook",
                                                          "exposed_comm_s", "backward_comm_s",
                                                          "can_set_static_graph"})


@dataclass(kw_only=True)
class GradSync(Record):
    """How a script's gradients were synchronised at one world size, and what DDP's timers measured of it against
    the smallest N's (``ddptop.analysis.script_sync.grad_sync``)."""
    wrappers: int | None = None
    kinds: list[str] = field(default_factory=list)
    site: str | None = None
    via: str | None = None
    synchronises: bool | None = None  # None: the probe could not tell
    collectives: int | None = None
    kind: str | None = None  # of the counted model (DDP, FSDP) that ran the most micro-batches: the figures below
    steps: int | None = None
    micro_batches: int | None = None  # of the most common measured step, of that model
    syncs: int | None = None
    every_micro_batch: bool | None = None
    comm_hook: str | None = None
    exposed_comm_s: float | None = None  # a step: median over ranks and launches
    exposed_comm_range_s: list[float] | None = None
    backward_comm_s: float | None = None
    exposed_comm_share: float | None = None
    threads_per_rank: int | None = None
    reference_world_size: int | None = None
    reference_threads_per_rank: int | None = None
    reference_exposed_comm_s: float | None = None
    comm_growth_s: float | None = None
    step_growth_low_s: float | None = None
    comm_grew: bool | None = None  # None: not measured

    _only_when_set: ClassVar[frozenset[str]] = frozenset({
        "via", "kind", "steps", "micro_batches", "syncs", "every_micro_batch", "comm_hook", "exposed_comm_s",
        "exposed_comm_range_s", "backward_comm_s", "exposed_comm_share", "threads_per_rank", "reference_world_size",
        "reference_threads_per_rank", "reference_exposed_comm_s", "comm_growth_s", "step_growth_low_s", "comm_grew"})


@dataclass(kw_only=True)
class ScriptSeen(Record):
    """What the probe saw of a user's script (``config_end.script``, docs/wire-format.md)."""
    process_group: bool | None = None
    group_world_size: int | None = None
    launch_world_size: int | None = None
    group_backend: str | None = None  # the backend of the script's own process group (its launch's: the entry's)
    optimizer_steps: int | None = None  # over every launch of the configuration
    spawned: int | None = None
    step_marks: str | None = None
    device_name: str | None = None
    probe_s: float | None = None
    threads: int | None = None  # torch.get_num_threads() once the script ran (its own set_num_threads shows)
    loaders: list[dict[str, Any]] = field(default_factory=list)
    optimizer_steps_per_launch: list[int | None] | None = None  # each launch's, where there were several
    # the models it wrapped for data parallelism, and its own collective calls in the measured steps (a probe
    # older than them: absent)
    wrappers: list[WrapperSeen] | None = None
    wrappers_incomplete: bool | None = None  # a wrapper may have been made unrecorded
    collectives: int | None = None
    tried_on: int | None = None  # ddptop tune's try: the DDP calls it was set on, over the launches (0: not applied)
    loader_tried_on: int | None = None  # and the loaders its DataLoader keywords were set on

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"loaders", "optimizer_steps_per_launch", "group_backend",
                                                          "wrappers", "wrappers_incomplete", "collectives",
                                                          "tried_on", "loader_tried_on", "threads"})


@dataclass(kw_only=True)
class RankShare(Record):
    share: Estimate | None = None


@dataclass(kw_only=True)
class WaitStraggler(Record):
    """The rank with the largest data wait against the others (``analysis/script_figures.py``)."""
    rank: int | None = None
    excess_share: Estimate | None = None
    others_busy_longer_s: Estimate | None = None
    flagged: bool | None = None
    steps: int | None = None
    too_few_steps: bool | None = None


@dataclass(kw_only=True)
class DataWait(Record):
    """A script's wait for data as a share of its step, pooled over the ranks and per rank."""
    share: Estimate | None = None
    levels: str | None = None  # "launches" or "within launch"
    launches: int | None = None
    steps: int | None = None
    per_rank: dict[str, RankShare] = field(default_factory=dict)
    straggler: WaitStraggler | None = None


@dataclass(kw_only=True)
class StepLessWait(Record):
    """A script's median step less its data wait, and its ratio to the smallest N's."""
    median_s: Estimate | None = None
    reference_world_size: int | None = None
    levels: str | None = None
    ratio: Estimate | None = None
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
    loader_site: str | None = None  # a script's loader try: the line of the training loader it was set on
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
    grad_sync: GradSync | None = None
    gradient_noise: GradientNoise | None = None  # at N >= 2 under DDP, over its synchronisations

    _only_when_set: ClassVar[frozenset[str]] = frozenset({
        "trace", "threads", "step_values", "script", "script_per_rank", "ended_by", "probe_notes", "command",
        "data_wait", "step_less_wait", "grad_sync", "loader_site", "gradient_noise"})

    @property
    def kind(self) -> ModelKind:
        """Its model's kind (``modelspec.ModelKind``): what it answers for itself."""
        return model_kind(self.model)
