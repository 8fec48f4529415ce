"""A Static redrawn only when its content changes, laid out again only when its height does."""

from __future__ import annotations

from typing import Any

from rich.text import Text
from textual.widgets import Static

from ddptop.tui import format as fmt


class CachedStatic(Static):
    """Its height is the lines its content wraps to at its width, set here rather than left to ``height:
    auto``: a longer line can need one more line without a newline more, and a layout skipped for speed
    would then cut it."""

    _shown: Any = None
    _shown_height: int | None = None

    def show_content(self, content: Any) -> None:
        if fmt.ASCII:
            content = fmt.ascii_text(content)
        if self._shown == content:
            return
        self._shown = content
        self.update(content, layout=False)
        self._fit_height()

    def _fit_height(self) -> None:
        width = self.content_region.width
        if width <= 0:
            return  # not laid out yet: on_resize fits it
        if isinstance(self._shown, Text):
            height = len(self._shown.wrap(self.app.console, width))
        else:
            height = str(self._shown).count("\n") + 1
        height += self.styles.gutter.height
        if height != self._shown_height:
            self._shown_height = height
            self.styles.height = height  # a layout, only now

    def on_resize(self) -> None:
        self._fit_height()
