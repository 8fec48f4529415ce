"""The tensors of a batch, whatever its shape: a tensor, or tensors inside dicts, lists, tuples, namedtuples and
dataclasses. The kernel's sources and a user's script under the probe both walk batches so; torch is imported
only when a batch is walked, and nothing else is, so the probe in the user's process loads no more than it uses.
"""

from __future__ import annotations

from typing import Any


def batch_tensors(batch: Any) -> list[Any]:
    """Every tensor of a batch: a tensor, or one inside dicts, lists and tuples (a dataclass's fields too)."""
    import torch

    found: list[Any] = []

    def walk(value: Any) -> None:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, dict):
            for item in value.values():
                walk(item)
        elif isinstance(value, (list, tuple)):
            for item in value:
                walk(item)
        elif hasattr(value, "__dataclass_fields__"):
            for name in value.__dataclass_fields__:
                walk(getattr(value, name))

    walk(batch)
    return found


def map_tensors(batch: Any, change: Any) -> Any:
    """The batch with ``change`` applied to every tensor in it, its containers rebuilt alike."""
    import torch

    if isinstance(batch, torch.Tensor):
        return change(batch)
    if isinstance(batch, dict):
        return type(batch)((k, map_tensors(v, change)) for k, v in batch.items())
    if isinstance(batch, tuple) and hasattr(batch, "_fields"):  # a namedtuple
        return type(batch)(*(map_tensors(v, change) for v in batch))
    if isinstance(batch, (list, tuple)):
        return type(batch)(map_tensors(v, change) for v in batch)
    return batch
