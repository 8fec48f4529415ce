"""The layers hold: the import contracts in pyproject.toml ([tool.importlinter]) are kept.

Static, over every import in the source (lazy ones inside functions too): the layers (frontends over
ddptop.control, over ddptop.live, over ddptop.report, over ddptop.run, over analysis, telemetry and the
protocol) point down only, the core never imports a frontend or Textual, ddptop.protocol imports nothing else
of ddptop nor the kernels, the kernels import nothing of ddptop but ddptop.protocol, and no module of ddptop
or of the kernels reaches itself through its imports. tests/test_cli.py checks the same at run time for torch and Textual.
No module of ddptop or the kernels, the summary's schema included, is over 600 lines.
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


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycle_in_ddptop_or_the_kernels():
    grimp = pytest.importorskip("grimp")  # import-linter's own graph builder
    graph = grimp.build_graph("ddptop", "bench_kernels", cache_dir=None)
    edges = {module: set(graph.find_modules_directly_imported_by(module)) for module in graph.modules}
    # a package's __init__ importing its own modules is no cycle of two rooms: only modules count
    packages = {m for m in graph.modules if any(other.startswith(m + ".") for other in graph.modules)}
    edges = {m: {t for t in targets if t not in packages} for m, targets in edges.items() if m not in packages}
    assert _cycles(edges) == []


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


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


MODULE_LINES = 600  # past this a module holds more than one thing: split it by what each part is for (the
# summary's schema included: a package of modules by topic)


def test_no_module_is_over_600_lines():
    long = []
    for package in ("ddptop", "bench_kernels"):
        for folder, _dirs, files in os.walk(os.path.join(REPO, package)):
            for name in files:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, REPO)
                if name.endswith(".py"):
                    with open(path, encoding="utf-8") as handle:
                        lines = sum(1 for _ in handle)
                    if lines > MODULE_LINES:
                        long.append(f"{relative}: {lines} lines")
    assert not long, "split by what each part is for: " + "; ".join(long)
