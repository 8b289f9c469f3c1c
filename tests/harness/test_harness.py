"""The shared harness: tags, atomic export, table sort keys, correctness checks, guesses."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
import torch
from helpers import ROOT, load_script, tiny_gpu_trace
from torch.profiler import ProfilerActivity, profile

from common.cli import SuiteError
from common.harness.checks import check_close
from common.harness.export import key_averages_table
from common.harness.guess import check_guess, expect_kernels, expect_launches, expect_memcpy, expect_op, format_verdicts
from common.harness.loop import Schedule, options_tag_part
from common.harness.runtime import Run
from common.physics import Work, achieved, find_peak
from common.reader.build import parse
from common.reader.model import GpuOp, Step, Trace
from common.reader.naming import kernel_family, short_name


def make_run(tmp_path: Path, **kw) -> Run:
    base = dict(
        script="x",
        device=torch.device("cpu"),
        dtype=torch.bfloat16,
        dtype_name="bf16",
        warm=False,
        compiled=False,
        planned_steps=5,
        traces_dir=tmp_path,
    )
    return Run(**{**base, **kw})


def test_tag_encodes_dtype_warmth_mode_and_names_a_non_default_schedule(tmp_path):
    assert make_run(tmp_path).tag(64) == "64_bf16_cold_eager"
    assert (
        make_run(tmp_path, warm=True, compiled=True, dtype_name="fp16").tag(8, 16, "flash")
        == "8_16_flash_fp16_warm_compiled"
    )
    assert [Schedule().tag_part(), Schedule(0, 0, 20).tag_part(), Schedule(1, 1, 3, 2).tag_part()] == [
        "",
        "w0u0a20",
        "w1u1a3r2",
    ]


def test_tag_encodes_cpu_threads_and_every_option_that_changes_the_trace(tmp_path):
    assert make_run(tmp_path, threads=2).tag(64) == "64_bf16_cold_eager_threads2"
    assert make_run(tmp_path, threads=2, device=torch.device("cuda")).tag(64) == "64_bf16_cold_eager"  # GPU: unused
    printed_only = {"bench": True, "per_step": True, "strict": True, "peak_tflops": 9.0, "peak_gbps": 9.0}
    assert make_run(tmp_path, memory=True, **printed_only).tag(64) == "64_bf16_cold_eager"  # the loop's options say
    usual = {"record_shapes": True, "profile_memory": False, "with_stack": False, "with_flops": False}
    assert options_tag_part(usual) == ""
    assert options_tag_part({**usual, "profile_memory": True}) == "memory"
    assert options_tag_part({"record_shapes": False, "with_stack": True, "with_flops": True, "with_modules": True}) == (
        "noshapes_stack_flops_modules"
    )


def test_table_falls_back_when_the_gpu_sort_key_is_refused():
    class Averages:
        def table(self, sort_by=None, row_limit=-1):
            if sort_by == "cuda_time_total":
                raise AttributeError("'FunctionEventAvg' object has no attribute 'cuda_time_total'")
            return f"sorted by {sort_by}"

    assert key_averages_table(Averages(), on_gpu=True) == "sorted by device_time_total"
    assert key_averages_table(Averages(), on_gpu=False) == "sorted by cpu_time_total"


def test_check_close_accepts_rounding_and_rejects_a_wrong_result(capsys):
    ref = torch.randn(32, 32)
    check_close(ref.to(torch.bfloat16), ref, torch.bfloat16, "rounded")
    assert "rounded matches the reference" in capsys.readouterr().out
    with pytest.raises(SuiteError, match="disagrees with the reference"):
        check_close(ref + 1, ref, torch.bfloat16, "shifted")
    with pytest.raises(SuiteError, match="disagrees"):
        check_close(torch.full_like(ref, float("nan")), ref, torch.float32, "nan")


@pytest.mark.parametrize(
    "name, family",
    [
        ("nvjet_sm90_tst_128x256_64x4_1x2_h_bz_coopA_NTT", "gemm"),
        ("ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_stages_32x5_tn", "gemm"),
        ("cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_32x1_tn_align8", "gemm"),
        ("volta_sgemm_128x64_tn", "gemm"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<64, 128> >(Flash_fwd_params)", "attention"),
        (
            "cudnn_generated_fort_native_sdpa_sm80_flash_fprop_wmma_f16_knob_6_128x64x64_4x1x1_cga1x1x1_kernel0_0",
            "attention",
        ),
        ("triton_poi_fused__unsafe_view_gelu_mul_0", "triton"),
        ("void (anonymous namespace)::cunn_SoftMaxForward<8, float>(float*, float const*, int)", "softmax"),
        ("void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl>(int, float*)", "pointwise"),
        ("_geglu_tanh_forward_kernel", "other"),
    ],
)
def test_kernel_families_are_portable_across_gpus(name, family):
    assert kernel_family(name) == family


def test_short_name_drops_templates_and_arguments():
    assert (
        short_name("void at::native::vectorized_elementwise_kernel<4, Foo<int> >(int, float*)")
        == "at::native::vectorized_elementwise_kernel<…>"
    )


def gpu_trace(kernel_names: list[str], memcpys: int, ops: dict[str, int]) -> Trace:
    steps = []
    for n in (2, 3, 4):
        step = Step(
            n,
            n * 100.0,
            90.0,
            region_us=50.0,
            cpu_ops=Counter(ops),
            runtime=Counter({"cudaLaunchKernel": len(kernel_names)}),
        )
        step.gpu = [GpuOp("kernel", k, 10.0) for k in kernel_names] + [
            GpuOp("gpu_memcpy", "Memcpy DtoD", 2.0)
        ] * memcpys
        steps.append(step)
    return Trace(path=Path("t.json"), label="attn_fwd", steps=steps, has_gpu=True, device_name="NVIDIA H200", meta={})


def test_guess_vs_trace_marks_matches_and_shouts_about_a_miss():
    trace = gpu_trace(
        ["ampere_sgemm", "elementwise_kernel", "cunn_SoftMaxForward", "ampere_sgemm"], 1, {"aten::masked_fill": 1}
    )
    guess = [
        expect_kernels("gemm", 2, "two GEMMs"),
        expect_kernels("softmax", 1, "softmax"),
        expect_memcpy(0, "no copy expected"),
        expect_op("aten::masked_fill", 1, "out of place"),
        expect_launches("cudaLaunchKernel", 4, "one per kernel"),
    ]
    verdicts = check_guess(trace, guess)
    assert [v.matched for v in verdicts] == [True, True, False, True, True]
    text = "\n".join(format_verdicts(verdicts, trace))
    assert "[MISS] memcpy on the GPU" in text
    assert "1 of 5 checked guesses did not match the trace" in text
    assert any(line.split()[2:3] == ["memcpy"] and "Memcpy DtoD" in line for line in text.splitlines())


def test_on_a_cpu_trace_only_cpu_op_guesses_are_checked():
    trace = gpu_trace([], 0, {"aten::mm": 1})
    trace.has_gpu = False
    verdicts = check_guess(trace, [expect_kernels("gemm", 1, "one GEMM"), expect_op("aten::mm", 1, "mm")])
    assert [v.checked for v in verdicts] == [False, True]
    assert "only the CPU-op lines can be checked" in "\n".join(format_verdicts(verdicts, trace))


def test_report_exits_1_under_strict_when_a_guess_misses(tmp_path, monkeypatch):
    module = load_script("02_linear")
    monkeypatch.setattr(module, "guess", lambda compiled: [expect_op("aten::add", 1, "a wrong guess on purpose")])
    argv = ["--batch", "4", "--in_dim", "4", "--out_dim", "4", "--traces-dir", str(tmp_path)]
    assert module.main(argv) == 0
    assert module.main([*argv, "--strict"]) == 1


def test_percent_of_peak_only_where_the_peak_is_known():
    work = Work(flops=989e12 * 1e-3, bytes=4.8e12 * 1e-3)
    h200 = achieved(work, 2e-3, find_peak("NVIDIA H200"), "bf16")
    assert h200.pct_flops == pytest.approx(50.0) and h200.pct_bytes == pytest.approx(50.0)
    assert find_peak("Some Future GPU") is None
    assert achieved(work, 1e-3, None, "bf16").pct_flops is None
    assert find_peak("Some Future GPU", tflops=100.0).tflops("bf16") == 100.0


def test_short_name_keeps_an_anonymous_namespace():
    name = "void (anonymous namespace)::cunn_SoftMaxForward<8, c10::BFloat16, float>(c10::BFloat16*, int)"
    assert short_name(name) == "(anonymous namespace)::cunn_SoftMaxForward<…>"


def test_short_name_drops_nested_argument_lists_and_keeps_what_the_kernel_computes():
    name = (
        "void at::native::elementwise_kernel<128, 4, Foo>(int, at::native::gpu_kernel_impl_nocast<"
        "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&)::{lambda(bool)#1}>)"
    )
    assert short_name(name) == "at::native::elementwise_kernel<…masked_fill_kernel…>"
    mul = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
        "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, float)"
    )
    assert short_name(mul) == "at::native::vectorized_elementwise_kernel<…MulFunctor…>"


def test_profiler_table_with_every_option_fits_120_columns_and_keeps_the_times():
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True, with_flops=True, record_shapes=True) as prof:
        (x @ x).relu()
    averages = prof.key_averages()
    assert max(map(len, key_averages_table(averages, False).splitlines())) > 120  # torch's own is wider
    table = key_averages_table(averages, False, 10, 120)
    assert max(map(len, table.splitlines())) <= 120
    assert all(word in table for word in ("Name", "Self CPU", "CPU total", "# of Calls", "aten::mm"))


def test_guess_vs_trace_with_the_gpu_work_fits_120_columns():
    trace = parse(tiny_gpu_trace())
    lines = format_verdicts(check_guess(trace, [expect_kernels("gemm", 1, "one GEMM " * 30)]), trace)
    assert any(line.startswith("GPU work of step #2") for line in lines)
    assert max(map(len, lines)) <= 120, max(lines, key=len)


def test_the_default_traces_folder_is_the_repository_s_traces():
    """A script run without --traces-dir writes into <repo>/traces, wherever its module sits in common/."""
    from common.harness import runtime

    assert runtime.REPO_ROOT == ROOT and (ROOT / "01_matmul_add.py").is_file()


def test_a_guess_note_never_leaves_a_word_alone_on_a_line_and_fits_120_columns():
    from common.harness.guess import note_lines

    notes = [
        "one mm per projection (replayed under graphs: none)",
        "qkv, out, gate, up, down; cuBLAS may split a long-K one",
        "the optimizer is not compiled: its launches stay, under --cudagraphs too",
        "decay, lerp, mul, addcmul, sqrt, div, add eps, addcdiv: one each for all seven parameters of the block",
    ]
    for note in notes:
        for width in range(20, 118):
            lines = note_lines(" " * width, note)
            assert all(len(line) <= 120 for line in lines), (width, lines)
            assert " ".join(" ".join(line.split()) for line in lines).strip() == note
            alone = [line for line in lines[1:] if len(line.split()) == 1]
            assert not alone, (width, lines)
