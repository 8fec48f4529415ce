"""Every option of ``ddptop run``, defined once.

Each ``Option`` record says what the option is (name, type, default, list or not) and how the command line
spells it. From the one table ``RUN_OPTIONS`` come the ``ddptop run`` flags (``add_run_arguments``), the
keys and value types a TOML plan file accepts (``toml_types``), the ``PlanOptions`` dataclass and the merge
of a plan file with the flags (``merge_plan_options``), so adding an option is one line here plus its use
in ``ddptop.run.plan``. Options with ``in_plan=False`` (--headless, --out, ...) steer one run and are flags only.

Standard library only: the command line imports this before it knows whether torch or Textual is needed.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable

from ddptop.analysis.step_change import DEFAULT_MIN_EFFECT
from ddptop.protocol.vocab import OnFailure, Scaling

# argparse group titles, in the order ``ddptop run --help`` shows them
WHAT = "what to run"
ANALYSIS = "analysis"
FAULTS = "faults"
NODES = ("several nodes (torchrun's rendezvous; start the same command on every node, --out on a shared "
         "filesystem)")
COST = "cost (service units: SU = (w_core*cores + w_gpu*gpus) * walltime)"
OUTPUT = "output"

DEVICES = ("auto", "cuda", "cpu")
AUTO = "auto"  # --iters auto, --warmup auto: measured until precise (or steady), not a fixed count
BACKENDS = ("auto", "nccl", "gloo")
# Frames a second of the live view. The telemetry comes once a second and the step chart is redrawn every
# 2-4 s, so a second frame between them only moves the running row and the clock: in tmux at 160x50 the view took
# 3.0-3.1% of a core at 1 a second against 4.0-4.9% at 2, headless 1.6% (benchmarks/tmux_cost.py, side by side);
# a step reaches the screen within a second. --fps 2 or 4 for less delay, at that cost.
DEFAULT_FPS = 1.0
AMP_DTYPES = ("bf16", "fp16")


@dataclass(frozen=True)
class Flag:
    """A second flag writing a fixed value into an option, e.g. ``--no-collectives``."""

    spelling: str
    action: str
    const: Any = None
    help: str | None = None


@dataclass(frozen=True)
class Option:
    """One option: the value it holds and how the command line spells it.

    ``default`` is the ``PlanOptions`` default, where ``None`` means "decided for this machine" by
    ``build_plan``. The flag's own default is ``cli_default`` (``None``: not given, so the plan file or
    ``default`` decides); only options that are not part of the plan have another.
    """

    name: str
    type: type  # of the value, or of each item of a list
    default: Any = None
    is_list: bool = False
    group: str | None = None  # argparse group title; None: the run parser itself
    help: str | None = None
    flag: str | None = None  # spelling, when not --name-with-dashes
    action: str | None = None  # argparse action; None parses a value (a comma-separated list for lists)
    const: Any = None
    nargs: str | None = None
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    cli_default: Any = None
    in_plan: bool = True  # a PlanOptions field and a TOML key
    cli: bool = True  # a flag of its own; False: set otherwise (the script after --)
    also: tuple[Flag, ...] = ()
    parse: Callable[[str], Any] | None = None  # the flag's argparse type, when not ``type`` itself
    accepts: tuple[type, ...] | None = None  # what the value may be, when more than ``type`` (e.g. int or "auto")

    @property
    def spelling(self) -> str:
        return self.flag or "--" + self.name.replace("_", "-")

    @property
    def annotation(self) -> str:
        if self.accepts:
            kind = " | ".join(t.__name__ for t in self.accepts)
        else:
            kind = f"list[{self.type.__name__}]" if self.is_list else self.type.__name__
        return kind if self.default is not None else f"{kind} | None"

    @property
    def toml_types(self) -> tuple[type, ...]:
        """What a plan file may hold: ``(list, item type)`` for a list, else the types accepted as the value."""
        if self.is_list:
            return (list, self.type)
        if self.accepts:
            return self.accepts
        return (float, int) if self.type is float else (self.type,)


def unique(values: list[Any]) -> tuple[Any, ...]:
    """An option's values in the order given, each once."""
    return tuple(dict.fromkeys(values))


def _values(enum: Any) -> tuple[str, ...]:
    return tuple(member.value for member in enum)


def key_values(text: str) -> dict[str, Any]:
    """An argparse type for ``key=value,key=value`` (numbers and true/false as such, else text)."""
    from ddptop.protocol.modelspec import config_value

    found: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise argparse.ArgumentTypeError(f"{part!r} is not key=value")
        found[key.strip()] = config_value(value.strip())
    return found


def count_or_auto(text: str) -> int | str:
    """An argparse type for ``auto`` or a whole number (range checks are the plan's)."""
    if text.strip().lower() == AUTO:
        return AUTO
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is neither auto nor a whole number") from None


RUN_OPTIONS: tuple[Option, ...] = (
    Option("headless", bool, action="store_true", cli_default=False, in_plan=False,
           help="no TUI: progress bars, then the tables (the default when stdout is not a terminal)"),
    Option("no_mouse", bool, action="store_true", cli_default=False, in_plan=False,
           help="TUI: leave the mouse to the terminal"),
    Option("ascii", bool, action="store_true", cli_default=False, in_plan=False,
           help="ASCII only (no braille, block or box-drawing characters), in the TUI and headless"),
    # -- what to run
    Option("models", str, is_list=True, group=WHAT,
           help="torchvision names, gpt-tiny ..., package.module:factory (your own model or workload, "
                "docs/workloads.md) or hf:<model_type>[:key=value]... (a Hugging Face model from its config)"),
    # your own training script, as it is: ``ddptop run [flags] -- train.py ARGS`` (or ``-- -m package.module
    # ARGS``); in a plan file, script = ["train.py", "--epochs", "1"]
    Option("script", str, is_list=True, group=WHAT, cli=False),
    Option("script_to_end", bool, False, group=WHAT, action="store_true",
           help="with a script after --: let it run to its own end, every step measured, instead of ending it "
                "after the warm-up and measured steps"),
    Option("batch_sizes", int, is_list=True, group=WHAT, help="per rank (weak) or global (strong)"),
    Option("world_sizes", int, is_list=True, group=WHAT, help="default 1,2,4,... up to the GPUs"),
    Option("scaling", str, Scaling.WEAK, group=WHAT, choices=_values(Scaling),
           help="weak: fixed per-rank batch (default)"),
    Option("backend", str, ("auto",), is_list=True, group=WHAT, help="auto, nccl, gloo (a list sweeps them)"),
    Option("device", str, "auto", group=WHAT, choices=DEVICES),
    Option("gpus", int, is_list=True, group=WHAT, help="GPU indices to use (sets CUDA_VISIBLE_DEVICES)"),
    Option("image_size", int, group=WHAT, help="square input size in pixels (default 224 GPU, 64 CPU)"),
    Option("seq_len", int, group=WHAT, metavar="TOKENS",
           help="tokens per example of the transformer models (gpt-tiny ...; default: the model's own, 128 to "
                "1024); --image-size means nothing to them"),
    Option("num_classes", int, 1000, group=WHAT),
    Option("hf_config", dict, group=WHAT, parse=lambda text: key_values(text), metavar="KEY=VALUE,...",
           help="config overrides of every hf: model, e.g. hidden_size=512,num_hidden_layers=4 (a model "
                "spec's own, hf:llama:key=value, win)"),
    Option("warmup", int, group=WHAT, parse=count_or_auto, accepts=(int, str), metavar="auto|N",
           help="warm-up steps, not measured: auto (default) warms up until the step time stops falling, "
                "at most --max-warmup steps and a third of --max-time-per-config; N runs exactly N"),
    Option("iters", int, group=WHAT, parse=count_or_auto, accepts=(int, str), metavar="auto|N",
           help="measured steps: auto (default) measures until the median is known to --precision, between "
                "--min-iters and --max-iters steps and at most --max-time-per-config seconds; N runs exactly N"),
    Option("precision", float, group=WHAT, metavar="FRACTION",
           help="--iters auto: stop once the 95%% interval of the median is within +-FRACTION of it (default "
                "0.02 GPU, 0.05 CPU); --warmup auto: steady once the step time falls by less than this"),
    Option("min_iters", int, group=WHAT, help="--iters auto: measure at least this many steps (default 10)"),
    Option("max_iters", int, group=WHAT, help="--iters auto: measure at most this many steps (default 1000 GPU, "
                                               "200 CPU)"),
    Option("max_time_per_config", float, group=WHAT, metavar="SECONDS",
           help="--iters auto: stop measuring a configuration after this many seconds (default 60 GPU, 20 CPU)"),
    Option("max_warmup", int, group=WHAT, help="--warmup auto: at most this many warm-up steps (default 50)"),
    Option("launches", int, group=WHAT, metavar="K",
           help="measure every configuration in K separate torchrun launches, the world sizes interleaved "
                "(1 2 4 4 2 1), the measured steps split between them; intervals then include the "
                "launch-to-launch spread (default 3; 1: within-launch intervals only)"),
    Option("rounds", int, group=WHAT, metavar="K", help="the old name of --launches"),
    # On by default, as the measure against launch-to-launch offsets; benchmarks/launch_spread.py compares
    # the spread of launch p50s with and without it (--no-bind-cores), interleaved.
    Option("bind_cores", bool, True, group=WHAT, flag="--no-bind-cores", action="store_false",
           help="leave the ranks unbound (default: each CPU rank on cores of its own, each GPU rank on its "
                "GPU's NUMA node)",
           also=(Flag("--bind-cores", "store_const", const=True, help="bind the ranks (the default)"),)),
    Option("time_budget", float, group=WHAT,
           help="measure for about this many seconds instead (--iters and the precision settings are not used)"),
    Option("bucket_cap_mb", float, (25.0,), is_list=True, group=WHAT,
           help="DDP gradient bucket size in MiB (default 25; a list sweeps them, e.g. 25,1)"),
    Option("baseline", bool, True, group=WHAT, flag="--no-baseline", action="store_false",
           help="skip the no-DDP row at N=1"),
    Option("amp", str, group=WHAT, nargs="?", const="bf16", choices=AMP_DTYPES, help="autocast on GPU (bf16)"),
    Option("channels_last", bool, False, group=WHAT, action="store_true"),
    # On by default, as DDP's own default: the step a training script runs re-sends BatchNorm's running
    # statistics from rank 0 before every forward, and that broadcast is part of what scaling costs it.
    # PyTorch's DDP benchmark (benchmarks/distributed/ddp/benchmark.py) turns it off to time the gradient
    # allreduce alone; --no-broadcast-buffers measures that way.
    Option("broadcast_buffers", bool, True, group=WHAT, flag="--no-broadcast-buffers", action="store_false",
           help="DDP without re-sending module buffers from rank 0 each step (as PyTorch's DDP benchmark runs; "
                "default: DDP's own default, on)"),
    Option("threads_per_rank", int, group=WHAT, help="CPU threads per rank (default: usable cores / N)"),
    Option("threads", int, is_list=True, group=WHAT,
           help="CPU thread sweep: each rank's intra-op threads, bound to as many cores, e.g. 1,2,4,8; with "
                "--world-sizes, every ranks x threads split that fits the usable cores"),
    Option("devices", str, is_list=True, group=WHAT,
           help="cpu,cuda: the same model and batch on the CPU and on the GPUs in one run, compared in "
                "examples/s and service units (without a usable GPU: the CPU part, and why)"),
    Option("variants", str, is_list=True, group=WHAT,
           help="DDP variants measured beside each DDP configuration (ddptop tune; 'ddptop tune --help' lists "
                "them; default: DDP as written only)"),
    Option("strategies", str, is_list=True, group=WHAT,
           help="data-parallel strategies measured beside DDP at every world size: zero1 (ZeroRedundancyOptimizer "
                "under DDP), fsdp2 (fully_shard), fsdp2_no_reshard (reshard_after_forward=False); default: ddp only"),
    Option("keep_slower", bool, False, group=WHAT, action="store_true",
           help="ddptop tune: measure every variant in every launch, none dropped as slower (what the search "
                "saves: benchmarks/tune_cost.py)"),
    Option("search_budget", float, group=WHAT, metavar="SECONDS",
           help="ddptop tune: start no further round of launches once the search would pass this many seconds "
                "(default 600 on the CPU, 1800 on GPUs; every configuration keeps at least two launches)"),
    Option("tune", bool, False, group=WHAT, flag="--tune", action="store_true",
           help="the plan of ddptop tune: one model, batch and world size (the largest), every variant, no "
                "baseline, communication analysis, collectives or traces unless asked"),
    # -- analysis
    Option("comm_iters", int, group=ANALYSIS,
           help="steps of each communication phase per DDP configuration: no_sync() and timed buckets "
                "(default max(5, iters/4); 0 skips both)"),
    Option("trace_steps", int, group=ANALYSIS, metavar="N",
           help="profiler-traced steps after each configuration's measured ones, written to traces/ and "
                "broken down by ddptop (default 3; 0 or --no-trace: none)",
           also=(Flag("--no-trace", "store_const", const=0, help="no profiler trace of any configuration"),)),
    Option("collectives", str, is_list=True, group=ANALYSIS,
           help="collective benchmark at the end of each launch with N>=2: allreduce, allgather, reduce_scatter, "
                "broadcast (default allreduce)",
           also=(Flag("--no-collectives", "store_const", const=[], help="skip the collective benchmark"),)),
    Option("coll_min_bytes", str, "1KiB", group=ANALYSIS, help="smallest collective message (default 1KiB)"),
    Option("coll_max_bytes", str, group=ANALYSIS, help="largest collective message (default 1GiB GPU, 16MiB CPU)"),
    Option("coll_iters", int, group=ANALYSIS, help="timed operations per message size (default 20 GPU, 10 CPU)"),
    Option("batch_sweep", bool, False, group=ANALYSIS, action="store_true",
           help="double the batch from the first --batch-sizes value until out of memory"),
    Option("max_batch", int, group=ANALYSIS, help="largest batch of --batch-sweep (default 4096 GPU, 256 CPU)"),
    Option("memory_cap_mb", float, group=ANALYSIS,
           help="per-rank memory cap, as if the device were smaller (GPU: allocator limit; CPU: counted "
                "weights+gradients+momentum+layer outputs)"),
    Option("compare_dp", bool, False, group=ANALYSIS, action="store_true",
           help="also run torch.nn.DataParallel (one process, N devices) at every N > 1"),
    Option("efficiency_threshold", float, 0.7, group=ANALYSIS,
           help="efficiency below which adding devices stops paying (default 0.7)"),
    Option("price_per_gpu_hour", float, group=ANALYSIS,
           help="price of one GPU-hour (one rank-hour on CPU) for the cost per million examples"),
    Option("epoch_examples", int, 1_281_167, group=ANALYSIS,  # ImageNet-1k's training set
           help="examples per epoch for the data-moved-per-epoch figure (default 1281167, ImageNet)"),
    Option("internode_gbps", float, 25.0, group=ANALYSIS, metavar="GB/s",
           help="network bandwidth per node for the projection beyond this node (default 25 GB/s, one 200 Gb/s NIC)"),
    # -- faults
    Option("hang_timeout", float, 300.0, group=FAULTS, metavar="SECONDS",
           help="a configuration with no event from any rank this long is hung: stopped, marked failed, the "
                "sweep goes on (default 300; starting a launch, building a model and compiling a first step "
                "get at least 120); also bounds each phase of the check of your own models before launch"),
    Option("on_failure", str, OnFailure.CONTINUE, group=FAULTS, choices=_values(OnFailure),
           help="after a failed configuration: go on with the next (default) or stop the sweep"),
    Option("inject", str, is_list=True, group=FAULTS, action="append", metavar="KIND:rank=R:iter=I",
           help="testing aid: make a rank crash, oom, hang, kill or exit at a step, or run slow "
                "(slow:rank=R:factor=F: its compute takes F times as long) (repeatable)"),
    # -- several nodes
    Option("nnodes", int, 1, group=NODES, help="nodes in the sweep (default 1)"),
    Option("nproc_per_node", int, group=NODES,
           help="ranks per node; world sizes above it span nodes (default: the node's GPUs, 2 on CPU)"),
    Option("node_rank", int, group=NODES, in_plan=False,
           help="this node's rank: 0 runs the sweep, the others follow it"),
    Option("rdzv_endpoint", str, group=NODES, metavar="HOST:PORT", in_plan=False,
           help="node 0's address and a free port"),
    Option("join_timeout", float, group=NODES, metavar="SECONDS", cli_default=600.0, in_plan=False,
           help="how long a launch waits for every node to join (default 600)"),
    Option("slurm", bool, group=NODES, action="store_true", cli_default=False, in_plan=False,
           help="read nodes, node rank and endpoint from SLURM (srun --ntasks-per-node=1 ddptop ...)"),
    # -- cost
    Option("cores_per_rank", float, group=COST, help="cores charged per rank (default: its threads)"),
    Option("su_core_weight", float, 1.0, group=COST),
    Option("su_gpu_weight", float, 2.0, group=COST),
    # -- output
    Option("plan", str, group=OUTPUT, metavar="PLAN.toml", in_plan=False,
           help="read the plan from TOML (flags override it)"),
    Option("out", str, group=OUTPUT, metavar="DIR", in_plan=False,
           help="run directory (default runs/<time>-<name>)"),
    Option("name", str, group=OUTPUT, help="name of the run"),
    Option("fallback_dir", str, group=OUTPUT, metavar="DIR", in_plan=False,
           help="where the summary goes when the run directory cannot take it (full disk, quota; "
                "default: a user-only directory under the system temp dir)"),
    Option("fps", float, group=OUTPUT, cli_default=DEFAULT_FPS, in_plan=False,
           help=f"display refresh rate (default {DEFAULT_FPS:g})"),
    Option("telemetry_interval", float, group=OUTPUT, metavar="SECONDS", cli_default=1.0, in_plan=False,
           help="GPU/host sampling period (default 1; 0 turns telemetry off)"),
    Option("plots", bool, group=OUTPUT, flag="--no-plots", action="store_false", cli_default=True, in_plan=False,
           help="draw no plots at the end (matplotlib: 2-3 s on a small machine, more on slow NFS); "
                "'ddptop plot RUN_DIR' draws them later"),
    # -- comparison with an earlier run (the --no-baseline flag above is the no-DDP row, not this)
    Option("baseline_run", str, group=OUTPUT, flag="--baseline", metavar="RUN_DIR|summary.json", in_plan=False,
           help="at the end, compare with this earlier run as 'ddptop diff' does, and print the changes"),
    Option("fail_on_regression", float, group=OUTPUT, metavar="PCT", in_plan=False,
           help="with --baseline: exit 1 when a configuration is slower by more than PCT%% beyond noise"),
    Option("min_effect", float, group=OUTPUT, metavar="FRACTION", cli_default=DEFAULT_MIN_EFFECT, in_plan=False,
           help="with --baseline: changes smaller than this are never called (default 0.02)"),
)

PLAN_OPTIONS: tuple[Option, ...] = tuple(o for o in RUN_OPTIONS if o.in_plan)
OPTIONS_BY_NAME: dict[str, Option] = {o.name: o for o in PLAN_OPTIONS}


def comma_list(kind: type) -> Callable[[str], list[Any]]:
    """An argparse type for "a,b,c": a non-empty list of ``kind``."""

    def parse(text: str) -> list[Any]:
        items = [t.strip() for t in text.split(",") if t.strip()]
        if not items:
            raise argparse.ArgumentTypeError("empty list")
        try:
            return [kind(t) for t in items]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a comma-separated list of {kind.__name__}") from None

    return parse


def _argparse_settings(option: Option) -> dict[str, Any]:
    settings: dict[str, Any] = {"dest": option.name, "default": option.cli_default}
    if option.action is not None:
        settings["action"] = option.action
    elif option.is_list:
        settings["type"] = comma_list(option.type)
    elif option.parse is not None:
        settings["type"] = option.parse
    elif option.type is not str:
        settings["type"] = option.type
    for key in ("const", "nargs", "choices", "metavar", "help"):
        if getattr(option, key) is not None:
            settings[key] = getattr(option, key)
    return settings


def add_run_arguments(parser: argparse.ArgumentParser) -> None:
    """Every ``ddptop run`` flag, grouped as ``--help`` shows them."""
    groups: dict[str | None, Any] = {None: parser}
    for option in RUN_OPTIONS:
        if not option.cli:
            continue
        if option.group not in groups:
            groups[option.group] = parser.add_argument_group(option.group)
        target = groups[option.group]
        target.add_argument(option.spelling, **_argparse_settings(option))
        for flag in option.also:
            target.add_argument(flag.spelling, dest=option.name, action=flag.action, const=flag.const, help=flag.help)


def toml_types() -> dict[str, tuple[type, ...]]:
    """The keys of a plan file (PlanOptions' field names) and the types each accepts."""
    return {o.name: o.toml_types for o in PLAN_OPTIONS}


def _field(option: Option) -> tuple[str, str, dataclasses.Field]:
    if isinstance(option.default, (list, tuple)):  # each PlanOptions gets its own list
        default = dataclasses.field(default_factory=functools.partial(list, option.default))
    else:
        default = dataclasses.field(default=option.default)
    return option.name, option.annotation, default


def _keys(cls: type) -> list[str]:
    return [f.name for f in dataclasses.fields(cls)]


PlanOptions = dataclasses.make_dataclass(
    "PlanOptions",
    [_field(o) for o in PLAN_OPTIONS],
    namespace={"keys": classmethod(_keys)},
)
PlanOptions.__module__ = __name__
PlanOptions.__doc__ = """The user's choices for a plan, unresolved. ``None`` means "the default for this machine".

Generated from ``PLAN_OPTIONS``: one field per option, with its default."""


def merge_plan_options(file_values: dict[str, Any], flags: argparse.Namespace | dict[str, Any]) -> Any:
    """A ``PlanOptions`` from a plan file's values with the flags given on top (a flag left out is None)."""
    given = vars(flags) if isinstance(flags, argparse.Namespace) else flags
    values = dict(file_values)
    for option in PLAN_OPTIONS:
        if given.get(option.name) is not None:
            values[option.name] = given[option.name]
    return PlanOptions(**values)
