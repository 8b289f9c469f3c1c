"""The verdict of a trace with no GPU lane, Part 1's first lesson on the CPU: is the step's time inside the ops'
own work (compute-bound: a 4096 matmul, 96% of the step inside aten::mm) or around it, in dispatch and Python
(overhead-bound: a 64 matmul)? From the ops' self times: an op's time less the ops it called, on its thread. No
torch here (the reader's analysis wing)."""

from __future__ import annotations

import statistics

from common.analysis.figures import step_flops
from common.reader.kinds import MULTIPROCESSING_LOADER
from common.reader.model import Step, Trace
from common.units import human_time

COMPUTE_SHARE = 0.8  # one op's self time at least this share of the step's CPU time: compute-bound in it
COMPUTE_TOGETHER = 0.6  # the compute ops' self times together this share of the step: compute-bound in them
KINDS = ("compute-bound", "overhead-bound", "data-loading-bound")  # how a CPU verdict begins: "<kind> on the CPU: ..."
LOADING_SHARE = 0.5  # a DataLoader's __next__ this share of the step's CPU time or more: bound by loading the data
# Ops whose own time is not arithmetic: views, wrappers that call the op doing the work, allocation, dispatch glue.
NOT_COMPUTE = frozenset({
    "aten::linear", "aten::matmul", "aten::t", "aten::transpose", "aten::view", "aten::reshape", "aten::_unsafe_view",
    "aten::as_strided", "aten::expand", "aten::permute", "aten::select", "aten::slice", "aten::unsqueeze",
    "aten::squeeze", "aten::contiguous", "aten::to", "aten::_to_copy", "aten::empty", "aten::empty_like",
    "aten::empty_strided", "aten::resize_", "aten::detach", "aten::detach_", "aten::alias", "aten::lift_fresh",
    "aten::conv2d", "aten::convolution", "aten::_convolution", "aten::conv1d", "aten::conv3d", "aten::dropout",
    "aten::scaled_dot_product_attention", "aten::softmax", "aten::batch_norm", "aten::_batch_norm_impl_index",
    "aten::layer_norm", "aten::flatten", "aten::chunk", "aten::split", "aten::unbind", "aten::zeros", "aten::ones",
    "aten::new_empty", "aten::new_zeros", "aten::item", "aten::_local_scalar_dense", "aten::result_type",
})  # fmt: skip
# Compute ops of the GEMM and convolution kind (the rest of the compute: passes over memory).
GEMM_LIKE = ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm", "aten::addbmm", "aten::_weight_int",
             "aten::mkldnn_convolution", "aten::_mkldnn_", "aten::mkldnn_", "aten::convolution_", "aten::_conv",
             "aten::slow_conv", "aten::thnn_conv", "aten::_scaled_mm", "aten::dot", "aten::mv")  # fmt: skip
COMPILED = "Torch-Compiled Region"  # torch.compile's wrapper: its own time is its fused kernels and their Python


def cpu_kind(verdict: str) -> str | None:
    """The kind a CPU verdict (cpu_verdict's line) says its step is, one of KINDS; None for another line."""
    return next((kind for kind in KINDS if verdict.startswith(f"{kind} on the CPU")), None)


def is_compute(name: str) -> bool:
    """Whether an op's own time is arithmetic: an ATen op that is not a view, a wrapper or allocation, or a
    compiled region's own time (its fused kernels, which the profiler does not record op by op)."""
    return (name.startswith("aten::") and name not in NOT_COMPUTE) or name.startswith(COMPILED)


def _lever(ranked: list[tuple[float, str]]) -> str:
    """What to try where the compute ops `ranked` ((self µs, name), the busiest first) hold the step: for GEMMs and
    convolutions (half of the compute or more), the cores and the precision; else fewer passes over memory."""
    gemm = sum(us for us, name in ranked if name.startswith(GEMM_LIKE))
    if gemm >= 0.5 * sum(us for us, _ in ranked):
        return ("→ try every physical core (torch.set_num_threads), channels_last for convolutions, bf16 only where "
                "the CPU has it natively (avx512_bf16, AMX), or less work per step")  # fmt: skip
    return ("→ try fewer passes over memory: fuse the pointwise, softmax and copy passes (torch.compile), or a fused "
            "kernel (SDPA instead of softmax(QKᵀ)V)")  # fmt: skip


def loader_lever(name: str, gpu: bool = True) -> str:
    """The lever for time in a DataLoader's __next__ (its label `name`): workers (pinned batches for a GPU), or
    where it has them already (its iterator is _MultiProcessingDataLoaderIter) more of them or cheaper items."""
    if MULTIPROCESSING_LOADER in name:
        return (f"the DataLoader has workers already ({MULTIPROCESSING_LOADER}): raise num_workers or "
                "prefetch_factor, or make __getitem__ and collate cheaper")  # fmt: skip
    if gpu:
        return "DataLoader workers (num_workers > 0) with pin_memory=True, so the next batch is ready"
    return "DataLoader workers (num_workers > 0), so the next batch is made while the model runs"


def _loading(trace: Trace, step: Step) -> tuple[float, str]:
    """The time of `step` inside its DataLoader's __next__ labels (their spans, clipped to the step), and the
    label that holds the most of it ("" where none)."""
    end = step.start_us + step.dur_us
    held: dict[str, float] = {}
    for node in trace.tree.overlapping(step.start_us, end, "DataLoader"):
        held[node.name] = held.get(node.name, 0.0) + min(node.end, end) - max(node.start, step.start_us)
    return sum(held.values()), max(held, key=held.__getitem__, default="")


def cpu_verdict(trace: Trace) -> str:
    """One line: compute-bound when one op's own time (self time, the median step's) is COMPUTE_SHARE or more of
    the step's CPU time, or the compute ops' together (is_compute: several passes count together) COMPUTE_TOGETHER
    or more, else overhead-bound; it names the ops that hold the time, their shares, a lever, and, where the suite
    wrote the step's FLOPs, the busiest op's GFLOP/s (a 64 matmul's aten::mm runs at a tenth of a 1024 one's)."""
    cpu = trace.per_step(lambda s: s.region_us)
    per = ("in the one recording (no ProfilerStep#N)" if trace.whole_trace
           else "per iteration" if trace.cpu_source == "iteration" else "per step")  # fmt: skip
    spent = f"{human_time(cpu)} of CPU {per}" if cpu else f"no CPU time {per}"
    # each op's self time (its span less the ops it called, on its thread) is the call tree's: no second read
    per_step = [trace.tree.self_us(s.start_us, s.start_us + s.dur_us) for s in trace.steps] if cpu else []
    names = {n for own in per_step for n in own}
    own = {n: statistics.median(p.get(n, 0.0) for p in per_step) for n in names}
    if not cpu or not own:
        return f"bound by the CPU: no GPU activity in the trace; {spent}"
    unit = "window" if trace.whole_trace else "iteration" if trace.cpu_source == "iteration" else "step"
    loading = [_loading(trace, s) for s in trace.steps]
    loader_us = statistics.median(us for us, _ in loading)
    if loader_us >= LOADING_SHARE * cpu:  # the model waits for its batches: what the ops do is not the bound
        name = max(loading)[1]
        return (f"{KINDS[2]} on the CPU: {min(1.0, loader_us / cpu):.0%} of the {unit} inside the DataLoader's "
                f"__next__ ({name}); {spent} → try {loader_lever(name, gpu=False)}")  # fmt: skip
    ranked = sorted(((us, n) for n, us in own.items() if is_compute(n) and us > 0), reverse=True)
    busiest = max(own.items(), key=lambda kv: kv[1])
    top, top_us = (ranked[0][1], ranked[0][0]) if ranked else busiest
    share = min(1.0, max(0.0, top_us) / cpu)
    together = min(1.0, sum(us for us, _ in ranked) / cpu)
    flops = step_flops(trace)[0]  # the flags', or the ops' shapes' where the script's shapes were edited
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if flops is not None and top_us > 0 else ""
    lever = _lever(ranked)
    if share >= COMPUTE_SHARE:
        return f"{KINDS[0]} on the CPU: {share:.0%} of the step inside {top}{rate}; {spent} {lever}"
    if together >= COMPUTE_TOGETHER:
        listed = ", ".join(f"{n} {us / cpu:.0%}" for us, n in ranked[:4])
        return f"{KINDS[0]} on the CPU: {together:.0%} of the step in its ops' own work ({listed}); {spent} {lever}"
    top, top_us = busiest
    share = min(1.0, max(0.0, top_us) / cpu)
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if flops is not None and top_us > 0 else ""
    return (f"{KINDS[1]} on the CPU: the busiest op, {top}, is {share:.0%} of the step{rate}, the rest "
            f"dispatch and Python; {spent} → try fewer, larger ops (a larger batch; torch.compile to dispatch "
            "fewer ops)")  # fmt: skip
