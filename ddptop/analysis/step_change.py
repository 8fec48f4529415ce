"""How a change in step time is called, in plain Python: the words, the margin and the interval of a ratio's
inverse. The report blocks and ``ddptop diff`` use them without loading numpy; ``uncertainty`` computes the
intervals they are applied to."""

from __future__ import annotations

SLOWER, FASTER, WITHIN_NOISE, EQUIVALENT = "slower", "faster", "within noise", "equivalent"
NOT_COMPARABLE = "not comparable"  # one side has no steps to compare
DEFAULT_MIN_EFFECT = 0.02  # a change smaller than 2% is not called, however sure


def classify_change(low: float, high: float, min_effect: float) -> str:
    """What a step-time ratio's interval [low, high] (above 1: slower) says of the change: slower or faster
    only when the interval lies beyond the margin; inside it: equivalent; across it: within noise."""
    if low > 1 + min_effect:
        return SLOWER
    if high < 1 - min_effect:
        return FASTER
    if low >= 1 - min_effect and high <= 1 + min_effect:
        return EQUIVALENT
    return WITHIN_NOISE


def inverse(interval: list[float] | None) -> list[float] | None:
    """The interval of 1/x from x's (both ends positive): a step-time ratio's as a speedup's."""
    return [1 / interval[1], 1 / interval[0]] if interval and interval[0] > 0 else None
