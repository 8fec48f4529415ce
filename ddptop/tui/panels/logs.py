"""The newest launch's torchrun output and each local rank's stderr (read by the control once a second)."""

from __future__ import annotations

from textual.widgets import Log

from ddptop.control import LOG_LINES
from ddptop.run.snapshot import RunSnapshot
from ddptop.tui import format as fmt


class LogPanel(Log):
    def __init__(self, **kwargs) -> None:
        super().__init__(max_lines=LOG_LINES, **kwargs)
        self._shown: tuple[str, ...] = ()

    def update_from(self, snapshot: RunSnapshot) -> None:
        if snapshot.logs is None or snapshot.logs == self._shown:
            return
        self._shown = snapshot.logs
        self.clear()
        self.write_lines([fmt.ascii_of(line) for line in snapshot.logs] if fmt.ASCII else snapshot.logs)
