"""The live view's word on whether a configuration ran on a quiet node: the summary's verdict, or "so far".

A configuration is judged over its measured steps, never its warm-up: while they run, over the readings since
they began (``ConfigState.measure_started_t``), marked ``so_far``; once its window has closed (it ended, and
the node's reading after the window is in, or the sweep ended), by the summary's own rule over the summary's
own window (``report.quiet.judge``) on the same telemetry records, so the mark the view leaves on it is the
summary's. The records of each configuration followed here are kept from its start until it is judged (the
telemetry sources keep only their last few hundred); those of a configuration this view never saw start
are not all here, and it keeps whatever it was shown so far, still "so far".
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from typing import Any

from ddptop.protocol.vocab import ENDED, Status
from ddptop.report import quiet
from ddptop.run.session import Session
from ddptop.run.snapshot import ValiditySoFar
from ddptop.telemetry.validity import ValidityAccumulator


class LiveValidity:
    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []  # oldest first: from the earliest start still to be judged
        self.shown: dict[str, ValiditySoFar] = {}  # config id -> what the view shows of it
        self._fresh: list[dict[str, Any]] = []  # records added since the last update
        self._followed: dict[str, float] = {}  # config id -> its start, for those seen running and not yet judged
        self._running: tuple[tuple[str, str | None, float], ValidityAccumulator] | None = None
        self._readings = -1  # the running window's readings when it was last judged

    def add(self, records: Iterable[dict[str, Any]]) -> None:
        """The telemetry records a source holds now, oldest first: those newer than the last kept are kept."""
        last = self.records[-1]["t"] if self.records else None
        new = []
        for record in reversed(list(records)):  # the new ones are at the end: read back to the last kept
            t = record.get("t")
            if last is not None and isinstance(t, (int, float)) and t <= last:
                break
            if isinstance(t, (int, float)):
                new.append(record)
        new.reverse()
        self.records += new
        self._fresh += new

    def update(self, session: Session, info: dict[str, Any] | None, rank_pids: Collection[int]) -> dict[str, ValiditySoFar]:
        """What the view shows of each configuration it judged, with the records added since the last call."""
        fresh, self._fresh = self._fresh, []
        with session.lock:
            for config_id in list(self._followed):
                state = session.configs.get(config_id)
                if state is not None and state.status in ENDED:
                    self._close(config_id, state, session, info, rank_pids)
            running = session.configs.get(session.measuring() or "")
            if running is not None and running.status == Status.RUNNING and running.started_t is not None:
                self._followed.setdefault(running.spec.config_id, running.started_t)
                self._so_far(running, fresh, info, rank_pids)
        self._forget_old()
        return self.shown

    def _so_far(self, state: Any, fresh: list[dict[str, Any]], info: dict[str, Any] | None,
                rank_pids: Collection[int]) -> None:
        """The running configuration over its measured steps so far, in the launch measuring it now (a further
        launch, after a disturbed one, starts afresh); nothing while it warms up."""
        config_id = state.spec.config_id
        start = state.measure_started_t.get(state.launch)
        if start is None:
            self.shown.pop(config_id, None)
            return
        key = (config_id, state.launch, start)
        if self._running is None or self._running[0] != key:
            accumulator = ValidityAccumulator(start, None, state.launch, info, rank_pids)
            self._running, self._readings = (key, accumulator.add_all(self.records)), -1
        else:
            accumulator = self._running[1].add_all(fresh)
        new_ranks = set(rank_pids) - accumulator.rank_pids  # a hello read since: its process was never a stranger
        accumulator.rank_pids |= new_ranks
        if accumulator.readings != self._readings or new_ranks or config_id not in self.shown:
            self._readings = accumulator.readings
            found = accumulator.result()
            self.shown[config_id] = ValiditySoFar(bool(found["disturbed"]), tuple(found["reasons"]), so_far=True)

    def _close(self, config_id: str, state: Any, session: Session, info: dict[str, Any] | None,
               rank_pids: Collection[int]) -> None:
        """An ended configuration judged as the summary judges it, once the readings of its window are all in."""
        if not self.records:
            return
        last_t = self.records[-1]["t"]
        judged = quiet.judge(state, state.status, self.records, info, rank_pids, last_t)
        if judged.window is not None and last_t <= judged.window[1] and session.ended_t is None:
            return  # the reading after the window is still to come (the summary's, a window shorter than an interval)
        del self._followed[config_id]
        if self._running is not None and self._running[0][0] == config_id:
            self._running = None
        if judged.window is None or judged.validity is None or self.records[0]["t"] > judged.window[0]:
            return  # nothing measured, or its window began before the readings kept here: it stays as shown
        found = judged.validity
        self.shown[config_id] = ValiditySoFar(bool(found["disturbed"]), tuple(found["reasons"]))

    def _forget_old(self) -> None:
        """Keep the records from the earliest start still to be judged (and the one before it, where an Xid
        list or an ECC count stood); with none to judge, the newest alone."""
        if not self.records:
            return
        needed = min(self._followed.values(), default=self.records[-1]["t"])
        keep_from = 0
        for index, record in enumerate(self.records):
            if record["t"] >= needed:
                break
            keep_from = index
        if keep_from:
            del self.records[:keep_from]
