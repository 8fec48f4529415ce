"""Every model spec as a workload of one protocol (``ddptop.protocol.workload.Workload``): the rank's builder of
each kind that ``ddptop.protocol.modelspec`` registers, and ``load_workload``, which calls the spec's.

- a torchvision name (``resnet50``): an image classifier on random ``(n, 3, size, size)`` images and random
  labels, cross-entropy loss;
- a transformer preset (``gpt-tiny``): random token ids and next-token targets, cross-entropy per position;
- ``package.module:factory`` or ``path/to/file.py:factory``: the user's factory, called with whichever of ``num_classes``, ``image_size`` and
  ``seq_len`` it accepts; a module it returns is an image classifier as above, a ``Workload`` (or an object
  with its attributes) is taken as it is;
- ``hf:<model_type>[:key=value]...``: a Hugging Face model from its config (``bench_kernels.hf``).

A spec that cannot give a workload raises ``WorkloadError`` with one line naming the spec and what went
wrong; the checker (``bench_kernels.preflight``) turns it into ddptop's "bad input" before any launch.
torch is imported inside the functions.
"""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from typing import Any

from bench_kernels.batches import batch_tensors, map_tensors
from bench_kernels.errors import WorkloadError, one_line
from ddptop.protocol.catalog import TORCHVISION_MODELS
from ddptop.protocol.modelspec import KINDS, BuildInputs, ModelSpec, SpecError, parse_spec, seq_len_of
from ddptop.protocol.workload import OPTIONAL, REQUIRED, STARTED_IN_ENV, Workload


def load_workload(model: str, num_classes: int, image_size: int, seq_len: int | None = None,
                  hf_config: dict[str, Any] | None = None) -> Workload:
    """The workload of ``model`` (any spec ddptop takes), its model on the CPU with random weights: built by its
    kind's registered builder (``ddptop.protocol.modelspec.KINDS``)."""
    try:
        spec = parse_spec(model)
    except SpecError as exc:
        raise WorkloadError(str(exc)) from None
    module_name, function = KINDS[spec.kind].build.split(":")
    builder = getattr(importlib.import_module(module_name), function)
    return builder(spec, BuildInputs(num_classes, image_size, seq_len, hf_config))


def classifier_workload(spec: ModelSpec, inputs: BuildInputs) -> Workload:
    """A torchvision classifier by name, randomly initialised (no download)."""
    import torchvision.models

    keywords: dict[str, Any] = {"weights": None, "num_classes": inputs.num_classes}
    family = TORCHVISION_MODELS[spec.target][0] if spec.target in TORCHVISION_MODELS else ""
    if family == "vit":
        keywords["image_size"] = inputs.image_size
    if family in ("inception", "googlenet"):
        keywords.update(aux_logits=False, init_weights=False)
    return image_classifier(torchvision.models.get_model(spec.target, **keywords), inputs)


def image_classifier(net: Any, inputs: BuildInputs) -> Workload:
    """An image classifier: ``(n, 3, size, size)`` random images and random labels, cross-entropy."""
    import torch
    import torch.nn.functional as F

    num_classes, image_size = inputs.num_classes, inputs.image_size

    def make_batch(n: int, device: Any) -> tuple[Any, Any]:
        images = torch.randn(n, 3, image_size, image_size, device=device)
        return images, torch.randint(0, num_classes, (n,), device=device)

    def loss(net: Any, batch: tuple[Any, Any]) -> Any:
        images, labels = batch
        return F.cross_entropy(net(images), labels)

    return Workload(net, make_batch, loss)


def transformer_workload(spec: ModelSpec, inputs: BuildInputs) -> Workload:
    """A transformer preset: random token ids and random next-token targets, cross-entropy per position."""
    import torch

    from bench_kernels import transformer

    model = transformer.build_transformer(spec.target)
    vocab = model.shape.vocab
    seq_len = seq_len_of(spec, inputs.seq_len)

    def make_batch(n: int, device: Any) -> tuple[Any, Any]:
        return (torch.randint(0, vocab, (n, seq_len), device=device),
                torch.randint(0, vocab, (n, seq_len), device=device))

    def loss(net: Any, batch: tuple[Any, Any]) -> Any:
        ids, targets = batch
        return transformer.lm_loss(net(ids), targets)

    return Workload(model, make_batch, loss, tokens=lambda batch: int(batch[0].numel()))


def factory_workload(spec: ModelSpec, inputs: BuildInputs) -> Workload:
    """Import and call the user's factory; its module becomes a classifier workload, its workload is kept."""
    import torch

    model = spec.text
    module = import_factory_module(spec)
    factory = getattr(module, spec.function, None)
    if not callable(factory):
        raise WorkloadError(f"model {model}: {spec.target} has no function {spec.function}")
    wanted = {"num_classes": inputs.num_classes, "image_size": inputs.image_size, "seq_len": inputs.seq_len}
    try:
        made = factory(**accepted_keywords(factory, {k: v for k, v in wanted.items() if v is not None}))
    except Exception as exc:  # noqa: BLE001 - the user's factory failing is their input's problem
        raise WorkloadError(f"model {model}: the factory raised {one_line(exc)}") from exc
    if isinstance(made, torch.nn.Module):
        return image_classifier(made, inputs)
    if all(hasattr(made, name) for name in REQUIRED):
        return as_workload(model, made)
    raise WorkloadError(f"model {model}: the factory returned {type(made).__name__} {made!r:.40}, neither a torch.nn.Module "
                        f"nor a Workload (ddptop.protocol.workload: model, make_batch, loss)")


def import_factory_module(spec: ModelSpec) -> Any:
    """A factory's module: imported by name from the Python path, or loaded from its file (whose folder is put
    first on the path, as ``python file.py`` does, so that it imports its neighbours)."""
    try:
        if not spec.from_file:
            return importlib.import_module(spec.target)
        name = os.path.basename(spec.target)[:-3]
        if name in sys.modules and getattr(sys.modules[name], "__file__", None) == spec.target:
            return sys.modules[name]
        found = importlib.util.spec_from_file_location(name, spec.target)
        if found is None or found.loader is None:
            raise ImportError(f"cannot load {spec.target} as a Python module")
        folder = os.path.dirname(spec.target)
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module = importlib.util.module_from_spec(found)
        sys.modules[name] = module
        try:
            found.loader.exec_module(module)
        except BaseException:
            sys.modules.pop(name, None)
            raise
        return module
    except Exception as exc:  # noqa: BLE001 - whatever the user's module raises on import
        raise WorkloadError(f"model {spec.text}: cannot import {spec.target}: {one_line(exc)} {import_context()}") from exc


def as_workload(model: str, made: Any) -> Workload:
    """A ``Workload`` from an object with its attributes, each checked for what it must be."""
    import torch

    if isinstance(made, Workload):
        found = made
    else:
        found = Workload(*(getattr(made, n) for n in REQUIRED),
                         **{n: getattr(made, n) for n in OPTIONAL if hasattr(made, n)})
    if not isinstance(found.model, torch.nn.Module):
        raise WorkloadError(f"model {model}: the workload's model is a {type(found.model).__name__}, not a torch.nn.Module")
    for name in ("make_batch", "loss"):
        if not callable(getattr(found, name)):
            raise WorkloadError(f"model {model}: the workload's {name} is not callable")
    for name in ("tokens", "flops", "fsdp_units"):
        value = getattr(found, name)
        if value is not None and not callable(value):
            raise WorkloadError(f"model {model}: the workload's {name} must be a function of "
                                f"{'the model' if name == 'fsdp_units' else 'the batch'} or None")
    return found


def import_context() -> str:
    """Where this process looked for a user's module, for the line that says it could not import it. The check
    before launch runs in ddptop's working directory and the ranks in their launch directory, with one
    ``PYTHONPATH`` made absolute for both: a rank failing where the check succeeded is ddptop's fault."""
    here = os.getcwd()
    started = os.environ.get(STARTED_IN_ENV)
    path = os.environ.get("PYTHONPATH") or "unset"
    if started and os.path.realpath(started) != os.path.realpath(here):
        return (f"(this rank ran in {here}, ddptop and its check before launch, which imported it, in {started}; "
                f"PYTHONPATH for both {path}: a fault of ddptop's, please report it)")
    return f"(working directory {here}, PYTHONPATH {path})"


def accepted_keywords(function: Any, offered: dict[str, Any]) -> dict[str, Any]:
    """The keywords of ``offered`` that ``function`` names; a function taking only ``**kwargs`` beyond them
    (a torchvision builder, which hands them to its model's constructor) gets ``num_classes`` alone, the one
    every classifier takes."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return {}
    named = {k: v for k, v in offered.items() if k in parameters}
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()) and "num_classes" in offered:
        named.setdefault("num_classes", offered["num_classes"])
    return named


def tokens_per_example(workload: Workload, batch: Any, examples: int) -> float | None:
    """Tokens per example of a batch of ``examples``, where the workload counts tokens (its ``tokens``); the one
    count the check and the ranks both use. ``WorkloadError`` where the count raises."""
    if workload.tokens is None:
        return None
    try:
        return float(workload.tokens(batch)) / examples
    except Exception as exc:  # noqa: BLE001 - the user's count
        raise WorkloadError(f"tokens(batch) raised {one_line(exc)}") from exc


def is_image(tensor: Any) -> bool:
    """A 4-D floating tensor: what the channels_last memory format applies to."""
    return tensor.dim() == 4 and tensor.is_floating_point()


def to_channels_last(batch: Any) -> Any:
    import torch

    return map_tensors(batch, lambda t: t.contiguous(memory_format=torch.channels_last) if is_image(t) else t)


def batch_bytes(batch: Any) -> int:
    return sum(t.numel() * t.element_size() for t in batch_tensors(batch))
