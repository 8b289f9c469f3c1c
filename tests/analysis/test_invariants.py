"""The invariants of a verdict (common.analysis.invariants), checked before anything prints: every fixture keeps
them all, and a Diagnosis broken in each way is caught; a user's run gets one note, a test an error."""

from __future__ import annotations

import dataclasses
import json
from collections import Counter

import pytest
from helpers import FIXTURES, ROOT, command, ev, tiny_gpu_trace

from common.analysis import digest as digest_module
from common.analysis.diagnosis import Rule, diagnose
from common.analysis.invariants import STRICT, InvariantError, check_invariants, invariant_notes
from common.analysis.summary import main as summary_main
from common.reader.build import parse, read_trace

TRACES = sorted(
    path
    for folder in (FIXTURES, ROOT / "tests/fixtures/foreign", ROOT / "tests/fixtures/counterfactuals",
                   ROOT / "tests/fixtures/ddp_gloo")
    for path in folder.rglob("*.json.gz")
)  # fmt: skip


@pytest.mark.parametrize("path", TRACES, ids=lambda p: str(p.relative_to(ROOT / "tests/fixtures")))
def test_every_fixture_keeps_every_invariant(path):
    trace = read_trace(path)
    assert check_invariants(trace, diagnose(trace)) == []


def test_the_fixtures_checked_are_those_of_four_folders():
    folders = {p.relative_to(ROOT / "tests/fixtures").parts[0] for p in TRACES}
    assert folders == {"h200", "foreign", "counterfactuals", "ddp_gloo"} and len(TRACES) > 50


H200_64 = FIXTURES / "01_matmul_add" / "64_bf16_cold_eager.json.gz"


def cpu_bound():
    """The H200's 01_matmul_add at 64: bound by the CPU, its GPU idle 98% of the step."""
    trace = read_trace(H200_64)
    d = diagnose(trace)
    assert d.bound == "CPU" and check_invariants(trace, d) == []
    return trace, d


def test_a_part_outside_its_window_is_caught():
    trace, d = cpu_bound()
    d.median.host_wait = 2 * d.median.span
    broken = check_invariants(trace, d)
    assert any("host wait" in line and "is not within its" in line for line in broken), broken


@pytest.mark.parametrize("figure", ["busy", "host_wait", "kernel_wait", "other_wait", "span"])
def test_a_step_budget_other_than_the_median_broken_is_caught(figure):
    trace, d = cpu_bound()
    k, other = next((k, b) for k, b in enumerate(d.budgets) if b is not d.median)
    setattr(other, figure, -5 * other.span if figure != "span" else float("nan"))
    broken = check_invariants(trace, d)
    assert any(line.startswith(f"step #{trace.steps[k].number}'s ") for line in broken), broken


def test_a_share_over_its_whole_is_caught():
    trace, d = cpu_bound()
    d.verdict = d.verdict.replace("GPU idle 98%", "GPU idle 130%")
    assert any(line.startswith("a share over its whole: 130%") for line in check_invariants(trace, d))


def test_a_window_the_median_step_is_not_is_caught():
    trace, d = cpu_bound()
    d.verdict = d.verdict.replace("of the 167 µs step (", "of the 5.00 ms step (")
    assert any(line.startswith("a window other than the median step's") for line in check_invariants(trace, d))


def test_a_longest_gap_of_another_step_is_caught():
    """Issue 46: "GPU idle 98% of the 162 µs step …; longest gap 87.3 ms", step #0's gap beside the median's share."""
    trace, d = cpu_bound()
    longest = max(b.longest_gap for b in d.budgets)
    assert longest > d.median.longest_gap
    d.verdict = d.verdict.replace("longest gap 67.9 µs", "longest gap 193 µs")
    broken = check_invariants(trace, d)
    assert any("longest gap 193 µs" in line and "median step's is 67.9 µs" in line for line in broken), broken


def test_launches_of_another_step_are_caught():
    trace, d = cpu_bound()
    d.verdict = d.verdict.replace("), 2 launches;", "), 7 launches;")
    assert "7 launches, where the median step makes 2" in check_invariants(trace, d)


def test_a_median_budget_of_another_step_is_caught():
    trace, d = cpu_bound()
    d.median = next(b for b in d.budgets if b is not d.median)
    assert any("is not the median step's" in line for line in check_invariants(trace, d))


def test_a_rate_over_its_peak_is_caught():
    trace, d = cpu_bound()
    d.rules.append(Rule("GEMMs far from peak", ["nvjet_sm90_x: 1,480 TFLOP/s, 150% of peak, 3% of the GPU work"], "…"))
    broken = check_invariants(trace, d)
    assert any(line.startswith("a rate over its peak: 150% of peak in 'nvjet_sm90_x") for line in broken), broken


def test_a_bound_for_a_device_not_read_is_caught():
    trace, d = cpu_bound()
    trace.devices = ["MTIA"]
    assert check_invariants(trace, d) == ["a bound (CPU) for a trace of MTIA, a device the reader does not read"]


def test_a_trace_of_a_gpu_and_a_device_not_read_gets_no_bound():
    """The GPU's work is read, the MTIA's is not: nothing says which bounds the steps (it was "bound by the GPU")."""
    events = [ev("user_annotation", "ProfilerStep#1", 0, 100),
              ev("cuda_runtime", "cudaLaunchKernel", 2, 3, correlation=1),
              ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 6, 90, tid=7, correlation=1),
              ev("mtia_ccp_events", "kernel", 2, 50)]  # fmt: skip
    trace = parse({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    d = diagnose(trace)
    assert trace.devices == ["MTIA"] and d.bound == "—" and check_invariants(trace, d) == []
    assert d.verdict.startswith("no bound: the trace also holds work of MTIA")


def sync_in_a_gap() -> tuple:
    """One step: a kernel, then 400 µs blocked in a cudaStreamSynchronize inside an op while the GPU idles, then a
    second kernel launched after it."""
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 1000),
        ev("cpu_op", "aten::mm", 10, 20),
        ev("cuda_runtime", "cudaLaunchKernel", 12, 5, correlation=1),
        ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 20, 50, tid=7, correlation=1),
        ev("cpu_op", "aten::item", 100, 420),
        ev("cuda_runtime", "cudaStreamSynchronize", 110, 400),
        ev("cpu_op", "aten::add", 600, 20),
        ev("cuda_runtime", "cudaLaunchKernel", 605, 5, correlation=2),
        ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 612, 10, tid=7, correlation=2),
    ]
    trace = parse({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    return trace, diagnose(trace)


def test_a_sync_is_a_wait_in_the_causes_of_the_host_wait():
    trace, d = sync_in_a_gap()
    waited = sum(us for (cause, _), us in d.causes.items() if cause == "a sync")
    assert waited == pytest.approx(400.0) and check_invariants(trace, d) == []


def test_a_sync_called_work_is_caught():
    """Issue 46: "463 ms blocked in a hipMemcpyWithStream sync" read "463 ms launching the GPU's work op by op"."""
    trace, d = sync_in_a_gap()
    d.causes = Counter(
        {("launches" if cause == "a sync" else cause, what): us for (cause, what), us in d.causes.items()}
    )
    assert "a wait called work: 400 µs of a sync among launches, CPU op, no recorded op" in check_invariants(trace, d)


def test_a_users_run_gets_one_note_line_and_a_test_an_error(monkeypatch):
    trace, d = cpu_bound()
    broken = dataclasses.replace(d, verdict=d.verdict.replace("98%", "130%"))
    with pytest.raises(InvariantError, match="a share over its whole: 130%"):
        invariant_notes(trace, broken)
    monkeypatch.setenv(STRICT, "0")
    [note] = invariant_notes(trace, broken)
    assert note.startswith("internal check: a share over its whole: 130%") and "\n" not in note
    assert invariant_notes(trace, d) == []


def test_a_check_that_fails_is_a_note_not_a_traceback(monkeypatch):
    monkeypatch.setenv(STRICT, "0")
    trace, d = cpu_bound()
    d.budgets = None  # not a list: the check itself fails
    assert invariant_notes(trace, d)[0].startswith("internal check: the check itself failed (TypeError")


def test_the_summary_prints_a_broken_invariant_as_a_note(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv(STRICT, "0")
    monkeypatch.setattr(digest_module, "invariant_notes", lambda trace, d: ["internal check: a share over its whole"])
    (tmp_path / "t.json").write_text(json.dumps(tiny_gpu_trace()))
    code, out, err = command(summary_main, capsys, tmp_path / "t.json")
    assert code == 0 and "note: " in out and ": internal check: a share over its whole" in out, err


def test_a_sync_running_past_its_step_is_a_share_of_that_step_alone():
    """Found by the fuzz tests under the check: a 10 ms cudaStreamSynchronize begun in a 100 µs step read
    "blocking the CPU … (10000.0% of the steps' time)"; only its time inside the step counts."""
    events = [
        ev("user_annotation", "ProfilerStep#1", 0, 100),
        ev("cpu_op", "aten::item", 40, 60),
        ev("cuda_runtime", "cudaLaunchKernel", 10, 3, correlation=1),
        ev("kernel", "void ampere_sgemm_64x64_nn<float>(int)", 15, 20, tid=7, correlation=1),
        ev("cuda_runtime", "cudaStreamSynchronize", 50, 10_000),
    ]
    trace = parse({"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3"}]})
    d = diagnose(trace)
    [evidence] = [rule.evidence[0] for rule in d.rules if rule.name == "host-device sync inside the step"]
    assert evidence.endswith("blocking the CPU 50.0 µs in the sync calls (50.0% of the steps' time)"), evidence
    assert check_invariants(trace, d) == []
