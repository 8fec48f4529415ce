"""The layers hold: the import contracts in pyproject.toml ([tool.importlinter]) are kept.

Static, over every import in the source (lazy ones inside functions too): the core never imports a frontend
or Textual, ddptop.protocol imports nothing else of ddptop nor the kernels, and the kernels import nothing of
ddptop but ddptop.protocol. tests/test_cli.py checks the same at run time for torch and Textual.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _lint_imports() -> list[str]:
    found = shutil.which("lint-imports", path=os.path.dirname(sys.executable)) or shutil.which("lint-imports")
    if found is None:
        pytest.skip("import-linter is not installed (pip install -e '.[test]')")
    return [found]


def test_import_contracts_are_kept():
    done = subprocess.run([*_lint_imports(), "--no-cache"], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"lint-imports found a broken import contract:\n{done.stdout}\n{done.stderr}"
    assert "0 broken" in done.stdout, done.stdout


def test_the_protocol_is_standard_library_only():
    """What the contracts cannot see: a third-party import in ddptop.protocol would reach every rank."""
    code = (
        "import pkgutil, sys\n"
        "before = set(sys.modules)\n"
        "import ddptop.protocol as p\n"
        "for info in pkgutil.iter_modules(p.__path__):\n"
        "    __import__(f'ddptop.protocol.{info.name}')\n"
        "new = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        "assert new <= {'ddptop'} | set(sys.stdlib_module_names), sorted(new - set(sys.stdlib_module_names))\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=REPO, check=True)
