"""The verdict on real H200 traces of ordinary loops (tests/fixtures/make_foreign_traces.py): its window, its bound,
its main figures and its lever, where the GPU runs behind the CPU, where the host wait is not launches, and where the
trace holds no GPU work at all."""

from __future__ import annotations

import pytest
from helpers import FIXTURES, ROOT

from common.analysis.diagnosis import diagnose
from common.reader.build import read_trace

FOREIGN = ROOT / "tests" / "fixtures" / "foreign"
ALL = sorted([*FIXTURES.rglob("*.json.gz"), *FOREIGN.glob("*.json.gz")])


def verdict(name: str):
    return diagnose(read_trace(FOREIGN / f"{name}.json.gz"))


@pytest.mark.parametrize("path", ALL, ids=lambda p: p.name)
def test_every_step_budget_adds_up_to_its_window(path):
    for b in diagnose(read_trace(path)).budgets:
        assert b.busy + b.idle == pytest.approx(b.span, rel=1e-5, abs=1e-3), (path.name, b.window)  # to 0.001%
        assert 0 <= b.busy <= b.span * (1 + 1e-5) + 1e-3  # never "GPU busy 151%"


@pytest.mark.parametrize("name", ["two_behind", "nosync_attention"])
def test_a_gpu_behind_its_cpu_is_measured_on_the_gpu_window_and_bound_by_the_gpu(name):
    d = verdict(name)
    assert d.bound == "GPU" and d.median.window == "gpu"
    assert d.median.pct(d.median.busy) > 99
    assert "GPU window" in d.verdict


def test_a_batch_made_on_the_host_is_told_to_move_randn_off_the_cpu():
    d = verdict("host_batch")
    assert d.bound == "CPU"
    assert "aten::randn on the CPU" in d.verdict and "try moving aten::randn off the CPU" in d.verdict
    assert "torch.compile" not in d.verdict


def test_a_dataloader_stall_is_told_to_use_workers():
    d = verdict("dataloader_stall")
    assert d.bound == "CPU" and "the DataLoader (enumerate(DataLoader)" in d.verdict
    assert "num_workers > 0" in d.verdict and "torch.compile" not in d.verdict


def test_a_trace_without_gpu_work_gets_no_bound_and_says_why():
    d = verdict("no_cuda_activity")
    assert d.bound == "—" and d.verdict.startswith("no bound: ")
    assert "ProfilerActivity.CUDA" in d.verdict and d.median is None


def test_neither_side_dominating_is_balanced_with_both_levers():
    d = diagnose(read_trace(FIXTURES / "03_simple_mlp" / "64_128_768_3072_bf16_cold_eager.json.gz"))
    assert d.bound == "balanced"
    m = d.median
    assert 50 <= m.pct(m.busy) <= 70 and m.pct(m.host_wait) >= 30
    assert "balanced between the GPU and the host" in d.verdict and d.verdict.count("→") == 2


def test_a_cold_first_step_is_one_time_and_the_warm_steps_bound_by_the_gpu():
    # a fresh process profiled from its first step (H100): module loads, cuBLAS's set-up, the allocator's growth
    d = verdict("cold_steps")
    assert d.bound == "GPU" and d.verdict.startswith("one-time costs hold 96% of the profiled steps: 295 ms step #0")
    assert "warm up before profiling" in d.verdict and "the steady state: bound by the GPU" in d.verdict
    assert "launching the GPU's work" not in d.verdict  # the first step's slow launches are not launch overhead


def test_a_torchscript_fusion_compiled_at_the_second_call_is_one_time_too():
    # TorchScript's profiling executor records the first call and fuses (95 ms of no op in step #1) at the second
    d = verdict("torchscript_fusion")
    assert d.bound == "GPU" and "93.6 ms step #1's extra time" in d.verdict
    assert d.verdict.startswith("one-time costs hold 96% of the profiled steps: 130 ms step #0's extra time")
