"""Honest CPU runs: tiny steps on one thread, the thread count said, no stray log lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

import pytest
import torch
from helpers import CPU_DTYPE, ROOT, run, usage_error, written

from common.harness.bench import MIN_CALLS, time_unprofiled


@pytest.fixture(autouse=True)
def keep_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


def test_a_tiny_cpu_step_runs_on_one_thread_and_says_so(tmp_path, capsys):
    torch.set_num_threads(2)
    assert run("01_matmul_add", tmp_path, "--size", "16") == 0
    out = capsys.readouterr().out
    assert "notice: a tiny step" in out and "CPU threads: 1" in out
    meta = json.loads((tmp_path / "01_matmul_add" / f"16_{CPU_DTYPE}_cold_eager.json").read_text())["suite"]
    assert meta["threads"] == 1 and meta["memory"] is None  # GPU memory is not measured on the CPU


def test_threads_flag_overrides_the_tiny_step_rule(tmp_path, capsys):
    assert run("01_matmul_add", tmp_path, "--size", "16", "--threads", "2") == 0
    out = capsys.readouterr().out
    assert "notice: a tiny step" not in out and "CPU threads: 2" in out


def test_more_threads_than_the_cores_this_process_may_use_is_refused_in_one_line(tmp_path, capsys, monkeypatch):
    cores = len(os.sched_getaffinity(0))
    err = usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "16", "--threads", str(cores + 1)), capsys)
    assert f"--threads {cores + 1}" in err and f"{cores} CPU core(s)" in err and f"--threads {cores} or fewer" in err
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {3})  # `taskset -c 3`
    err = usage_error(lambda: run("01_matmul_add", tmp_path, "--size", "16", "--threads", "2"), capsys)
    assert "1 CPU core(s)" in err and written(tmp_path) == []


def test_a_larger_cpu_step_keeps_torchs_threads(tmp_path, capsys):
    torch.set_num_threads(2)
    assert run("01_matmul_add", tmp_path, "--size", "256") == 0
    assert "CPU threads: 2" in capsys.readouterr().out


@pytest.mark.slow
def test_a_cold_start_run_prints_no_stray_log_lines(tmp_path):
    done = subprocess.run(
        [sys.executable, str(ROOT / "01_matmul_add.py"), "--size", "8", "--wait", "0", "--warmup-steps", "0",
         "--active", "4", "--bench", "--traces-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    for noise in ("USDT", "No CUDA runtime", "won't be using warmup", "gpuGetDeviceCount"):
        assert noise not in done.stderr + done.stdout
    assert "no profiler warm-up step: the first recorded step also pays for starting the tracer" in done.stdout


def test_bench_never_reports_a_median_of_one_call():
    calls = []
    result = time_unprofiled(lambda: (calls.append(1), time.sleep(0.2)), on_gpu=False)  # a step too slow for a long run
    assert result.wall_calls >= MIN_CALLS and len(calls) >= MIN_CALLS
    assert result.wall_s >= 0.2  # each call sleeps that long: the median of real calls, not an average of none


@pytest.mark.parametrize("grad", [False, True])
def test_bench_times_the_step_in_the_grad_mode_it_is_given(grad):
    modes = set()
    time_unprofiled(lambda: modes.add(torch.is_grad_enabled()), on_gpu=False, grad=grad)
    assert modes == {grad}
