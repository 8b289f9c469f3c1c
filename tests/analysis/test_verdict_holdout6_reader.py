"""Holdout6's reader cases as small synthetic traces: the legacy export's GPU ranges (pid "CUDA functions") read as
the GPU's work, and a profiler step that holds none of the trace's work."""

from __future__ import annotations

import json

from helpers import ev

from common.analysis.diagnosis import diagnose
from common.reader.build import parse, read_trace


def _legacy_op(name: str, ts: float, dur: float, gpu: tuple[float, float] | None, flow: int) -> list[dict]:
    """One op of torch.autograd.profiler's export with use_cuda=True, as export_chrome_trace writes it: the op, then
    (where its CUDA events were recorded) a cpu_to_cuda flow and its range on the GPU, pid "CUDA functions"."""
    out = [{"name": name, "ph": "X", "ts": ts, "dur": dur, "tid": 1, "pid": "CPU functions", "args": {}}]
    if gpu is not None:
        flows = {"id": flow, "cat": "cpu_to_cuda"}
        out += [
            {"name": name, "ph": "s", "ts": ts, "tid": 1, "pid": "CPU functions", **flows},
            {"name": name, "ph": "f", "ts": gpu[0], "tid": 0, "pid": "CUDA functions", **flows},
            {"name": name, "ph": "X", "ts": gpu[0], "dur": gpu[1], "tid": 0, "pid": "CUDA functions", "args": {}},
        ]
    return out


def _legacy_convolutions(host_us: float, gpu_us: float, behind: bool) -> list[dict]:
    """20 aten::conv2d, each calling aten::cudnn_convolution, `host_us` each on the host. A GPU `behind` runs their
    ranges back to back, `gpu_us` each, long after the host issued them; else each range opens as its op starts (the
    GPU waits for it) and closes 2 µs after the op returns."""
    events, t, g = [], 0.0, 1_000.0
    for k in range(20):
        if behind:
            outer, inner = (g, gpu_us), (g + 1, gpu_us - 2)
            g += gpu_us
        else:
            outer, inner = (t + 1, host_us + 1), (t + 6, host_us - 8)
        events += _legacy_op("aten::conv2d", t, host_us, outer, 2 * k)
        events += _legacy_op("aten::cudnn_convolution", t + 5, host_us - 10, inner, 2 * k + 1)
        events += _legacy_op("aten::empty", t + host_us + 2, 3, None, -1)  # no CUDA events: no range
        t += host_us + 10
    return events


def test_a_legacy_export_whose_gpu_runs_behind_is_gpu_bound(tmp_path):
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(_legacy_convolutions(host_us=50, gpu_us=5_000, behind=True)))
    d = diagnose(read_trace(path))  # before: "no bound: the trace holds no GPU event"
    assert d.verdict.startswith("bound by the GPU: busy 99% of the 101 ms window"), d.verdict


def test_a_legacy_export_whose_gpu_waits_for_each_op_is_cpu_bound(tmp_path):
    path = tmp_path / "legacy.json"
    path.write_text(json.dumps(_legacy_convolutions(host_us=200, gpu_us=0, behind=False)))
    trace = read_trace(path)
    d = diagnose(trace)
    assert d.verdict.startswith("bound by the CPU: GPU idle"), d.verdict
    assert "launches" not in d.verdict.split("→")[0], d.verdict  # the export records none: no "0 launches"
    notes = [n for n in trace.notes if "legacy autograd-profiler export" in n]
    assert len(notes) == 1 and "40 per-op time ranges" in notes[0] and "not kernels" in notes[0], trace.notes


def test_the_legacy_gpu_ranges_are_not_ops_of_a_cpu_thread():
    events = _legacy_convolutions(host_us=50, gpu_us=5_000, behind=True)
    trace = parse({"traceEvents": events})
    assert set(trace.tree.threads) == {1}, trace.tree.threads
    assert sum(op.us for op in trace.gpu) == 100_000  # own time of each range: nesting counted once


def test_a_profiler_step_that_holds_none_of_the_work_is_not_the_window():
    """august_vae_tb: ProfilerStep#1 is a 14 µs marker around the profiler's own step call; the DataLoader's
    __next__ (59% of the trace) and the model's ops all ran before it."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [ev("user_annotation", loader, 0, 6_000)]
    events += [ev("cpu_op", "aten::select", 10 + 50 * k, 40) for k in range(100)]
    events += [ev("cpu_op", "aten::addmm", 6_100 + 300 * k, 250) for k in range(10)]
    events += [ev("user_annotation", "ProfilerStep#1", 10_000, 14), ev("cpu_op", "aten::empty", 10_002, 2)]
    trace = parse({"traceEvents": events})
    d = diagnose(trace)  # before: "bound by the CPU: no GPU activity in the trace; 14.0 µs of CPU per step"
    # 67%: of the window less the 1.1 ms pause before the marker's op, ten times the usual one (a one-off stall)
    assert d.verdict.startswith("data-loading-bound on the CPU: 67% of the window inside the DataLoader's"), d.verdict
    assert "10.0 ms of CPU in the whole recording (its ProfilerStep#N hold none of the work)" in d.verdict, d.verdict
    assert any("1 ProfilerStep#N span holds (14.0 µs) 2.00 µs of the 6.50 ms" in n for n in trace.notes), trace.notes
