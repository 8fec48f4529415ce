"""Two test workers (pytest-xdist, ``-n 2`` in pyproject.toml) on a machine of two cores, without one test
disturbing what another measures.

A test that launches process groups (marked ``slow``) or measures CPU or time itself (marked ``alone``) runs
with no other test beside it: ddptop judges every launch against the load of other processes, and a
neighbouring test would mark launches disturbed and make them run again. Every other test shares the cores.
The rule is a readers-writer lock over two files every worker opens (``flock``): a quick test holds the
``cores`` file shared; a test that runs alone first takes the ``turn`` file, so that no quick test starts
after it asked, then waits for the ``cores`` file to itself. Without xdist (one process, ``-n 0``) tests run
one at a time anyway and nothing is locked.

The tests that run alone are collected last and sent to one worker as one group (``xdist_group``): the two
workers share the quick tests first, then one runs the rest in order, so a sweep shared by several tests
(``cpu_sweep``, a module's fixture) runs once.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator

import pytest

ALONE_MARKERS = ("slow", "alone")
GROUP = "alone"


def runs_alone(item: pytest.Item) -> bool:
    return any(item.get_closest_marker(name) is not None for name in ALONE_MARKERS)


def order_and_group(items: list[pytest.Item]) -> None:
    """The tests that run alone after the others (a stable sort keeps each part's order), in one group."""
    items.sort(key=runs_alone)
    for item in items:
        if runs_alone(item):
            item.add_marker(pytest.mark.xdist_group(GROUP))


class CoreShare:
    """The lock of one test run's workers."""

    def __init__(self, base: str) -> None:
        self._turn = open(base + ".turn", "a+")  # noqa: SIM115 - held for the worker's life
        self._cores = open(base + ".cores", "a+")  # noqa: SIM115

    @classmethod
    def for_worker(cls, config: pytest.Config) -> CoreShare | None:
        """The lock in the run's own temporary directory (xdist gives each worker ``<basetemp>/<worker id>``),
        which pytest removes with the run's other old directories; None in a run without workers."""
        if not hasattr(config, "workerinput") or not config.option.basetemp:
            return None
        return cls(os.path.join(os.path.dirname(os.path.abspath(config.option.basetemp)), "cores"))

    @contextlib.contextmanager
    def held(self, alone: bool) -> Iterator[None]:
        if alone:
            fcntl.flock(self._turn, fcntl.LOCK_EX)  # no quick test starts from now on...
            fcntl.flock(self._cores, fcntl.LOCK_EX)  # ...and the ones running end
            try:
                yield
            finally:
                fcntl.flock(self._cores, fcntl.LOCK_UN)
                fcntl.flock(self._turn, fcntl.LOCK_UN)
        else:
            fcntl.flock(self._turn, fcntl.LOCK_SH)  # waits while a test that runs alone waits or runs
            fcntl.flock(self._cores, fcntl.LOCK_SH)
            fcntl.flock(self._turn, fcntl.LOCK_UN)
            try:
                yield
            finally:
                fcntl.flock(self._cores, fcntl.LOCK_UN)
