"""05_training_step.py: a decoder block's training step on the CPU (phases, the optimizer's ops, refusals), the
bytes autograd saves, the phase guesses, and the H200 traces of eager, compile and CUDA graphs at 128 tokens."""

from __future__ import annotations

import contextlib
import io

import pytest
import torch
from helpers import FIXTURES, cpu_view, diff_parts, ev, load_script, run, usage_error

from common.analysis.diff import main as diff_main
from common.analysis.summary import main as summary_main
from common.cli import SuiteError
from common.harness.guess import (
    BESIDES_GEMMS,
    check_guess,
    expect_graph_launches,
    expect_kernel_launches,
    expect_kernels,
    expect_op,
    in_phase,
)
from common.reader.build import parse, read_trace
from common.workloads.block import AMP, BlockShape, block_reference, block_work, saved_for_backward

TINY = ["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64"]
TINY_TAG = "1_16_32_2_64"
H200 = FIXTURES / "05_training_step"
EAGER, COMPILED = "1_128_768_12_3072_amp_bf16_cold_eager", "1_128_768_12_3072_amp_bf16_cold_compiled"
GRAPHS = "1_128_768_12_3072_cudagraphs_amp_bf16_cold_compiled"
PARAMETERS = 4 * 768 * 768 + 3 * 768 * 3072 + 2 * 768  # qkv, out, gate, up, down, two RMSNorm weights


def script_run(folder, *flags: str) -> str:
    """Run the script on the CPU into `folder` and return what it printed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert run("05_training_step", folder, *TINY, *flags) == 0
    return out.getvalue()


@pytest.fixture(scope="module")
def fp32_run(tmp_path_factory):
    """One eager fp32 step on the CPU: what it printed and its trace."""
    folder = tmp_path_factory.mktemp("fp32")
    printed = script_run(folder, "--dtype", "fp32")
    return printed, read_trace(folder / "05_training_step" / f"{TINY_TAG}_fp32_cold_eager.json")


@pytest.fixture(scope="module")
def amp_fused_run(tmp_path_factory):
    """One step at the default precision of a CPU with native bf16 (fp32 parameters, bf16 autocast), pinned
    whatever this CPU is, with AdamW(fused=True) on the CPU."""
    folder = tmp_path_factory.mktemp("amp")
    with cpu_view(native_bf16=True):
        printed = script_run(folder, "--fused-optimizer")
    return printed, read_trace(folder / "05_training_step" / f"{TINY_TAG}_fusedadamw_amp_bf16_cold_eager.json")


def h200(tag: str):
    return read_trace(H200 / f"{tag}.json.gz")


def per_step(trace, value) -> set:
    return {value(step) for step in trace.steps}


def test_a_cpu_step_has_forward_backward_and_optimizer_phases_and_matches_its_guess(fp32_run):
    printed, trace = fp32_run
    assert trace.label == "train_step" and trace.phases == ["forward", "backward", "optimizer"]
    assert "DecoderBlock matches the reference" in printed
    assert "all 5 checked guesses match the trace" in printed


def test_the_runs_report_prints_a_row_per_phase(fp32_run):
    printed, _ = fp32_run
    table = printed[printed.index("per phase (the labels inside train_step") :].splitlines()[1:6]
    assert table[0].split() == ["phase", "CPU", "GPU", "busy", "kernels", "launches", "graph", "launches"]
    assert [row.split()[0] for row in table[2:]] == ["forward", "backward", "optimizer"]


def test_the_backward_runs_two_mm_for_each_mm_of_the_forward_on_the_cpu(fp32_run):
    _, trace = fp32_run
    assert per_step(trace, lambda s: s.phase("forward").cpu_ops["aten::mm"]) == {5}
    assert per_step(trace, lambda s: s.phase("backward").cpu_ops["aten::mm"]) == {10}
    attention_backward = "aten::_scaled_dot_product_flash_attention_for_cpu_backward"
    assert per_step(trace, lambda s: s.phase("backward").cpu_ops[attention_backward]) == {1}
    assert per_step(trace, lambda s: s.phase("optimizer").cpu_ops["aten::mm"]) == {0}


def test_on_the_cpu_adamw_loops_over_its_seven_parameters(fp32_run):
    _, trace = fp32_run
    optimizer = trace.steps[0].phase("optimizer").cpu_ops
    assert optimizer["aten::lerp_"] == optimizer["aten::addcdiv_"] == optimizer["aten::sqrt"] == 7
    assert not [op for op in optimizer if op.startswith("aten::_foreach")]


def test_the_default_precision_is_fp32_parameters_under_bf16_autocast_and_says_so(amp_fused_run):
    printed, trace = amp_fused_run
    assert "fp32 parameters and AdamW state, bf16 autocast (the default; --dtype bf16 for pure bf16)" in printed
    assert "parameters: 10,304 in 7 tensors (41.2 KB, torch.float32)" in printed
    forward = trace.steps[0].phase("forward").cpu_ops
    assert forward["aten::linear"] == 10  # autocast's wrapper, then the real linear
    assert forward["aten::_to_copy"] >= 5  # the five weights cast to bf16


def test_the_fused_optimizer_is_one_op_for_every_parameter(amp_fused_run):
    printed, trace = amp_fused_run
    assert per_step(trace, lambda s: s.phase("optimizer").cpu_ops["aten::_fused_adamw_"]) == {1}
    assert per_step(trace, lambda s: s.phase("optimizer").cpu_ops["aten::lerp_"]) == {0}
    assert "AdamW(fused=True)" in printed


def test_cudagraphs_on_the_cpu_is_refused_in_one_line(tmp_path, capsys):
    err = usage_error(lambda: run("05_training_step", tmp_path, *TINY, "--cudagraphs"), capsys)
    assert "--cudagraphs needs a CUDA GPU" in err
    assert not list(tmp_path.rglob("*.json"))


def test_a_width_that_does_not_split_into_heads_is_refused(tmp_path, capsys):
    err = usage_error(lambda: run("05_training_step", tmp_path, "--dim", "30", "--heads", "4"), capsys)
    assert "--dim 30 does not split into --heads 4" in err


@pytest.mark.parametrize("precision, dtype", [(AMP, torch.bfloat16), ("bf16", torch.bfloat16), ("fp32", torch.float32)])
def test_the_saved_activations_worked_out_per_tensor_are_what_autograd_saves(precision, dtype):
    batch, seq, dim, heads, hidden = 2, 16, 32, 2, 64
    torch.manual_seed(0)
    amp = precision == AMP
    block = load_script("05_training_step").DecoderBlock(dim, heads, hidden).to(torch.float32 if amp else dtype)
    x, target = (torch.randn(batch, seq, dim, dtype=torch.float32 if amp else dtype) for _ in range(2))
    held_before = {t.untyped_storage().data_ptr() for t in [x, target, *block.parameters()]}
    saved: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in held_before:
            saved[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t), torch.autocast("cpu", dtype, enabled=amp):
        torch.nn.functional.mse_loss(block(x), target)
    worked_out = saved_for_backward(BlockShape(batch, seq, dim, heads, hidden), precision, dtype)
    assert sum(saved.values()) == sum(worked_out.values())


def test_the_step_physics_reads_the_shapes_fields_by_name():
    shape = BlockShape(hidden=7, heads=3, dim=12, seq=5, batch=2)  # every field differs: a mix-up shows
    b, s, d, h = 2, 5, 12, 7
    work = block_work(shape, param_bytes=4, input_bytes=2)
    assert work.flops == 3 * (2 * b * s * (4 * d * d + 3 * d * h) + 2 * b * s * s * d)
    assert work.bytes == 2 * b * s * d * 2 + 9 * (4 * d * d + 3 * d * h + 2 * d) * 4


def test_the_default_shape_saves_409_mb_for_the_backward():
    saved = saved_for_backward(BlockShape(8, 1024, 768, 12, 3072), AMP, torch.bfloat16)
    tokens = 8 * 1024
    assert saved["mul: gelu output and up output"] == 2 * tokens * 3072 * 2
    weight_casts = 2 * (4 * 768**2 + 3 * 768 * 3072)
    log_sum_exp, rsqrt = 8 * 12 * 1024 * 4, 4 * tokens
    assert sum(saved.values()) == 30 * tokens * 768 + 8 * tokens * 3072 + weight_casts + log_sum_exp + rsqrt
    assert round(sum(saved.values()) / 1e6) == 409


def test_the_reference_is_the_block_written_out_in_higher_precision():
    torch.manual_seed(0)
    block = load_script("05_training_step").DecoderBlock(32, 4, 64).double()
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(block(x), block_reference(block, x, torch.float32))


def phase_trace() -> dict:
    """One step: `train_step` holding `forward` (a GEMM and an add) and `backward` (two GEMMs, launched from
    another thread, and a graph replaying a kernel)."""
    return {
        "traceEvents": [
            ev("user_annotation", "ProfilerStep#1", 0, 100),
            ev("user_annotation", "train_step", 1, 98),
            ev("user_annotation", "forward", 2, 30),
            ev("cpu_op", "aten::mm", 3, 5),
            ev("cuda_runtime", "cuLaunchKernelEx", 4, 1, correlation=1),
            ev("cuda_runtime", "cudaLaunchKernel", 10, 1, correlation=2),
            ev("user_annotation", "backward", 40, 50),
            ev("cpu_op", "aten::mm", 41, 5, tid=2),
            ev("cuda_runtime", "cuLaunchKernelEx", 42, 1, tid=2, correlation=3),
            ev("cuda_runtime", "cuLaunchKernelEx", 44, 1, tid=2, correlation=4),
            ev("cuda_runtime", "cudaGraphLaunch", 46, 1, tid=2, correlation=5),
            ev("kernel", "nvjet_sm90_tst_64x64_TNT", 20, 5, tid=7, correlation=1),
            ev("kernel", "vectorized_elementwise_kernel<add>", 26, 2, tid=7, correlation=2),
            ev("kernel", "nvjet_sm90_tst_64x64_NNT", 50, 5, tid=7, correlation=3),
            ev("kernel", "nvjet_sm90_tst_64x64_NTT", 56, 5, tid=7, correlation=4),
            ev("kernel", "triton_poi_fused_add_0", 62, 2, tid=7, correlation=5),
        ],
        "suite": {"label": "train_step"},
    }


def test_a_phase_guess_counts_only_what_its_phase_launched():
    guess = [
        *in_phase("forward", expect_kernels("gemm", 1, ""), expect_kernels(BESIDES_GEMMS, 1, ""),
                  expect_op("aten::mm", 1, ""), expect_kernel_launches(2, "")),
        *in_phase("backward", expect_kernels("gemm", 2, ""), expect_kernels(BESIDES_GEMMS, 1, ""),
                  expect_kernel_launches(2, ""), expect_graph_launches(1, "")),
        *in_phase("optimizer", expect_kernels("any", 0, "")),
    ]  # fmt: skip
    verdicts = check_guess(parse(phase_trace()), guess)
    assert [v.seen for v in verdicts] == [[1], [1], [1], [2], [2], [1], [2], [1], [0]]
    assert verdicts[1].expect.title == "forward: kernels besides GEMMs"


@pytest.mark.parametrize(
    "line",
    [expect_kernel_launches(2, ""), expect_graph_launches(1, ""), expect_kernels(BESIDES_GEMMS, 1, "")],
    ids=["kernel launches", "graph launches", "besides GEMMs"],
)
def test_a_phase_count_outside_in_phase_is_refused_in_one_line(line):
    with pytest.raises(SuiteError, match=r"observes nothing: wrap it in in_phase"):
        check_guess(parse(phase_trace()), [expect_op("aten::mm", 2, ""), line])
    cpu_only = {"traceEvents": [e for e in phase_trace()["traceEvents"] if e["cat"] not in ("kernel",)]}
    with pytest.raises(SuiteError, match=r"in_phase"):  # refused on a CPU trace too, where GPU lines go unchecked
        check_guess(parse({**cpu_only, "suite": {"label": "train_step"}}), [line])


def test_the_h200_backward_launches_twice_the_forwards_gemm_calls():
    phases = ("forward", "backward", "optimizer")
    for tag in (EAGER, COMPILED):
        trace = h200(tag)
        assert per_step(trace, lambda s: tuple(s.phase(p).cpu_ops["aten::mm"] for p in phases)) == {(5, 10, 0)}
        gemms = per_step(trace, lambda s: tuple(sum(k.family == "gemm" for k in s.phase(p).gpu) for p in phases))
        assert gemms == {(6, 12, 0)}  # at 128 tokens one forward GEMM and two backward ones are split-K: GEMM + reduce
        splits = [k.name for k in trace.steps[0].kernels if "splitK" in k.name]
        assert len(splits) == 6 and sum("splitKreduce" in name for name in splits) == 3


def test_the_h200_runs_cudnn_attention_forward_and_backward():
    step = h200(EAGER).steps[0]
    forward = [k.name for k in step.phase("forward").gpu if k.family == "attention"]
    backward = [k.name for k in step.phase("backward").gpu if k.family == "attention"]
    assert len(forward) == len(backward) == 1
    assert "cudnn" in forward[0] and "fprop" in forward[0] and "bprop" in backward[0]
    assert step.phase("backward").cpu_ops["aten::_scaled_dot_product_cudnn_attention_backward"] == 1


def test_compile_fuses_each_rmsnorm_and_geglu_on_the_h200():
    step = h200(COMPILED).steps[0]
    forward = [k.name for k in step.phase("forward").gpu if k.family == "triton"]
    assert sum("rsqrt" in name for name in forward) == 2
    assert [name for name in forward if "gelu" in name] == ["triton_poi_fused__unsafe_view_gelu_mul_5"]
    backward = [k.name for k in step.phase("backward").gpu if "gelu_backward" in k.name]
    assert backward == ["triton_poi_fused__unsafe_view_gelu_gelu_backward_mul_view_2"]
    eager = h200(EAGER).steps[0]
    assert (len(eager.kernels), len(step.kernels)) == (90, 54)


def test_cuda_graphs_replay_the_forward_and_the_backward_with_one_launch_each():
    trace = h200(GRAPHS)
    launches = per_step(
        trace, lambda s: tuple((s.phase(p).kernel_launches, s.phase(p).graph_launches) for p in trace.phases)
    )
    assert launches == {((3, 1), (4, 1), (8, 0))}
    assert per_step(trace, lambda s: (len(s.kernels), s.launches, s.graph_launches)) == {(56, 15, 2)}
    assert per_step(trace, lambda s: s.phase("forward").cpu_ops["aten::mm"]) == {0}  # replayed, not dispatched
    assert per_step(h200(EAGER), lambda s: s.launches) == {90}


def test_every_variant_matches_its_guess_on_the_h200():
    script = load_script("05_training_step")
    for tag, variant in ((EAGER, "eager"), (COMPILED, "compile"), (GRAPHS, "cudagraphs")):
        verdicts = check_guess(h200(tag), script.guess(variant, AMP, False, True))
        assert all(v.checked and v.matched for v in verdicts), [(v.expect.title, v.seen) for v in verdicts]


def test_at_128_tokens_the_h200_is_busy_a_fraction_and_the_optimizer_dominates():
    eager, compiled, graphs = h200(EAGER), h200(COMPILED), h200(GRAPHS)
    busy = [t.per_step(lambda s: s.gpu_busy_us) for t in (eager, compiled, graphs)]
    assert busy == pytest.approx([479.4, 396.5, 419.6], abs=0.05)
    assert eager.per_step(lambda s: s.region_us) > 10 * busy[0]  # CPU ms against GPU µs: Part 1, at training scale
    optimizer = [t.per_step(lambda s: s.phase("optimizer").gpu_busy_us) for t in (eager, compiled, graphs)]
    assert optimizer == pytest.approx([236.3, 237.5, 237.6], abs=0.05)
    assert graphs.per_step(lambda s: s.region_us) < compiled.per_step(lambda s: s.region_us) / 1.5


def test_at_128_tokens_the_peak_is_the_optimizers_gradients_and_sqrt_temporary():
    """foreach AdamW's sqrt(exp_avg_sq) is a new fp32 tensor per parameter, while the fp32 gradients are held."""
    for tag in (EAGER, COMPILED, GRAPHS):
        peak = h200(tag).meta["memory"]["peak_bytes"]
        assert 2 * 4 * PARAMETERS < peak < 2 * 4 * PARAMETERS + 1e6
    assert sum(saved_for_backward(BlockShape(1, 128, 768, 12, 3072), AMP, torch.bfloat16).values()) < 4 * PARAMETERS


def test_the_summary_shows_a_row_per_phase_with_graph_launches(capsys):
    assert summary_main([str(H200)]) == 0
    out = capsys.readouterr().out
    table = out[out.index(f"Phases of 05_training_step/{GRAPHS}") :].splitlines()
    assert table[3].split()[0] == "forward" and table[3].split()[-3:] == ["19", "4", "1"]
    assert table[4].split()[0] == "backward" and table[4].split()[-3:] == ["29", "5", "1"]


@pytest.mark.parametrize(
    "before, after, headline",
    [
        (EAGER, COMPILED, "90 kernels per step → 54; GPU busy 479 µs → 396 µs per step (−17%)"),
        (COMPILED, GRAPHS, "54 kernels per step → 56; GPU busy 396 µs → 420 µs per step (+5.8%)"),
    ],
)
def test_the_diff_leads_with_the_kernel_count_and_shows_the_phases(before, after, headline, capsys):
    assert diff_main([str(H200 / f"{before}.json.gz"), str(H200 / f"{after}.json.gz")]) == 0
    out = capsys.readouterr().out
    assert headline in diff_parts(out)[2]  # the bounds lead, then the CPU line, then the headline
    assert "Phases per step (medians)" in out and "A launches" in out


DEFAULT = "8_1024_768_12_3072_amp_bf16_cold_"


def test_at_8192_tokens_the_eager_peak_is_saved_activations_plus_backward_s_work():
    peak = h200(DEFAULT + "eager").meta["memory"]["peak_bytes"]
    saved = sum(saved_for_backward(BlockShape(8, 1024, 768, 12, 3072), AMP, torch.bfloat16).values())
    gradients, hidden_buffer = 4 * PARAMETERS, 8 * 1024 * 3072 * 2  # fp32 gradients; one bf16 [tokens, hidden]
    assert saved + gradients < peak < saved + gradients + 4 * hidden_buffer
    assert round(peak / 1e6, 1) == 566.8


def test_compile_holds_less_than_eager_saves_for_its_backward():
    """Inductor's partitioner saves a few inputs and recomputes the pointwise ops in the backward."""
    compiled = h200(DEFAULT + "compiled").meta["memory"]["peak_bytes"]
    saved = sum(saved_for_backward(BlockShape(8, 1024, 768, 12, 3072), AMP, torch.bfloat16).values())
    assert compiled < saved < h200(DEFAULT + "eager").meta["memory"]["peak_bytes"]
    assert round(compiled / 1e6, 1) == 389.4


def test_at_8192_tokens_compile_saves_gpu_time_and_cuda_graphs_save_cpu_time():
    eager, compiled = h200(DEFAULT + "eager"), h200(DEFAULT + "compiled")
    graphs = h200("8_1024_768_12_3072_cudagraphs_amp_bf16_cold_compiled")
    busy = [t.per_step(lambda s: s.gpu_busy_us) for t in (eager, compiled, graphs)]
    assert busy == pytest.approx([1966.4, 1420.1, 1461.5], abs=0.05)
    cpu = [t.per_step(lambda s: s.region_us) for t in (eager, compiled, graphs)]
    assert cpu[2] < cpu[1] < cpu[0] and all(c > b for c, b in zip(cpu, busy, strict=True))


def test_the_precision_rule_defaults_to_fp32_where_bf16_is_emulated():
    from common.workloads.block import training_precision

    assert training_precision(None, "bf16") == AMP  # a GPU, or a CPU with native bf16: resolve_dtype's bf16
    assert training_precision(None, "fp32") == "fp32"  # resolve_dtype's default where bf16 is emulated
    assert training_precision("bf16", "bf16") == "bf16"  # asked for: run as asked, wherever


def test_05_on_a_cpu_without_native_bf16_runs_fp32_by_default(tmp_path, capsys):
    """It ran bf16 autocast there, its GEMMs on the emulated path: a default 05 estimated at 1,440 s, 31 s in fp32."""
    with cpu_view(native_bf16=False):
        assert run("05_training_step", tmp_path, *TINY) == 0
    out = capsys.readouterr().out
    assert "dtype=fp32" in out and "notice: --dtype bf16 is emulated" not in out
    assert "precision: everything in fp32 (this CPU's default: bf16 is emulated here; --dtype bf16 runs it)" in out
    assert any(p.name.startswith(f"{TINY_TAG}_fp32_") for p in tmp_path.rglob("*.json"))
