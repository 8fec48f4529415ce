"""Cell text for the TUI: bars, sparklines and units, with nvitop-like load colours. Rich only, no Textual."""

from __future__ import annotations

from typing import Sequence

from rich.text import Text

SPARK = "▁▂▃▄▅▆▇█"
# nvitop's load thresholds: below the first is light (green), below the second moderate (yellow), else heavy.
UTIL_THRESHOLDS = (10, 75)
MEMORY_THRESHOLDS = (10, 80)


def load_style(percent: float | None, thresholds: tuple[int, int] = UTIL_THRESHOLDS) -> str:
    if percent is None:
        return "dim"
    if percent < thresholds[0]:
        return "green"
    if percent < thresholds[1]:
        return "yellow"
    return "red"


def bar(percent: float | None, width: int = 10, thresholds: tuple[int, int] = UTIL_THRESHOLDS) -> Text:
    """A bar with the number after it: ``███▌      42%``."""
    if percent is None:
        return Text("N/A".ljust(width + 5), style="dim")
    percent = max(0.0, min(100.0, percent))
    eighths = round(percent / 100 * width * 8)
    full, part = divmod(eighths, 8)
    cells = "█" * full + (" ▏▎▍▌▋▊▉"[part] if part else "")
    text = Text(cells.ljust(width), style=load_style(percent, thresholds))
    text.append(f"{percent:4.0f}%")
    return text


def sparkline(values: Sequence[float | None], width: int = 12, top: float | None = 100.0) -> Text:
    """The last ``width`` values as block characters (missing values blank)."""
    recent = list(values)[-width:]
    known = [v for v in recent if v is not None]
    if not known:
        return Text(" " * width)
    ceiling = top if top is not None else max(known) or 1.0
    chars = []
    for value in recent:
        if value is None:
            chars.append(" ")
        else:
            chars.append(SPARK[min(len(SPARK) - 1, max(0, int(value / ceiling * (len(SPARK) - 1) + 0.5)))])
    return Text("".join(chars).rjust(width), style="cyan")


def gib(value: float | None) -> str:
    return "-" if value is None else f"{value / (1 << 30):.1f}"


def gbps(value: float | None) -> str:
    return "N/A" if value is None else f"{value / 1e9:.1f}"


def pair(a: str, b: str) -> str:
    return "N/A" if a == b == "N/A" else f"{a}/{b}"


def seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def rate(value: float | None) -> str:
    return "-" if value is None else (f"{value:.0f}" if value >= 100 else f"{value:.1f}")


def duration(value: float) -> str:
    value = int(max(0, value))
    hours, rest = divmod(value, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"
