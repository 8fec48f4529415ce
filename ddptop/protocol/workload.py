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

The measured steps reuse that one batch. After them, at N >= 2, the communication probe calls ``make_batch``
before each of its hooked steps for a batch drawn afresh: the gradient noise scale compares the gradient of
each rank's batch with their average, so a ``make_batch`` that samples the user's data gives that data's noise
scale (random data: one of random labels).

The batch size ddptop sweeps is the ``n`` given to ``make_batch``: a batch of n examples. Where one example
holds many tokens, ``tokens`` gives ddptop tokens/s beside examples/s.

Standard library only: a user's code may import this anywhere, and a duck-typed object with the same
attributes (``model``, ``make_batch``, ``loss`` and any of the optional ones) is accepted as well.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import asdict, dataclass
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
    kind: str  # its kind's name (ddptop.protocol.modelspec.Kind): classifier, transformer, factory or hf
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


@dataclass(frozen=True)
class CheckProgress:
    """A line the checker prints as it starts each phase of its work (importing torch, then building each
    model's workload and running its step): ddptop ends a check that prints none for the plan's
    ``--hang-timeout`` (at least its startup grace while ``setting_up``, as a sweep's ranks get) and names the
    phase it waited on. ``model`` is None before the first model. Told from a ``CheckAnswer`` line by its
    ``checking`` key."""

    doing: str  # what the checker starts, as a user reads it after the model's name: "building its workload"
    model: str | None = None
    setting_up: bool = False  # importing torch or building a model: a large one takes long without a hang

    def to_line(self) -> str:
        return json.dumps({"checking": self.model, "doing": self.doing, "setting_up": self.setting_up})

    @classmethod
    def from_line(cls, line: str) -> CheckProgress:
        body = json.loads(line)
        return cls(str(body["doing"]), body["checking"], bool(body.get("setting_up", False)))


def describe(names: Sequence[str]) -> str:
    """Up to five names, then how many more."""
    shown = ", ".join(names[:5])
    return shown + (f" and {len(names) - 5} more" if len(names) > 5 else "")
