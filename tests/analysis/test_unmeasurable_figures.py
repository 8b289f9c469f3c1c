"""Traces whose figures cannot be measured (a 0 µs kernel, a denormal or 400-digit time, FLOPs of 1e400, shapes
whose product no float holds, a device name that is a number, a null "Input type"): the summary and the diff print
"—" for that figure and go on, with exit 0 and no traceback, and no rule fires on a figure that is not one
(issue 31 item 2, issue 36 items 4 and 5)."""

from __future__ import annotations

import copy
import gzip
import json

import pytest
from helpers import command, ev, tiny_gpu_trace

from common.analysis import diff, summary

STEP = {"ProfilerStep#2": (10, 100), "ProfilerStep#3": (110, 50)}


def gemm_trace(dims: list, kernel_us: float | str = 40, step3_gemm: bool = True, **meta) -> dict:
    """Two steps of one shaped aten::bmm whose kernel carries its External id; `kernel_us` is written as is
    (a string is a raw JSON number: "5e-324", "1e400", 400 digits)."""
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "python"}},
        ev("user_annotation", "ProfilerStep#2", 10, 100),
        ev("cpu_op", "aten::bmm", 14, 30, **{"External id": 1, "Input Dims": dims, "Input type": ["float", "float"]}),
        ev("cuda_runtime", "cudaLaunchKernel", 18, 3, correlation=2, **{"External id": 1}),
        ev("kernel", "void cutlass_gemm_kernel<float>(int)", 20, kernel_us, tid=7, correlation=2,
           **{"External id": 1}),
        ev("user_annotation", "ProfilerStep#3", 110, 50),
    ]  # fmt: skip
    if step3_gemm:
        events += [
            ev("cpu_op", "aten::bmm", 114, 20, **{"External id": 5, "Input Dims": dims, "Input type": ["float"] * 2}),
            ev("cuda_runtime", "cudaLaunchKernel", 117, 3, correlation=6, **{"External id": 5}),
            ev("kernel", "void cutlass_gemm_kernel<float>(int)", 121, kernel_us, tid=7, correlation=6,
               **{"External id": 5}),
        ]  # fmt: skip
    else:
        events += [
            ev("cuda_runtime", "cudaLaunchKernel", 117, 3, correlation=6),
            ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 121, 5, tid=7, correlation=6),
        ]
    doc = {"traceEvents": events, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}]}
    if meta:
        doc["suite"] = {"script": "04_x", "tag": "t", "label": "fwd", **meta}
    return doc


def write(tmp_path, doc: dict, raw: dict | None = None, name: str = "t.json.gz"):
    """`doc` as a gzipped trace; `raw` maps a string written in it to the bare token it stands for."""
    text = json.dumps(doc)
    for token, bare in (raw or {}).items():
        text = text.replace(json.dumps(token), bare)
    path = tmp_path / name
    path.write_bytes(gzip.compress(text.encode()))
    return path


def read_all(path, capsys) -> str:
    """The summary (--explain --markdown --per-step, then plain) and the diff of the trace with itself: each exits
    0 with no traceback; their output together."""
    out = ""
    for main, argv in [
        (summary.main, [path, "--explain", "--markdown", "--per-step"]),
        (summary.main, [path, "--explain"]),
        (diff.main, [path, path]),
    ]:
        code, text, err = command(main, capsys, *argv)
        assert code == 0 and "Traceback" not in err, (main.__module__, code, err[-1500:])
        out += text
    return out


def test_gemms_in_the_first_step_only_give_no_division_by_a_median_of_zero(tmp_path, capsys):
    doc = gemm_trace([[8, 64, 64], [8, 64, 64]], step3_gemm=False)
    doc["traceEvents"] = [e for e in doc["traceEvents"] if e.get("ts", 0) < 110 or e.get("cat") == "user_annotation"]
    doc["traceEvents"].append(ev("user_annotation", "ProfilerStep#4", 160, 50))  # the median step: no GPU work
    read_all(write(tmp_path, doc), capsys)


def test_kernels_of_0_us_give_dashes_not_a_division_by_zero(tmp_path, capsys):
    out = read_all(write(tmp_path, gemm_trace([[8, 64, 64], [8, 64, 64]], kernel_us=0)), capsys)
    assert "far from peak" not in out


def test_a_denormal_kernel_time_gives_no_rate(tmp_path, capsys):
    path = write(tmp_path, gemm_trace([[8, 64, 64], [8, 64, 64]], kernel_us="@d@"), {"@d@": "5e-324"})
    assert "far from peak" not in read_all(path, capsys)


@pytest.mark.parametrize("bare", ["1e400", "9" * 400])
def test_a_kernel_time_no_float_holds_is_read_without_a_traceback(tmp_path, capsys, bare):
    read_all(write(tmp_path, gemm_trace([[8, 64, 64], [8, 64, 64]], kernel_us="@t@"), {"@t@": bare}), capsys)


@pytest.mark.parametrize("batch", [2**40, 10**30, 10**400])
def test_shapes_whose_flops_no_float_holds_give_no_rate(tmp_path, capsys, batch):
    read_all(write(tmp_path, gemm_trace([[batch, 64, 64], [batch, 64, 64]])), capsys)


@pytest.mark.parametrize("bare", ["1e400", "-1e400", "9" * 400, "-5"])
def test_suite_flops_or_bytes_that_are_no_figure_give_a_dash(tmp_path, capsys, bare):
    doc = gemm_trace([[8, 64, 64], [8, 64, 64]], flops="@f@", bytes="@f@")
    out = read_all(write(tmp_path, doc, {"@f@": bare}), capsys)
    assert "∞" not in out and "inf" not in out.lower().replace("info", "")


@pytest.mark.parametrize("name", [7, 1.5, None, ["H200"], {"name": "H200"}])
def test_a_device_name_that_is_not_text_is_no_name(tmp_path, capsys, name):
    doc = gemm_trace([[8, 64, 64], [8, 64, 64]])
    doc["deviceProperties"][0]["name"] = name
    read_all(write(tmp_path, doc), capsys)


@pytest.mark.parametrize("types", [None, 3, "float", [None, 1]])
def test_an_input_type_that_is_not_a_list_of_text_loses_that_entry_alone(tmp_path, capsys, types):
    doc = gemm_trace([[8, 64, 64], [8, 64, 64]])
    for event in doc["traceEvents"]:
        if event.get("cat") == "cpu_op":
            event["args"]["Input type"] = types
    out = read_all(write(tmp_path, doc), capsys)
    assert "TFLOP/s" in out  # the op's FLOPs are still there: its shapes were kept


def test_steps_of_0_us_without_communication_are_not_bound_by_communication(tmp_path, capsys):
    doc = copy.deepcopy(tiny_gpu_trace())
    for event in doc["traceEvents"]:
        event.update({"ts": 100, "dur": 0} if "dur" in event else {})
    out = read_all(write(tmp_path, doc), capsys)
    verdict = out.split("verdict: ")[1].splitlines()[0]
    assert verdict.startswith("no bound: the median step's window is 0 µs") and "rule:" not in out


@pytest.mark.parametrize(("dims", "kernel_us"), [([[-8, 64, 64], [-8, 64, 64]], 40), ([[8, 64, 64], [8, 64, 64]], -40)])
def test_negative_dims_or_kernel_times_give_no_rate_and_no_far_from_peak_rule(tmp_path, capsys, dims, kernel_us):
    out = read_all(write(tmp_path, gemm_trace(dims, kernel_us=kernel_us)), capsys)
    assert "far from peak" not in out and "-0." not in out
