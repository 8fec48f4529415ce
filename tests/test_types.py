"""mypy over what pyproject.toml's [tool.mypy] names: the report, the analysis and the TUI's panels (the
ddptop modules they import are analysed for their types, their own errors not reported)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

pytest.importorskip("mypy")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_mypy_is_clean() -> None:
    # the files and settings come from pyproject.toml; its cache makes a second run take seconds
    result = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"mypy found errors:\n{result.stdout}{result.stderr}"
