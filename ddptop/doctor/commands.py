"""The commands the doctor runs and reads: any program (nvidia-smi, all_reduce_perf), and the torch probe
(``bench_kernels.doctor_probe``), since the doctor's own process never imports torch."""

from __future__ import annotations

import json
import subprocess
import sys

from ddptop.doctor.parsing import last_line


def run_command(command: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``command``'s output; a timeout or a missing program is an exit of -1 saying so, never an exception."""
    try:
        return subprocess.run(command, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              env=env)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(command, -1, "", f"no answer within {timeout:g} s")
    except OSError as exc:
        return subprocess.CompletedProcess(command, -1, "", f"cannot run {command[0]}: {exc.strerror or exc}")


def ask_torch(arguments: list[str], env: dict[str, str] | None = None,
              timeout: float = 600) -> tuple[dict | None, str]:
    """The torch probe's JSON answer, or None and why there is none."""
    done = run_command([sys.executable, "-m", "bench_kernels.doctor_probe", *arguments], timeout, env)
    if done.returncode != 0:
        return None, f"the torch probe failed: {last_line(done.stderr, 200)}"
    try:
        return json.loads(done.stdout.strip().splitlines()[-1]), ""
    except (ValueError, IndexError):
        return None, "the torch probe printed no JSON"
