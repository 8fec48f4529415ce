"""How long the running configuration and the rest of the sweep still take, projected from what ran.

A configuration's time left is its time so far scaled by its progress (warm-up and measured steps against
the plan, or against the kernel's own projection with ``--iters auto``), so it follows the measured step
rate. The sweep's adds, for each configuration still pending, the mean wall time per ended configuration so
far, launching and tearing down included. Both are estimates and are shown with "~"; neither is given
before it has something to go on.
"""

from __future__ import annotations

from ddptop.protocol.vocab import ENDED, Status
from ddptop.run.snapshot import ConfigSnapshot, SessionSnapshot

MIN_PROGRESS = 0.05  # below this, a projection from the first steps (warm-up, compilation) misleads


def config_remaining(config: ConfigSnapshot, now: float) -> float | None:
    """Seconds the running configuration still needs, or None (not running, or too early to say)."""
    if config.status != Status.RUNNING or config.started_t is None or config.progress < MIN_PROGRESS:
        return None
    return max(0.0, (now - config.started_t) * (1.0 - config.progress) / config.progress)


def sweep_remaining(session: SessionSnapshot, now: float) -> float | None:
    """Seconds the sweep still needs, or None until a configuration has ended (and the running one can be
    projected)."""
    ended = [c for c in session.configs if c.status in ENDED and c.ended_t is not None]
    pending = sum(1 for c in session.configs if c.status == Status.PENDING)
    running = session.running()
    current = config_remaining(running, now) if running is not None else 0.0
    if current is None:
        return None
    if not pending:
        return current
    if not ended:
        return None
    per_config = (max(c.ended_t for c in ended) - session.started_t) / len(ended)  # type: ignore[type-var]
    return current + pending * max(0.0, per_config)
