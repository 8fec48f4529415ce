"""The plan as data: the whole sweep (``Plan``), its torchrun launches (``Launch``) and the configurations
measured in them (``ConfigSpec``).

``ddptop.run.plan`` builds a ``Plan`` from the user's options; the runner, the session and the reports only
read these frozen records, and a run directory keeps them as JSON (``to_json``/``from_json``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any

from ddptop.protocol import jsontypes
from ddptop.protocol import strategies as strategies_mod
from ddptop.protocol import variants as variants_mod
from ddptop.protocol.launchspec import RunConfig
from ddptop.protocol.vocab import Mode, OnFailure, Scaling
from ddptop.protocol.modelspec import Kind, display_name, kind_of


@dataclass(frozen=True)
class ConfigSpec(RunConfig):
    """One measured configuration as the core plans, runs and reports it.

    Its fields are ``RunConfig``'s (``ddptop.protocol.launchspec``), what a rank reads from launch.json, so
    the two cannot drift apart; those that name it are ``ConfigFields``' (``ddptop.protocol.config_fields``),
    which the rank's config_start and the view's snapshot carry too. This class only adds what the core
    derives from them. ``to_json`` and ``from_json`` are RunConfig's: the JSON shape is the one on disk in
    plan.json, launch.json and summary.json.
    """

    @property
    def label(self) -> str:
        """The row label of PyTorch's DDP benchmark: machines/devices per machine, e.g. 1M/2G (P for CPU
        processes)."""
        if self.mode == Mode.NO_DDP:
            return f"no ddp x{self.threads}t" if self.threads else "no ddp"
        unit = "G" if self.device == "cuda" else "P"
        if self.mode == Mode.DP:
            return f"DP/{self.world_size}{unit}"
        label = f"{self.nnodes}M/{self.world_size // self.nnodes}{unit}"
        if self.threads:  # a thread sweep's (--threads): 1M/2P x4t
            label = f"{label}x{self.threads}t"
        if self.strategy != strategies_mod.DDP and self.variant == variants_mod.DEFAULT:  # --strategies
            label = f"{label} {self.strategy}"
        return label if self.variant == variants_mod.DEFAULT else f"{label} {self.variant}"  # ddptop tune

    @property
    def processes(self) -> int:
        """Ranks that report samples: one for the no-DDP baseline and for DataParallel, else N."""
        return 1 if self.mode in (Mode.NO_DDP, Mode.DP) else self.world_size


def rotated(items: Sequence[ConfigSpec], shift: int) -> list[ConfigSpec]:
    """``items`` rotated left by ``shift`` (A B C, B C A, C A B), so that each is early once and late once."""
    if not items:
        return []
    shift %= len(items)
    return [*items[shift:], *items[:shift]]


@dataclass(frozen=True)
class Launch:
    """Configurations run inside one torchrun launch (one world size, one backend, on ``nodes`` nodes)."""

    world_size: int
    backend: str
    configs: tuple[ConfigSpec, ...]
    nodes: int = 1
    replicate: int = 0  # which of the plan's launches of these configurations (their round)
    env: tuple[tuple[str, str], ...] = ()  # the launch's own environment (an NCCL variant of ddptop tune)
    # the CPU part of a plan on GPUs (--devices cpu,cuda): "cpu"; "": the plan's device
    device: str = ""
    # each rank's threads in a thread sweep (--threads), bound to as many cores; 0: the plan's threads_per_rank
    threads: int = 0

    @property
    def launch_key(self) -> str:
        key = f"n{self.world_size}-{self.nodes}nodes-{self.backend}" if self.nodes > 1 else (
            f"n{self.world_size}-{self.backend}")
        key += f"-{self.device}" if self.device else ""
        key += f"-t{self.threads}" if self.threads else ""
        return key + "".join(f"-{name.lower()}-{value.lower()}" for name, value in self.env)

    @property
    def nproc_per_node(self) -> int:
        return self.world_size // self.nodes


def ranks_on_a_node(world_size: int, nnodes: int, per_node: int) -> int:
    """The ranks one node runs at ``world_size``: all of them on one node, at most ``per_node`` over several."""
    return min(world_size, per_node) if nnodes > 1 else world_size


def share_of_cores(cpu_count: int, world_size: int, nnodes: int, per_node: int) -> int:
    """Each rank's equal share of the ``cpu_count`` cores ddptop may use on a node, at ``world_size``."""
    return max(1, cpu_count // max(1, ranks_on_a_node(world_size, nnodes, per_node)))


# a script's fields of the plan (its tune's, how its ids name it), left out of plan.json where unset
SCRIPT_TUNE_FIELDS = ("script_tune", "script_tries", "tries_why", "not_tried", "script_loader", "threads_from",
                      "script_named")


@dataclass(frozen=True)
class Plan:
    """A validated sweep, every default resolved for the machine it runs on."""

    models: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    world_sizes: tuple[int, ...]
    scaling: Scaling
    backends: tuple[str, ...]
    device: str
    gpus: tuple[int, ...] | None
    image_size: int
    num_classes: int
    warmup: int | None  # None: --warmup auto
    iters: int | None  # None: --iters auto
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
    trace_steps: int = 0  # profiled steps after each configuration's measured ones; 0 in a plan from before traces
    collectives: tuple[str, ...] = ()
    coll_min_bytes: int = 1024
    coll_max_bytes: int = 16 * 2**20
    coll_iters: int = 10
    batch_sweep: bool = False
    memory_cap_mb: float | None = None
    efficiency_threshold: float = 0.7
    price_per_gpu_hour: float | None = None
    epoch_examples: int = 1_281_167
    internode_gbps: float = 25.0  # the projection beyond this node: network GB/s per node
    compare_dp: bool = False
    inject: tuple[str, ...] = ()  # fault injection specs (bench_kernels.faults), a testing aid
    hang_timeout: float = 300.0  # seconds without any rank event before a configuration counts as hung
    on_failure: OnFailure = OnFailure.CONTINUE  # or STOP: end the sweep at the first failed configuration
    nproc_per_node: int = 0  # ranks per node of a multi-node plan; world sizes above it span nodes
    # the adaptive measurement (--iters auto, --warmup auto) and the rounds; a plan.json written before
    # these existed ran fixed counts, which these defaults leave alone
    precision: float = 0.05
    min_iters: int = 10
    max_iters: int = 200
    max_time_per_config: float = 20.0
    max_warmup: int = 50
    # separate launches that measure every configuration (the unit of replication: a launch carries an
    # offset no step inside it can show); a plan.json from before this field ran each in one launch
    launches_per_config: int = 1
    # the CUDA identity (GPU-… or MIG-… UUID) of each local rank's device, from NVML at plan time; empty when
    # NVML could not say (ranks then get --gpus positions). per_rank_devices: each rank sees only its own
    # device (MIG: one instance per CUDA process), else all ranks see the whole list.
    broadcast_buffers: bool = True  # DDP's broadcast_buffers (RunConfig)
    rank_devices: tuple[str, ...] = ()
    per_rank_devices: bool = False
    bind_cores: bool = True  # each rank on CPUs of its own (ddptop.run.binding); plans from before it ran unbound
    # the DDP variants measured beside each DDP configuration (ddptop tune; ddptop.protocol.variants)
    variants: tuple[str, ...] = (variants_mod.DEFAULT,)
    keep_slower: bool = False  # ddptop tune: no variant dropped as slower before its last launch
    variants_skipped: tuple[str, ...] = ()  # asked for, but not measured on this device (GPU-only variants)
    search_budget: float | None = None  # ddptop tune: seconds after which no further round of launches starts
    seq_len: int | None = None  # --seq-len: tokens per example of the transformer models (None: each one's own)
    seq_lens: dict[str, int] = field(default_factory=dict)  # resolved: each transformer model's tokens per example
    # the data-parallel strategies measured at every world size, DDP first (ddptop.protocol.strategies)
    strategies: tuple[str, ...] = (strategies_mod.DDP,)
    # a Hugging Face model's config overrides (hf_config), beneath those of its spec (hf:llama:key=value)
    hf_config: dict[str, Any] = field(default_factory=dict)
    # tokens per example of each model that has tokens: a transformer preset's sequence length, what a
    # workload's tokens(batch) counted before the sweep (ddptop.run.workloads)
    tokens_per_example: dict[str, float] = field(default_factory=dict)
    # what the check of each factory and hf model found before the sweep (ddptop.protocol.workload.WorkloadFacts)
    workloads: dict[str, dict[str, Any]] = field(default_factory=dict)
    # variants asked for but left out, and why, beyond the GPU-only ones (channels_last without image inputs)
    variant_reasons: dict[str, str] = field(default_factory=dict)
    # --threads: the thread counts asked for; cpu_grid: the (world size, threads per rank) splits of the cores
    # measured on the CPU, each its own launch (a thread sweep, or the CPU part of --devices cpu,cuda); empty:
    # every world size at its threads_per_rank alone
    threads: tuple[int, ...] = ()
    cpu_grid: tuple[tuple[int, int], ...] = ()
    cpu_cores: int = 0  # the cores this process could use when the plan was made (its affinity)
    # --devices cpu,cuda: the devices compared (the plan's device runs its usual sweep, the CPU its cpu_grid);
    # devices_skipped: one asked for but not measured, and why (no usable GPU)
    devices: tuple[str, ...] = ()
    devices_skipped: dict[str, str] = field(default_factory=dict)
    # the user's training script (``ddptop run -- train.py ARGS``): the command every rank runs after
    # ``bench_kernels.script_probe --spec launch.json --`` (a file's path absolute), in ``script_dir``, the
    # directory ddptop was started in, as ``torchrun train.py`` would run it; empty for a plan of kernels
    script: tuple[str, ...] = ()
    script_dir: str = ""
    # how a script's configuration ids name it: "file" (``train.py/n2/gloo``: the script's file); "" in plans
    # written before, whose ids hold its spec as typed with its arguments (``script:train.py --lr 0.1/n2/gloo``)
    # and whose recorded events are found by those
    script_named: str = ""
    script_to_end: bool = False  # the script runs to its own end instead of ddptop's stop
    # ddptop tune -- train.py: its tries are added after the script's first run (the script as written, one
    # launch), those asked for (script_tries) or chosen from what that run measured (analysis.script_tries); why
    # each was tried and why each kind of setting was not; the training loader's line the loader's tries set
    script_tune: bool = False
    script_tries: tuple[str, ...] = ()
    tries_why: dict[str, str] = field(default_factory=dict)
    not_tried: dict[str, str] = field(default_factory=dict)
    script_loader: str = ""
    # on the CPU, where the script as written's threads per rank come from (plan_devices.as_written_threads)
    threads_from: str = ""

    @property
    def cpu_part(self) -> bool:
        """The CPU measured beside the GPUs (--devices cpu,cuda on a node with a usable GPU)."""
        return self.device == "cuda" and "cpu" in self.devices

    def thread_splits(self) -> list[tuple[int, int]]:
        """(world size, threads per rank) of every launch: the plan's share of the cores at each world size,
        and each split of a thread sweep."""
        own = [] if self.cpu_grid and self.device == "cpu" else list(self.threads_per_rank.items())
        return sorted(set(own) | set(self.cpu_grid))

    def measures_collectives(self, launch: Launch) -> bool:
        """Whether the collective benchmark runs in this launch's shape: once per world size and backend, so a
        thread sweep's in the launch with the most threads at its world size, and never in the CPU part of a
        plan on GPUs (the benchmark there is of the GPUs' links)."""
        if launch.device and launch.device != self.device:
            return False
        if not launch.threads:
            return True
        grid = [t for n, t in self.cpu_grid if n == launch.world_size]
        return bool(grid) and launch.threads == max(grid)  # a script's thread try: its as-written launches measure it

    def core_share(self, world_size: int) -> int:
        """Each rank's share of the cores ddptop may use at ``world_size``: what a rank gets by default."""
        return share_of_cores(self.cpu_cores or 1, world_size, self.nnodes, self.nproc_per_node)

    def bound_cores(self, world_size: int, threads: int) -> int:
        """The CPUs each CPU rank is bound to: as many as its threads; in a script's tune its share of the cores
        whatever its thread count, so the script as written (at its launch's count), its loader's workers and
        every try run on the same CPUs (torchrun alone binds nothing)."""
        return self.core_share(world_size) if self.script_tune else threads

    def threads_for(self, world_size: int, threads: int = 0) -> int:
        """Each rank's threads: a thread sweep's own count, else the plan's share of the cores at N."""
        return threads or self.threads_per_rank.get(world_size) or 1

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
        """Every launch of the sweep in the order it runs: the plan's launches once per replicate, the world
        sizes ascending in even replicates and descending in odd ones (1 2 4 8 8 4 2 1), so that slow drift
        of the machine falls on every world size alike instead of posing as scaling; within a launch the
        configurations' order is rotated by the replicate (A B C, then B C A), for the same reason."""
        once = self._launches_once()
        result = []
        for replicate in range(max(1, self.launches_per_config)):
            ordered = once if replicate % 2 == 0 else once[::-1]
            for launch in ordered:
                configs = rotated(launch.configs, replicate)
                result.append(replace(launch, configs=tuple(replace(c, round=replicate) for c in configs),
                                      replicate=replicate))
        return result

    def _launches_once(self) -> list[Launch]:
        result = []
        data_parallel = self._data_parallel_configs()
        if data_parallel and 1 not in self.world_sizes:  # DataParallel is one process: it needs an N=1 launch
            result.append(Launch(1, self.backends[0], tuple(data_parallel)))
            data_parallel = []
        for world_size, backend, device, threads in self._placements():
            configs = []
            baseline = self.baseline and world_size == 1 and threads == self._baseline_threads(device)
            place = {"device": device, "threads": threads}
            for model in self.models:
                for batch in self.batch_sizes:
                    modes = [Mode.NO_DDP, Mode.DDP] if baseline else [Mode.DDP]
                    for mode in modes:
                        caps = self.bucket_cap_mb if mode == Mode.DDP else self.bucket_cap_mb[:1]
                        for cap in caps:
                            configs.append(self._config(model, batch, world_size, backend, mode, cap, **place))
                        if mode == Mode.DDP:
                            configs += [self._config(model, batch, world_size, backend, mode, caps[0], name, **place)
                                        for name in self.variants if name != variants_mod.DEFAULT]
                            configs += [self._config(model, batch, world_size, backend, mode, caps[0],
                                                     strategy=name, **place)
                                        for name in self.strategies if name != strategies_mod.DDP]
            if world_size == 1 and backend == self.backends[0] and device == self.device and not threads:
                configs += data_parallel
            # a variant with an environment of its own (NCCL reads it at init) runs in a launch of its own, and
            # so does each configuration of a script, which runs once in a launch
            alone = [c for c in configs if variants_mod.variant(c.variant).env or (self.script and c is not configs[0])]
            shared = [c for c in configs if c not in alone]
            own = "" if device == self.device else device
            result.append(Launch(world_size, backend, tuple(shared), self.nodes_for(world_size), device=own,
                                 threads=threads))
            result += [Launch(world_size, backend, (c,), self.nodes_for(world_size),
                              env=variants_mod.variant(c.variant).env, device=own, threads=c.threads or threads)
                       for c in alone]
        return result

    def _placements(self) -> list[tuple[int, str, str, int]]:
        """(world size, backend, device, threads) of each launch of one replicate: the plan's world sizes on
        its device, a CPU plan's thread sweep over its grid instead, and the CPU part after the GPUs' sweep.
        threads 0: the plan's threads_per_rank, as before thread sweeps."""
        if self.cpu_grid and self.device == "cpu":
            return [(n, backend, "cpu", t) for n, t in self.cpu_grid for backend in self.backends]
        placed = [(n, backend, self.device, 0) for n in self.world_sizes for backend in self.backends]
        if self.cpu_part:
            placed += [(n, "gloo", "cpu", t) for n, t in self.cpu_grid]
        return placed

    def _baseline_threads(self, device: str) -> int:
        """The thread count whose N=1 launch holds the no-DDP baseline: the most threads of a thread sweep's
        N=1 (one baseline per device, not one per thread count)."""
        if device != "cpu" or not self.cpu_grid:
            return 0
        return max((t for n, t in self.cpu_grid if n == 1), default=-1)

    def _data_parallel_configs(self) -> list[ConfigSpec]:
        """torch.nn.DataParallel at every N > 1, run by a single process: the classic comparison with DDP."""
        if not self.compare_dp:
            return []
        return [
            self._config(model, batch, n, self.backends[0], Mode.DP, self.bucket_cap_mb[0])
            for model in self.models
            for batch in self.batch_sizes
            for n in self.world_sizes
            if n > 1
        ]

    def configs(self) -> list[ConfigSpec]:
        """Every configuration once, in the order of its first launch (as round 0)."""
        return [c for launch in self._launches_once() for c in launch.configs]

    def _config(self, model: str, batch: int, world_size: int, backend: str, mode: Mode, cap: float,
                variant: str = variants_mod.DEFAULT, strategy: str = strategies_mod.DDP, device: str = "",
                threads: int = 0) -> ConfigSpec:
        per_rank = batch if self.scaling == Scaling.WEAK else batch // world_size
        launches = max(1, self.launches_per_config)
        nodes = 1 if mode == Mode.DP else self.nodes_for(world_size)
        spread = f"/{nodes}nodes" if nodes > 1 else ""
        device = device or self.device
        config_id = f"{model}/{mode}/bs{per_rank}/n{world_size}{spread}/{backend}"
        if self.script:  # its batch is the script's own: no batch in its name; the script by its file alone
            config_id = f"{display_name(model) if self.script_named == 'file' else model}/n{world_size}{spread}/{backend}"
        config_id += f"/{device}" if device != self.device else ""  # the CPU part of a plan on GPUs
        config_id += f"/t{threads}" if threads else ""  # a thread sweep's
        if len(self.bucket_cap_mb) > 1 and mode == Mode.DDP:  # ids stay comparable across runs of one cap
            config_id += f"/bucket{cap:g}"
        # the CPU part of a plan on GPUs measures fp32, as every CPU run does (autocast is a GPU setting)
        amp, channels_last = (None if device == "cpu" else self.amp), self.channels_last
        if variant != variants_mod.DEFAULT:  # the default keeps the id a sweep gives it
            config_id += f"/{variant}"
            chosen = variants_mod.variant(variant)
            cap = chosen.bucket_cap_mb or cap
            threads = chosen.threads or threads  # a script's thread try: its launch's threads
            amp, channels_last = chosen.amp or amp, chosen.channels_last or channels_last
            strategy = chosen.strategy or strategy  # ZeRO-1 or FSDP2 as a candidate of ddptop tune
        elif strategy != strategies_mod.DDP:  # its own id, the plain DDP one's with the strategy for the mode
            config_id = config_id.replace(f"/{mode}/", f"/{strategy}/", 1)
        return ConfigSpec(
            config_id=config_id,
            model=model,
            mode=mode,
            batch_size=per_rank,
            global_batch=per_rank * world_size,
            world_size=world_size,
            nnodes=nodes,
            backend=backend,
            device=device,
            scaling=self.scaling,
            image_size=self.image_size,
            num_classes=self.num_classes,
            warmup=self.warmup,
            iters=self.iters,
            time_budget=self.time_budget,
            bucket_cap_mb=cap,
            amp=amp,
            channels_last=channels_last,
            # the communication probe times DDP's no_sync() and buckets: DDP as written only
            comm_iters=self.comm_iters if mode == Mode.DDP and strategy == strategies_mod.DDP else 0,
            # the configuration's measured steps split between its launches rather than repeated in each: a
            # launch's median needs only sqrt(K) times the precision for the pooled one to reach the target,
            # and gets 1/K of the step and time limits (a fixed --iters N stays N steps in every launch)
            precision=min(0.5, self.precision * math.sqrt(launches)),
            min_iters=self.min_iters,
            max_iters=max(self.min_iters, math.ceil(self.max_iters / launches)),
            max_time_per_config=self.max_time_per_config / launches,
            max_warmup=self.max_warmup,
            rounds=launches,
            broadcast_buffers=self.broadcast_buffers,
            variant=variant,
            seq_len=self.seq_lens.get(model),
            strategy=strategy,
            hf_config=(self.hf_config or None) if kind_of(model) is Kind.HF else None,
            tokens_per_example=self.tokens_per_example.get(model),
            trace_steps=self.trace_steps,
            threads=threads,
            script_to_end=self.script_to_end,
            loader_site=self.script_loader if variant != variants_mod.DEFAULT and variants_mod.variant(variant).loader_kwargs
            else "",
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["threads_per_rank"] = {str(k): v for k, v in self.threads_per_rank.items()}
        for key in SCRIPT_TUNE_FIELDS:  # a plan of kernels, or a run of a script: as plans before a script's tune
            if not data[key]:
                del data[key]
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "Plan":
        """A saved plan.json; a ValueError names the fields of a damaged one."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        cap = data.get("bucket_cap_mb")  # one number in plans written before it became a list
        wrong = jsontypes.wrong_fields(cls, data, skip=("bucket_cap_mb",) if jsontypes.fits(cap, float) else ())
        if wrong:
            raise ValueError(f"fields of the wrong type: {', '.join(wrong)}")
        values = {f.name: data[f.name] for f in fields(cls) if f.name in data}
        for key in ("models", "batch_sizes", "world_sizes", "backends"):
            values[key] = tuple(values[key])
        cap = values.get("bucket_cap_mb", 25.0)
        values["bucket_cap_mb"] = tuple(cap) if isinstance(cap, (list, tuple)) else (float(cap),)
        values["collectives"] = tuple(values.get("collectives", ()))
        values["inject"] = tuple(values.get("inject", ()))
        values["rank_devices"] = tuple(values.get("rank_devices", ()))
        values["variants"] = tuple(values.get("variants", (variants_mod.DEFAULT,)))
        values["variants_skipped"] = tuple(values.get("variants_skipped", ()))
        values["strategies"] = tuple(values.get("strategies", (strategies_mod.DDP,)))
        values["threads"] = tuple(values.get("threads", ()))
        values["script"] = tuple(values.get("script", ()))
        values["script_tries"] = tuple(values.get("script_tries", ()))
        values["cpu_grid"] = tuple((int(n), int(t)) for n, t in values.get("cpu_grid", ()))
        values["devices"] = tuple(values.get("devices", ()))
        if values.get("gpus") is not None:
            values["gpus"] = tuple(values["gpus"])
        values["threads_per_rank"] = {int(k): int(v) for k, v in data["threads_per_rank"].items()}
        values["scaling"] = Scaling(values["scaling"])
        if "on_failure" in values:
            values["on_failure"] = OnFailure(values["on_failure"])
        return cls(**values)
