"""The key footer, made to fit the terminal: narrow SSH windows are common, and a key cut off is a key lost."""

from __future__ import annotations

from textual import events
from textual.app import ComposeResult
from textual.widgets import Footer

# the palette's key at the right: "^p palette", its padding and the rule before it
PALETTE_WIDTH = 12


class FittingFooter(Footer):
    """Textual's footer at its usual spacing where every key fits; compact (one space between keys) where
    they do not; and, where even that does not fit, without the palette's key (ctrl+p, which the help names)."""

    def fit(self, width: int) -> tuple[bool, bool]:
        """(compact, show the palette's key) for ``width`` columns and the screen's shown keys."""
        shown = {}
        for _, binding, _, _ in self.screen.active_bindings.values():
            if binding.show:  # one entry per action, as the footer shows them
                shown.setdefault(binding.action, (len(self.app.get_key_display(binding)), len(binding.description)))
        roomy = sum(key + description + 3 for key, description in shown.values())  # " q Quit "
        tight = sum(key + description + 2 for key, description in shown.values())  # "q Quit" and a space
        compact = roomy + PALETTE_WIDTH > width
        return compact, (tight if compact else roomy) + PALETTE_WIDTH <= width

    def _apply_fit(self) -> bool:
        """Set the spacing for the present width; whether it changed."""
        width = self.size.width or self.app.size.width
        compact, palette = self.fit(width)
        changed = (compact, palette) != (self.compact, self.show_command_palette)
        self.set_reactive(Footer.compact, compact)
        self.set_class(compact, "-compact")
        self.set_reactive(Footer.show_command_palette, palette)
        return changed

    def compose(self) -> ComposeResult:
        if self._bindings_ready:
            self._apply_fit()
        yield from super().compose()

    def on_resize(self, event: events.Resize) -> None:
        if self._bindings_ready and self._apply_fit():
            self.call_after_refresh(self.recompose)
