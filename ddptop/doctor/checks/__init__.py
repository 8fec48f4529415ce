"""The doctor's checks, one module each, in the order they run, print and are saved.

A check is a module with ``NAME`` (its name in the table and in doctor.json) and ``run(context) -> Check``:
adding one means adding its module and a line in ``CHECKS``."""

from __future__ import annotations

from typing import Protocol

from ddptop.doctor.checks import (device_order, kernel_vs_loop, nccl_tests, nvidia_smi, nvml, peer_access, store,
                                  topology, versions)
from ddptop.doctor.context import DoctorContext
from ddptop.doctor.result import Check


class DoctorCheck(Protocol):
    NAME: str

    def run(self, context: DoctorContext) -> Check: ...


CHECKS: tuple[DoctorCheck, ...] = (
    nvml,
    nvidia_smi,
    topology,
    versions,
    device_order,
    peer_access,
    store,  # watches the launch kernel_vs_loop times, so it is made when the store check asks
    kernel_vs_loop,
    nccl_tests,
)
CHECK_NAMES = tuple(check.NAME for check in CHECKS)
