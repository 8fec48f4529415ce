"""What to run: a sweep of models x batch sizes x world sizes x backends, validated before anything starts.

A plan comes from command-line flags, a TOML file (same keys, underscores), or both (flags win). Every
problem is reported as one ``PlanError`` line; nothing is launched for an invalid plan.

Batch semantics: with weak scaling (the default, as in seeds 001 and 002) each batch size is per rank and
the global batch grows with N; with strong scaling each batch size is the global batch, split evenly
over the N ranks, so it must divide by every world size.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from bench_kernels.catalog import check_model
from bench_kernels.collectives import OPS as COLLECTIVE_OPS
from bench_kernels.collectives import parse_size
from bench_kernels.faults import FaultSpecError, parse_fault
from ddptop.errors import DdptopError
from ddptop.telemetry.inventory import Inventory

SCALINGS = ("weak", "strong")
BACKENDS = ("auto", "nccl", "gloo")
DEVICES = ("auto", "cuda", "cpu")
AMP_DTYPES = ("bf16", "fp16")
ON_FAILURE = ("continue", "stop")
MODES = ("ddp", "no_ddp", "dp")  # dp: torch.nn.DataParallel, one process driving N devices


class PlanError(DdptopError):
    """An invalid plan; the message is one line for the user."""


@dataclass
class PlanOptions:
    """The user's choices, unresolved. ``None`` means "the default for this machine"."""

    models: list[str] | None = None
    batch_sizes: list[int] | None = None
    world_sizes: list[int] | None = None
    scaling: str = "weak"
    backend: list[str] = field(default_factory=lambda: ["auto"])
    device: str = "auto"
    gpus: list[int] | None = None
    image_size: int | None = None
    num_classes: int = 1000
    warmup: int | None = None
    iters: int | None = None
    time_budget: float | None = None
    bucket_cap_mb: list[float] | float = field(default_factory=lambda: [25.0])
    baseline: bool = True
    amp: str | None = None
    channels_last: bool = False
    threads_per_rank: int | None = None
    cores_per_rank: float | None = None
    su_core_weight: float = 1.0
    su_gpu_weight: float = 2.0
    name: str | None = None
    comm_iters: int | None = None
    collectives: list[str] | None = None
    coll_min_bytes: str = "1KiB"
    coll_max_bytes: str | None = None
    coll_iters: int | None = None
    batch_sweep: bool = False
    max_batch: int | None = None
    memory_cap_mb: float | None = None
    efficiency_threshold: float = 0.7
    price_per_gpu_hour: float | None = None
    epoch_examples: int = 1_281_167  # ImageNet-1k's training set
    compare_dp: bool = False
    inject: list[str] | None = None
    hang_timeout: float = 300.0
    on_failure: str = "continue"
    nnodes: int = 1
    nproc_per_node: int | None = None

    @classmethod
    def keys(cls) -> list[str]:
        return [f.name for f in fields(cls)]


@dataclass(frozen=True)
class ConfigSpec:
    """One measured configuration: one model at one batch on one world size, DDP or the no-DDP baseline."""

    config_id: str
    model: str
    mode: str
    batch_size: int  # per rank
    global_batch: int
    world_size: int
    nnodes: int
    backend: str
    device: str
    scaling: str
    image_size: int
    num_classes: int
    warmup: int
    iters: int
    time_budget: float | None
    bucket_cap_mb: float
    amp: str | None
    channels_last: bool
    comm_iters: int = 0

    @property
    def label(self) -> str:
        """Seed 001's row label: machines/devices per machine, e.g. 1M/2G (P for CPU processes)."""
        if self.mode == "no_ddp":
            return "no ddp"
        unit = "G" if self.device == "cuda" else "P"
        if self.mode == "dp":
            return f"DP/{self.world_size}{unit}"
        return f"{self.nnodes}M/{self.world_size // self.nnodes}{unit}"

    @property
    def processes(self) -> int:
        """Ranks that report samples: one for the no-DDP baseline and for DataParallel, else N."""
        return 1 if self.mode in ("no_ddp", "dp") else self.world_size

    @property
    def scaling_batch(self) -> int:
        """The batch held fixed across N: per rank for weak scaling, global for strong."""
        return self.batch_size if self.scaling == "weak" else self.global_batch

    @property
    def group(self) -> tuple[str, int, str, float]:
        """Configurations of one scaling table share this key."""
        return (self.model, self.scaling_batch, self.backend, self.bucket_cap_mb)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "ConfigSpec":
        return cls(**{f.name: data[f.name] for f in fields(cls) if f.name in data})


@dataclass(frozen=True)
class Launch:
    """Configurations run inside one torchrun launch (one world size, one backend, on ``nodes`` nodes)."""

    world_size: int
    backend: str
    configs: tuple[ConfigSpec, ...]
    nodes: int = 1

    @property
    def launch_key(self) -> str:
        return f"n{self.world_size}-{self.nodes}nodes-{self.backend}" if self.nodes > 1 else (
            f"n{self.world_size}-{self.backend}")

    @property
    def nproc_per_node(self) -> int:
        return self.world_size // self.nodes


@dataclass(frozen=True)
class Plan:
    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    world_sizes: tuple[int, ...]
    scaling: str
    backends: tuple[str, ...]
    device: str
    gpus: tuple[int, ...] | None
    image_size: int
    num_classes: int
    warmup: int
    iters: int
    time_budget: float | None
    bucket_cap_mb: tuple[float, ...]
    baseline: bool
    amp: str | None
    channels_last: bool
    threads_per_rank: dict[int, int]  # world size -> CPU threads given to each rank
    cores_per_rank: float | None
    su_core_weight: float
    su_gpu_weight: float
    name: str
    nnodes: int = 1
    comm_iters: int = 0
    collectives: tuple[str, ...] = ()
    coll_min_bytes: int = 1024
    coll_max_bytes: int = 16 * 2**20
    coll_iters: int = 10
    batch_sweep: bool = False
    memory_cap_mb: float | None = None
    efficiency_threshold: float = 0.7
    price_per_gpu_hour: float | None = None
    epoch_examples: int = 1_281_167
    compare_dp: bool = False
    inject: tuple[str, ...] = ()  # fault injection specs (bench_kernels.faults), a testing aid
    hang_timeout: float = 300.0  # seconds without any rank event before a configuration counts as hung
    on_failure: str = "continue"  # or "stop": end the sweep at the first failed configuration
    nproc_per_node: int = 0  # ranks per node of a multi-node plan; world sizes above it span nodes

    def nodes_for(self, world_size: int) -> int:
        """Nodes a world size runs on: one while it fits a node, else full nodes of nproc_per_node ranks."""
        if self.nnodes <= 1 or not self.nproc_per_node or world_size <= self.nproc_per_node:
            return 1
        return world_size // self.nproc_per_node

    def collective_spec(self) -> dict[str, Any] | None:
        """What the collective benchmark runs at the end of each launch with N >= 2 (None: nothing)."""
        if not self.collectives:
            return None
        return {"ops": list(self.collectives), "min_bytes": self.coll_min_bytes, "max_bytes": self.coll_max_bytes,
                "iters": self.coll_iters, "warmup": max(5, self.coll_iters // 4), "dtype": "float32"}

    def launches(self) -> list[Launch]:
        result = []
        data_parallel = self._data_parallel_configs()
        if data_parallel and 1 not in self.world_sizes:  # DataParallel is one process: it needs an N=1 launch
            result.append(Launch(1, self.backends[0], tuple(data_parallel)))
            data_parallel = []
        for world_size in self.world_sizes:
            for backend in self.backends:
                configs = []
                for model in self.models:
                    for batch in self.batch_sizes:
                        modes = ["no_ddp", "ddp"] if (world_size == 1 and self.baseline) else ["ddp"]
                        for mode in modes:
                            caps = self.bucket_cap_mb if mode == "ddp" else self.bucket_cap_mb[:1]
                            for cap in caps:
                                configs.append(self._config(model, batch, world_size, backend, mode, cap))
                if world_size == 1 and backend == self.backends[0]:
                    configs += data_parallel
                result.append(Launch(world_size, backend, tuple(configs), self.nodes_for(world_size)))
        return result

    def _data_parallel_configs(self) -> list[ConfigSpec]:
        """torch.nn.DataParallel at every N > 1, run by a single process (seeds 002 and 004 compare it to DDP)."""
        if not self.compare_dp:
            return []
        return [
            self._config(model, batch, n, self.backends[0], "dp", self.bucket_cap_mb[0])
            for model in self.models
            for batch in self.batch_sizes
            for n in self.world_sizes
            if n > 1
        ]

    def configs(self) -> list[ConfigSpec]:
        return [c for launch in self.launches() for c in launch.configs]

    def _config(self, model: str, batch: int, world_size: int, backend: str, mode: str, cap: float) -> ConfigSpec:
        per_rank = batch if self.scaling == "weak" else batch // world_size
        nodes = 1 if mode == "dp" else self.nodes_for(world_size)
        spread = f"/{nodes}nodes" if nodes > 1 else ""
        config_id = f"{model}/{mode}/bs{per_rank}/n{world_size}{spread}/{backend}"
        if len(self.bucket_cap_mb) > 1 and mode == "ddp":  # ids stay comparable across runs of one cap
            config_id += f"/bucket{cap:g}"
        return ConfigSpec(
            config_id=config_id,
            model=model,
            mode=mode,
            batch_size=per_rank,
            global_batch=per_rank * world_size,
            world_size=world_size,
            nnodes=nodes,
            backend=backend,
            device=self.device,
            scaling=self.scaling,
            image_size=self.image_size,
            num_classes=self.num_classes,
            warmup=self.warmup,
            iters=self.iters,
            time_budget=self.time_budget,
            bucket_cap_mb=cap,
            amp=self.amp,
            channels_last=self.channels_last,
            comm_iters=self.comm_iters if mode == "ddp" else 0,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["threads_per_rank"] = {str(k): v for k, v in self.threads_per_rank.items()}
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for key in ("models", "batch_sizes", "world_sizes", "backends"):
            values[key] = tuple(values[key])
        cap = values.get("bucket_cap_mb", 25.0)
        values["bucket_cap_mb"] = tuple(cap) if isinstance(cap, (list, tuple)) else (float(cap),)
        values["collectives"] = tuple(values.get("collectives", ()))
        values["inject"] = tuple(values.get("inject", ()))
        if values.get("gpus") is not None:
            values["gpus"] = tuple(values["gpus"])
        values["threads_per_rank"] = {int(k): int(v) for k, v in data["threads_per_rank"].items()}
        return cls(**values)


def default_world_sizes(device_count: int) -> list[int]:
    """1, 2, 4, ... up to the devices there are, plus the device count itself (e.g. 1,2,4,6 for 6 GPUs)."""
    sizes, n = [], 1
    while n <= device_count:
        sizes.append(n)
        n *= 2
    if device_count and sizes[-1] != device_count:
        sizes.append(device_count)
    return sizes


def _spanning_world_sizes(one_node: list[int], per_node: int, nnodes: int) -> list[int]:
    """One node's sizes up to its ranks per node, then whole nodes: 2, 4, ... and all of them (seed 001's
    1M/1G ... 1M/8G, 2M/8G rows)."""
    sizes = [n for n in one_node if n <= per_node]
    if per_node not in sizes:
        sizes.append(per_node)
    nodes = 2
    while nodes < nnodes:
        sizes.append(nodes * per_node)
        nodes *= 2
    if nnodes > 1:
        sizes.append(nnodes * per_node)
    return sizes


def usable_cpu_count() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def _unique(values: list[Any]) -> tuple[Any, ...]:
    return tuple(dict.fromkeys(values))


def build_plan(options: PlanOptions, inventory: Inventory, cpu_count: int | None = None) -> Plan:
    """Resolve defaults for this machine and validate; raise PlanError with one line on any problem."""
    cpu_count = cpu_count or usable_cpu_count()
    if options.device not in DEVICES:
        raise PlanError(f"--device must be one of {', '.join(DEVICES)} (got {options.device!r})")
    usable = inventory.usable_gpus
    if options.device == "cuda" and not usable:
        raise PlanError(f"--device cuda, but no GPU is usable: {inventory.usable_problem}")
    device = options.device if options.device != "auto" else ("cuda" if usable else "cpu")

    gpus: tuple[int, ...] | None = None
    if options.gpus is not None:
        if device != "cuda":
            raise PlanError("--gpus needs GPUs, but this plan runs on the CPU")
        visible = len(usable)
        if len(set(options.gpus)) != len(options.gpus):
            raise PlanError(f"--gpus lists a GPU twice: {','.join(map(str, options.gpus))}")
        for index in options.gpus:
            if not 0 <= index < visible:
                raise PlanError(f"--gpus {index}: only GPUs 0..{visible - 1} are visible")
        gpus = tuple(options.gpus)
    devices_per_node = (len(gpus) if gpus else len(usable)) if device == "cuda" else cpu_count

    on_gpu = device == "cuda"
    models = _unique(options.models or (["resnet50"] if on_gpu else ["resnet18"]))
    batch_sizes = _unique(options.batch_sizes or ([32] if on_gpu else [16]))
    one_node_sizes = default_world_sizes(devices_per_node) if on_gpu else [1, 2]
    nnodes, per_node = options.nnodes, options.nproc_per_node
    if nnodes < 1:
        raise PlanError(f"--nnodes must be at least 1 (got {nnodes})")
    if per_node is not None:
        if per_node < 1:
            raise PlanError(f"--nproc-per-node must be at least 1 (got {per_node})")
        if on_gpu and per_node > devices_per_node:
            raise PlanError(f"--nproc-per-node {per_node}: only {devices_per_node} GPUs are usable on this node")
        if nnodes == 1:
            raise PlanError("--nproc-per-node only applies with --nnodes above 1")
    per_node = per_node or max(one_node_sizes)
    world_sizes = _unique(options.world_sizes or _spanning_world_sizes(one_node_sizes, per_node, nnodes))
    image_size = options.image_size or (224 if on_gpu else 64)
    warmup = options.warmup if options.warmup is not None else (5 if on_gpu else 3)
    iters = options.iters if options.iters is not None else (50 if on_gpu else 20)

    if options.scaling not in SCALINGS:
        raise PlanError(f"--scaling must be weak or strong (got {options.scaling!r})")
    backends = []
    for backend in options.backend:
        if backend not in BACKENDS:
            raise PlanError(f"--backend must be auto, nccl or gloo (got {backend!r})")
        if backend == "nccl" and not on_gpu:
            raise PlanError("--backend nccl needs GPUs; use gloo (or auto) on the CPU")
        backends.append(backend if backend != "auto" else ("nccl" if on_gpu else "gloo"))
    if not models:
        raise PlanError("--models is empty")
    if image_size < 1:
        raise PlanError(f"--image-size must be positive (got {image_size})")
    if options.num_classes < 1:
        raise PlanError(f"--num-classes must be positive (got {options.num_classes})")
    for model in models:
        reason = check_model(model, image_size)
        if reason:
            raise PlanError(reason)
    for batch in batch_sizes:
        if batch < 1:
            raise PlanError(f"batch size must be at least 1 (got {batch})")
    for world_size in world_sizes:
        if world_size < 1:
            raise PlanError(f"world size must be at least 1 (got {world_size})")
        if nnodes > 1 and world_size > per_node:
            if world_size % per_node or world_size // per_node > nnodes:
                raise PlanError(
                    f"world size {world_size} spans nodes: it must be a multiple of {per_node} ranks per node "
                    f"(--nproc-per-node), on at most --nnodes {nnodes}"
                )
        elif on_gpu and world_size > devices_per_node:
            raise PlanError(f"world size {world_size} needs {world_size} GPUs, but {devices_per_node} are usable")
        if options.scaling == "strong":
            for batch in batch_sizes:
                if batch % world_size:
                    raise PlanError(
                        f"strong scaling splits the global batch {batch} over {world_size} ranks: "
                        "it must divide evenly"
                    )
    if warmup < 0:
        raise PlanError(f"--warmup cannot be negative (got {warmup})")
    if options.time_budget is not None:
        if options.time_budget <= 0:
            raise PlanError(f"--time-budget must be positive seconds (got {options.time_budget})")
        if warmup < 1:
            raise PlanError("--time-budget needs at least one warm-up iteration to size the measurement")
    elif iters < 1:
        raise PlanError(f"--iters must be at least 1 (got {iters})")
    caps = options.bucket_cap_mb if isinstance(options.bucket_cap_mb, list) else [options.bucket_cap_mb]
    caps = [float(c) for c in _unique(caps)]
    if not caps:
        raise PlanError("--bucket-cap-mb is empty")
    for cap in caps:
        if cap <= 0:
            raise PlanError(f"--bucket-cap-mb must be positive (got {cap:g})")
    if options.batch_sweep:
        batch_sizes = _batch_ladder(batch_sizes, options.max_batch or (4096 if on_gpu else 256), options.scaling)
    elif options.max_batch is not None:
        raise PlanError("--max-batch only applies with --batch-sweep")
    if options.memory_cap_mb is not None and options.memory_cap_mb <= 0:
        raise PlanError(f"--memory-cap-mb must be positive (got {options.memory_cap_mb:g})")
    comm_iters = options.comm_iters if options.comm_iters is not None else max(5, iters // 4)
    if comm_iters < 0:
        raise PlanError(f"--comm-iters cannot be negative (got {comm_iters})")
    collectives = _unique(options.collectives if options.collectives is not None else ["allreduce"])
    for op in collectives:
        if op not in COLLECTIVE_OPS:
            raise PlanError(f"unknown collective {op!r}; known: {', '.join(COLLECTIVE_OPS)}")
    try:
        coll_min = parse_size(options.coll_min_bytes)
        coll_max = parse_size(options.coll_max_bytes or ("1GiB" if on_gpu else "16MiB"))
    except ValueError as exc:
        raise PlanError(f"--coll-min-bytes/--coll-max-bytes: {exc}") from None
    if not 0 < coll_min <= coll_max:
        raise PlanError(f"collective sizes must satisfy 0 < min <= max (got {coll_min} and {coll_max} bytes)")
    coll_iters = options.coll_iters if options.coll_iters is not None else (20 if on_gpu else 10)
    if coll_iters < 1:
        raise PlanError(f"--coll-iters must be at least 1 (got {coll_iters})")
    if not 0 < options.efficiency_threshold <= 1:
        raise PlanError(f"--efficiency-threshold must be in (0, 1] (got {options.efficiency_threshold:g})")
    if options.price_per_gpu_hour is not None and options.price_per_gpu_hour < 0:
        raise PlanError("--price-per-gpu-hour cannot be negative")
    if options.epoch_examples < 1:
        raise PlanError(f"--epoch-examples must be positive (got {options.epoch_examples})")
    if options.amp is not None:
        if options.amp not in AMP_DTYPES:
            raise PlanError(f"--amp must be bf16 or fp16 (got {options.amp!r})")
        if not on_gpu:
            raise PlanError("--amp needs a GPU (CPU runs measure fp32)")
    if options.threads_per_rank is not None and options.threads_per_rank < 1:
        raise PlanError(f"--threads-per-rank must be at least 1 (got {options.threads_per_rank})")
    for key in ("su_core_weight", "su_gpu_weight"):
        if getattr(options, key) < 0:
            raise PlanError(f"--{key.replace('_', '-')} cannot be negative")
    if options.cores_per_rank is not None and options.cores_per_rank < 0:
        raise PlanError("--cores-per-rank cannot be negative")

    # Each rank gets an equal share of the cores this process may use, so N ranks never oversubscribe the node
    # and N=1 is not starved (torchrun's own default is one thread per rank).
    threads = {
        n: options.threads_per_rank or max(1, cpu_count // min(n, per_node if nnodes > 1 else n))
        for n in (*world_sizes, 1)
    }
    for text in options.inject or ():
        try:
            parse_fault(text)
        except FaultSpecError as exc:
            raise PlanError(str(exc)) from None
    if options.hang_timeout <= 0:
        raise PlanError(f"--hang-timeout must be positive seconds (got {options.hang_timeout:g})")
    if options.on_failure not in ON_FAILURE:
        raise PlanError(f"--on-failure must be continue or stop (got {options.on_failure!r})")
    if options.compare_dp and not any(n > 1 for n in world_sizes):
        raise PlanError("--compare-dp needs a world size above 1 to compare at")
    name = options.name or f"{'-'.join(m.split(':')[-1] for m in models)}-{options.scaling}"
    return Plan(
        models=models,
        batch_sizes=batch_sizes,
        world_sizes=world_sizes,
        scaling=options.scaling,
        backends=_unique(backends),
        device=device,
        gpus=gpus,
        image_size=image_size,
        num_classes=options.num_classes,
        warmup=warmup,
        iters=iters,
        time_budget=options.time_budget,
        bucket_cap_mb=tuple(caps),
        baseline=options.baseline,
        amp=options.amp,
        channels_last=options.channels_last,
        threads_per_rank=threads,
        cores_per_rank=options.cores_per_rank,
        su_core_weight=options.su_core_weight,
        su_gpu_weight=options.su_gpu_weight,
        name=name,
        comm_iters=comm_iters,
        collectives=collectives,
        coll_min_bytes=coll_min,
        coll_max_bytes=coll_max,
        coll_iters=coll_iters,
        batch_sweep=options.batch_sweep,
        memory_cap_mb=options.memory_cap_mb,
        efficiency_threshold=options.efficiency_threshold,
        price_per_gpu_hour=options.price_per_gpu_hour,
        epoch_examples=options.epoch_examples,
        compare_dp=options.compare_dp,
        inject=tuple(options.inject or ()),
        hang_timeout=float(options.hang_timeout),
        on_failure=options.on_failure,
        nnodes=nnodes,
        nproc_per_node=per_node if nnodes > 1 else 0,
    )


def _batch_ladder(batch_sizes: tuple[int, ...], max_batch: int, scaling: str) -> tuple[int, ...]:
    """The batch-size sweep: the smallest given batch, doubled until ``max_batch`` (or out of memory)."""
    start = min(batch_sizes)
    if max_batch < start:
        raise PlanError(f"--max-batch {max_batch} is smaller than the first batch size {start}")
    ladder = [start]
    while ladder[-1] * 2 <= max_batch:
        ladder.append(ladder[-1] * 2)
    return tuple(ladder)


_TOML_TYPES: dict[str, tuple[type, ...]] = {
    "models": (list, str),
    "batch_sizes": (list, int),
    "world_sizes": (list, int),
    "scaling": (str,),
    "backend": (list, str),
    "device": (str,),
    "gpus": (list, int),
    "image_size": (int,),
    "num_classes": (int,),
    "warmup": (int,),
    "iters": (int,),
    "time_budget": (float, int),
    "bucket_cap_mb": (list, float),
    "baseline": (bool,),
    "amp": (str,),
    "channels_last": (bool,),
    "threads_per_rank": (int,),
    "cores_per_rank": (float, int),
    "su_core_weight": (float, int),
    "su_gpu_weight": (float, int),
    "name": (str,),
    "comm_iters": (int,),
    "collectives": (list, str),
    "coll_min_bytes": (str,),
    "coll_max_bytes": (str,),
    "coll_iters": (int,),
    "batch_sweep": (bool,),
    "max_batch": (int,),
    "memory_cap_mb": (float, int),
    "efficiency_threshold": (float, int),
    "price_per_gpu_hour": (float, int),
    "epoch_examples": (int,),
    "compare_dp": (bool,),
    "inject": (list, str),
    "hang_timeout": (float, int),
    "on_failure": (str,),
    "nnodes": (int,),
    "nproc_per_node": (int,),
}


def read_plan_file(path: str) -> dict[str, Any]:
    """Read a TOML plan into option values; keys as PlanOptions (a string is accepted for a one-item list)."""
    try:
        with open(path, "rb") as handle:
            raw = tomllib.load(handle)
    except FileNotFoundError:
        raise PlanError(f"plan file {path} does not exist") from None
    except OSError as exc:
        raise PlanError(f"cannot read plan file {path}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise PlanError(f"plan file {path} is not valid TOML: {exc}") from None
    if isinstance(raw.get("plan"), dict) and len(raw) == 1:
        raw = raw["plan"]
    values: dict[str, Any] = {}
    for key, value in raw.items():
        key_name = key.replace("-", "_")
        expected = _TOML_TYPES.get(key_name)
        if expected is None:
            raise PlanError(f"plan file {path}: unknown key {key!r} (known: {', '.join(_TOML_TYPES)})")
        if expected[0] is list:
            item_type = expected[1]
            accepted = (float, int) if item_type is float else (item_type,)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                value = [value]
            if not isinstance(value, list) or not all(
                isinstance(v, accepted) and not isinstance(v, bool) for v in value
            ):
                raise PlanError(f"plan file {path}: {key} must be a list of {item_type.__name__}")
            if item_type is float:
                value = [float(v) for v in value]
        elif not isinstance(value, expected) or (isinstance(value, bool) and bool not in expected):
            raise PlanError(f"plan file {path}: {key} must be {' or '.join(t.__name__ for t in expected)}")
        values[key_name] = value
    return values
