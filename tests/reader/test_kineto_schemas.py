"""Every schema Kineto has written reads: a small trace shaped by hand after each era's writer, one test each.

The eras, from Kineto's history (libkineto/src/output_json.cpp, libkineto/include/ActivityType.h, and the
TensorBoard plugin's reader tb_plugin/torch_tb_profiler/profiler/trace.py, which maps both generations):
- 2021 (torch 1.8-1.9, the TensorBoard plugin's era): categories Operator, Runtime, Kernel, Memcpy, Memset and
  Trace; ProfilerStep#N and record_function labels are Operators; GPU events carry "correlation" and a lower-case
  "external id"; the device list is "computeProperties"; flows are cat "async", name "launch".
- The same era's events as a bare JSON array (the plugin's own tests feed it so).
- 2021-2022 (torch 1.10-1.13): ActivityType names: cpu_op, user_annotation, gpu_user_annotation, kernel,
  gpu_memcpy, gpu_memset, cuda_runtime, python_function; "External id" capitalised; flows "ac2g".
- 2023 on: cuda_driver launches (cuLaunchKernel, cuLaunchKernelEx), cuda_sync events, distributedInfo, the
  Trace span on pid "Spans".
"""

from __future__ import annotations

import json
from pathlib import Path

from common.analysis.summary import main
from common.reader.build import read_trace
from tests.helpers import command


def _write(tmp_path: Path, name: str, data: object) -> Path:
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(data))
    return path


def _operator_era_events(step: int, t0: float, corr: int) -> list[dict]:
    """One ProfilerStep of a 2021 trace: the step and the label as Operators, a matmul launching a GEMM, a copy."""
    cpu = {"pid": 24572, "tid": "24572"}
    gpu = {"pid": 0, "tid": "stream 7"}
    return [
        {"ph": "X", "cat": "Operator", "name": f"ProfilerStep#{step}", **cpu, "ts": t0, "dur": 100,
         "args": {"Device": 24572, "External id": corr, "Trace name": "PyTorch Profiler", "Trace iteration": 0}},
        {"ph": "X", "cat": "Operator", "name": "fwd", **cpu, "ts": t0 + 2, "dur": 90,
         "args": {"Device": 24572, "External id": corr + 1}},
        {"ph": "X", "cat": "Operator", "name": "aten::mm", **cpu, "ts": t0 + 4, "dur": 30,
         "args": {"Device": 24572, "External id": corr + 2}},
        {"ph": "X", "cat": "Runtime", "name": "cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", **cpu,
         "ts": t0 + 5, "dur": 1, "args": {"cbid": 251, "correlation": corr + 10, "external id": corr + 2}},
        {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", **cpu, "ts": t0 + 7, "dur": 5,
         "args": {"cbid": 211, "correlation": corr + 11, "external id": corr + 2, "external ts": t0 + 4}},
        {"ph": "s", "id": corr + 11, "pid": 24572, "tid": 24572, "ts": t0 + 7, "cat": "async", "name": "launch"},
        {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x32_nt", **gpu, "ts": t0 + 20, "dur": 40,
         "args": {"queued": 0, "device": 0, "context": 1, "stream": 7, "correlation": corr + 11,
                  "external id": corr + 2, "registers per thread": 55, "shared memory": 16384,
                  "grid": [1, 1, 1], "block": [256, 1, 1], "theoretical occupancy %": 0}},
        {"ph": "f", "id": corr + 11, **gpu, "ts": t0 + 20, "cat": "async", "name": "launch", "bp": "e"},
        {"ph": "X", "cat": "Operator", "name": "aten::copy_", **cpu, "ts": t0 + 40, "dur": 20,
         "args": {"Device": 24572, "External id": corr + 3}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemcpyAsync", **cpu, "ts": t0 + 42, "dur": 5,
         "args": {"cbid": 41, "correlation": corr + 12, "external id": corr + 3}},
        {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", **gpu, "ts": t0 + 61, "dur": 6,
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": corr + 12, "external id": corr + 3,
                  "bytes": 4096, "memory bandwidth (GB/s)": 0.68}},
        {"ph": "X", "cat": "Runtime", "name": "cudaMemsetAsync", **cpu, "ts": t0 + 50, "dur": 3,
         "args": {"cbid": 51, "correlation": corr + 13, "external id": corr + 3}},
        {"ph": "X", "cat": "Memset", "name": "Memset (Device)", **gpu, "ts": t0 + 68, "dur": 2,
         "args": {"device": 0, "context": 1, "stream": 7, "correlation": corr + 13, "external id": corr + 3,
                  "bytes": 64, "memory bandwidth (GB/s)": 0.03}},
    ]  # fmt: skip


def _operator_era(bare: bool = False) -> object:
    events = [e for i in range(3) for e in _operator_era_events(i + 1, 1000 + 200 * i, 100 * i)]
    events += [
        {"name": "process_name", "ph": "M", "ts": 1000, "pid": 24572, "tid": 0, "args": {"name": "python"}},
        {"ph": "X", "cat": "Trace", "ts": 1000, "dur": 600, "pid": "Traces", "tid": "PyTorch Profiler",
         "name": "PyTorch Profiler (0)", "args": {"Op count": 0}},
        {"name": "Record Window End", "ph": "i", "s": "g", "pid": "", "tid": "", "ts": 1600},
    ]  # fmt: skip
    if bare:
        return events
    properties = [{"id": 0, "name": "Tesla V100-DGXS-32GB", "major": 7, "minor": 0, "multiProcessorCount": 80}]
    return {"schemaVersion": 1, "computeProperties": properties, "traceEvents": events}


def test_a_2021_trace_reads_its_steps_kernels_and_copies(tmp_path):
    trace = read_trace(_write(tmp_path, "tb_plugin_era", _operator_era()))
    assert [s.number for s in trace.steps] == [1, 2, 3] and not trace.whole_trace
    for step in trace.steps:
        assert [op.name for op in step.kernels] == ["volta_sgemm_128x32_nt"]
        assert (len(step.memcpy), len(step.memset), step.launches) == (1, 1, 1)
        assert step.cpu_ops == {"aten::mm": 1, "aten::copy_": 1}
        assert step.calls("cudaOccupancyMaxActiveBlocksPerMultiprocessor") == 1
    assert trace.steps[0].kernels[0].registers == 55 and trace.steps[0].kernels[0].grid == (1, 1, 1)
    assert trace.device_name == "Tesla V100-DGXS-32GB" and trace.phase_parent == "fwd"  # the label, an Operator


def test_a_2021_trace_as_a_bare_array_reads_the_same(tmp_path):
    trace = read_trace(_write(tmp_path, "bare", _operator_era(bare=True)))
    assert len(trace.steps) == 3 and all(len(s.kernels) == 1 and s.gpu_busy_us == 48 for s in trace.steps)


def test_a_nameless_operator_first_leaves_the_named_ones_read(tmp_path):
    events = _operator_era(bare=True)
    events.insert(0, {"ph": "X", "cat": "Operator", "pid": 24572, "tid": 24572, "ts": 999, "dur": 1})  # no name
    trace = read_trace(_write(tmp_path, "nameless", events))
    assert [s.number for s in trace.steps] == [1, 2, 3] and all(s.cpu_ops["aten::mm"] == 1 for s in trace.steps)


def test_the_summary_of_a_2021_trace_prints_its_row(tmp_path, capsys):
    code, out, err = command(main, capsys, _write(tmp_path, "tb_plugin_era", _operator_era()))
    assert code == 0, err
    row = next(line for line in out.splitlines() if line.split(" ")[0].endswith("/tb_plugin_era")).split()
    assert row[1:4] == ["1", "48.0", "µs"]  # kernels, GPU busy


def _activity_type_era(driver: bool) -> dict:
    """Torch 1.10-1.13 names (driver=False), or 2023-on with cuda_driver launches and distributedInfo."""
    events = []
    for i in range(2):
        t0, c = 1000 + 200 * i, 100 * i
        launch = ("cuda_driver", "cuLaunchKernel") if driver else ("cuda_runtime", "cudaLaunchKernel")
        events += [
            {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1, "ts": t0,
             "dur": 100, "args": {"External id": c + 1}},
            {"ph": "X", "cat": "python_function", "name": "train.py(10): step", "pid": 1, "tid": 1, "ts": t0 + 1,
             "dur": 98, "args": {"Python id": c + 2}},
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": t0 + 4, "dur": 30,
             "args": {"External id": c + 3}},
            {"ph": "X", "cat": launch[0], "name": launch[1], "pid": 1, "tid": 1, "ts": t0 + 7, "dur": 5,
             "args": {"External id": c + 3, "correlation": c + 11, "cbid": 211}},
            {"ph": "s", "id": c + 11, "pid": 1, "tid": 1, "ts": t0 + 7, "cat": "ac2g", "name": "ac2g"},
            {"ph": "X", "cat": "kernel", "name": "ampere_sgemm_64x64_nn", "pid": 0, "tid": 7, "ts": t0 + 20,
             "dur": 40, "args": {"External id": c + 3, "correlation": c + 11, "stream": 7, "grid": [4, 1, 1],
                                 "block": [128, 1, 1], "registers per thread": 90, "shared memory": 8192}},
            {"ph": "f", "id": c + 11, "pid": 0, "tid": 7, "ts": t0 + 20, "cat": "ac2g", "name": "ac2g", "bp": "e"},
            {"ph": "X", "cat": "gpu_user_annotation", "name": "fwd", "pid": 0, "tid": 7, "ts": t0 + 19, "dur": 42,
             "args": {"External id": c + 1}},
        ]  # fmt: skip
        if driver:
            events.append({"ph": "X", "cat": "cuda_sync", "name": "Stream Sync", "pid": 0, "tid": 7,
                           "ts": t0 + 61, "dur": 1, "args": {"correlation": c + 12}})  # fmt: skip
    events.append({"ph": "X", "cat": "Trace", "ts": 1000, "dur": 400, "pid": "Spans", "tid": "PyTorch Profiler",
                   "name": "PyTorch Profiler (0)", "args": {"Op count": 0}})  # fmt: skip
    data = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA A100-SXM4-80GB"}],
            "traceEvents": events}  # fmt: skip
    if driver:
        data["distributedInfo"] = {"backend": "nccl", "rank": 0, "world_size": 1}
    return data


def test_a_2022_trace_of_activity_type_names_reads_its_steps_and_kernels(tmp_path):
    trace = read_trace(_write(tmp_path, "torch_1_12", _activity_type_era(driver=False)))
    assert [s.number for s in trace.steps] == [0, 1]
    assert all(len(s.kernels) == 1 and s.launches == 1 and s.cpu_ops == {"aten::mm": 1} for s in trace.steps)
    assert all(s.gpu_busy_us == 40 for s in trace.steps)  # the gpu_user_annotation is not GPU work


def test_a_2023_trace_with_driver_launches_sync_events_and_distributed_info_reads(tmp_path):
    trace = read_trace(_write(tmp_path, "torch_2_1", _activity_type_era(driver=True)))
    assert all(len(s.kernels) == 1 and s.launches == 1 and s.gpu_busy_us == 40 for s in trace.steps)
    assert trace.rank == 0 and trace.distributed["world_size"] == 1


def test_a_2021_trace_s_kernels_carry_their_op_s_id_in_lower_case_and_get_its_rate(tmp_path):
    """2021's Kineto wrote a GPU event's op id as "external id" (the op's own is "External id"): read only the
    latter, the shaped aten::mm of those traces got no FLOPs and no rate (issue 32)."""
    from common.analysis.efficiency import efficiency

    data = _operator_era()
    for event in data["traceEvents"]:
        if event.get("name") == "aten::mm":
            event["args"].update({"Input Dims": [[256, 512], [512, 128]], "Input type": ["float", "float"]})
    trace = read_trace(_write(tmp_path, "tb_plugin_era", data))
    assert [op.external for op in trace.steps[0].kernels] == [2]
    (gemm,) = efficiency(trace, peak_tflops=15.7).values()
    assert gemm.flops == 3 * 2 * 256 * 512 * 128 and gemm.us == 3 * 40 and gemm.pct_peak is not None
