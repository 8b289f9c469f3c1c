"""The trace reader: steps, what each step launched, and agreement with the profiler's own events."""

from __future__ import annotations

import bisect
import gzip
import json
import random
from collections import Counter, defaultdict
from pathlib import Path

import pytest
import torch
from helpers import ev, requires_cuda, tiny_cpu_trace, tiny_gpu_trace
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.reader.build import parse, read_trace


def test_steps_are_the_profiler_step_events_in_time_order():
    trace = parse(tiny_gpu_trace())
    assert [s.number for s in trace.steps] == [2, 3]
    assert [(s.start_us, s.dur_us) for s in trace.steps] == [(10, 100), (110, 50)]


def test_gpu_work_belongs_to_the_step_that_launched_it_even_when_it_runs_later():
    first, second = parse(tiny_gpu_trace()).steps
    assert [k.name for k in first.kernels] == [
        "void ampere_sgemm_64x64_nn<float>(int)",
        "void at::native::vectorized_elementwise_kernel<4>(int)",
    ]
    assert [(m.name, m.us) for m in first.memcpy] == [("Memcpy DtoD (Device -> Device)", 2)] and first.memset == []
    # ran at 172, after step 3's end
    assert [(k.name, k.us) for k in second.kernels] == [("void ampere_sgemm_64x64_nn<float>(int)", 30)]
    assert [(m.name, m.us) for m in second.memset] == [("Memset (Device)", 1)]


def test_work_launched_outside_the_steps_and_gpu_annotations_are_not_counted():
    names = [op.name for s in parse(tiny_gpu_trace()).steps for op in s.gpu]
    assert "warmup_kernel" not in names and "fwd" not in names


def test_gpu_busy_is_the_sum_of_kernel_memcpy_and_memset_durations():
    first, second = parse(tiny_gpu_trace()).steps
    assert first.gpu_busy_us == 40 + 5 + 2
    assert second.gpu_busy_us == 1 + 30


def test_runtime_and_driver_calls_are_counted_per_step():
    first, second = parse(tiny_gpu_trace()).steps
    assert first.calls("cudaLaunchKernel") == 1 and first.calls("cuLaunchKernelEx") == 1
    assert first.calls("cudaOccupancyMaxActiveBlocksPerMultiprocessor") == 1
    assert second.calls("cudaLaunchKernel") == 1 and second.calls("cudaOccupancy") == 0
    assert second.runtime["cudaMemsetAsync"] == 1


def test_cpu_ops_nested_ones_included_and_the_region_per_step():
    first, second = parse(tiny_gpu_trace(), region="fwd").steps
    assert first.cpu_ops == {"aten::matmul": 1, "aten::mm": 1, "aten::add": 1}
    assert second.cpu_ops == {"aten::mm": 1}
    assert (first.region_us, second.region_us) == (80, 40)


def test_without_metadata_cpu_time_is_the_step_span_and_device_from_its_properties():
    trace = parse(tiny_gpu_trace())
    assert trace.label is None and trace.cpu_what == "the ProfilerStep#N span"
    assert [s.region_us for s in trace.steps] == [100, 50]
    assert trace.has_gpu and trace.device_name == "NVIDIA A100-SXM4-80GB"


def test_cpu_only_trace_has_no_gpu_lane_and_reads_its_metadata():
    trace = parse(tiny_cpu_trace(), "traces/01_x/8_bf16_cold_eager.json")
    assert not trace.has_gpu and all(s.gpu == [] for s in trace.steps)
    assert trace.name == "01_x/8_bf16_cold_eager" and trace.meta["flops"] == 1e6
    assert [s.cpu_ops["aten::add"] for s in trace.steps] == [1, 2, 1]


def test_per_step_is_the_median_over_steps():
    trace = parse(tiny_cpu_trace())
    assert trace.per_step(lambda s: s.region_us) == 70
    assert trace.per_step(lambda s: s.cpu_ops["aten::add"]) == 1
    assert trace.per_step(lambda s: None) is None


def test_name_without_metadata_is_folder_and_file_stem():
    data = tiny_gpu_trace()
    assert parse(data, "traces/04_a/8_16_bf16_cold_eager.json.gz").name == "04_a/8_16_bf16_cold_eager"


def test_cpu_ops_go_to_the_step_and_phase_a_lookup_of_each_op_by_start_time_gives():
    """The reader counts cpu_ops by slices of one sort; each op must land where looking it up alone puts it: in the
    latest step (phase) that starts at or before it, if it has not ended, boundaries included, gaps left out."""
    rng = random.Random(18)
    events, steps, phases, t = [], [], [], 0.0
    for number in range(2, 22):
        start, dur = t, float(rng.choice([20, 30, 40]))
        end, middle = start + dur, start + dur / 2
        labels = {f"ProfilerStep#{number}": (start, end), "train_step": (start + 1, end - 1)}
        labels |= {"forward": (start + 1, middle), "backward": (middle, end - 1)}  # touching: at `middle`, backward
        events += [ev("user_annotation", name, begin, finish - begin) for name, (begin, finish) in labels.items()]
        steps.append((start, end))
        phases += [(start + 1, middle, number, "forward"), (middle, end - 1, number, "backward")]
        times = [start, end, middle, start + 1, end - 1] + [rng.uniform(start - 3, end + 3) for _ in range(30)]
        events += [ev("cpu_op", rng.choice(["aten::mm", "aten::add", "aten::relu"]), ts, 0.5) for ts in times]
        t = end + rng.choice([0, 0, 2])  # the next step starts as this one ends, or after a gap
    rng.shuffle(events)  # an autograd thread's ops are written out of time order
    trace = parse({"traceEvents": events}, region="train_step")

    def latest(spans, ts):
        i = bisect.bisect_right([span[0] for span in spans], ts) - 1
        return i if i >= 0 and ts <= spans[i][1] else None

    want_steps = [Counter() for _ in steps]
    want_phases: dict = defaultdict(Counter)
    for e in events:
        if e["cat"] == "cpu_op" and (i := latest(steps, e["ts"])) is not None:
            want_steps[i][e["name"]] += 1
            if (j := latest(phases, e["ts"])) is not None:
                want_phases[phases[j][2:]][e["name"]] += 1
    assert [s.cpu_ops for s in trace.steps] == want_steps
    got_phases = {(s.number, n): p.cpu_ops for s in trace.steps for n, p in s.phases.items()}
    assert got_phases == want_phases and sum(map(len, want_phases.values())) > 0


def test_json_and_json_gz_and_the_bare_array_form_read_the_same(tmp_path):
    data = tiny_cpu_trace()
    (tmp_path / "t.json").write_text(json.dumps(data))
    with gzip.open(tmp_path / "t.json.gz", "wt") as fh:
        json.dump(data, fh)
    (tmp_path / "bare.json").write_text(json.dumps(data["traceEvents"]))
    for name in ("t.json", "t.json.gz", "bare.json"):
        assert [s.cpu_ops["aten::add"] for s in read_trace(tmp_path / name).steps] == [1, 2, 1]


@pytest.mark.parametrize("content", ["not json", '{"foo": 1}', "[1, 2"])
def test_a_file_that_is_not_a_trace_raises_a_value_error_naming_it(tmp_path, content):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(ValueError, match="bad.json"):
        read_trace(path)


def test_a_trace_without_any_usable_event_raises_a_value_error_naming_it():
    with pytest.raises(ValueError, match="noevents.json: no profiler events"):
        parse({"traceEvents": [{"ph": "M", "name": "process_name", "pid": 1}]}, "noevents.json")


def profile_tiny_matmul(tmp_path: Path, device: str) -> tuple[torch.profiler.profile, Path]:
    """Profile x @ x + x under schedule(wait=1, warmup=1, active=3); return the profiler and the trace."""
    path = tmp_path / "t.json"
    x = torch.randn(32, 32, device=device)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    with profile(
        activities=activities,
        schedule=schedule(wait=1, warmup=1, active=3),
        on_trace_ready=lambda p: p.export_chrome_trace(str(path)),
    ) as prof:
        for _ in range(5):
            with record_function("fwd"):
                torch.add(x @ x, x)
            if device == "cuda":
                torch.cuda.synchronize()
            prof.step()
    return prof, path


def step_root(event) -> object:
    """The ProfilerStep event an event nests in, following cpu_parent (None outside the steps)."""
    while event.cpu_parent is not None:
        event = event.cpu_parent
    return event if event.name.startswith("ProfilerStep") else None


def test_cpu_op_counts_per_step_agree_with_prof_events(tmp_path):
    prof, path = profile_tiny_matmul(tmp_path, "cpu")
    steps = [e for e in prof.events() if e.name.startswith("ProfilerStep")]
    expected = [sum(1 for e in prof.events() if not e.is_user_annotation and step_root(e) is s) for s in steps]
    trace = read_trace(path)
    assert len(trace.steps) == 3 and trace.label is None and not trace.has_gpu
    assert [sum(s.cpu_ops.values()) for s in trace.steps] == expected
    assert all(s.cpu_ops["aten::mm"] == 1 and s.cpu_ops["aten::add"] == 1 for s in trace.steps)


@pytest.mark.gpu
@requires_cuda
def test_kernel_counts_per_step_agree_with_prof_events(tmp_path):
    prof, path = profile_tiny_matmul(tmp_path, "cuda")
    events = prof.events()
    steps = sorted(
        (e for e in events if e.name.startswith("ProfilerStep") and e.device_type.name == "CPU"),
        key=lambda e: e.time_range.start,
    )
    gpu = [e for e in events if e.device_type.name == "CUDA" and not e.is_user_annotation]

    def in_step(e, s) -> bool:  # each step synchronizes, so its GPU work ends inside its CPU span
        return s.time_range.start <= e.time_range.start <= s.time_range.end

    is_copy = lambda e: e.name.startswith(("Memcpy", "Memset"))  # noqa: E731
    expected_kernels = [sum(in_step(e, s) and not is_copy(e) for e in gpu) for s in steps]
    expected_all = [sum(in_step(e, s) for e in gpu) for s in steps]
    trace = read_trace(path)
    assert trace.has_gpu and len(trace.steps) == 3
    assert [len(s.kernels) for s in trace.steps] == expected_kernels
    assert [len(s.gpu) for s in trace.steps] == expected_all
    assert all(n >= 2 for n in expected_kernels)  # a GEMM and the add


def test_gpu_busy_in_one_pass_is_the_union_of_the_intervals_to_the_bit():
    """busy_us walks ops in start order once; it must give what common.reader.intervals' union gives, bit for bit, with
    touching, nested and zero-length ops, untimed ops, several streams, a clock near 1e12 µs, and out of order."""
    from common.reader.intervals import union_us
    from common.reader.model import GpuOp, busy_us, intervals

    rng = random.Random(7)
    for _ in range(3000):
        t = rng.choice([0.0, 1.7e12, 123456.789])
        ops = []
        for _ in range(rng.randint(0, 8)):
            t += rng.choice([0, 0.5, 1, 3.25, rng.random() * 5])
            us = rng.choice([0.0, 1.0, 2.5, rng.random() * 4])
            ops.append(GpuOp("kernel", "k", us, start=None if rng.random() < 0.05 else t, stream=rng.randint(0, 2)))
        if rng.random() < 0.2:
            rng.shuffle(ops)
        assert busy_us(ops) == union_us(intervals(ops)) + sum(op.us for op in ops if op.start is None), ops
