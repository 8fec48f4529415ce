"""README's commands run as written: every command of a fenced code block that runs ddptop (the Quickstart's
installs aside, which CI itself runs) is run exactly as README shows it, from the checkout's root, in a fresh
shell with no ``PYTHONPATH`` of its own; a command that launches a sweep gets ``SHRINK`` appended (one launch,
a few measured steps, no collective benchmark, traces or plots: the same world sizes and models). A command
README shows that does not work fails here.

The root is a scratch copy of the checkout's files, so that what a command writes (``runs/``, ``--out plots-x``,
a summary saved beside a recorded run) lands there and relative paths resolve as they do in the checkout.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

# appended to a README command that launches a sweep, so that it fits the quick tier (docs/testing.md)
SHRINK = "--launches 1 --warmup 2 --iters 10 --no-collectives --no-trace --no-plots"
LAUNCHING = {"run", "tune"}  # ddptop's subcommands that start torchrun (bare `ddptop` is `run`)
_FENCE = re.compile(r"^\s*```\s*(\w*)")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")


def shell_blocks(text: str) -> list[str]:
    """The lines of every fenced block marked bash, sh, shell or console, in order."""
    lines: list[str] = []
    language: str | None = None
    for line in text.splitlines():
        fence = _FENCE.match(line)
        if fence:
            language = None if language is not None else fence.group(1)
            continue
        if language in ("bash", "sh", "shell", "console"):
            lines.append(line)
    return lines


def ddptop_words(command: str) -> list[str] | None:
    """The words of a command line from ``ddptop`` on (its leading variable assignments aside), comments
    dropped; None for a line that does not run ddptop first."""
    try:
        words = shlex.split(command, comments=True)
    except ValueError:
        return None
    while words and _ASSIGNMENT.match(words[0]):
        words.pop(0)
    return words if words and words[0] == "ddptop" else None


def readme_commands(text: str) -> list[str]:
    """README's commands that run ddptop, comments stripped, as a shell would be given them."""
    found = []
    for line in shell_blocks(text):
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        if ddptop_words(line) is not None:
            found.append(line.split(" #", 1)[0].rstrip())
    return found


def launches(command: str) -> bool:
    words = ddptop_words(command) or []
    subcommand = next((w for w in words[1:] if not w.startswith("-")), None)
    return subcommand is None or subcommand in LAUNCHING


def checkout_root(scratch: Path) -> Path:
    """A copy of the checkout's files (those git tracks or would, about 5 MB), standing for its root: a command
    may write where it runs (``ddptop report`` of a run without a summary saves one there) and must not change
    the checkout."""
    root = scratch / "checkout"
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"], cwd=REPO,
                            capture_output=True, text=True, check=True).stdout
    for name in filter(None, listed.split("\0")):
        if (REPO / name).is_file():
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, root / name)
    return root


def run_as_written(command: str, root: Path, timeout: float) -> subprocess.CompletedProcess[str]:
    """``command`` (with ``SHRINK`` where it launches) in bash from ``root``, with ddptop's install on PATH and
    no PYTHONPATH but what the command sets; stdout is a pipe, so ddptop reports as it does in a batch job."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DDPTOP_FAKE_NVML")}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    env["COLUMNS"] = "200"
    line = f"{command} {SHRINK}" if launches(command) else command
    return subprocess.run(["bash", "-c", line], cwd=root, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)


COMMANDS = readme_commands(README.read_text(encoding="utf-8"))


def test_readme_shows_the_own_model_command_and_commands_that_need_no_sweep():
    assert any("--models my_workload:make_workload" in c for c in COMMANDS), COMMANDS
    assert any(not launches(c) for c in COMMANDS), COMMANDS


def test_the_reader_takes_what_a_shell_would_run():
    text = "\n".join(["```bash", "PYTHONPATH=examples ddptop run --models a:b      # or: ddptop tune",
                      "python3 -m pip install -e . && ddptop", "$ ddptop report x", "```",
                      "```", "ddptop view not-shell", "```"])
    assert readme_commands(text) == ["PYTHONPATH=examples ddptop run --models a:b", "ddptop report x"]
    assert launches("ddptop") and launches("A=1 ddptop tune --x 1") and not launches("ddptop report x")


@pytest.mark.parametrize("command", [c for c in COMMANDS if not launches(c)])
def test_a_readme_command_without_a_sweep_runs_as_written(command, tmp_path):
    done = run_as_written(command, checkout_root(tmp_path), timeout=120)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-2000:]}"
    assert done.stdout.strip() or done.stderr.strip(), f"{command} printed nothing"


@pytest.mark.slow
@pytest.mark.smoke
@pytest.mark.parametrize("command", [c for c in COMMANDS if launches(c)])
def test_a_readme_command_that_launches_runs_as_written(command, tmp_path):
    """The own-model example above all: its check and its ranks import the factory from the same absolute path
    (a relative PYTHONPATH once reached the check and not the ranks), and it prints its scaling table."""
    done = run_as_written(command, checkout_root(tmp_path), timeout=400)
    assert done.returncode == 0, f"{command}: exit {done.returncode}\n{done.stderr[-3000:]}\n{done.stdout[-3000:]}"
    assert re.search(r"^Scaling: ", done.stdout, re.M), done.stdout[-3000:]
    rows = re.findall(r"^\s+1M/(\d+)[PG]\s+\d", done.stdout, re.M)  # the scaling table's rows: N of each
    on_cpu = "gloo" in done.stdout  # the CPU plan measures N = 1 and 2; a GPU node's, 1 up to its GPUs
    assert rows[:2] == (["1", "2"] if on_cpu else ["1"])[:2], done.stdout[-3000:]
