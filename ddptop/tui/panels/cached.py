"""A Static redrawn only when its content changes, and laid out again only when its height does."""

from __future__ import annotations

from typing import Any

from textual.widgets import Static


class CachedStatic(Static):
    _shown: Any = None

    def show_content(self, content: Any) -> None:
        """A layout pass costs more than the redraw itself: skip it while the number of lines stays."""
        previous = self._shown
        if previous == content:
            return
        self._shown = content
        relayout = previous is None or str(previous).count("\n") != str(content).count("\n")
        self.update(content, layout=relayout)
