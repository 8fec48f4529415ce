"""When a running launch is hung: the sweep asks ``HangWatch.silent_for`` at every poll, which looks at the
sizes and times of the ranks' events files, and reads a file's last line only once the launch has been silent
past the timeout (whether its rank is setting up a configuration, which is given the startup grace)."""

from __future__ import annotations

import json
import os
import time

from ddptop.protocol import layout
from ddptop.run import rundir

STARTUP_GRACE = 120.0  # seconds a launch may take to start (import torch, form the group) before a hang


class HangWatch:
    """A launch is hung when no rank has written an event for ``timeout`` seconds (ranks flush between steps,
    so a stuck collective or a step longer than the timeout looks the same: say both). Until the first event
    the launch is starting (importing torch on a busy node, forming the group) and gets at least
    STARTUP_GRACE seconds, as does a rank whose last word is that it is setting up a configuration (building
    a large model, compiling its first step), which streams nothing for as long as it takes."""

    def __init__(self, events_dir: str, timeout: float, startup: float = STARTUP_GRACE) -> None:
        self.events_dir = events_dir
        self.timeout = timeout
        self.startup = startup
        self.started = time.time()
        self.last: dict[str, float] = {}
        self.stamps: dict[str, tuple[int, int]] = {}  # per events file: (mtime_ns, size) at the last look
        self._setup: dict[str, tuple[tuple[int, int], bool]] = {}  # per file: its stamp when read, a setup last?

    def silent_for(self) -> float | None:
        try:
            names = [n for n in os.listdir(self.events_dir) if layout.rank_of_events_file(n) is not None]
        except FileNotFoundError:
            names = []
        for name in names:
            try:
                info = os.stat(os.path.join(self.events_dir, name))
            except FileNotFoundError:
                continue
            if info.st_size > 0:  # the file exists from the rank's start; its first event comes later
                self.last[name] = info.st_mtime
                self.stamps[name] = (info.st_mtime_ns, info.st_size)
        if not self.last:
            silent, limit = time.time() - self.started, max(self.timeout, self.startup)
        else:
            silent, limit = time.time() - max(self.last.values()), self.timeout
            if silent >= limit and self.setting_up():
                limit = max(self.timeout, self.startup)
        return silent if silent >= limit else None

    def setting_up(self) -> bool:
        """Whether a rank's last event says it is setting up a configuration. Asked only once a launch has been
        silent past the timeout, never on the polls of one that streams; a file is read again only when it
        changed (its mtime_ns and size: two writes can share a clock tick)."""
        for name, stamp in self.stamps.items():
            if name not in self._setup or self._setup[name][0] != stamp:
                self._setup[name] = (stamp, _last_is_setup(os.path.join(self.events_dir, name)))
        return any(setup for _, setup in self._setup.values())

    def reason(self, silent: float, script_without_step: bool = False) -> str:
        """Why the launch is taken for hung. ``script_without_step``: the configuration is a user's script
        (``bench_kernels.script_probe``) that no rank has ended a training step of yet: the reason says how
        ddptop tells a step, as the likeliest cause is a step it cannot see."""
        if script_without_step and self.last:
            return self._no_script_step(silent)
        if not self.last:
            return (
                f"hang: no rank started within {silent:.0f} s (stuck importing torch or forming the group? "
                "on several nodes: did every node start ddptop?)"
            )
        heard = ", ".join(
            f"{name.removesuffix(layout.EVENTS_SUFFIX)} {time.time() - t:.0f} s ago"
            for name, t in sorted(self.last.items())
        )
        if self.setting_up():
            return (f"hang: no event from any rank for {silent:.0f} s while setting up a configuration (building "
                    f"the model or compiling its first step; at least {max(self.timeout, self.startup):g} s "
                    f"allowed); last heard: {heard}")
        return (
            f"hang: no event from any rank for {silent:.0f} s (--hang-timeout {self.timeout:g}); last heard: "
            f"{heard}. A rank is stuck (in a collective?) or one step takes longer than the timeout"
        )


    def _no_script_step(self, silent: float) -> str:
        heard = ", ".join(
            f"{name.removesuffix(layout.EVENTS_SUFFIX)} {time.time() - t:.0f} s ago"
            for name, t in sorted(self.last.items())
        )
        allowed = (f"its setup allowed at least {max(self.timeout, self.startup):g} s" if self.setting_up()
                   else f"--hang-timeout {self.timeout:g}, once it drew a batch")
        return (f"hang: no training step seen from the script in {silent:.0f} s ({allowed}): ddptop ends a step at "
                "torch.optim's optimizer step post-hook (Optimizer.step); a script that updates its weights "
                "otherwise marks its steps with ddptop_probe.step (explicit mode, docs/scripts.md); one that trains "
                "in processes of its own (torch.multiprocessing.spawn) is out of the probe's sight; or it is stuck "
                f"before its first step; last heard: {heard}")


def _last_is_setup(path: str) -> bool:
    """Whether the events file's last whole line is a setup heartbeat: a rank building a configuration."""
    last = rundir.tail_lines(path, 1, max_bytes=4096)
    if not last or '"setup":true' not in last[0]:
        return False
    try:
        event = json.loads(last[0])
    except ValueError:  # the line being written as it was read
        return False
    return event.get("type") == "heartbeat" and event.get("setup") is True
