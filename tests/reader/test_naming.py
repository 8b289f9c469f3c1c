"""Kernel names: short names that keep what the kernel computes, in time linear in the name."""

from __future__ import annotations

from common.reader import naming
from common.reader.naming import _HINT, _hints, kernel_family, short_name

NAMES = [
    "void at::native::elementwise_kernel<128, 4, Foo>(int, at::native::gpu_kernel_impl_nocast<"
    "at::native::(anonymous namespace)::masked_fill_kernel(at::TensorIterator&)::{lambda(bool)#1}>)",
    "void at::native::vectorized_elementwise_kernel<4, at::native::AUnaryFunctor<float, float, float, "
    "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 2ul> >(int, float)",
    "void xGeluCUDAKernelImplFunctorKernelImplyy<_kernel, Functor, aKernelImplb_kernelc>(MulFunctorKernelImplq)",
    "gpu_kernel_impl<BinaryFunctor, AUnaryFunctor, x_kernel_impl>",
]


def test_hints_are_where_the_hint_regex_finds_them():
    for name in NAMES:
        expected = [m for m in _HINT.findall(name) if m not in naming._GENERIC]
        assert [h for _, h in _hints(name)] == expected


def test_short_name_searches_a_1mb_nested_template_name_once(monkeypatch):
    depth = 120_000
    name = "void outer<" + "Wrap<" * depth + "SumFunctor" + ">" * depth + ">(int)" + "x<LerpFunctor>" * 20_000
    assert len(name) > 1_000_000
    scanned = []
    monkeypatch.setattr(naming, "_hints", lambda text: scanned.append(len(text)) or _hints(text))
    short = short_name(name, 10**7)
    assert scanned == [len(name) - len("void ")]  # one scan of the name, not one per template
    assert short.startswith("outer<…SumFunctor…>(int)x<…LerpFunctor…>x<…LerpFunctor…>")
    assert short.count("<…LerpFunctor…>") == 20_000


def test_a_cut_name_keeps_the_kernel_not_its_namespaces():
    allreduce = "void (anonymous namespace)::multimem_all_reduce_kernel<c10::BFloat16, 16>(c10::BFloat16*, long)"
    pool = "void at::native::(anonymous namespace)::max_pool_backward_nchw<float, float>(float const*, long)"
    assert short_name(allreduce) == "(anonymous namespace)::multimem_all_reduce_kernel<…>"  # whole where it fits
    assert short_name(allreduce, 40) == "multimem_all_reduce_kernel<…>"
    assert short_name(pool, 40) == "at::native::max_pool_backward_nchw<…>"
    assert short_name(pool, 30) == "max_pool_backward_nchw<…>"
    assert short_name(pool, 12) == "max_pool_ba…"


def test_fbgemm_s_embedding_kernels_are_not_gemms_and_its_cutlass_gemms_are():
    """FBGEMM's embedding kernels name `fbgemm_gpu::FixedDivisor` in their arguments: "gemm" in "fbgemm" made
    them GEMMs (issue 32)."""
    embedding = ("void fbgemm_gpu::batch_index_select_dim0_codegen_forward_kernel<float, float, long, 4L>("
                 "at::PackedTensorAccessor64<float, 1ul>, fbgemm_gpu::FixedDivisor, int)")  # fmt: skip
    assert kernel_family(embedding) != "gemm"
    rowwise = "void cutlass::device_kernel<fbgemm_gpu::f8f8bf16_rowwise_kernel<cutlass::gemm::GemmUniversal<>>>(Params)"
    assert kernel_family(rowwise) == "gemm"
