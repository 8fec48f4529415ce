"""The workload protocol: what a user's factory gives ddptop so that it can measure *their* training step.

A model spec ``package.module:factory`` names a function ddptop calls inside every rank (with whichever of
``num_classes``, ``image_size`` and ``seq_len`` it accepts). It returns either an ``nn.Module`` (an image
classifier taking ``(batch, 3, size, size)`` floats and giving class logits, as before) or a ``Workload``:

    from ddptop.protocol.workload import Workload

    def make_workload():
        model = MyModel()
        def make_batch(n, device):            # n examples, on the rank's device
            ids = torch.randint(0, 32000, (n, 512), device=device)
            return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
        def loss(net, batch):                 # net: the model as DDP (or FSDP2) wrapped it
            return net(**batch).logits.float().logsumexp(-1).mean()
        return Workload(model, make_batch, loss, tokens=lambda batch: batch["input_ids"].numel())

Every step ddptop times is ``optimizer.zero_grad(); loss(net, batch).backward(); optimizer.step()`` on one
fixed batch made once per configuration (synthetic data: a step's arithmetic does not depend on the values),
under autocast when the plan asks. ``net`` is the *wrapped* model, so DDP's and FSDP2's hooks fire in the
forward. ddptop moves the model to the rank's device (in the dtype the factory made it; ``--amp`` adds
autocast, as for the built-ins) and builds the optimizer (SGD with momentum, every strategy the same).

The batch size ddptop sweeps is the ``n`` given to ``make_batch``: a batch of n examples. Where one example
holds many tokens, ``tokens`` gives ddptop tokens/s beside examples/s.

Standard library only: a user's code may import this anywhere, and a duck-typed object with the same
attributes (``model``, ``make_batch``, ``loss`` and any of the optional ones) is accepted as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

REQUIRED = ("model", "make_batch", "loss")

# ddptop's working directory, set for the check before launch and for every rank: a user's module is imported
# from there (PYTHONPATH's entries are made absolute against it), and a rank that cannot import what the check
# did names both directories
STARTED_IN_ENV = "DDPTOP_STARTED_IN"
OPTIONAL = ("tokens", "flops", "fsdp_units", "find_unused_parameters")


@dataclass
class Workload:
    """One training step of a user's model, as ddptop measures it (see the module's docstring).

    - ``model``: the ``torch.nn.Module``, unwrapped (ddptop wraps it in DDP, FSDP2, ...).
    - ``make_batch(n, device)``: one batch of ``n`` examples on ``device``: a tensor, a dict, a tuple, ...
    - ``loss(net, batch)``: the scalar loss tensor of a forward of ``net`` (the wrapped model) on ``batch``.
    - ``tokens(batch)``: how many tokens the batch holds (tokens/s is reported where given).
    - ``flops(batch)``: FLOPs of one forward, loss and backward of ``batch``, where torch's counter cannot see
      them (Triton or flash-attention kernels count 0): used instead of the count.
    - ``fsdp_units(model)``: the submodules FSDP2 shards, each a unit of its own (the root takes the rest);
      without it, ddptop's default (repeated blocks and top-level layers, tied parameters kept in one unit).
    - ``find_unused_parameters``: some parameters get no gradient in a step, so DDP must look for them.
    """

    model: Any
    make_batch: Callable[[int, Any], Any]
    loss: Callable[[Any, Any], Any]
    tokens: Callable[[Any], int] | None = None
    flops: Callable[[Any], float] | None = None
    fsdp_units: Callable[[Any], Iterable[Any]] | None = None
    find_unused_parameters: bool = False


# -- what the check of a workload found (bench_kernels.preflight writes it, the plan reads it) ------------


@dataclass(frozen=True)
class WorkloadFacts:
    """What ddptop learnt from building a model spec once and running one step on a small batch, before any
    launch: enough for the plan to say what applies to it."""

    model: str
    kind: str  # "builtin", "factory" (package.module:factory) or "hf"
    params: int = 0
    image_input: bool = False  # the batch holds a 4-D floating tensor: channels_last can apply
    tokens_per_example: float | None = None  # from ``tokens`` (or the sequence length of a token model)
    flops_given: bool = False  # the workload gives its own FLOPs
    find_unused_parameters: bool = False
    seconds: float = 0.0  # building it and the step, on the checking device

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> WorkloadFacts:
        known = {f for f in cls.__dataclass_fields__}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass(frozen=True)
class CheckAnswer:
    """One line of the checker's output: the facts, or the one-line reason the spec cannot run."""

    model: str
    facts: WorkloadFacts | None = None
    error: str | None = None

    def to_line(self) -> str:
        body: dict[str, Any] = {"model": self.model}
        if self.facts is not None:
            body["facts"] = self.facts.to_json()
        if self.error is not None:
            body["error"] = self.error
        return json.dumps(body)

    @classmethod
    def from_line(cls, line: str) -> CheckAnswer:
        body = json.loads(line)
        facts = body.get("facts")
        return cls(body["model"], WorkloadFacts.from_json(facts) if facts else None, body.get("error"))


# -- Hugging Face specs: hf:<model_type>[:key=value]... ----------------------------------------------------

HF_PREFIX = "hf:"


@dataclass(frozen=True)
class HfSpec:
    """``hf:llama:hidden_size=512:num_hidden_layers=4``: a model type of ``transformers.AutoConfig.for_model``
    and the config's overrides (whole numbers, decimals, true/false, else text)."""

    model_type: str
    overrides: dict[str, Any] = field(default_factory=dict)


def is_hf(model: str) -> bool:
    return model.startswith(HF_PREFIX)


def parse_hf(model: str, plan_overrides: dict[str, Any] | None = None) -> HfSpec:
    """The spec's model type and overrides, the plan's (``hf_config``) first and the spec's own on top; a
    ValueError with one line for a malformed one."""
    parts = model[len(HF_PREFIX):].split(":")
    model_type = parts[0].strip()
    if not model_type.replace("-", "_").replace("_", "a").isalnum():
        raise ValueError(f"model {model!r}: expected hf:<model_type>[:key=value]... (e.g. hf:gpt2:num_hidden_layers=2)")
    overrides: dict[str, Any] = dict(plan_overrides or {})
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise ValueError(f"model {model!r}: {part!r} is not key=value (e.g. hf:gpt2:num_hidden_layers=2)")
        overrides[key.strip()] = config_value(value.strip())
    return HfSpec(model_type, overrides)


def config_value(text: str) -> Any:
    """A config override's value: an int, a float, true/false, else the text itself."""
    lowered = text.lower()
    if lowered in ("true", "false"):
        return lowered == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return text


def spec_label(model: str) -> str:
    """A short name for a model spec, for run names and table titles: the factory's or hf's model type."""
    if is_hf(model):
        return "hf-" + model[len(HF_PREFIX):].split(":")[0]
    return model.split(":")[-1]


def short_name(model: str) -> str:
    """A model spec as a narrow column shows it, the part that tells models apart first: a factory's last
    module name and its function (``mypkg.bench:make_workload`` -> ``bench:make_workload``), an hf spec's
    model type with "+" where it has overrides; a built-in's name as it is."""
    if is_hf(model):
        model_type, *overrides = model[len(HF_PREFIX):].split(":")
        return HF_PREFIX + model_type + ("+" if overrides else "")
    if ":" in model:
        module, function = model.split(":", 1)
        return f"{module.rsplit('.', 1)[-1]}:{function}"
    return model


def describe(names: Sequence[str]) -> str:
    """Up to five names, then how many more."""
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")
