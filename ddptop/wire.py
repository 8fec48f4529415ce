"""The event format between benchmark ranks and ddptop: versioned JSON lines.

Standard library only: the kernels (inside torchrun workers) and the core (inside the ddptop process) both
import this module, and neither may pull the other's dependencies in through it.

Every rank appends events to its own file (``<launch dir>/events/rank-<R>.jsonl``) and flushes at most every
``flush_interval`` seconds, always outside the timed region; the session tails those files. One event is one
line holding one JSON object with at least ``v`` (wire version), ``type``, ``t`` (UNIX time, seconds) and
``rank``. See docs/wire-format.md for an example of every event.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from typing import Any

WIRE_VERSION = 1

# Fields each event type must carry beyond v/type/t/rank. Readers reject lines without them.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    "hello": ("world_size", "host", "pid", "device"),
    "config_start": ("config_id",),
    "samples": ("config_id", "phase", "first_iter", "sec"),
    "config_end": ("config_id", "status"),
    "error": ("error_type", "message", "traceback", "oom"),
    "bye": (),
    # the analysis phases of a DDP configuration: DDP's own averages and the comm hook's bucket timings
    "comm": ("config_id",),
    # one collective benchmark result (bench_kernels.collectives): op, size, placement, per-op seconds
    "collective": ("op", "bytes", "inplace", "sec"),
    # ddptop's own records in runner.jsonl (rank -1): launches started/ended, configurations it ended
    "mark": ("data",),
    # ddptop's telemetry timeline (telemetry.jsonl, rank -1): one record per sampler tick
    "telemetry": ("gpus", "host", "ranks"),
}
PHASES = ("warmup", "measure", "nosync")  # nosync: the step inside no_sync(), no gradient allreduce


class MalformedEvent(ValueError):
    """A line that is not a valid event of a wire version this module understands."""


def make_event(event_type: str, rank: int, **fields: Any) -> dict[str, Any]:
    if event_type not in REQUIRED_FIELDS:
        raise ValueError(f"unknown event type {event_type!r}")
    event = {"v": WIRE_VERSION, "type": event_type, "t": time.time(), "rank": rank}
    event.update(fields)
    return event


def encode(event: dict[str, Any]) -> bytes:
    # allow_nan=False: NaN/inf are not JSON, and a reader in another language must be able to parse us.
    return json.dumps(event, separators=(",", ":"), allow_nan=False).encode() + b"\n"


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python's json would accept them


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse and validate one line; raise MalformedEvent with the reason otherwise."""
    try:
        event = json.loads(line, parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedEvent(f"not JSON: {exc}") from None
    return validate(event)


def decode_many(lines: list[bytes]) -> list[Any] | None:
    """Parse many lines with one JSON call (as an array); None when any line is not one JSON value, and the
    caller falls back to line by line to find which. Ranks write thousands of small lines: one call each
    was most of a reader's time."""
    try:
        values = json.loads(b"[" + b",".join(lines) + b"]", parse_constant=_no_constants)
    except (ValueError, UnicodeDecodeError):
        return None
    return values if len(values) == len(lines) else None


_NUMBERS = frozenset((int, float))  # bool is not one: type(True) is bool


def validate(event: Any) -> dict[str, Any]:
    """Check one parsed event; raise MalformedEvent with the reason otherwise."""
    if not isinstance(event, dict):
        raise MalformedEvent("not a JSON object")
    version = event.get("v")
    if version != WIRE_VERSION:
        raise MalformedEvent(f"unsupported wire version {version!r} (this ddptop reads {WIRE_VERSION})")
    event_type = event.get("type")
    required = REQUIRED_FIELDS.get(event_type)  # type: ignore[arg-type]
    if required is None:
        raise MalformedEvent(f"unknown event type {event_type!r}")
    for name in ("t", "rank", *required):
        if name not in event:
            raise MalformedEvent(f"{event_type} event without {name!r}")
    if type(event["rank"]) is not int:
        raise MalformedEvent("rank is not an integer")
    if event_type in ("samples", "collective"):
        samples = event["sec"]
        if not isinstance(samples, list) or (samples and (not set(map(type, samples)) <= _NUMBERS or min(samples) < 0)):
            raise MalformedEvent(f"{event_type}.sec is not a list of non-negative numbers")
        if event_type == "collective" and not (type(event["bytes"]) is int and event["bytes"] > 0):
            raise MalformedEvent("collective.bytes is not a positive integer")
    if event_type == "samples":
        if event["phase"] not in PHASES:
            raise MalformedEvent(f"unknown phase {event['phase']!r}")
    return event


def open_private_append(path: str) -> int:
    """Open for appending, creating the file readable by its owner only."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


class EventWriter:
    """Appends one rank's events to its file; buffers and writes at most every ``flush_interval`` s.

    ``emit`` only appends to a list, so it is cheap enough to call between timed iterations; the caller
    decides when to ``flush`` (``last_flush`` tells when it last did). ``flush`` writes everything with one
    ``os.write`` per batch (whole lines, so a reader never sees half an event
    unless the process dies mid-write, which readers tolerate).
    """

    def __init__(self, path: str, rank: int, flush_interval: float = 0.1) -> None:
        self.rank = rank
        self.flush_interval = flush_interval
        self._fd = open_private_append(path)
        self._pending: list[bytes] = []
        self.last_flush = time.monotonic()

    def emit(self, event_type: str, **fields: Any) -> None:
        self.emit_event(make_event(event_type, self.rank, **fields))

    def emit_event(self, event: dict[str, Any]) -> None:
        """Queue an event already made (``make_event``), e.g. one the caller also keeps in memory."""
        self._pending.append(encode(event))

    def flush(self, durable: bool = False) -> None:
        if self._pending:
            data = b"".join(self._pending)
            self._pending.clear()
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
        if durable:
            os.fsync(self._fd)
        self.last_flush = time.monotonic()

    def close(self) -> None:
        if self._fd >= 0:
            self.flush(durable=True)
            os.close(self._fd)
            self._fd = -1


@dataclass
class EventFileReader:
    """Tails one events file: each ``read_new`` returns the complete, valid events appended since last call.

    A trailing partial line is kept until its newline arrives. Malformed lines are skipped and counted
    (``malformed``), with the first reason kept for the user.
    """

    path: str
    offset: int = 0
    malformed: int = 0
    first_problem: str | None = None
    _partial: bytes = field(default=b"", repr=False)

    def read_new(self) -> list[dict[str, Any]]:
        try:
            with open(self.path, "rb") as handle:
                handle.seek(self.offset)
                chunk = handle.read()
        except FileNotFoundError:
            return []
        if not chunk:
            return []
        self.offset += len(chunk)
        data = self._partial + chunk
        cut = data.rfind(b"\n")
        if cut < 0:
            self._partial = data
            return []
        self._partial = data[cut + 1 :]
        return self._decode_lines(data[:cut].split(b"\n"))

    def read_rest(self) -> list[dict[str, Any]]:
        """Read new events and also the unterminated last line (the writer is known to be gone)."""
        events = self.read_new()
        if self._partial:
            tail, self._partial = self._partial, b""
            events.extend(self._decode_lines([tail]))
        return events

    def _decode_lines(self, lines: list[bytes]) -> list[dict[str, Any]]:
        lines = [line for line in lines if line.strip()]
        parsed = decode_many(lines)
        events = []
        for index, line in enumerate(lines):
            try:
                events.append(validate(parsed[index]) if parsed is not None else decode(line))
            except MalformedEvent as exc:
                self.malformed += 1
                if self.first_problem is None:
                    self.first_problem = f"{self.path}: {exc}"
        return events
