"""Speedup and efficiency while a sweep runs: a session's configurations fed to the scaling tables.

``ddptop.analysis.scaling.LiveScaling`` rebuilds the tables only when their inputs changed; here each
configuration's entry is rebuilt only when its revision or status moved, read under the session's lock, so
a frame with nothing new costs a look at a few counters. The rows come out as the summary's own
``ScalingRow`` records (``ddptop.report.schema``), made again only when the tables were.
"""

from __future__ import annotations

import weakref
from typing import Any

from ddptop.analysis import communication, gradient_noise
from ddptop.analysis.scaling import LiveScaling
from ddptop.protocol.vocab import FAILED
from ddptop.report.schema import ScalingRow
from ddptop.run.config_state import ConfigState
from ddptop.run.session import Session


def live_entry(state: ConfigState) -> dict[str, Any]:
    """What the scaling tables read of one configuration while it runs: its spec, running percentiles
    (p50 is exact, as in the saved summary), gradient size and communication figures."""
    entry = state.spec.to_json()
    entry.update(
        {
            "config_id": state.spec.config_id,
            "label": state.spec.label,
            "stats": state.summary(),
            "grad_bytes": state.info.get("grad_bytes"),
            "params": state.info.get("params"),
        }
    )
    if not state.spec.kind.own_batch:
        # a user's script chose its batch (0 in its spec): the one it drew, as the summary takes it; not in the
        # tables until a step's examples were counted
        batch = state.observed_batch()
        if batch is None:
            entry["stats"] = None
        else:
            entry.update(batch_size=batch.per_rank, global_batch=batch.global_batch)
    if entry["stats"] is not None:
        entry["communication"] = communication.config_communication(state, entry)
    entry["b_noise_so_far"] = gradient_noise.so_far(state.comm, state.step_values, state.spec.world_size)
    return entry


class SessionScaling:
    """The scaling rows of one session's configurations that have not failed (see the module)."""

    def __init__(self, session: Session) -> None:
        # weakly: the session-wide cache below maps a session to this object, which must not keep it alive
        self._session = weakref.ref(session)
        self.scaling = LiveScaling(session.plan)
        self._entries: dict[str, tuple[int, str, dict[str, Any]]] = {}  # config id -> (revision, status, entry)
        self._made_from: dict[str, dict[str, Any]] | None = None  # the tables' rows the typed ones were made of
        self._rows: dict[str, ScalingRow] = {}

    @property
    def tables(self) -> list[dict[str, Any]]:
        return self.scaling.tables

    def rows(self) -> dict[str, ScalingRow]:
        session = self._session()
        if session is None:
            return {}
        with session.lock:
            entries = [self._entry(state) for state in session.ordered_states() if state.status not in FAILED]
        found = self.scaling.rows(entries)
        if found is not self._made_from:  # the tables were rebuilt
            self._made_from = found
            self._rows = {config_id: ScalingRow.from_json(row) for config_id, row in found.items()}
        return self._rows

    def noise_so_far(self) -> dict[str, float]:
        """Each configuration's gradient noise scale so far (``gradient_noise.so_far``), where there is one: from
        the entries the last ``rows`` made."""
        return {config_id: entry["b_noise_so_far"] for config_id, (_, _, entry) in self._entries.items()
                if entry.get("b_noise_so_far") is not None}

    def _entry(self, state: ConfigState) -> dict[str, Any]:
        config_id = state.spec.config_id
        known = self._entries.get(config_id)
        if known is not None and known[0] == state.revision and known[1] == state.status:
            return known[2]
        entry = live_entry(state)
        self._entries[config_id] = (state.revision, state.status, entry)
        return entry


_LIVE: weakref.WeakKeyDictionary[Session, SessionScaling] = weakref.WeakKeyDictionary()


def live_scaling(session: Session) -> dict[str, ScalingRow]:
    """Speedup and efficiency so far, per configuration id, from the configurations with samples.

    Each session has one ``SessionScaling``, kept as long as the session lives: repeated looks at an
    unchanged run return the same dict without recomputing. Call it from one thread at a time.
    """
    return _session_scaling(session).rows()


def live_noise(session: Session) -> dict[str, float]:
    """The gradient noise scale so far, per configuration id, as of the last ``live_scaling``."""
    return _session_scaling(session).noise_so_far()


def _session_scaling(session: Session) -> SessionScaling:
    cache = _LIVE.get(session)
    if cache is None or cache.scaling.plan is not session.plan:
        cache = _LIVE[session] = SessionScaling(session)
    return cache
