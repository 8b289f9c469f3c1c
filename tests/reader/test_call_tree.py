"""The reader's one model (issue 45): the call tree, the GPU timeline's windows, the one union, other devices."""

from __future__ import annotations

import tracemalloc
from array import array

import pytest
from helpers import ev, load_benchmark
from hypothesis import given
from hypothesis import strategies as st

from common.analysis.budget import step_budgets
from common.analysis.diagnosis import _made_in, diagnose
from common.analysis.efficiency import Efficiency, peak_cell
from common.reader.build import _Collector, parse
from common.reader.calltree import Layer
from common.reader.intervals import merged, union_us
from common.reader.kinds import OP
from common.reader.model import GpuOp
from common.reader.timeline import GpuTimeline
from common.reader.trace_json import as_events


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 30)), max_size=30))
def test_the_union_covers_each_moment_once(pairs):
    spans = [(float(a), float(a + d)) for a, d in pairs]
    union = merged(spans)
    assert all(b[0] > a[1] for a, b in zip(union, union[1:], strict=False))
    covered = {t for a, b in spans for t in range(int(a), int(b))}
    assert union_us(spans) == len(covered)


@given(
    st.lists(st.tuples(st.integers(0, 60), st.integers(0, 12)), max_size=25),
    st.lists(st.tuples(st.integers(-5, 70), st.integers(0, 20)), max_size=6),
)
def test_top_nodes_found_as_far_as_asked_are_those_of_the_whole_chain(pairs, windows):
    pairs.sort(key=lambda p: (p[0], -p[1]))  # start order, the longer first: a layer's own order
    starts, ends = [float(a) for a, _ in pairs], [float(a + d) for a, d in pairs]
    chain, i = [], 0
    while i < len(starts):  # the top nodes: each the first to start at or after the last one's end
        chain.append(i)
        i = next((j for j in range(i + 1, len(starts)) if starts[j] >= ends[i]), len(starts))
    layer = Layer.of(OP, array("d", starts), array("d", ends), ["op"] * len(starts))
    for a, d in windows:  # asked in any order, each as far as its window's end
        found = [i for i in chain if ends[i] > a and starts[i] < a + d]
        assert list(layer.tops_in(float(a), float(a + d))[2]) == found
    assert list(layer.tops()[2]) == chain


@given(st.lists(st.tuples(st.none() | st.integers(0, 50), st.integers(0, 9)), max_size=12))
def test_a_gpu_op_without_a_start_is_left_out_of_the_timeline_wherever_it_is(pairs):
    ops = [GpuOp("kernel", f"k{i}", float(d), start=None if a is None else float(a)) for i, (a, d) in enumerate(pairs)]
    timed = GpuTimeline([op for op in ops if op.start is not None])
    timeline = GpuTimeline(ops)
    assert [op.name for op in timeline.ops] == [op.name for op in timed.ops]
    assert (timeline.starts, timeline.union.starts, timeline.union.ends) == (
        timed.starts,
        timed.union.starts,
        timed.union.ends,
    )


@pytest.mark.parametrize(
    "order", [(0, 1, 2), (1, 0, 2), (2, 0, 1), (0, 2, 1)], ids=["in order", "inner first", "last first", "swapped"]
)
def test_ops_written_in_any_order_nest_by_their_times(order):
    ops = [ev("cpu_op", "aten::outer", 0, 30), ev("cpu_op", "aten::inner", 0, 10), ev("cpu_op", "aten::next", 40, 5)]
    trace = parse({"traceEvents": [ops[i] for i in order]})
    layer = trace.tree.threads[1].layer(OP)
    assert list(layer.names) == ["aten::outer", "aten::inner", "aten::next"]
    assert trace.tree.innermost(1, 5).name == "aten::inner" and trace.tree.innermost(1, 20).name == "aten::outer"


def test_a_threads_ops_written_in_several_runs_nest_as_one_thread():
    ops = [ev("cpu_op", "aten::outer", 0, 30), ev("cpu_op", "aten::other", 1, 2, tid=2), ev("cpu_op", "aten::in", 5, 9)]
    trace = parse({"traceEvents": ops})
    assert list(trace.tree.threads[1].layer(OP).names) == ["aten::outer", "aten::in"]
    assert trace.tree.innermost(1, 6).name == "aten::in" and trace.tree.innermost(2, 2).name == "aten::other"


def test_a_sync_is_made_in_an_op_opened_thousands_of_ops_before():
    events = [ev("user_annotation", "ProfilerStep#1", 0, 100_000), ev("cpu_op", "aten::outer", 1, 99_000)]
    events += [ev("cpu_op", "aten::add", 2 + 10 * i, 5) for i in range(5000)]
    events.append(ev("cuda_runtime", "cudaStreamSynchronize", 60_000, 10, correlation=1))
    trace = parse({"traceEvents": events})
    assert _made_in(trace, trace.steps[0].syncs[0]) == "aten::outer"


def test_a_trace_of_python_function_events_alone_is_read():
    trace = parse({"traceEvents": [ev("python_function", "forward", 0, 50), ev("python_function", "f", 1, 5)]})
    assert len(trace.steps) == 1 and trace.tree.innermost(1, 2).name == "f"


def test_an_mtia_trace_is_a_device_not_modelled_and_gets_no_bound():
    events = [ev("cpu_op", "aten::mm", 0, 10), ev("mtia_ccp_events", "kernel", 2, 5)]
    trace = parse({"traceEvents": events})
    d = diagnose(trace)
    assert trace.devices == ["MTIA"] and d.bound == "—" and "MTIA" in d.verdict


def behind_trace(last_kernel_us: float, recorded_until: float = 600.0) -> dict:
    """Three 100 µs steps whose kernels (150 µs each, one per step) run behind the CPU; the profiler records until
    `recorded_until` (an op of its own then)."""
    events = [ev("cpu_op", "aten::empty", recorded_until - 1, 1)]
    for k in range(3):
        events += [
            ev("user_annotation", f"ProfilerStep#{k}", 100 * k, 100),
            ev("cuda_runtime", "cudaLaunchKernel", 100 * k + 10, 5, correlation=k),
        ]
        us = last_kernel_us if k == 2 else 150.0
        events.append(ev("kernel", "k", 20 + 150 * k, us, correlation=k, tid=7))
    return {"traceEvents": events}


def test_windows_of_a_gpu_running_behind_tile_the_timeline():
    trace = parse(behind_trace(150.0))
    windows = trace.windows
    assert all(a.end <= b.start for a, b in zip(windows, windows[1:], strict=False))
    assert all(b.busy == b.span for b in step_budgets(trace))


def test_the_last_window_is_the_steps_period_long_not_its_own_last_op():
    trace = parse(behind_trace(4.0))
    last = step_budgets(trace)[-1]
    assert last.span == 150.0 and last.busy == 4.0


def mm(ts: float, dur: float, ext: int) -> dict:
    """An aten::mm of 64 x 64 x 64 with its record_shapes, External id `ext`."""
    shapes = {"Input Dims": [[64, 64], [64, 64]], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}
    return ev("cpu_op", "aten::mm", ts, dur, **{"External id": ext}, **shapes)


def linked_trace(kernel_ext: int) -> dict:
    """Two shaped ops; the one launch runs inside the second (ext 2), its kernel naming `kernel_ext`."""
    return {"traceEvents": [
        ev("user_annotation", "ProfilerStep#1", 0, 100), mm(10, 10, 1), mm(30, 10, 2),
        ev("cuda_runtime", "cudaLaunchKernel", 35, 2, correlation=5, **{"External id": 2}),
        ev("kernel", "sgemm_64x64", 50, 4, tid=7, correlation=5, **{"External id": kernel_ext}),
    ]}  # fmt: skip


def test_an_external_id_naming_an_op_not_around_the_launch_yields_to_nesting():
    trace = parse(linked_trace(kernel_ext=1))
    [op] = trace.steps[0].gpu
    assert op.external == 2 and trace.broken_links
    assert "1 of 1 External ids name an op that does not enclose the launch" in " ".join(trace.notes)


def test_an_external_id_that_agrees_with_the_nesting_is_kept_silently():
    trace = parse(linked_trace(kernel_ext=2))
    assert trace.steps[0].gpu[0].external == 2 and not trace.broken_links
    assert not any("External id" in note for note in trace.notes)


def test_no_rate_above_its_peak_is_printed_the_cell_names_the_suspect():
    over = Efficiency(flops=363e6, us=1.0, peak_tflops=100.0)  # 363 TFLOP/s against 100: 363% of peak
    assert peak_cell(over, broken_links=True) == "over: link?"
    assert peak_cell(over, broken_links=False) == "over: peak?"
    assert peak_cell(Efficiency(flops=50e6, us=1.0, peak_tflops=100.0), broken_links=False) == "50"


def test_the_last_window_stops_where_the_recording_stops():
    trace = parse(behind_trace(4.0, recorded_until=400.0))
    last = step_budgets(trace)[-1]
    assert last.span == 400.0 - 320.0 and last.busy == 4.0


def test_one_step_spilling_past_its_span_leaves_every_step_its_cpu_span():
    """cudagraph_5080_graphed_callables_train: most steps' GPU work ends within their span; one spills 20% of it
    (less than half its own GPU work): the GPU does not lag, so every step keeps its CPU span."""
    events = []
    for k, spill in enumerate((5.0, 200.0, 5.0)):
        t = 1_000 * k
        events += [ev("user_annotation", f"ProfilerStep#{k}", t, 1_000),
                   ev("cuda_runtime", "cudaLaunchKernel", t + 10, 5, correlation=k),
                   ev("kernel", "k", t + 20, 980 + spill - 20, correlation=k, tid=7)]  # fmt: skip
    assert [w.kind for w in parse({"traceEvents": events}).windows] == ["step", "step", "step"]


def test_the_model_of_many_labels_is_built_in_few_bytes_a_label_beyond_their_records():
    """benchmarks/tree_growth.py's labels trace: 8 steps of record_function labels nested 4 deep, each step's label
    written after those inside it. What building the model allocates beyond the records the reader keeps of the
    labels, at its peak, counted by tracemalloc: 133 bytes a label at 70a06bb (each label's end a float in a list,
    sorted through a list of indices, the phase spans' slices made all at once), 108 at b13b4e1; 71 now."""
    collector = _Collector()
    collector.add(as_events(load_benchmark("tree_growth").labels_trace(40_000)["traceEvents"]))
    labels = len(collector.annotations)
    tracemalloc.start()
    try:
        trace = collector.trace({}, "labels.json", None)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert len(trace.steps) == 8 and labels > 40_000
    assert peak / labels < 90, f"{peak / labels:.0f} bytes a label"
