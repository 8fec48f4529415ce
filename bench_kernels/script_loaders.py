"""A script's DataLoaders as the probe sees them, and ``ddptop tune``'s try set on its training loader.

Every ``torch.utils.data.DataLoader`` the script makes is recorded where it is made (``DataLoader.__init__``
replaced on the class, so subclasses that call it, accelerate's and Lightning's, are seen): the line of the
script's own code that led to it, or the library's line where a framework made it (``probe_sync.call_site``),
the script's line that led there where a library made it, the count of loaders made there before it, its loading
settings, and how many batches the script drew from it (``DataLoader.__iter__``, timed by the probe). The loader
the steps drew most batches from is the training loader: a first run of the script finds its line, and a try of
the tune sets its keywords on the loaders made at that line (``target``: "train.py:40" every loader made there;
"train.py:40#num_workers=0,pin_memory=False,persistent_workers=False" those given these settings, where an
evaluation loader with others is made at the same line), bound by name over the script's arguments, as DDP's
try is set (``GradSync.tried_call``): a value the loader refuses fails the call, as it
would in the script.

It fails open: an exception in the probe's part leaves the script's loader as the script made it, and the note
says what was not recorded.
"""

from __future__ import annotations

import functools
import inspect
import os
import weakref
from collections.abc import Callable
from typing import Any

from bench_kernels.errors import one_line
from bench_kernels.probe_sync import call_site, short_repr
from ddptop.protocol.loader_target import SETTINGS, targets

MAX_LOADERS_KEPT = 8  # loader lines kept for the report (a train and an eval loader, a loader per epoch, ...)
_HERE = os.path.dirname(os.path.abspath(__file__))


def where(site: str | None, via: str | None) -> str:
    """The line a loader is known by: a framework's own line where one made it (the script's line that led
    there is the same for its training and evaluation loaders), else the script's."""
    return via or site or "?"


def _with_defaults(signature: inspect.Signature, bound: inspect.BoundArguments) -> dict[str, Any]:
    values = signature.bind(*bound.args, **bound.kwargs)
    values.apply_defaults()
    return dict(values.arguments)


class LoaderWatch:
    """The hook on ``DataLoader.__init__``, what it saw, and the try's keywords for the training loader."""

    def __init__(self, torch: Any, notes: list[str], arguments: dict[str, Any] | None, target: str) -> None:
        self.torch = torch
        self.notes = notes
        self.arguments = dict(arguments or {})
        self.target = target
        self.tried = 0  # loaders given the try
        self.made: dict[str, int] = {}  # line -> loaders made there
        self.records: list[dict[str, Any]] = []  # one per line and setting, as config_end.script.loaders
        self.of: weakref.WeakKeyDictionary[Any, dict[str, Any]] = weakref.WeakKeyDictionary()
        self._skip = (os.path.dirname(os.path.abspath(torch.__file__)), _HERE)
        self._undo: list[Callable[[], None]] = []
        self._said = False

    def install(self) -> None:
        from torch.utils.data import DataLoader

        init = DataLoader.__dict__["__init__"]
        signature = inspect.signature(init)
        watch = self

        @functools.wraps(init)
        def watched_init(loader: Any, *args: Any, **kwargs: Any) -> None:
            at = watch._made()
            if at is not None and watch.arguments:
                bound = signature.bind(loader, *args, **kwargs)
                if targets(watch.target, at[0], functools.partial(_with_defaults, signature, bound)):
                    bound.arguments.update(watch.arguments)  # the try's by name over the script's: refused as it would be
                    args, kwargs = bound.args[1:], bound.kwargs
                    watch.tried += 1
            init(loader, *args, **kwargs)
            if at is not None:
                watch._seen(loader, at)

        setattr(DataLoader, "__init__", watched_init)
        self._undo.append(functools.partial(setattr, DataLoader, "__init__", init))

    def uninstall(self) -> None:
        while self._undo:
            self._undo.pop()()

    def _made(self) -> tuple[str, int, str | None] | None:
        """The line making a loader now, its place among the loaders made there, and where a library's line made
        it, the script's line that led there (None for the script's own)."""
        try:
            site, via = call_site(self._skip)
            line = where(site, via)
            ordinal = self.made.get(line, 0)
            self.made[line] = ordinal + 1
            return line, ordinal, (site or "?") if via is not None else None
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self._failed(exc)
            return None

    def _seen(self, loader: Any, at: tuple[str, int, str | None]) -> None:
        """Keep the loader's line and settings (one record per line and setting: a loader made again each epoch
        is one record; ``library`` where a library's line made it, ``from`` the script's line that led there);
        never fails."""
        try:
            line, ordinal, led = at
            settings = {name: getattr(loader, name, None) for name in SETTINGS}
            settings = {k: v if isinstance(v, (bool, int, float)) or v is None else short_repr(v)
                        for k, v in settings.items()}
            record = next((r for r in self.records if r["at"] == line and all(r[k] == v for k, v in settings.items())),
                          None)
            if record is None:
                if len(self.records) >= MAX_LOADERS_KEPT:
                    return
                record = {"at": line, **settings, "made": 0, "first": ordinal, "batches": 0}
                if led is not None:
                    record["library"] = True
                    record["from"] = led
                self.records.append(record)
            record["made"] += 1
            self.of[loader] = record
        except Exception as exc:  # noqa: BLE001 - the probe fails open
            self._failed(exc)

    def record_of(self, loader: Any) -> dict[str, Any] | None:
        """The record of a loader the script iterates (None for one made before the probe, or not kept)."""
        try:
            return self.of.get(loader)
        except TypeError:  # not weakly referenceable
            return None

    def _failed(self, exc: BaseException) -> None:
        if not self._said:
            self._said = True
            self.notes.append(f"DataLoaders not all recorded: {one_line(exc)}")

    def seen(self) -> dict[str, Any]:
        """``config_end.script``'s ``loaders`` and, for a try of the loader, on how many loaders it was set."""
        found: dict[str, Any] = {"loaders": [dict(r) for r in self.records]}
        if self.arguments:
            found["loader_tried_on"] = self.tried
        return found
