"""One trace's figures per profiled step, as the summary's row and the diff's totals: medians over the steps,
and the rates the script's recorded FLOPs and bytes give. No printing: the commands print these."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from common.analysis.tables import num
from common.physics import Work, achieved, find_peak, rate
from common.reader.model import Trace, median_index, median_of

CALLS = {  # --wide column -> runtime/driver call name prefix
    "occ. queries": "cudaOccupancyMaxActiveBlocksPerMultiprocessor",  # calls, not an occupancy
}
LAUNCH_COLUMNS = ("cudaLaunchKernel", "cuLaunchKernelEx")  # --wide's launch columns on any GPU trace; others as seen


@dataclass
class Row:
    """One trace's figures per profiled step (medians); None where the trace cannot give one."""

    name: str
    steps: int
    kernels: float | None
    gpu_us: float | None
    cpu_us: float | None
    launches: float | None  # kernel launches (runtime and driver)
    calls: dict[str, float | None]  # CALLS column -> count, then memcpy and memset
    launch_apis: dict[str, float] = field(default_factory=dict)  # launch API -> its share of `launches`
    peak_mb: float | None = None  # GPU memory a step holds at its peak above its inputs (None: not measured)
    on: str | None = None  # "GPU" or "CPU": which time the rates below divide by
    tflops: float | None = None
    gbps: float | None = None
    pct_flops: float | None = None
    pct_bytes: float | None = None
    gpu_ratio: float | None = None  # this trace's GPU time / the baseline's
    cpu_ratio: float | None = None
    ratio: float | None = None  # the ×base shown: the GPU ratio, the CPU ratio where this trace or the baseline is CPU
    graph_launches: float | None = None  # CUDA graph launches, each replaying many kernels
    gpu_lane: bool = False  # the trace has GPU launches or GPU work (its GPU figures may still be None)


def summarize(trace: Trace, peak_tflops: float | None = None, peak_gbps: float | None = None) -> Row:
    """One table row for `trace`: per-step medians, and the rates its `suite` FLOPs/bytes give. GPU figures are
    None on a CPU trace, and on a trace with launches but no GPU activity (kernels, GPU busy, memcpy, memset)."""
    gpu = trace.has_gpu

    def median(value):
        return trace.per_step(value) if gpu else None

    def on_gpu(value):  # a figure of the GPU's own events
        return median(value) if trace.gpu_activity else None

    calls = {col: median(lambda s, p=prefix: s.calls(p)) for col, prefix in CALLS.items()}
    calls["memcpy"] = on_gpu(lambda s: len(s.memcpy))
    calls["memset"] = on_gpu(lambda s: len(s.memset))
    row = Row(
        trace.name,
        len(trace.steps),
        kernels=on_gpu(lambda s: len(s.kernels)),
        gpu_us=on_gpu(lambda s: s.gpu_busy_us),
        cpu_us=trace.per_step(lambda s: s.region_us),
        launches=median(lambda s: s.launches),
        calls=calls,
        launch_apis=median_launch_apis(trace) if gpu else {},
        graph_launches=median(lambda s: s.graph_launches),
        gpu_lane=gpu,
    )
    memory = trace.meta.get("memory")
    peak_bytes = metadata_figure(memory.get("peak_bytes")) if isinstance(memory, dict) else None
    if peak_bytes is not None:
        row.peak_mb = peak_bytes / 1e6
    us, on = trace.step_time_us()
    flops, nbytes = trace.meta.get("flops"), trace.meta.get("bytes")
    if us and isinstance(flops, (int, float)) and isinstance(nbytes, (int, float)):
        peak = find_peak(trace.device_name, peak_tflops, peak_gbps) if gpu else None
        got = achieved(Work(flops, nbytes), us * 1e-6, peak, str(trace.meta.get("dtype", "bf16")))
        row.on, row.tflops, row.gbps = on, got.tflops, got.gbps
        row.pct_flops, row.pct_bytes = got.pct_flops, got.pct_bytes
    elif us and on == "GPU" and not trace.meta and (shaped := shaped_flops(trace)):
        per_s = rate(shaped, us * 1e-6)  # no %peak: its ops may run in several precisions (each kernel's own
        row.on, row.tflops = on, per_s / 1e12 if per_s is not None else None  # is in the top-kernels table)
    return row


def metadata_figure(value: object) -> float | None:
    """A number of the suite's metadata as a float; None where it is none, or no float holds it (401 digits)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def shaped_flops(trace: Trace) -> float | None:
    """The FLOPs per step (the median step's) of a trace's GEMM, attention and convolution ops whose shapes
    record_shapes wrote and whose kernels ran in the step (common.reader.roofline); None where it has none: what a
    trace the suite did not write gives the TFLOP/s column."""
    shapes = trace.shapes
    if not shapes:
        return None
    per_step = []
    for step in trace.steps:
        ids = {op.external for op in step.gpu if op.category == "kernel" and op.external in shapes}
        per_step.append(sum(shapes[ext].flops or 0.0 for ext in ids if shapes[ext].tensor_core))
    return median_of(per_step) if any(per_step) else None


def median_launch_apis(trace: Trace) -> dict[str, float]:
    """Launch API -> launches per step, in the step whose launch count is the median (of an even count the later
    of the two middle steps, as Trace.per_step takes it), so the APIs add up to the median of `launches` exactly."""
    if not trace.steps:
        return {}
    step = trace.steps[median_index([s.launches for s in trace.steps])]
    return dict(step.launch_apis())


def with_ratios(rows: list[Row], baseline: Row) -> list[Row]:
    """`rows` with GPU and CPU time ratios against `baseline` (None where either time is missing), and the one
    ×base shows: GPU time against GPU time, CPU time where the row or the baseline has no GPU lane."""
    for row in rows:
        row.gpu_ratio = row.gpu_us / baseline.gpu_us if row.gpu_us is not None and baseline.gpu_us else None
        row.cpu_ratio = row.cpu_us / baseline.cpu_us if row.cpu_us is not None and baseline.cpu_us else None
        row.ratio = row.gpu_ratio if row.gpu_lane and baseline.gpu_us else row.cpu_ratio
    return rows


def launch_line(row: Row) -> str | None:
    """'10 kernel launches + 2 graph launches → 39 kernels' per step, for a row with graph launches; else None."""
    if not row.graph_launches or row.launches is None or row.kernels is None:
        return None

    def counted(n: float, what: str) -> str:
        return f"{num(n)} {what}" + ("" if n == 1 else "es" if what.endswith("h") else "s")

    graphs = counted(row.graph_launches, "graph launch")
    return f"{counted(row.launches, 'kernel launch')} + {graphs} → {counted(row.kernels, 'kernel')}"
