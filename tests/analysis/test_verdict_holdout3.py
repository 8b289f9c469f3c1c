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


def _window(inside: list[dict], us: float = 100_000.0) -> list[dict]:
    """One kernel at each end of a window of `us` µs (the time between is a host-wait gap), and `inside`."""
    return [
        ev("cuda_runtime", "cudaLaunchKernel", 0, 5, correlation=1),
        ev("kernel", "k_first", 6, 10, tid=7, correlation=1),
        ev("cuda_runtime", "cudaLaunchKernel", us - 30, 5, correlation=2),
        ev("kernel", "k_last", us - 20, 10, tid=7, correlation=2),
        *inside,
    ]


def _busy(start: float, count: int, us: float = 95.0, first_corr: int = 100) -> list[dict]:
    """`count` ops each launching a kernel of `us` µs back to back from `start`: a GPU kept busy."""
    out = []
    for k in range(count):
        t, corr = start + k * (us + 1), first_corr + k
        out += [ev("cpu_op", "aten::mm", t, 8), ev("cuda_runtime", "cudaLaunchKernel", t + 1, 5, correlation=corr),
                ev("kernel", "sgemm_kernel", t + 7, us, tid=7, correlation=corr)]  # fmt: skip
    return out


def test_torchscripts_first_call_is_compiling_not_launch_overhead():
    scripted = [ev("cpu_op", "delta_r2", 100, 80_000), ev("cpu_op", "fallback_function", 40_000, 100),
                ev("cpu_op", "fused__autocast_to__1", 40_010, 80),
                ev("cuda_driver", "cuLaunchKernel", 40_020, 30, correlation=50),
                ev("kernel", "fused_kernel", 40_060, 10, tid=7, correlation=50)]  # fmt: skip
    line = diagnose(parse({"traceEvents": _window([*scripted, *_busy(80_200, 200)])})).verdict
    assert "compiling (TorchScript's first call of delta_r2)" in line, line
    assert "the steady state: bound by the GPU" in line and "launching the GPU's work" not in line, line


def test_a_long_sync_with_the_gpu_idle_is_start_up_not_a_wait():
    sync = ev("cuda_runtime", "cudaDeviceSynchronize", 100, 90_000)
    line = diagnose(parse({"traceEvents": _window([sync, *_busy(90_200, 20)])})).verdict
    assert "cudaDeviceSynchronize with the GPU mostly idle (start-up)" in line, line
    assert "waiting in a sync" not in line, line


def test_a_dataloaders_only_next_with_workers_is_its_start_up():
    name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    line = diagnose(parse({"traceEvents": _window([ev("user_annotation", name, 100, 80_000)])})).verdict
    assert "80.0 ms the DataLoader's first batch (its workers started)" in line, line
    assert "raise num_workers" not in line, line


def test_first_launches_are_one_time_where_no_launch_repeats():
    first = [ev("cuda_runtime", "cudaLaunchKernel", 1000 + 20_000 * k, us, correlation=60 + k)
             for k, us in enumerate((9000, 6000, 5000))]  # fmt: skip
    kernels = [ev("kernel", f"k{k}", 1000 + 20_000 * k + 9100, 5, tid=7, correlation=60 + k) for k in range(3)]
    line = diagnose(parse({"traceEvents": _window([*first, *kernels])})).verdict
    assert "20.0 ms cudaLaunchKernel" in line, line  # all three, not those ten times the first launches' median


def test_an_ops_own_time_ten_times_its_usual_is_library_set_up():
    def linear(t: float, addmm_us: float, corr: int) -> list[dict]:  # aten::linear > aten::addmm > a launch
        return [ev("cpu_op", "aten::linear", t, addmm_us + 20), ev("cpu_op", "aten::addmm", t + 5, addmm_us + 10),
                ev("cuda_runtime", "cudaLaunchKernel", t + addmm_us, 5, correlation=corr),
                ev("kernel", "sgemm", t + addmm_us + 10, 5, tid=7, correlation=corr)]  # fmt: skip

    ops = [*linear(1000, 30_000, 80), *linear(40_000, 20_000, 81)]  # both long: their median is no usual length
    ops += [e for k in range(4) for e in linear(70_000 + 200 * k, 50, 82 + k)[1:]]  # four more addmm, no linear
    line = diagnose(parse({"traceEvents": _window(ops)})).verdict
    assert "50.0 ms first aten::addmm" in line, line  # cuBLAS initialising inside the first calls


def test_two_slow_all_to_alls_are_the_steady_state_not_a_late_peer():
    comm = []
    for k in range(12):
        t, us = 1000 + 5000 * k, (4000 if k in (5, 11) else 20)
        comm += [ev("cpu_op", "c10d::alltoall_base_", t, 30), ev("cuda_runtime", "cudaLaunchKernel", t + 2, 5,
                 correlation=70 + k), ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*)", t + 10, us, tid=7,
                 correlation=70 + k)]  # fmt: skip
    line = diagnose(parse({"traceEvents": _window(comm, us=61_000)})).verdict
    assert "waiting for its peers" not in line, line


def test_host_one_time_costs_are_said_once_where_a_call_sits_in_an_op():
    events = [ev("cpu_op", "aten::bmm", 100 * k, 50) for k in range(4)]
    events += [ev("cpu_op", "aten::bmm", 1000, 40_000), ev("cuda_runtime", "cudaFree", 2000, 35_000),
               ev("cuda_runtime", "cudaLaunchKernel", 41_000, 5), ev("cuda_runtime", "cudaLaunchKernel", 41_100, 5),
               ev("cuda_runtime", "cudaLaunchKernel", 50_000, 5)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("no bound:"), line
    assert "one-time, not counted in the bound: 35.0 ms cudaFree, 5.00 ms first aten::bmm (80% of the" in line, line


def test_a_cold_pass_with_no_kernel_repeated_has_no_steady_state():
    cold = [ev("cuda_runtime", "cudaLaunchKernel", 1000, 60_000, correlation=90),
            ev("kernel", "k_mid", 61_100, 5, tid=7, correlation=90)]  # fmt: skip
    line = diagnose(parse({"traceEvents": _window(cold)})).verdict
    assert line.startswith("one-time costs hold 60% of the profiled windows: 60.0 ms cudaLaunchKernel"), line
    assert line.endswith("nothing else recurs (no kernel launched 3 times), so no steady state is left to bound"), line


def test_python_after_a_first_batch_and_before_every_launch_is_set_up():
    name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    events = [ev("user_annotation", name, 0, 100_000)]  # workers starting: ops with long pauses between them
    events += [ev("cpu_op", "aten::randperm", 20_000 * k, 100) for k in range(5)]
    events += [ev("cpu_op", "aten::to", 100_000, 10)]  # then 50 ms of Python before the model runs
    for k in range(60):
        t, corr = 150_000 + 20 * k, 200 + k
        events += [ev("cpu_op", "aten::add", t, 18), ev("cuda_runtime", "cudaLaunchKernel", t + 1, 5, correlation=corr),
                   ev("kernel", "add_kernel", t + 7, 15, tid=7, correlation=corr)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "one long stretch of Python before the work (set-up" in line, line
    assert "in no recorded op (Python)" not in line, line
