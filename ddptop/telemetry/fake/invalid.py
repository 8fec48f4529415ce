"""What both readers of a simulated node's description raise (a profile, ``nodes``; a recorded report,
``recorded``) for a value that cannot be right."""

from __future__ import annotations


class InvalidEntry(ValueError):
    """A value of a simulated node's description that cannot be right; the message starts with its place
    (``gpus[2].pcie``)."""
