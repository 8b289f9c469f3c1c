"""Issue 46's holdout5 cases as small synthetic traces: each pins a change of the verdict's model (a GPU run told by
its NCCL labels)."""

from __future__ import annotations

from helpers import ev, launched

from common.analysis.diagnosis import diagnose
from common.reader.build import parse


def test_an_nccl_collective_label_shows_an_unrecorded_gpu():
    """hta_distinfo_missing: a DDP step with cpu_ops and labels only, no distributedInfo; its nccl:all_to_all label
    is NCCL's, which runs on GPUs alone, so the GPU was not recorded: no bound, not 'overhead-bound on the CPU'."""
    events = [ev("user_annotation", "ProfilerStep#5", 0, 10_000)]
    for k in range(20):
        events.append(ev("cpu_op", "aten::add", 100 + 400 * k, 60))
    events += [ev("user_annotation", "nccl:all_to_all", 8_200, 500), ev("cpu_op", "aten::empty", 8_250, 20)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("no bound: the trace holds no GPU event, yet it ran nccl:all_to_all"), line


def test_communication_under_a_host_that_never_waits_is_not_the_bound():
    """dlrm_rank6: the all-to-alls run exposed (26% of the step) while the host dispatches ops the whole step and
    never waits for the GPU: hiding them would not shorten the step, the host is the bound."""
    events = [ev("user_annotation", "ProfilerStep#10", 0, 10_000)]
    for k in range(240):
        events += launched(20 + 40 * k, "vectorized_elementwise_kernel", 5, k, op="aten::add", op_us=30)
    for j, at in enumerate((1_000, 6_000)):
        comm = ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*)", at, 1_500, tid=8, correlation=1_000 + j)
        events += [ev("cuda_runtime", "cudaLaunchKernel", at - 20, 4, correlation=1_000 + j), comm]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("bound by the CPU: GPU idle"), line
    assert "its exposed communication" in line, line


def _graph_replay(launch: str, kernels: int, sync_until: float) -> list[dict]:
    """One window: a graph launch (`launch`: hipGraphLaunch, or a kernel's launch call) whose `kernels` records of
    100 µs run back to back from 150 µs, then a hipStreamSynchronize from 700 µs to `sync_until`."""
    events = [ev("cpu_op", "aten::zeros", 10, 40), ev("cuda_runtime", launch, 100, 500, correlation=5)]
    events += [ev("kernel", f"Cijk_gemm_{k}", 150 + 100 * k, 100, tid=7, correlation=5) for k in range(kernels)]
    return [*events, ev("cuda_runtime", "hipStreamSynchronize", 700, sync_until - 700)]


def test_a_sync_long_past_a_replay_s_last_kernel_waits_for_its_unrecorded_work():
    """openpi_mi300x_graph_replay_26ms: one hipGraphLaunch, 57 kernel records over 1 ms, then a 29 ms
    hipStreamSynchronize: a sync returns once the work is done, so the GPU ran the graph the whole wait. Not
    'one-time: the sync with the GPU mostly idle (start-up)'."""
    line = diagnose(parse({"traceEvents": _graph_replay("hipGraphLaunch", 10, 20_000)})).verdict
    assert line.startswith("bound by the GPU: busy 9"), line
    assert "18.9 ms of its GPU busy is a graph replay's work the trace does not record" in line, line


def test_a_long_sync_after_a_plain_kernel_launch_is_not_unrecorded_graph_work():
    """The guard of the rule above: without a graph launch before it, the idle sync is not a replay's work."""
    line = diagnose(parse({"traceEvents": _graph_replay("hipLaunchKernel", 1, 20_000)})).verdict
    assert "graph replay" not in line, line


def _replays_with_item(sync_tid: int) -> list[dict]:
    """Six graph replays of 2 ms; after each, an .item() whose stream sync (on thread `sync_tid`) waits for the graph,
    then 0.7 ms of small ops on thread 1, each launching a tiny kernel, before the next replay."""
    events, t = [], 0.0
    for k in range(6):
        events += [ev("cuda_runtime", "cudaGraphLaunch", t, 20, correlation=100 + k)]
        events += [ev("kernel", "nvjet_gemm", t + 30 + 200 * j, 200, tid=7, correlation=100 + k) for j in range(10)]
        events += [ev("cpu_op", "aten::is_nonzero", t + 40, 2_000, tid=sync_tid),
                   ev("cpu_op", "aten::_local_scalar_dense", t + 41, 1_995, tid=sync_tid),
                   ev("cuda_runtime", "cudaStreamSynchronize", t + 45, 1_990, tid=sync_tid)]  # fmt: skip
        for j in range(10):  # the host re-enters its Python: small ops, each launching a tiny kernel
            corr = 1_000 + 10 * k + j
            events += launched(t + 2_040 + 70 * j, "elementwise_kernel", 3, corr, op="aten::add", op_us=30)
        t += 2_740
    return events


def test_the_gpu_s_wait_after_it_drained_in_an_item_sync_is_the_sync_s():
    """openpi_h200_policy_25ms: each denoising step replays a graph, reads a flag with .item() (a stream sync that
    waits for the graph), then re-enters Python and launches the next: the GPU idles ~0.7 ms a step after each sync.
    Without the sync the host would have been that far on: the wait is the sync's, its lever is named."""
    line = diagnose(parse({"traceEvents": _replays_with_item(sync_tid=1)})).verdict
    assert "waiting in a sync in aten::_local_scalar_dense" in line, line


def test_a_sync_on_a_thread_that_launches_nothing_holds_up_no_launch():
    """The guard of the rule above: a side thread's sync does not keep the launching thread from running ahead."""
    line = diagnose(parse({"traceEvents": _replays_with_item(sync_tid=2)})).verdict
    assert "waiting in a sync" not in line, line


def _compiled_window(loop: int) -> list[dict]:
    """One window: a compiled region called once, 2.9 ms of its own time before its kernel; then `loop` calls of
    another compiled region, each launching a short kernel."""
    events = [ev("cpu_op", "Torch-Compiled Region: 1/0", 0, 3_100), ev("cuda_runtime", "cudaLaunchKernel", 3_000, 10)]
    events[-1]["args"]["correlation"] = 1
    events += [ev("kernel", "triton_poi_fused_0", 3_020, 2_000, tid=7, correlation=1)]
    for k in range(20):
        events += launched(3_200 + 30 * k, "vectorized_elementwise_kernel", 100, 10 + k, op="aten::add", op_us=30)
    for k in range(loop):
        t = 5_100 + 300 * k
        events += [ev("cpu_op", "Torch-Compiled Region: 2/0", t, 200), *launched(t + 100, "triton_red_1", 250, 50 + k)]
    return events


def test_a_compiled_region_s_own_time_in_a_loop_is_not_a_first_use():
    """openpi_h200_policy_25ms: the prefix's compiled region, called once, holds 2.8 ms of its graph's Python before
    its first kernel, and a loop of compiled regions follows; a region pays its own time every call (its compiling
    has labels of its own), so one call of it in a loop over compiled code is no evidence of a one-time cost."""
    line = diagnose(parse({"traceEvents": _compiled_window(loop=10)})).verdict
    assert "first Torch-Compiled Region" not in line, line


def test_a_compiled_region_called_once_in_a_cold_pass_may_be_a_first_use():
    """The guard of the rule above (aryan_inductor_vs_ref_k7): with no loop over compiled code, its one call's own
    time is still its first call's cost."""
    line = diagnose(parse({"traceEvents": _compiled_window(loop=1)})).verdict
    assert "first Torch-Compiled Region: 1/0" in line, line


def _addmm(t: float, us: float, out: int) -> dict:
    """An aten::addmm of [10, 1024] x [1024, `out`] (with its bias) on the CPU, with record_shapes' arguments."""
    shapes = {"Input Dims": [[out], [10, 1024], [1024, out], [], []], "Input type": ["float"] * 3 + ["Scalar"] * 2}
    return ev("cpu_op", "aten::addmm", t, us, **shapes)


def test_a_long_call_doing_that_much_more_work_is_not_a_first_call():
    """switch_trace_v2: 90 addmm of 1024-4096 wide outputs at ~0.4 ms, and one [10, 1024] x [1024, 10M] head of
    2.21 s: ~2400 times their FLOPs in ~5500 times their time is its work, not a first call's set-up."""
    events = [_addmm(1_000 * k, 400, 4_096) for k in range(30)]
    events.append(_addmm(40_000, 100_000, 1_000_000))  # 244 times the FLOPs, 250 times the time
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("compute-bound on the CPU: 8"), line
    assert "first aten::addmm" not in line, line


def _cpu_run_with_cuda_set_up() -> dict:
    """switch_trace_v2's shape: the model's addmm on the CPU; CUDA set up meanwhile (cudaGetDeviceCount, then a
    20 ms cudaDeviceSynchronize with nothing launched) on a machine whose deviceProperties list an A100."""
    events = [_addmm(1_000 * k, 900, 4_096) for k in range(30)]
    events += [ev("cuda_runtime", "cudaGetDeviceCount", 30_500, 20)]
    events += [ev("cuda_runtime", "cudaDeviceSynchronize", 31_000, 20_000)]
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA A100 80GB PCIe"}]}


def test_a_long_sync_in_a_trace_with_no_gpu_work_is_cuda_s_start_up():
    """A sync with nothing launched waits for no work: the CUDA context's start-up, a one-time cost."""
    line = diagnose(parse(_cpu_run_with_cuda_set_up())).verdict
    assert "one-time, not counted in the bound: 20.0 ms cudaDeviceSynchronize with no GPU work" in line, line


def test_a_gpu_set_up_but_idle_beside_a_cpu_bound_model_is_a_lever():
    """The GPU the trace lists, which CUDA was set up on and which ran nothing, is where the CPU's work could go."""
    line = diagnose(parse(_cpu_run_with_cuda_set_up())).verdict
    assert line.startswith("compute-bound on the CPU"), line
    assert "or run it on the NVIDIA A100 80GB PCIe the trace lists" in line, line


def test_a_dataloader_holding_a_third_of_a_compute_bound_window_is_named_beside_it():
    """sustainbench_src_trace1: addmm 42% of the window, and one single-process DataLoader __next__ of 33% (Python
    collation on the main thread): compute-bound, with the DataLoader second and its workers as a lever."""
    loader = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    events = [ev("user_annotation", loader, 0, 33_000), ev("cpu_op", "aten::stack", 30_000, 2_000)]
    events += [_addmm(33_100 + 1_000 * k, 950, 4_096) for k in range(67)]
    line = diagnose(parse({"traceEvents": events})).verdict
    assert line.startswith("compute-bound on the CPU"), line
    assert f"and 33% of the window inside the DataLoader's __next__ ({loader}) → try DataLoader workers" in line, line


def test_one_forward_whose_first_layer_is_a_hundred_times_its_second_is_a_cold_pass():
    """chisel_simplenet_forward: one forward of a 2-layer MLP on the CPU; the first aten::linear takes 3.75 ms (addmm
    2.09 ms, aten::t 0.89 ms), the second 31 µs: the window measures first calls, so warm-up is named."""
    events = [ev("user_annotation", "SimpleNet.forward", 0, 5_000), ev("cpu_op", "aten::linear", 400, 3_750),
              ev("cpu_op", "aten::t", 700, 890), ev("cpu_op", "aten::addmm", 1_700, 2_090),
              ev("cpu_op", "aten::relu", 4_300, 550), ev("cpu_op", "aten::linear", 4_900, 31),
              ev("cpu_op", "aten::t", 4_901, 8), ev("cpu_op", "aten::addmm", 4_910, 20)]  # fmt: skip
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "one cold pass" in line and "the first aten::linear takes 3.75 ms, the next 31.0 µs" in line, line
    assert "→ warm up (run the model once) before timing it" in line, line


def _all_to_alls(nelems: int) -> list[dict]:
    """One 6.5 ms step: a 0.2 ms matmul kernel, then four all-to-alls of `nelems` floats each (record_param_comms),
    whose SendRecv kernels (NCCL's) run 1.5 ms each, back to back; the host waits for the last in a sync."""
    args = {"Collective name": "all_to_all", "In msg nelems": nelems, "Out msg nelems": nelems, "Group size": 2,
            "dtype": "Float", "Process Group Name": "0"}  # fmt: skip
    events = [ev("user_annotation", "ProfilerStep#3", 0, 6_500), *launched(100, "ampere_sgemm_32x128_nt", 200, 1)]
    for k in range(4):
        t = 400 + 100 * k
        kernel = ev("kernel", "ncclDevKernel_SendRecv(ncclDevComm*)", 420 + 1_500 * k, 1_500, tid=8, correlation=10 + k)
        events += [ev("cpu_op", "record_param_comms", t, 30, **args),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 5, 5, correlation=10 + k), kernel]  # fmt: skip
    return [*events, ev("cuda_runtime", "cudaDeviceSynchronize", 900, 5_530)]


def test_exposed_communication_with_little_compute_to_hide_behind_says_so():
    """moe_after_r0_c: 'overlap the all-to-all with compute' had 0.2 ms of compute kernels to hide 4.5 ms behind."""
    line = diagnose(parse({"traceEvents": _all_to_alls(1 << 24)})).verdict
    assert line.startswith("bound by exposed communication"), line
    assert "only 200 µs of compute kernels run in it to hide them behind" in line, line


def test_collectives_moving_their_bytes_slower_than_any_link_wait_for_their_peers():
    """moe_after_r0_c: 12 all-to-alls move 98 KB in 4.47 ms (0.022 GB/s): their time is the peer rank's lateness,
    whose lever is the ranks' host time per step and fewer, larger exchanges, not sending less."""
    line = diagnose(parse({"traceEvents": _all_to_alls(2_048)})).verdict
    assert line.startswith("bound by exposed communication that waits for its peers: 92% of the 6.50 ms step"), line
    assert "its 4 collectives move 32.8 KB in 6.00 ms (0.00546 GB/s), so that time is the peer ranks' lateness" in line
    assert "send less" not in line, line


def test_a_lone_graph_launch_is_not_one_time_against_kernel_launches():
    """openpi_mi300x_graph_replay_26ms: its one hipGraphLaunch of a full-call graph takes 2.11 ms, 200 times a
    kernel's launch; a graph launch's length is its graph's size, so that is no evidence of a one-time cost."""
    events = []
    for k in range(5):
        events += launched(10 + 20 * k, "elementwise_kernel", 3, k, op="aten::fill_", op_us=30)
    events += [ev("cuda_runtime", "hipGraphLaunch", 200, 2_100, correlation=50)]
    events += [ev("kernel", f"Cijk_gemm_{k}", 300 + 100 * k, 100, tid=7, correlation=50) for k in range(10)]
    events += [ev("cuda_runtime", "hipStreamSynchronize", 2_310, 3_000)]  # waits for the graph's unrecorded rest
    line = diagnose(parse({"traceEvents": events})).verdict
    assert "hipGraphLaunch" not in line, line
