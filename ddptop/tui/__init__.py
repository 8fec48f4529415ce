"""The Textual frontend: a thin view over the core (``ddptop.control``'s snapshots and commands).

``app`` (the live view and the summary app), ``screens`` (help, summary), ``panels`` (one module per
panel), ``lines`` and ``format`` (tables, cells, charts), ``ascii`` (--ascii); the CSS is in ``*.tcss``.
"""

__all__ = ["app", "ascii", "footer", "format", "lines", "panels", "screens", "summary_check", "view_failure"]
