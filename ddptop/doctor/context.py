"""What the checks share, each fact found once, when a check first asks for it: NVML's view, where nvidia-smi
is, torch's answers, and the one ``ddptop run`` that the store check watches and the loop check times."""

from __future__ import annotations

import contextlib
import shutil
import tempfile
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ddptop.doctor.commands import ask_torch
from ddptop.doctor.launch import Launched, launch_and_watch
from ddptop.doctor.loop import loop_configuration, loop_run_arguments, reference_loop
from ddptop.doctor.nvml_view import NvmlView, read_nvml

# the smallest launch there is, watched for its store under --skip-loop: one rank, one step (batch 2: BatchNorm
# needs it), one launch (run's default of three would start torchrun three times for nothing the check reads)
STORE_ONLY_LAUNCH = ("--models", "resnet18", "--image-size", "32", "--num-classes", "10", "--batch-sizes", "2",
                     "--world-sizes", "1", "--no-baseline", "--warmup", "0", "--iters", "1", "--comm-iters", "0",
                     "--no-collectives", "--launches", "1")


@dataclass
class SharedLaunch:
    """The launch the store check watches; unless --skip-loop, the loop's, with the plain loop run before it."""

    launched: Launched
    config: dict[str, Any] | None = None  # None under --skip-loop
    plain: dict | None = None
    plain_problem: str = ""


class DoctorContext:
    """Handed to every check's ``run``. ``quick``: nothing is launched; ``skip_loop``: the loop comparison is
    skipped. Used as a context manager: the launches' scratch directory goes when it closes."""

    def __init__(self, skip_loop: bool = False, quick: bool = False) -> None:
        self.skip_loop = skip_loop
        self.quick = quick
        self._cleanup = contextlib.ExitStack()

    def __enter__(self) -> DoctorContext:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._cleanup.close()

    @cached_property
    def view(self) -> NvmlView:
        return read_nvml()

    @cached_property
    def smi(self) -> str | None:
        return shutil.which("nvidia-smi")

    @cached_property
    def _torch_facts(self) -> tuple[dict | None, str]:
        return ask_torch(["facts"])

    @property
    def probe(self) -> dict[str, Any] | None:
        """What torch sees (``bench_kernels.doctor_probe facts``), or None when it could not be asked."""
        return self._torch_facts[0]

    @property
    def probe_problem(self) -> str:
        return self._torch_facts[1]

    @property
    def on_gpu(self) -> bool:
        inventory = self.view.inventory
        return bool(inventory is not None and inventory.usable_gpus and self.probe and self.probe["devices"])

    @cached_property
    def _scratch(self) -> str:
        return self._cleanup.enter_context(tempfile.TemporaryDirectory(prefix="ddptop-doctor-"))

    def launch(self, arguments: list[str]) -> Launched:
        return launch_and_watch(arguments, self._scratch)

    @cached_property
    def shared_launch(self) -> SharedLaunch:
        if self.skip_loop:
            return SharedLaunch(self.launch(list(STORE_ONLY_LAUNCH)))
        config = loop_configuration(self.on_gpu)
        plain, problem = reference_loop(config, self.view)
        return SharedLaunch(self.launch(loop_run_arguments(config)), config, plain, problem)
