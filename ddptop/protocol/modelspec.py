"""Every model spec ddptop takes, parsed once into its kind, and each kind registered once: how a rank builds
its workload, what is known of it before anything is built, and what the plan may refuse without torch.

The kinds:
- a torchvision classifier by name (``resnet50``): random images and labels;
- a transformer preset (``gpt-tiny``): random token ids of ``--seq-len``;
- a factory, ``package.module:function`` or ``path/to/file.py:function`` (as pytest and uvicorn take paths;
  a relative path is made absolute against ddptop's working directory when the spec is parsed, so a rank in
  its launch directory finds the same file): the user's code, which returns a module or a ``Workload``;
- ``hf:<model_type>[:key=value]...``: a Hugging Face model from its config alone;
- ``script:<train.py ARGS>`` or ``script:-m <package.module> ARGS``: the user's training script, run as it is
  by every rank (``ddptop run -- train.py ARGS``), named as the user typed it, its path relative to where
  ddptop started (two checkouts of one script are one model); the command the ranks run, its path absolute, is
  the plan's ``script``. Older plans named it by its absolute path (``script:/abs/train.py``) or its module
  alone (``script:package.module``).

Every kind names its model for a user through ``display_name`` (``ModelKind.name``): tables, lines, plots and
the live view.

A spec the parser cannot read raises ``SpecError`` with one line. Standard library only: the plan, the views
and the kernels read the same parser; a kind's builder is named as ``module:function`` and imported by the
rank alone (``bench_kernels.sources.load_workload``), so ddptop never imports torch.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shlex
import sys
from importlib.machinery import PathFinder
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from ddptop.protocol.catalog import TORCHVISION_MODELS, TRANSFORMER_PRESETS, check_seq_len
from ddptop.protocol.workload import WorkloadFacts

HF_PREFIX = "hf:"
SCRIPT_PREFIX = "script:"
_MODULE = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")


class SpecError(ValueError):
    """A model spec that cannot be read, in one line."""


class Kind(StrEnum):
    CLASSIFIER = "classifier"
    TRANSFORMER = "transformer"
    FACTORY = "factory"
    HF = "hf"
    SCRIPT = "script"


@dataclass(frozen=True)
class ModelSpec:
    """One parsed spec. ``text`` is how plans, events and summaries name the model (a factory file's path
    absolute); ``target`` is a built-in's name, a factory's module or file, or an hf spec's model type."""

    text: str
    kind: Kind
    target: str  # a script's file, absolute, or its module
    function: str = ""  # a factory's
    overrides: dict[str, Any] = field(default_factory=dict)  # an hf spec's config overrides

    @property
    def from_file(self) -> bool:
        """A factory's file, or a script's (made absolute: a module's name holds no "/")."""
        if self.kind is Kind.SCRIPT:
            return "/" in self.target or self.target.endswith(".py")
        return self.kind is Kind.FACTORY and self.target.endswith(".py")


_PARSED: dict[tuple[str, str], ModelSpec] = {}
_PARSED_MAX = 4096  # specs kept parsed: a sweep's handful, and every summary a diff or a view reads


def parse_spec(text: str, cwd: str | None = None) -> ModelSpec:
    """The spec's kind and parts; ``SpecError`` for a malformed factory or hf spec. A name that is neither a
    factory nor an hf spec nor a preset is taken for a classifier (``problem`` says if torchvision has none).
    Parsed once: every table, line and view names its configurations from the same spec again and again."""
    key = (text, cwd or os.getcwd())  # a relative path is made absolute against where ddptop started
    found = _PARSED.get(key)
    if found is None:
        found = _parse(text, key[1])
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[key] = found
    return found


def _parse(text: str, cwd: str) -> ModelSpec:
    text = text.strip()
    if text.startswith(SCRIPT_PREFIX):
        return ModelSpec(text, Kind.SCRIPT, _script_target(_script_words(text), cwd))
    if text.startswith(HF_PREFIX):
        spec = parse_hf(text)
        return ModelSpec(text, Kind.HF, spec.model_type, overrides=spec.overrides)
    if ":" in text:
        target, function = text.rsplit(":", 1)
        form = f"model {text!r} is not of the form package.module:factory or path/to/file.py:factory"
        if not function.isidentifier():
            raise SpecError(form)
        if target.endswith(".py") or "/" in target:
            path = os.path.normpath(os.path.join(cwd or os.getcwd(), os.path.expanduser(target)))
            return ModelSpec(f"{path}:{function}", Kind.FACTORY, path, function)
        if not _MODULE.match(target):
            raise SpecError(form)
        return ModelSpec(text, Kind.FACTORY, target, function)
    if text in TRANSFORMER_PRESETS:
        return ModelSpec(text, Kind.TRANSFORMER, text)
    return ModelSpec(text, Kind.CLASSIFIER, text)


def _script_words(text: str) -> list[str]:
    """A script spec's command as words (``script:train.py --lr '1e-3'``), the script first."""
    try:
        words = shlex.split(text[len(SCRIPT_PREFIX):])
    except ValueError as exc:
        raise SpecError(f"script {text[len(SCRIPT_PREFIX):]!r}: {exc}") from None
    if not words or words[0] == "-m" and len(words) < 2:
        raise SpecError("no script after -- (ddptop run [flags] -- train.py ARGS, or -- -m package.module ARGS)")
    return words


def _script_target(words: list[str], cwd: str | None) -> str:
    """The file a script's command runs, absolute (against ``cwd``: where ddptop started), or its module."""
    if words[0] == "-m":
        if words[1].endswith(".py") or "/" in words[1] or not _MODULE.match(words[1]):
            raise SpecError(f"-m takes a package.module, not a file ({words[1]})")
        return words[1]
    if words[0].endswith(".py") or "/" in words[0]:
        return os.path.normpath(os.path.join(cwd or os.getcwd(), os.path.expanduser(words[0])))
    if not _MODULE.match(words[0]):
        raise SpecError(f"script {words[0]!r} is neither a file.py nor a package.module")
    return words[0]  # an older plan's module, by its name alone


def as_typed(path: str, cwd: str) -> str:
    """A script's path as a user reads it: relative to ``cwd`` (where ddptop started) where it lies under it
    or was given relative; else absolute. A name without a folder or ``.py`` keeps ``./`` (it is a file)."""
    given = os.path.expanduser(path)
    absolute = os.path.normpath(os.path.join(cwd, given))
    relative = os.path.relpath(absolute, cwd)
    shown = relative if not os.path.isabs(given) or not relative.startswith(os.pardir) else absolute
    return shown if "/" in shown or shown.endswith(".py") else "./" + shown


def script_spec_text(command: list[str] | tuple[str, ...], cwd: str) -> str:
    """The spec that names a script's command (``train.py ARGS`` or ``-m package.module ARGS``) as typed in
    ``cwd``: ``script:train.py --lr 0.1``, its path made relative to ``cwd`` where it lies under it."""
    words = list(command)
    if words[0] != "-m":
        words[0] = as_typed(words[0], cwd)
    return SCRIPT_PREFIX + shlex.join(words)


def parse_script(command: list[str] | tuple[str, ...], cwd: str | None = None) -> tuple[ModelSpec, tuple[str, ...]]:
    """What came after ``--`` (``train.py ARGS`` or ``-m package.module ARGS``, as torchrun takes them): the
    script's spec, which names it as typed, and the command every rank runs, a file's path made absolute (the
    ranks start elsewhere)."""
    command = list(command)
    if not command or command[0] == "-m" and len(command) < 2:
        raise SpecError("no script after -- (ddptop run [flags] -- train.py ARGS, or -- -m package.module ARGS)")
    if command[0].startswith("-") and command[0] != "-m":
        raise SpecError(f"{command[0]!r} after --: the script comes first (-- train.py ARGS, or -- -m package.module ARGS)")
    if command[0] != "-m" and "/" not in command[0] and not command[0].endswith(".py"):
        command[0] = "./" + command[0]  # a file, not a module: torchrun runs a file
    cwd = cwd or os.getcwd()
    spec = ModelSpec(script_spec_text(command, cwd), Kind.SCRIPT, _script_target(command, cwd))
    return spec, (("-m", spec.target) if command[0] == "-m" else (spec.target,)) + tuple(command[2 if command[0] == "-m" else 1:])


def is_script(model: str) -> bool:
    """A model spec of a user's training script (``ddptop run -- train.py``), told without parsing it."""
    return model.startswith(SCRIPT_PREFIX)


def is_builtin(model: str) -> bool:
    """A model of ddptop's own catalogue (a torchvision classifier or a transformer preset), not the user's code
    (a factory, an hf config, a script); False for a recorded spec that does not parse."""
    try:
        return parse_spec(model, cwd="/").kind in (Kind.CLASSIFIER, Kind.TRANSFORMER)
    except SpecError:
        return False


def kind_of(text: str) -> Kind:
    """The kind of a spec that has been parsed once already (a plan's): never raises for those."""
    return parse_spec(text).kind


@dataclass(frozen=True)
class BuildInputs:
    """What the plan gives every model's builder; each kind takes what applies to it."""

    num_classes: int
    image_size: int
    seq_len: int | None = None
    hf_config: dict[str, Any] | None = None


PASTE, PATCH = "paste", "patch"  # a tune's answer: lines to paste, or a change at the user's own line


@dataclass(frozen=True)
class ModelKind:
    """A kind, registered once (``KINDS``): how to build and name it, and what it answers for itself (whose
    batch, whether its step holds a data wait, how its communication is measured, the words of "as
    written", the form of a tune's answer, its verdict, the program torchrun starts)."""

    kind: Kind
    what: str
    build: str  # "module:function" of the rank's builder: (ModelSpec, BuildInputs) -> Workload
    checked: bool  # the user's code: built and stepped once before any launch (bench_kernels.preflight)
    token_input: bool | None  # takes --seq-len tokens; None: a factory, if it accepts seq_len
    image_input: bool | None  # its batch holds 4-D images; None: unknown until the check (counted as images)
    problem: Callable[[ModelSpec, int], str | None]  # why it cannot run at an image size, without torch
    facts: Callable[[ModelSpec, int | None], WorkloadFacts | None]  # what is known before the check
    # how a user reads its name (``display_name``): (spec, for a narrow column) -> the name
    name: Callable[[ModelSpec, bool], str] = lambda spec, _short: spec.text
    program: str = "bench_kernels.ddp"  # the module torchrun runs in every rank
    # its batch is ddptop's (--batch-sizes, in its name and its examples/s); False: the model draws its own
    # (a script: the configuration's batch_size is 0, what it drew counted by the probe)
    own_batch: bool = True
    # What a caller would otherwise ask "is it a script?" for, each answered by the kind:
    # its step holds the wait for the next batch, timed apart (the probe's): a step less that wait compares runs
    data_wait: bool = False
    # its exposed communication comes from DDP's own timers, as its steps cannot be run again under no_sync()
    comm_from_ddp_timers: bool = False
    # who is "as written" in a tune's words: DDP (ddptop's kernel, a user's model) or the user's script
    written: str = "DDP"
    yours: str = "DDP"  # the same, said to the user: "keep your script as written"
    # a tune's answer: lines to paste into the user's code (PASTE), or the change at the user's own line (PATCH)
    answer: str = PASTE
    # its verdict reads what the probe saw of a user's training (ranks alone, input-bound, syncing every
    # micro-batch...) rather than the kernel's compute against communication
    verdict_of_script: bool = False
    # the user's own program, run whole once a launch (one configuration each): it may end before its first
    # step, its ranks may end apart, and until its first step ends nothing tells its step (the sweep's words)
    own_program: bool = False
    # its batches are ddptop's random ones: a figure of the data (the gradient noise scale) is one of random
    # labels, not of the user's data (a factory's Workload and a script draw their own)
    random_data: bool = True

    @property
    def as_written(self) -> str:
        """"DDP as written" or "the script as written": the reference every try is measured against."""
        return f"{self.written} as written"


def _classifier_problem(spec: ModelSpec, image_size: int) -> str | None:
    entry = TORCHVISION_MODELS.get(spec.target)
    if entry is None:
        return (f"unknown model {spec.text!r}; known: {', '.join(sorted(TORCHVISION_MODELS))}, "
                f"{', '.join(TRANSFORMER_PRESETS)} (or give package.module:factory, path/to/file.py:factory, "
                "or hf:<model_type>)")
    _family, smallest, patch = entry
    if image_size < smallest:
        return f"{spec.text} needs --image-size of at least {smallest} (got {image_size})"
    if patch and image_size % patch:
        return f"{spec.text} needs --image-size divisible by its patch size {patch} (got {image_size})"
    return None


def _factory_problem(spec: ModelSpec, _image_size: int) -> str | None:
    """Its module located, not imported: importing a user's code is the check's (``bench_kernels.preflight``)."""
    if spec.from_file:
        return None if os.path.isfile(spec.target) else f"model {spec.text}: no such file {spec.target}"
    try:
        found = importlib.util.find_spec(spec.target)
    except (ImportError, ValueError):
        found = None
    return None if found is not None else f"model factory module {spec.target!r} cannot be found on the Python path"


def script_file(spec: ModelSpec, cwd: str | None = None) -> str | None:
    """The file a script spec runs: its path, or where its module lies on the import path (the working
    directory first, as ``python -m`` has it), found without importing anything: a package's ``__init__``
    may import torch, which ddptop's own process never does. None where there is none."""
    if spec.from_file:
        return spec.target if os.path.isfile(spec.target) else None
    search: list[str] | None = [cwd or os.getcwd(), *sys.path]
    found = None
    parts = spec.target.split(".")
    for depth in range(len(parts)):
        found = PathFinder.find_spec(".".join(parts[: depth + 1]), search)
        if found is None:
            return None
        search = list(found.submodule_search_locations or [])
    if found is not None and found.submodule_search_locations:  # a package: python -m runs its __main__
        main = PathFinder.find_spec(spec.target + ".__main__", list(found.submodule_search_locations))
        found = main
    origin = found.origin if found is not None else None
    return origin if origin and origin.endswith(".py") and os.path.isfile(origin) else None


def _script_problem(spec: ModelSpec, _image_size: int) -> str | None:
    """The script exists and parses (compiled, never run: a syntax error is one line before any launch)."""
    path = script_file(spec)
    if path is None:
        if spec.from_file:
            return f"script {spec.target}: no such file"
        return f"script module {spec.target!r} cannot be found on the Python path nor in the working directory (or is a package without __main__.py)"
    try:
        with open(path, "rb") as handle:
            compile(handle.read(), path, "exec", dont_inherit=True)
    except SyntaxError as exc:
        return f"script {path}: does not parse: {exc.msg} (line {exc.lineno})"
    except (OSError, ValueError) as exc:
        return f"script {path}: cannot be read: {exc}"
    return None


def _hf_problem(spec: ModelSpec, _image_size: int) -> str | None:
    if importlib.util.find_spec("transformers") is None:
        return f"model {spec.text}: Hugging Face models need transformers: pip install -e \".[hf]\""
    return None


def _classifier_facts(spec: ModelSpec, _seq_len: int | None) -> WorkloadFacts:
    return WorkloadFacts(spec.text, Kind.CLASSIFIER.value, image_input=True)


def _transformer_facts(spec: ModelSpec, seq_len: int | None) -> WorkloadFacts:
    shape = TRANSFORMER_PRESETS[spec.target]
    length = seq_len or shape.default_seq_len  # one example is one sequence: its tokens
    return WorkloadFacts(spec.text, Kind.TRANSFORMER.value, params=shape.params, tokens_per_example=float(length))


def _factory_name(spec: ModelSpec, short: bool) -> str:
    """Narrow: its last module name (or its file's name) and its function (``mypkg.bench:make_workload`` ->
    ``bench:make_workload``); else its spec."""
    if not short:
        return spec.text
    module = os.path.basename(spec.target)[:-3] if spec.from_file else spec.target.rsplit(".", 1)[-1]
    return f"{module}:{spec.function}"


def _hf_name(spec: ModelSpec, short: bool) -> str:
    """Narrow: its model type with "+" where it has overrides; else its spec."""
    return HF_PREFIX + spec.target + ("+" if spec.overrides else "") if short else spec.text


def script_command(model: str) -> str:
    """A script's command as typed (``train.py --lr 0.1``, ``-m pkg.train ARGS``): the ``command:`` line of the
    report and summary.json keep it whole. An older plan's module, named alone, with its ``-m``; a spec that no
    longer parses, as recorded."""
    try:
        spec = parse_spec(model, cwd="/")
    except SpecError:
        return model[len(SCRIPT_PREFIX):].strip() if model.startswith(SCRIPT_PREFIX) else model
    text = spec.text[len(SCRIPT_PREFIX):].strip()
    return "-m " + text if text == spec.target and not spec.from_file else text


def _script_name(spec: ModelSpec, _short: bool) -> str:
    """Its file (``train.py``), or ``-m pkg.train`` for a module. One run runs one script, so its arguments
    tell none of its configurations apart: they stay in the ``command:`` line, not in every row and id (a
    real script's command runs to hundreds of characters)."""
    return os.path.basename(spec.target) if spec.from_file else "-m " + spec.target


KINDS: dict[Kind, ModelKind] = {kind.kind: kind for kind in (
    ModelKind(Kind.CLASSIFIER, "a torchvision image classifier, random weights", "bench_kernels.sources:classifier_workload",
              checked=False, token_input=False, image_input=True, problem=_classifier_problem, facts=_classifier_facts),
    ModelKind(Kind.TRANSFORMER, "a decoder-only transformer preset, random tokens", "bench_kernels.sources:transformer_workload",
              checked=False, token_input=True, image_input=False,
              problem=lambda spec, _size: None, facts=_transformer_facts),
    ModelKind(Kind.FACTORY, "the user's factory of a module or a Workload", "bench_kernels.sources:factory_workload",
              checked=True, token_input=None, image_input=None, problem=_factory_problem, facts=lambda spec, _n: None,
              name=_factory_name, random_data=False),
    ModelKind(Kind.HF, "a Hugging Face model from its config", "bench_kernels.hf:hf_workload",
              checked=True, token_input=True, image_input=False, problem=_hf_problem, facts=lambda spec, _n: None,
              name=_hf_name),
    ModelKind(Kind.SCRIPT, "the user's training script, run as it is", "", checked=False, token_input=False,
              image_input=False, problem=_script_problem, facts=lambda spec, _n: None, name=_script_name,
              program="bench_kernels.script_probe", own_batch=False, data_wait=True, comm_from_ddp_timers=True,
              written="the script", yours="your script", answer=PATCH, verdict_of_script=True, random_data=False,
              own_program=True),
)}


def registered(text: str) -> ModelKind:
    return KINDS[kind_of(text)]


def model_kind(model: str) -> ModelKind:
    """The registered kind of a configuration's model, as recorded (a spec that no longer parses: a script by
    its prefix, else a classifier's): what a caller asks of a configuration's kind, it asks here."""
    try:
        return KINDS[parse_spec(model, cwd="/").kind]
    except SpecError:
        return KINDS[Kind.SCRIPT if model.startswith(SCRIPT_PREFIX) else Kind.CLASSIFIER]


def seq_len_of(spec: ModelSpec, given: int | None) -> int | None:
    """The sequence length the model is built with: --seq-len where it takes tokens (a factory: where it accepts
    the keyword), else a preset's own; None where it takes none or chooses its own (an hf model's default)."""
    kind = KINDS[spec.kind]
    if kind.token_input is False:
        return None
    if spec.kind is Kind.TRANSFORMER:
        return given or TRANSFORMER_PRESETS[spec.target].default_seq_len
    return given


def seq_len_problem(spec: ModelSpec, seq_len: int) -> str | None:
    return check_seq_len(spec.target, seq_len) if spec.kind is Kind.TRANSFORMER else None


# -- Hugging Face specs: hf:<model_type>[:key=value]... ----------------------------------------------------


@dataclass(frozen=True)
class HfSpec:
    """``hf:llama:hidden_size=512:num_hidden_layers=4``: a model type of ``transformers.AutoConfig.for_model``
    and the config's overrides (whole numbers, decimals, true/false, else text)."""

    model_type: str
    overrides: dict[str, Any] = field(default_factory=dict)


def parse_hf(model: str, plan_overrides: dict[str, Any] | None = None) -> HfSpec:
    """The spec's model type and overrides, the plan's (``hf_config``) first and the spec's own on top; a
    SpecError with one line for a malformed one."""
    parts = model[len(HF_PREFIX):].split(":")
    model_type = parts[0].strip()
    if not model_type.replace("-", "_").replace("_", "a").isalnum():
        raise SpecError(f"model {model!r}: expected hf:<model_type>[:key=value]... (e.g. hf:gpt2:num_hidden_layers=2)")
    overrides: dict[str, Any] = dict(plan_overrides or {})
    for part in parts[1:]:
        key, sep, value = part.partition("=")
        if not sep or not key.strip().isidentifier():
            raise SpecError(f"model {model!r}: {part!r} is not key=value (e.g. hf:gpt2:num_hidden_layers=2)")
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


# -- names for tables and run names ------------------------------------------------------------------------


def spec_label(model: str) -> str:
    """A short name for a model spec, for run names and table titles: a factory's function or an hf spec's
    model type (``hf-llama``); a built-in's name."""
    spec = parse_spec(model)
    if spec.kind is Kind.HF:
        return "hf-" + spec.target
    if spec.kind is Kind.SCRIPT:
        return os.path.basename(spec.target).removesuffix(".py") if spec.from_file else spec.target.rsplit(".", 1)[-1]
    return spec.function or spec.target


def owns_batch(model: str) -> bool:
    """Whether a configuration's batch is ddptop's to choose and name (its kind's ``own_batch``): not a
    script's, which draws its own."""
    return model_kind(model).own_batch


def with_batch(model: str, batch_size: int, short: bool = False) -> str:
    """A configuration's model and its batch per rank as a table's cell or a line names them
    (``resnet50 bs32``); a model that draws its own batch (a script) by its name alone."""
    name = display_name(model, short)
    return f"{name} bs{batch_size}" if owns_batch(model) else name


def display_name(model: str, short: bool = False) -> str:
    """A model as a user reads it, wherever a table, a line, a plot or the live view names one: its kind's
    ``name``. A script by its file (``train.py``: its command whole is ``script_command``'s); a built-in by its name; a factory or an
    hf spec by its spec, or with ``short`` (a narrow column) by the part that tells models apart first
    (``bench:make_workload``, ``hf:llama+``). A spec that does not parse, as it is."""
    try:
        spec = parse_spec(model, cwd="/")  # only its kind and its parts are read: no path is looked up
    except SpecError:
        return model
    return KINDS[spec.kind].name(spec, short)
