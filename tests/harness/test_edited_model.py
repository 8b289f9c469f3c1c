"""The reader edits the model a script profiles (helpers.MODEL_EDITS): the run keeps its trace and table, says the
output no longer matches its reference and where that reference is, marks the trace so, and exits 1 only under
--strict."""

from __future__ import annotations

import contextlib
import io

import pytest
from helpers import run_edited

SILU = "gelu -> silu"


def test_an_edited_model_keeps_its_trace_marked_as_not_matching(tmp_path):
    result = run_edited("03_simple_mlp", SILU, tmp_path)
    assert result["code"] == 0, result["out"][-2000:] + result["err"][-2000:]
    assert "error:" not in result["err"] and "Traceback" not in result["out"] + result["err"]
    (name, trace), *_ = result["traces"].items()
    reference = trace["meta"]["reference"]
    assert reference["matches"] is False and reference["max_diff"] > reference["tolerance"] > 0
    assert "03_simple_mlp.py:" in reference["where"]  # the edited copy, wherever it is


def test_an_edited_model_says_where_its_reference_is(tmp_path):
    out = run_edited("03_simple_mlp", SILU, tmp_path)["out"]
    lines = out.splitlines()
    mismatch = next(i for i, line in enumerate(lines) if line.startswith("MISMATCH: SimpleGeGLUMLP: output disagrees"))
    at = next(i for i in range(mismatch, len(lines)) if lines[i].startswith("  the reference: "))
    where = " ".join(line.strip() for line in lines[at : at + 3])
    assert "(expected = ...), from geglu_reference at common/workloads/mlp.py:" in where
    assert "guess vs trace" in out and "trace: " in out  # the report and the files, as for a matching run
    assert all(len(line) <= 120 for line in lines[mismatch : at + 3])  # (the share line holds the tmp path)


def test_an_edited_model_exits_1_under_strict(tmp_path):
    result = run_edited("03_simple_mlp", SILU, tmp_path, "--strict")
    assert result["code"] == 1 and result["traces"], result["err"]


TALLER = "x four times as tall"


def test_a_taller_x_is_rated_from_the_shapes_its_ops_ran(tmp_path):
    """Issue 48 item 4: x made [4N, N] inside 01 (the flags still say N): the physics line and the verdict's rate use
    the FLOPs of the aten::mm record_shapes saw, 4 · 2N³, and one line says the flags' figure disagrees."""
    result = run_edited("01_matmul_add", TALLER, tmp_path)
    assert result["code"] == 0, result["out"][-2000:] + result["err"][-2000:]
    lines = result["out"].splitlines()
    n = 16  # helpers.TINY_FLAGS
    said = [line for line in lines if line.startswith("shapes: ")]
    assert len(said) == 1 and "4x the flags'" in said[0] and "rated from the ops' shapes" in said[0], said
    assert len(said[0]) <= 120
    physics = next(line for line in lines if line.startswith("physics: "))
    assert physics.startswith(f"physics: {4 * 2 * n**3 / 1e9:.3g} GFLOP and — MB"), physics


def test_a_taller_x_rates_its_trace_from_its_shapes_when_read_again(tmp_path):
    from common.analysis.figures import summarize
    from common.reader.build import read_trace

    run_edited("01_matmul_add", TALLER, tmp_path)
    [path] = (tmp_path / "traces" / "01_matmul_add").glob("*.json")
    trace = read_trace(path)
    row = summarize(trace)
    assert trace.meta["flops"] == 2 * 16**3 + 16**2  # the flags' figure, as written
    assert row.tflops == pytest.approx(4 * 2 * 16**3 / (row.cpu_us * 1e-6) / 1e12) and row.gbps is None


def test_an_unedited_run_says_nothing_of_its_shapes(tmp_path):
    from helpers import run

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run("01_matmul_add", tmp_path, "--size", "16") == 0
    text = out.getvalue()
    assert "physics: " in text and "shapes: " not in text
    assert f"physics: {(2 * 16**3 + 16**2) / 1e9:.3g} GFLOP and at least" in text
