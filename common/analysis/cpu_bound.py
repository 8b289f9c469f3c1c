"""The verdict of a trace with no GPU lane, Part 1's first lesson on the CPU: is the step's time inside the ops'
own work (compute-bound: a 4096 matmul, 96% of the step inside aten::mm) or around it, in dispatch and Python
(overhead-bound: a 64 matmul)? From the ops' self times: an op's time less the ops it called, on its thread. No
torch here (the reader's analysis wing)."""

from __future__ import annotations

import bisect
import math
import operator
import statistics
from array import array
from collections import Counter
from itertools import compress

from common.analysis.figures import step_flops
from common.reader.intervals import running_max, union_us
from common.reader.kinds import DATALOADER, DRIVER, LABEL, MULTIPROCESSING_LOADER, OP, RUNTIME, STEP, SYNC_CALLS
from common.reader.model import Step, Trace, median_index
from common.units import human_time

COMPUTE_SHARE = 0.8  # one op's self time at least this share of the step's CPU time: compute-bound in it
COMPUTE_TOGETHER = 0.6  # the compute ops' self times together this share of the step: compute-bound in them
# how a CPU verdict begins: "<kind> on the CPU: ..."
KINDS = ("compute-bound", "overhead-bound", "data-loading-bound", "communication-bound")
LOADING_SHARE = 0.5  # a DataLoader's __next__ this share of the step's CPU time or more: bound by loading the data
LOADING_ASIDE = 0.2  # ... this share or more, beside another bound: named second, with its lever
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
             "aten::slow_conv", "aten::_slow_conv", "aten::thnn_conv", "aten::_nnpack", "aten::_scaled_mm",
             "aten::dot", "aten::mv")  # fmt: skip
# SDPA's fused attention kernels: the scores never leave the kernel, so "a fused kernel" is already applied
FUSED_ATTENTION = ("aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_efficient_attention",
                   "aten::_scaled_dot_product_fused_attention", "aten::_flash_attention",
                   "aten::_efficient_attention")  # fmt: skip
COMPILED = "Torch-Compiled Region"  # torch.compile's wrapper: its own time is its fused kernels and their Python
# Ops that make random data: a step holding them makes its batch on the host (torch.randn on the CPU)
RANDOM_OPS = ("aten::normal_", "aten::uniform_", "aten::random_", "aten::bernoulli_", "aten::randn", "aten::rand",
              "aten::randint", "aten::randperm", "aten::exponential_", "aten::multinomial")  # fmt: skip
# One-time costs on the host (host_one_time): a call this many times its name's usual length, and this long
ONCE_FACTOR = 10.0
ONCE_US = 1000.0
ONCE_MOST = 3  # ... where no more than this many calls of the name are that slow (more: a recurring cost)
ONCE_SHOWN = 0.02  # one-time costs this share of the window or more: said apart, and left out of the bound
# Ops and a backend that run only on a GPU: a trace holding them without GPU events ran a GPU it did not record
# Ops that wait for the GPU or a peer on a GPU run (a copy to the host, .item(), a collective): a wait, never one-time
WAITING_OPS = ("aten::copy_", "aten::_local_scalar_dense", "aten::item", "aten::to", "aten::_to_copy", "aten::cpu",
               "c10d::", "record_param_comms", "nccl:", "gloo:")  # fmt: skip
GPU_ONLY_OPS = ("aten::cudnn", "aten::_cudnn", "aten::miopen", "aten::_miopen", "nccl:", "aten::record_stream")
GPU_ONLY_LABELS = ("nccl:",)  # a ProcessGroupNCCL collective's label (nccl:all_to_all): NCCL runs on GPUs alone
UNCOVERED_SHARE = 0.3  # a label with no op under it this share of the step: its work ran where the trace is silent
COLLECTIVE_LABELS = ("gloo:",)  # a process group's worker thread's label around a collective (gloo:all_reduce)
COMM_COVER = 0.5  # collectives on other threads over this share of such a label's silent time: it waits for them


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
    if ranked and ranked[0][1] in RANDOM_OPS:
        return (f"→ try making the random data where it is used ({ranked[0][1]}: torch.randn/rand on the CPU; "
                "device='cuda' where it goes to a GPU), once before the loop, or fewer values")  # fmt: skip
    fused = sum(us for us, name in ranked if name.startswith(FUSED_ATTENTION))
    cores = "try every physical core (torch.set_num_threads)"
    bf16 = "bf16 only where the CPU has it natively (avx512_bf16, AMX)"
    if fused >= 0.5 * sum(us for us, _ in ranked):  # the fused kernel is already the lever the passes would get
        return (
            f"→ attention is already SDPA's fused kernel: {cores}, {bf16}, or less work per step (a shorter sequence)"
        )
    if gemm >= 0.5 * sum(us for us, _ in ranked):
        convolutions = any("conv" in name for _, name in ranked)
        return f"→ {cores}, {'channels_last for convolutions, ' if convolutions else ''}{bf16}, or less work per step"
    if any("softmax" in name for _, name in ranked):  # attention written out: the fused kernel is its lever too
        return ("→ try fewer passes over memory: fuse the pointwise, softmax and copy passes (torch.compile), or a "
                "fused kernel (SDPA instead of softmax(QKᵀ)V)")  # fmt: skip
    return "→ try fewer passes over memory: fuse the pointwise and copy passes (torch.compile)"


def loader_lever(name: str, gpu: bool = True) -> str:
    """The lever for time in a DataLoader's __next__ (its label `name`): workers (pinned batches for a GPU), or
    where it has them already (its iterator is _MultiProcessingDataLoaderIter) more of them or cheaper items."""
    if MULTIPROCESSING_LOADER in name:  # read after "try": the lever already on is said, the next one offered
        return (f"a larger or cheaper DataLoader (it has workers already: {MULTIPROCESSING_LOADER}): raise "
                "num_workers or prefetch_factor, or make __getitem__ and collate cheaper")  # fmt: skip
    if gpu:
        return "DataLoader workers (num_workers > 0) with pin_memory=True, so the next batch is ready"
    return "DataLoader workers (num_workers > 0), so the next batch is made while the model runs"


def starting_workers(trace: Trace, start: float, end: float) -> float | None:
    """The µs of the trace's first DataLoader __next__ where it falls in (start, end), is a multiprocessing
    iterator's (whose first call starts its worker processes) and is ONCE_FACTOR times the median of its later
    calls, or has none: a one-time cost more workers would make longer. None otherwise."""
    calls = trace.tree.overlapping(-math.inf, math.inf, "DataLoader")
    if not calls or MULTIPROCESSING_LOADER not in calls[0].name or not start <= calls[0].start < end:
        return None
    first, later = calls[0].end - calls[0].start, [c.end - c.start for c in calls[1:]]
    return first if not later or first >= ONCE_FACTOR * statistics.median(later) else None


def start_up_lever(us: float) -> str:
    """The lever for a DataLoader's first __next__ of `us` that starts its workers (starting_workers)."""
    return (
        f"its first __next__ ({human_time(us)}) starts the worker processes, once: keep them across epochs "
        "(persistent_workers=True) and profile later batches, not more workers"
    )


def _loading(trace: Trace, step: Step) -> tuple[float, str]:
    """The time of `step` inside its DataLoader's __next__ labels (their spans, clipped to the step), and the
    label that holds the most of it ("" where none)."""
    end = step.start_us + step.dur_us
    held: dict[str, float] = {}
    for node in trace.tree.overlapping(step.start_us, end, "DataLoader"):
        held[node.name] = held.get(node.name, 0.0) + min(node.end, end) - max(node.start, step.start_us)
    return sum(held.values()), max(held, key=held.__getitem__, default="")


def _optimizer_aside(trace: Trace, step: Step, cpu: float, unit: str) -> str:
    """Where the optimizer's step (torch's `Optimizer.step#...` label) holds LOADING_ASIDE of the CPU step or more,
    it is named second with its lever: from a loop over the parameters to foreach, from foreach to fused (Adam, AdamW
    and SGD have a fused CPU kernel), and, fused already, fewer steps; "" otherwise."""
    end = step.start_us + step.dur_us
    spans = [n for n in trace.tree.overlapping(step.start_us, end, "optimizer") if n.name.startswith("Optimizer.step")]
    us = sum(min(n.end, end) - max(n.start, step.start_us) for n in spans)
    if not spans or us < LOADING_ASIDE * cpu:
        return ""
    ops = trace.tree.self_us(step.start_us, end)
    name = spans[0].name
    if any(op.startswith("aten::_fused_") for op in ops):
        lever = "it is fused already: step it less often (gradient accumulation), or fewer parameters"
    elif any(op.startswith("aten::_foreach_") for op in ops):
        lever = f"try fused=True ({name.split('#')[-1].split('.')[0]}(..., fused=True)): one kernel for all parameters"
    else:
        lever = ("try foreach=True or fused=True (its loop runs each parameter's update op by op): one call over all "
                 "parameters")  # fmt: skip
    return f"; and {min(1.0, us / cpu):.0%} of the {unit} in the optimizer ({name}) → {lever}"


DROPOUT_OPS = ("aten::bernoulli_", "aten::bernoulli", "aten::native_dropout", "aten::dropout", "aten::feature_dropout")
# an autograd node's op (MulBackward0, CompiledFunctionBackward): the step runs a backward
BACKWARD_SUFFIXES = ("Backward0", "Backward1", "Backward")
AUTOGRAD_ENGINE = "autograd::engine::evaluate_function"
DROPOUT_ASIDE = 0.05  # dropout's own time this share of a CPU step with no backward: it runs in train mode


def _dropout_aside(own: dict[str, float], cpu: float, unit: str) -> str:
    """'; and N% … in dropout …' where dropout's ops (DROPOUT_OPS, their own time) hold DROPOUT_ASIDE of a step that
    runs no backward (no autograd node's op): a forward for inference in train mode, whose dropout draws a random
    mask per element for nothing."""
    us = sum(own.get(name, 0.0) for name in DROPOUT_OPS)
    if us < DROPOUT_ASIDE * cpu or any(name.endswith(BACKWARD_SUFFIXES) or name.startswith(AUTOGRAD_ENGINE)
                                       for name in own):  # fmt: skip
        return ""
    names = ", ".join(name for name in DROPOUT_OPS if own.get(name, 0.0) > 0)
    return (
        f"; and {min(1.0, us / cpu):.0%} of the {unit} in dropout ({names}) with no backward → model.eval() (or "
        "torch.inference_mode()) for inference turns it off"
    )


def cpu_verdict(trace: Trace) -> str:
    """One line: communication-bound where the step's thread waits in a label with no op under it while a process
    group's threads run its collectives (waits_for_collectives); data-loading-bound where a DataLoader's __next__
    holds LOADING_SHARE of it; compute-bound when one op's own time (self time, the median step's) is COMPUTE_SHARE
    or more of the step's CPU time, or the compute ops' together (is_compute: several passes count together)
    COMPUTE_TOGETHER or more, else overhead-bound; it names the ops that hold the time, their shares, a lever, and,
    where the suite wrote the step's FLOPs, the busiest op's GFLOP/s (a 64 matmul's aten::mm runs at a tenth of a
    1024 one's). One-time costs (host_one_time: a first cuDNN convolution, allocator growth) are said apart and
    left out of the bound."""
    cpu = trace.per_step(lambda s: s.region_us)
    step_cpu = cpu  # the whole step's, one-time costs in it: the optimizer's share is of it
    per = ("in the whole recording (its ProfilerStep#N hold none of the work)" if trace.empty_steps
           else "in the one recording (no ProfilerStep#N)" if trace.whole_trace
           else "per iteration" if trace.cpu_source == "iteration" else "per step")  # fmt: skip
    spent = f"{human_time(cpu)} of CPU {per}" if cpu else f"no CPU time {per}"
    # each op's self time (its span less the ops it called, on its thread) is the call tree's: no second read
    per_step = [trace.tree.self_us(s.start_us, s.start_us + s.dur_us) for s in trace.steps] if cpu else []
    names = {n for own in per_step for n in own}
    own = {n: statistics.median(p.get(n, 0.0) for p in per_step) for n in names}
    if not cpu or not own:
        return f"bound by the CPU: no GPU activity in the trace; {spent}"
    unit = "window" if trace.whole_trace else "iteration" if trace.cpu_source == "iteration" else "step"
    step = trace.steps[median_index([s.dur_us for s in trace.steps])]
    found = host_one_time(trace, step.start_us, step.start_us + step.dur_us) + _idle_syncs(trace, step)
    found += _long_pauses(trace, step)
    once = once_clause(found, cpu, unit)
    if once:  # the bound is the steady state's: the one-time costs' own time left out
        for what, us in found.items():
            name = op_of(what)
            if name in own:
                own[name] = max(0.0, own[name] - us)
        cpu = max(cpu - sum(found.values()), 1e-9)
    comm = waits_for_collectives(trace, step)
    if comm is not None:
        return (f"{KINDS[3]} on the CPU: {comm}; {spent} → try {_comm_lever(trace)}{once}")  # fmt: skip
    loading = [_loading(trace, s) for s in trace.steps]
    loader_us = statistics.median(us for us, _ in loading)
    if loader_us >= LOADING_SHARE * cpu:  # the model waits for its batches: what the ops do is not the bound
        name = max(loading)[1]
        lever = f"try {loader_lever(name, gpu=False)}"
        window = (trace.steps[0].start_us, trace.steps[-1].start_us + trace.steps[-1].dur_us)
        if (first := starting_workers(trace, *window)) is not None and first >= 0.5 * sum(us for us, _ in loading):
            lever = start_up_lever(first)  # the loading is the workers' start: a one-time cost, not a steady one
        return (f"{KINDS[2]} on the CPU: {min(1.0, loader_us / cpu):.0%} of the {unit} inside the DataLoader's "
                f"__next__ ({name}); {spent} → {lever}{once}")  # fmt: skip
    aside = ""
    if loader_us >= LOADING_ASIDE * cpu:  # the main thread also makes its batches: a second cause, its own lever
        name = max(loading)[1]
        aside = (f"; and {min(1.0, loader_us / cpu):.0%} of the {unit} inside the DataLoader's __next__ ({name}) → "
                 f"try {loader_lever(name, gpu=False)}")  # fmt: skip
    ranked = sorted(((us, n) for n, us in own.items() if is_compute(n) and us > 0), reverse=True)
    busiest = max(own.items(), key=lambda kv: kv[1])
    top, top_us = (ranked[0][1], ranked[0][0]) if ranked else busiest
    share = min(1.0, max(0.0, top_us) / cpu)
    together = min(1.0, sum(us for us, _ in ranked) / cpu)
    flops = step_flops(trace)[0]  # the flags', or the ops' shapes' where the script's shapes were edited
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if flops is not None and top_us > 0 else ""
    aside += _optimizer_aside(trace, step, step_cpu, unit)
    aside += _dropout_aside(own, cpu, unit)
    aside += cold_pass(trace)
    lever = _lever(ranked) + _idle_gpu(trace) + aside
    steady = " of the steady state" if once else f" of the {unit}"
    if share >= COMPUTE_SHARE:
        return f"{KINDS[0]} on the CPU: {share:.0%}{steady} inside {top}{rate}; {spent} {lever}{once}"
    if together >= COMPUTE_TOGETHER:
        listed = ", ".join(f"{n} {us / cpu:.0%}" for us, n in ranked[:4])
        return (f"{KINDS[0]} on the CPU: {together:.0%}{steady} in its ops' own work ({listed}); "
                f"{spent} {lever}{once}")  # fmt: skip
    top, top_us = busiest
    share = min(1.0, max(0.0, top_us) / cpu)
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if flops is not None and top_us > 0 else ""
    return (f"{KINDS[1]} on the CPU: the busiest op, {top}, is {share:.0%}{steady}{rate}, the "
            f"rest dispatch and Python; {spent} → try fewer, larger ops (a larger batch; torch.compile to dispatch "
            f"fewer ops){aside}{once}")  # fmt: skip


COLD_PASS_MOST = 2  # a window none of whose top-level ops is called more than this often is one pass, not a loop


def cold_pass(trace: Trace) -> str:
    """'; one cold pass: …' where the trace is one window (no ProfilerStep#N) whose top-level ops each run
    COLD_PASS_MOST times or fewer (one forward, no loop) and one of them runs its first call ONCE_FACTOR times its
    later calls' time or more, ONCE_US or more: the window measures first calls (a library's, the dispatcher's set-up)
    as much as the work, so warming up comes first; '' otherwise."""
    if not trace.whole_trace:
        return ""
    calls: dict[str, list[float]] = {}
    for node in trace.tree.top_level(-math.inf, math.inf, OP):
        calls.setdefault(node.name, []).append(node.us)
    if not calls or max(map(len, calls.values())) > COLD_PASS_MOST:
        return ""
    later = {name: statistics.median(each[1:]) for name, each in calls.items() if len(each) > 1}
    cold = [(each[0] / max(later[name], 1e-9), name, each) for name, each in calls.items()
            if name in later and each[0] >= ONCE_US and each[0] >= ONCE_FACTOR * later[name]]  # fmt: skip
    if not cold:
        return ""
    _, name, each = max(cold)
    return (f"; one cold pass (no top-level op runs more than {COLD_PASS_MOST} times): the first {name} takes "
            f"{human_time(each[0])}, the next {human_time(statistics.median(each[1:]))}, so first calls' set-up holds "
            "much of the window → warm up (run the model once) before timing it")  # fmt: skip


def _cuda_calls(trace: Trace) -> bool:
    """Whether the trace records CUDA (HIP) runtime or driver calls: the run set a GPU up."""
    return any(len(thread.layer(kind)) for thread in trace.tree.threads.values() for kind in (RUNTIME, DRIVER))


def _idle_syncs(trace: Trace, step: Step) -> Counter:
    """The sync calls of ONCE_US or more in `step` of a trace with no GPU work at all (cpu_verdict's): they wait
    for nothing launched, so they are the CUDA context's start-up (a first torch.cuda.synchronize() creating it),
    once: "<call> with no GPU work (CUDA's start-up)" -> µs."""
    found: Counter = Counter()
    end = step.start_us + step.dur_us
    for node in trace.tree.overlapping(step.start_us, end, "sync") if not trace.has_gpu else ():
        us = min(node.end, end) - max(node.start, step.start_us)
        if us >= ONCE_US:
            found[f"{node.name} with no GPU work (CUDA's start-up)"] += us
    return found


def _long_pauses(trace: Trace, step: Step) -> Counter:
    """The pauses in no op between `step`'s top-level ops (on the thread that runs the most of them; not where other
    threads' ops ran through half the pause: a wait for them) that are ONCE_US
    or more and ONCE_FACTOR times the step's usual pause, where no more than ONCE_MOST are (or the longest few of
    them are ONCE_FACTOR times every other): the machine stalled (or Python ran once), not the dispatch and Python of
    every op; "stalled in no op (N pauses)" -> µs."""
    end = step.start_us + step.dur_us
    threads = list(trace.tree.threads.values())
    tops = [thread.layer(OP).tops_in(step.start_us, end) for thread in threads]
    main = max(range(len(tops)), key=lambda k: len(tops[k][0]), default=None)
    if main is None:
        return Counter()
    starts, ends, _ = tops[main]
    others = [(a, b) for k, thread in enumerate(threads) if k != main
              for top in (tops[k], thread.layer(LABEL).tops_in(step.start_us, end))
              for a, b in zip(top[0], top[1], strict=True)]  # fmt: skip
    pauses = [b - a for a, b in zip(ends, starts[1:], strict=False)
              if b > a and not _worked_beside(others, a, b)]  # fmt: skip
    if len(pauses) < 3:
        return Counter()
    usual = statistics.median(pauses)
    slow = sorted((us for us in pauses if us >= ONCE_US and us >= ONCE_FACTOR * usual), reverse=True)
    if len(slow) > ONCE_MOST:  # many: recurring Python, unless the longest few are ten times every other
        slow = slow[: next((k for k in range(1, ONCE_MOST + 1) if slow[k - 1] >= ONCE_FACTOR * slow[k]), 0)]
    if not slow or sum(slow) < ONCE_SHOWN * step.dur_us:  # a pause or two of a few ms in a long step: nothing to say
        return Counter()
    return Counter({f"{PAUSES} ({len(slow)} pause{'s' if len(slow) > 1 else ''})": sum(slow)})


def _worked_beside(spans: list[tuple[float, float]], start: float, end: float) -> bool:
    """Whether other threads' work (`spans`: their top-level ops' and labels' (start, end), nested or not) ran
    through half of [start, end] or more: the step's thread waited for it there (a process group's collective, a
    loader thread), no stall."""
    return union_us((max(a, start), min(b, end)) for a, b in spans if a < end and b > start) >= (end - start) / 2


def _idle_gpu(trace: Trace) -> str:
    """', or run it on the <GPU> the trace lists: CUDA was set up on it, yet it ran nothing' for a CPU-bound trace
    whose run made CUDA calls and whose deviceProperties name a GPU; '' otherwise."""
    if trace.has_gpu or not trace.device_name or not _cuda_calls(trace):
        return ""
    return f"; or run it on the {trace.device_name} the trace lists: CUDA was set up on it, yet it ran nothing"


def _comm_lever(trace: Trace) -> str:
    """The lever of a CPU rank waiting for its collectives: DDP's buckets where DDP runs, else fewer or smaller."""
    ddp = any(name.startswith("DistributedDataParallel") for thread in trace.tree.threads.values()
              for name in set(thread.layer(LABEL).names))  # fmt: skip
    if ddp:
        return ("overlapping DDP's all-reduce with the backward (bucket_cap_mb), fewer ranks per process group, or "
                "compressed gradients (a DDP comm hook such as fp16_compress_hook)")  # fmt: skip
    return "fewer or smaller collectives (communicate less often), or fewer ranks per process group"


def slow_calls(
    trace: Trace, kinds: tuple[int, ...] = (OP, RUNTIME)
) -> list[tuple[int, str, float, float, float, bool]]:
    """The calls of a trace that ran once, from the call tree alone: an op whose own time (less the ops it called),
    or a runtime call whose time, is ONCE_FACTOR times its name's usual length (the median over the trace, of a
    name called three times or more) and ONCE_US or more, where no more than ONCE_MOST calls of the name are that
    slow (a first cuDNN convolution or cuBLAS call that initialises the library, an allocation that grew the
    caching allocator, a cudaFree), or whose longest call is ONCE_FACTOR times every other of its name; a runtime
    call named fewer than three times, against every runtime call's usual length. A sync is a wait, never one; so
    may a copy, a scalar read or a collective be (WAITING_OPS). (kind, name, start, end, own µs, stalled) each, in
    no order: `stalled` where an op's slow call is no first call but a stall of the machine (_stalled)."""
    layers = [(kind, layer) for thread in trace.tree.threads.values() for kind in kinds
              if len(layer := thread.layer(kind))]  # fmt: skip
    owns = [layer.self_times() if kind == OP else array("d", map(operator.sub, layer.ends, layer.starts))
            for kind, layer in layers]  # fmt: skip
    # only names with a call of ONCE_US or more can have a slow one: the others' lengths are not gathered
    wanted = {(kind, layer.names[i]) for (kind, layer), own in zip(layers, owns, strict=True)
              for i in compress(range(len(own)), map(ONCE_US.__le__, own))}  # fmt: skip
    calls: dict[tuple[int, str], list[tuple[float, float, float]]] = {}  # (kind, name) -> (start, end, own µs)
    for (kind, layer), own in zip(layers, owns, strict=True):
        names = layer.names
        for i in (i for i, name in enumerate(names) if (kind, name) in wanted):
            calls.setdefault((kind, names[i]), []).append((layer.starts[i], layer.ends[i], own[i]))
    flops = _flops_of(trace, {name for kind, name in calls if kind == OP})
    kind_usual = None
    if any(kind == RUNTIME and len(each) < 3 for (kind, _), each in calls.items()):  # against every runtime call
        runtime = array("d")
        for (kind, layer), own in zip(layers, owns, strict=True):
            if kind == RUNTIME:
                runtime += array("d", compress(own, (name not in SYNC_CALLS for name in layer.names)))
        kind_usual = statistics.median(runtime) if runtime else None
    found = []
    for (kind, name), each in calls.items():
        if (kind == RUNTIME and name in SYNC_CALLS) or name.startswith(WAITING_OPS):
            continue
        if len(each) >= 3:
            usual = statistics.median(us for _, _, us in each)
        elif kind == RUNTIME and kind_usual is not None:
            usual = kind_usual
        else:
            continue
        slow = [call for call in each if call[2] >= ONCE_US and call[2] >= ONCE_FACTOR * usual]
        usual_rate = _per_flop(each, flops[name]) if slow and kind == OP and name in flops else None
        if usual_rate is not None:  # a call doing that much more work (its FLOPs) may take that long: not once
            work = flops[name]
            slow = [call for call in slow if call[0] not in work or call[2] / work[call[0]] >= ONCE_FACTOR * usual_rate]
        if len(slow) > ONCE_MOST:  # slow often: recurring, unless its longest is ten times every other call
            slow.sort(key=lambda call: -call[2])
            slow = slow[:1] if slow[0][2] >= ONCE_FACTOR * slow[1][2] else []
        first = min(each)  # each holds every call of the name, on every thread: (start, end, own µs)
        set_up = first[2] if first[2] >= ONCE_US and first[2] >= ONCE_FACTOR * usual else None  # its first call's
        found += [(kind, name, ts, te, us, kind == OP and _stalled(name, ts, us, first[0], set_up, flops.get(name)))
                  for ts, te, us in slow]  # fmt: skip
    return found


def _flops_of(trace: Trace, names: set[str]) -> dict[str, dict[float, float]]:
    """The FLOPs of each call of the ops `names` that record_shapes gave shapes to (Trace.shaped_calls): name ->
    {its start: FLOPs}; a name none of whose calls has them is left out."""
    found: dict[str, dict[float, float]] = {}
    for ts, _, _, op in trace.shaped_calls if names else ():
        if op.name in names and (work := op.flops) is not None and work > 0:
            found.setdefault(op.name, {})[ts] = work
    return found


def _per_flop(calls: list[tuple[float, float, float]], flops: dict[float, float]) -> float | None:
    """The usual own time per FLOP (µs) of a name's `calls` ((start, end, own µs) each) with known FLOPs (`flops`:
    start -> FLOPs): their median; None where fewer than two of them have FLOPs."""
    rates = [us / flops[start] for start, _, us in calls if start in flops]
    return statistics.median(rates) if len(rates) >= 2 else None


def host_one_time(trace: Trace, start: float, end: float) -> Counter:
    """The one-time costs on the host in [start, end] (slow_calls, of those starting in it): "first <op>" or the
    call's name -> µs (an op's own time, less the slow runtime calls inside it, which are said by their name)."""
    found: Counter = Counter()
    slow = slow_calls(trace)
    calls = sorted((ts, te) for kind, _, ts, te, _, _ in slow if kind == RUNTIME)
    for kind, name, ts, te, us, stalled in slow:
        if start <= ts < end:
            if kind == OP:  # a slow runtime call inside it (a cudaFree) is said as itself, not twice
                us = max(0.0, us - sum(min(b, te) - max(a, ts) for a, b in calls if a < te and b > ts))
            if us >= ONCE_US:  # what is left of an op is a one-time cost only where it still is one
                found[name if kind != OP else f"{STALL}{name}" if stalled else f"first {name}"] += us
    return found


def _stalled(
    name: str, ts: float, us: float, first: float, set_up: float | None, flops: dict[float, float] | None
) -> bool:
    """Whether a slow call of op `name` at `ts`, of `us` own time, is a later call that did work done before (a stall
    of the machine), not a first call: with the calls' FLOPs (record_shapes), an earlier call of the same work;
    without them, an earlier call of a name that sets nothing up per shape (a GEMM or a convolution's first call of
    each shape may initialise or tune its library, so those stay first calls), or of one whose own first call was
    slow (`set_up`, µs) by ONCE_FACTOR times that: a new shape's set-up costs about what the first call's did, not ten
    times it (dtu_surphase_rn18: a 7.84 s oneDNN convolution, call 181 of 200, whose first took 146 ms). `first`: the
    start of the name's first call."""
    if first >= ts:
        return False
    if flops and ts in flops:
        return any(at < ts and work == flops[ts] for at, work in flops.items())
    if set_up is not None and us >= ONCE_FACTOR * set_up:
        return True
    return not (name.startswith(GEMM_LIKE) or any(word in name for word in PER_SHAPE))


# Ops whose first call of each shape may set something up (a library's tuned kernel or primitive, an allocation
# that grows the heap or touches new pages): without shapes, a later slow call of these may be a first call too.
PER_SHAPE = ("conv", "cudnn", "mkldnn", "norm", "pool", "empty", "resize", "zeros", "ones", "full", "clone", "copy",
             "contiguous", "cat", "stack", "_to")  # fmt: skip


STALL = "stalled "  # host_one_time's prefix for a slow call of an op that is not its first: the machine, not the code
PAUSES = STALL + "in no op"  # _long_pauses' key: pauses between ops ten times the usual one


def op_of(what: str) -> str:
    """The op a host_one_time key names ("first aten::div", "stalled aten::div" -> "aten::div")."""
    return what.removeprefix("first ").removeprefix(STALL)


def once_clause(found: Counter, span: float, unit: str) -> str:
    """'; one-time, not counted in the bound: 2.31 s first aten::cudnn_convolution (71% of the window) → warm up …'
    for host_one_time's costs `found` in a window of `span` µs, where they hold ONCE_SHOWN of it; else ''."""
    once = sum(found.values())
    if span <= 0 or once < ONCE_SHOWN * span:
        return ""
    stalls = Counter({what: us for what, us in found.items() if what.startswith(STALL)})
    firsts = found - stalls
    said = ""
    if stalls:  # later calls, slow once, or long pauses: the machine stalled, not a warm-up
        stalled = sum(stalls.values())
        listed = ", ".join(f"{human_time(us)} {what}" for what, us in stalls.most_common(3))
        kinds = [("later calls of ops, not their first", any(not w.startswith(PAUSES) for w in stalls)),
                 ("pauses ten times the usual", any(w.startswith(PAUSES) for w in stalls))]  # fmt: skip
        what = ", and ".join(words for words, found in kinds if found)
        said = (
            f"; one-off stalls, not counted in the bound: {listed} ({what}: {min(1.0, stalled / span):.0%} of "
            f"the {unit}) → another process or the OS took the CPU: profile more steps, on a quiet machine"
        )
    if firsts:
        first = sum(firsts.values())
        listed = ", ".join(f"{human_time(us)} {what}" for what, us in firsts.most_common(3))
        said += (f"; one-time, not counted in the bound: {listed} ({min(1.0, first / span):.0%} of the {unit}) → "
                 f"warm up before profiling (schedule(wait=1, warmup=1, ...)), or profile later steps (saves up to "
                 f"{human_time(first)} of the {human_time(span)} {unit})")  # fmt: skip
    return said


def gpu_evidence(trace: Trace) -> str | None:
    """What shows that a trace without GPU events ran a GPU anyway: a process group on nccl, an op that runs
    only on a GPU (a cuDNN convolution, Tensor.record_stream on a CUDA stream), or a collective's label of NCCL's
    process group (nccl:all_to_all, where the trace has no distributedInfo to name the backend); None where nothing
    does (a CPU run, whatever devices its machine lists)."""
    if str(trace.distributed.get("backend", "")).lower() == "nccl":
        return "its process group runs on nccl"
    for kind, prefixes in ((LABEL, GPU_ONLY_LABELS), (OP, GPU_ONLY_OPS)):
        for thread in trace.tree.threads.values():
            found = min((name for name in set(thread.layer(kind).names) if name.startswith(prefixes)), default=None)
            if found is not None:
                return f"it ran {found}"
    return None


def silent_labels(trace: Trace, step: Step) -> list[tuple[float, str, object, list[tuple[float, float]]]]:
    """The labels of `step` (not steps) with no op under them for a while, on their thread: (µs with no op under it,
    name, thread, those pieces), longest first. An autograd engine's thread the trace does not hold (its
    '## backward ##' runs with nothing under it), or a wait for another thread."""
    start, end = step.start_us, step.start_us + step.dur_us
    found = []
    for tid, thread in trace.tree.threads.items():
        labels, ops = thread.layer(LABEL), thread.layer(OP)
        if not len(labels) or not len(ops):  # a process group's worker thread runs labels alone: not the step's
            continue
        op_starts, op_ends, _ = ops.tops()
        calls = thread.layer(RUNTIME)
        if len(calls):  # a runtime call (cudaFree) is the thread's work too
            spans = sorted([*zip(op_starts, op_ends, strict=True), *zip(calls.starts, calls.ends, strict=True)])
            op_starts, op_ends = [a for a, _ in spans], list(running_max(array("d", (b for _, b in spans))))
        for i, name in enumerate(labels.names):
            a, b = max(labels.starts[i], start), min(labels.ends[i], end)
            if b - a < UNCOVERED_SHARE * step.dur_us or STEP.match(name) or name.startswith(COLLECTIVE_LABELS):
                continue
            pieces, at = [], a
            for j in range(bisect.bisect_right(op_ends, a), len(op_starts)):  # the ends ascend (a running maximum)
                if op_starts[j] >= b:
                    break
                if op_starts[j] > at:
                    pieces.append((at, op_starts[j]))
                at = max(at, op_ends[j])
            if b > at:
                pieces.append((at, b))
            silent = sum(y - x for x, y in pieces)
            if silent >= UNCOVERED_SHARE * step.dur_us:
                found.append((silent, name, tid, pieces))
    found.sort(key=lambda item: -item[0])
    return found


def waits_for_collectives(trace: Trace, step: Step) -> str | None:
    """Where the step's thread sits in a label with no op under it while a process group's worker threads run
    collectives (gloo:all_reduce) over COMM_COVER of that time: '<label> waits N ms … for K gloo:all_reduce …';
    None otherwise."""
    silent = silent_labels(trace, step)
    if not silent:
        return None
    us, name, tid, pieces = silent[0]
    layers = [thread.layer(LABEL) for t, thread in trace.tree.threads.items() if t != tid]
    spans = sorted((layer.starts[i], layer.ends[i], n) for layer in layers for i, n in enumerate(layer.names)
                   if n.startswith(COLLECTIVE_LABELS))  # fmt: skip
    covered = 0.0
    for x, y in pieces:
        reach = x
        for a, b, _ in spans:
            lo, hi = max(a, reach), min(b, y)
            if hi > lo:
                covered += hi - lo
                reach = hi
    if covered < COMM_COVER * us:
        return None
    start, end = step.start_us, step.start_us + step.dur_us
    inside = [(b - a, n) for a, b, n in spans if a < end and b > start]
    kinds = Counter(n for _, n in inside)
    listed = ", ".join(f"{n} ×{k}" for n, k in kinds.most_common(2))
    longest = ", ".join(human_time(d) for d, _ in sorted(inside, reverse=True)[:2])
    return (
        f"{human_time(us)} of the step in {name!r} with no op under it, while {listed} ran on the process "
        f"group's threads ({longest})"
    )


def host_side(trace: Trace) -> str:
    """What the host side of the median step shows where its GPU's work was not recorded: a DataLoader's __next__
    holding LOADING_SHARE of the step (with its lever), else a label with no op under it for UNCOVERED_SHARE of the
    step (its ops on a thread the trace does not hold, or a wait); and the one-time costs apart (host_one_time);
    '' where none is there."""
    step = trace.steps[median_index([s.dur_us for s in trace.steps])]
    if not step.dur_us > 0:
        return ""
    unit = "window" if trace.whole_trace else "iteration" if trace.cpu_source == "iteration" else "step"
    parts = []
    loading, name = _loading(trace, step)
    silent = [item for item in silent_labels(trace, step) if not item[1].startswith(DATALOADER)]
    if loading >= LOADING_SHARE * step.dur_us:  # the batches are made on the host, in the step
        parts.append(f"{min(1.0, loading / step.dur_us):.0%} of the {unit} inside the DataLoader's __next__ ({name}) "
                     f"→ try {loader_lever(name)}")  # fmt: skip
    elif silent:
        us, name, _, _ = silent[0]
        parts.append(f"{human_time(us)} of the {human_time(step.dur_us)} {unit} in {name!r} with no op under it on "
                     "its thread (its ops ran on a thread the trace does not hold, such as the autograd engine's, or "
                     "it waited)")  # fmt: skip
    once = once_clause(host_one_time(trace, step.start_us, step.start_us + step.dur_us), step.dur_us, unit)
    return ("; on the host, " + "; ".join(parts) if parts else "") + once


def unrecorded_gpu(trace: Trace, evidence: str) -> str:
    """The verdict of a trace with no GPU event whose run used a GPU anyway (gpu_evidence): no bound, and what its
    host side shows (host_side)."""
    return (f"no bound: the trace holds no GPU event, yet {evidence}: the GPU's activity was not recorded "
            "(ProfilerActivity.CUDA not in the profile's activities, or CUPTI off), so nothing says how busy the GPU "
            f"was{host_side(trace)}")  # fmt: skip
