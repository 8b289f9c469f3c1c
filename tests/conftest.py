"""Shared test helpers: load a numbered script as a module, read what a run wrote."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import ModuleType
from typing import Callable

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

requires_cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


def load_script(name: str) -> ModuleType:
    """Import `<ROOT>/<name>.py` (names start with digits, so plain import can't)."""
    spec = importlib.util.spec_from_file_location(name.replace(".", "_"), ROOT / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def script():
    """`script("01_matmul_add")` -> the loaded module, whose `main(argv)` tests call."""
    return load_script


def usage_error(call: Callable[[], object], capsys: pytest.CaptureFixture) -> str:
    """Run `call`, expect the suite's bad-input exit (code 2, one `error:` line on stderr) and return that line."""
    with pytest.raises(SystemExit) as exc:
        call()
    assert exc.value.code == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error:"), err
    return err


def trace_names(path: Path) -> set[str]:
    """Every event name in an exported Chrome trace."""
    return {e.get("name") for e in json.loads(path.read_text())["traceEvents"]}


def written(folder: Path) -> list[Path]:
    """Every file under `folder` (hidden temporaries included), sorted."""
    return sorted(p for p in folder.rglob("*") if p.is_file())
