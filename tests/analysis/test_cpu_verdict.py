"""A trace without a GPU lane gets Part 1's verdict: compute-bound or overhead-bound, from the ops' self times."""

from __future__ import annotations

import json

from helpers import ev

from common.analysis.diagnosis import diagnose
from common.reader.build import parse, read_trace


def cpu_trace(tmp_path, mm: tuple[float, float], matmul: tuple[float, float]) -> object:
    """Three 100 µs steps, each the label `fwd` with aten::matmul calling aten::mm (and aten::empty inside it)."""
    events = []
    for i in range(3):
        at = 100 * i
        events += [
            ev("user_annotation", f"ProfilerStep#{i}", at, 100),
            ev("user_annotation", "fwd", at, 100),
            ev("cpu_op", "aten::matmul", at + matmul[0], matmul[1]),
            ev("cpu_op", "aten::mm", at + mm[0], mm[1]),
            ev("cpu_op", "aten::empty", at + mm[0], 1),
        ]
    path = tmp_path / "t.json"
    path.write_text(json.dumps({"traceEvents": events, "suite": {"label": "fwd", "flops": 2e6}}))
    return read_trace(path)


def test_self_time_is_the_span_less_the_ops_it_called():
    ops = [(0, 90, 1, "aten::matmul"), (2, 86, 1, "aten::mm"), (2, 1, 1, "aten::empty"), (50, 5, 2, "aten::add")]
    trace = parse({"traceEvents": [ev("cpu_op", name, ts, dur, tid=tid) for ts, dur, tid, name in ops]})
    assert trace.tree.self_us(0, 100) == {"aten::matmul": 4, "aten::mm": 85, "aten::empty": 1, "aten::add": 5}


def test_a_step_inside_one_op_is_compute_bound_with_its_rate(tmp_path):
    line = diagnose(cpu_trace(tmp_path, mm=(2, 90), matmul=(1, 92))).verdict
    assert line.startswith("compute-bound on the CPU: 89% of the step inside aten::mm at 22.5 GFLOP/s"), line


def test_a_step_mostly_around_its_ops_is_overhead_bound(tmp_path):
    line = diagnose(cpu_trace(tmp_path, mm=(20, 11), matmul=(10, 40))).verdict
    assert line.startswith("overhead-bound on the CPU: the busiest op, aten::matmul, is 29% of the step"), line
    assert "the rest dispatch and Python" in line


def test_the_cpu_verdict_reads_self_times_from_the_tree_not_the_file_again(tmp_path):
    trace = cpu_trace(tmp_path, mm=(2, 90), matmul=(1, 92))
    (tmp_path / "t.json").unlink()  # gone after the one read: a second read per step could not happen
    line = diagnose(trace).verdict
    assert line.startswith("compute-bound on the CPU: 89% of the step inside aten::mm"), line


def one_op_steps(name: str) -> object:
    """Three 100 µs steps, each the label `fwd` holding one 92 µs op `name`."""
    events = []
    for i in range(3):
        events += [ev("user_annotation", f"ProfilerStep#{i}", 100 * i, 100), ev("user_annotation", "fwd", 100 * i, 100),
                   ev("cpu_op", name, 100 * i + 2, 92)]  # fmt: skip
    return parse({"traceEvents": events})


def test_a_step_in_sdpa_s_fused_cpu_kernel_is_not_told_to_use_a_fused_kernel():
    """04_c --backend flash on the CPU: 100% inside _scaled_dot_product_flash_attention_for_cpu was told 'fewer
    passes over memory ... or a fused kernel (SDPA instead of softmax(QKᵀ)V)': the lever it already runs."""
    line = diagnose(one_op_steps("aten::_scaled_dot_product_flash_attention_for_cpu")).verdict
    assert "attention is already SDPA's fused kernel" in line, line
    assert "SDPA instead" not in line and "fewer passes over memory" not in line, line


def test_a_gemm_step_without_convolutions_is_not_told_channels_last():
    line = diagnose(one_op_steps("aten::mm")).verdict
    assert "try every physical core" in line, line
    assert "channels_last" not in line, line
    assert "channels_last for convolutions" in diagnose(one_op_steps("aten::mkldnn_convolution")).verdict


def test_a_step_in_the_slow_convolution_path_gets_the_convolution_lever():
    """holdout6's Mac ResNet traces: aten::_slow_conv2d_forward (the non-oneDNN path) holding 73-85% of the step was
    not read as a convolution (the prefix 'aten::slow_conv' lacks its underscore) and got 'fewer passes over memory
    ... SDPA instead of softmax(QKᵀ)V'."""
    line = diagnose(one_op_steps("aten::_slow_conv2d_forward")).verdict
    assert "channels_last for convolutions" in line, line
    assert "SDPA" not in line, line
