"""04_a, 04_b and 04_c end to end through main(argv) at small sizes, and their outputs against the reference."""

from __future__ import annotations

import warnings
from collections import Counter
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers import CPU_DTYPE, load_script, requires_cuda, run, usage_error, written

from common.harness.checks import check_close
from common.reader.build import read_trace
from common.workloads.attention import (
    SDPA_BACKENDS,
    AttentionShape,
    attention_memory,
    attention_work,
    causal_mask,
    make_qkv,
    reference_attention,
)

SMALL = ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"]
NAIVE, INPLACE, SDPA = "04_a_naive_attention", "04_b_inplace_ops_attention", "04_c_sdpa_attention"


def step_ops(path: Path) -> list[Counter]:
    """The CPU ops of each profiled step, after checking the steps and the attn_fwd label are there."""
    trace = read_trace(path, "attn_fwd")
    assert [s.number for s in trace.steps] == [2, 3, 4]
    assert all(s.region_us for s in trace.steps), "every step holds an attn_fwd region"
    return [s.cpu_ops for s in trace.steps]


def test_naive_masked_fill_is_a_clone_then_an_in_place_fill(tmp_path):
    assert run(NAIVE, tmp_path, *SMALL) == 0
    for ops in step_ops(tmp_path / NAIVE / f"1_2_16_8_{CPU_DTYPE}_cold_eager.json"):
        assert ops["aten::masked_fill"] == ops["aten::clone"] == ops["aten::masked_fill_"] == 1
        assert ops["aten::matmul"] == 2 and ops["aten::mul"] == 1 and ops["aten::softmax"] == 1


def test_inplace_masks_scores_without_a_clone(tmp_path):
    assert run(INPLACE, tmp_path, *SMALL) == 0
    for ops in step_ops(tmp_path / INPLACE / f"1_2_16_8_{CPU_DTYPE}_cold_eager.json"):
        assert ops["aten::masked_fill_"] == 1
        assert ops["aten::masked_fill"] == 0 and ops["aten::clone"] == 0


def test_sdpa_math_decomposes_rebuilds_the_mask_and_uses_safe_softmax(tmp_path):
    assert run(SDPA, tmp_path, *SMALL, "--backend", "math", "--dtype", "bf16") == 0  # bf16: the upcast below
    for ops in step_ops(tmp_path / SDPA / "1_2_16_8_math_bf16_cold_eager.json"):
        assert ops["aten::scaled_dot_product_attention"] == ops["aten::_scaled_dot_product_attention_math"] == 1
        assert ops["aten::ones"] == ops["aten::tril"] == ops["aten::_safe_softmax"] == 1
        assert ops["aten::_to_copy"] >= 4, "bf16 q, k, v upcast to fp32 and the output cast back"


def test_sdpa_flash_on_the_cpu_is_one_fused_op(tmp_path):
    assert run(SDPA, tmp_path, *SMALL, "--backend", "flash") == 0
    for ops in step_ops(tmp_path / SDPA / f"1_2_16_8_flash_{CPU_DTYPE}_cold_eager.json"):
        assert ops["aten::scaled_dot_product_attention"] == 1
        assert ops["aten::_scaled_dot_product_flash_attention_for_cpu"] == 1
        assert ops["aten::_scaled_dot_product_attention_math"] == 0 and ops["aten::matmul"] == 0


def test_sdpa_default_backend_is_math(tmp_path):
    assert run(SDPA, tmp_path, *SMALL) == 0
    assert (tmp_path / SDPA / f"1_2_16_8_math_{CPU_DTYPE}_cold_eager.json").exists()


@pytest.mark.parametrize(
    "name, flags",
    [
        (NAIVE, []),
        (INPLACE, []),
        (SDPA, ["--backend", "math"]),
        (SDPA, ["--backend", "flash"]),
        (SDPA, ["--dtype", "fp32"]),
    ],
)
def test_strict_passes_when_the_cpu_guess_holds(tmp_path, capsys, name, flags):
    assert run(name, tmp_path, *SMALL, *flags, "--strict") == 0
    assert "matches the reference" in capsys.readouterr().out


def test_compiled_naive_attention_leaves_two_gemm_calls_and_no_masking_ops(tmp_path):
    assert run(NAIVE, tmp_path, *SMALL, "--compile") == 0
    for ops in step_ops(tmp_path / NAIVE / f"1_2_16_8_{CPU_DTYPE}_cold_compiled.json"):
        assert ops["aten::bmm"] == 2
        assert ops["aten::masked_fill"] == ops["aten::masked_fill_"] == ops["aten::softmax"] == 0


def test_all_variants_compute_the_same_attention():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 32, 16, dtype=torch.bfloat16) for _ in range(3))
    mask = causal_mask(32, q.device)
    ref = reference_attention(q, k, v, torch.float32)
    with torch.no_grad():
        naive = load_script(NAIVE).NaiveCausalAttention(16)(q, k, v, mask)
        inplace = load_script(INPLACE).NaiveCausalAttention(16)(q, k, v, mask)
        sdpa = load_script(SDPA)
        outs = {}
        for backend in ("math", "flash"):
            with torch.nn.attention.sdpa_kernel(SDPA_BACKENDS[backend]):
                outs[backend] = sdpa.sdpa_attention(q, k, v)
    assert torch.equal(naive, inplace), "in place or not, the same numbers"
    for out in (naive, outs["math"], outs["flash"]):
        check_close(out, ref, torch.bfloat16, "attention")


def test_the_attention_physics_and_inputs_read_the_shapes_fields_by_name():
    shape = AttentionShape(head_dim=7, seq=5, heads=3, batch=2)  # every field differs: a mix-up shows
    b, h, s, d = 2, 3, 5, 7
    work = attention_work(shape, element_size=2, score_passes=9, reference_size=4)
    assert work.flops == 4 * b * h * s * s * d / 2 and work.bytes == 4 * b * h * s * d * 2
    assert work.moved == 9 * b * h * s * s * 2  # the scores: b, h and d swapped would read as b * h * s * d
    need, _ = attention_memory(shape, torch.bfloat16, score_bytes=6)
    assert need == 4 * b * h * s * d * (2 + 4) + b * h * s * s * (6 + 2 * 4) + 2 * s * s
    cpu = SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32)
    assert [t.shape for t in make_qkv(shape, cpu)] == [(b, h, s, d)] * 3
    assert [t.shape for t in make_qkv(shape, cpu, layout="bshd")] == [(b, s, h, d)] * 3


@pytest.mark.parametrize("backend", ["efficient", "cudnn"])
def test_gpu_only_backend_on_the_cpu_is_one_line_exit_2_and_no_file(tmp_path, capsys, backend):
    err = usage_error(lambda: run(SDPA, tmp_path, *SMALL, "--backend", backend, "--device", "cpu"), capsys)
    assert err.startswith(f"error: --backend {backend} cannot run here (cpu, {CPU_DTYPE}, head_dim 8)")
    assert "only math and flash" in err
    assert written(tmp_path) == []


def test_a_gpu_only_backend_is_refused_before_the_run_is_estimated(tmp_path, capsys, monkeypatch):
    import common.harness.recording

    def estimating(*args, **kw):
        raise AssertionError("a run that will not run was estimated")

    monkeypatch.setattr(common.harness.recording, "estimate", estimating)
    err = usage_error(lambda: run(SDPA, tmp_path, *SMALL, "--backend", "cudnn", "--device", "cpu"), capsys)
    assert err.startswith("error: --backend cudnn cannot run here")


def test_unknown_backend_is_one_line_exit_2(tmp_path, capsys):
    err = usage_error(lambda: run(SDPA, tmp_path, *SMALL, "--backend", "xformers"), capsys)
    assert "invalid choice: 'xformers'" in err
    assert written(tmp_path) == []


def test_a_refused_backend_reports_the_dispatchers_reason(tmp_path, capsys, monkeypatch):
    """On a GPU the dispatcher warns '<backend> kernel not used because:' and then why; that reason is the line."""

    def refuse(*args, **kwargs):
        for message in [
            "Memory efficient kernel not used because:",
            "Memory Efficient attention has been runtime disabled.",
            "Flash attention kernel not used because:",
            "Expected query, key and value to all be of dtype: {Half, BFloat16}. Got Query dtype: float",
            "CuDNN attention kernel not used because:",
        ]:
            warnings.warn(
                f"{message} (Triggered internally at aten/src/ATen/native/transformers/cuda/sdp_utils.cpp)",
                stacklevel=1,
            )
        raise RuntimeError("No available kernel. Aborting execution.")

    monkeypatch.setattr(torch, "_fused_sdp_choice", refuse)
    flags = ["--backend", "flash", "--dtype", "fp32", "--device", "cpu"]
    err = usage_error(lambda: run(SDPA, tmp_path, *SMALL, *flags), capsys)
    assert err == (
        "error: --backend flash cannot run here (cpu, fp32, head_dim 8): Expected query, key and value "
        "to all be of dtype: {Half, BFloat16}. Got Query dtype: float"
    )
    assert written(tmp_path) == []


# On a GPU: what the post saw on its A100, which must hold on any CUDA GPU. Shapes big enough for real GEMMs.
GPU_SHAPE = ["--seq", "128", "--head_dim", "64", "--device", "cuda"]


def memcpy_per_step(path: Path) -> list[int]:
    return [len(s.memcpy) for s in read_trace(path, "attn_fwd").steps]


@pytest.mark.gpu
@requires_cuda
def test_gpu_naive_copies_scores_once_and_inplace_does_not(tmp_path):
    assert run(NAIVE, tmp_path, *SMALL, *GPU_SHAPE, "--strict") == 0
    assert run(INPLACE, tmp_path, *SMALL, *GPU_SHAPE, "--strict") == 0
    assert memcpy_per_step(tmp_path / NAIVE / "1_2_128_64_bf16_cold_eager.json") == [1, 1, 1]
    assert memcpy_per_step(tmp_path / INPLACE / "1_2_128_64_bf16_cold_eager.json") == [0, 0, 0]


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("backend", ["math", "flash", "efficient", "cudnn"])
def test_gpu_each_backend_matches_its_guess(tmp_path, backend):
    assert run(SDPA, tmp_path, *SMALL, *GPU_SHAPE, "--backend", backend, "--strict") == 0


@pytest.mark.gpu
@requires_cuda
@pytest.mark.parametrize("flags, reason", [(["--dtype", "fp32"], "dtype"), (["--head_dim", "512"], "dim")])
def test_gpu_flash_refuses_fp32_and_huge_heads_in_one_line(tmp_path, capsys, flags, reason):
    err = usage_error(lambda: run(SDPA, tmp_path, *SMALL, *GPU_SHAPE, "--backend", "flash", *flags), capsys)
    assert err.startswith("error: --backend flash cannot run here") and reason in err
    assert written(tmp_path) == []


@pytest.mark.parametrize(("variant", "copies", "passes"), [("naive", 3, 9), ("in_place", 2, 8), ("math", 3, 9)])
def test_a_variants_budget_holds_its_score_copies_and_passes_in_its_scores_dtype(variant, copies, passes):
    """04_a's three copies of the scores and nine passes over them, 04_b's two and eight, SDPA math's in fp32:
    the table the scripts' one-line estimate reads (attention.VARIANTS)."""
    from common.harness.early import attention_bytes
    from common.workloads.attention import attention_budget

    shape = AttentionShape(batch=2, heads=4, seq=64, head_dim=16)
    run = SimpleNamespace(dtype=torch.bfloat16, reference_dtype=torch.float32)
    work, (need, _) = attention_budget(variant, shape, run)
    score_size = 4 if variant == "math" else 2
    assert need == attention_bytes(shape, 2, copies * score_size)[0]
    assert work.moved == passes * 2 * 4 * 64 * 64 * score_size and work.fused is None


def test_a_fused_variant_holds_no_scores_and_only_flash_runs_at_its_own_rate():
    from common.harness.early import attention_bytes
    from common.workloads.attention import attention_budget

    shape = AttentionShape(batch=1, heads=2, seq=32, head_dim=8)
    run = SimpleNamespace(dtype=torch.float32, reference_dtype=torch.float32)
    for variant in ("flash", "efficient", "cudnn", "kernel"):
        work, (need, _) = attention_budget(variant, shape, run)
        assert need == attention_bytes(shape, 4, 0)[0] and work.moved == 0
        assert (work.fused is not None) == (variant == "flash")


@pytest.mark.parametrize(
    ("script", "variant"), [("04_a_naive_attention", "naive"), ("04_b_inplace_ops_attention", "in_place")]
)
def test_the_refusal_before_torch_counts_the_scores_the_variant_holds(script, variant):
    """The refusal before torch (common.harness.early, which cannot import the table) is given the same copies."""
    import re

    from helpers import ROOT

    from common.workloads.attention import VARIANTS

    [items] = re.findall(r"refuse_attention_memory\(__name__, score_items=(\d+)\)", (ROOT / f"{script}.py").read_text())
    assert int(items) == VARIANTS[variant].copies
