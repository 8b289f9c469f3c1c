"""Issue 46's holdout4 cases as small synthetic traces: each pins a change of the verdict's model (the window of a
trace without CPU ops, the last window of a GPU running behind, which collectives and ops run once, the host's work
under a GPU's one-time wait, a lone stretch of Python before the work, a host that is the step's critical path)."""

from __future__ import annotations

from helpers import ev, launched

from common.analysis.diagnosis import diagnose
from common.reader.build import parse


def test_gpu_work_before_the_first_runtime_call_opens_the_window():
    """edls_week02_a4000: no CPU op recorded; kernels drain at the start, then 3.8 s with no CUDA call, then a step."""
    events = [ev("kernel", "sgemm_nn", 10 + 100 * k, 90, tid=7) for k in range(5)]  # launched before the profiler
    for k in range(20):
        events += launched(3_800_000 + 200 * k, "sgemm_tn", 150, 10 + k)
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("bound by the CPU: GPU idle"), line
    assert "of the 3.80 s window" in line and "the trace records no CPU op" in line, line


def test_the_last_window_of_a_gpu_behind_holds_its_own_work():
    """param_resnet_2080ti: the last iteration waits 500 ms for its batch, then runs its work: its GPU window runs to
    its last kernel, not one period, so it is not 'GPU idle 100%'."""
    events, t, corr = [], 0.0, 1
    for k in range(5):
        wait = 500_000 if k == 4 else 1_000
        events += [ev("user_annotation", "next_batch", t, wait)]
        events += launched(t + 10, "zero_kernel", 2, corr, gpu_at=t + 60_000 if k else None)  # behind the CPU
        corr += 1
        for j in range(3):
            events += launched(
                t + wait + 10 + 20 * j, "conv_kernel", 30_000, corr, gpu_at=t + wait + 60_000 + 30_000 * j
            )
            corr += 1
        events += [ev("user_annotation", "Optimizer.step#SGD.step", t + wait + 100, 50)]
        t += wait + 150
    d = diagnose(parse({"traceEvents": events}))
    last = d.budgets[-1]
    assert last.busy >= 90_000, last  # its three 30 ms kernels, not one period's 2 µs


def _collectives(slow_at: int, steps: int, per_step: int = 4) -> list[dict]:
    """`steps` ProfilerSteps from #10 with `per_step` all-to-alls of 200 µs each, the `slow_at`-th of them 6 ms, which
    the host waits for in a cudaStreamSynchronize inside aten::copy_ (as param_dlrm_rank3's host does, 4.77 ms)."""
    events, k = [], 0
    for s in range(steps):
        t0 = 20_000 * s
        events.append(ev("user_annotation", f"ProfilerStep#{10 + s}", t0, 20_000))
        for j in range(per_step):
            t = t0 + 100 + 2_000 * j
            us = 6_000 if k == slow_at else 200
            kernel = ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*)", t + 10, us, tid=7, correlation=k)
            events += [ev("cpu_op", "c10d::alltoall_base_", t, 30),
                       ev("cuda_runtime", "cudaLaunchKernel", t + 2, 5, correlation=k), kernel]  # fmt: skip
            if k == slow_at:
                events += [ev("cpu_op", "aten::copy_", t + 40, us - 25),
                           ev("cuda_runtime", "cudaStreamSynchronize", t + 45, us - 35)]  # fmt: skip
            k += 1
    return events


def test_the_slow_collective_of_a_lone_profiled_step_is_not_one_time():
    """param_dlrm_rank3: ProfilerStep#10 alone, past the schedule's warm-up; its 6 ms all-to-all is its own."""
    line = diagnose(parse({"traceEvents": _collectives(slow_at=2, steps=1)})).verdict
    assert "waiting for its peers" not in line, line
    assert line.startswith("bound by exposed communication: 32% of the 20.0 ms step"), line


def test_the_slow_collective_of_the_first_of_several_steps_is_still_one_time():
    """The guard of the rule above: the first of three steps may hold a set-up (the others show the steady state)."""
    line = diagnose(parse({"traceEvents": _collectives(slow_at=1, steps=3)})).verdict
    assert "a collective waiting for its peers" in line, line


def test_the_hosts_python_under_a_cold_gpus_queued_op_is_kept_in_the_steady_state():
    """moe_compiled_a100_small_rank0: the first kernel sits queued 2 ms on a cold GPU while the host runs the step's
    Python and launches; warmed up, that Python is still the step."""
    events = [ev("user_annotation", "train_step", 0, 6_000)]
    events += launched(100, "first_kernel", 10, 1, gpu_at=2_200, op="aten::mm")  # queued 2.1 ms
    for k in range(20):  # the step's ops, each 90 µs of dispatch around its launch, under the queued wait
        events += [ev("cpu_op", "aten::add", 200 + 100 * k, 90)]
        events += launched(200 + 100 * k, "small_kernel", 5, 10 + k, gpu_at=2_300 + 10 * k)
    events += [ev("cuda_runtime", "cudaDeviceSynchronize", 2_250, 3_700)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "too little is left" not in line, line
    assert "bound by the CPU" in line, line


def test_a_lone_stretch_of_python_before_most_of_the_work_is_set_up():
    """partrans_single_sample: the input is prepared (20 launches), then 300 ms with no op, then the forward's ops
    follow each other closely (80 launches): that one stretch is set-up, not the steady state's Python."""
    events, corr = [], 1
    for k in range(20):
        events += launched(100 * k, "prep_kernel", 20, corr, op="aten::slice")
        corr += 1
    for k in range(80):
        events += launched(302_000 + 100 * k, "fwd_kernel", 60, corr, op="aten::linear")
        corr += 1
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "one long stretch of Python before the work" in line, line
    assert "in no recorded op (Python)" not in line, line


def test_an_op_called_once_with_a_long_own_time_in_a_cold_pass_is_its_first_use():
    """cs521mp2_conv_eager_a10g: the only aten::cudnn_convolution holds 70 ms of its own (cuDNN initialising) and
    launches its kernels: one-time, not 'launching op by op'."""
    events = [ev("cpu_op", "aten::cudnn_convolution", 1_000, 70_100),
              ev("cuda_runtime", "cudaLaunchKernel", 71_000, 5, correlation=1),
              ev("kernel", "conv_kernel", 71_010, 50, tid=7, correlation=1)]  # fmt: skip
    for k in range(5):
        events += launched(72_000 + 50 * k, "add_kernel", 10, 10 + k, op="aten::add")
    events += launched(0, "fill_kernel", 10, 99, op="aten::fill_")
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "first aten::cudnn_convolution" in line, line
    assert "launching the GPU's work op by op" not in line, line


def test_a_host_waiting_on_its_dataloader_the_whole_step_is_the_critical_path():
    """param_resnet_2080ti's median iteration: the GPU is busy 56% finishing the last batch while the host sits in
    the DataLoader's __next__ all along: bound by the CPU, not 'balanced' with a GPU lever first."""
    name = "enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__"
    events = []
    for s in range(3):
        t0 = 1_000_000 * s
        events += [
            ev("user_annotation", f"ProfilerStep#{s + 1}", t0, 1_000_000),
            ev("user_annotation", name, t0, 800_000),
        ]
        for k in range(10):  # the step's work, launched after the batch: runs into the next step's window
            events += launched(t0 + 800_000 + 1_000 * k, "conv_kernel", 60_000, 100 * s + k,
                                gpu_at=t0 + 800_100 + 60_000 * k, op="aten::conv2d")  # fmt: skip
    d = diagnose(parse({"traceEvents": events}))
    assert d.bound == "CPU", d.verdict
    assert "the DataLoader" in d.verdict, d.verdict
    assert "the host's own work ran the whole window, so less GPU work would not shorten it" in d.verdict, d.verdict


def test_a_capture_of_only_the_profiler_s_own_and_set_up_events_has_no_bound():
    """holdout5's flowmatch_pytorch_trace: a profile around nothing (device queries, the profiler's overhead events):
    no op, label, Python frame or GPU work, so no bound, not 'bound by the CPU'."""
    events = [ev("cuda_runtime", "cudaGetDeviceCount", 10, 1), ev("cuda_runtime", "cudaGetDeviceProperties_v2", 20, 9),
              ev("overhead", "Activity Buffer Request", 0, 1724), ev("overhead", "Resource", 2000, 5236)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("no bound: the trace records no op, no label, no Python frame and no GPU work"), line
