"""Writing the run directory's bytes, and saying in words why a write failed.

Every file ddptop and the ranks write goes through ``write_all``: the files written whole (``write_atomic``,
``write_json``: summaries, plan.json, launch.json) and the appended event files (``wire.EventWriter``). That
one place also holds a testing aid, like ``--inject``: a full disk or an exhausted quota injected exactly
where a real one stops a write, ``os.write`` raising ENOSPC part-way through.

    DDPTOP_FAULT_DISK_FULL=PATTERN        a path prefix, or a glob (``*/events/rank-1.jsonl``) on the
                                          absolute path: the files it names run out of space
    DDPTOP_FAULT_DISK_FULL_AFTER=BYTES    once the file holds this many bytes (default: half-way through
                                          the write that would finish it)
    DDPTOP_FAULT_DISK_ERROR=EROFS         the error instead of ENOSPC (EDQUOT: a quota, EROFS: the
                                          filesystem remounted read-only)
    DDPTOP_FAULT_DISK_FROM=PATH           only once PATH exists (a test creates it mid-run)
    DDPTOP_FAULT_SLOW_WRITE=SECONDS       every write stalls this long first, as on an NFS or Lustre
    DDPTOP_FAULT_SLOW_WRITE_PATTERN=GLOB  server under load (default: every file; ``*/events/*``: the ranks')

The ranks inherit the environment, so one variable reaches every process of a run.
"""

from __future__ import annotations

import contextlib
import errno
import fnmatch
import json
import os
import time
from typing import Any

DISK_FULL_ENV = "DDPTOP_FAULT_DISK_FULL"
DISK_FULL_AFTER_ENV = "DDPTOP_FAULT_DISK_FULL_AFTER"
DISK_ERROR_ENV = "DDPTOP_FAULT_DISK_ERROR"
DISK_FROM_ENV = "DDPTOP_FAULT_DISK_FROM"
SLOW_WRITE_ENV = "DDPTOP_FAULT_SLOW_WRITE"
SLOW_WRITE_PATTERN_ENV = "DDPTOP_FAULT_SLOW_WRITE_PATTERN"

_WORDS = {
    errno.ENOSPC: "no space left on device",
    errno.EDQUOT: "disk quota exceeded",
    errno.EROFS: "read-only filesystem",
    errno.ENOENT: "directory no longer exists",
    errno.EACCES: "permission denied",
    errno.EIO: "input/output error",
}


def _names(pattern: str, path: str) -> bool:
    """A glob on the absolute path, or a plain path prefix."""
    where = os.path.abspath(path)
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatchcase(where, pattern)
    return where.startswith(os.path.abspath(pattern))


def _injected_limit(path: str, size_after: int) -> int | None:
    """The size at which the injected full disk stops this file, or None where no fault is injected."""
    pattern = os.environ.get(DISK_FULL_ENV)
    if not pattern or not _names(pattern, path):
        return None
    trigger = os.environ.get(DISK_FROM_ENV)
    if trigger and not os.path.exists(trigger):
        return None
    after = os.environ.get(DISK_FULL_AFTER_ENV, "")
    return int(after) if after.isdigit() else size_after // 2


def write_all(fd: int, data: bytes, path: str, size_before: int = 0) -> None:
    """Write all of ``data`` to ``fd`` (a file of ``size_before`` bytes, named ``path`` in errors); an
    OSError names ``path``."""
    stall = os.environ.get(SLOW_WRITE_ENV)
    if stall and _names(os.environ.get(SLOW_WRITE_PATTERN_ENV) or "/", path):
        time.sleep(float(stall))
    view = memoryview(data)
    size = size_before
    limit = _injected_limit(path, size_before + len(data))
    while view:
        chunk = view
        if limit is not None and size + len(view) > limit:
            if size >= limit:
                code = getattr(errno, os.environ.get(DISK_ERROR_ENV) or "ENOSPC", errno.ENOSPC)
                raise OSError(code, os.strerror(code), path)
            chunk = view[: limit - size]
        try:
            count = os.write(fd, chunk)
        except OSError as exc:
            if exc.filename is None:
                exc.filename = path  # os.write's error names no file: the one being written
            raise
        size += count
        view = view[count:]


def write_atomic(path: str, data: str | bytes) -> None:
    """Write ``path`` whole or not at all: a temporary file beside it (0600), synced, then renamed over it, so a
    reader never sees half a summary. On any failure (a full disk, a quota, a directory gone or read-only) the
    temporary file is removed and the OSError raised naming ``path``, the old file (if any) untouched."""
    payload = data.encode() if isinstance(data, str) else data
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            write_all(fd, payload, path)
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        exc.filename = path
        raise


def write_json(path: str, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


# Errors that no later write in the same directory escapes: the sweep stops rather than fail every launch.
LASTING = (errno.EROFS, errno.ENOENT, errno.EACCES)


def lasting(reason: str) -> bool:
    """Whether a ``describe_os_error`` reason is one of the ``LASTING`` errors."""
    return any(reason.startswith(_WORDS[code] + " ") for code in LASTING)


def shown_name(path: str) -> str:
    """A run-directory file as a user finds it: ``summary.json``, ``events/rank-1.jsonl``."""
    parent = os.path.basename(os.path.dirname(path))
    name = os.path.basename(path)
    return f"{parent}/{name}" if parent == "events" else name


def describe_os_error(exc: OSError, path: str) -> str:
    """``no space left on device writing summary.json`` and the like, for one line."""
    words = _WORDS.get(exc.errno or 0, (exc.strerror or str(exc)).lower())
    return f"{words} writing {shown_name(path)}"


NEARLY_FULL_BYTES = 1 << 20  # free space under this, after a launch failed, is a full disk that a few freed pages hid


def storage_problem(directory: str) -> str | None:
    """Whether a small file can be written in ``directory`` now: None, or why not (``no space left on
    device writing events/``). A disk that filled up, then got a few pages back (a writer that failed
    removed its partial file), takes the probe yet is still full: under ``NEARLY_FULL_BYTES`` free, it is
    said so, with what is free, for the rank that could not even write its own error."""
    probe = os.path.join(directory, f".space-probe-{os.getpid()}")
    try:
        write_atomic(probe, b"\0" * 4096)
    except OSError as exc:
        return describe_os_error(exc, directory) + "/"
    with contextlib.suppress(OSError):
        os.unlink(probe)
    try:
        stat = os.statvfs(directory)
    except OSError:
        return None
    # root may write into the blocks a filesystem keeps for it (ext4's 5%): what it can still write is f_bfree
    free = (stat.f_bfree if os.geteuid() == 0 else stat.f_bavail) * stat.f_frsize
    if free < NEARLY_FULL_BYTES:
        return (f"no space left on device writing {shown_name(directory.rstrip(os.sep))}/ "
                f"({free // 1024} KiB free there after the launch failed)")
    return None
