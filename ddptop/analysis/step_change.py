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


def margin_words(min_effect: float) -> str:
    """The margin as a reader reads it: 0.02 -> '2%', 0.005 -> '0.5%'."""
    return f"{100 * min_effect:.3g}%"


def change_words(interval: list[float] | tuple[float, float] | None, min_effect: float, grew: str = "grew",
                 fell: str = "shrank", short: bool = False) -> str:
    """A ratio's change in words that follow its 95% interval against 1 and the margin (``classify_change``),
    the one place a verdict on a ratio is worded: ``grew`` only where the whole interval lies above
    1 + min_effect, ``fell`` only where it lies below 1 - min_effect, "within X%" only where it lies inside
    1 ± min_effect; anything else cannot be told from noise. ``short``: the word alone, for a table's cell."""
    margin = margin_words(min_effect)
    if not interval or None in interval:
        return "no interval" if short else "no interval to tell a change from noise"
    kind = classify_change(interval[0], interval[1], min_effect)
    if kind in (SLOWER, FASTER):
        word = grew if kind == SLOWER else fell
        return word if short else f"{word} beyond noise (by more than {margin})"
    if kind == EQUIVALENT:
        return f"within ±{margin}" if short else f"within {margin} of it"
    return "within noise" if short else f"whether it changed by more than {margin} cannot be told from noise"
