"""Real traces from an NVIDIA H200 (the scripts at the posts' flags), pinning what a reader finds in them.

Recorded with torch 2.11.0+cu130 on the H200 (python3 <script> at the posts' flags, `kernels` 0.17.2 and
liger-kernel 0.8.5 carried as wheels, no network) and committed gzipped under
tests/fixtures/h200/<script>/<tag>.json.gz. 04_d ran from a local kernel directory whose flash_attn_func
calls PyTorch's FlashAttention-2 kernel on [B, S, H, D] (the Hub was unreachable there).
"""

from __future__ import annotations

import re

import pytest
from helpers import FIXTURES, load_script

from common.analysis.summary import main as summary_main
from common.analysis.tables import step_table
from common.harness.guess import check_guess, format_verdicts
from common.reader.build import read_trace
from common.reader.model import Trace
from common.reader.naming import kernel_family

ALL = sorted(FIXTURES.rglob("*.json.gz"))


def fixture(script: str, tag: str) -> Trace:
    return read_trace(FIXTURES / script / f"{tag}.json.gz")


def per_step(trace: Trace, count) -> set[int]:
    """The distinct values of `count(step)` over the profiled steps (one value: every step agrees)."""
    return {count(step) for step in trace.steps}


def guess_for(script_module, script: str, tag: str) -> list:
    """Call the script's own guess() with the parameters its tag encodes."""
    compiled = "_compiled" in tag
    if script == "01_matmul_add":
        return script_module.guess(compiled, "x" in tag.split("_")[0])
    if script == "04_c_sdpa_attention":
        return script_module.guess(tag.split("_")[4], compiled, True, "_fp32_" not in tag)
    if script == "04_d_kernels_attention":  # <batch>_<heads>_<seq>_<head_dim>_<source>_<dtype>_<cold|warm>_<mode>
        return script_module.guess("_".join(tag.split("_")[4:-3]))
    if script == "05_training_step":
        variant = "cudagraphs" if "_cudagraphs_" in tag else "compile" if compiled else "eager"
        return script_module.guess(variant, "amp" if "_amp_" in tag else tag.split("_")[5], "_fusedadamw_" in tag, True)
    return script_module.guess(compiled)


def test_the_fixtures_are_real_gpu_traces_of_their_schedule():
    assert len(ALL) >= 21
    for path in ALL:
        trace = read_trace(path)
        assert trace.has_gpu and trace.device_name == "NVIDIA H200", path
        expected = list(range(20)) if path.name.endswith("_w0u0a20.json.gz") else [2, 3, 4]
        assert [s.number for s in trace.steps] == expected, path
        assert path.stat().st_size < 100_000


@pytest.mark.parametrize("path", ALL, ids=lambda p: f"{p.parent.name}/{p.name.removesuffix('.json.gz')}")
def test_every_scripts_guess_matches_its_h200_trace(path):
    name, tag = path.parent.name, path.name.removesuffix(".json.gz")
    verdicts = check_guess(read_trace(path), guess_for(load_script(name), name, tag))
    assert all(v.checked for v in verdicts)
    missed = [(v.expect.title, v.expect.count, v.seen) for v in verdicts if not v.matched]
    assert not missed, f"{name}/{tag}: {missed}"


def test_naive_attention_hides_a_device_to_device_memcpy_that_inplace_does_not():
    naive = fixture("04_a_naive_attention", "8_16_1024_64_bf16_cold_eager")
    inplace = fixture("04_b_inplace_ops_attention", "8_16_1024_64_bf16_cold_eager")
    assert per_step(naive, lambda s: len(s.memcpy)) == {1}
    assert all("DtoD" in name for s in naive.steps for name in (op.name for op in s.memcpy))
    assert per_step(inplace, lambda s: len(s.memcpy)) == {0}
    assert per_step(naive, lambda s: s.cpu_ops["aten::masked_fill"]) == {1}
    assert per_step(inplace, lambda s: s.cpu_ops["aten::masked_fill"]) == {0}
    # the same five kernels otherwise: 2 GEMMs, scale, mask, softmax
    assert per_step(naive, lambda s: len(s.kernels)) == per_step(inplace, lambda s: len(s.kernels)) == {5}


@pytest.mark.parametrize("backend", ["flash", "efficient", "cudnn"])
def test_fused_sdpa_backends_run_one_attention_kernel_per_step(backend):
    trace = fixture("04_c_sdpa_attention", f"8_16_1024_64_{backend}_bf16_cold_eager")
    assert per_step(trace, lambda s: len(s.kernels)) == {1}
    assert per_step(trace, lambda s: s.kernels[0].family) == {"attention"}


def test_sdpa_math_launches_twenty_kernels_and_is_slower_than_the_naive_version():
    math = fixture("04_c_sdpa_attention", "8_16_1024_64_math_bf16_cold_eager")
    inplace = fixture("04_b_inplace_ops_attention", "8_16_1024_64_bf16_cold_eager")
    assert per_step(math, lambda s: len(s.kernels)) == {20}
    assert per_step(math, lambda s: s.cpu_ops["aten::_safe_softmax"]) == {1}
    assert math.per_step(lambda s: s.gpu_busy_us) > 2 * inplace.per_step(lambda s: s.gpu_busy_us)


def test_cudnn_launches_through_the_driver_and_skips_the_transposes():
    cudnn = fixture("04_c_sdpa_attention", "8_16_1024_64_cudnn_bf16_cold_eager")
    flash = fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager")
    assert per_step(cudnn, lambda s: s.calls("cuLaunchKernelEx")) == {1}
    assert per_step(cudnn, lambda s: s.calls("cudaLaunchKernel")) == {0}
    assert per_step(cudnn, lambda s: s.cpu_ops["aten::transpose"]) == {0}
    assert per_step(flash, lambda s: s.calls("cudaLaunchKernel")) == {1}
    assert min(per_step(flash, lambda s: s.cpu_ops["aten::transpose"])) >= 1


def test_compiled_mlp_fuses_gelu_and_mul_into_one_triton_kernel():
    trace = fixture("03_simple_mlp", "64_128_768_3072_bf16_cold_compiled")
    eager = fixture("03_simple_mlp", "64_128_768_3072_bf16_cold_eager")
    for step in trace.steps:
        triton = [k.name for k in step.kernels if k.name.startswith("triton_")]
        assert len(triton) == 1 and re.search(r"gelu.*mul|mul.*gelu", triton[0])
        assert sum(k.family == "gemm" for k in step.kernels) == 3
    assert per_step(eager, lambda s: len(s.kernels)) == {5}


def test_liger_runs_three_gemms_and_one_hand_written_geglu_kernel():
    trace = fixture("03_kernels_mlp", "64_128_768_3072_pypi_bf16_cold_eager")
    for step in trace.steps:
        names = [k.name for k in step.kernels]
        assert sum(kernel_family(n) == "gemm" for n in names) == 3
        assert [n for n in names if kernel_family(n) != "gemm"] == ["_geglu_tanh_forward_kernel"]


def test_hopper_gemms_launch_with_culaunchkernelex_and_no_occupancy_query():
    """On the posts' A100 each cuBLAS GEMM followed an occupancy query; Hopper's nvjet GEMMs do not."""
    trace = fixture("01_matmul_add", "4096_bf16_warm_eager")
    assert per_step(trace, lambda s: s.calls("cuLaunchKernelEx")) == {1}  # the nvjet GEMM
    assert per_step(trace, lambda s: s.calls("cudaLaunchKernel")) == {1}  # the add
    assert per_step(trace, lambda s: s.calls("cudaOccupancyMaxActiveBlocksPerMultiprocessor")) == {0}
    compiled = fixture("01_matmul_add", "4096_bf16_warm_compiled")
    assert per_step(compiled, lambda s: len(s.memcpy)) == {1}
    assert per_step(compiled, lambda s: s.cpu_ops["aten::addmm"]) == {1}


def test_flash_attention_fed_its_own_layout_is_one_kernel_without_transposes():
    """04_d through --kernel-dir: a local kernel package calling PyTorch's FlashAttention-2 on [B, S, H, D]."""
    trace = fixture("04_d_kernels_attention", "8_16_1024_64_local_bf16_cold_eager")
    assert per_step(trace, lambda s: tuple(k.family for k in s.kernels)) == {("attention",)}
    assert per_step(trace, lambda s: s.cpu_ops["aten::transpose"]) == {0}
    assert per_step(trace, lambda s: s.cpu_ops["aten::scaled_dot_product_attention"]) == {0}


@pytest.mark.parametrize("seq", [1024, 4096])
def test_fa4_from_pypi_is_one_cute_dsl_kernel_a_step_no_mask_or_softmax(seq):
    """04_d without the Hub on flash-attn-4 4.0.0b36: FA4's sm90 forward kernel, JIT-compiled by the CuTe DSL,
    launched once per step through cudaLaunchKernelExC, fed [B, S, H, D] (no transposes, no SDPA)."""
    script = load_script("04_d_kernels_attention")
    trace = fixture("04_d_kernels_attention", f"8_16_{seq}_64_pkg-flash_attn_cute_bf16_cold_eager")
    names = per_step(trace, lambda s: tuple(k.name for k in s.kernels))
    assert len(names) == 1 and len(kernels := next(iter(names))) == 1
    assert re.search(script.FA4_KERNEL, kernels[0]) and kernels[0].startswith("kernel_cutlass_kernel_flash_attncute")
    assert per_step(trace, lambda s: s.calls("cudaLaunchKernelExC")) == {1}
    assert per_step(trace, lambda s: s.cpu_ops["FlashAttnFunc"]) == {1}
    assert per_step(
        trace, lambda s: s.cpu_ops["aten::transpose"] + s.cpu_ops["aten::scaled_dot_product_attention"]
    ) == {0}


def test_fa4_beats_sdpas_flash_and_trails_cudnn_at_seq_1024_and_leads_both_at_4096():
    """GPU busy per step on the H200: at seq 1024 cuDNN < FA4 < SDPA's FA2; at seq 4096 FA4 < cuDNN < FA2."""

    def busy(script: str, tag: str) -> float:
        return fixture(script, tag).per_step(lambda s: s.gpu_busy_us)

    for seq, order in ((1024, ("cudnn", "fa4", "flash")), (4096, ("fa4", "cudnn", "flash"))):
        times = {b: busy("04_c_sdpa_attention", f"8_16_{seq}_64_{b}_bf16_cold_eager") for b in ("flash", "cudnn")}
        times["fa4"] = busy("04_d_kernels_attention", f"8_16_{seq}_64_pkg-flash_attn_cute_bf16_cold_eager")
        assert tuple(sorted(times, key=times.get)) == order, (seq, times)


def test_the_summary_of_all_fixtures_runs_and_names_every_trace(capsys):
    assert summary_main([str(FIXTURES), "--baseline", "04_a_naive_attention"]) == 0
    out = capsys.readouterr().out
    for path in ALL:
        assert path.name.removesuffix(".json.gz") in out


def test_kernel_panel_reads_part_3_s_flash_13_percent_at_255_registers_cudnn_0():
    flash = fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager").steps[0].kernels[0]
    assert (flash.registers, flash.occupancy_pct, flash.grid, flash.block) == (255, 13, (8, 8, 16), (128, 1, 1))
    cudnn = fixture("04_c_sdpa_attention", "8_16_1024_64_cudnn_bf16_cold_eager").steps[0].kernels[0]
    assert cudnn.occupancy_pct == 0 and cudnn.registers == 168


def test_the_runs_gpu_work_list_prints_the_kernel_panel_figures():
    trace = fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager")
    text = "\n".join(format_verdicts([], trace))
    row = next(line for line in text.splitlines() if "flash_fwd_kernel" in line).split()
    assert row[2:8] == ["attention", "8×8×16", "128", "255", "48", "KB"] and row[8] == "13%"


def test_a_memcpy_row_shows_no_launch_figures_rather_than_zeros():
    trace = fixture("04_a_naive_attention", "8_16_1024_64_bf16_cold_eager")
    text = "\n".join(format_verdicts([], trace))
    row = next(line for line in text.splitlines() if "Memcpy DtoD" in line).split()
    assert row[2:8] == ["memcpy", "—", "—", "—", "—", "—"]


def test_the_cold_start_shows_step_0_paying_for_set_up():
    trace = fixture("01_matmul_add", "64_bf16_cold_eager_w0u0a20")
    first, later = trace.steps[0], trace.steps[1:]
    assert first.region_us > 10_000 and all(first.region_us > 50 * s.region_us for s in later[1:])
    assert "cudaMalloc" in trace.extra_calls(first) and not any(trace.extra_calls(s) for s in later[1:])
    table = step_table(trace)
    assert len(table.splitlines()) == 22 and table.splitlines()[2].startswith("#0")


def test_the_summary_of_all_fixtures_fits_120_columns_and_shows_memory(capsys):
    assert summary_main([str(FIXTURES)]) == 0
    out = capsys.readouterr().out
    assert max(len(line) for line in out.splitlines()) <= 120
    assert "peak MB" in out and "occ. queries" not in out
    assert summary_main([str(FIXTURES), "--wide"]) == 0
    assert "occ. queries" in capsys.readouterr().out


def test_gpu_runs_record_the_steps_peak_memory():
    naive = fixture("04_a_naive_attention", "8_16_1024_64_bf16_cold_eager").meta["memory"]
    flash = fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager").meta["memory"]
    scores = 8 * 16 * 1024 * 1024 * 2  # one bf16 [batch, heads, seq, seq] buffer: 268 MB
    assert 2 * scores <= naive["peak_bytes"] <= 3 * scores  # scores and their masked copy, live at once
    assert flash["peak_bytes"] < scores / 4  # the fused kernel never holds the scores
