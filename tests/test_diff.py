"""python -m common.diff: what changed between two variants, headline first."""

from __future__ import annotations

import json

from helpers import CPU_DTYPE, FIXTURES, command, run, tiny_gpu_trace

from common.diff import KernelUse, main, match_kernels
from common.trace import GpuOp

ATTN = "8_16_1024_64_bf16_cold_eager"


def fixture(script: str, tag: str) -> str:
    return str(FIXTURES / script / f"{tag}.json.gz")


def diff(capsys, *argv: object) -> tuple[int, str, str]:
    return command(main, capsys, *argv)


def headline_of(out: str) -> str:
    """The diff's one-sentence headline (wrapped at 120 columns), as one line."""
    return " ".join(out.split("\n\n")[1].split())


def test_in_place_masking_removes_the_memcpy_and_the_clone(capsys):
    code, out, _ = diff(capsys, fixture("04_a_naive_attention", ATTN), fixture("04_b_inplace_ops_attention", ATTN))
    assert code == 0
    headline = headline_of(out)
    assert headline.startswith("Gone: Memcpy DtoD (128 µs); GPU busy 1.06 ms → 936 µs per step (−12%)")
    assert "aten::clone" in headline and "gone from the CPU side" in headline
    assert "note: different scripts (04_a_naive_attention vs 04_b_inplace_ops_attention)" in out
    removed = [line.split() for line in out.splitlines() if line.startswith("removed")]
    assert ["removed", "memcpy", "1", "0", "128", "µs", "0", "−128", "µs", "99%", "Memcpy", "DtoD"] in removed
    assert ["removed", "aten::clone", "1", "0"] in removed


def test_math_to_flash_is_twenty_kernels_to_one(capsys):
    sdpa = "04_c_sdpa_attention"
    code, out, _ = diff(capsys, fixture(sdpa, "8_16_1024_64_math_bf16_cold_eager"),
                        fixture(sdpa, "8_16_1024_64_flash_bf16_cold_eager"))  # fmt: skip
    headline = headline_of(out)
    assert code == 0 and "20 kernels per step → 1" in headline and "new: pytorch_flash::flash_fwd_kernel" in headline
    assert "note:" not in out  # one script, one shape: comparable
    kernels = next(line.split() for line in out.splitlines() if line.startswith("kernels "))
    assert kernels == ["kernels", "20", "1", "−19", "−95%"]


def test_compiling_the_mlp_fuses_gelu_and_mul_into_one_triton_kernel(capsys):
    mlp = "03_simple_mlp"
    code, out, _ = diff(capsys, fixture(mlp, "64_128_768_3072_bf16_cold_eager"),
                        fixture(mlp, "64_128_768_3072_bf16_cold_compiled"))  # fmt: skip
    headline = headline_of(out)
    assert code == 0 and "GeluCUDAKernelImpl" in headline and "MulFunctor" in headline
    assert "new: triton_poi_fused__unsafe_view_gelu_mul_0" in headline and "5 kernels per step → 4" in headline


def test_each_kernel_row_is_a_share_of_the_gross_change_never_over_100_percent(capsys):
    mlp = "03_simple_mlp"
    code, out, _ = diff(capsys, fixture(mlp, "64_128_768_3072_bf16_cold_eager"),
                        fixture(mlp, "64_128_768_3072_bf16_cold_compiled"))  # fmt: skip
    table = out.split("GPU work added, removed or changed")[1].split("\n\n")[0]
    shares = [int(w[:-1]) for line in table.splitlines()[3:] for w in line.split() if w.endswith("%")]
    assert shares and all(0 <= s <= 100 for s in shares) and sum(shares) <= 101
    assert "(of |Δ|: each row's share of the gross change" in table


def test_the_same_gemm_on_another_gpu_is_paired_not_added_and_removed():
    a100 = {
        ("kernel", "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"): KernelUse(
            GpuOp("kernel", "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn", 90.0), 1, 90.0
        )
    }
    h200 = {("kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT"): KernelUse(
        GpuOp("kernel", "nvjet_sm90_tst_256x128_64x4_1x2_h_bz_coopA_TNT", 57.0), 1, 57.0)}  # fmt: skip
    [(a, b)] = match_kernels(a100, h200)
    assert a is not None and b is not None and a.op.family == b.op.family == "gemm"


def test_cpu_traces_diff_their_cpu_ops(tmp_path, capsys):
    small = ["--batch", "1", "--heads", "2", "--seq", "32", "--head_dim", "8"]
    assert run("04_a_naive_attention", tmp_path, *small) == 0
    assert run("04_b_inplace_ops_attention", tmp_path, *small) == 0
    tag = f"1_2_32_8_{CPU_DTYPE}_cold_eager.json"
    capsys.readouterr()
    code, out, _ = diff(capsys, tmp_path / "04_a_naive_attention" / tag, tmp_path / "04_b_inplace_ops_attention" / tag)
    assert code == 0 and "aten::clone" in out.splitlines()[4] and "CPU" in out
    assert out.splitlines()[1] == "CPU = record_function 'attn_fwd' (the suite's label)"
    assert "GPU busy" not in out and "peak MB" not in out  # GPU figures are absent on the CPU, never zero


def test_the_same_file_twice_is_an_empty_diff_said_so(capsys):
    path = fixture("02_linear", "1024_32_64_bf16_cold_eager")
    code, out, _ = diff(capsys, path, path)
    assert code == 0 and "No difference: A and B are the same trace file." in out


def test_a_file_that_is_not_a_trace_is_one_error_line(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    good = tmp_path / "good.json"
    good.write_text(json.dumps(tiny_gpu_trace()))
    code, out, err = diff(capsys, good, bad)
    assert (code, out) == (2, "") and err.count("\n") == 1 and str(bad) in err
    code, _, err = diff(capsys, good, tmp_path / "missing.json")
    assert code == 2 and "no such trace file" in err


def test_markdown_diff_is_pipe_tables(capsys):
    code, out, _ = diff(capsys, fixture("04_a_naive_attention", ATTN), fixture("04_b_inplace_ops_attention", ATTN),
                        "--markdown")  # fmt: skip
    assert code == 0 and out.startswith("### diff:") and "|  | A | B | Δ | Δ% |" in out
