"""The shape of common/: four wings above a small base, imports pointing down only, the reader and the analysis
free of torch, every module saying its job in its docstring's first line, and every test name within 80 characters."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

COMMON = ROOT / "common"
# Highest first: a module may import from its own layer or any layer below, never above.
LAYERS = {"workloads": 4, "harness": 3, "analysis": 2, "reader": 1}
ENTRY_POINTS = {"common.summary", "common.diff"}  # `python -m common.summary`: above everything, by design


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def layer(module: str) -> int:
    """The layer of a module of the suite: its wing's, or 0 for the base (common/*.py)."""
    parts = module.split(".")
    return LAYERS.get(parts[1], 0) if len(parts) > 1 else 0


def imported(path: Path) -> list[tuple[str, int]]:
    """Every common module `path` imports, at module level or inside a function, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names if alias.name.split(".")[0] == "common"]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "common":
            if node.module == "common" or node.module.removeprefix("common.") in LAYERS:
                found += [(f"{node.module}.{alias.name}", node.lineno) for alias in node.names]
            else:
                found.append((node.module, node.lineno))
    return found


MODULES = sorted(COMMON.rglob("*.py"))


def test_common_has_four_wings_and_a_small_base():
    wings = sorted(p.name for p in COMMON.iterdir() if p.is_dir() and (p / "__init__.py").exists())
    assert wings == sorted(LAYERS)
    base = sorted(p.stem for p in COMMON.glob("*.py") if p.stem != "__init__")
    assert base == ["cli", "diff", "files", "interrupts", "physics", "summary", "units"]


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_imports_point_down_only(path):
    here = module_name(path)
    if here in ENTRY_POINTS:
        return
    up = [f"{target} (line {line})" for target, line in imported(path) if layer(target) > layer(here)]
    assert not up, f"{here} (layer {layer(here)}) imports from above: {up}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_says_its_job_in_one_line(path):
    doc = ast.get_docstring(ast.parse(path.read_text()))
    assert doc, f"{path.relative_to(ROOT)} has no docstring"
    first = doc.splitlines()[0]
    assert first.strip() and len(first) <= 120, first


def test_the_reader_and_the_analysis_import_no_torch():
    names = [module_name(p) for p in MODULES if layer(module_name(p)) in (1, 2) or module_name(p) in ENTRY_POINTS]
    probe = f"import sys, importlib\nfor n in {names!r}:\n    importlib.import_module(n)\nprint('torch' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False", f"importing {names} loads torch"


MAX_POSITIONAL = 8  # a call with more is read by counting: its arguments go by keyword


@pytest.mark.parametrize("path", MODULES + sorted(ROOT.glob("0*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_constructor_takes_more_than_eight_positional_arguments(path):
    """Trace(...) took 18 and Digest(...) 20 positional arguments, each read by counting (issue 33)."""
    long = [
        f"{path.name}:{node.lineno} {node.func.id}(... {len(node.args)} positional)"
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id[:1].isupper()
        and len(node.args) > MAX_POSITIONAL
    ]  # fmt: skip
    assert not long, long


def module_imports(path: Path) -> set[str]:
    """The suite's modules `path` imports, at any depth (a function's lazy import too), but not those under `if
    TYPE_CHECKING:` (for types only, never run); `from common.x import name` counts as common.x."""
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING"
        for inner in ast.walk(node)
    }
    known = {module_name(p) for p in MODULES}
    found = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        if isinstance(node, ast.ImportFrom) and node.module:
            names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
        found |= {n for n in names if n in known}
    return found - {module_name(path)}


def test_the_suites_imports_make_no_cycle():
    """Within a wing arrows may point either way; around a loop they must not (torchrun and ranks nearly did)."""
    graph = {module_name(p): module_imports(p) for p in MODULES}
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            raise AssertionError("an import cycle: " + " → ".join([*path[path.index(module) :], module]))
        if module in done:
            return
        for target in sorted(graph.get(module, ())):
            visit(target, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])


TEST_NAME_MAX = 80  # a test's name says its behaviour in a line a terminal shows whole beside its file


def test_every_test_name_fits_80_characters():
    names = [
        node.name
        for path in sorted((ROOT / "tests").rglob("test_*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.FunctionDef) and node.name.startswith("test_")
    ]
    assert names and [n for n in names if len(n) > TEST_NAME_MAX] == []
