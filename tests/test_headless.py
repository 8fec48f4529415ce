"""`ddptop run --headless` as a SLURM job log or `| tee` gets it: a real sweep whose stdout is a file, and one whose
stdout is a narrow terminal (a pseudo-terminal). No line of ddptop's is broken in two by a width it assumed: in a
file there is none (each line whole, however long), on a terminal the terminal wraps what is too long."""

import os
import pty
import re
import struct
import subprocess
import sys
import termios
import fcntl

import pytest

from .conftest import REPO

TINY = ("--launches", "1", "--models", "tests.tiny_models:tiny_cnn", "--image-size", "32", "--num-classes", "10",
        "--batch-sizes", "2", "--warmup", "1", "--iters", "5", "--comm-iters", "0", "--no-collectives",
        "--no-plots", "--world-sizes", "1")
# the configurations' lines: "[<config id>] ok      p50 0.0014 s/iter    1456.1 ex/s", over 80 columns here
CONFIG_LINE = re.compile(r"^\[tests\.tiny_models:tiny_cnn/(ddp|no_ddp)/bs2/n1/gloo\] ok +p50 [0-9.]+ s/iter +[0-9.]+ ex/s$")


def _env() -> dict:
    """The user's environment: no COLUMNS nor LINES (a batch job has none), this tree's ddptop."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
    env["PYTHONPATH"] = REPO
    return env


@pytest.mark.slow
def test_headless_lines_written_to_a_file_are_never_wrapped(tmp_path):
    run_dir = tmp_path / "a-results-directory-whose-path-alone-is-longer-than-a-terminal-of-eighty-columns"
    log = tmp_path / "slurm-1234.out"
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run([sys.executable, "-m", "ddptop", "run", "--headless", "--out", str(run_dir), *TINY],
                              cwd=REPO, env=_env(), stdout=out, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                              text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lines = log.read_text(encoding="utf-8").splitlines()
    assert f"ddptop: 2 configurations, results in {run_dir}" in lines
    configs = [line for line in lines if line.startswith("[tests.")]
    assert len(configs) == 2 and all(CONFIG_LINE.match(line) for line in configs), configs
    assert max(map(len, configs)) > 80  # long enough to have been cut at a terminal's width
    # nothing left over from a line cut in two: a bare "ex/s" or the path's tail on a line of its own
    assert not [line for line in lines if line.strip() == "ex/s" or line.startswith(str(run_dir)[-20:])]


@pytest.mark.slow
def test_headless_lines_on_a_terminal_are_left_to_the_terminal_to_wrap(tmp_path):
    """A terminal 60 columns wide: the opening line (a long path) goes out whole, for the terminal to wrap as it
    does every long line, and comes back whole when the window is widened or the text copied."""
    run_dir = tmp_path / "a-results-directory-whose-path-alone-is-longer-than-the-terminal"
    leader, follower = pty.openpty()
    fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "ddptop", "run", "--headless", "--no-baseline", "--out",
                             str(run_dir), *TINY], cwd=REPO, env=_env(), stdout=follower, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL)
    os.close(follower)
    written = b""
    while True:
        try:
            chunk = os.read(leader, 65536)
        except OSError:  # the follower side closed: the process ended
            break
        if not chunk:
            break
        written += chunk
    os.close(leader)
    assert proc.wait(timeout=300) == 0, proc.stderr.read() if proc.stderr else ""
    text = written.decode("utf-8", "replace").replace("\r\n", "\n")
    assert f"ddptop: 1 configuration, results in {run_dir}\n" in text, text[:400]
