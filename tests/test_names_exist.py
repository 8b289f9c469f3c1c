"""Every file, module and name that the README or a docstring names exists: a moved or renamed thing leaves no
stale pointer behind (`TraceFiles.save` after it became `write`, a README that was merged into another)."""

from __future__ import annotations

import ast
import importlib
import io
import re
import tokenize

import pytest
from helpers import DOC_PAGES, ROOT

SOURCES = [
    *sorted(ROOT.glob("*.py")),
    *sorted((ROOT / "common").rglob("*.py")),
    *sorted((ROOT / "benchmarks").glob("*.py")),
]
TEXTS = [p.relative_to(ROOT).as_posix() for p in DOC_PAGES + SOURCES]
# Each module's stem, to its dotted name (the two entry points at common/'s root hold no names: a wing's module wins)
DOTTED_NAME = {
    p.stem: ".".join(p.relative_to(ROOT).with_suffix("").parts)
    for p in sorted((ROOT / "common").rglob("*.py"), key=lambda p: len(p.parts))  # a wing's module wins
    if p.stem != "__init__"
}
MODULES = sorted(DOTTED_NAME)
WINGS = "|".join(sorted({p.parent.name for p in (ROOT / "common").glob("*/__init__.py")}))
PATH = re.compile(r"(?<![\w/<.-])((?:common|tests|benchmarks)/[\w/.-]*\w\.(?:py|md|json)|\d\d_\w+\.py|README\w*\.md)")
DOTTED = re.compile(
    rf"(?<![\w.])(?:common\.(?:(?:workloads|harness|analysis|reader)\.)?)?({'|'.join(MODULES)})\.(\w+)(?:\.(\w+))?"
)


def prose(name: str) -> str:
    """What `name` says to a reader: the README whole; of a Python file, its docstrings and comments."""
    text = (ROOT / name).read_text()
    if name.endswith(".md"):
        return text
    docs = [
        ast.get_docstring(n) or ""
        for n in ast.walk(ast.parse(text))
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
    ]
    tokens = tokenize.generate_tokens(io.StringIO(text).readline)  # real comments: not a `#` inside a string
    comments = [token.string[1:] for token in tokens if token.type == tokenize.COMMENT]
    return "\n".join(docs + comments)


def classes() -> dict[str, object]:
    """Every class the toolbox defines, by name."""
    found = {}
    for module in MODULES:
        for name, value in vars(importlib.import_module(DOTTED_NAME[module])).items():
            if isinstance(value, type) and value.__module__ == DOTTED_NAME[module]:
                found[name] = value
    return found


def has_member(owner: object, name: str) -> bool:
    """A class's attribute, or a field of a dataclass (which has no class attribute without a default)."""
    return hasattr(owner, name) or name in getattr(owner, "__dataclass_fields__", {})


@pytest.mark.parametrize("name", TEXTS)
def test_every_file_named_exists(name):
    missing = sorted(
        {p for p in PATH.findall(prose(name)) if not (ROOT / p).exists() and not p.startswith("tests/fixtures")}
    )
    assert not missing, f"{name} names files that do not exist: {missing}"


@pytest.mark.parametrize("name", TEXTS)
def test_every_module_and_name_in_it_that_is_named_exists(name):
    missing = []
    for module, attr, inner in DOTTED.findall(prose(name)):
        if attr in ("py", "md", "json", "txt", "pickle", "png", "html"):
            continue  # a file name, checked above
        found = getattr(importlib.import_module(DOTTED_NAME[module]), attr, None)
        if found is None or (
            inner and not hasattr(found, inner) and inner not in getattr(found, "__dataclass_fields__", {})
        ):
            missing.append(".".join(w for w in (module, attr, inner) if w))
    assert not missing, f"{name} names what does not exist: {sorted(set(missing))}"


@pytest.mark.parametrize("name", TEXTS)
def test_every_class_member_named_exists(name):
    known = classes()
    pairs = re.findall(r"(?<![\w.])([A-Z]\w+)\.(\w+)", prose(name))
    missing = [f"{c}.{m}" for c, m in pairs if c in known and not has_member(known[c], m)]
    assert not missing, f"{name} names members that do not exist: {sorted(set(missing))}"
