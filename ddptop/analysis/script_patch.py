"""A script's change, written against its source: the keyword arguments a try of ``ddptop tune -- train.py`` set
on one call (its DDP model's, its training loader's), at the line the probe found it made.

The script's file is read and parsed (``ast``), never run or changed: the call is the one at that line. Each
keyword is, in the call as written,

- **a literal** (``num_workers=0``): its value is replaced, in a patch;
- **missing**: the keyword is added after the call's last argument, in a patch (not where the call passes
  ``**kwargs``, which may hold it already: then the change is said, not patched);
- **an expression** (``num_workers=args.workers``): left as it is, and said as the expression and the value to
  give it, with the command-line flag where it is an ``argparse`` argument of the same file
  (``--workers 4``).

A patch is a unified diff with ``a/`` and ``b/`` paths relative to the folder ddptop ran the script in, applied
there with ``patch -p1``. Standard library only.
"""

from __future__ import annotations

import ast
import difflib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ddptop.protocol import loader_target
from ddptop.protocol.variants import Variant, keyword_words, script_change_lines, script_ddp_arguments

LOADER_NAMES = ("DataLoader",)  # the names a call that made a loader or a DDP model likely has
DDP_NAMES = ("DistributedDataParallel", "DDP")


@dataclass
class ScriptChange:
    """The change to a script's calls: a patch of its files where one could be written (paths relative to
    ``folder``, the script's own), and a line for each keyword it could not patch."""

    patch: str | None = None
    folder: str | None = None
    lines: list[str] = field(default_factory=list)


def _site(site: str) -> tuple[str, int] | None:
    path, _, line = site.rpartition(":")
    line = loader_target.line_of(line)
    return (path, int(line)) if path and line.isdigit() else None


def _callee(node: ast.Call) -> str:
    func = node.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _call_at(tree: ast.AST, line: int, names: tuple[str, ...]) -> ast.Call | None:
    """The call made at ``line`` (the line a frame names: where the call starts, else the innermost call that
    holds it): of those, one to a callee whose name ends in one of ``names`` (``DataLoader``, ``DDP``), None where
    none does; the outermost where ``names`` is empty."""
    found = [node for node in ast.walk(tree)
             if isinstance(node, ast.Call) and node.lineno <= line <= (node.end_lineno or node.lineno)]
    if not found:
        return None
    starting = [n for n in found if n.lineno == line] or [min(found, key=lambda n: (n.end_lineno or n.lineno) - n.lineno)]
    if not names:
        return starting[0]  # ast.walk goes outside in
    # a call of the kind (DataLoader, DDP, an alias ending so: NativeDDP), never another (the file edited since the
    # run, a DDP model handed to torch.compile on the same line)
    return next((n for n in starting if _callee(n).endswith(names)), None)


def loader_call(script_dir: str, site: str) -> bool:
    """Whether the line ``site`` names holds a call of a DataLoader (a class whose name ends so)."""
    where = _site(site)
    if where is None:
        return False
    path, line = where
    read = _read(path if os.path.isabs(path) else os.path.join(script_dir, path))
    node = _call_at(read[1], line, LOADER_NAMES) if read is not None else None
    return node is not None and _callee(node).endswith("DataLoader")


def _flags(tree: ast.AST) -> dict[str, str]:
    """argparse's destinations in the file and the flag that sets each (``--workers`` sets ``workers``)."""
    found: dict[str, str] = {}
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "add_argument"):
            continue
        options = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        longs = [o for o in options if o.startswith("--")] or [o for o in options if o.startswith("-")]
        if not longs:
            continue
        dest = next((k.value.value for k in node.keywords if k.arg == "dest" and isinstance(k.value, ast.Constant)),
                    longs[0].lstrip("-").replace("-", "_"))
        found[str(dest)] = longs[0]
    return found


def _offset(lines: list[str], line: int, col: int) -> int:
    """The character offset of (1-based line, 0-based UTF-8 byte column) in the text ``lines`` joined."""
    before = sum(len(text) for text in lines[:line - 1])
    return before + len(lines[line - 1].encode("utf-8")[:col].decode("utf-8", errors="replace"))


def _read(full: str) -> tuple[str, ast.AST] | None:
    try:
        with open(full, encoding="utf-8") as handle:
            source = handle.read()
        return source, ast.parse(source)
    except (OSError, SyntaxError, ValueError, UnicodeDecodeError):
        return None


def script_change(script_dir: str, calls: list[tuple[str, Mapping[str, Any], tuple[str, ...]]]) -> ScriptChange | None:
    """The change that gives each call at its site (``train.py:93``, relative to ``script_dir`` or absolute)
    its keywords (the callee's likely names beside: ``DataLoader``); None where no site's file can be read and
    parsed, or none holds a call at its line."""
    change = ScriptChange()
    edits: dict[str, list[tuple[int, int, str]]] = {}  # file -> (start, end, text) in its source
    sources: dict[str, str] = {}
    for site, keywords, names in calls:
        where = _site(site)
        if where is None:
            continue
        path, line = where
        full = os.path.normpath(path if os.path.isabs(path) else os.path.join(script_dir, path))
        read = _read(full)
        node = _call_at(read[1], line, names) if read is not None else None
        if read is None or node is None:
            continue
        sources[full] = read[0]
        edits.setdefault(full, []).extend(_call_edits(read[0], read[1], node, keywords, change.lines))
    if not sources:
        return None
    diffs = []
    edited = [full for full, found in edits.items() if found]
    if edited:  # the files' common folder, where patch -p1 applies (a file in a folder above the other's too)
        change.folder = os.path.commonpath([os.path.dirname(full) for full in edited])
    for full in edited:
        source = text = sources[full]
        for start, end, new in sorted(edits[full], reverse=True):
            text = text[:start] + new + text[end:]
        name = os.path.relpath(full, change.folder)
        diffs.append("".join(difflib.unified_diff(source.splitlines(keepends=True), text.splitlines(keepends=True),
                                                  f"a/{name}", f"b/{name}")))
    change.patch = "".join(diffs) or None
    return change


def _call_edits(source: str, tree: ast.AST, node: ast.Call, keywords: Mapping[str, Any], said: list[str]
                ) -> list[tuple[int, int, str]]:
    """The edits of the source that give ``node`` ``keywords``; what cannot be patched said in ``said``."""
    lines = source.splitlines(keepends=True)
    flags = _flags(tree)
    edits: list[tuple[int, int, str]] = []
    given = {k.arg: k for k in node.keywords if k.arg is not None}
    splat = any(k.arg is None for k in node.keywords)
    added: list[str] = []
    for name, value in keywords.items():
        written = given.get(name)
        if written is None:
            if splat:
                said.append(f"{name}={value!r}: the call passes **kwargs, which may hold {name}; set it there")
            else:
                added.append(f"{name}={value!r}")
            continue
        expression = written.value
        if isinstance(expression, ast.Constant):
            if expression.value != value:
                edits.append((_offset(lines, expression.lineno, expression.col_offset),
                              _offset(lines, expression.end_lineno or expression.lineno, expression.end_col_offset or 0),
                              repr(value)))
            continue
        text = ast.get_source_segment(source, expression) or "its expression"
        flag = flags.get(expression.attr) if isinstance(expression, ast.Attribute) else None
        how = (f"pass {flag} {value}" if flag and not isinstance(value, bool)
               else f"pass {flag}" if flag and value is True else f"give it {value!r}")
        said.append(f"{name}={text} (line {expression.lineno}): {how}")
    if added:
        arguments: list[ast.expr | ast.keyword] = [*node.args, *node.keywords]
        last = max(arguments, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0), default=None)
        if last is None:  # a call with no argument: inside its parentheses
            at = _offset(lines, node.end_lineno or node.lineno, (node.end_col_offset or 1) - 1)
            edits.append((at, at, ", ".join(added)))
        else:
            at = _offset(lines, last.end_lineno or last.lineno, last.end_col_offset or 0)
            edits.append((at, at, ", " + ", ".join(added)))
    return edits


# The Hugging Face Trainer makes its DataLoader and its DDP model in transformers' and accelerate's own code, from
# its TrainingArguments: a try of those calls is a setting of the script's TrainingArguments(...) call
# (transformers' fields dataloader_* and ddp_*)
TRAINER_LIBRARIES = ("transformers" + os.sep, "accelerate" + os.sep)
TRAINING_ARGUMENTS = {"num_workers": "dataloader_num_workers", "persistent_workers": "dataloader_persistent_workers",
                      "prefetch_factor": "dataloader_prefetch_factor", "pin_memory": "dataloader_pin_memory",
                      "find_unused_parameters": "ddp_find_unused_parameters", "bucket_cap_mb": "ddp_bucket_cap_mb",
                      "broadcast_buffers": "ddp_broadcast_buffers", "static_graph": "ddp_static_graph"}


LIGHTNING = ("lightning" + os.sep, "pytorch_lightning" + os.sep)
ACCELERATE = "accelerate" + os.sep


def accelerate_lines(ddp_keywords: Mapping[str, Any]) -> list[str]:
    """Where accelerate made the DDP model (a script's own accelerate loop): its DistributedDataParallelKwargs."""
    if not ddp_keywords:
        return []
    words = keyword_words(ddp_keywords)
    return [f"  accelerate: Accelerator(kwargs_handlers=[DistributedDataParallelKwargs({words})])"]


def lightning_lines(ddp_keywords: Mapping[str, Any], loader_keywords: Mapping[str, Any]) -> list[str]:
    """Where a Lightning Trainer made the calls: its DDPStrategy passes its keyword arguments to DDP, and it
    makes its training loader again from the one the script's train_dataloader() returns."""
    lines = []
    if ddp_keywords:
        words = keyword_words(ddp_keywords)
        lines.append(f"  Lightning: Trainer(strategy=DDPStrategy(..., {words})), which passes them to DDP")
    if loader_keywords:
        lines.append("  Lightning: on the DataLoader(...) the script's train_dataloader() returns, which Lightning "
                     "makes again with its settings")
    return lines


def try_change(chosen: Variant, ddp: Mapping[str, Any] | None, loader_site: str, own_loader: str | None,
               script_dir: str, script_file: str = "") -> tuple[list[str], ScriptChange | None]:
    """A try's change to a script: the lines at the calls it set (``variants.script_change_lines``: its DDP
    model's, ``ddp`` the probe's record of it; its training loader's, ``loader_site`` its target), and the
    patch of what is a literal or missing. Where a library made a call, the change where the script says it:
    the script's own loader that the library made again (``own_loader``, its line), the Hugging Face
    Trainer's settings in the script's TrainingArguments(...), accelerate's DistributedDataParallelKwargs and
    Lightning's DDPStrategy (said, not patched)."""
    ddp_keywords = script_ddp_arguments(chosen.name)
    via = ddp.get("via") if ddp else None
    ddp_site = ddp.get("site") if ddp and not via else None  # a framework's DDP call: no patch of it
    lines = script_change_lines(chosen, ddp.get("site") if ddp else None, loader_target.line_of(loader_site) or None)
    if own_loader and chosen.loader_kwargs:
        lines.append(f"{own_loader}: DataLoader(..., {keyword_words(chosen.loader_kwargs)}) (the script's own, "
                     "which the library makes again)")
    calls: list[tuple[str, Mapping[str, Any], tuple[str, ...]]] = [(site, found, names) for site, found, names in (
        (ddp_site, ddp_keywords, DDP_NAMES), (own_loader or loader_site, chosen.loader_kwargs, LOADER_NAMES))
        if site and found]
    change = script_change(script_dir, calls) if calls and script_dir else None
    trainer = [found for site, found in ((via, ddp_keywords), (loader_site, chosen.loader_kwargs))
               if found and made_by_trainer(site)]
    settings: list[str] = []
    if trainer and script_file and change is None:
        settings, change = trainer_change(script_dir, script_file, {k: v for f in trainer for k, v in f.items()})
        lines += settings
    if not settings and str(via or "").startswith(ACCELERATE):
        lines += accelerate_lines(ddp_keywords)
    by_lightning = [str(site).startswith(LIGHTNING) for site in (via, None if own_loader else loader_site)]
    lines += lightning_lines(ddp_keywords if by_lightning[0] else {}, chosen.loader_kwargs if by_lightning[1] else {})
    return lines, change


def made_by_trainer(site: str | None) -> bool:
    """Whether a call's line is the Hugging Face Trainer's own (transformers' or accelerate's code)."""
    return bool(site) and str(site).startswith(TRAINER_LIBRARIES)


def _training_arguments_line(script_file: str) -> int | None:
    read = _read(script_file)
    if read is None:
        return None
    calls = [n for n in ast.walk(read[1]) if isinstance(n, ast.Call) and _callee(n).endswith("TrainingArguments")]
    return min((n.lineno for n in calls), default=None)


def trainer_change(script_dir: str, script_file: str, keywords: Mapping[str, Any]
                   ) -> tuple[list[str], ScriptChange | None]:
    """A try of the calls the Trainer makes, as the script's ``TrainingArguments(...)``'s settings: the line to
    change (and what of it cannot be set there), and its patch."""
    settable = {TRAINING_ARGUMENTS[k]: v for k, v in keywords.items() if k in TRAINING_ARGUMENTS}
    unsettable = [k for k in keywords if k not in TRAINING_ARGUMENTS]
    line = _training_arguments_line(script_file)
    if line is None or not settable:
        return [], None
    site = f"{os.path.relpath(script_file, script_dir) if script_dir else script_file}:{line}"
    words = keyword_words(settable)
    lines = [f"{site}: TrainingArguments(..., {words})"]
    lines += [f"  {k}: not a TrainingArguments setting" for k in unsettable]
    return lines, script_change(script_dir, [(site, settable, ("TrainingArguments",))])
