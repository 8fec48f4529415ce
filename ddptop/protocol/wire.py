"""The event format between benchmark ranks and ddptop: versioned JSON lines.

Standard library only: the kernels (inside torchrun workers) and the core (inside the ddptop process) both
import this module, and neither may pull the other's dependencies in through it.

Every rank appends events to its own file (``<launch dir>/events/rank-<R>.jsonl``) and flushes at most every
``flush_interval`` seconds, always outside the timed region; the session tails those files. One event is one
line holding one JSON object with at least ``v`` (wire version), ``type``, ``t`` (UNIX time, seconds) and
``rank``. See docs/wire-format.md for an example of every event.
"""

from __future__ import annotations

import errno
import functools
import json
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ddptop.protocol import storage
from ddptop.protocol.vocab import Phase

WIRE_VERSION = 1
READ_CHUNK = 1 << 20  # bytes per read of an events file

_NUMBERS = frozenset((int, float))  # bool is not one: type(True) is bool
_INT, _STR, _LIST, _DICT = frozenset((int,)), frozenset((str,)), frozenset((list,)), frozenset((dict,))
_NONE = frozenset((type(None),))
_BOOL = frozenset((bool,))
_COMMON = (("t", _NUMBERS, True), ("rank", _INT, True))
_ANY_CONFIG = (("config_id", _STR | _NONE, False),)  # any event may name its configuration; it is looked up
# Per event type beyond v/type: (field, the JSON types it may hold or None for any, required). Readers
# reject a line without a required field, or with a field the reader acts on of another type: nothing
# downstream should meet a list where it compares a time or looks a configuration up.
EVENT_FIELDS: dict[str, tuple[tuple[str, frozenset | None, bool], ...]] = {
    # binding/cores: how the rank was bound to CPUs and those it may run on; gpu_setup: rank 0 of a GPU launch
    "hello": _COMMON + (("world_size", _INT, True), ("host", _STR, True), ("pid", _INT, True),
                        ("device", _STR, True), ("binding", _STR, False), ("cores", _LIST | _NONE, False),
                        ("gpu_setup", _DICT, False)) + _ANY_CONFIG,
    # config_start: the configuration's ConfigFields (protocol/config_fields.py) first, then the process group's
    # world_size, the steps it plans, and what the rank found of its model (parameters, FLOPs, dtypes)
    "config_start": _COMMON + (("config_id", _STR, True), ("warmup", _INT | _NONE, False),
                               ("iters", _INT | _NONE, False), ("time_budget", _NUMBERS | _NONE, False),
                               ("round", _INT, False)),
    # data_wait/examples/tokens: a user's script's steps (bench_kernels.script_probe), one value per step of sec
    "samples": _COMMON + (("config_id", _STR, True), ("phase", _STR, True), ("first_iter", _INT, True),
                          ("sec", _LIST, True), ("of", _INT | _NONE, False), ("round", _INT, False),
                          ("data_wait", _LIST, False), ("examples", _LIST, False), ("tokens", _LIST, False)),
    # round/last: a configuration measured in several rounds ends each round, then itself (last: true);
    # ended_by/note/script: a user's script's configuration (bench_kernels.script_probe)
    "config_end": _COMMON + (("config_id", _STR, True), ("status", _STR, True), ("round", _INT, False),
                             ("last", _BOOL, False), ("warmup_iters", _INT | _NONE, False),
                             ("precision_reached", _NUMBERS | _NONE, False), ("unstable", _BOOL, False),
                             ("ended_by", _STR, False), ("note", _STR | _NONE, False), ("script", _DICT, False)),
    # phase "analysis": the communication analysis failed after its configuration ended (the steps stand)
    "error": _COMMON + (("error_type", None, True), ("message", None, True), ("traceback", None, True),
                        ("oom", None, True), ("phase", _STR, False)) + _ANY_CONFIG,
    "bye": _COMMON + _ANY_CONFIG,
    # the analysis phases of a DDP configuration: DDP's own averages and the comm hook's bucket timings
    "comm": _COMMON + (("config_id", _STR, True), ("analysis_s", _NUMBERS | _NONE, False)),
    # a configuration's profiler trace (bench_kernels.trace): its file, size, cost and device, or a note; ddptop
    # breaks the file down. breakdown: the rank's own, in runs whose ranks broke their files down (read where
    # the file is gone)
    "trace": _COMMON + (("config_id", _STR, True), ("path", _STR, True), ("steps", _INT, True),
                        ("wall_s", _NUMBERS, True), ("note", _STR | _NONE, False), ("device", _STR, False),
                        ("breakdown", _DICT, False)),
    # a rank alive in a phase that streams no samples (the traced steps, the trace's export): for the hang watch;
    # setup: building a configuration or compiling its first step, which the watch gives the startup grace
    "heartbeat": _COMMON + (("config_id", _STR, False), ("doing", _STR, True), ("setup", _BOOL, False)),
    # torch.compile's first step of a configuration (bench_kernels.compiled), after its config_start
    "compiled": _COMMON + (("config_id", _STR, True), ("first_step_s", _NUMBERS, True)),
    # the best matmul FLOP/s rank 0 reached on its device in one dtype of the launch's steps (bench_kernels.ceiling)
    "ceiling": _COMMON + (("flops_per_s", _NUMBERS, True), ("dtype", _STR, True)) + _ANY_CONFIG,
    # one collective benchmark result (bench_kernels.collectives): op, size, placement, per-op seconds
    "collective": _COMMON + (("op", _STR, True), ("bytes", _INT, True), ("inplace", None, True),
                             ("sec", _LIST, True)) + _ANY_CONFIG,
    # ddptop's own records in runner.jsonl (rank -1): launches started/ended, configurations it ended
    "mark": _COMMON + (("data", _DICT, True),) + _ANY_CONFIG,
    # ddptop's telemetry timeline (telemetry.jsonl, rank -1): one record per sampler tick
    "telemetry": _COMMON + (("gpus", None, True), ("host", None, True), ("ranks", None, True)) + _ANY_CONFIG,
}
# Fields each event type must carry beyond v/type/t/rank.
REQUIRED_FIELDS: dict[str, tuple[str, ...]] = {
    event_type: tuple(name for name, _, required in fields[2:] if required)
    for event_type, fields in EVENT_FIELDS.items()
}
SAMPLE_PHASES = frozenset({Phase.WARMUP, Phase.MEASURE, Phase.NOSYNC})
# a samples event's lists beside sec, one value per step: (field, whether each value must be an integer)
# a script's step values beside its seconds; the squared gradient norms before and after the step's one
# synchronisation (bench_kernels.probe_noise), where it had exactly one
STEP_LISTS = (("data_wait", False), ("examples", True), ("tokens", False), ("grad_sq_local", False),
              ("grad_sq_averaged", False))
# config_end.ended_by: who ended a user's script
ENDED_BY_DDPTOP, ENDED_BY_SCRIPT = "ddptop", "script"


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


def _stdlib_loads(data: bytes | str) -> Any:
    return json.loads(data, parse_constant=_no_constants)


@functools.lru_cache(maxsize=1)
def fast_loads() -> Callable[[bytes], Any] | None:
    """orjson's parser (a dependency of ddptop, 1.6x json's speed on events), or None without it. Imported
    at the first read, not with this module: the kernels only write, and import the standard library only."""
    try:
        import orjson
    except ImportError:
        return None

    def parse(data: bytes) -> Any:
        try:
            return orjson.loads(data)  # strict RFC 8259: NaN and Infinity are refused as they should be
        except orjson.JSONDecodeError as exc:
            raise ValueError(str(exc)) from None

    return parse


def batch_loads(data: bytes) -> Any:
    """Parse a batch of lines joined into one JSON array: with orjson when there is one."""
    return (fast_loads() or _stdlib_loads)(data)


def decode(line: bytes | str) -> dict[str, Any]:
    """Parse and validate one line; raise MalformedEvent with the reason otherwise. The standard parser is
    the reference here: it accepts what the faster one may not (integers past 64 bits) and says why not."""
    try:
        event = _stdlib_loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedEvent(f"not JSON: {exc}") from None
    return validate(event)


def decode_many(lines: list[bytes]) -> list[Any] | None:
    """Parse many lines with one JSON call (as an array), with the faster parser when there is one; None
    when any line is not one JSON value, and the caller goes line by line (``decode``) to find which. Ranks
    write thousands of small lines: one call each was most of a reader's time."""
    try:
        values = batch_loads(b"[" + b",".join(lines) + b"]")
    except (ValueError, UnicodeDecodeError):
        return None
    return values if len(values) == len(lines) else None


_TYPE_NAMES = {int: "an integer", float: "a number", str: "a string", list: "a list", dict: "an object",
               bool: "true or false", type(None): "null"}
_MISSING = object()


def validate(event: Any) -> dict[str, Any]:
    """Check one parsed event; raise MalformedEvent with the reason otherwise."""
    if type(event) is not dict:
        raise MalformedEvent("not a JSON object")
    version = event.get("v")
    if version != WIRE_VERSION:
        raise MalformedEvent(f"unsupported wire version {version!r} (this ddptop reads {WIRE_VERSION})")
    event_type = event.get("type")
    checks = EVENT_FIELDS.get(event_type) if type(event_type) is str else None
    if checks is None:
        raise MalformedEvent(f"unknown event type {event_type!r}")
    for name, allowed, required in checks:
        value = event.get(name, _MISSING)
        if value is _MISSING:
            if required:
                raise MalformedEvent(f"{event_type} event without {name!r}")
        elif allowed is not None and type(value) not in allowed:
            wanted = " or ".join(sorted(_TYPE_NAMES[t] for t in allowed))
            raise MalformedEvent(f"{event_type}.{name} is not {wanted}")
    if event_type in ("samples", "collective"):
        samples = event["sec"]
        if samples and (not set(map(type, samples)) <= _NUMBERS or min(samples) < 0):
            raise MalformedEvent(f"{event_type}.sec is not a list of non-negative numbers")
        if event_type == "collective" and event["bytes"] <= 0:
            raise MalformedEvent("collective.bytes is not a positive integer")
    if event_type == "samples":
        if event["phase"] not in SAMPLE_PHASES:
            raise MalformedEvent(f"unknown phase {event['phase']!r}")
        for name, integers in STEP_LISTS:
            if name in event:
                _check_step_list(event, name, integers)
    return event


def _check_step_list(event: dict[str, Any], name: str, integers: bool) -> None:
    """A list beside ``sec``: one non-negative number (integer where ``integers``) per step."""
    values = event[name]
    if len(values) != len(event["sec"]):
        raise MalformedEvent(f"samples.{name} has {len(values)} values for {len(event['sec'])} steps")
    if values and (not set(map(type, values)) <= (_INT if integers else _NUMBERS) or min(values) < 0):
        kind = "integers" if integers else "numbers"
        raise MalformedEvent(f"samples.{name} is not a list of non-negative {kind}")


def open_private_append(path: str) -> int:
    """Open for appending, creating the file readable by its owner only."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)


class EventsUnwritable(Exception):
    """An events file that can no longer be written (a full disk, a quota, its directory read-only or gone):
    ``str()`` says so in words, ``errno`` is the OSError's."""

    def __init__(self, reason: str, error_number: int | None) -> None:
        super().__init__(reason)
        self.errno = error_number


# What a rank writes to stderr, before exiting, when its events file cannot be written: the one channel
# left to say why, as the file that would have said it is the one that failed.
UNWRITABLE_MARK = "ddptop: events not written: "


class EventWriter:
    """Appends one rank's events to its file; buffers and writes at most every ``flush_interval`` s.

    ``emit`` only appends to a list, so it is cheap enough to call between timed iterations; the caller
    decides when to ``flush`` (``last_flush`` tells when it last did). ``flush`` writes everything with one
    ``os.write`` per batch (whole lines, so a reader never sees half an event
    unless the process dies mid-write, which readers tolerate). A write that fails raises
    ``EventsUnwritable``, and so does every flush after it (``failed``): the file is not written again, so
    it never holds a gap.
    """

    def __init__(self, path: str, rank: int, flush_interval: float = 0.1) -> None:
        self.path = path
        self.rank = rank
        self.flush_interval = flush_interval
        self._fd = open_private_append(path)
        self._size = os.fstat(self._fd).st_size
        self._pending: list[bytes] = []
        self.last_flush = time.monotonic()
        self.failed: EventsUnwritable | None = None

    def emit(self, event_type: str, **fields: Any) -> None:
        self.emit_event(make_event(event_type, self.rank, **fields))

    def emit_event(self, event: dict[str, Any]) -> None:
        """Queue an event already made (``make_event``), e.g. one the caller also keeps in memory."""
        self._pending.append(encode(event))

    def flush(self, durable: bool = False) -> None:
        if self.failed is not None:
            self._pending.clear()
            raise self.failed
        try:
            if self._pending:
                data = b"".join(self._pending)
                self._pending.clear()
                storage.write_all(self._fd, data, self.path, self._size)
                self._size += len(data)
            if durable:
                os.fsync(self._fd)
        except OSError as exc:
            self.failed = EventsUnwritable(storage.describe_os_error(exc, self.path), exc.errno)
            raise self.failed from exc
        self.last_flush = time.monotonic()

    def close(self) -> None:
        """Write what is pending and close; a file that cannot take it is closed all the same (raising)."""
        if self._fd >= 0:
            try:
                self.flush(durable=True)
            finally:
                os.close(self._fd)
                self._fd = -1


@dataclass
class EventFileReader:
    """Tails one events file: each ``read_new`` returns the complete, valid events appended since last call.

    A trailing partial line is kept until its newline arrives. Malformed lines are skipped and counted
    (``malformed``), with the first reason kept for the user.

    Each read opens the path afresh (over NFS another client's appends show only on open) and keeps that file
    open until the next: when the path is gone (a run directory removed mid-run), what the writer had written
    is still read from it. ``close`` (or ``read_rest``, the last read) lets the file go.
    """

    path: str
    offset: int = 0
    malformed: int = 0
    first_problem: str | None = None
    _partial: bytes = field(default=b"", repr=False)
    _fd: int = field(default=-1, repr=False)  # the file as last opened

    def read_new(self) -> list[dict[str, Any]]:
        chunk = self._read_appended(self._reopen())
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
        self.close()
        return events

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def __del__(self) -> None:
        if getattr(self, "_fd", -1) >= 0:  # a reader dropped without close: its file is let go all the same
            self.close()

    def _reopen(self) -> int:
        """The path opened now, or the file opened last if the path is gone (-1 if it never existed)."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_CLOEXEC)
        except OSError as exc:
            if isinstance(exc, (FileNotFoundError, NotADirectoryError)) or exc.errno == errno.ESTALE:
                return self._fd  # gone (or, over NFS, removed by another client): what was written is still here
            if exc.errno in (errno.EMFILE, errno.ENFILE) and self._fd >= 0:
                return self._fd  # no descriptor to spare: read on from the file held (it may be all there is)
            raise
        self.close()
        self._fd = fd
        return fd

    def _read_appended(self, fd: int) -> bytes:
        if fd < 0:
            return b""
        chunks = []
        position = self.offset
        try:
            while chunk := os.pread(fd, READ_CHUNK, position):
                chunks.append(chunk)
                position += len(chunk)
        except OSError as exc:
            if exc.errno == errno.ESTALE and fd == self._fd:
                self.close()  # a stale handle reads nothing more: the next read opens the path afresh
            if not chunks and exc.errno != errno.ESTALE:
                raise  # an error that keeps coming is said, not taken for a quiet file
        return b"".join(chunks)  # what came before the error; the next read goes on from there

    def _decode_lines(self, lines: list[bytes]) -> list[dict[str, Any]]:
        lines = [line for line in lines if line.strip()]
        parsed = decode_many(lines)
        if parsed is not None:
            try:
                return [validate(event) for event in parsed]  # the usual case: every line is an event
            except MalformedEvent:
                pass  # go one by one, to keep the good ones and count the others
        events = []
        for index, line in enumerate(lines):
            try:
                events.append(validate(parsed[index]) if parsed is not None else decode(line))
            except MalformedEvent as exc:
                self.malformed += 1
                if self.first_problem is None:
                    self.first_problem = f"{self.path}: {exc}"
        return events
