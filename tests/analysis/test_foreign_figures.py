"""Figures that must hold on a trace the suite did not write: the CPU column, GPU busy on several streams, "—"
where a trace has no figure, stream capture, kernel families, the launch columns. Traces made here with torch on
the CPU, or shaped by hand from the H200 fixtures of tests/fixtures/foreign.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

import pytest
import torch
from helpers import ROOT, command, diff_parts, ev
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.analysis.diff import main as diff_main
from common.analysis.summary import main as summary_main
from common.analysis.tables import column
from common.reader.build import parse, read_trace
from common.reader.naming import kernel_family
from common.units import human_time

FOREIGN = ROOT / "tests" / "fixtures" / "foreign"
H200 = ROOT / "tests" / "fixtures" / "h200"


def load(name: str) -> dict:
    return json.loads(gzip.decompress((FOREIGN / f"{name}.json.gz").read_bytes()))


def write(path: Path, data: dict) -> Path:
    path.write_text(json.dumps(data))
    return path


def profiled(path: Path, body, steps: int = 5) -> Path:
    """A CPU trace of `body()` called once per step under the Part 1 schedule, exported to `path`."""
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=steps - 2),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(steps):
            body()
            prof.step()
    return path


def training_loop_trace(path: Path) -> Path:
    """The loop readers write: a DataLoader batch, forward, backward, two all-reduces, AdamW, under labels torch
    writes itself (DataLoader's __next__, Optimizer.step#AdamW.step, zero_grad) and ones a library writes
    (nccl:all_reduce, torch.compile's `## Call CompiledFxGraph ... ##`), but no label of the suite's."""
    model = torch.nn.Linear(32, 32)
    opt = torch.optim.AdamW(model.parameters())
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 32)), batch_size=8)
    batches = iter(data)

    def step() -> None:
        (x,) = next(batches)
        with record_function("## Call CompiledFxGraph fabc123 ##"):
            loss = model(x).square().mean()
        loss.backward()
        for p in model.parameters():
            with record_function("nccl:all_reduce"):
                p.grad.mul_(0.5)
        opt.step()
        opt.zero_grad()

    return profiled(path, step)


def cpu_cell(out: str, name: str) -> str:
    """The CPU cell of trace `name`'s row in the summary's table (columns: trace, kernels, GPU busy, CPU)."""
    return row_cells(out, name)[3]


# 1. The CPU column


def test_without_the_suites_metadata_the_cpu_column_is_each_steps_profilerstep_span(tmp_path, capsys):
    trace = read_trace(training_loop_trace(tmp_path / "loop.json"))
    names = {name for s in trace.steps for name in s.phases}
    assert {"Optimizer.step#AdamW.step", "nccl:all_reduce"} <= names  # the labels are there, and not timed
    assert any(name.startswith("enumerate(DataLoader)") for name in names)
    assert trace.label is None and all(s.region_us == s.dur_us for s in trace.steps)
    code, out, _ = command(summary_main, capsys, tmp_path / "loop.json")
    assert code == 0 and out.splitlines()[1] == "CPU = the ProfilerStep#N span."
    assert cpu_cell(out, f"{tmp_path.name}/loop") == human_time(trace.per_step(lambda s: s.dur_us))


def test_of_tied_labels_none_is_picked_the_cpu_column_is_the_step(tmp_path):
    def step() -> None:
        for name, n in (("a", 1), ("b", 40), ("c", 8), ("d", 20)):  # each once per step, of different lengths
            with record_function(name):
                torch.randn(n, 64) @ torch.randn(64, 64)

    trace = read_trace(profiled(tmp_path / "tied.json", step))
    assert trace.label is None and [s.region_us for s in trace.steps] == [s.dur_us for s in trace.steps]
    assert trace.phases == ["a", "b", "c", "d"]


def test_region_names_the_label_the_cpu_column_times_in_the_summary_and_the_diff(tmp_path, capsys):
    path = training_loop_trace(tmp_path / "loop.json")
    label = "Optimizer.step#AdamW.step"
    trace = read_trace(path, region=label)
    events = json.loads(path.read_text())["traceEvents"]
    spans = [e["dur"] for e in events if e.get("name") == label and e.get("cat") == "user_annotation"]
    assert sorted(s.region_us for s in trace.steps) == pytest.approx(sorted(spans)[-3:], rel=1e-9)
    code, out, _ = command(summary_main, capsys, path, "--region", label)
    assert code == 0 and out.splitlines()[1] == f"CPU = the record_function label named by --region ({label!r})."
    assert cpu_cell(out, f"{tmp_path.name}/loop") == human_time(trace.per_step(lambda s: s.region_us))
    code, out, _ = command(diff_main, capsys, path, shutil.copy(path, tmp_path / "again.json"), "--region", label)
    assert code == 0 and diff_parts(out)[1] == f"CPU = record_function {label!r} (--region)"


def test_a_region_in_no_step_gives_no_cpu_figure_and_says_so(tmp_path, capsys):
    path = training_loop_trace(tmp_path / "loop.json")
    trace = read_trace(path, region="no_such_label")
    assert all(s.region_us is None for s in trace.steps)
    assert "record_function 'no_such_label' (--region) is in no profiled step: no CPU figure" in trace.notes
    code, out, _ = command(summary_main, capsys, path, "--region", "no_such_label")
    assert code == 0 and cpu_cell(out, f"{tmp_path.name}/loop") == "—"


def test_the_suites_own_traces_keep_their_label_as_the_cpu_column(capsys):
    trace = read_trace(H200 / "02_linear" / "1024_32_64_bf16_cold_eager.json.gz")
    assert trace.label == "linear_fwd" and trace.cpu_what == "record_function 'linear_fwd' (the suite's label)"
    assert all(s.region_us < s.dur_us for s in trace.steps)


# 2. GPU busy over several streams


def overlapping_streams() -> dict:
    """The side-stream fixture with each step's side-stream GEMM moved to start 20 µs after the default stream's
    GEMM, so the two run at once for the rest of the first GEMM."""
    data = load("side_stream")
    gemms = sorted((e for e in data["traceEvents"] if e.get("cat") == "kernel" and "gemm" in e["name"]),
                   key=lambda e: e["ts"])  # fmt: skip
    for main, side in zip(gemms[::2], gemms[1::2], strict=True):
        assert (main["tid"], side["tid"]) == (7, 14)
        side["ts"] = main["ts"] + 20
    return data


def test_gpu_busy_is_the_union_over_streams_not_their_sum():
    data = overlapping_streams()
    trace = parse(data)
    gemms = [e for e in data["traceEvents"] if e.get("cat") == "kernel" and "gemm" in e["name"]]
    for step in trace.steps:
        main, side = sorted((op for op in step.gpu if op.family == "gemm"), key=lambda op: op.start)
        overlap = main.start + main.us - side.start  # the side GEMM starts 20 µs in and outlasts the main one
        assert 30 < overlap < 40 and side.start + side.us > main.start + main.us
        assert step.gpu_busy_us == pytest.approx(sum(op.us for op in step.gpu) - overlap, abs=1e-3)  # ts: 1e-3 µs
        assert step.gpu_sum_us == pytest.approx(sum(op.us for op in step.gpu), abs=1e-9)
        assert step.stream_overlap_us == pytest.approx(overlap, abs=1e-3) and step.streams == {7, 14}
    assert len(gemms) == 2 * len(trace.steps)


def test_with_several_streams_the_per_step_table_shows_their_overlap_and_sums(tmp_path, capsys):
    trace = parse(overlapping_streams())
    code, out, _ = command(summary_main, capsys, write(tmp_path / "streams.json", overlapping_streams()), "--per-step")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("step "))
    assert code == 0 and lines[header].split()[:6] == ["step", "CPU", "µs", "GPU", "µs", "overlap"]
    columns = [column([f(s) for s in trace.steps]) for f in (lambda s: s.dur_us, lambda s: s.gpu_busy_us,
                                                               lambda s: s.stream_overlap_us)]  # fmt: skip
    for i, (step, line) in enumerate(zip(trace.steps, lines[header + 2 :], strict=False)):
        assert line.split()[:4] == [f"#{step.number}", *(figures[i] for figures in columns)]
    note = " ".join(out.split("note: ", 1)[1].split())
    busy, total = (human_time(trace.per_step(f)) for f in (lambda s: s.gpu_busy_us, lambda s: s.gpu_sum_us))
    assert note.startswith(f"{tmp_path.name}/streams: GPU work on 2 streams: per step, GPU busy {busy} (the union), "
                           f"summed over the streams {total} (sums per stream: stream 7: ")  # fmt: skip


def test_one_stream_has_no_overlap_column_and_its_busy_time_is_the_sum_of_its_work(capsys):
    for path in sorted(H200.rglob("*.json.gz")):
        for step in read_trace(path).steps:
            assert step.gpu_busy_us == pytest.approx(step.gpu_sum_us, abs=1e-9) and step.stream_overlap_us == 0
    code, out, _ = command(summary_main, capsys, H200 / "05_training_step", "--per-step")
    assert code == 0 and "overlap" not in out


# 8. Kernel families


@pytest.mark.parametrize(
    "name",
    [
        "void multimem_all_reduce_kernel<__nv_bfloat16, 8>(__nv_bfloat16*, unsigned long, int)",
        "void deep_ep::internode::dispatch<true, 8, 2>(int4*, float*, int*, long*, int)",
        "void deep_ep::intranode::combine<__nv_bfloat16, 8>(__nv_bfloat16*, float*, int)",
        "void deep_ep::internode_ll::dispatch<false, 3, 7168>(void*, float*, int)",
        "ncclDevKernel_AllReduce_Sum_bf16_RING_LL(ncclDevComm*, unsigned long, ncclWork*)",
        "void rcclGenericKernel<1, false>(ncclDevComm*, unsigned long, ncclWork*)",
        "void vllm::cross_device_reduce_1stage<__nv_bfloat16, 8>(vllm::RankData*, vllm::RankSignals, int)",
        "void tensorrt_llm::kernels::ar_fusion::allreduce_fusion_kernel_oneshot_lamport<bf16, 8>(Params)",
        "void all_to_all_dispatch_kernel<128>(int*, int)",
    ],
)
def test_every_collective_kernel_is_communication(name):
    assert kernel_family(name) == "communication"


@pytest.mark.parametrize(
    "name",
    [
        "bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_et64x8_m64x8x32_cga1x1x1_16dp256b_TN_transOut_schedS_bN_sm100a",
        "bmm_Bfloat16_E2m1E2m1_Fp32_t128x8x512u2_s4_et64x8_m64x8x64_cga1x1x1_16dp256b_TN_transOut_sm100a",
        "nvjet_sm100_tst_256x128_64x4_2x1_2cta_v_bz_TNT",
        "void cutlass::device_kernel<cutlass::gemm::kernel::GemmUniversal<...>>(Params)",
        "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
        "void deep_gemm::sm90_fp8_gemm_1d2d_impl<128, 128>(float*, int*, unsigned int)",
        "Cijk_Ailk_Bljk_BBS_BH_MT128x128x32_MI32x32x8x1_SN_1LDSB0",
        "void gemv2T_kernel_val<int, int, float, float, float, 128, 16, 4>(Params)",
        "fused_moe_kernel",
    ],
)
def test_every_gemm_is_gemm(name):
    assert kernel_family(name) == "gemm"


@pytest.mark.parametrize(
    ("name", "family"),
    [
        ("void at::native::unrolled_elementwise_kernel<copy_kernel, c10::Float8_e4m3fn>(int)", "pointwise"),
        ("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float, MeanOps<float>>>(R)", "reduce"),
        ("void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>(float*)", "softmax"),
    ],
)
def test_casts_reductions_and_softmax_keep_their_family(name, family):
    assert kernel_family(name) == family


def test_a_ranks_communication_is_one_family_in_its_trace():
    events = [ev("user_annotation", "ProfilerStep#0", 0, 500)]
    for i, name in enumerate(
        [
            "void multimem_all_reduce_kernel<bf16>(int)",
            "void deep_ep::internode::combine<8>(x)",
            "bmm_E4m3_E4m3E4m3_Fp32_t128x8x128u2_s6_sm100a",
            "ncclDevKernel_AllGather_RING_LL",
        ]
    ):
        events += [ev("cuda_runtime", "cudaLaunchKernel", 10 + i, 1, correlation=i),
                   ev("kernel", name, 100 + 50 * i, 40, tid=7, correlation=i)]  # fmt: skip
    [step] = parse({"traceEvents": events}).steps
    assert [op.family for op in step.kernels] == ["communication", "communication", "gemm", "communication"]


# 6. "—", never a made-up zero


def without_gpu_events(name: str) -> dict:
    """A fixture with its kernel, memcpy and memset events taken out, as a trace whose GPU activity was not
    recorded: its launches stay."""
    data = load(name)
    data["traceEvents"] = [e for e in data["traceEvents"] if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset")]
    return data


def row_cells(out: str, name: str) -> list[str]:
    """The cells of trace `name`'s row in the summary's text table, a time and its unit as one cell."""
    words = next(line.split() for line in out.splitlines() if line.startswith(name + " "))
    cells: list[str] = []
    for word in words:
        if word in ("ns", "µs", "ms", "s"):
            cells[-1] += " " + word
        else:
            cells.append(word)
    return cells


def test_launches_without_gpu_events_say_no_gpu_activity_and_print_dashes(tmp_path, capsys):
    trace = parse(without_gpu_events("train_step"))
    assert trace.has_gpu and not trace.gpu_activity and trace.step_time_us() == (None, "GPU")
    assert any("the trace holds no GPU activity" in note for note in trace.notes)
    (tmp_path / "t").mkdir()  # the row's name, t/launches_only, is short enough not to be cut
    path = write(tmp_path / "t" / "launches_only.json", without_gpu_events("train_step"))
    code, out, _ = command(summary_main, capsys, path, FOREIGN / "side_stream.json.gz", "--per-step")
    cells = row_cells(out, "t/launches_only")
    assert code == 0 and cells[1:3] == ["—", "—"] and cells[4] == "27" and cells[-1] == "—"  # kernels, busy; ×base
    assert "No GPU activity recorded (launches only), so no kernels to list" in out
    assert "Top 5 GPU work of t/launches_only" not in out
    step = next(line.split() for line in out.splitlines() if line.startswith("#2 ") and "—" in line)
    assert step[2:6] == ["—", "—", "27", "—"]  # GPU µs, kernels, launches, memcpy
    phases = out.split("Phases of t/launches_only")[1].split("\n\n")[0]
    backward = next(line.split() for line in phases.splitlines() if line.startswith("backward"))
    assert backward[3:5] == ["—", "—"] and backward[5] == "12"  # GPU busy, kernels; launches


def test_the_diff_of_two_cpu_traces_prints_dashes_for_gpu_figures_in_its_phase_table(tmp_path, capsys):
    w = torch.randn(16, 16, requires_grad=True)

    def step() -> None:
        with record_function("train_step"):
            with record_function("forward"):
                loss = (torch.randn(8, 16) @ w).square().sum()
            with record_function("backward"):
                loss.backward()

    a, b = profiled(tmp_path / "a.json", step), profiled(tmp_path / "b.json", step)
    code, out, _ = command(diff_main, capsys, a, b)
    table = out.split("Phases per step (medians)")[1].strip().splitlines()
    rows = {line.split()[0]: line.split() for line in table[2:] if line.split()}
    assert code == 0 and set(rows) >= {"forward", "backward"}
    for row in (rows["forward"], rows["backward"]):
        assert row[-4:] == ["—", "—", "—", "—"]  # GPU busy and launches, A and B


# 7. Stream capture


def capture_trace(begin: str = "cudaStreamBeginCapture", end: str = "cudaStreamEndCapture") -> dict:
    """A step that captures five launches into a graph on thread 1, while thread 2 launches one kernel that runs,
    then replays the graph: the capture's launches run nothing, the replay runs five kernels."""
    events = [ev("user_annotation", "ProfilerStep#0", 0, 1000), ev("cuda_runtime", begin, 10, 2)]
    events += [ev("cuda_runtime", "cudaLaunchKernel", 20 + 10 * i, 3, correlation=i) for i in range(5)]
    events += [ev("cuda_runtime", "cudaLaunchKernel", 40, 3, tid=2, correlation=50),
               ev("kernel", "side_kernel", 45, 5, tid=7, correlation=50),
               ev("cuda_runtime", end, 80, 2),
               ev("cuda_runtime", "cudaGraphLaunch", 100, 5, correlation=60)]  # fmt: skip
    events += [ev("kernel", f"graph_kernel_{i}", 110 + 10 * i, 5, tid=7, correlation=60) for i in range(5)]
    return {"traceEvents": events}


@pytest.mark.parametrize(("begin", "end"), [("cudaStreamBeginCapture", "cudaStreamEndCapture"),
                                            ("hipStreamBeginCapture", "hipStreamEndCapture")])  # fmt: skip
def test_launches_during_stream_capture_are_counted_apart_as_captured(begin, end):
    [step] = parse(capture_trace(begin, end)).steps
    assert step.captured_launches == 5 and step.captured == {"cudaLaunchKernel": 5}
    assert (step.launches, step.graph_launches, len(step.kernels)) == (1, 1, 6)  # thread 2's launch is no capture


def test_a_capture_trace_is_said_to_be_one_in_the_summary(tmp_path, capsys):
    trace = parse(capture_trace())
    assert trace.notes == [
        "a CUDA graph capture: 5 kernel launches between cudaStreamBeginCapture and cudaStreamEndCapture recorded "
        "into a graph and ran nothing; counted apart as captured, not as launches"
    ]
    code, out, _ = command(summary_main, capsys, write(tmp_path / "capture.json", capture_trace()))
    assert code == 0 and "a CUDA graph capture: 5 kernel launches" in " ".join(out.split())
    assert row_cells(out, f"{tmp_path.name}/capture")[4] == "1"  # launches


def test_a_capture_never_ended_lasts_to_the_end_of_the_trace():
    data = capture_trace()
    data["traceEvents"] = [e for e in data["traceEvents"] if e["name"] != "cudaStreamEndCapture"]
    [step] = parse(data).steps
    assert step.captured == {"cudaLaunchKernel": 5} and step.graph_launches == 1


# 9. --wide's launch columns


def many_apis_trace() -> dict:
    """Two steps launching through every kind of launch API PyTorch traces show, CUDA and HIP."""
    apis = ["cudaLaunchKernel"] * 3 + [
        "cudaLaunchKernelExC",
        "cuLaunchKernel",
        "cuLaunchKernel",
        "cuLaunchKernelEx",
        "cudaLaunchCooperativeKernel",
        "hipLaunchKernel",
        "hipExtModuleLaunchKernel",
        "hipModuleLaunchKernel",
    ]
    events = []
    for n in (0, 1):
        events.append(ev("user_annotation", f"ProfilerStep#{n}", 1000 * n, 900))
        for i, api in enumerate(apis):
            corr = 100 * n + i
            events += [ev("cuda_runtime", api, 1000 * n + 10 * i, 2, correlation=corr),
                       ev("kernel", f"k{i}", 1000 * n + 10 * i + 5, 2, tid=7, correlation=corr)]  # fmt: skip
    return {"traceEvents": events}


def test_wide_launch_columns_add_up_to_launches(tmp_path, capsys):
    code, out, _ = command(summary_main, capsys, write(tmp_path / "apis.json", many_apis_trace()), "--wide")
    lines = out.splitlines()
    header = next(line.split() for line in lines if line.startswith("trace "))
    row = row_cells(out, f"{tmp_path.name}/apis")
    apis = header[header.index("launches") + 1 : header.index("occ.")]
    assert apis == ["cudaLaunchKernel", "cuLaunchKernelEx", "cuLaunchKernel", "cudaLaunchCooperativeKernel",
                    "hipExtModuleLaunchKernel", "hipLaunchKernel", "hipModuleLaunchKernel"]  # fmt: skip
    assert row[5] == "11"  # trace, steps, kernels, GPU busy, CPU, launches: then one cell per API
    assert [int(c) for c in row[6 : 6 + len(apis)]] == [4, 1, 2, 1, 1, 1, 1]


def test_the_launch_columns_of_steps_that_differ_add_up_to_the_median():
    data = many_apis_trace()
    data["traceEvents"] += [ev("user_annotation", "ProfilerStep#2", 2000, 900),
                            ev("cuda_runtime", "cuLaunchKernel", 2010, 2, correlation=900)]  # fmt: skip
    from common.analysis.figures import summarize

    row = summarize(parse(data))
    assert row.launches == 11 and sum(row.launch_apis.values()) == 11


# Real H200 traces of items 2 and 7 (tests/fixtures/make_foreign_traces.py graph_capture overlapping_streams)


def test_a_real_graph_capture_counts_its_captured_launches_apart_from_those_that_ran():
    trace = read_trace(FOREIGN / "graph_capture.json.gz")
    [step] = trace.steps  # a bare `with profile()`: the whole window is one step
    assert step.captured_launches == 5 and sum(step.captured.values()) == 5
    assert (step.launches, step.graph_launches, len(step.kernels)) == (2, 1, 7)  # 2 eager kernels + 5 replayed
    assert any(note.startswith("a CUDA graph capture: 5 kernel launches") for note in trace.notes)


def test_real_gemms_on_two_streams_give_busy_below_their_sum_by_their_overlap():
    trace = read_trace(FOREIGN / "overlapping_streams.json.gz")
    assert len(trace.steps) == 3
    for step in trace.steps:
        assert len(step.streams) == 2 and step.stream_overlap_us > 100  # H200: about 315 µs of each step
        assert step.gpu_busy_us == pytest.approx(step.gpu_sum_us - step.stream_overlap_us, abs=1e-3)
        assert step.gpu_busy_us < step.dur_us < step.gpu_sum_us  # the sum would exceed the step itself


def test_a_foreign_trace_with_record_shapes_fills_tflops_from_its_shaped_ops():
    """Issue 30 item 7: a trace the suite did not write has no `suite` FLOPs; its shaped GEMMs give them. The H200
    FP8 fixture runs an FP8 and a bf16 GEMM at 8192³ a step: 2 · 2·8192³ FLOPs over its 2.12 ms of GPU busy."""
    from common.analysis.figures import shaped_flops, summarize
    from common.reader.build import read_trace

    trace = read_trace(ROOT / "tests" / "fixtures" / "foreign" / "fp8_scaled_mm.json.gz")
    assert shaped_flops(trace) == 2 * 2 * 8192**3
    row = summarize(trace)
    assert row.on == "GPU" and row.tflops == pytest.approx(2 * 2 * 8192**3 / (row.gpu_us * 1e-6) / 1e12)
    assert 900 < row.tflops < 1200 and row.pct_flops is None
    assert shaped_flops(read_trace(ROOT / "tests" / "fixtures" / "foreign" / "train_step.json.gz")) is None
