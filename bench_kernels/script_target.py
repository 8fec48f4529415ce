"""The user's script as a rank of ddptop's probe runs it: what came after ``--`` (``Target``), the script run as
``__main__`` in this process as ``python train.py`` (or ``python -m``) would, and what is left when it ends: its
own traceback, its exit code, its DataLoader workers, its exit functions."""

from __future__ import annotations

import argparse
import atexit
import contextlib
import gc
import os
import runpy
import sys
from dataclasses import dataclass
from typing import Any

from bench_kernels.rank_process import exit_without_teardown

PROGRAM = "bench_kernels.script_probe"  # the module torchrun runs in each rank, which runs the script
DESCRIPTION = "A user's training script, unchanged, measured as a rank of a ddptop launch."


@dataclass(frozen=True)
class Target:
    """What the probe runs: a script file or a module, with its arguments."""

    path: str | None
    module: str | None
    args: tuple[str, ...]

    @property
    def argv(self) -> list[str]:
        """``sys.argv`` as the script sees it (runpy puts a module's file in ``argv[0]``)."""
        return [self.module if self.module is not None else str(self.path), *self.args]

    @property
    def command(self) -> list[str]:
        """What came after ``--``."""
        return ["-m", *self.argv] if self.module is not None else self.argv


def parse_command(argv: list[str]) -> tuple[str, Target]:
    """``--spec launch.json -- train.py ARGS...`` or ``--spec launch.json -- -m pkg.mod ARGS...``."""
    parser = argparse.ArgumentParser(prog=f"python -m {PROGRAM}", description=DESCRIPTION,
                                     usage=f"python -m {PROGRAM} --spec launch.json -- (script.py | -m module) [args ...]")
    parser.add_argument("--spec", required=True, help="launch spec JSON written by ddptop")
    if "--" not in argv:
        parser.error("the script comes after --")
    cut = argv.index("--")
    options, command = argv[:cut], argv[cut + 1:]
    spec_path = parser.parse_args(options).spec
    if not command or (command[0] == "-m" and len(command) < 2):
        parser.error("no script (or -m module) after --")
    if command[0] == "-m":
        return spec_path, Target(None, command[1], tuple(command[2:]))
    return spec_path, Target(command[0], None, tuple(command[1:]))


def run_target(target: Target) -> None:
    """Run the script as ``__main__`` here, as ``python train.py ARGS`` (or ``python -m pkg.mod ARGS``) would."""
    if target.module is not None:
        sys.argv = target.argv
        runpy.run_module(target.module, run_name="__main__", alter_sys=True)
        return
    assert target.path is not None
    path = os.path.abspath(target.path)
    sys.argv = target.argv
    sys.path[0] = os.path.dirname(path)  # python puts the script's folder first, not the working directory
    runpy.run_path(path, run_name="__main__")


def script_traceback(exc: BaseException, probe_globals: dict[str, Any]) -> BaseException:
    """``exc`` with the probe's and runpy's frames above the script cut from its traceback: the script's own."""
    tb = exc.__traceback__
    # the probe's frames and this module's (the probe's name is __main__ under -m, as the script's is: told apart
    # by their globals), and runpy's
    ours = (probe_globals, globals())
    while tb is not None and tb.tb_next is not None and (any(tb.tb_frame.f_globals is g for g in ours)
                                                         or tb.tb_frame.f_globals.get("__name__") == "runpy"):
        tb = tb.tb_next
    return exc.with_traceback(tb)


def exit_code(exc: SystemExit) -> int:
    """The process's exit code for the script's ``sys.exit(code)``, as the interpreter would make it."""
    if exc.code is None:
        return 0
    if isinstance(exc.code, int):
        return exc.code
    print(exc.code, file=sys.stderr)
    return 1


def release_loaders() -> None:
    """End the DataLoader workers the script left: its frames are gone, so collecting shuts them down; what is
    left (a loader the script's globals still hold) is stopped here, so no process outlives the rank."""
    import multiprocessing

    gc.collect()
    for child in multiprocessing.active_children():
        if child.daemon:  # a loader's workers are daemons; a process the script started and still owns is not
            child.terminate()
            child.join(5)


def exit_quietly() -> None:
    """Run what the script registered to run at exit (its logs flushed, its loaders' workers ended), then leave
    without the interpreter's teardown, as the kernel does (``exit_without_teardown``)."""
    run_exit_functions = getattr(atexit, "_run_exitfuncs", None)
    if run_exit_functions is not None:
        with contextlib.suppress(Exception):
            run_exit_functions()
    exit_without_teardown()
