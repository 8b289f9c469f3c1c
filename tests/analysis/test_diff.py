"""python -m common.diff: what changed between two variants, headline first."""

from __future__ import annotations

import json
import random
import tracemalloc

from helpers import CPU_DTYPE, FIXTURES, command, diff_parts, run, tiny_gpu_trace

from common.analysis import diff as diff_module
from common.analysis.diff import KernelUse, close_pairs, main, match_kernels, similarity, words
from common.reader.model import GpuOp

ATTN = "8_16_1024_64_bf16_cold_eager"


def fixture(script: str, tag: str) -> str:
    return str(FIXTURES / script / f"{tag}.json.gz")


def diff(capsys, *argv: object) -> tuple[int, str, str]:
    return command(main, capsys, *argv)


def headline_of(out: str) -> str:
    """The diff's one-sentence headline (wrapped at 120 columns), as one line."""
    return diff_parts(out)[2]


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


def test_sdpa_flash_to_fa4_leads_with_the_attention_kernel_that_changed(capsys):
    """04_c --backend flash (FA2 behind SDPA) against 04_d with FA4 from PyPI, both on the H200: one kernel each."""
    sdpa_flash = fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager")
    code, out, _ = diff(
        capsys, sdpa_flash, fixture("04_d_kernels_attention", "8_16_1024_64_pkg-flash_attn_cute_bf16_cold_eager")
    )
    headline = headline_of(out)
    assert code == 0
    assert headline.startswith("pytorch_flash::flash_fwd_kernel<")
    assert " → kernel_cutlass_kernel_flash_attncuteflash_fwd_sm90FlashAttentionForwa" in headline
    assert "(93.7 µs → 69.8 µs); GPU busy 93.9 µs → 69.6 µs per step (−26%)" in headline
    changed = [line.split() for line in out.splitlines() if line.startswith("changed  attention")]
    assert len(changed) == 1 and changed[0][-3].startswith("pytorch_flash::flash")
    assert changed[0][-2:-1] == ["→"] and changed[0][-1].startswith("kernel_cutlass_kernel")
    assert "(the one attention kernel left each side)" in out


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
    assert code == 0 and "aten::clone" in headline_of(out) and "CPU" in out
    assert diff_parts(out)[1] == "CPU = record_function 'attn_fwd' (the suite's label)"
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


def _direct_copy(dtype: str, lam: int) -> str:
    """One instantiation of ATen's direct_copy_kernel_cuda template (their names differ in the lambda and dtype)."""
    return (
        "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda(at::TensorIteratorBase&)"
        f"::{{lambda()#3}}::operator()() const::{{lambda()#{lam}}}::operator()() const::{{lambda({dtype})#1}}, "
        "std::array<char*, 2ul>, TrivialOffsetCalculator<1, unsigned int>>(int, at::native::direct_copy_kernel_cuda)"
    )


def _uses(*kernels: tuple[str, float, float]) -> dict:
    return {("kernel", n): KernelUse(GpuOp("kernel", n, us / max(calls, 1)), calls, us) for n, calls, us in kernels}


COPIES = [_direct_copy(t, n) for t, n in (("float", 7), ("c10::BFloat16", 11), ("long", 4), ("bool", 2))]


def test_instantiations_of_one_template_pair_by_their_exact_names():
    batch16 = _uses((COPIES[0], 1, 10.0), (COPIES[1], 164, 300.0), (COPIES[2], 12, 40.0), (COPIES[3], 3, 6.0))
    batch256 = _uses((COPIES[3], 3, 9.0), (COPIES[2], 12, 90.0), (COPIES[1], 164, 4800.0), (COPIES[0], 1, 11.0))
    pairs = match_kernels(batch16, batch256)
    assert len(pairs) == 4 and all(a and b and a.op.name == b.op.name for a, b in pairs)


def test_instantiations_with_other_names_pair_by_calls_and_time():
    name = "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda<{}>>()"
    a = _uses((name.format("float"), 1, 10.0), (name.format("half"), 164, 300.0))
    b = _uses((name.format("bf16"), 164, 4800.0), (name.format("int"), 1, 12.0))
    pairs = sorted(match_kernels(a, b), key=lambda p: p[0].calls)
    assert [(x.calls, y.calls) for x, y in pairs] == [(1, 1), (164, 164)]


def test_copies_of_different_directions_are_never_paired():
    def copy(name: str) -> dict:
        return {("gpu_memcpy", name): KernelUse(GpuOp("gpu_memcpy", name, 5.0), 1, 5.0)}

    pairs = match_kernels(copy("Memcpy DtoH (Device -> Pinned)"), copy("Memcpy DtoD (Device -> Device)"))
    assert sorted((a is None, b is None) for a, b in pairs) == [(False, True), (True, False)]
    [(a, b)] = match_kernels(copy("Memcpy HtoD (Pageable -> Device)"), copy("Memcpy HtoD (Pinned -> Device)"))
    assert a and b  # the same direction from another kind of host memory is the same copy, changed


def _copy_trace(kernels: list[tuple[str, int, float]]) -> dict:
    """A trace of one profiled step that launches `kernels` (name, calls, µs per call) in turn."""
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 10_000, "args": {}}]  # fmt: skip
    corr, t = 1, 10.0
    for name, calls, us in kernels:
        for _ in range(calls):
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t, "dur": 1, "args": {"correlation": corr}})  # fmt: skip
            cat = "gpu_memcpy" if name.startswith("Memcpy") else "kernel"
            events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": 7, "ts": t + 2, "dur": us,
                           "args": {"correlation": corr}})  # fmt: skip
            corr, t = corr + 1, t + us + 3
    return {"traceEvents": events}


def test_the_headline_never_calls_a_kernel_in_both_traces_gone(tmp_path, capsys):
    dtoh, dtod = "Memcpy DtoH (Device -> Pinned)", "Memcpy DtoD (Device -> Device)"
    a = _copy_trace([(COPIES[0], 1, 10.0), (COPIES[1], 20, 3.0), (COPIES[2], 4, 2.0), (dtoh, 1, 4.0)])
    b = _copy_trace([(COPIES[2], 4, 5.0), (COPIES[1], 20, 9.0), (dtod, 1, 4.0)])
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    line = headline_of(out)
    assert code == 0 and line.startswith("Gone: one instantiation of at::native::unrolled_elementwise_kernel<…direct_")
    assert "Memcpy DtoH (4.00 µs); new: Memcpy DtoD (4.00 µs)" in line, line
    table = out.split("GPU work added, removed or changed")[1]
    assert "DtoH (Device -> Pinned) → " not in table and "changed  memcpy" not in table


def test_a_400_digit_flops_figure_is_a_dash_in_the_different_work_note(tmp_path, capsys):
    a, b = tiny_gpu_trace(), tiny_gpu_trace()
    a["suite"], b["suite"] = {"flops": 312e6}, {"flops": 10**400}  # found by tests/reader/test_fuzz_reader.py
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    code, out, err = command(main, capsys, tmp_path / "a.json", tmp_path / "b.json")
    assert code == 0, err
    assert "note: different work (0.312 vs — GFLOP per step: other shapes); compared anyway" in out


# Kernels of one family (pointwise) that are other work, named as ATen names them.
LAYER_NORM = ("void at::native::(anonymous namespace)::vectorized_layer_norm_kernel<float, float>(int, float, "
              "float const*, float const*, float const*, float*, float*, float*)")  # fmt: skip
ADAM = ("void at::native::(anonymous namespace)::multi_tensor_apply_kernel<at::native::(anonymous namespace)::"
        "TensorListMetadata<3>, at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, "
        "std::multiplies<float>, float>(at::native::(anonymous namespace)::TensorListMetadata<3>, "
        "at::native::(anonymous namespace)::PointwiseOpScalarFunctor<float, 3, 3, 0>, std::multiplies<float>, "
        "float)")  # fmt: skip
TANH = ("void at::native::vectorized_elementwise_kernel<4, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::"
        "{lambda()#2}::operator()() const::{lambda()#10}::operator()() const::{lambda(float)#1}, "
        "std::array<char*, 2ul> >(int, at::native::tanh_kernel_cuda(at::TensorIteratorBase&)::{lambda()#2}::"
        "operator()() const::"
        "{lambda()#10}::operator()() const::{lambda(float)#1}, std::array<char*, 2ul>)")  # fmt: skip
PHILOX = ("void at::native::(anonymous namespace)::distribution_elementwise_grid_stride_kernel<float, 4, "
          "at::native::templates::cuda::normal_and_transform<float, float, at::CUDAGeneratorImpl*, "
          "at::native::templates::cuda::normal_kernel<at::CUDAGeneratorImpl*>(at::TensorBase const&, double, double, "
          "at::CUDAGeneratorImpl*)::{lambda()#1}::operator()() const::{lambda()#2}::operator()() const::"
          "{lambda(float)#1}>(at::TensorIteratorBase&, at::CUDAGeneratorImpl*)::{lambda(curandStatePhilox4_32_10*)#2}>"
          "(long, at::PhiloxCudaState, at::native::templates::cuda::normal_kernel)")  # fmt: skip
MUL = ("void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor<float, float, float, "
       "at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul> >(int, at::native::BinaryFunctor<"
       "float, float, float, at::native::binary_internal::MulFunctor<float> >, std::array<char*, 3ul>)")  # fmt: skip
FILL = ("void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >"
        "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)")  # fmt: skip
UNRELATED = [(LAYER_NORM, ADAM), (TANH, PHILOX), (MUL, FILL)]


def test_unrelated_kernels_of_one_family_are_gone_and_new_not_paired():
    """Two versions of one training loop: layer_norm's forward is not the optimizer's multi_tensor_apply, tanh not
    an RNG kernel, Mul not Fill; alone on each side (the family's lone kernel) or all at once."""
    for x, y in UNRELATED:
        assert _uses((x, 4, 40.0))[("kernel", x)].op.family == _uses((y, 4, 40.0))[("kernel", y)].op.family
        pairs = match_kernels(_uses((x, 4, 40.0)), _uses((y, 4, 50.0)))
        assert sorted((a is None, b is None) for a, b in pairs) == [(False, True), (True, False)], (x, y)
    a = _uses(*((x, 4, 40.0 + i) for i, (x, _) in enumerate(UNRELATED)))
    b = _uses(*((y, 4, 41.0 + i) for i, (_, y) in enumerate(UNRELATED)))
    assert all(a is None or b is None for a, b in match_kernels(a, b))


def test_a_backward_kernel_never_pairs_with_a_forward_one():
    gelu = (
        "void at::native::vectorized_elementwise_kernel<4, at::native::GeluCUDAKernelImpl(at::TensorIteratorBase&)>()"
    )
    pairs = match_kernels(_uses((gelu, 2, 5.0)), _uses((gelu.replace("Gelu", "GeluBackward"), 2, 9.0)))
    assert all(a is None or b is None for a, b in pairs)


def test_near_names_pair_and_the_table_shows_both_in_full(tmp_path, capsys):
    """A recompiled model: Inductor renumbers its kernels and fuses one op more; an ATen op in another wrapper."""
    old = "triton_red_fused__to_copy_add_mean_mul_native_layer_norm_pow_rsqrt_12"
    new = "triton_red_fused__to_copy_add_mean_mul_native_layer_norm_pow_rsqrt_view_3"
    mul = MUL.replace("vectorized_elementwise_kernel<4, ", "unrolled_elementwise_kernel<")
    [(x, y)] = match_kernels(_uses((old, 2, 8.0)), _uses((new, 2, 30.0)))
    assert x and y and similarity(words(old), words(new)) > diff_module.CLOSE_NAME
    (tmp_path / "a.json").write_text(json.dumps(_copy_trace([(old, 2, 4.0), (MUL, 3, 2.0)])))
    (tmp_path / "b.json").write_text(json.dumps(_copy_trace([(new, 2, 15.0), (mul, 3, 9.0)])))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    assert code == 0 and all(len(line) <= 120 for line in out.splitlines())
    table = out.split("GPU work added, removed or changed")[1].split("CPU ops")[0]
    assert "removed" not in table and "added" not in table
    assert f"  A: {old}\n  B: {new} (95% of words in common)\n" in table
    assert "  A: at::native::vectorized_elementwise_kernel<…MulFunctor…>\n" in table
    assert "  B: at::native::unrolled_elementwise_kernel<…MulFunctor…> (100% of words in common)" in table
    row = next(line for line in table.splitlines() if line.startswith("changed  triton"))
    assert row.split()[-3:-1] == ["triton_red_fused__to…", "→"] and row.split()[-1].startswith("triton_red_fused")


def _triton_names(rng: random.Random, n: int, ops: list[str]) -> list[str]:
    """`n` distinct Inductor-like names: 1 to 6 ops of a skewed choice (add and mul in most), sorted, numbered."""
    weights = [1 / (k + 1) for k in range(len(ops))]
    names = []
    for i in range(n):
        fused = sorted(set(rng.choices(ops, weights, k=rng.randint(1, 6))))
        names.append(f"triton_{rng.choice(['poi', 'red', 'per'])}_fused_{'_'.join(fused)}_{i}")
    return names


OPS = [
    "add", "mul", "_to_copy", "sum", "mean", "pow", "rsqrt", "native_layer_norm", "view", "permute", "clone", "exp",
    "sub", "div", "where", "gelu", "gelu_backward", "native_layer_norm_backward", "amax", "log", "tanh", "sigmoid",
    "relu", "threshold_backward", "cat", "slice", "select", "embedding", "embedding_dense_backward", "neg", "sqrt",
    "var_mean", "_softmax", "_softmax_backward_data", "masked_fill", "eq", "lt", "full", "arange", "native_dropout",
    "native_dropout_backward", "maximum", "clamp", "erf", "silu", "scatter_add", "index_select",
]  # fmt: skip


def _recompiled(seed: int, n: int) -> tuple[dict, dict]:
    """A's `n` distinct Triton kernels and B's: most renumbered, some with an op more or less, some other work."""
    rng = random.Random(seed)
    a = _triton_names(rng, n, OPS)
    b = []
    for i, name in enumerate(a):
        kind, ops = name.split("_fused_")[0], name.split("_fused_")[1].rsplit("_", 1)[0]
        roll = rng.random()
        if roll < 0.2:
            ops = f"{ops}_{rng.choice(OPS)}"
        elif roll < 0.4:
            ops = "_".join(rng.sample(OPS, rng.randint(1, 5)))
        b.append(f"{kind}_fused_{ops}_{n + i}")
    rng.shuffle(b)
    uses = lambda names: _uses(*((x, rng.randint(1, 9), rng.uniform(1, 100)) for x in names))  # noqa: E731
    return uses(a), uses(b)


def _every_pair(left: list[frozenset[str]], right: list[frozenset[str]]) -> list[tuple[float, int, int]]:
    """close_pairs by scoring every pair: the reference."""
    scored = ((similarity(x, y), i, j) for i, x in enumerate(left) for j, y in enumerate(right))
    return [s for s in scored if s[0] > diff_module.CLOSE_NAME]


def test_close_pairs_of_2000_triton_names_a_side_are_what_scoring_every_pair_finds():
    a, b = _recompiled(1, 2000)
    left = [words(k[1]) for k in a]
    right = [words(k[1]) for k in b]
    found = close_pairs(left, right)
    sample = sorted(random.Random(2).sample(range(len(left)), 60))
    reference = _every_pair([left[i] for i in sample], right)
    assert sorted((s, sample[i], j) for s, i, j in reference) == sorted(f for f in found if f[1] in set(sample))
    assert len(found) > 2000  # the common ops make many candidates: the filter is exercised


def test_the_pairing_of_triton_names_is_the_pairing_by_scoring_every_pair(monkeypatch):
    a, b = _recompiled(3, 300)
    fast = match_kernels(a, b)
    monkeypatch.setattr(diff_module, "close_pairs", _every_pair)
    slow = match_kernels(a, b)
    named = lambda pairs: sorted((x.op.name if x else "", y.op.name if y else "") for x, y in pairs)  # noqa: E731
    assert named(fast) == named(slow)
    paired = [(x, y) for x, y in fast if x and y]
    assert 150 < len(paired) < 300 and all(similarity(words(x.op.name), words(y.op.name)) > 0.5 for x, y in paired)


def cpu_trace_with_op(share: float) -> dict:
    """Three steps of a CPU-only trace whose label `fwd` spends `share` of its 100 µs in one aten::mm of its own."""
    from helpers import ev

    events = []
    for i in range(3):
        t = i * 1000
        events += [ev("user_annotation", f"ProfilerStep#{i}", t, 900), ev("user_annotation", "fwd", t + 5, 100),
                   ev("cpu_op", "aten::mm", t + 10, 100 * share)]  # fmt: skip
    return {"traceEvents": events, "suite": {"script": "01_x", "tag": "t", "label": "fwd", "flops": 1e6, "bytes": 1e3}}


def test_the_lead_of_a_diff_of_two_cpu_traces_says_which_kind_of_cpu_bound_each_is(tmp_path, capsys):
    (tmp_path / "small.json").write_text(json.dumps(cpu_trace_with_op(0.3)))
    (tmp_path / "large.json").write_text(json.dumps(cpu_trace_with_op(0.95)))
    code, out, _ = diff(capsys, tmp_path / "small.json", tmp_path / "large.json")
    bounds, _, _ = diff_parts(out)
    assert code == 0 and bounds[0] == "bound: CPU, overhead-bound → compute-bound", bounds
    (tmp_path / "large2.json").write_text(json.dumps(cpu_trace_with_op(0.9)))
    code, out, _ = diff(capsys, tmp_path / "large.json", tmp_path / "large2.json")
    assert diff_parts(out)[0][0] == "bound: CPU, compute-bound in both"


def renumbered(n: int, first: int) -> dict:
    """n kernels `triton_poi_fused_add_mul_<first + k>`, kernel k taking k + 1 µs a step."""
    return _uses(*[(f"triton_poi_fused_add_mul_{first + k}", 1, k + 1.0) for k in range(n)])


def test_thousands_of_kernels_of_the_same_words_pair_in_linear_memory():
    a, b = renumbered(1000, 0), renumbered(1000, 1000)
    tracemalloc.start()
    try:
        pairs = match_kernels(a, b)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"{peak / 2**20:.0f} MiB"  # all 10^6 pairs held took 200 MiB
    assert len(pairs) == 1000 and all(u and v and u.us == v.us for u, v in pairs)


def test_a_few_kernels_of_the_same_words_pair_by_their_time():
    a = renumbered(3, 0)
    b = _uses(("triton_poi_fused_add_mul_9", 1, 3.0), ("triton_poi_fused_add_mul_7", 1, 1.0),
              ("triton_poi_fused_add_mul_8", 1, 2.0))  # fmt: skip
    assert sorted((u.us, v.us) for u, v in match_kernels(a, b)) == [(1.0, 1.0), (2.0, 2.0), (3.0, 3.0)]


def cpu_run(mm_us: list[float], gelu: bool = True) -> dict:
    """A CPU trace of 3 steps of an MLP's `mlp_fwd`: three aten::mm of `mm_us[i]` µs each in step i, then (eager) an
    aten::gelu and an aten::mul of 300 µs each, or (`gelu` False, compiled) one fused kernel of 400 µs."""
    from helpers import ev

    events = []
    for i, mm in enumerate(mm_us):
        t = i * 10_000
        events += [ev("user_annotation", f"ProfilerStep#{i}", t, 9000), ev("user_annotation", "mlp_fwd", t + 5, 8000)]
        events += [ev("cpu_op", "aten::mm", t + 10 + k * 2000, mm) for k in range(3)]
        tail = [("aten::gelu", 300), ("aten::mul", 300)] if gelu else [("cpp_fused_gelu_mul_0", 400)]
        events += [ev("cpu_op", name, t + 6500 + k * 500, us) for k, (name, us) in enumerate(tail)]
    return {"traceEvents": events, "suite": {"script": "03_x", "tag": "t", "label": "mlp_fwd", "flops": 1e9,
                                             "bytes": 1e6, "dtype": "fp32"}}  # fmt: skip


def test_a_cpu_diff_says_the_speeds_differ_where_its_common_ops_moved(tmp_path, capsys):
    """Issue 48 item 5: eager against compiled on a loaded CPU: the three aten::mm both runs share took 20% less in B,
    far beyond their spread across steps, so the diff says the machine's speed moved, not only the change."""
    (tmp_path / "a.json").write_text(json.dumps(cpu_run([1000, 1010, 990])))
    (tmp_path / "b.json").write_text(json.dumps(cpu_run([800, 805, 795], gelu=False)))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    speed = [line for line in out.splitlines() if line.startswith("speed: ")]
    assert code == 0 and len(speed) == 1, out
    assert speed[0] == (
        "speed: the op in both took 3.00 ms → 2.40 ms a step (−20%), over their 60.0 µs spread "
        "across steps: speeds differ"
    )  # aten::mm: the same calls on both sides


def test_a_cpu_diff_says_nothing_of_speed_where_its_common_ops_held(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(cpu_run([1000, 1100, 900])))
    (tmp_path / "b.json").write_text(json.dumps(cpu_run([950, 1050, 1000], gelu=False)))  # within A's spread
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    assert code == 0 and "speed:" not in out


def test_a_cpu_diff_has_a_per_op_table_of_self_time(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(cpu_run([1000, 1010, 990])))
    (tmp_path / "b.json").write_text(json.dumps(cpu_run([800, 805, 795], gelu=False)))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    table = out.split("CPU ops' self time per step (by impact)")[1].split("\n\n")[0]
    rows = {line.split()[-1]: line.split() for line in table.splitlines() if line.split() and line.split()[0] in
            ("removed", "added", "changed")}  # fmt: skip
    assert rows["aten::mm"] == ["changed", "3", "3", "3.00", "ms", "2.40", "ms", "−600", "µs", "38%", "aten::mm"]
    assert rows["aten::gelu"][:3] == ["removed", "1", "0"] and rows["cpp_fused_gelu_mul_0"][:3] == ["added", "0", "1"]
    assert all(len(line) <= 120 for line in out.splitlines())


AMPERE_GEMM = "ampere_bf16_s16816gemm_bf16_128x64_ldg8_f2f_stages_64x4_tn"
VOLTA_GEMM = "volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn"


def test_gemms_of_other_names_whose_calls_differ_38x_are_not_one_gemm(tmp_path, capsys):
    """Issue 46: an A100 and a V100 trace whose lone GEMMs were called 19-38× as often on one side were paired,
    and one GEMM seemed to slow down 100-180×. Called 2 and 76 times a step, they are gone and new."""
    (tmp_path / "a.json").write_text(json.dumps(_copy_trace([(AMPERE_GEMM, 2, 10.0)])))
    (tmp_path / "b.json").write_text(json.dumps(_copy_trace([(VOLTA_GEMM, 76, 30.0)])))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    table = out.split("GPU work added, removed or changed")[1]
    assert code == 0 and "changed  gemm" not in table and "Paired by name" not in out
    assert "removed  gemm" in table and "added    gemm" in table


def test_gemms_of_other_names_whose_calls_agree_within_2x_pair(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps(_copy_trace([(AMPERE_GEMM, 2, 10.0)])))
    (tmp_path / "b.json").write_text(json.dumps(_copy_trace([(VOLTA_GEMM, 4, 30.0)])))
    code, out, _ = diff(capsys, tmp_path / "a.json", tmp_path / "b.json")
    table = out.split("GPU work added, removed or changed")[1]
    assert code == 0 and "changed  gemm" in table and "(the one gemm kernel left each side)" in out


def test_near_names_whose_calls_differ_more_than_2x_are_not_paired():
    old, new = "triton_poi_fused_add_mul_gelu_3", "triton_poi_fused_add_mul_gelu_view_7"
    assert all(a is None or b is None for a, b in match_kernels(_uses((old, 2, 8.0)), _uses((new, 5, 8.0))))
    [(a, b)] = match_kernels(_uses((old, 2, 8.0)), _uses((new, 4, 8.0)))
    assert a and b


def test_kernels_of_one_name_pair_whatever_their_calls():
    [(a, b)] = match_kernels(_uses((AMPERE_GEMM, 1, 8.0)), _uses((AMPERE_GEMM, 40, 300.0)))
    assert a and b and (a.calls, b.calls) == (1, 40)
