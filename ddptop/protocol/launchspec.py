"""The launch spec: what every rank of one torchrun launch is told to run (``launch.json``).

ddptop's sweep writes it into the launch directory before starting torchrun; each rank
(``bench_kernels.ddp --spec launch.json``) and each follower node's agent reads the same file. The classes
are frozen, and ``from_json`` checks every field's JSON type, so a rank fails at once with one line naming the
field instead of deep inside a model build; a spec of another ``version`` is refused the same way, because
the kernels and ddptop come from the same checkout and a mismatch means a stale or foreign file.

Standard library only (the kernels import it inside torchrun workers).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
import typing
from dataclasses import dataclass, field
from typing import Any

from ddptop.protocol.config_fields import ConfigFields
from ddptop.protocol.vocab import Scaling

LAUNCH_SPEC_VERSION = 1
DEFAULT_FLUSH_INTERVAL = 0.1  # seconds between a rank's writes of its events
DEFAULT_COLLECTIVE_TIMEOUT = 600.0  # seconds a collective may block before the process group gives up


class LaunchSpecError(ValueError):
    """A launch.json this version cannot read: the message names the file's problem in one line."""


@dataclass(frozen=True)
class RunConfig(ConfigFields):
    """One measured configuration: one model at one batch on one world size, DDP, DataParallel or the
    no-DDP baseline.

    The one definition of a configuration's fields: those that name it come first, from ``ConfigFields``
    (``ddptop.protocol.config_fields``, shared with the rank's config_start event and the view's snapshot),
    then what it takes to run it. The plan's ``ddptop.run.plan_records.ConfigSpec`` subclasses it (adding only what
    the core derives from them), so plan.json, launch.json and summary.json hold one shape, and a rank reads
    the configuration with the same types the plan wrote.
    """

    global_batch: int
    world_size: int
    nnodes: int
    backend: str
    device: str
    scaling: Scaling
    image_size: int
    num_classes: int
    warmup: int | None  # warm-up steps; None: until the step time stops falling (--warmup auto)
    iters: int | None  # measured steps per round; None: until the median is precise (--iters auto)
    time_budget: float | None  # measure about this many seconds instead (iters and precision unused)
    bucket_cap_mb: float
    amp: str | None
    channels_last: bool
    comm_iters: int = 0
    # --iters auto / --warmup auto: the target and the limits of one round's measurement
    precision: float = 0.05  # relative half-width of the median's 95% interval to reach
    min_iters: int = 10
    max_iters: int = 200
    max_time_per_config: float = 20.0  # seconds of measured steps; the auto warm-up gets a third of it
    max_warmup: int = 50
    rounds: int = 1  # launches that measure this configuration, one round each (the launch is the unit)
    round: int = 0  # which of them this launch is (0 .. rounds - 1; a repeat of a disturbed one: rounds)
    # DDP re-sends module buffers (BatchNorm's running statistics) from rank 0 before every forward: DDP's
    # own default, kept because it is what training scripts run; PyTorch's DDP benchmark turns it off
    broadcast_buffers: bool = True
    # the DDP variant measured (``ddptop.protocol.variants``: ddptop tune); "default" is DDP as written
    variant: str = "default"
    # tokens per example of a transformer model (ddptop.protocol.catalog.TRANSFORMER_PRESETS); None for the rest
    seq_len: int | None = None
    # the data-parallel strategy (``ddptop.protocol.strategies``): ddp, zero1, fsdp2 or fsdp2_no_reshard
    strategy: str = "ddp"
    # a Hugging Face model's config overrides from the plan (hf_config), beneath the model spec's own
    hf_config: dict[str, Any] | None = field(default=None, hash=False)
    # tokens per example, for tokens/s (a transformer's seq_len; what a workload's tokens(batch) counted)
    tokens_per_example: float | None = None
    # profiled steps after the configuration's measured ones (bench_kernels.trace); 0: no trace
    trace_steps: int = 0
    # intra-op threads of each rank in a thread sweep (--threads), each its own launch; 0: the launch's
    # threads_per_rank, the plan's default share of the cores
    threads: int = 0
    # a user's script (bench_kernels.script_probe): run it to its own end instead of ending it after the planned
    # warm-up and measured steps (the steps past them are measured and streamed all the same)
    script_to_end: bool = False
    # ddptop tune's try of a script's loader: the line that made its training loader (``protocol.loader_target``)
    loader_site: str = ""

    @property
    def adaptive(self) -> bool:
        """Measured until precise (--iters auto), not a fixed count nor a time budget."""
        return self.iters is None and not self.time_budget

    def batch_series(self) -> tuple[Any, ...]:
        """What a configuration shares with the other batch sizes of its kind."""
        return (self.model, self.mode, self.world_size, self.backend, self.bucket_cap_mb, self.strategy, self.threads,
                self.device)

    def cannot_fit_after(self, out_of_memory: RunConfig) -> bool:
        """Whether this is a larger batch of the series of one that ran out of memory, so cannot fit either
        (the batch sweep's rule, and a rank's after the memory cap refused a step)."""
        return self.batch_series() == out_of_memory.batch_series() and self.batch_size > out_of_memory.batch_size

    def to_json(self) -> dict[str, Any]:
        found = _to_json(self)
        if not found.get("loader_site"):  # a loader's try only: configurations as before it
            found.pop("loader_site", None)
        return found

    @classmethod
    def from_json(cls, data: Any) -> RunConfig:
        return _from_json(cls, data, "configs[]")


@dataclass(frozen=True)
class CollectiveSpec:
    """The collective benchmark run at the end of a launch (``bench_kernels.collectives``)."""

    ops: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    iters: int = 20
    warmup: int = 5
    dtype: str = "float32"

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> CollectiveSpec:
        return _from_json(cls, data, "collectives")


@dataclass(frozen=True)
class LaunchSpec:
    """Everything one launch's ranks need beyond torchrun's environment (RANK, WORLD_SIZE, ...)."""

    launch_id: str  # the launch directory's name, e.g. 02-n2-gloo
    events_dir: str  # where each rank appends events/rank-<R>.jsonl
    device: str  # cuda | cpu
    backend: str  # nccl | gloo
    threads_per_rank: int  # torch.set_num_threads in each rank; 0: torch's default
    configs: tuple[RunConfig, ...]
    flush_interval: float = DEFAULT_FLUSH_INTERVAL
    memory_cap_mb: float | None = None  # per-process GPU memory cap (a smaller GPU, for real)
    inject: tuple[str, ...] = ()  # fault injection specs (bench_kernels.faults), a testing aid
    collectives: CollectiveSpec | None = None
    collective_timeout: float = DEFAULT_COLLECTIVE_TIMEOUT
    measure_ceiling: bool = False  # rank 0 measures the device's matmul ceiling first (the sweep's first launch)
    # CPU launches: each local rank's CPUs (ddptop.protocol.affinity), None where the ranks are not bound;
    # binding: how they were chosen, or why not. GPU launches: torchrun's --numa-binding mode (None: none).
    # Absent from older files, which ran unbound.
    rank_cores: tuple[tuple[int, ...], ...] | None = None
    binding: str = "not bound"
    numa_binding: str | None = None
    run_dir: str | None = None  # where the ranks write what belongs to the run, not the launch (traces/)
    # a user's training script: what each rank runs after ``bench_kernels.script_probe --spec launch.json --``
    # (empty: ddptop's kernel), and the directory the ranks start in (the one ddptop was started in)
    script: tuple[str, ...] = ()
    script_dir: str = ""
    version: int = LAUNCH_SPEC_VERSION

    def to_json(self) -> dict[str, Any]:
        return _to_json(self)

    @classmethod
    def from_json(cls, data: Any) -> LaunchSpec:
        if not isinstance(data, dict):
            raise LaunchSpecError("a launch spec is a JSON object")
        version = data.get("version")
        if version != LAUNCH_SPEC_VERSION:
            raise LaunchSpecError(
                f"launch spec version {version!r}, but this ddptop reads version {LAUNCH_SPEC_VERSION} "
                "(a launch.json written by another ddptop?)"
            )
        return _from_json(cls, data, "")

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=2) + "\n"

    @classmethod
    def loads(cls, text: str | bytes) -> LaunchSpec:
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise LaunchSpecError(f"not JSON: {exc}") from None
        return cls.from_json(data)

    @classmethod
    def read(cls, path: str) -> LaunchSpec:
        """Load a launch.json; any problem is a LaunchSpecError that names the file."""
        try:
            with open(path, "rb") as handle:
                return cls.loads(handle.read())
        except OSError as exc:
            raise LaunchSpecError(f"cannot read launch spec {path}: {exc.strerror}") from None
        except LaunchSpecError as exc:
            raise LaunchSpecError(f"{path}: {exc}") from None


# -- the JSON mapping: one generic pass over the dataclass fields, so a new field needs no new code ---------

def _to_json(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj):
        return {f.name: _to_json(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple):
        return [_to_json(item) for item in obj]
    return obj


_HINTS: dict[type, dict[str, Any]] = {}
_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", bool: "true or false", type(None): "null"}


def _hints(cls: type) -> dict[str, Any]:
    if cls not in _HINTS:
        _HINTS[cls] = typing.get_type_hints(cls)
    return _HINTS[cls]


def _from_json(cls: type, data: Any, where: str) -> Any:
    if not isinstance(data, dict):
        raise LaunchSpecError(f"{where or 'the spec'} is not a JSON object")
    hints = _hints(cls)
    values = {}
    for f in dataclasses.fields(cls):
        name = f"{where}.{f.name}" if where else f.name
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise LaunchSpecError(f"{name} is missing")
            continue
        values[f.name] = _value(hints[f.name], data[f.name], name)
    return cls(**values)  # fields it does not know are ignored: only the version says what must be there


def _value(hint: Any, value: Any, name: str) -> Any:
    """``value`` as the annotated type, or LaunchSpecError naming the field and what it should be."""
    origin = typing.get_origin(hint)
    if origin is types.UnionType or origin is typing.Union:
        options = typing.get_args(hint)
        if value is None and type(None) in options:
            return None
        (inner,) = [t for t in options if t is not type(None)]
        return _value(inner, value, name)
    if origin is dict:
        if not isinstance(value, dict):
            raise LaunchSpecError(f"{name} is not a JSON object")
        return dict(value)
    if origin is tuple:
        if not isinstance(value, list):
            raise LaunchSpecError(f"{name} is not a list")
        item = typing.get_args(hint)[0]
        return tuple(_value(item, v, f"{name}[{i}]") for i, v in enumerate(value))
    if dataclasses.is_dataclass(hint):
        return _from_json(hint, value, name)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        try:
            return hint(value)
        except (ValueError, TypeError):
            shown = repr(value) if isinstance(value, str) else _describe(value)
            known = ", ".join(str(member.value) for member in hint)
            raise LaunchSpecError(f"{name} is {shown}, not one of {known}") from None
    if isinstance(value, hint) and (hint is bool or not isinstance(value, bool)):  # true is not an integer
        return hint(value)  # the plain type, even for an instance of a subclass
    if hint is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise LaunchSpecError(f"{name} is {_describe(value)}, not {_TYPE_NAMES.get(hint, hint.__name__)}")


def _describe(value: Any) -> str:
    for kind in (bool, int, float, str, type(None)):
        if isinstance(value, kind):
            return _TYPE_NAMES[kind]
    return "a list" if isinstance(value, list) else "an object"
