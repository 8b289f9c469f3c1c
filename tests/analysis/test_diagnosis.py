"""The diagnosis: each trace's time budget, its verdict (the bound and the lever), and the rules that fire."""

from __future__ import annotations

import gzip
import json
import re

import pytest
import torch
from helpers import FIXTURES, ROOT, command, ev, run
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.analysis import diff, summary
from common.analysis.budget import budget
from common.analysis.diagnosis import diagnose, verdict_lines
from common.analysis.efficiency import efficiency
from common.reader.build import parse, read_trace
from common.reader.model import GpuOp, Launch
from common.reader.roofline import ShapedOp, op_flops


def fixture(script: str, tag: str):
    return read_trace(FIXTURES / script / f"{tag}.json.gz")


def rule_names(diagnosis) -> set[str]:
    return {rule.name for rule in diagnosis.rules}


# ---- the H200 fixtures: the cases the posts settle ----


def test_matmul_at_64_is_bound_by_the_cpu_with_the_gpu_idle_almost_all_the_step():
    d = diagnose(fixture("01_matmul_add", "64_bf16_cold_eager"))
    assert d.bound == "CPU"
    assert d.median.pct(d.median.idle) > 95
    assert d.median.pct(d.median.host_wait) > 95  # nothing was launched yet: the host is what the GPU waits for
    assert "kernels shorter than their launch" in rule_names(d)


def test_warm_matmul_at_4096_is_bound_by_the_gpu_with_its_gemm_near_peak():
    trace = fixture("01_matmul_add", "4096_bf16_warm_eager")
    d = diagnose(trace)
    assert d.bound == "GPU"
    assert "gemm 88% of it" in d.verdict
    [gemm] = [e for (_, name), e in efficiency(trace).items() if name.startswith("nvjet")]
    assert gemm.flops == pytest.approx(2 * 4096**3 * 3)  # record_shapes' [4096, 4096] x [4096, 4096], 3 steps
    assert 70 < gemm.pct_peak < 85  # 778 TFLOP/s of the H200's 989


def test_compiled_matmul_at_4096_is_bound_by_the_cpu_the_compiled_region_adds():
    d = diagnose(fixture("01_matmul_add", "4096_bf16_warm_compiled"))
    assert d.bound == "CPU"
    assert 60 < d.median.pct(d.median.idle) < 75
    assert "TorchDynamo Cache Lookup" in "\n".join(verdict_lines(d, explain=True))  # what the CPU ran in the gap


def test_a_compiled_step_with_no_triton_kernel_is_known_compiled_by_its_labels():
    """Inductor hands a lone GEMM to cuBLAS: no Triton kernel, but its labels say torch.compile ran."""
    from common.analysis.diagnosis import _scan

    trace = fixture("01_matmul_add", "4096_bf16_warm_compiled")
    assert not any(op.family == "triton" for s in trace.steps for op in s.gpu) and _scan(trace).compiled
    assert not _scan(fixture("01_matmul_add", "4096_bf16_warm_eager")).compiled


@pytest.mark.parametrize("script,tag", [("01_matmul_add", "4096_bf16_warm_compiled"),
                                        ("02_linear", "1024_32_64_bf16_cold_eager"),
                                        ("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager")])  # fmt: skip
def test_a_cpu_bound_step_of_one_launch_is_told_a_larger_batch_not_to_fuse(script, tag):
    d = diagnose(fixture(script, tag))
    assert d.bound == "CPU" and ", 1 launch;" in d.verdict
    lever = "→ try a larger batch (more work per launch): the step launches one kernel, so nothing is left to fuse"
    assert lever in d.verdict and re.search(r"\(saves up to [\d.]+ µs of the [\d.]+ µs step\)", d.verdict)


def test_naive_attention_is_gpu_bound_on_pointwise_where_flash_waits_for_its_launch():
    naive = diagnose(fixture("04_a_naive_attention", "8_16_1024_64_bf16_cold_eager"))
    flash = diagnose(fixture("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager"))
    assert naive.bound == "GPU"
    assert "pointwise" in naive.verdict and "torch.compile to fuse" in naive.verdict
    assert naive.median.pct(naive.median.non_compute) > 5  # masked_fill's device-to-device copy
    assert flash.bound == "CPU"  # one fused kernel of 94 µs in a 225 µs step
    assert flash.median.busy < naive.median.busy / 10


def test_math_attention_names_the_fused_backends():
    d = diagnose(fixture("04_c_sdpa_attention", "8_16_1024_64_math_bf16_cold_eager"))
    assert d.bound == "GPU"
    assert "attention on SDPA's math backend" in rule_names(d)
    assert "fused attention backend" in d.verdict


def test_training_step_at_128_tokens_is_cpu_bound_eager_and_compiled():
    eager = diagnose(fixture("05_training_step", "1_128_768_12_3072_amp_bf16_cold_eager"))
    compiled = diagnose(fixture("05_training_step", "1_128_768_12_3072_amp_bf16_cold_compiled"))
    assert eager.bound == compiled.bound == "CPU"
    assert eager.median.pct(eager.median.idle) > 90
    assert compiled.median.span < eager.median.span


def test_training_step_with_cuda_graphs_names_the_optimizer_as_the_lever():
    d = diagnose(fixture("05_training_step", "1_128_768_12_3072_cudagraphs_amp_bf16_cold_compiled"))
    assert d.bound == "CPU"
    assert "optimizer" in d.verdict and "fused=True" in d.verdict


def test_training_step_at_8192_tokens_is_still_bound_by_the_cpu():
    d = diagnose(fixture("05_training_step", "8_1024_768_12_3072_amp_bf16_cold_eager"))
    assert d.bound == "CPU"
    assert 70 < d.median.pct(d.median.idle) < 80
    assert "backward" in d.verdict  # the phase the GPU idles most in


def test_the_per_step_budget_adds_up_to_the_span():
    trace = fixture("05_training_step", "8_1024_768_12_3072_amp_bf16_cold_eager")
    for b, step in zip(diagnose(trace).budgets, trace.steps, strict=True):
        assert b.busy + b.idle == pytest.approx(b.span, rel=1e-6)
        assert b.compute + b.non_compute + b.comm_exposed == pytest.approx(b.busy, rel=1e-6)
        assert b.busy == pytest.approx(sum(op.us for op in step.gpu), abs=0.05)  # one stream: the sum


# ---- the idle split, as HTA splits it ----


def op(start: float, us: float, launched: float, name: str = "k", category: str = "kernel") -> GpuOp:
    return GpuOp(category, name, us, start=start, launch=Launch("cudaLaunchKernel", launched, 2.0, None, 1))


def test_a_gap_before_a_kernel_launched_after_the_gpu_went_idle_is_host_wait():
    b = budget([op(10, 10, 5), op(50, 10, 40)], 0, 60, edges=False)
    assert (b.host_wait, b.kernel_wait, b.other_wait) == (30, 0, 0)


def test_a_short_gap_before_a_queued_kernel_is_kernel_wait_and_a_long_one_other():
    short = budget([op(10, 10, 5), op(25, 10, 6)], 0, 60, edges=False)
    long = budget([op(10, 10, 5), op(100, 10, 6)], 0, 200, edges=False)
    assert (short.host_wait, short.kernel_wait, short.other_wait) == (0, 5, 0)
    assert (long.host_wait, long.kernel_wait, long.other_wait) == (0, 0, 80)


def test_ops_a_double_s_rounding_apart_leave_no_gap():
    """Kineto's resolution is 1 ns; µs timestamps near 1e9 as doubles differ by 2**-10 µs where two ops touch: the
    summary printed "longest gap 0.000977 µs" (issue 30 item 9). Below 1 ns two ops touch; at 1 ns there is a gap."""
    t = 1.7e9  # a Kineto timestamp in µs
    touching = budget([op(t, 10, t - 5), op(t + 10 + 2**-10, 10, t - 4)], t, t + 20 + 2**-10, edges=False)
    assert touching.gaps == [] and touching.busy == pytest.approx(20, abs=0.01)
    apart = budget([op(t, 10, t - 5), op(t + 10.002, 10, t - 4)], t, t + 20.002, edges=False)
    assert len(apart.gaps) == 1


def test_communication_under_compute_is_hidden_and_the_rest_exposed():
    compute = op(0, 100, 0)
    comm = op(50, 100, 0, name="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*)")
    b = budget([compute, comm], 0, 150, edges=False)
    assert (b.busy, b.compute, b.comm, b.comm_exposed, b.comm_hidden) == (150, 100, 100, 50, 50)


def test_kernels_replayed_from_a_cuda_graph_fire_no_short_kernel_rule():
    """A replayed kernel's launch is its graph's cudaGraphLaunch: set beside it, every replayed kernel read as
    shorter than its launch, and the rule prescribed CUDA graphs to a step already running them (issue 30 item 5)."""
    for path in sorted((FIXTURES / "05_training_step").glob("*cudagraphs*")):
        trace = read_trace(path)
        assert sum(s.graph_launches for s in trace.steps) > 0
        assert "kernels shorter than their launch" not in [r.name for r in diagnose(trace).rules], path.name


def _item_sync(edit) -> list[str]:
    """The sync rule's evidence on the H200 item_sync fixture (a `.item()` per step) with its runtime calls edited."""
    doc = json.loads(gzip.decompress((ROOT / "tests" / "fixtures" / "foreign" / "item_sync.json.gz").read_bytes()))
    doc["traceEvents"] = [e for e in map(edit, doc["traceEvents"]) if e is not None]
    rules = {r.name: r for r in diagnose(parse(doc)).rules}
    return rules["host-device sync inside the step"].evidence


def test_an_item_with_no_sync_call_recorded_still_fires_the_sync_rule():
    """Its device-to-host copy waits for the GPU whether or not the trace holds the cudaStreamSynchronize."""
    evidence = _item_sync(lambda e: None if e.get("name") == "cudaStreamSynchronize" else e)
    assert evidence[0].startswith("per step: aten::_local_scalar_dense with no sync call recorded 1")
    assert evidence[1].startswith("made inside: aten::_local_scalar_dense 1")


def test_an_item_on_rocm_fires_the_sync_rule_on_hip_memcpy_with_stream():
    """ROCm's .item() is one hipMemcpyWithStream, which returns once the copy is done: no separate sync call."""

    def on_rocm(e: dict) -> dict | None:
        if e.get("name") == "cudaStreamSynchronize":
            return None
        return {**e, "name": "hipMemcpyWithStream"} if e.get("name") == "cudaMemcpyAsync" else e

    evidence = _item_sync(on_rocm)
    assert evidence[0].startswith("per step: hipMemcpyWithStream") and "no sync call recorded" not in evidence[0]
    assert "aten::_local_scalar_dense" in evidence[1]


@pytest.mark.parametrize("name", ["bare_profile", "bare_train_loop"])
def test_a_bare_trace_s_end_syncs_are_not_a_sync_inside_the_step(name):
    """A bare `with profile()` ends with the user's torch.cuda.synchronize() and then the profiler's own, both
    after the last launch: only the last was left out, so the other read as "host-device sync inside the step"."""
    trace = read_trace(ROOT / "tests" / "fixtures" / "foreign" / f"{name}.json.gz")
    if trace.whole_trace:  # bare_train_loop's iterations end before them: they are in no iteration at all
        assert [s[0] for s in trace.steps[-1].syncs][-2:] == ["cudaDeviceSynchronize"] * 2
    assert "host-device sync inside the step" not in [r.name for r in diagnose(trace).rules]


# ---- FLOPs from record_shapes ----


@pytest.mark.parametrize(
    ("name", "dims", "concrete", "flops"),
    [
        ("aten::mm", [[64, 32], [32, 16]], [], 2 * 64 * 32 * 16),
        ("aten::addmm", [[16], [64, 32], [32, 16]], [], 2 * 64 * 32 * 16),
        ("aten::bmm", [[8, 64, 32], [8, 32, 16]], [], 2 * 8 * 64 * 32 * 16),
        ("aten::linear", [[4, 64, 32], [16, 32], [16]], [], 2 * 4 * 64 * 32 * 16),
        ("aten::matmul", [[4, 64, 32], [32, 16]], [], 2 * 4 * 64 * 32 * 16),
        ("aten::_flash_attention_forward", [[8, 1024, 16, 64]] * 3, ["", "", "", "", "", "1024", "1024", "0.", "True"],
         4 * 8 * 16 * 1024 * 1024 * 64 / 2),
        ("aten::_scaled_dot_product_flash_attention", [[8, 16, 1024, 64]] * 3, ["", "", "", "0.", "False"],
         4 * 8 * 16 * 1024 * 1024 * 64),
    ],
)  # fmt: skip
def test_op_flops_from_input_dims(name, dims, concrete, flops):
    assert op_flops(ShapedOp(name, dims, ["c10::BFloat16"] * len(dims), concrete)) == flops


def test_scaled_mm_flops_are_torch_s_flop_counter_s():
    from torch.utils.flop_counter import flop_registry

    dims = [[8192, 4096], [4096, 2048], [], [], [], [], [], []]  # a, b, scale_a, scale_b, bias, ..., as written
    ours = op_flops(ShapedOp("aten::_scaled_mm", dims, ["c10::Float8_e4m3fn"] * 2 + ["float"] * 2, []))
    assert (
        ours == flop_registry[torch.ops.aten._scaled_mm]((8192, 4096), (4096, 2048), (), ()) == 2 * 8192 * 4096 * 2048
    )


@pytest.mark.parametrize(
    ("dims", "flops"),
    [
        ([[4096, 512], [8, 512, 1024], [8]], 2 * 4096 * 512 * 1024),  # tokens × experts' weights: each row one expert
        ([[8, 256, 512], [8, 512, 1024]], 2 * 8 * 256 * 512 * 1024),  # a batch of groups
        ([[256, 4096], [4096, 1024], [8]], 2 * 256 * 4096 * 1024),  # K split among the groups
        ([[4096, 512], [8, 511, 1024]], None),
    ],
)
def test_grouped_gemm_flops_count_each_row_against_one_group(dims, flops):
    for name in ("aten::_grouped_mm", "aten::_scaled_grouped_mm"):
        assert op_flops(ShapedOp(name, dims, ["c10::BFloat16"] * len(dims), [])) == flops


@pytest.mark.parametrize(
    ("types", "kernel", "roof"),
    [
        (["c10::Float8_e4m3fn"] * 2, "nvjet_sm90_qqtst_144x128_128x6_1x2_h_bz_coopA_algo2_TNN", 1979.0),
        (["float", "float"], "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1", 494.7),
        (["float", "float"], "void cutlass::Kernel<cutlass_80_simt_sgemm_128x64_8x5_nn_align1>(Params)", 67.0),
        (["c10::BFloat16"] * 2, "nvjet_hsh_128x256_64x4_2x1_v_bz_coopA_NNN", 989.0),
    ],
)
def test_a_gemm_is_rated_against_the_peak_of_the_precision_it_ran_in(types, kernel, roof):
    """FP8 against the FP8 dense peak; an fp32 op whose kernel ran TF32 (its name says so) against the TF32 peak,
    where the plain fp32 one read "357 TFLOP/s, 533% of peak"; an fp32 SIMT kernel against fp32."""
    from common.analysis.efficiency import kernel_roof
    from common.physics import find_peak

    assert kernel_roof(ShapedOp("aten::mm", [[64, 64], [64, 64]], types, []), kernel, find_peak("NVIDIA H200")) == roof


def test_an_fp8_scaled_mm_on_the_h200_is_rated_against_the_fp8_peak(capsys):
    """The H200 fixture: an FP8 _scaled_mm at 8192³ beside a bf16 mm of the same shape. The FP8 kernel was "—";
    now 2·8192³ FLOPs in its 737 µs, about 1,490 TFLOP/s, 75% of the 1,979 dense FP8 peak."""
    from common.analysis.efficiency import efficiency
    from common.reader.build import read_trace

    trace = read_trace(ROOT / "tests" / "fixtures" / "foreign" / "fp8_scaled_mm.json.gz")
    eff = {name: e for (_, name), e in efficiency(trace).items()}
    (fp8,) = [e for name, e in eff.items() if "qqtst" in name]
    assert fp8.flops == 3 * 2 * 8192**3 and fp8.peak_tflops == 1979.0
    assert 1400 < fp8.tflops < 1600 and 70 < fp8.pct_peak < 80
    (bf16,) = [e for name, e in eff.items() if "qqtst" not in name]
    assert bf16.peak_tflops == 989.0 and 75 < bf16.pct_peak < 85


def test_an_fp32_gemm_on_tf32_tensor_cores_is_rated_against_the_tf32_peak():
    """The H200 fixture: one fp32 4096³ GEMM with TF32 allowed, one without. The TF32 kernel read "533% of peak"
    against plain fp32 in issue 32's trace; here about 400 TFLOP/s, 81% of the 494.7 dense TF32 peak."""
    eff = efficiency(read_trace(ROOT / "tests" / "fixtures" / "foreign" / "tf32_mm.json.gz"))
    by_peak = {e.peak_tflops: e for e in eff.values()}
    assert set(by_peak) == {494.7, 67.0}
    assert [name for (_, name), e in eff.items() if e.peak_tflops == 494.7][0].startswith("sm90_xmma_gemm_f32f32_tf32")
    assert 60 < by_peak[494.7].pct_peak < 95 and 60 < by_peak[67.0].pct_peak < 95


def test_a_grouped_gemm_on_the_h200_gets_the_flops_of_every_group():
    """torch._grouped_mm: 16,384 bf16 tokens [M, K=2048] through 8 experts' [K, N=4096]: 2·M·K·N a step, about
    740 TFLOP/s in its CUTLASS kernel, 75% of the bf16 peak."""
    trace = read_trace(ROOT / "tests" / "fixtures" / "foreign" / "grouped_mm.json.gz")
    eff = efficiency(trace)
    assert sum(e.flops for e in eff.values()) == len(trace.steps) * 2 * 16384 * 2048 * 4096
    main = max(eff.values(), key=lambda e: e.us)
    assert main.peak_tflops == 989.0 and 65 < main.pct_peak < 85


def test_shapes_that_do_not_fit_give_no_flops():
    assert op_flops(ShapedOp("aten::mm", [[64, 32], [31, 16]], [], [])) is None
    assert op_flops(ShapedOp("aten::mm", [], [], [])) is None


# ---- the rules, on a trace from torch on the CPU with the GPU events a GPU run adds, written in by hand ----


def cpu_loop_trace(tmp_path) -> dict:
    """A real torch.profiler trace of three steps on the CPU, each reading a tensor's value with .item()."""
    x = torch.ones(64, 64)
    path = tmp_path / "cpu.json"
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=0, warmup=1, active=3),
        record_shapes=True,
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(4):
            with record_function("train_step"):
                (x @ x).sum().item()
            prof.step()
    return json.loads(path.read_text())


def with_gpu_events(data: dict, sync_inside: bool, pageable: bool) -> dict:
    """`data` with, in each step, a kernel, optionally a sync inside the work and a pageable copy, and the loop's
    own cudaDeviceSynchronize at the step's end."""
    events = data["traceEvents"]
    steps = [e for e in events if e.get("name", "").startswith("ProfilerStep#")]
    corr = 1000
    for step in steps:
        ts, dur, tid = step["ts"], step["dur"], step["tid"]
        corr += 10
        events += [
            ev("cuda_runtime", "cudaLaunchKernel", ts + 0.1 * dur, 5, tid=tid, correlation=corr),
            ev("kernel", "void gemm_kernel(int)", ts + 0.1 * dur + 6, 0.2 * dur, tid=7, correlation=corr),
            ev("cuda_runtime", "cudaDeviceSynchronize", ts + 0.9 * dur, 0.05 * dur, tid=tid, correlation=corr + 3),
        ]
        if sync_inside:
            events.append(
                ev("cuda_runtime", "cudaStreamSynchronize", ts + 0.5 * dur, 0.1 * dur, tid=tid, correlation=corr + 1)
            )
        if pageable:
            events += [
                ev("cuda_runtime", "cudaMemcpyAsync", ts + 0.6 * dur, 3, tid=tid, correlation=corr + 2),
                ev("gpu_memcpy", "Memcpy HtoD (Pageable -> Device)", ts + 0.6 * dur + 4, 2, tid=7,
                   correlation=corr + 2),
            ]  # fmt: skip
    data["deviceProperties"] = [{"id": 0, "name": "NVIDIA H200"}]
    return data


def test_a_sync_inside_the_step_fires_and_the_loops_own_end_of_step_sync_does_not(tmp_path):
    data = cpu_loop_trace(tmp_path)
    clean = diagnose(parse(with_gpu_events(json.loads(json.dumps(data)), sync_inside=False, pageable=False)))
    synced = diagnose(parse(with_gpu_events(data, sync_inside=True, pageable=False)))
    assert "host-device sync inside the step" not in rule_names(clean)
    [rule] = [r for r in synced.rules if r.name == "host-device sync inside the step"]
    assert "cudaStreamSynchronize 1" in rule.evidence[0]
    assert "cudaDeviceSynchronize" not in rule.evidence[0]


def test_a_pageable_host_copy_fires_the_pin_memory_rule(tmp_path):
    d = diagnose(parse(with_gpu_events(cpu_loop_trace(tmp_path), sync_inside=False, pageable=True)))
    [rule] = [r for r in d.rules if r.name == "pageable host copies"]
    assert "Memcpy HtoD (Pageable -> Device) ×1" in rule.evidence[0]
    assert "pin_memory" in rule.fix


def test_a_cpu_trace_is_bound_by_the_cpu_and_fires_no_gpu_rule(tmp_path):
    d = diagnose(parse(cpu_loop_trace(tmp_path)))
    assert d.bound == "CPU" and d.verdict.startswith(("compute-bound on the CPU", "overhead-bound on the CPU"))
    assert not rule_names(d) & {"host-device sync inside the step", "pageable host copies"}


def test_a_first_step_paying_for_start_up_fires_with_the_calls_only_it_makes():
    d = diagnose(fixture("01_matmul_add", "64_bf16_cold_eager_w0u0a20"))
    [rule] = [r for r in d.rules if r.name == "a first step that pays for start-up"]
    assert "cudaMalloc" in "\n".join(rule.evidence)
    assert "a first step that pays for start-up" not in rule_names(
        diagnose(fixture("01_matmul_add", "64_bf16_cold_eager"))
    )


def test_the_longest_gaps_say_what_the_cpu_ran():
    d = diagnose(fixture("05_training_step", "8_1024_768_12_3072_amp_bf16_cold_eager"))
    [rule] = [r for r in d.rules if r.name == "the longest GPU gaps"]
    assert len(rule.evidence) == 3
    assert all("the CPU was" in line for line in rule.evidence)


def test_gemms_far_from_peak_fire_on_a_tiny_matmul_and_not_on_a_large_one():
    assert "GEMMs far from peak (from record_shapes)" in rule_names(
        diagnose(fixture("01_matmul_add", "64_bf16_cold_eager"))
    )
    assert "GEMMs far from peak (from record_shapes)" not in rule_names(
        diagnose(fixture("01_matmul_add", "4096_bf16_warm_eager"))
    )


# ---- two ranks: exposed communication ----


def rank_trace(rank: int, overlap: bool) -> dict:
    """One rank's step: 1 ms of backward compute, then (or alongside, with `overlap`) a 600 µs all-reduce."""
    comm_start = 300 if overlap else 1010
    return {
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#1", 0, 1700),
            ev("cuda_runtime", "cudaLaunchKernel", 5, 3, correlation=1),
            ev("cuda_runtime", "cudaLaunchKernel", 9, 3, correlation=2),
            ev("kernel", "void backward_gemm(int)", 10, 1000, tid=7, correlation=1),
            ev(
                "kernel",
                "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)",
                comm_start,
                600,
                tid=9,
                correlation=2,
            ),
        ],  # fmt: skip
        "distributedInfo": {"rank": rank, "world_size": 2, "backend": "nccl"},
        "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
    }


def test_an_all_reduce_after_the_backward_is_exposed_and_one_beside_it_is_hidden():
    for rank in (0, 1):
        serial = diagnose(parse(rank_trace(rank, overlap=False)))
        overlapped = diagnose(parse(rank_trace(rank, overlap=True)))
        assert serial.bound == "communication"
        assert serial.median.comm_exposed == pytest.approx(600)
        assert overlapped.bound != "communication"
        assert overlapped.median.comm_exposed == pytest.approx(0)


# ---- where it shows ----


def test_the_summary_prints_the_verdict_and_explain_adds_the_evidence(capsys):
    path = FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz"
    code, out, _ = command(summary.main, capsys, path)
    assert code == 0
    assert "verdict: bound by the CPU" in out
    assert "rule: kernels shorter than their launch" in out
    assert "median 1.38 µs on the GPU" not in out
    code, out, _ = command(summary.main, capsys, path, "--explain")
    assert "median 1.38 µs on the GPU" in " ".join(out.split())


def test_the_top_kernels_table_shows_tflops_from_record_shapes(capsys):
    code, out, _ = command(summary.main, capsys, FIXTURES / "01_matmul_add" / "4096_bf16_warm_eager.json.gz")
    header = next(line for line in out.splitlines() if line.startswith("µs/step"))
    assert "TFLOP/s" in header and "%peak" in header
    gemm = next(line for line in out.splitlines() if "nvjet" in line and line.strip()[0].isdigit())
    assert " 778 " in gemm


def test_the_per_step_table_shows_the_budget(capsys):
    path = FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz"
    code, out, _ = command(summary.main, capsys, path, "--per-step", "--markdown")
    header = next(line for line in out.splitlines() if line.startswith("| step"))
    assert "idle%" in header and "host%" in header and "wait%" in header


def test_a_scripts_report_prints_the_verdict_of_its_own_run(tmp_path, capsys):
    threads = torch.get_num_threads()  # a tiny step runs on one thread: put torch's back for the other tests
    try:
        assert run("01_matmul_add", tmp_path, "--size", "8") == 0
    finally:
        torch.set_num_threads(threads)
    out = capsys.readouterr().out
    assert re.search(r"verdict: (overhead|compute)-bound on the CPU: ", out)


def test_the_diff_leads_with_the_bound_before_and_after(capsys):
    a = FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz"
    b = FIXTURES / "01_matmul_add" / "4096_bf16_warm_eager.json.gz"
    code, out, _ = command(diff.main, capsys, a, b)
    assert code == 0
    title, *lines = out.split("\n\n")[0].splitlines()  # the title, then at once the bounds
    assert title.startswith("diff: A = ") and lines[0] == "bound: CPU → GPU"
    assert lines[1].startswith("A: bound by the CPU") and any(line.startswith("B: bound by the GPU") for line in lines)


def test_the_budgets_gpu_busy_is_the_readers_union_over_streams():
    for tag in ("8_1024_768_12_3072_amp_bf16_cold_eager", "1_128_768_12_3072_cudagraphs_amp_bf16_cold_compiled"):
        trace = fixture("05_training_step", tag)
        for b, step in zip(diagnose(trace).budgets, trace.steps, strict=True):
            assert b.busy == pytest.approx(step.gpu_busy_us, abs=1e-6)
    two_streams = parse(rank_trace(0, overlap=True))
    assert diagnose(two_streams).budgets[0].busy == pytest.approx(two_streams.steps[0].gpu_busy_us)


def test_the_longest_gaps_are_heapq_nlargest_s_in_its_order_ties_included():
    """_longest looks only at the budgets whose own longest gap can reach the top; it must pick what heapq.nlargest
    picks over all the gaps in order, longest first and an earlier gap first among equal lengths."""
    import heapq
    import random

    from common.analysis.budget import Budget, Gap
    from common.analysis.diagnosis import _longest

    rng = random.Random(3)
    for _ in range(2000):
        starts = [rng.random() * 10 for _ in range(rng.randint(0, 30))]
        gaps = [Gap(s, s + rng.choice([0.5, 1, 1, 2, rng.random() + 0.01]), "host", 0, None) for s in starts]
        cuts = sorted(rng.sample(range(len(gaps) + 1), min(len(gaps) + 1, rng.randint(1, 6))))
        chunks = [gaps[a:b] for a, b in zip([0, *cuts], [*cuts, len(gaps)], strict=True)]
        budgets = [Budget(1.0, gaps=c, longest_gap=max((g.end - g.start for g in c), default=0.0)) for c in chunks]
        n = rng.randint(0, 7)
        want = heapq.nlargest(n, range(len(gaps)), key=lambda i: gaps[i].end - gaps[i].start) if n else []
        assert [id(g) for g in _longest(budgets, n)] == [id(gaps[i]) for i in want]


def test_a_budget_knows_its_longest_gap():
    from common.analysis.budget import budget
    from common.reader.model import GpuOp

    launch = Launch("cudaLaunchKernel", 2.0, 1.0, 0, 1)
    ops = [GpuOp("kernel", "k", 2.0, start=s, launch=launch._replace(ts=s - 1)) for s in (3.0, 6.0, 12.0)]
    b = budget(ops, 0.0, 20.0)
    assert [g.end - g.start for g in b.gaps] == [3.0, 1.0, 4.0, 6.0] and b.longest_gap == 6.0


def test_gemms_far_from_peak_give_the_share_of_peak_as_the_table_does():
    [rule] = [r for r in diagnose(fixture("01_matmul_add", "64_bf16_cold_eager")).rules if "far from peak" in r.name]
    assert "0% of peak" not in "\n".join(rule.evidence), rule.evidence
    assert re.search(r"TFLOP/s, 0\.0\d+% of peak", rule.evidence[0]), rule.evidence


def test_a_count_of_kernels_is_whole_per_step_or_over_the_steps():
    """Never '35.3 of 38 kernels per step' (issue 30 item 9): where the steps' counts differ, the totals."""
    from common.analysis.diagnosis import _counted

    assert _counted(70, 76, 2, "kernels") == "35 of 38 kernels per step"
    assert _counted(106, 114, 3, "kernels") == "106 of 114 kernels over the 3 steps"
    assert _counted(5, 7, 1, "kernels") == "5 of 7 kernels per step"


def test_an_op_s_helper_kernel_is_marked_and_its_main_kernel_holds_the_rate(capsys):
    """torch._grouped_mm launches prepare_grouped_gemm_data (1.7 µs) before its CUTLASS GEMM: the op's FLOPs split
    by time gave the helper the GEMM's 737 TFLOP/s too (issue 32). The helper holds none; the GEMM holds the op's
    FLOPs over both kernels' time."""
    path = ROOT / "tests" / "fixtures" / "foreign" / "grouped_mm.json.gz"
    trace = read_trace(path)
    eff = {name: e for (_, name), e in efficiency(trace).items()}
    (helper,) = [e for name, e in eff.items() if "prepare_grouped_gemm_data" in name]
    (main,) = [e for name, e in eff.items() if "prepare_grouped_gemm_data" not in name]
    assert helper.helper and helper.flops == 0 and helper.tflops is None
    kernels = [op for s in trace.steps for op in s.kernels]
    assert main.flops == 3 * 2 * 16384 * 2048 * 4096 and main.us == pytest.approx(sum(op.us for op in kernels))
    code, out, _ = command(summary.main, capsys, path)
    (row,) = [line for line in out.splitlines() if "prepare_grouped" in line]
    assert code == 0 and " helper " in row


def test_a_sync_in_one_step_of_two_is_counted_over_the_steps_not_as_half_a_call():
    """The H200's 06 fp16 trace read "made inside: aten::_foreach_addcdiv_ 5.33" per step (issue 30 item 9)."""
    from helpers import tiny_gpu_trace

    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("cuda_runtime", "cudaStreamSynchronize", 60, 2, correlation=50))
    (rule,) = [r for r in diagnose(parse(data)).rules if r.name == "host-device sync inside the step"]
    assert rule.evidence[0].startswith("over the 2 steps: cudaStreamSynchronize 1, blocking the CPU 2.00 µs")


def test_syncs_made_inside_different_ops_in_each_step_are_still_counted_per_step():
    """One sync a step is 'per step: ... 1' even where the op it falls in differs between steps (the run's timing:
    CI's load moved a sync from one op to the next); only the ops' line is counted over the steps."""
    from helpers import tiny_gpu_trace

    data = tiny_gpu_trace()
    data["traceEvents"] += [
        ev("cuda_runtime", "cudaStreamSynchronize", 55, 1, correlation=50),  # inside aten::add
        ev("cuda_runtime", "cudaStreamSynchronize", 116, 1, correlation=51),  # inside aten::mm
    ]
    (rule,) = [r for r in diagnose(parse(data)).rules if r.name == "host-device sync inside the step"]
    assert rule.evidence[0].startswith("per step: cudaStreamSynchronize 1, blocking the CPU 1.00 µs")
    assert rule.evidence[1] == "made inside (over the 2 steps): aten::add 1, aten::mm 1"


@pytest.mark.parametrize(
    ("figures", "bound"),
    [
        ({"comm": 30.0, "comm_exposed": 25.0, "busy": 60.0, "host_wait": 40.0}, "communication"),
        ({"busy": 40.0, "host_wait": 50.0, "kernel_wait": 10.0}, "CPU"),
        ({"busy": 40.0, "host_wait": 10.0, "kernel_wait": 30.0, "other_wait": 20.0}, "waits"),
        ({"busy": 80.0, "non_compute": 30.0, "compute": 50.0, "host_wait": 20.0}, "copies"),
        ({"busy": 90.0, "compute": 90.0, "host_wait": 10.0}, "GPU"),
        ({"busy": 65.0, "compute": 65.0, "host_wait": 35.0}, "balanced"),
    ],
)
def test_the_bound_is_decided_from_the_median_budget_alone(figures, bound):
    """The decision (bound_of) apart from its wording: each bound from a 100 µs step's figures."""
    from common.analysis.budget import Budget
    from common.analysis.diagnosis import bound_of

    assert bound_of(Budget(span=100.0, **figures)) == bound


def test_a_sync_is_placed_in_the_op_open_around_it_else_in_the_label():
    """A sync after an op has ended is not made in that op: the H200's 06 read "made inside: aten::_foreach_addcdiv_"
    for syncs made in DistributedDataParallel.forward, the op started last before them, long ended."""
    from helpers import tiny_gpu_trace

    data = tiny_gpu_trace()
    data["traceEvents"] += [
        ev("cuda_runtime", "cudaStreamSynchronize", 20, 1, correlation=50),  # inside aten::mm, inside aten::matmul
        ev("cuda_runtime", "cudaStreamSynchronize", 70, 1, correlation=51),  # aten::add ended at 60; 'fwd' is open
    ]
    (rule,) = [r for r in diagnose(parse(data)).rules if r.name == "host-device sync inside the step"]
    assert rule.evidence[1] == "made inside (over the 2 steps): aten::mm 1, fwd 1"


def test_ddp_s_syncs_on_the_h200_are_placed_in_its_forward_with_their_share():
    trace = read_trace(ROOT / "tests" / "fixtures" / "foreign" / "ddp_nccl_1rank.json.gz")
    (rule,) = [r for r in diagnose(trace).rules if r.name == "host-device sync inside the step"]
    assert rule.evidence == [
        "per step: cudaEventSynchronize 8, blocking the CPU 14.8 µs in the sync calls (0.2% of the steps' time)",
        "made inside: DistributedDataParallel.forward 8",
    ]
