"""The per-op roofline (common.analysis.roofline_table): each shaped op's FLOPs and bytes over its kernels' time,
against the device's peaks, on real H200 traces, and the --explain table of the ops furthest below their roof."""

from __future__ import annotations

import pytest
from helpers import ROOT, command

from common.analysis.diagnosis import diagnose
from common.analysis.roofline_table import OpRoof, furthest_below, op_roofs, roof_table
from common.analysis.summary import main as summary_main
from common.physics import find_peak
from common.reader.build import read_trace
from common.reader.roofline import ShapedOp

FOREIGN = ROOT / "tests" / "fixtures" / "foreign"
H200 = find_peak("NVIDIA H200")
MM = ShapedOp("aten::mm", [[4096, 4096], [4096, 4096]], ["c10::BFloat16"] * 2, ["", ""])


@pytest.fixture(scope="module")
def zoo():
    """op_zoo.json.gz: an H200 trace of convs, norms, softmax, GeLU, add, sum and an embedding, forward and
    backward, with record_shapes (tests/fixtures/make_foreign_traces.py)."""
    return read_trace(FOREIGN / "op_zoo.json.gz")


def by_name(roofs: list[OpRoof]) -> dict[str, OpRoof]:
    """Op name -> its roof of the most time (an op of several shapes: its largest)."""
    out: dict[str, OpRoof] = {}
    for r in sorted(roofs, key=lambda r: r.us):
        out[r.op.name] = r
    return out


def test_every_op_with_kernels_in_op_zoo_has_flops_and_bytes(zoo):
    roofs = op_roofs(zoo, H200)
    names = {r.op.name for r in roofs}
    assert {
        "aten::cudnn_convolution", "aten::convolution_backward", "aten::native_layer_norm",
        "aten::native_layer_norm_backward", "aten::_fused_rms_norm", "aten::_fused_rms_norm_backward",
        "aten::_softmax", "aten::_softmax_backward_data", "aten::gelu", "aten::gelu_backward", "aten::add",
        "aten::sum", "aten::gather", "aten::embedding_dense_backward",
    } <= names  # fmt: skip
    assert [r.op.name for r in roofs if r.op.flops is None or r.op.bytes is None] == []


def test_op_zoo_layer_norm_is_memory_bound_and_its_conv_compute_bound(zoo):
    roofs = by_name(op_roofs(zoo, H200))
    assert roofs["aten::native_layer_norm"].bound == "memory"
    assert roofs["aten::cudnn_convolution"].bound == "compute"
    assert roofs["aten::convolution_backward"].bound == "compute"


def test_an_embeddings_gather_stays_within_its_roof(zoo):
    """gather's index is left out of its bytes: an embedding's is an expanded view (stride 0), and counted whole
    it made the gather run at 11 TB/s of the H200's 4.8."""
    [gather] = [r for r in op_roofs(zoo, H200) if r.op.name == "aten::gather"]
    assert 50 < gather.pct_roof <= 100


def test_the_ridge_point_is_the_peak_flops_over_the_peak_bandwidth():
    assert OpRoof(MM, 1, 100.0, 989.0, 4800.0).ridge == pytest.approx(989e12 / 4.8e12)


def test_an_ops_roof_is_the_slower_of_its_flops_and_bytes_at_peak():
    r = OpRoof(MM, 2, 1000.0, 989.0, 4800.0)
    assert r.roof_us == pytest.approx(2 * 2 * 4096**3 / 989e6)  # compute-bound: the FLOPs' time is the longer
    assert r.lost_us == pytest.approx(1000.0 - r.roof_us)
    copy = OpRoof(ShapedOp("aten::copy_", [[4096, 4096], [4096, 4096], []], ["float", "float", "Scalar"], []),
                  1, 100.0, 67.0, 4800.0)  # fmt: skip
    assert copy.roof_us == pytest.approx(2 * 4 * 4096**2 / 4800e3) and copy.bound == "memory"


def test_an_fp32_gemm_runs_against_the_peak_of_the_kernel_that_ran_it():
    """tf32_mm.json.gz runs one [4096, 4096] fp32 mm on FFMA, then on TF32 tensor cores: one shape, two roofs."""
    mms = {r.kernel.split("_")[4]: r for r in op_roofs(read_trace(FOREIGN / "tf32_mm.json.gz"), H200)}
    assert (mms["tf32f32"].peak_tflops, mms["f32f32"].peak_tflops) == (H200.tflops_tf32, H200.tflops_fp32)


def test_an_unknown_gpu_gets_no_roof(zoo):
    roofs = op_roofs(zoo, None)
    assert roofs and all(r.roof_us is None and r.bound is None for r in roofs)
    assert furthest_below(roofs) == [] and roof_table(zoo, None) is None


def test_an_op_of_zero_microseconds_has_no_rate_and_no_time_lost():
    r = OpRoof(MM, 1, 0.0, 989.0, 4800.0)
    assert (r.tflops, r.tbps, r.pct_roof, r.lost_us) == (None, None, None, None)


def test_explain_lists_the_ops_furthest_below_their_roof(capsys):
    code, out, _ = command(summary_main, capsys, FOREIGN / "op_zoo.json.gz", "--explain")
    assert code == 0
    table = out.split("furthest below their roof (per step)\n", 1)[1].split("\n\n", 1)[0].splitlines()
    assert table[0].split()[:3] == ["op", "shape", "calls"]
    assert table[2].startswith("embedding_dense_backw…") and table[2].endswith("memory")  # 307 µs, 9% of its roof
    assert len(table) == 2 + 5 and all(len(line) <= 120 for line in out.splitlines())


def test_without_explain_the_summary_has_no_roof_table(capsys):
    _, out, _ = command(summary_main, capsys, FOREIGN / "op_zoo.json.gz")
    assert "furthest below their roof" not in out


def top_kernels_table(out: str) -> list[str]:
    return out.split("Top 5 GPU work of foreign/op_zoo (over 3 steps)\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_wide_top_kernels_show_the_bytes_and_bound_of_their_ops(capsys):
    _, out, _ = command(summary_main, capsys, FOREIGN / "op_zoo.json.gz", "--wide")
    table = top_kernels_table(out)
    header = table[0].replace("% sum", "%sum").split()
    at = header.index("MB/step")
    assert header[at + 1] == "bound"
    [softmax] = [line.split() for line in table[2:] if line.split()[header.index("family")] == "softmax"]
    assert softmax[at : at + 2] == ["134", "memory"]  # _softmax of [8192, 4096] bf16: 67 MB read, 67 MB written


def test_the_default_top_kernels_table_has_no_bytes_column(capsys):
    _, out, _ = command(summary_main, capsys, FOREIGN / "op_zoo.json.gz")
    assert "MB/step" not in top_kernels_table(out)[0]


def test_markdown_shows_each_ops_whole_name_and_shape(capsys):
    _, out, _ = command(summary_main, capsys, FOREIGN / "op_zoo.json.gz", "--explain", "--markdown")
    assert "| convolution_backward | 32×128×56×56 32×64×56×56 128×64×3×3 |" in out
    assert "| embedding_dense_backward |" in out


@pytest.mark.parametrize(
    ("path", "named"),
    [
        (FOREIGN / "op_zoo.json.gz", "; convolution kernels at 20% of peak"),
        (ROOT / "tests/fixtures/h200/01_matmul_add/4096_bf16_warm_eager.json.gz", "; GEMM kernels at 79% of peak"),
    ],
    ids=["convolutions only", "a GEMM only"],
)
def test_the_verdict_names_the_kinds_of_kernel_it_rates(path, named):
    assert named in diagnose(read_trace(path)).verdict


def test_a_verdict_share_of_peak_below_one_percent_has_two_digits_not_zero():
    """The 4096 bf16 GEMM (79% of the H200's 989 TFLOP/s) against a peak 10,000 times higher: 0.0079%, not 0%."""
    trace = read_trace(ROOT / "tests/fixtures/h200/01_matmul_add/4096_bf16_warm_eager.json.gz")
    verdict = diagnose(trace, peak_tflops=9.89e6).verdict
    assert "; GEMM kernels at 0.0079% of peak" in verdict, verdict


def test_a_trace_without_record_shapes_gets_no_roof_table(capsys):
    """host_batch.json.gz (H200) runs convs and batch norms, profiled without record_shapes: no shapes, no
    figure."""
    assert op_roofs(read_trace(FOREIGN / "host_batch.json.gz"), H200) == []
    _, out, _ = command(summary_main, capsys, FOREIGN / "host_batch.json.gz", "--explain")
    assert "furthest below their roof" not in out


def test_flash_attention_at_4096_is_compute_bound_and_moves_q_k_v_o():
    trace = read_trace(ROOT / "tests/fixtures/h200/04_c_sdpa_attention/8_16_4096_64_flash_bf16_cold_eager.json.gz")
    [flash] = [r for r in op_roofs(trace, H200) if r.op.name == "aten::_flash_attention_forward"]
    assert flash.bound == "compute"
    assert flash.op.bytes == 4 * 2 * (8 * 4096 * 16 * 64)  # q, k, v read and o written, in bf16
