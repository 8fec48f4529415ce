"""The figures over several configurations: the scaling, batch, collective, DP-vs-DDP, tune and strategy
tables, and the matmul ceilings."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import ClassVar

from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.analysis.script_steps import backend_words
from ddptop.protocol.modelspec import with_batch
from ddptop.records import BOOTSTRAP, CLAMPED_AT_0, CLAMPED_TO_01, Estimate, MODEL, Record
from ddptop.telemetry import nccl_log

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
    sec_iter: Estimate | None = None
    ex_sec_total: Estimate | None = None
    speedup: Estimate | None = None
    efficiency: Estimate | None = None
    relative_cost: Estimate | None = None
    relative_su: Estimate | None = None
    reference_world_size: int | None = None
    config_id: str = ""
    label: str = ""
    cores: int | None = None
    karp_flatt: Estimate | None = None
    cost_per_million: float | None = None
    epoch: Epoch | None = None
    examples_per_joule: float | None = None
    relative_energy: float | None = None
    compute_s: float | None = None
    exposed_comm_s: Estimate | None = None
    exposed_comm_fraction: Estimate | None = None
    bucket_comm_s: float | None = None
    comm_estimate_from_t1_s: Estimate | None = None
    bandwidth_from_t1_gbs: float | None = None
    tok_sec_total: Estimate | None = None  # a transformer's: ex_sec_total x seq_len
    batch_per_rank: int | None = None  # a script's examples per rank per step as observed (None: not counted)
    global_batch: int | None = None  # a script's, over the ranks; where time to loss is modelled, every model's
    # a model: the speedup in time to the same loss from this N's gradient noise scale (``gradient_noise``)
    time_to_loss_speedup: Estimate | None = None
    example_worth: Estimate | None = None  # progress to the loss of one example here against one at the reference

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"batch_per_rank", "global_batch", "time_to_loss_speedup",
                                                          "example_worth"})
    _flat_methods: ClassVar[dict[str, str]] = {  # the configuration's, copied (analysis/intervals.py)
        "exposed_comm_s": BOOTSTRAP + CLAMPED_AT_0, "exposed_comm_fraction": BOOTSTRAP + CLAMPED_AT_0}

    def figure(self, name: str) -> Estimate | None:
        """A figure that has an interval, by its name ("speedup")."""
        found: Estimate | None = {
            "sec_iter": self.sec_iter, "ex_sec_total": self.ex_sec_total, "speedup": self.speedup,
            "efficiency": self.efficiency, "relative_cost": self.relative_cost, "relative_su": self.relative_su,
            "karp_flatt": self.karp_flatt,
        }[name]
        return found


@dataclass(kw_only=True)
class Amdahl(Record):
    """Amdahl's law fitted to the speedups (``analysis/formulas.py``)."""
    serial_fraction: Estimate | None = None
    raw_serial_fraction: Estimate | None = None
    max_speedup: Estimate | None = None
    rmse_speedup: float | None = None
    points: int = 0

    _flat_methods: ClassVar[dict[str, str]] = {"serial_fraction": BOOTSTRAP + CLAMPED_TO_01}  # formulas.amdahl_fit


@dataclass(kw_only=True)
class ProjectionPoint(Record):
    _flat_method: ClassVar[str] = MODEL
    world_size: int = 0
    nodes: int = 0
    sec_iter: Estimate | None = None
    speedup: Estimate | None = None
    efficiency: Estimate | None = None


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
    ddp_overhead_at_reference: Estimate | None = None
    rows: list[ScalingRow] = field(default_factory=list)
    projection: Projection | None = None
    strategy: str = "ddp"  # ZeRO-1 and FSDP2 of --strategies: a table each (ddptop.protocol.strategies)
    device: str = ""  # the CPU part of a plan on GPUs (--devices cpu,cuda); "": the plan's device
    threads: int = 0  # a thread sweep's threads per rank (--threads); 0: the plan's share of the cores
    # a user's script's table: the batch as observed (``scaling`` is then weak, strong, changed, unknown or
    # single), that it has no no-DDP row, and why its ranks did not train one model together
    batch_observed: str | None = None
    no_ddp_note: str | None = None
    not_data_parallel: str | None = None
    group_backend: str | None = None  # the script's own process group's backend, where it is not the launch's
    not_data_parallel_at: list[int] | None = None  # the world sizes whose ranks did not train one model together

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"strategy", "device", "threads", "batch_observed",
                                                          "no_ddp_note", "not_data_parallel", "group_backend",
                                                          "not_data_parallel_at"})

    @property
    def backend_words(self) -> str:
        """The backend its ranks communicate over: the launch's, or the script's own beside it where they differ."""
        return backend_words(self.backend, self.group_backend)

    def series_label(self) -> str:
        """The table as a chart's series: model and batch, and the strategy, device and threads that tell it
        from the run's other tables."""
        return (with_batch(self.model, self.batch_size) + (f" {self.strategy}" if self.strategy != "ddp" else "")
                + (f" {self.device}" if self.device else "") + (f" x{self.threads}t" if self.threads else ""))


@dataclass(kw_only=True)
class BatchRow(Record):
    batch_size: int = 0
    global_batch: int = 0
    status: str = ""
    reason: str | None = None
    sec_iter: Estimate | None = None
    ex_sec_total: Estimate | None = None
    peak_memory_bytes: int | None = None
    counted_memory_bytes: int | None = None  # the CPU's counted per-rank memory

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"counted_memory_bytes"})


    tok_sec_total: Estimate | None = None  # a transformer's: ex_sec_total x seq_len


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
    busbw_gbs: Estimate | None = None


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


# How many collectives of one kind NCCL ran with one algorithm and protocol (its TUNING log): declared where
# the log is read
NcclChoice = nccl_log.NcclChoice


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
    sec_iter: Estimate | None = None
    ex_sec_total: Estimate | None = None
    peak_memory_bytes: int | None = None
    max_rss_bytes: int | None = None
    step_ratio: Estimate | None = None
    speedup: Estimate | None = None  # examples/s over the default's
    verdict: str = ""
    paste: list[str] | None = None
    # a script's try: the patch of its files that sets it (a unified diff, applied in patch_folder with patch -p1)
    patch: str | None = None
    patch_folder: str | None = None
    compiled: CompileCost | None = None  # the compile variant only
    # what NCCL's log says it used in the launches that measured the variant (a tune on GPUs), most used first
    nccl: list[NcclChoice] | None = None
    tok_sec_total: Estimate | None = None  # a transformer's
    # the step's p95 with its interval, where the configuration measured enough steps (p95_steps) for one
    sec_iter_p95: Estimate | None = None
    p95_steps: int | None = None

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"patch", "patch_folder", "sec_iter_p95", "p95_steps"})


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
    # a script's tune: each try and why its first run called for it; each kind of setting not tried and why
    tried: list[dict[str, str]] = field(default_factory=list)  # variant, why
    not_tried: list[dict[str, str]] = field(default_factory=list)  # what, why

    _only_when_set: ClassVar[frozenset[str]] = frozenset({"tried", "not_tried"})


@dataclass(kw_only=True)
class StrategyRow(Record):
    """One data-parallel strategy (``analysis/strategy_figures.py``): at the batch every strategy measured, its
    examples/s and their ratio to DDP's with the intervals, its memory per rank; and its largest batch."""
    strategy: str = ""
    what: str = ""
    config_id: str = ""
    status: str = ""
    batch_size: int = 0
    sec_iter: Estimate | None = None
    ex_sec_total: Estimate | None = None
    speedup: Estimate | None = None  # examples/s over DDP's at the same batch
    verdict: str = ""
    memory_bytes: int | None = None  # per rank: the allocator's peak (GPU) or counted (CPU), the rank holding most
    memory_kind: str | None = None  # "allocator peak" or "counted"
    memory_breakdown: dict[str, int] | None = None  # counted: by kind
    largest_batch: int | None = None  # the largest batch measured
    largest_batch_fits: bool | None = None  # the next batch ran out of memory: the largest that fits
    largest_ex_sec_total: Estimate | None = None
    largest_memory_bytes: int | None = None


@dataclass(kw_only=True)
class FrontierPoint(Record):
    """One measured batch of one strategy: memory per rank against examples/s (the memory frontier)."""
    strategy: str = ""
    batch_size: int = 0
    memory_bytes: int | None = None
    memory_kind: str | None = None
    ex_sec_total: Estimate | None = None


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
