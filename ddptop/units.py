"""Numbers as text, one way each: the report, the diff, ``ddptop gpus`` and the TUI all write through here.

Standard library only. Every function takes ``None`` for "not known" and writes ``missing`` for it: ``DASH``
in the report's tables, ``NA`` where a reading could not be taken (NVML said not supported). Where two
places wrote the same quantity differently (a table cell with its unit against a narrow column whose header
carries the unit), a parameter keeps both, so no output changed when they were merged.
"""

from __future__ import annotations

from typing import Any, Callable

DASH = "-"
NA = "N/A"

KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30


def number(value: float | None, digits: int = 2, unit: str = "", missing: str = DASH) -> str:
    """A plain number with ``digits`` decimals and an optional unit written right after it (``" W"``)."""
    return missing if value is None else f"{value:.{digits}f}{unit}"


def significant(value: float | None, digits: int = 3, missing: str = DASH) -> str:
    """``digits`` significant digits: for figures whose size varies by orders of magnitude (J/example)."""
    return missing if value is None else f"{value:.{digits}g}"


def seconds(value: float | None, digits: int = 4, unit: bool = False, missing: str = DASH) -> str:
    """Seconds: four decimals for step times (``0.1234``); ``unit`` adds `` s`` for wall times."""
    return missing if value is None else f"{value:.{digits}f}" + (" s" if unit else "")


def milliseconds(value: float | None, missing: str = DASH) -> str:
    """Seconds written as ``12.3 ms``: the scale of one step's parts."""
    return missing if value is None else f"{value * 1e3:.1f} ms"


def microseconds(value: float | None, missing: str = DASH) -> str:
    """Seconds written as ``12.3 us``: the scale of one small collective."""
    return missing if value is None else f"{value * 1e6:.1f} us"


def binary_bytes(value: float | None, missing: str = DASH) -> str:
    """Bytes in the largest binary unit they fill, one decimal (``1.5 GiB``); below 1 KiB whole bytes."""
    if value is None:
        return missing
    for unit, size in (("GiB", GIB), ("MiB", MIB), ("KiB", KIB)):
        if value >= size:
            return f"{value / size:.1f} {unit}"
    return f"{value:.0f} B"


def gib(value: float | None, missing: str = DASH) -> str:
    """Bytes as GiB with one decimal and no unit, for columns whose header names it (``memory GiB``)."""
    return missing if value is None else f"{value / GIB:.1f}"


def gbps(value: float | None, *, from_bytes: bool = False, compact: bool = False, missing: str = DASH) -> str:
    """Bandwidth in GB/s (10^9 bytes a second).

    ``from_bytes``: the value is bytes/s (NVML's counters) rather than GB/s (the report's figures).
    ``compact``: one decimal and no unit, for a narrow column whose header says GB/s; otherwise three
    significant digits and the unit, since bandwidths in one table span several orders of magnitude.
    """
    if value is None:
        return missing
    if from_bytes:
        value = value / 1e9
    return f"{value:.1f}" if compact else f"{value:.3g} GB/s"


def rate(value: float | None, digits_below_100: int = 0, missing: str = DASH) -> str:
    """Examples a second: whole numbers, or ``digits_below_100`` decimals under 100 where slow runs matter."""
    if value is None:
        return missing
    return f"{value:.0f}" if value >= 100 else f"{value:.{digits_below_100}f}"


def percent(
    value: float | None, digits: int = 0, *, signed: bool = False, fraction: bool = True, missing: str = DASH,
) -> str:
    """A percentage: ``value`` is a fraction (0.42 -> ``42%``) or, with ``fraction=False``, already in percent.

    ``signed`` writes the sign of a change (``+3.1%``, ``-0.4%``).
    """
    if value is None:
        return missing
    shown = 100 * value if fraction else value
    return f"{shown:{'+' if signed else ''}.{digits}f}%"


def duration(value: float | None, missing: str = DASH) -> str:
    """Elapsed time as ``M:SS`` or ``H:MM:SS`` (negative counts as 0, fractions of a second dropped)."""
    if value is None:
        return missing
    whole = int(max(0, value))
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def count(value: Any, what: str) -> str:
    """``2 GPUs``, ``1 GPU``; a value that is not a number (as SLURM gave it) as it is."""
    return f"{value} {what}" + ("" if value == 1 else "s")


def pair(a: Any, b: Any, fmt: Callable[[Any], str] | None = None, missing: str = NA) -> str:
    """Two readings as ``a/b`` (used/total, transmit/receive), or ``missing`` alone when neither is known.

    With ``fmt``, ``a`` and ``b`` are values (``None`` unknown) and ``fmt`` writes each. Without it they are
    text already written, and text equal to ``missing`` counts as unknown.
    """
    if fmt is None:
        return missing if a == b == missing else f"{a}/{b}"
    if a is None and b is None:
        return missing
    return f"{fmt(a)}/{fmt(b)}"


def with_interval(value: float | None, ci: Any, fmt: Callable[[Any], str], missing: str = DASH) -> str:
    """A figure and its 95% interval: ``1.17 (1.05–1.29)``; the figure alone when it has no interval, and
    without one when the interval is a single point (a reference's speedup of 1 is exact)."""
    if value is None:
        return missing
    if not ci or ci[0] is None or ci[1] is None or ci[0] == ci[1] or any(c != c for c in ci):  # c != c: NaN
        return fmt(value)
    low, high = fmt(ci[0]), fmt(ci[1])
    unit = high[len(high.rstrip("%abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ/ ")):]
    if unit and low.endswith(unit):
        low = low[: len(low) - len(unit)]  # 57% (54–65%), 8.7 ms (2.1–15.0 ms)
    between = " to " if low.startswith(("+", "-")) else "–"  # signed bounds read badly around a dash
    return f"{fmt(value)} ({low}{between}{high})"


def estimate(found: Any, fmt: Callable[[Any], str], missing: str = DASH) -> str:
    """An estimate of the summary (``ddptop.report.schema.Estimate``: value and ci) as ``with_interval``
    writes a figure and its interval; ``missing`` for none."""
    if found is None:
        return missing
    return with_interval(found.value, found.ci, fmt, missing)


def interval_includes(ci: Any, threshold: float) -> bool:
    """Whether a saved ``[low, high]`` interval includes ``threshold`` (no interval: nothing to say)."""
    return bool(ci) and ci[0] is not None and ci[1] is not None and ci[0] <= threshold <= ci[1]
