"""The doctor's output, made from the checks' results in one place: the printed lines and doctor.json."""

from __future__ import annotations

import os
import time
from typing import Any

from ddptop.run import rundir
from ddptop.protocol import storage
from ddptop.doctor.checks import CHECK_NAMES
from ddptop.doctor.result import FAIL, STATUSES, Check
from ddptop.errors import DdptopError
from ddptop.telemetry import nvml as nv

DOCTOR_FILE = "doctor.json"
SCHEMA = "ddptop-doctor/1"


class DoctorError(DdptopError):
    """doctor.json cannot be written where --out says; one line for the user."""


def line(check: Check) -> str:
    width = max(len(name) for name in CHECK_NAMES)
    return f"{check.status:<8} {check.name:<{width}}  {check.detail}"


def table(checks: list[Check]) -> str:
    return "".join(line(c) + "\n" for c in checks)


def check_json(check: Check) -> dict[str, Any]:
    return {"name": check.name, "status": check.status, "detail": check.detail, "data": check.data}


def prepare_out(out_dir: str) -> None:
    """``--out`` made and found writable before any check runs, so a bad path costs no launch."""
    rundir.prepare_out_dir(out_dir, DoctorError)


def save(checks: list[Check], out_dir: str) -> str:
    """doctor.json in ``out_dir`` (created user-only if missing), written atomically."""
    path = os.path.join(out_dir, DOCTOR_FILE)
    failed = sum(c.status == FAIL for c in checks)
    document = {"schema": SCHEMA, "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "fake_nvml": os.environ.get(nv.FAKE_ENV) or None,
                "counts": {s: sum(c.status == s for c in checks) for s in STATUSES}, "failed": failed,
                "checks": [check_json(c) for c in checks]}
    try:
        os.makedirs(out_dir, mode=0o700, exist_ok=True)
        storage.write_json(path, document)
    except OSError as exc:
        raise DoctorError(f"cannot save the checks: {storage.describe_os_error(exc, path)} in {out_dir}") from None
    return path
