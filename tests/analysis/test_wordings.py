"""What the summary and the verdict say where a trace lacks a figure: only what it records, never a placeholder
("rank 0 of ? (?)"), a count of nothing ("0 launches but no GPU work") or a word twice ("the window's … GPU
window"). Issue 46's smaller untruths."""

from __future__ import annotations

import json

import pytest
from helpers import FIXTURES, command, ev, tiny_gpu_trace

from common.analysis.diagnosis import diagnose
from common.analysis.summary import main
from common.reader.build import parse, read_trace

H100 = [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]


def rank_note(tmp_path, capsys, info: dict) -> str:
    data = tiny_gpu_trace()
    data["distributedInfo"] = info
    (tmp_path / "t.json").write_text(json.dumps(data))
    code, out, err = command(main, capsys, tmp_path / "t.json")
    assert code == 0, err
    [note] = [line for line in out.splitlines() if line.startswith("note: ") and ": rank" in line]
    return note.split(": ", 2)[2]


@pytest.mark.parametrize(
    ("info", "said"),
    [
        ({"rank": 0}, "rank 0"),
        ({"rank": 3, "world_size": 8}, "rank 3 of 8"),
        ({"rank": 1, "world_size": 2, "backend": "nccl"}, "rank 1 of 2 (nccl)"),
    ],
)
def test_a_rank_note_says_only_what_distributedinfo_records(tmp_path, capsys, info, said):
    assert rank_note(tmp_path, capsys, info) == said


def test_steps_that_launch_nothing_are_never_called_0_launches():
    """The GPU's only work ran before the first step: the steps launch nothing."""
    data = {
        "traceEvents": [
            ev("cuda_runtime", "cudaLaunchKernel", 1, 1, correlation=1),
            ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 3, 2, tid=7, correlation=1),
            ev("user_annotation", "ProfilerStep#1", 10, 100),
            ev("cpu_op", "aten::add", 20, 10),
            ev("user_annotation", "ProfilerStep#2", 110, 100),
            ev("cpu_op", "aten::add", 120, 10),
        ],
        "deviceProperties": H100,
    }
    d = diagnose(parse(data))
    assert d.bound == "—" and "0 launches" not in d.verdict
    assert d.verdict.startswith("no bound: its steps launch nothing and hold no GPU work (kernels, memcpy, memset)")


def test_a_whole_window_holds_the_gpu_work_after_the_cpus_span():
    """No steps (the whole profiled window) and GPU work after the CPU's span: the window runs to the GPU's work
    (holdout4's edls_week02_a4000), where it was the CPU's 100 µs, measured on "the window's 100 µs GPU window"."""
    data = {
        "traceEvents": [
            ev("cpu_op", "aten::mm", 0, 100),
            ev("cuda_runtime", "cudaLaunchKernel", 10, 5, correlation=1),
            ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 5000, 1000, tid=7, correlation=1),
        ],
        "deviceProperties": H100,
    }
    d = diagnose(parse(data))
    assert d.median.window == "step" and d.median.span == 6000 and "window's" not in d.verdict
    assert "4.90 ms the GPU's first op queued" in d.verdict and "of the 6.00 ms profiled" in d.verdict


def test_the_figures_of_a_verdict_line_are_the_median_steps_own():
    """Issue 46: "GPU idle 98% of the 162 µs step …; longest gap 87.3 ms": the gap was step #0's start-up, the
    share the median step's. The line's launches, longest gap and idle per phase are now the median step's."""
    trace = read_trace(FIXTURES / "01_matmul_add" / "64_bf16_cold_eager_w0u0a20.json.gz")
    d = diagnose(trace)
    step = trace.steps[d.budgets.index(d.median)]
    assert "of the 162 µs step (98% waiting for the host), 2 launches; longest gap 82.1 µs;" in d.verdict
    assert d.median.longest_gap <= d.median.span and step.launches == 2


def test_one_cause_of_the_host_wait_is_said_once():
    """02_linear eager launches one kernel a step: its launches and the Python between its ops are one cause (a
    fixed cost per launch), and the line read "53.1 µs launching the GPU's work op by op and 48.9 µs launching the
    GPU's work op by op". Said once, with what it saves as before."""
    d = diagnose(read_trace(FIXTURES / "02_linear" / "1024_32_64_bf16_cold_eager.json.gz"))
    assert d.verdict.count("launching the GPU's work op by op") == 1
    assert "of the host wait per step, 102 µs launching the GPU's work op by op → try" in d.verdict
    assert "(saves up to 102 µs of the 108 µs step)" in d.verdict


def test_a_step_of_copies_alone_is_not_said_to_launch_one_kernel():
    line = diagnose(read_trace(FIXTURES.parent / "foreign" / "collectives.json.gz")).verdict
    assert "0 launches" in line and "launches one kernel" not in line and "launches no kernel" in line, line
