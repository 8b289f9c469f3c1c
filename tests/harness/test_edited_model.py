"""The reader edits the model a script profiles (helpers.MODEL_EDITS): the run keeps its trace and table, says the
output no longer matches its reference and where that reference is, marks the trace so, and exits 1 only under
--strict."""

from __future__ import annotations

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
