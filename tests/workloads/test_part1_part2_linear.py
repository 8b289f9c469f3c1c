"""01_matmul_add.py and 02_linear.py end to end on the CPU, through main(argv)."""

from __future__ import annotations

import re

import pytest
from helpers import CPU_DTYPE, load_script, run, trace_names, usage_error, written


def test_matmul_add_default_names_the_trace_as_the_post(tmp_path):
    assert run("01_matmul_add", tmp_path) == 0
    folder = tmp_path / "01_matmul_add"
    tag = f"64_{CPU_DTYPE}_cold_eager"
    assert sorted(p.name for p in folder.iterdir()) == [f"{tag}.json", f"{tag}.txt"]


def test_matmul_add_trace_holds_active_steps_label_and_ops(tmp_path):
    assert run("01_matmul_add", tmp_path, "--size", "16") == 0
    trace = tmp_path / "01_matmul_add" / f"16_{CPU_DTYPE}_cold_eager.json"
    names = trace_names(trace)
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4"} <= names
    assert not {"ProfilerStep#0", "ProfilerStep#1", "ProfilerStep#5"} & names
    assert {"matmul_add", "aten::matmul", "aten::mm", "aten::add"} <= names
    assert "aten::bmm" not in names
    table = trace.with_suffix(".txt").read_text()
    assert "aten::mm" in table and "Self CPU time total" in table


def test_batch_axis_dispatches_bmm(tmp_path):
    assert run("01_matmul_add", tmp_path, "--size", "16", "--batch", "3") == 0
    names = trace_names(tmp_path / "01_matmul_add" / f"3x16_{CPU_DTYPE}_cold_eager.json")
    assert "aten::bmm" in names and "aten::mm" not in names


def test_warm_and_compiled_runs_are_tagged_and_show_addmm(tmp_path, capsys):
    assert run("01_matmul_add", tmp_path, "--size", "16", "--warmup", "--compile", "--dtype", "fp32") == 0
    trace = tmp_path / "01_matmul_add" / "16_fp32_warm_compiled.json"
    assert "aten::addmm" in trace_names(trace)
    out = capsys.readouterr().out
    assert "warm-up: compile + first call" in out


def test_schedule_flags_change_the_profiled_steps_and_the_tag(tmp_path):
    assert run("01_matmul_add", tmp_path, "--size", "8", "--wait", "0", "--warmup-steps", "0", "--active", "5") == 0
    names = trace_names(tmp_path / "01_matmul_add" / f"8_{CPU_DTYPE}_cold_eager_w0u0a5.json")
    assert {f"ProfilerStep#{i}" for i in range(5)} <= names
    assert "ProfilerStep#5" not in names


def test_run_prints_table_paths_guess_and_share_command(tmp_path, capsys):
    assert run("01_matmul_add", tmp_path, "--size", "8") == 0
    out = capsys.readouterr().out
    assert "Self CPU time total" in out
    assert "guess vs trace" in out and "all 4 checked guesses match the trace" in out
    assert f"trace: {tmp_path / '01_matmul_add' / f'8_{CPU_DTYPE}_cold_eager.json'}" in out
    assert "uvx --from trace-util==0.1.0 trace-util" in out


def test_linear_eager_shows_linear_t_addmm_and_no_add(tmp_path):
    assert run("02_linear", tmp_path, "--batch", "32", "--in_dim", "8", "--out_dim", "16") == 0
    trace = tmp_path / "02_linear" / f"32_8_16_{CPU_DTYPE}_cold_eager.json"
    names = trace_names(trace)
    assert {"linear_fwd", "aten::linear", "aten::t", "aten::addmm", "ProfilerStep#4"} <= names
    assert "aten::add" not in names
    assert "aten::addmm" in trace.with_suffix(".txt").read_text()


def test_linear_compiled_drops_the_view_bookkeeping(tmp_path):
    assert run("02_linear", tmp_path, "--batch", "32", "--in_dim", "8", "--out_dim", "16", "--compile") == 0
    names = trace_names(tmp_path / "02_linear" / f"32_8_16_{CPU_DTYPE}_cold_compiled.json")
    assert "aten::addmm" in names and "aten::linear" not in names


def test_strict_passes_when_the_cpu_guess_holds(tmp_path):
    assert run("02_linear", tmp_path, "--batch", "8", "--in_dim", "4", "--out_dim", "4", "--strict") == 0


def test_bench_prints_the_unprofiled_time_next_to_the_profiler_figure(tmp_path, capsys):
    assert run("01_matmul_add", tmp_path, "--size", "8", "--bench") == 0
    out = capsys.readouterr().out
    assert "bench (no profiler):" in out and "s wall per step sustained" in out and "the profiler's CPU" in out
    (line,) = [line for line in out.splitlines() if line.startswith("  the profiler's ")]
    assert re.search(r"s, \d+\.\d\dx the unprofiled wall time above$", line), line  # what the ratio is of


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--size", "0"], "--size: expected a positive integer"),
        (["--size", "-4"], "--size: expected a positive integer"),
        (["--size", "big"], "--size: expected a positive integer"),
        (["--batch", "0"], "--batch: expected a positive integer"),
        (["--dtype", "fp8"], "invalid choice: 'fp8'"),
        (["--device", "tpu"], "--device"),
        (["--active", "0"], "--active: expected a positive integer"),
    ],
)
def test_bad_input_gets_one_line_exit_2_and_no_file(tmp_path, capsys, flags, message):
    err = usage_error(lambda: run("01_matmul_add", tmp_path, *flags), capsys)
    assert message in err
    assert written(tmp_path) == []


def test_cuda_device_without_cuda_is_a_clear_error(tmp_path, capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    err = usage_error(lambda: run("02_linear", tmp_path, "--device", "cuda"), capsys)
    assert "no CUDA GPU" in err
    assert written(tmp_path) == []


def test_unwritable_traces_folder_is_a_clear_error(tmp_path, capsys):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the traces folder should be")
    main = load_script("01_matmul_add").main
    err = usage_error(lambda: main(["--size", "8", "--traces-dir", str(blocker / "traces")]), capsys)
    assert err.startswith("error: cannot write traces to")
    assert written(tmp_path) == [blocker]
