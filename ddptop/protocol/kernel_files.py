"""The kernel's small text files under /proc and /sys, and the CPU list format they write ("0-3,8,10-11":
sysfs's cpulist files, a cpuset). Standard library only: the ranks read CPU topology through
``protocol/affinity.py`` too.
"""

from __future__ import annotations

from collections.abc import Iterable


def read_kernel_file(path: str) -> str | None:
    """The text of a small file under /proc or /sys, stripped; None where it cannot be read (missing, not
    allowed, not text): what is not there is not known, never an error."""
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def parse_cpu_list(text: str, strict: bool = False) -> list[int]:
    """"0-3,8,10-11" -> [0, 1, 2, 3, 8, 10, 11] (the inverse of ``cpu_ranges``).

    A part that is no CPU or range of CPUs (empty, "a", "3-1") is skipped: a file the kernel wrote holds
    none, so skipping keeps what can be read of a damaged one. ``strict``: ValueError instead, for a list a
    person wrote."""
    cpus: list[int] = []
    for part in text.split(","):
        first, dash, last = part.strip().partition("-")
        if first.isdigit() and (not dash or (last.isdigit() and int(last) >= int(first))):
            cpus.extend(range(int(first), int(last or first) + 1))
        elif strict:
            raise ValueError(f"{text!r} is not a CPU list such as \"0-19,40-59\"")
    return cpus


def cpu_ranges(cpus: Iterable[int]) -> str:
    """[0, 1, 2, 3, 8] -> "0-3,8": CPU ids as a cpuset list, each once, in order ("" for none)."""
    runs: list[list[int]] = []
    for cpu in sorted(set(cpus)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(str(first) if first == last else f"{first}-{last}" for first, last in runs)
