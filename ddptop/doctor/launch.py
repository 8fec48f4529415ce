"""A real ``ddptop run`` the doctor starts, watched from outside: how it ended, its summary, and what of it
listened on the network while it ran."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import Any

import psutil

from ddptop.doctor.parsing import last_line


@dataclass
class Launched:
    """One ``ddptop run`` the doctor started: how it ended, its summary, and every listening socket seen in
    its processes while it ran (role: "store" for torchrun's agent, which holds the rendezvous store;
    "rank" for the workers; "ddptop" for the run's own process)."""

    returncode: int | None
    wall_s: float
    summary: dict[str, Any] | None
    listeners: list[dict[str, Any]]
    error: str


def _listening(root: Any, seen: dict[tuple, dict[str, Any]]) -> None:
    try:
        agents = {p.pid for p in root.children()}
        tree = [root, *root.children(recursive=True)]
    except psutil.Error:
        return
    for proc in tree:
        try:  # psutil < 6 names it connections
            connections = getattr(proc, "net_connections", None) or proc.connections
            connections = connections(kind="inet")
        except psutil.Error:
            continue
        for conn in connections:
            if conn.status != psutil.CONN_LISTEN:
                continue
            role = "ddptop" if proc.pid == root.pid else "store" if proc.pid in agents else "rank"
            key = (conn.laddr.ip, conn.laddr.port, role)
            if key not in seen:
                with contextlib.suppress(psutil.Error):
                    seen[key] = {"ip": conn.laddr.ip, "port": conn.laddr.port, "role": role,
                                 "command": " ".join(proc.cmdline()[1:4])}


def launch_and_watch(arguments: list[str], scratch: str, timeout: float = 600) -> Launched:
    """``ddptop run --headless`` with ``arguments`` in a fresh run directory under ``scratch``, its process tree
    watched for listening sockets until it ends: every 0.1 s until the store is seen, then once a second, so
    that the watching costs the measured steps next to nothing."""
    run_dir = os.path.join(scratch, f"run-{len(os.listdir(scratch))}")
    command = [sys.executable, "-m", "ddptop", "run", "--headless", "--out", run_dir, "--telemetry-interval", "0",
               *arguments]
    seen: dict[tuple, dict[str, Any]] = {}
    start = time.monotonic()
    with open(os.path.join(scratch, "run.log"), "w+", encoding="utf-8") as log:
        process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        try:
            root = psutil.Process(process.pid)
            while time.monotonic() - start < timeout:
                _listening(root, seen)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    process.wait(1.0 if any(s["role"] == "store" for s in seen.values()) else 0.1)
                    break
        finally:
            if process.poll() is None:
                process.terminate()  # ddptop stops its ranks on SIGTERM
                try:
                    process.wait(30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
        log.seek(0)
        output = log.read()
    summary = None
    with contextlib.suppress(OSError, ValueError):
        with open(os.path.join(run_dir, "summary.json"), encoding="utf-8") as handle:
            summary = json.load(handle)
    said = [text for text in output.splitlines() if "failed" in text or "error:" in text]
    return Launched(process.returncode, time.monotonic() - start, summary, list(seen.values()),
                    "" if process.returncode == 0 else last_line(said[0] if said else output, 200))
