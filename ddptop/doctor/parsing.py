"""Reading what other tools print: nvidia-smi's GPU list and ``topo -m`` matrix, nccl-tests' table, and the
UUIDs and last lines the checks compare and quote."""

from __future__ import annotations

import contextlib
import re
from typing import Any

NCCL_TESTS_BYTES = 64 * 2**20  # all_reduce_perf -b 64M -e 64M (nccl-tests' M is 2**20)

TOPO_WORD = re.compile(r"^(X|NV\d+|PIX|PXB|PHB|NODE|SYS|N/A)\*?$")  # ddptop marks its own inference NODE*
_NIC_LEGEND = re.compile(r"^\s*(NIC\d+)\s*:\s*(\S+)\s*$")
# a terminal control sequence (CSI: ESC [ parameters, a final letter): nvidia-smi underlines topo -m's header line
# with ESC[4m ... ESC[0m even when its output is a pipe
_ESCAPE = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]")


def without_escapes(text: str) -> str:
    """``text`` with its terminal control sequences (colour, underline) removed."""
    return _ESCAPE.sub("", text)


def last_line(text: str, limit: int = 160) -> str:
    lines = [line.strip() for line in without_escapes(text or "").splitlines() if line.strip()]
    return lines[-1][:limit] if lines else "no output"


def bare_uuid(uuid: str | None) -> str:
    """A UUID without NVML's "GPU-"/"MIG-" before it, lower case: CUDA gives the bare form."""
    text = (uuid or "").strip().lower()
    return text.split("-", 1)[1] if text.startswith(("gpu-", "mig-")) else text


def parse_query_gpu(text: str) -> list[dict[str, Any]]:
    """``nvidia-smi --query-gpu=index,name,uuid,memory.total,pci.bus_id --format=csv,noheader,nounits``."""
    rows = []
    for line in text.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        try:
            memory = float(parts[3])
        except ValueError:  # [N/A], [Not Supported]
            memory = None
        rows.append({"index": int(parts[0]), "name": parts[1], "uuid": parts[2],
                     "memory_mib": int(memory) if memory is not None else None,
                     "bus_id": parts[4] if len(parts) > 4 else None})
    return rows


def parse_topo_matrix(text: str) -> dict[tuple[str, str], str]:
    """The cells of an ``nvidia-smi topo -m`` matrix keyed by (row, column), in the printed order.

    The columns are the header's device names (up to "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"); a
    "NIC Legend" (newer drivers print NIC0, NIC1, ... and name them below) renames them to their devices, as
    ``ddptop topo`` names them. Terminal escapes are dropped first: a real nvidia-smi underlines the header."""
    lines = [line for line in without_escapes(text).splitlines() if line.strip()]
    header = next((i for i, line in enumerate(lines) if line.split() and line.split()[0].startswith("GPU0")), None)
    if header is None:
        return {}
    columns = []
    for word in lines[header].split():
        if word in ("CPU", "NUMA", "GPU"):
            break
        columns.append(word)
    rename = {m.group(1): m.group(2) for m in map(_NIC_LEGEND.match, lines[header:]) if m}
    cells: dict[tuple[str, str], str] = {}
    for line in lines[header + 1:]:
        parts = line.split()
        if not parts or parts[0].rstrip(":") == "Legend" or len(parts) < 2 or not TOPO_WORD.match(parts[1]):
            break
        row = rename.get(parts[0], parts[0])
        for column, value in zip(columns, parts[1:1 + len(columns)]):
            if TOPO_WORD.match(value):
                cells[(row, rename.get(column, column))] = value.rstrip("*")
    return cells


def parse_all_reduce_perf(text: str, size: int = NCCL_TESTS_BYTES) -> float | None:
    """nccl-tests' out-of-place busbw (GB/s) at ``size`` bytes: the column its header names "busbw" first
    (its columns moved between versions); else its closing "Avg bus bandwidth" line."""
    column = None
    for line in text.splitlines():
        words = line.lstrip("#").split()
        if line.startswith("#") and "busbw" in words and "size" in words:
            column = words.index("busbw") - words.index("size")
            continue
        parts = line.split()
        if column is not None and len(parts) > column and parts[0] == str(size):
            with contextlib.suppress(ValueError):
                return float(parts[column])
    match = re.search(r"Avg bus bandwidth\s*:\s*([0-9.]+)", text)
    return float(match.group(1)) if match else None
