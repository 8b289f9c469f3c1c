"""Each numbered script holds the code its post teaches, in torch's own words: the profiler loop, and the Hub call."""

from __future__ import annotations

import ast
import json
import textwrap
from types import SimpleNamespace

import pytest
import torch
from helpers import ROOT, SCRIPTS, load_script
from torch.profiler import ProfilerActivity, profile, record_function, schedule

HUB_SCRIPTS = {
    "03_kernels_mlp": 'get_kernel("kernels-community/liger-kernels", version=1)',
    "04_d_kernels_attention": "get_kernel(repo, version=version, revision=args.revision)",
}
TORCH_WORDS = (
    "ProfilerActivity.CPU",
    "ProfilerActivity.CUDA",
    "schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1)",
    "record_shapes=True",
    "for _ in range(args.wait + args.warmup_steps + args.active):",
    "with record_function(",
    "torch.cuda.synchronize()",
    "prof.step()",
)
# The suite's lines around the loop, each called once in main(): flags, the setup line, the fit, the estimate (where
# the script's reference and checked step come before the guard: 05), the guard, the tail
PLUMBING = {"make_parser", "add_shape_flags", "shape_of", "setup", "fit_machine", "say_estimate", "recording", "finish"}


def source(name: str) -> str:
    return (ROOT / f"{name}.py").read_text()


def main_node(name: str) -> ast.FunctionDef:
    return next(n for n in ast.parse(source(name)).body if isinstance(n, ast.FunctionDef) and n.name == "main")


def profile_block(name: str) -> ast.With:
    """The `with profile(...) as prof:` statement inside main()."""
    for node in ast.walk(main_node(name)):
        if isinstance(node, ast.With) and any(
            isinstance(i.context_expr, ast.Call) and getattr(i.context_expr.func, "id", None) == "profile"
            for i in node.items
        ):
            return node
    raise AssertionError(f"{name}.py main() has no `with profile(...)` block")


def suite_names(name: str) -> set[str]:
    """Every name the script imports from the suite's `common` package."""
    tree = ast.parse(source(name))
    return {
        alias.asname or alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("common")
        for alias in node.names
    }


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_profiler_loop_is_written_in_torchs_own_words(name):
    block = ast.get_source_segment(source(name), profile_block(name))
    for words in TORCH_WORDS:
        assert words in block, f"{name}.py: the profiler block lost {words!r}"
    assert block.index("with record_function(") < block.index("torch.cuda.synchronize()") < block.index("prof.step()")


@pytest.mark.parametrize("name", SCRIPTS)
def test_nothing_of_the_suite_is_inside_the_profiler_block_but_its_writer(name):
    used = {n.id for n in ast.walk(profile_block(name)) if isinstance(n, ast.Name)}
    assert not used & suite_names(name), f"{name}.py: suite helpers inside the profiler block"
    writers = [
        ast.unparse(n)
        for n in ast.walk(profile_block(name))
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "rec"
    ]
    assert writers == ["rec.save"], f"{name}.py: the block uses the suite's guard beyond on_trace_ready: {writers}"


@pytest.mark.parametrize("name", SCRIPTS)
def test_the_plumbing_around_the_loop_is_a_few_lines(name):
    tree = ast.parse(source(name))
    torch_at = next(n.lineno for n in tree.body if isinstance(n, ast.Import) and n.names[0].name == "torch")
    imports = [n for n in tree.body if isinstance(n, ast.ImportFrom) and (n.module or "").startswith("common")]
    imports = [n for n in imports if n.lineno > torch_at]  # the flags and refusals before torch, above the imports
    ddp = {"common.harness.torchrun", "common.harness.ranks"}  # 06's launch and its ranks' one voice
    assert len([n for n in imports if n.module not in ddp]) <= 6, f"{name}.py imports from {len(imports)} modules"
    plumbing = {
        alias.asname or alias.name
        for node in imports
        if node.module in ("common.harness.runtime", "common.harness.recording", "common.harness.machine")
        for alias in node.names
    }
    calls = [
        n.func.id
        for n in ast.walk(main_node(name))
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id in plumbing
    ]
    assert set(calls) <= PLUMBING and len(calls) == len(set(calls)), f"{name}.py main() calls the plumbing: {calls}"


@pytest.mark.parametrize("name, call", HUB_SCRIPTS.items())
def test_hub_scripts_call_get_kernel_where_the_reader_sees_it(name, call):
    assert "from kernels import get_kernel" in source(name)
    assert call in ast.get_source_segment(source(name), main_node(name))


def test_the_loop_copied_out_of_a_script_runs_on_plain_torch(tmp_path):
    """Delete the suite's lines around 01_matmul_add.py's loop: what is left runs with torch alone."""
    block = textwrap.dedent(ast.get_source_segment(source("01_matmul_add"), profile_block("01_matmul_add")))
    trace = tmp_path / "copied.json"
    x, w, b = (torch.randn(8, 8) for _ in range(3))
    namespace = {
        "torch": torch,
        "ProfilerActivity": ProfilerActivity,
        "profile": profile,
        "record_function": record_function,
        "schedule": schedule,
        "args": SimpleNamespace(wait=1, warmup_steps=1, active=2, memory=False),
        "run": SimpleNamespace(on_gpu=False),
        "rec": SimpleNamespace(save=lambda prof: prof.export_chrome_trace(str(trace))),  # the reader's own writer
        "fn": load_script("01_matmul_add").matmul_add,
        "x": x,
        "w": w,
        "b": b,
    }
    exec(compile(block, "copied-loop", "exec"), namespace)
    names = [e.get("name") for e in json.loads(trace.read_text())["traceEvents"]]
    assert names.count("matmul_add") == 2 and "ProfilerStep#2" in names and "aten::mm" in names
    torch.testing.assert_close(namespace["y"], torch.add(torch.matmul(x, w), b))


@pytest.mark.parametrize("name", SCRIPTS)
def test_main_never_changes_the_flags_it_parsed(name):
    """05 and 06 set args.dtype, args.compile and args.device after parsing, so a flag read later was not the
    reader's (issue 33); a script's own rule (training_precision, a GPU per rank) goes to setup() instead."""
    written = [
        f"{name}.py:{node.lineno} args.{target.attr}"
        for node in ast.walk(main_node(name))
        if isinstance(node, (ast.Assign, ast.AugAssign))
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        for target in (target.elts if isinstance(target, ast.Tuple) else [target])
        if isinstance(target, ast.Attribute) and getattr(target.value, "id", None) == "args"
    ]
    assert not written, written
