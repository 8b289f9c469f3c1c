"""benchmarks/tracelens_compare.py without TraceLens: matching two per-op lists, binning them, the suite's worker."""

from __future__ import annotations

import gzip
import json

import pytest
from helpers import ROOT, load_benchmark

LINEAR = ROOT / "tests" / "fixtures" / "h200" / "02_linear" / "1024_32_64_bf16_cold_eager.json.gz"


tc = load_benchmark("tracelens_compare")


def op(ext, name="aten::mm", flops=100.0, moved=10.0, category="GEMM", **fields):
    return tc.Op(ext=ext, name=name, flops=flops, bytes=moved, category=category, **fields)


def test_a_tracelens_row_holds_the_suite_op_its_kernels_carry():
    ours = [op("11", "aten::native_layer_norm", category="NORM_fwd")]
    theirs = [op("10", "aten::layer_norm", category="NORM_fwd", covers=("11", "11"))]
    [pair] = tc.match(ours, theirs)
    assert [o.ext for o in pair.suite] == ["11"] and pair.tracelens.ext == "10"


def test_ops_left_unmatched_fall_on_one_side_each():
    pairs = tc.match([op("1"), op("2")], [op("2"), op("3")])
    assert sorted(tc.bin_of(p) for p in pairs) == ["TraceLens only", "exact", "suite only"]


def test_a_row_holding_two_suite_ops_is_compared_with_their_sum():
    ours = [op("6", "aten::cudnn_convolution", flops=90.0, moved=6.0), op("9", "aten::add_", flops=10.0, moved=4.0)]
    theirs = [op("4", "aten::convolution", covers=("6", "9"))]
    [pair] = tc.match(ours, theirs)
    assert (pair.figure("flops"), pair.figure("bytes")) == (100.0, 10.0)
    assert tc.bin_of(pair) == "exact"


def test_ops_without_flops_on_either_side_make_no_pair():
    assert tc.match([op("1", flops=None)], [op("2", flops=None)]) == []


def test_an_op_the_suite_has_no_flops_for_is_tracelens_only():
    [pair] = tc.match([op("1", flops=None)], [op("1")])
    assert tc.bin_of(pair) == "TraceLens only"


@pytest.mark.parametrize(
    ("theirs", "expected"),
    [
        ((100.0, 10.0), "exact"),
        ((100.0 * (1 + 1e-12), 10.0), "exact"),  # GFLOPS multiplied back by 1e9
        ((100.5, 10.0), "within 1%"),
        ((100.0, 10.09), "within 1%"),
        ((101.6, 10.0), "differs"),
        ((100.0, 6.0), "differs"),
        ((100.0, None), "exact"),  # bytes compared only where both tools give them
        ((102.0, None), "differs"),
    ],
)
def test_bins_follow_the_larger_relative_difference(theirs, expected):
    [pair] = tc.match([op("1")], [op("1", flops=theirs[0], moved=theirs[1])])
    assert tc.bin_of(pair) == expected


def test_what_differs_names_only_the_figures_beyond_one_percent():
    [pair] = tc.match([op("1")], [op("1", flops=100.2, moved=6.0)])
    assert tc.what_differs(pair) == "bytes"


def test_addmms_bias_flops_explain_its_group():
    dims = [[64], [1024, 32], [32, 64], [], []]
    ours = [op("7", "aten::addmm", flops=4194304.0, moved=200832.0, dims=dims)]
    [pair] = tc.match(ours, [op("7", "aten::addmm", flops=4259840.0, moved=200832.0)])
    assert tc.bin_of(pair) == "differs" and tc.reasons([pair]) == ["addmm FLOPs"]


def test_a_difference_no_convention_explains_says_so():
    [pair] = tc.match([op("1", "aten::bmm")], [op("1", "aten::bmm", flops=200.0)])
    [line] = tc.group_lines([pair])
    assert line.endswith("Not explained.") and "FLOPs TraceLens/suite 2" in line


def test_the_count_table_totals_every_bin():
    pairs = tc.match([op("1"), op("2"), op("3", category="reduce")], [op("1"), op("2", flops=300.0)])
    lines = tc.count_table(tc.bin_counts(pairs))
    assert "| GEMM | 2 | 1 | 0 | 1 | 0 / 0 |" in lines
    assert "| reduce | 1 | 0 | 0 | 0 | 1 / 0 |" in lines
    assert lines[-1] == "| **all** | 3 | 1 | 0 | 1 | 1 / 0 |"


def test_the_ops_table_gives_both_figures_and_their_ratio():
    [pair] = tc.match([op("1", dims=[[8, 4], [4, 2], []])], [op("1", flops=200.0)])
    assert tc.op_lines([pair])[-1] == "| `aten::mm` | 8×4 4×2 | 100 | 200 | 2 | 10 | 10 | 1 |"


def test_the_report_has_a_table_per_trace_a_total_and_the_notes():
    trace = ROOT / "x.json.gz"
    ours = {str(trace): {"ops": [{"ext": "1", "name": "aten::mm", "flops": 2.0, "bytes": 3.0, "category": "GEMM"}]}}
    theirs = {str(trace): {"ops": [], "version": "0.1.0"}, "other": {"error": "KeyError"}}
    text = "\n".join(tc.report([trace, ROOT / "y.json"], [], ours, theirs, show_ops=False))
    assert "## x.json.gz" in text and "| GEMM | 1 | 0 | 0 | 0 | 1 / 0 |" in text
    assert "## y.json\n\nsuite: no result; TraceLens: no result" in text
    assert "## Total, every trace" in text and "- attention dtype (explains 0 ops here)" in text


def test_pandas_float_external_ids_are_read_as_integers():
    assert [tc._external(2564.0), tc._external(7), tc._external("a")] == ["2564", "7", "a"]


def test_only_chrome_traces_are_compared(tmp_path):
    (tmp_path / "t.json.gz").write_bytes(gzip.compress(json.dumps({"traceEvents": []}).encode()))
    (tmp_path / "list.json").write_text("[1, 2]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "events.jsonl").write_text('{"traceEvents": []}')
    found = tc.fixtures(tmp_path)
    assert [p.name for p in found] == ["broken.json", "list.json", "t.json.gz"]
    assert [p.name for p in found if tc.is_chrome_trace(p)] == ["t.json.gz"]


def test_the_suite_worker_gives_a_fixtures_gemms_their_flops(capsys):
    tc.suite_worker([LINEAR])
    [result] = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    ops = result["ops"]
    assert [o["name"] for o in ops] == ["aten::addmm"] * 3  # one a step, the op that launched the kernel
    assert {(o["flops"], o["bytes"], o["category"]) for o in ops} == {(2 * 1024 * 32 * 64, 200832.0, "GEMM")}
    assert len({o["ext"] for o in ops}) == 3
