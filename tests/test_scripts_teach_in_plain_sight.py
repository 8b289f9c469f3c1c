"""Each numbered script holds the code its post teaches: the torch.profiler loop, and the Hub call."""

from __future__ import annotations

import ast

import pytest
from helpers import ROOT, SCRIPTS

HUB_SCRIPTS = {
    "03_kernels_mlp": 'get_kernel("kernels-community/liger-kernels", version=1)',
    "04_d_kernels_attention": "get_kernel(repo, version=version, revision=args.revision)",
}


def main_source(name: str) -> str:
    """The source of `main` in `<name>.py`."""
    text = (ROOT / f"{name}.py").read_text()
    node = next(n for n in ast.parse(text).body if isinstance(n, ast.FunctionDef) and n.name == "main")
    return ast.get_source_segment(text, node)


def test_there_are_eight_numbered_scripts():
    assert len(SCRIPTS) == 8


@pytest.mark.parametrize("name", SCRIPTS)
def test_main_holds_the_profiler_loop_part_1_prints(name):
    source = main_source(name)
    for piece in (
        "with profile(",
        "activities=activities(run),",
        "schedule=run.schedule.torch(),",
        "record_shapes=True,",
        "on_trace_ready=files.save,",
        ") as prof:",
        "for _ in range(run.schedule.steps):",
        "with record_function(",
        "sync(run)",
        "prof.step()",
        "with torch.no_grad()",
        "if run.warm:",
    ):
        assert piece in source, f"{name}.py main() lost {piece!r}"
    assert source.index("with record_function(") < source.index("prof.step()")


@pytest.mark.parametrize("name, call", HUB_SCRIPTS.items())
def test_hub_scripts_call_get_kernel_where_the_reader_sees_it(name, call):
    text = (ROOT / f"{name}.py").read_text()
    assert "from kernels import get_kernel" in text
    assert call in main_source(name)
