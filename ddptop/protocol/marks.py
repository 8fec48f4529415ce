"""ddptop's own records: the ``mark`` events of runner.jsonl (node 0) and runner-node<K>.jsonl (node K).

What only the launching process knows (a launch started or ended, a configuration it ended, the sweep's
end) is written as ``{"type": "mark", "data": {"what": ..., ...}}`` before it is acted on, so that the
session, a follower node, ``watch`` and ``report`` rebuild the same state from disk. Each kind of mark is a
frozen dataclass here: writers build one and write ``to_data()``; readers call ``parse_mark(event)`` and
match on the class, so a field's name is spelled once. docs/wire-format.md shows each mark on disk.

Standard library only, like the rest of ``ddptop.protocol``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, Union

from ddptop.protocol import jsontypes


@dataclass(frozen=True)
class _Mark:
    what: ClassVar[str]

    def to_data(self) -> dict[str, Any]:
        """The event's ``data`` object: ``what`` first, then the fields (``node_rank`` left out on node 0)."""
        data: dict[str, Any] = {"what": self.what}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "node_rank" and value is None:
                continue
            data[f.name] = list(value) if isinstance(value, tuple) else value
        return data


@dataclass(frozen=True)
class LaunchStart(_Mark):
    """Node 0 is about to start a launch (its launch.json comes right after): followers join it."""

    what: ClassVar[str] = "launch_start"
    launch: str
    world_size: int
    backend: str
    configs: tuple[str, ...]
    nodes: int = 1
    nproc_per_node: int | None = None


@dataclass(frozen=True)
class LaunchEnd(_Mark):
    """A node's torchrun agent for a launch has ended (``node_rank`` None: node 0's, in runner.jsonl)."""

    what: ClassVar[str] = "launch_end"
    launch: str
    exit_code: int | None = None
    status: str = "ended"  # ok | failed | stopped ("ended": a mark that did not say)
    reason: str | None = None
    wall_s: float | None = None
    node_rank: int | None = None


@dataclass(frozen=True)
class ConfigEnd(_Mark):
    """ddptop ended a configuration itself (skipped, stopped, not run, or failed with a launch's death)."""

    what: ClassVar[str] = "config"
    config_id: str
    status: str
    reason: str | None = None
    cause: str | None = None  # a rank that died without reporting: put in front of the others' errors
    log_tail: tuple[str, ...] | None = None  # the ranks' last stderr lines, when it failed


@dataclass(frozen=True)
class SweepEnd(_Mark):
    what: ClassVar[str] = "sweep_end"
    status: str = "done"  # done | stopped


@dataclass(frozen=True)
class LaunchJoin(_Mark):
    """Follower node ``node_rank`` started its agent for a launch."""

    what: ClassVar[str] = "launch_join"
    launch: str
    node_rank: int | None = None


@dataclass(frozen=True)
class FollowerEnd(_Mark):
    """Follower node ``node_rank`` stopped following (``leader_status``: the sweep's end it saw, if any)."""

    what: ClassVar[str] = "follower_end"
    leader_status: str | None = None
    node_rank: int | None = None


Mark = Union[LaunchStart, LaunchEnd, ConfigEnd, SweepEnd, LaunchJoin, FollowerEnd]
MARKS: dict[str, type] = {cls.what: cls for cls in (LaunchStart, LaunchEnd, ConfigEnd, SweepEnd, LaunchJoin,
                                                    FollowerEnd)}
_SEQUENCES = {"configs", "log_tail"}


def parse_mark(event: dict[str, Any]) -> Mark | None:
    """The typed mark of a (validated) event, or None: not a mark, an unknown ``what`` (a newer writer's),
    or one without a field it must have. Fields the class does not know are ignored."""
    if event.get("type") != "mark":
        return None
    data = event.get("data")
    if not isinstance(data, dict):
        return None
    what = data.get("what")
    cls = MARKS.get(what) if isinstance(what, str) else None
    if cls is None:
        return None
    values: dict[str, Any] = {}
    types_of = jsontypes.hints(cls)
    for f in dataclasses.fields(cls):
        if f.name in data:
            value = data[f.name]
            if f.name in _SEQUENCES and value is not None:
                if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                    return None
                value = tuple(value)
            elif not jsontypes.fits(value, types_of[f.name]):
                return None  # a damaged file's value of the wrong type: the mark is left out, not trusted
            values[f.name] = value
        elif f.default is dataclasses.MISSING:
            return None
    return cls(**values)
