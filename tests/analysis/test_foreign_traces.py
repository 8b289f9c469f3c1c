"""Traces readers bring from their own code: no schedule, no synchronize, backward passes, CUDA graphs, threads,
streams, ranks, ROCm, and odd but parseable input. GPU ones are H200 fixtures made by
tests/fixtures/make_foreign_traces.py (torch 2.11.0+cu130); the others are made here, with torch on the CPU or by hand.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
import torch
from helpers import ROOT, command, ev, tiny_gpu_trace
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.analysis.diff import main as diff_main
from common.analysis.summary import main as summary_main
from common.analysis.tables import num, phase_table
from common.reader.build import parse, read_trace
from common.reader.model import Trace

FOREIGN = ROOT / "tests" / "fixtures" / "foreign"


ONE_WINDOW = (
    "no ProfilerStep#N events (no schedule?) and no repeated labels: the whole trace is summarised as one window, its "
    "figures per window"
)


def foreign(name: str) -> Trace:
    return read_trace(FOREIGN / f"{name}.json.gz")


def per_step(trace: Trace, count) -> set:
    return {count(step) for step in trace.steps}


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


# 1. No synchronize per step


def test_no_sync_attention_counts_whole_numbers_of_kernels_per_step():
    trace = foreign("nosync_attention")
    assert per_step(trace, lambda s: len(s.kernels)) == {7}  # 2 GEMMs, 2 muls, 2 masked fills, softmax
    assert per_step(trace, lambda s: sum("MulFunctor" in k.name for k in s.kernels)) == {2}
    assert per_step(trace, lambda s: len(s.memcpy)) == {1} and per_step(trace, lambda s: s.launches) == {7}


def test_no_sync_attention_gpu_time_matches_cuda_events_within_half_a_percent():
    trace = foreign("nosync_attention")
    events = json.loads((FOREIGN / "cuda_events.jsonl").read_text())["cuda_event_us"]
    for step in trace.steps:
        assert step.gpu_busy_us == pytest.approx(events[f"ProfilerStep#{step.number}"], rel=0.005)


def test_no_sync_attention_says_what_it_left_out_in_one_line():
    """Its 3 ops' launches are not in the trace at all: they were not "launched before the first profiled step"
    as far as the trace shows (issue 30 item 9)."""
    assert foreign("nosync_attention").notes == [
        "3 GPU ops (4.00 ms) ran during the profiled steps with no launch call in the trace (launched before the "
        "profiler recorded, still running: no synchronize between steps?): not counted"
    ]


def lagging_trace() -> dict:
    """The tiny GPU trace with its warm-up kernel running inside step #2, launched before it (no synchronize)."""
    data = tiny_gpu_trace()
    data["traceEvents"] = [
        ev("kernel", "warmup_kernel", 30, 4, tid=7, correlation=99) if e.get("name") == "warmup_kernel" else e
        for e in data["traceEvents"]
    ]
    data["traceEvents"].append(ev("cuda_runtime", "cudaLaunchKernel", 2, 1, correlation=99))
    return data


def test_gpu_work_launched_before_the_steps_is_counted_in_no_step():
    trace = parse(lagging_trace())
    assert [len(s.kernels) for s in trace.steps] == [2, 1]
    assert "warmup_kernel" not in [op.name for s in trace.steps for op in s.gpu]
    assert trace.notes == [
        "1 GPU ops (4.00 µs) launched before the first profiled step ran during them (no synchronize between "
        "steps?): not counted"
    ]


def test_a_trace_without_correlation_ids_places_gpu_work_by_time_and_says_it_guessed():
    data = lagging_trace()
    for e in data["traceEvents"]:
        e.get("args", {}).pop("correlation", None)
    trace = parse(data)
    assert [len(s.kernels) for s in trace.steps] == [3, 0]  # step 3's GEMM ran after step 3 ended
    assert trace.notes == ["no correlation ids: GPU work is placed in the step its start time falls in (a guess)"]


def test_the_suites_own_traces_have_nothing_left_out():
    assert parse(tiny_gpu_trace()).notes == []


# 2. No schedule


def test_a_bare_profile_on_the_cpu_is_one_step_over_the_whole_trace(tmp_path):
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.add(x @ x, x)
    prof.export_chrome_trace(str(tmp_path / "bare.json"))
    trace = read_trace(tmp_path / "bare.json")
    assert trace.whole_trace and len(trace.steps) == 1 and trace.label is None
    assert trace.steps[0].cpu_ops["aten::mm"] == 1 and trace.steps[0].cpu_ops["aten::add"] == 1
    assert trace.steps[0].region_us == trace.steps[0].dur_us > 0
    assert trace.notes == [ONE_WINDOW]
    assert trace.cpu_what == "the whole profiled window"


def test_a_bare_profile_with_a_record_function_label_times_the_label_only_when_named(tmp_path):
    x = torch.randn(32, 32)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        y = x @ x
        with record_function("fwd"):
            torch.add(y, x)
    prof.export_chrome_trace(str(tmp_path / "bare.json"))
    trace = read_trace(tmp_path / "bare.json")
    assert trace.label is None and trace.steps[0].region_us == trace.steps[0].dur_us
    named = read_trace(tmp_path / "bare.json", region="fwd")
    assert named.label == "fwd" and 0 < named.steps[0].region_us < trace.steps[0].dur_us
    assert named.cpu_what == "record_function 'fwd' (--region)"


def test_a_bare_profile_on_the_h200_counts_its_kernels_and_launches():
    trace = foreign("bare_profile")
    [step] = trace.steps
    assert (len(step.kernels), len(step.memset), step.launches, step.graph_launches) == (5, 1, 5, 0)


def test_the_summary_of_a_bare_profile_says_it_is_one_step(tmp_path, capsys):
    code, out, _ = command(summary_main, capsys, FOREIGN / "bare_profile.json.gz")
    assert code == 0 and ONE_WINDOW in " ".join(out.split())


# 3. CUDA graphs


@pytest.mark.parametrize("name", ["reduce_overhead", "graph_replay"])
def test_graph_replays_count_graph_launches_and_every_replayed_kernel(name):
    trace = foreign(name)
    assert per_step(trace, lambda s: (s.launches, s.graph_launches, len(s.kernels))) == {(2, 1, 7)}


def test_the_reduce_overhead_trace_runs_inductor_s_fused_kernel_from_the_graph():
    trace = foreign("reduce_overhead")
    assert per_step(trace, lambda s: sum(k.name.startswith("triton_") for k in s.kernels)) == {1}
    assert per_step(trace, lambda s: len(s.memset)) == {2}
    assert trace.per_step(lambda s: s.gpu_busy_us) == pytest.approx(57.7, abs=0.05)


def test_the_summary_and_the_diff_show_graph_launches(capsys):
    code, out, _ = command(summary_main, capsys, FOREIGN / "reduce_overhead.json.gz")
    assert code == 0 and "per step, 2 kernel launches + 1 graph launch → 7 kernels" in out
    code, out, _ = command(diff_main, capsys, FOREIGN / "graph_replay.json.gz", FOREIGN / "reduce_overhead.json.gz")
    assert code == 0 and "B: per step, 2 kernel launches + 1 graph launch → 7 kernels" in out
    assert next(line.split() for line in out.splitlines() if line.startswith("graph launches")) == [
        "graph", "launches", "1", "1", "0", "0%"
    ]  # fmt: skip


def test_a_trace_without_graphs_shows_no_graph_line(capsys):
    _, out, _ = command(summary_main, capsys, FOREIGN / "side_stream.json.gz")
    assert "graph launch" not in out


# 5. ROCm


def rocm_trace() -> dict:
    """An AMD GPU's trace, as Kineto writes it on ROCm: HIP launches, Tensile and hipBLASLt GEMMs."""
    events = []
    for n, start in ((2, 0), (3, 100)):
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", start, 90),
            ev("user_annotation", "fwd", start + 1, 80),
            ev("cuda_runtime", "hipExtModuleLaunchKernel", start + 2, 3, correlation=10 * n),
            ev("cuda_runtime", "hipLaunchKernel", start + 6, 3, correlation=10 * n + 1),
            ev("cuda_runtime", "hipModuleLaunchKernel", start + 9, 3, correlation=10 * n + 2),
            ev("kernel", "Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0", start + 5, 20, tid=3,
               correlation=10 * n, grid=[256, 1, 1], block=[256, 1, 1]),
            ev("kernel", "void at::native::elementwise_kernel<128, 4>(int)", start + 30, 4, tid=3,
               correlation=10 * n + 1),
            ev("kernel", "Custom_Cijk_Alik_Bljk_HHS_BH_Bias_HA_S_SAV_UserArgs_MT256x256x64", start + 40, 9, tid=3,
               correlation=10 * n + 2),
        ]  # fmt: skip
    return {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "AMD Instinct MI300X", "warpSize": 64}]}


def test_rocm_launches_are_counted():
    trace = parse(rocm_trace())
    assert per_step(trace, lambda s: s.launches) == {3} and trace.has_gpu


def test_amd_gemm_kernels_have_the_gemm_family_and_elementwise_is_pointwise():
    trace = parse(rocm_trace())
    assert per_step(trace, lambda s: tuple(k.family for k in s.kernels)) == {("gemm", "pointwise", "gemm")}


def test_an_amd_gpu_gets_no_theoretical_occupancy():
    trace = parse(rocm_trace())
    assert trace.sm is None and trace.steps[0].kernels[0].theoretical_occupancy(trace.sm) is None


@pytest.mark.parametrize(
    "call",
    ["cudaLaunchKernel", "cudaLaunchKernelExC", "cuLaunchKernel", "cuLaunchKernelEx", "cudaLaunchCooperativeKernel",
     "cuLaunchCooperativeKernel", "hipLaunchKernel", "hipExtModuleLaunchKernel", "hipModuleLaunchKernel"],
)  # fmt: skip
def test_every_kernel_launch_api_counts_as_one_launch(call):
    data = {"traceEvents": [ev("user_annotation", "ProfilerStep#0", 0, 10), ev("cuda_runtime", call, 1, 1)]}
    assert parse(data).steps[0].launches == 1 and parse(data).steps[0].graph_launches == 0


# 6. Threads, streams, ranks


def test_backward_kernels_launched_from_autograds_thread_count_in_the_backward_phase():
    path = FOREIGN / "train_step.json.gz"
    events = json.loads(gzip.decompress(path.read_bytes()))["traceEvents"]
    launcher = {e["args"]["correlation"]: e["tid"] for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver")}
    main_tid = next(e["tid"] for e in events if e.get("name") == "train_step")
    other = [e for e in events if e.get("cat") == "kernel" and launcher.get(e["args"]["correlation"]) != main_tid]
    trace = read_trace(path)
    assert len(other) == 3 * 11  # 11 backward kernels per step from autograd's thread
    assert per_step(trace, lambda s: s.phase("backward").kernels) == {12}  # those and the main thread's one
    assert per_step(trace, lambda s: len(s.kernels)) == {27}


def test_work_on_a_side_stream_is_counted_by_its_launch():
    trace = foreign("side_stream")
    assert per_step(trace, lambda s: sum(k.family == "gemm" for k in s.kernels)) == {2}  # one on each stream
    assert per_step(trace, lambda s: len(s.kernels)) == {4}


def test_cpu_ops_of_a_second_thread_inside_the_step_are_counted():
    """torch.profiler records only threads that share its state (autograd's, as in train_step), so by hand."""
    data = tiny_gpu_trace()
    data["traceEvents"] += [ev("cpu_op", "aten::mm", 60, 5, tid=2), ev("cpu_op", "aten::mm", 120, 5, tid=2)]
    first, second = parse(data).steps
    assert (first.cpu_ops["aten::mm"], second.cpu_ops["aten::mm"]) == (2, 2)


def rank_trace(rank: int, nccl_us: float, cpu_us: float) -> dict:
    """One rank of a two-rank NCCL run: a GEMM and an all-reduce per step."""
    events = []
    for n, start in ((2, 0), (3, 1000)):
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", start, cpu_us),
            ev("user_annotation", "ddp_step", start + 1, cpu_us - 2),
            ev("cuda_runtime", "cudaLaunchKernel", start + 2, 3, correlation=10 * n),
            ev("cuda_runtime", "cudaLaunchKernel", start + 6, 3, correlation=10 * n + 1),
            ev("kernel", "nvjet_sm90_tst_128x128_64x4", start + 5, 100, tid=7, correlation=10 * n),
            ev("kernel", "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*)", start + 110, nccl_us, tid=8,
               correlation=10 * n + 1),
        ]  # fmt: skip
    info = {"backend": "nccl", "rank": rank, "world_size": 2}
    return {"traceEvents": events, "distributedInfo": info, "deviceProperties": [{"name": "NVIDIA H200"}]}


def test_nccl_kernels_are_communication_and_the_rank_is_read():
    trace = parse(rank_trace(1, 50, 400))
    assert trace.rank == 1 and trace.distributed["backend"] == "nccl"
    assert [k.family for k in trace.steps[0].kernels] == ["gemm", "communication"]


def test_a_folder_of_rank_traces_has_a_row_per_rank_and_the_spread(tmp_path, capsys):
    write(tmp_path / "rank0.json", rank_trace(0, 50, 400))
    write(tmp_path / "rank1.json", rank_trace(1, 200, 500))
    code, out, _ = command(summary_main, capsys, tmp_path)
    assert code == 0 and "rank 1 of 2 (nccl)" in out
    rows = [line.split() for line in out.splitlines() if line.split()[:1] in (["0"], ["1"])]
    assert rows == [
        ["0", f"{tmp_path.name}/rank0", "150", "µs", "100", "µs", "50.0", "µs", "50.0", "µs", "400", "µs", "—"],
        ["1", f"{tmp_path.name}/rank1", "300", "µs", "100", "µs", "200", "µs", "200", "µs", "500", "µs", "—"],
    ]
    assert "spread, slowest ÷ fastest rank: GPU 2×, CPU 1.25×" in out


# 7. A backward pass in the step (CPU)


def test_a_backward_pass_inside_the_step_counts_its_ops_every_step(tmp_path):
    w = torch.randn(16, 16, requires_grad=True)
    x = torch.randn(8, 16)
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(str(tmp_path / "backward.json")),
    ) as prof:
        for _ in range(5):
            with record_function("train_step"):
                with record_function("forward"):
                    loss = (x @ w).square().sum()
                with record_function("backward"):
                    loss.backward()
            prof.step()
    trace = read_trace(tmp_path / "backward.json")
    assert trace.phase_parent == "train_step" and trace.phases == ["forward", "backward"]
    assert per_step(trace, lambda s: s.cpu_ops["aten::mm"]) == {2}  # x @ w, and its gradient x.T @ grad
    assert all(s.phase("forward").cpu_us > 0 and s.phase("backward").cpu_us > 0 for s in trace.steps)


# C. Phases


def phased_trace() -> dict:
    """train_step > forward, backward, optimizer; backward's kernel is launched from another thread (tid 2)."""
    events = []
    for n, t in ((0, 0), (1, 1000)):
        events += [
            ev("user_annotation", f"ProfilerStep#{n}", t, 900),
            ev("user_annotation", "train_step", t + 10, 800),
            ev("user_annotation", "forward", t + 20, 100),
            ev("cuda_runtime", "cudaLaunchKernel", t + 30, 5, correlation=10 * n),
            ev("user_annotation", "backward", t + 200, 300),
            ev("user_annotation", "## Call CompiledFxGraph abc ##", t + 210, 10),  # torch.compile's, not a phase
            ev("cuda_runtime", "cudaLaunchKernel", t + 250, 5, tid=2, correlation=10 * n + 1),
            ev("cuda_runtime", "cudaGraphLaunch", t + 260, 5, tid=2, correlation=10 * n + 2),
            ev("user_annotation", "optimizer", t + 600, 150),
            ev("user_annotation", "Optimizer.step#AdamW.step", t + 610, 100),  # nested in optimizer
            ev("cuda_driver", "cuLaunchKernelEx", t + 620, 5, correlation=10 * n + 3),
            ev("kernel", "void gemm_fwd(int)", t + 40, 50, tid=7, correlation=10 * n),
            ev("kernel", "void gemm_bwd(int)", t + 300, 70, tid=7, correlation=10 * n + 1),
            ev("kernel", "graph_kernel_a", t + 380, 5, tid=7, correlation=10 * n + 2),
            ev("kernel", "graph_kernel_b", t + 390, 5, tid=7, correlation=10 * n + 2),
            ev("kernel", "multi_tensor_apply_kernel", t + 700, 20, tid=7, correlation=10 * n + 3),
        ]
    return {"traceEvents": events}


def test_phases_are_the_labels_directly_inside_the_step_label_in_order():
    trace = parse(phased_trace())
    assert trace.phase_parent == "train_step" and trace.phases == ["forward", "backward", "optimizer"]


def test_a_phase_has_its_cpu_span_and_the_gpu_work_launched_in_it_on_any_thread():
    step = parse(phased_trace()).steps[0]
    figures = {name: (p.cpu_us, p.gpu_busy_us, p.kernels, p.kernel_launches, p.graph_launches, p.launches)
               for name, p in step.phases.items()}  # fmt: skip
    assert figures == {
        "forward": (100, 50, 1, 1, 0, 1),
        "backward": (300, 80, 3, 1, 1, 2),
        "optimizer": (150, 20, 1, 1, 0, 1),
    }


def test_a_step_without_a_phase_gives_zeros():
    phase = parse(phased_trace()).steps[0].phase("warmup")
    assert (phase.cpu_us, phase.gpu_busy_us, phase.kernels, phase.launches) == (0, 0, 0, 0)


def test_the_phase_table_has_a_row_per_phase_with_medians():
    lines = phase_table(parse(phased_trace())).splitlines()
    assert lines[0].split() == ["phase", "CPU", "GPU", "busy", "kernels", "launches", "graph", "launches"]
    assert [line.split() for line in lines[2:]] == [
        ["forward", "100", "µs", "50.0", "µs", "1", "1", "0"],
        ["backward", "300", "µs", "80.0", "µs", "3", "2", "1"],
        ["optimizer", "150", "µs", "20.0", "µs", "1", "1", "0"],
    ]


def test_the_summary_and_the_diff_show_the_phases(tmp_path, capsys):
    a = write(tmp_path / "a.json", phased_trace())
    code, out, _ = command(summary_main, capsys, a)
    assert code == 0 and f"Phases of {tmp_path.name}/a (per step, medians)" in out
    code, out, _ = command(diff_main, capsys, a, FOREIGN / "train_step.json.gz")
    row = next(line.split() for line in out.splitlines() if line.startswith("backward"))
    assert code == 0 and row[:5] == ["backward", "300", "µs", "674", "µs"] and row[-2:] == ["2", "12"]


def test_a_trace_without_phases_has_no_phase_rows(capsys):
    assert parse(tiny_gpu_trace()).phases == []
    _, out, _ = command(summary_main, capsys, FOREIGN / "side_stream.json.gz")
    assert "Phases of" not in out


# 8. Odd but parseable input


def test_a_list_as_category_or_a_dict_as_correlation_is_ignored_not_a_type_error():
    data = tiny_gpu_trace()
    data["traceEvents"] += [
        {**ev("cpu_op", "aten::odd", 20, 1), "cat": ["cpu_op"]},
        ev("kernel", "odd_kernel", 30, 1, tid=7, correlation={"id": 2}),
        ev("cuda_runtime", "cudaLaunchKernel", 40, 1, correlation=[2]),
    ]
    trace = parse(data)
    assert [len(s.kernels) for s in trace.steps] == [2, 1] and "aten::odd" not in trace.steps[0].cpu_ops


@pytest.mark.parametrize("bad", [float("inf"), float("nan")])
def test_a_non_finite_grid_reads_as_no_grid(bad):
    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("kernel", "k", 30, 1, tid=7, correlation=2, grid=[bad, 1, 1], block=[128, 1, 1]))
    kernel = next(k for k in parse(data).steps[0].kernels if k.name == "k")
    assert kernel.grid is None and kernel.block == (128, 1, 1)


def test_a_step_number_of_5000_digits_is_not_a_step():
    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("user_annotation", "ProfilerStep#" + "9" * 5000, 500, 10))
    assert [s.number for s in parse(data).steps] == [2, 3]


def test_a_duration_of_1e308_is_skipped_and_said_not_printed(tmp_path, capsys, monkeypatch):
    data = tiny_gpu_trace()
    data["traceEvents"].append(ev("user_annotation", "fwd", 12, 1e308))
    write(tmp_path / "huge.json", data)
    monkeypatch.chdir(tmp_path)  # the notice names the file as typed: a long temporary folder would widen it
    code, out, _ = command(summary_main, capsys, "huge.json")
    assert code == 0 and "1 event(s) with a bad ts/dur skipped" in out
    assert max(len(line) for line in out.splitlines()) <= 120


def test_a_name_with_a_lone_surrogate_prints_escaped(tmp_path, capsys):
    data = tiny_gpu_trace()
    for e in data["traceEvents"]:
        if e.get("name", "").startswith("void ampere_sgemm"):
            e["name"] = "ampere_sgemm_\udcff_nn"
    path = write(tmp_path / "surrogate.json", data)
    code, out, _ = command(summary_main, capsys, path)
    assert code == 0 and "ampere_sgemm_\\udcff_nn" in out
    code, out, _ = command(diff_main, capsys, path, write(tmp_path / "plain.json", tiny_gpu_trace()))
    assert code == 0 and "\\udcff" in out


def test_a_figure_of_16_digits_or_more_has_an_exponent_and_infinity_a_sign():
    assert (num(1e308, 4), num(123456.0, 4), num(float("inf")), num(float("-inf"))) == ("1e+308", "123456", "∞", "−∞")


def test_a_bare_training_loop_is_read_as_its_four_iterations():
    """`with profile()` around four iterations, no schedule: torch's own Optimizer labels repeat four times, so
    the figures are per iteration, not the four's sum in one "step" (issue 30 item 4)."""
    trace = foreign("bare_train_loop")
    assert not trace.whole_trace and [s.number for s in trace.steps] == [1, 2, 3, 4]
    assert trace.cpu_source == "iteration"
    assert trace.notes == [
        "no ProfilerStep#N events (no schedule?): 4 iterations found by their repeated labels, each ending with "
        "'Optimizer.zero_grad#AdamW.zero_grad'; the figures are per iteration"
    ]
    assert len({s.cpu_ops["aten::addmm"] for s in trace.steps}) == 1  # the same forward in each
    assert len({s.launches for s in trace.steps[1:]}) == 1 and trace.steps[1].launches > 0
    for before, after in zip(trace.steps, trace.steps[1:], strict=False):
        assert before.start_us + before.dur_us == after.start_us  # they tile the loop


def _labelled(names: list[str]) -> dict:
    """A bare trace (no ProfilerStep) whose top-level labels are `names`, 100 µs apart, a kernel launched in each."""
    events = []
    for i, name in enumerate(names):
        t = 100.0 * i
        events += [
            ev("user_annotation", name, t + 10, 60),
            ev("cpu_op", "aten::mm", t + 20, 30),
            ev("cuda_runtime", "cudaLaunchKernel", t + 25, 5, correlation=i),
            ev("kernel", "void gemm_kernel<float>(int)", t + 40, 20, tid=7, correlation=i),
        ]
    return {"traceEvents": events}


@pytest.mark.parametrize(
    ("names", "iterations"),
    [
        (["train_step"] * 3, 3),
        (["forward", "backward", "optimizer"] * 2, 2),
        (["forward", "backward", "forward"], None),  # no pattern repeats whole: one window
        (["train_step"], None),
    ],
)
def test_iterations_are_found_where_the_top_level_labels_repeat_a_pattern(names, iterations):
    trace = parse(_labelled(names))
    if iterations is None:
        assert trace.whole_trace and len(trace.steps) == 1 and trace.cpu_source == "window"
    else:
        assert not trace.whole_trace and len(trace.steps) == iterations
        assert [len(s.kernels) for s in trace.steps] == [len(names) // iterations] * iterations
