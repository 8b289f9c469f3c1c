"""The report's lines after a reader's edit of the loop, piece by piece: the steps recorded under with_stack, a
trace without steps checked per call, misses counted over the lines checked, the step time of two steps.
tests/harness/test_edited_loops.py runs the edits end to end."""

from __future__ import annotations

import time

import pytest
import torch
from helpers import ev, tiny_cpu_trace
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.harness.guess import check_guess, expect_kernels, expect_op, format_verdicts
from common.harness.loop import read_steps
from common.harness.recording import own_handler_lines
from common.harness.report import step_seconds
from common.reader.build import parse


def test_with_stack_steps_are_counted_past_the_python_frames():
    seen = []
    with profile(
        activities=[ProfilerActivity.CPU],
        schedule=schedule(wait=1, warmup=1, active=3, repeat=1),
        with_stack=True,
        on_trace_ready=lambda prof: seen.append(read_steps(prof)),
    ) as prof:
        for _ in range(5):
            with record_function("fwd"):
                torch.ones(4).add(1)
            prof.step()
    assert seen == [(3, "fwd")]


def unscheduled_trace() -> dict:
    """A loop without schedule=: no ProfilerStep#N, three calls of the label `fwd`, one aten::add each."""
    events = []
    for n in range(3):
        events += [ev("user_annotation", "fwd", 100 * n, 50), ev("cpu_op", "aten::add", 100 * n + 10, 20)]
    return {"traceEvents": events, "suite": {"label": "fwd"}}


def test_a_trace_without_steps_checks_the_guess_per_call_of_the_label():
    trace = parse(unscheduled_trace())
    verdicts = check_guess(trace, [expect_op("aten::add", 1, "one add per call")])
    assert [v.seen for v in verdicts] == [[1.0]] and verdicts[0].matched
    lines = format_verdicts(verdicts, trace)
    assert lines[0] == "guess vs trace (per call of 'fwd': 3 calls in the one recorded step, counts ÷ 3)"
    assert any(line.startswith("  [ ok ] aten::add  guess    1  trace     1") for line in lines)


def test_a_trace_without_steps_gives_the_step_time_per_call():
    assert step_seconds(parse(unscheduled_trace())) == (
        pytest.approx(50e-6),
        "CPU (the 'fwd' label)",
        "per call: the one recording's 150 µs over its 3 calls",
    )


def test_misses_are_counted_over_the_checked_lines_only():
    trace = parse(tiny_cpu_trace())
    guess = [expect_kernels("gemm", 1, "not checked on the CPU"), expect_op("aten::add", 1, "misses step #1")]
    lines = format_verdicts(check_guess(trace, guess), trace)
    assert (
        "  >>> 1 of 1 checked guesses did not match the trace: the most interesting thing on this screen <<<" in lines
    )


def test_two_steps_give_the_later_step_time_with_the_first_beside_it():
    data = tiny_cpu_trace()
    data["traceEvents"] = [e for e in data["traceEvents"] if e["ts"] < 200]  # steps #0 (60 µs) and #1 (80 µs)
    assert step_seconds(parse(data)) == (
        pytest.approx(80e-6),
        "CPU (the 'fwd' label)",
        "the later of 2 profiled steps (the first: 60.0 µs)",
    )


def test_three_steps_give_the_median_step_time():
    assert step_seconds(parse(tiny_cpu_trace())) == (
        pytest.approx(70e-6),
        "CPU (the 'fwd' label)",
        "median of 3 profiled steps",
    )


def test_a_handler_of_the_readers_own_is_named_by_its_own_name():
    def my_handler(prof: profile) -> None:
        pass

    with profile(activities=[ProfilerActivity.CPU], on_trace_ready=my_handler) as prof:
        torch.ones(2).add(1)
    assert own_handler_lines([1, prof], time.time()) == [
        "the loop's own on_trace_ready (my_handler) got the trace: the suite wrote none and has no report on it",
        "  read the trace it wrote with: uv run python -m common.summary <file or folder>",
    ]


def test_a_loop_without_on_trace_ready_is_told_nothing_exported_its_trace():
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        torch.ones(2).add(1)
    lines = own_handler_lines([prof], time.time())
    assert lines[0].startswith("the loop's profile has no on_trace_ready, so nothing exported its trace")
    assert all(len(line) <= 120 for line in lines)
