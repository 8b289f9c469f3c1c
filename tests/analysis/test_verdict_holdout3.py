"""Issue 46's holdout3 cases as small synthetic traces: each pins a change of the verdict's model (how a legacy export
is read, a GPU run whose GPU was not recorded, a CPU rank waiting for gloo, one-time costs on the host)."""

from __future__ import annotations

import json

from helpers import ev

from common.analysis.diagnosis import diagnose
from common.reader.build import parse, read_trace


def _legacy(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    """One event of torch.autograd.profiler's pre-Kineto export: no "cat", pid "CPU functions"."""
    return {"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": tid, "pid": "CPU functions", "args": {}}


def _convolutions(first_us: float) -> list[tuple[float, float, str]]:
    """Six cuDNN convolutions, the first `first_us` long, the others 100 µs, each inside an aten::conv2d."""
    out, at = [], 0.0
    for i in range(6):
        us = first_us if i == 0 else 100.0
        out += [(at, us + 20, "aten::conv2d"), (at + 10, us, "aten::cudnn_convolution")]
        at += us + 50
    return out


def test_a_legacy_autograd_profiler_export_is_read(tmp_path):
    path = tmp_path / "legacy.json"
    ops = [*_convolutions(100.0), (900, 30, "Shared MLP")]
    path.write_text(json.dumps([_legacy(name, ts, dur) for ts, dur, name in ops]))
    trace = read_trace(path)  # refused before: "no profiler events"
    assert trace.steps and trace.tree.self_us(0, 2000)["aten::cudnn_convolution"] == 600


def test_a_gpu_run_without_gpu_events_gets_no_bound_not_a_cpu_verdict():
    events = [ev("cpu_op", name, ts, dur) for ts, dur, name in _convolutions(100.0)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("no bound: the trace holds no GPU event, yet it ran aten::cudnn_convolution"), line


def test_a_nccl_rank_with_cpu_ops_only_is_a_gpu_run_not_recorded():
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "## backward ##", 100, 600),
              ev("cpu_op", "aten::addmm", 10, 80), ev("cpu_op", "aten::copy_", 750, 100)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events, "distributedInfo": {"backend": "nccl"}})).verdict
    assert line.startswith("no bound: the trace holds no GPU event, yet its process group runs on nccl"), line
    assert "600 µs of the 1.00 ms step in '## backward ##' with no op under it" in line, line


def test_a_cpu_rank_waiting_for_gloo_all_reduce_is_communication_bound():
    events = [ev("user_annotation", "ProfilerStep#1", 0, 1000), ev("user_annotation", "## forward ##", 0, 200),
              ev("cpu_op", "aten::mm", 10, 150), ev("user_annotation", "## backward ##", 200, 700),
              ev("cpu_op", "aten::mm", 210, 40), ev("user_annotation", "gloo:all_reduce", 240, 650, tid=9),
              ev("cpu_op", "aten::add_", 920, 50)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("communication-bound on the CPU: 660 µs of the step in '## backward ##' with no op"), line
    assert "gloo:all_reduce ×1 ran on the process group's threads" in line, line


def test_a_first_call_ten_times_its_kind_is_one_time_on_a_cpu_verdict():
    events = [ev("cpu_op", name.replace("cudnn_", "mkldnn_"), ts, dur) for ts, dur, name in _convolutions(5000.0)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("compute-bound on the CPU"), line
    assert "one-time, not counted in the bound: 5.00 ms first aten::mkldnn_convolution" in line, line


def test_random_data_made_on_the_cpu_is_told_to_be_made_where_it_is_used():
    events = [ev("cpu_op", "aten::normal_", 100 * i, 90) for i in range(5)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "making the random data where it is used (aten::normal_" in line, line
