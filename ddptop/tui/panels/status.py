"""The status line: configurations done, elapsed time, what runs and the time left (``ddptop.run.eta``), who
writes a watched run."""

from __future__ import annotations

import time

from rich.text import Text

from ddptop.run import eta
from ddptop.protocol.vocab import ENDED as CONFIG_ENDED
from ddptop.run.snapshot import ConfigSnapshot, RunPhase, RunSnapshot
from ddptop.tui import format as fmt
from ddptop.tui.panels.cached import CachedStatic


class StatusLine(CachedStatic):
    def starting(self, configurations: int, what: str) -> None:
        """The first frame's line, drawn before the first snapshot has been read."""
        self.show_content(Text(f"0/{configurations} configurations  ·  {what}"))

    def update_from(self, snapshot: RunSnapshot, paused: bool = False) -> None:
        session = snapshot.session
        configs = session.configs
        done = sum(1 for c in configs if c.status in CONFIG_ENDED)
        running = session.running()
        if session.ended_t is not None:
            end = session.ended_t
        elif snapshot.phase == RunPhase.WRITER_GONE:  # nothing more will come: the run stopped at its last event
            end = session.last_event_t or session.started_t
        else:
            end = time.time()
        elapsed = max(0.0, end - session.started_t)
        parts = [f"{done}/{len(configs)} configurations", f"elapsed {fmt.duration(elapsed)}"]
        going = snapshot.going
        analysing = session.analysing() if going else None
        command_at = None
        if running is not None and not (running.analysing and going):  # a script tracing: said as analysing
            left = eta.config_remaining(running, end) if going else None
            if running.script is not None and running.script.command:  # a user's script: what it runs
                command_at = len(parts)
            parts.append(f"running {running.heading}" + (f", ~{fmt.duration(left)} left" if left is not None else ""))
        elif analysing is not None:
            parts.append(f"analysing {analysing.heading}: {analysing.analysis_phase}")
        elif snapshot.phase == RunPhase.ENDED:
            parts.append("finished")
        sweep_left = eta.sweep_remaining(session, end) if going else None
        if sweep_left is not None:
            parts.append(f"sweep ~{fmt.duration(sweep_left)} left")
        if not snapshot.live:
            if snapshot.phase == RunPhase.FINISHED:
                parts.append("finished")
            elif snapshot.phase == RunPhase.WRITER_GONE:
                parts.append(f"the ddptop running this sweep ({snapshot.who}) is gone: no more data")
            else:
                parts.append(f"watching {snapshot.who}")
        if paused:
            parts.append("PAUSED (display only; the sweep goes on)")
        if command_at is not None and running is not None and running.script is not None:
            parts[command_at] = self._with_command(parts, command_at, running)
        text = Text("  ·  ".join(parts))
        for problem in snapshot.not_saved:  # a full disk: what the run directory no longer receives
            text.append(f"   {problem} (kept in memory)", style="bold red")
        if snapshot.telemetry.info.get("fake"):
            text.append("   FAKE GPUs (DDPTOP_FAKE_NVML)", style="bold magenta")
        self.show_content(text)

    def _with_command(self, parts: list[str], at: int, running: ConfigSnapshot) -> str:
        """The running part with the script's command in place of its file's name, cut to half the line's width
        (the line wraps: the rest of it stays whole)."""
        assert running.script is not None
        name = f"running {running.heading}"
        command = running.script.command_text(max(12, (self.size.width or 80) // 2))
        return parts[at].replace(name, f"running {running.label} {command}", 1)
