"""What bounds a trace's steps, and what to try: one verdict from the steps' time budgets, and an expert's rules.

The budget (common.analysis.budget) splits each step's span (its ProfilerStep#N on the CPU) into GPU busy (the union
over streams: compute, memcpy/memset, communication not hidden behind compute) and GPU idle (waiting for the host,
or kernels waiting on each other). The verdict names the bound from those figures, with the thresholds below, and
the lever; the rules (Nsight Systems' expert rules, TraceLens' per-op roofline) fire only
where their evidence is in the trace. Everything comes from the one pass of common.reader.build; nothing here prints.
"""

from __future__ import annotations

import bisect
import functools
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import NamedTuple

from common.analysis.budget import (
    PARTS,
    Budget,
    Gap,
    budget_line,
    median_budget,
    percent,
    step_budgets,
)
from common.analysis.cpu_bound import (
    WAITING_OPS,
    cpu_kind,
    cpu_verdict,
    gpu_evidence,
    host_side,
    is_compute,
    loader_lever,
    slow_calls,
    unrecorded_gpu,
)
from common.analysis.efficiency import efficiency, rates
from common.analysis.tables import num, printable
from common.physics import find_peak, rate
from common.reader.build import no_gc
from common.reader.calltree import CallTree, Layer, Node, Thread
from common.reader.intervals import merged
from common.reader.kinds import (
    CAPTURE_BEGIN,
    CAPTURE_END,
    DATALOADER,
    DRIVER,
    GRAPH_LAUNCHES,
    LABEL,
    MULTIPROCESSING_LOADER,
    OP,
    PYTHON,
    RUNTIME,
    SYNC_CALLS,
)
from common.reader.model import GpuOp, Launch, Step, Trace, median_index
from common.reader.naming import kernel_family
from common.units import human_bytes, human_time

# Every threshold of the diagnosis, in one place.
IDLE_BOUND = 0.5  # GPU idle this share of the step or more: the step is bound by what keeps the GPU waiting
EXPOSED_COMM_BOUND = 0.2  # communication no compute hides, this share of the step or more: bound by it
NON_COMPUTE_BOUND = 0.3  # memcpy/memset this share of GPU busy or more: bound by copies
SHORT_KERNELS = 0.5  # this share of a step's kernels shorter than their own launch call: the rule fires
GAP_RULE_IDLE = 0.1  # GPU idle this share of the step or more: the longest gaps are listed
GAPS_SHOWN = 3
FIRST_STEP_SLOWER = 3.0  # a first step this many times the median of the others pays for a start-up cost
FAR_FROM_PEAK = 0.3  # a GEMM or attention op under this share of the device's peak is far from it
FAR_SHARE = 0.05  # ... and listed when its kernels take this share of GPU busy or more
OPTIMIZER_IDLE = 0.25  # the optimizer phase holds this share of the GPU idle time: a fused optimizer is the lever
FUSABLE_SHARE = 0.4  # pointwise, reduce and softmax kernels this share of GPU busy: fusing them is the lever
CPU_OP_US = 200.0  # a top-level CPU op this long during a host wait is CPU work (randn, a copy); shorter ones launch
ONE_TIME_FACTOR = 10.0  # a runtime call or op this many times its kind's usual length: a one-time cost
ONE_TIME_US = 1000.0  # ... and at least this long
COMPILED_OPS = ("CompiledFunction", "Torch-Compiled Region")  # ops only torch.compile's code runs
COMPILED_LABELS = ("## Call CompiledFxGraph", "Torch-Compiled Region")  # its labels (a user's "## forward ##" is not)
ONE_TIME_MOST = 3  # a call slow that way more times than this in a trace recurs: not one-time
# the ops that allocate: one ONE_TIME_US or longer, of a name seen fewer than ONE_TIME_MOST times or ONE_TIME_FACTOR
# times its usual length, grew the caching allocator (a cudaMalloc the trace may not record): one-time
ALLOCATIONS = frozenset({"aten::empty", "aten::empty_strided", "aten::empty_like", "aten::new_empty",
                         "aten::new_empty_strided", "aten::resize_"})  # fmt: skip
ONE_TIME = ("compiling", "one-time")  # the causes of a host wait that do not come back in the steady state
ONE_TIME_DOMINATES = 0.5  # one-time costs this share of the profiled windows: the verdict says so first
ONE_TIME_LEFT = 0.9  # ... and where they hold this share of the median window, no steady state is left to bound
ONE_TIME_MOST_LEFT = 0.95  # ... unless the GPU works through most of what is left (busy half of it or more): a
# steady state that ran (a forward's GPU-bound remainder), not the fragments between one-time costs; under this, none
RECURS = 3  # ... or where no kernel of the trace is launched this many times: one cold pass, no steady state
ONE_TIME_LISTED = 0.01  # a one-time cost under this share of them all is counted, not listed
ONE_TIME_SHOWN = 0.02  # one-time costs this share of the profiled windows or more: listed apart
CAPTURE_CALLS = (
    "cudaStreamBeginCapture",
    "cudaStreamEndCapture",
    "cudaGraphInstantiate",
    "hipStreamBeginCapture",
    "hipStreamEndCapture",
    "hipGraphInstantiate",
    "cuGraphInstantiate",
)  # a graph's capture: once
HIDDEN_ALREADY = 0.8  # communication this share hidden behind compute: overlapping it is applied already
CLOSE_SHARE = 0.8  # a second cause of the host wait at this share of the first is named beside it
HOST_ASIDE = 0.2  # a busy GPU that still waits this share of the step for a host cause with its own lever: named
BALANCED_IDLE = 0.3  # GPU idle between this share and IDLE_BOUND: neither side dominates, both levers are named
IDLE_SYNC = 0.5  # a sync with the GPU busy less than this share of it waits for no recorded work: start-up if rare
SCRIPTED = ("fallback_function", "fused__", "prim::TensorExprGroup", "prim::FusionGroup")  # TorchScript's fusion ops
SCRIPTED_SLACK_US = 20.0  # ... and a stretch in no op that ends this close to a scripted function's first call is
# its graph executor's work on it (profiling, optimizing), done before the interpreter opens the function's op
COMPILE_WORDS = ("Compile", "Dynamo", "Inductor", "autotun", "Autotun")  # labels of compiling and autotuning
ALL_TO_ALL = ("sendrecv", "all_to_all", "alltoall", "ep::internode", "ep::intranode")  # kernel names (lower case):
# NCCL's send/recv pairs, all-to-all collectives, DeepEP's expert-parallel dispatch/combine
LOW_PRECISION = ("fp8", "e4m3", "e5m2", "fp4", "e2m1", "_scaled_mm", "scaled_grouped")  # a GEMM kernel's name (lower)
MATH_ATTENTION = "aten::_scaled_dot_product_attention_math"  # SDPA's unfused backend, as the trace names it
SCALAR_READS = ("aten::item", "aten::_local_scalar_dense")  # a tensor's value read on the CPU: a sync on a GPU
# The ops a sync is made in where the user's code asked for a value or a copy (.item(), .cpu(), .to(), .tolist(), an
# `if` on a tensor); a sync inside another ATen op is the op's own (aten::nonzero, a sparse aten::_coalesce)
USER_READS = frozenset({*SCALAR_READS, "aten::to", "aten::_to_copy", "aten::copy_", "aten::cpu", "aten::tolist",
                        "aten::is_nonzero", "aten::equal", "aten::allclose", "aten::print"})  # fmt: skip


@dataclass
class Rule:
    """One rule that fired: what, its evidence (one line each), and what to try."""

    name: str
    evidence: list[str]
    fix: str


@dataclass
class Diagnosis:
    """A trace's verdict, its median budget, and the rules that fired."""

    bound: str  # "CPU", "GPU", "balanced", "copies", "communication", "waits", or "—" where the trace cannot tell
    verdict: str  # one line: the bound, its numbers, its lever
    budgets: list[Budget]
    rules: list[Rule]
    median: Budget | None
    rates: dict = field(default_factory=dict)  # (category, name) -> Efficiency, from record_shapes
    steady: Budget | None = None  # the median step less its one-time costs: what the bound was decided on
    causes: Counter = field(default_factory=Counter)  # the median step's host_wait_causes
    one_time: list[dict[str, float]] = field(default_factory=list)  # per budget: its parts' µs that ran once (one_time)


# ---- the rules ----


DEVICE_WIDE = ("cudaDeviceSynchronize", "hipDeviceSynchronize", "cuCtxSynchronize")  # torch.cuda.synchronize()


def _in_step_syncs(step: Step, last_launch: float | None) -> list[Launch]:
    """The step's synchronising calls, less the loop's own end-of-step synchronize: the device-wide syncs after
    which no GPU work was launched (`last_launch`, the start of the step's last launch call), every one of them,
    so a bare trace's end (the user's torch.cuda.synchronize(), then the profiler's own at its exit) is not one."""
    if not step.syncs:
        return []
    syncs = list(step.syncs)
    while syncs and syncs[-1].name in DEVICE_WIDE and (last_launch is None or syncs[-1].ts > last_launch):
        syncs.pop()
    return syncs


MADE_IN = frozenset({OP})  # what a runtime call is made in: the innermost cpu_op open at it
MADE_IN_LABEL = frozenset({LABEL})  # ... else the innermost record_function label (DDP's forward, say)


def _made_in(trace: Trace, launch: Launch) -> str | None:
    """What the runtime call `launch` was made in: the innermost cpu_op open at its start on its thread, else the
    innermost record_function label open then on its thread (not a step); None where neither is. A query on the
    call tree: an op opened any number of ops before is found through the parent links."""
    tree = trace.tree
    node = tree.innermost(launch.tid, launch.ts, MADE_IN)
    if node is None:
        node = tree.innermost(launch.tid, launch.ts, MADE_IN_LABEL)
        while node is not None and node.role == "step":
            node = node.up
    return node.name if node is not None else None


def _rule_syncs(trace: Trace, scan: _Scan) -> Rule | None:
    """The sync calls inside the steps; and on a GPU trace each `.item()` (aten::_local_scalar_dense: its
    device-to-host copy waits for the GPU) that no recorded sync call was made in, so a read whose wait the trace
    holds no cudaStreamSynchronize for is still one."""
    calls: Counter = Counter()
    inside: Counter = Counter()
    us = 0.0
    read = SCALAR_READS[1]  # what .item() runs; aten::item only calls it
    for step, last_launch in zip(trace.steps, scan.last_launch, strict=True):
        reads_synced = 0
        end = step.start_us + step.dur_us
        for sync in _in_step_syncs(step, last_launch):
            calls[sync.name] += 1
            us += max(0.0, min(sync.ts + sync.dur, end) - max(sync.ts, step.start_us))  # its time in the step alone
            op = _made_in(trace, sync)
            if op is not None and step.start_us <= sync.ts:
                inside[op] += 1
                reads_synced += op in SCALAR_READS
        gpu_reads = sum(
            1 for op in step.memcpy if op.launch and "DtoH" in op.name and _made_in(trace, op.launch) in SCALAR_READS
        )  # an .item() of a CPU tensor (AdamW's step count) copies nothing from the GPU and waits for nothing
        unrecorded = gpu_reads - reads_synced
        if unrecorded > 0:
            calls[f"{read} with no sync call recorded"] += unrecorded
            inside[read] += unrecorded
    if not calls:
        return None
    n = len(trace.steps)
    per, k = _per(calls.values(), n)
    listed = ", ".join(f"{name} {count // k}" for name, count in calls.most_common())
    span = sum(step.dur_us for step in trace.steps)
    share = f" ({us / span:.1%} of the steps' time)" if span > 0 else ""
    evidence = [f"{per}: {listed}, blocking the CPU {human_time(us / k)} in the sync calls{share}"]
    if inside:  # counted apart: which op a sync falls in is the run's timing, one step's can differ from another's
        per_op, k = _per(inside.values(), n)
        ops = ", ".join(f"{name} {count // k}" for name, count in inside.most_common(3))
        reads = " (a tensor's value read on the CPU)" if any(name in SCALAR_READS for name in inside) else ""
        evidence.append(f"made inside{'' if per_op == per else f' ({per_op})'}: {ops}{reads}")
    return Rule(
        "host-device sync inside the step",
        evidence,
        "keep values on the GPU inside the step (no .item(), .cpu(), .tolist(), print or `if` on a tensor); "
        "synchronize once, at the step's end",
    )


@dataclass(slots=True)
class _Scan:
    """What the rules and the verdict read of every GPU op, gathered in one pass over the steps' ops."""

    shares: dict  # family -> GPU time, over all steps
    compiled: bool  # torch.compile ran: a Triton kernel, or its labels (a GEMM-only graph calls cuBLAS alone)
    pageable: list  # memcpy from pageable host memory: (name, calls, µs over all steps) per name
    launched: int  # kernels launched by a call of their own (a CUDA graph's replayed kernels share one: left out)
    short: list  # ... of them, those shorter than their launch call
    last_launch: list  # per step: the last launch call's start (None: no GPU op with a known launch)
    groups: list  # per step with some: External id (a key of Trace.shapes) -> its kernels, for efficiency's _rates


def _scan(trace: Trace) -> _Scan:
    """The families' shares, compiled kernels and pageable copies from the kernel table's per-name figures; one
    pass over the ops for what is per op: launches known, kernels shorter than theirs, each step's last launch and
    the shaped ops' kernels."""
    shares: dict = {}
    pageable = []
    families = set()
    n = len(trace.steps)
    for (category, name), use in trace.kernel_uses().items():
        if category == "kernel":
            family = kernel_family(name)
            families.add(family)
        else:
            family = category.removeprefix("gpu_")
            if category == "gpu_memcpy" and "Pageable" in name:
                pageable.append((name, use.calls * n, use.us * n))
        shares[family] = shares.get(family, 0) + use.us * n
    launched, short, last_launch, groups = 0, [], [], []
    shapes = trace.shapes
    for step in trace.steps:
        last = None
        by_op: dict[object, list[GpuOp]] = {}
        for op in step.gpu:
            launch = op.launch
            kernel = op.category == "kernel"
            if launch is not None:  # a Launch read by index (ts, name, dur), an op at a time: cheaper than by name
                if last is None or launch[1] > last:
                    last = launch[1]
                if kernel and not launch[0].startswith(GRAPH_LAUNCHES):  # a replayed kernel's is its graph's
                    launched += 1
                    if op.us < launch[2]:
                        short.append(op)
            if kernel and shapes and (ext := op.external) in shapes:
                by_op.setdefault(ext, []).append(op)
        last_launch.append(last)
        if by_op:
            groups.append(by_op)
    compiled = "triton" in families or _compile_evidence(trace) is not None
    return _Scan(shares, compiled, pageable, launched, short, last_launch, groups)


def _compile_evidence(trace: Trace) -> str | None:
    """The first name of torch.compile's own code in the trace: a label of it, or AOTAutograd's function around a
    compiled graph or the compiled region (compiled on any backend); None where it has none. Triton kernels alone
    are no evidence of it: a library may run them eagerly."""
    for kind, prefixes in ((LABEL, COMPILED_LABELS), (OP, COMPILED_OPS)):
        for thread in trace.tree.threads.values():
            found = next((name for name in set(thread.layer(kind).names) if name.startswith(prefixes)), None)
            if found is not None:
                return found
    return None


def _rule_pageable(trace: Trace, scan: _Scan) -> Rule | None:
    copies = scan.pageable  # (name, calls, µs) over all steps
    if not copies:
        return None
    n = len(trace.steps)
    kinds = Counter({name: calls for name, calls, _ in copies})
    listed = ", ".join(f"{name} ×{num(count / n)}" for name, count in kinds.most_common())
    us = sum(us for _, _, us in copies) / n
    return Rule(
        "pageable host copies",
        [f"per step: {listed}, {human_time(us)} on the GPU"],
        PIN_LEVER,
    )


def _per(counts: Iterable[int], steps: int) -> tuple[str, int]:
    """How counts over `steps` steps are said: ("per step", steps) where every one divides by the steps, else
    (f"over the {steps} steps", 1), the totals: a count of calls or kernels is whole, never '5.33 per step'."""
    if steps > 1 and any(c % steps for c in counts):
        return f"over the {steps} steps", 1
    return "per step", max(steps, 1)


def _counted(part: int, whole: int, steps: int, what: str) -> str:
    """'35 of 38 kernels per step', or '106 of 114 kernels over the 3 steps' (_per)."""
    per, k = _per((part, whole), steps)
    return f"{part // k} of {whole // k} {what} {per}"


def _rule_short_kernels(trace: Trace, scan: _Scan) -> Rule | None:
    kernels, short = scan.launched, scan.short
    if not kernels or len(short) < SHORT_KERNELS * kernels:
        return None
    n = len(trace.steps)
    median_kernel = statistics.median(op.us for op in short)
    median_launch = statistics.median(op.launch.dur for op in short)
    graphs = trace.per_step(lambda s: s.graph_launches) or 0
    fix = ('fewer, larger launches: CUDA graphs (torch.compile mode="reduce-overhead"), torch.compile to fuse, '
           "or a larger batch")  # fmt: skip
    if graphs:  # graphs are replayed already: the launches left are the ones outside them
        fix = ("fewer, larger launches: capture what still launches kernel by kernel in the CUDA graph too, "
               "torch.compile to fuse, or a larger batch")  # fmt: skip
    return Rule(
        "kernels shorter than their launch",
        [
            f"{_counted(len(short), kernels, n, 'kernels')} run for less time than their launch call takes on the CPU "
            f"(median {human_time(median_kernel)} on the GPU against {human_time(median_launch)} to launch)"
        ],
        fix,
    )


def _cut(text: str, limit: int = 40) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def idle_by_phase(trace: Trace, budgets: list[Budget]) -> Counter:
    """Phase (a label inside the step label: forward, backward, optimizer) -> the GPU idle time while its span
    was open on the CPU, over all steps; the key None holds the idle time outside every phase."""
    idle: Counter = Counter()
    if not trace.phases:
        return idle
    wanted = set(trace.phases)
    spans = sorted((node.start, node.end, node.name) for thread in trace.tree.threads.values()
                   for node in _labels_named(thread, wanted))  # fmt: skip
    starts = [start for start, _, _ in spans]
    for b in budgets:
        for gap in b.gaps:
            mid = (gap.start + gap.end) / 2
            i = bisect.bisect_right(starts, mid) - 1
            idle[spans[i][2] if i >= 0 and mid < spans[i][1] else None] += gap.us
    return idle


def _labels_named(thread: Thread, names: set[str]) -> list[Node]:
    """The record_function labels of `thread` whose name is one of `names`."""
    labels = thread.layer(LABEL)
    return [Node(thread, labels, i) for i, name in enumerate(labels.names) if name in names]


def top_level_ops(trace: Trace, start: float, end: float) -> list[tuple[float, float, str]]:
    """The cpu_ops that overlap [start, end] and sit inside no other op (CallTree.top_level, on every thread), less
    any that starts inside one taken before it on another thread: (start, end, name)."""
    top, last_end = [], -math.inf
    for node in trace.tree.top_level(start, end, OP):
        if node.start >= last_end:
            top.append((node.start, node.end, node.name))
            last_end = node.end
    return top


class _Claims:
    """A gap's time not yet given a cause, as disjoint (start, end) pieces: each cause takes what its spans cover of
    what is left, so every microsecond of the gap falls in exactly one cause."""

    def __init__(self, start: float, end: float) -> None:
        self.free = [(start, end)] if end > start else []
        self.pieces: list[tuple[float, float]] = []  # what the last take took

    def take(self, start: float, end: float) -> float:
        """Take [start, end] out of what is left; how long that was (µs)."""
        taken, left, self.pieces = 0.0, [], []
        for a, b in self.free:
            lo, hi = max(a, start), min(b, end)
            if lo >= hi:
                left.append((a, b))
                continue
            taken += hi - lo
            self.pieces.append((lo, hi))
            left += [piece for piece in ((a, lo), (hi, b)) if piece[1] > piece[0]]
        self.free = left
        return taken

    @property
    def left(self) -> float:
        return sum(b - a for a, b in self.free)


class _Usual:
    """The usual length of a runtime call of each kind of time (launch, sync, other runtime call) and of each op
    name over the whole trace (medians), for telling a one-time cost: ONE_TIME_FACTOR times its usual length."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.kinds: dict[str, float] = {}
        self.names: dict[tuple[str, str], float] = {}
        self.ops: dict[str, float] = {}
        self.counts: dict[str, int] = {}

    def of_kind(self, role: str) -> float:
        if role not in self.kinds:
            by_name: dict[str, list[float]] = {}
            for node in self.trace.tree.of_role(role):
                by_name.setdefault(node.name, []).append(node.us)
            lengths = [us for each in by_name.values() for us in each]
            kind = self.kinds[role] = statistics.median(lengths) if lengths else 0.0
            steps = len(self.trace.steps) > 1
            for name, us in by_name.items():
                if len(us) >= 3:
                    usual = statistics.median(us)
                    slow = sum(1 for x in us if self.once(x, usual))
                    # slow often: a recurring cost (an allocator freeing every step), never one-time; else in one
                    # window (no steps to recur in) each slow call of the name is one-time against its kind's usual
                    self.names[role, name] = math.inf if slow > ONE_TIME_MOST else usual if steps else kind
        return self.kinds[role]

    def of_call(self, role: str, name: str) -> float:
        """A runtime call's usual length: its own name's median where it is called three times or more (a call
        made every step is not one-time, however long), else its kind's."""
        kind = self.of_kind(role)
        return self.names.get((role, name), kind)

    def of_op(self, name: str) -> float:
        if name not in self.ops:
            lengths = [node.us for node in self.trace.tree.named(name, OP)]
            self.ops[name] = statistics.median(lengths) if lengths else 0.0
            self.counts[name] = len(lengths)
        return self.ops[name]

    def seen(self, name: str) -> int:
        """How many times an op of this name ran in the trace."""
        self.of_op(name)
        return self.counts[name]

    @staticmethod
    def once(us: float, usual: float) -> bool:
        return us >= ONE_TIME_US and us >= ONE_TIME_FACTOR * usual


def _captures(trace: Trace) -> list[tuple[float, float]]:
    """The spans of CUDA (HIP) graph capture, from each cudaStreamBeginCapture to the next cudaStreamEndCapture on
    its thread: what runs then is recorded into a graph, once."""
    spans = []
    for thread in trace.tree.threads.values():
        calls = []
        for kind in (RUNTIME, DRIVER):
            layer = thread.layer(kind)
            marks = CAPTURE_BEGIN + CAPTURE_END
            if not any(name.startswith(marks) for name in set(layer.names)):  # most often: once per distinct name
                continue
            calls += [(layer.starts[i], layer.ends[i], name.startswith(CAPTURE_BEGIN))
                      for i, name in enumerate(layer.names) if name.startswith(marks)]  # fmt: skip
        begin = None
        for start, end, begins in sorted(calls):
            if begins:
                begin = start if begin is None else begin
            elif begin is not None:
                spans.append((begin, end))
                begin = None
    return spans


class HeldBy(NamedTuple):
    """What the CPU ran while the GPU waited for it in one gap: the node whose cause took the most of the gap (a
    label, an op, a call) and its thread."""

    name: str
    start: float
    end: float
    thread: object = None


class GapContext:
    """What every gap of a trace is read against, each found once and only where a gap asks for it: the launches'
    starts (sorted), the usual lengths, the CUDA graph captures, the optimizer phases."""

    def __init__(self, trace: Trace) -> None:
        self.trace = trace
        self.usual = _Usual(trace)
        self.optimizer_phases = {name for name in trace.phases if "optim" in name.lower()}

    @functools.cached_property
    def launched(self) -> list[float]:
        return sorted(op.launch.ts for step in self.trace.steps for op in step.gpu if op.launch is not None)

    @functools.cached_property
    def captures(self) -> list[tuple[float, float]]:
        return _captures(self.trace)

    @functools.cached_property
    def first_gpu(self) -> GpuOp | None:
        """The trace's first GPU op: a wait of the GPU's own before it, with its work queued, is a cold start. The
        first of its timeline, which holds the trace's timed GPU ops in start order (the first given of those that
        start together)."""
        ops = self.trace.timeline.ops if self.trace.gpu else []
        return ops[0] if ops else None

    @functools.cached_property
    def usual_pause(self) -> float | None:
        """In a trace of one window (no ProfilerStep, no iterations), the median time between one top-level op and the
        next on the thread that runs the most ops, where no more than ONE_TIME_MOST of those pauses that end after
        the window's first launch are ONE_TIME_FACTOR times it (before it, every pause is set-up's): a pause that long
        before nearly all the window's launches (SET_UP_BEFORE), or the window's only pause that long before most of
        them (lone_pause, SET_UP_MOST), is set-up run once (a model built, data loaded), not the Python of a loop;
        None otherwise."""
        return self._pauses[0]

    @functools.cached_property
    def lone_pause(self) -> bool:
        """Whether the window has one pause ONE_TIME_FACTOR times usual_pause, and no other: a single stretch of
        Python in a pass whose ops otherwise follow each other closely (no loop's rhythm of long pauses)."""
        return self._pauses[1] == 1

    @functools.cached_property
    def _pauses(self) -> tuple[float | None, int]:
        """(usual_pause, how many pauses of the window are ONE_TIME_FACTOR times it); (None, 0) where it has none."""
        if len(self.trace.steps) != 1 or not self.trace.whole_trace:  # a profiled step is the loop's, warmed up
            return None, 0
        thread = max(self.trace.tree.threads.values(), key=lambda t: len(t.layer(OP)), default=None)
        if thread is None or len(thread.layer(OP)) < 3:
            return None, 0
        starts, ends, _ = thread.layer(OP).tops()
        pauses = [(a, b) for a, b in zip(ends, starts[1:], strict=False) if b > a]
        if not pauses:
            return None, 0
        usual = statistics.median(b - a for a, b in pauses)
        first = self.launched[0] if self.launched else math.inf  # before any launch, every pause is set-up's
        slow = sum(1 for a, b in pauses if b > first and _Usual.once(b - a, usual))
        if slow > ONE_TIME_MOST:
            return None, 0
        return usual, sum(1 for a, b in pauses if _Usual.once(b - a, usual))

    @functools.cached_property
    def has_ops(self) -> bool:
        """Whether the trace records the CPU side (an op, a label, a Python frame): a trace of runtime calls alone
        (ProfilerActivity.CPU off) does not say that the time in no recorded op is Python."""
        threads = self.trace.tree.threads.values()
        return any(len(thread.layer(kind)) for thread in threads for kind in (OP, LABEL, PYTHON))

    @functools.cached_property
    def busy(self) -> tuple[list[float], list[float]]:
        """The GPU's busy time as the disjoint (starts, ends) of the union of its ops, in time order: the timeline's
        union (built once for the trace), on the trace's clock."""
        if not self.trace.gpu:
            return [], []
        timeline = self.trace.timeline
        origin, union = timeline.origin, timeline.union
        return [origin + start for start in union.starts], [origin + end for end in union.ends]

    def busy_in(self, start: float, end: float) -> float:
        """How long the GPU was busy (any op) in [start, end]."""
        starts, ends = self.busy
        us = 0.0
        for i in range(bisect.bisect_right(ends, start), len(starts)):
            if starts[i] >= end:
                break
            us += min(ends[i], end) - max(starts[i], start)
        return us

    @functools.cached_property
    def slow_ops(self) -> list[tuple[float, float, str, object]]:
        """The pieces of the ops whose own time ran once (cpu_bound.slow_calls: a first cuBLAS call initialising the
        library, ten times its name's usual own time): each such op's span less the ops it called, as (start, end,
        name, thread), in start order; in one window, the first uses too (first_uses)."""
        spans = {(start, name) for _, name, start, *_ in slow_calls(self.trace, (OP,))} | self.first_uses
        found = []
        for thread in self.trace.tree.threads.values():
            layer = thread.layer(OP)
            starts, ends, names, parents = layer.starts, layer.ends, layer.names, layer.parents
            for a, name in spans:
                i = bisect.bisect_left(starts, a)
                while i < len(layer) and starts[i] == a and names[i] != name:
                    i += 1
                if i >= len(layer) or starts[i] != a:
                    continue
                at, j = a, i + 1
                while j < len(layer) and starts[j] < ends[i]:
                    if parents[j] == i:  # a child: its time is its own
                        if starts[j] > at:
                            found.append((at, starts[j], name, thread.tid))
                        at = max(at, ends[j])
                    j += 1
                if ends[i] > at:
                    found.append((at, ends[i], name, thread.tid))
        return sorted(found, key=lambda item: item[:2])

    @functools.cached_property
    def first_uses(self) -> set[tuple[float, str]]:
        """(start, name) of each op of a window without steps (a cold pass, no loop to recur in) called fewer than
        ONE_TIME_MOST times that launched GPU work and whose own time (less the ops it called) is ONE_TIME_US or
        more and ONE_TIME_FACTOR times the usual own time of an op (the median over the trace): a library's first use
        (cuDNN initialising inside the only aten::cudnn_convolution), which no later call shows, since none comes.
        Ops that may wait for the GPU or a peer (a copy, a scalar read, a collective) are left out, and so are
        torch.compile's regions where compiled code runs RECURS times or more in the window (a loop over it): a
        region called once there is the loop's prefix, whose own time (its graph's Python and launches) every call
        pays; where the compiled code runs once or twice, its call may hold its first call's set-up."""
        if len(self.trace.steps) != 1 or not self.trace.whole_trace or not self.launched:
            return set()
        layers = [thread.layer(OP) for thread in self.trace.tree.threads.values() if len(thread.layer(OP))]
        owns = [layer.self_times() for layer in layers]
        usual = statistics.median(us for own in owns for us in own) if owns else 0.0
        calls = Counter(name for layer in layers for name in layer.names)
        runs = self.launched
        regions = Counter(prefix for name in calls for prefix in COMPILED_OPS if name.startswith(prefix)
                          for _ in range(calls[name]))  # fmt: skip
        recurs = max(regions.values(), default=0) >= RECURS  # compiled code called in a loop: not one cold pass
        found = set()
        for layer, own in zip(layers, owns, strict=True):
            for i, name in enumerate(layer.names):
                if (
                    own[i] >= ONE_TIME_US
                    and _Usual.once(own[i], usual)
                    and calls[name] < ONE_TIME_MOST
                    and not name.startswith(WAITING_OPS)
                    and not (recurs and name.startswith(COMPILED_OPS))
                    and bisect.bisect_left(runs, layer.starts[i]) < bisect.bisect_right(runs, layer.ends[i])
                ):
                    found.add((layer.starts[i], name))
        return found

    @functools.cached_property
    def repeat_launch(self) -> float:
        """The usual length of a launch call that is not a kernel's first (first_launches: those load a module):
        what a first launch is measured against; 0 where every launch is a first one (each that takes ONE_TIME_US
        or more then loads its module)."""
        first = self.first_launches
        lengths = [node.us for node in self.trace.tree.of_role("launch") if (node.tid, node.start) not in first]
        return statistics.median(lengths) if lengths else 0.0

    @functools.cached_property
    def first_loads(self) -> set[tuple[object, float]]:
        """(thread, start) of each DataLoader iterator's first __next__ where it is one-time: ONE_TIME_US or more and
        ONE_TIME_FACTOR times the median of its later calls, or, with workers (_MultiProcessingDataLoaderIter), its
        only call (the workers' start-up and the first batch)."""
        calls: dict[str, list[Node]] = {}
        for node in self.trace.tree.of_role("DataLoader"):
            calls.setdefault(node.name, []).append(node)
        found = set()
        for name, nodes in calls.items():
            first, rest = nodes[0], nodes[1:]
            if first.us < ONE_TIME_US:
                continue
            if (rest and first.us >= ONE_TIME_FACTOR * statistics.median(n.us for n in rest)) or (
                not rest and MULTIPROCESSING_LOADER in name
            ):
                found.add((first.tid, first.start))
        return found

    @functools.cached_property
    def idle_syncs(self) -> set[tuple[object, float]]:
        """(thread, start) of the syncs of ONE_TIME_US or more, made in no op (a bare torch.cuda.synchronize(), not
        an .item() or a library op's), during which the GPU was busy less than IDLE_SYNC of the time: they wait for
        no recorded GPU work (the context's or a library's start-up), one-time where the trace holds ONE_TIME_MOST
        of them or fewer (more: the steady state's, a wait on work the trace misses)."""
        found = {(node.tid, node.start) for node in self.trace.tree.of_role("sync")
                 if node.us >= ONE_TIME_US and self.busy_in(node.start, node.end) < IDLE_SYNC * node.us
                 and self.trace.tree.innermost(node.tid, node.start, MADE_IN) is None}  # fmt: skip
        return found if len(found) <= ONE_TIME_MOST else set()

    @functools.cached_property
    def sync_shadows(self) -> tuple[list[tuple[float, float, Node]], float]:
        """The host-wait time each sync inside the steps made (an .item(), a copy to the host: not a device-wide
        torch.cuda.synchronize(), the loop's own): where the GPU ran out of work while the host sat in the sync,
        the host would, without it, have been the sync's length further on then, so the GPU's next wait for the
        host, up to that long, is the sync's (a sync on a thread that launches GPU work: a side thread's holds up
        no launch). (drained, drained + the sync's µs, the sync) each, sorted; and the
        longest such span (µs)."""
        starts, ends = self.busy
        launching = {op.launch.tid for op in self.trace.gpu if op.launch is not None}  # a side thread's sync holds
        found = []  # up no launch
        for node in self.trace.tree.of_role("sync"):
            if node.name in DEVICE_WIDE or node.tid not in launching:
                continue
            i = bisect.bisect_right(ends, node.end) - 1  # the last stretch of GPU work ended by the sync's end
            if i < 0 or ends[i] <= node.start or (i + 1 < len(starts) and starts[i + 1] < node.end):
                continue  # the GPU idle all along the sync, or not drained before it returned
            found.append((ends[i], ends[i] + node.us, node))
        found.sort(key=lambda item: item[:2])
        return found, max((end - start for start, end, _ in found), default=0.0)

    @functools.cached_property
    def scripted_functions(self) -> list[tuple[object, Layer, list[int]]]:
        """The scripted functions' calls: per thread whose ops include TorchScript's (SCRIPTED: fallback_function, a
        fusion group), its thread id, its op layer and the indices of the ops around them (past nested SCRIPTED
        ones), in index order."""
        found = []
        for thread in self.trace.tree.threads.values():
            layer = thread.layer(OP)
            names = layer.names
            if not any(name.startswith(SCRIPTED) for name in set(names)):
                continue
            parents, scripted = layer.parents, set()
            for i, name in enumerate(names):
                if name.startswith(SCRIPTED):
                    p = parents[i]
                    while p >= 0 and names[p].startswith(SCRIPTED):
                        p = parents[p]
                    if p >= 0:
                        scripted.add(p)
            found.append((thread.tid, layer, sorted(scripted)))
        return found

    @functools.cached_property
    def scripted_first(self) -> list[tuple[float, float, str, object]]:
        """TorchScript's first calls: a scripted function (scripted_functions) whose own time is ONE_TIME_US or more
        on a call where the profiling executor profiles and fuses its graph (its name called twice or less, or
        ONE_TIME_FACTOR times its usual own time): compiling, once. (start, end, name, thread) each."""
        found = []
        for tid, layer, scripted in self.scripted_functions:
            names, own = layer.names, layer.self_times()
            wanted = {names[p] for p in scripted}
            calls: dict[str, list[float]] = {}
            for i, name in enumerate(names):
                if name in wanted:
                    calls.setdefault(name, []).append(own[i])
            for p in scripted:
                each = calls[names[p]]
                if own[p] >= ONE_TIME_US and (len(each) <= 2 or own[p] >= ONE_TIME_FACTOR * statistics.median(each)):
                    found.append((layer.starts[p], layer.ends[p], names[p], tid))
        return found

    @functools.cached_property
    def scripted_calls(self) -> list[tuple[float, str]]:
        """Each scripted function's first call (scripted_functions), as (start, name), in start order: the graph
        executor optimizes a function on its first calls before the interpreter opens the function's op, so that
        time lies in no op just before it."""
        first: dict[str, float] = {}
        for _, layer, scripted in self.scripted_functions:
            for p in scripted:
                name, start = layer.names[p], layer.starts[p]
                if start < first.get(name, math.inf):
                    first[name] = start
        return sorted((start, name) for name, start in first.items())

    @functools.cached_property
    def launch_stalls(self) -> list[tuple[float, float]]:
        """The (start, end) of each kernel's first launch call (first_launches) that stalled the host: ONE_TIME_US or
        more and ONE_TIME_FACTOR times the usual launch that is not a first one (repeat_launch), the test gap_causes
        makes of a first launch. A module loaded lazily is a stall every rank of the same code makes, so a collective
        that runs inside it waits for peers stalled the same way."""
        first = self.first_launches
        if not first:
            return []
        usual = self.repeat_launch
        return [
            (node.start, node.end)
            for node in self.trace.tree.of_role("launch")
            if (node.tid, node.start) in first and node.us >= ONE_TIME_US and _Usual.once(node.us, usual)
        ]

    @functools.cached_property
    def copy_waits(self) -> dict[tuple[object, float], float]:
        """(thread, start) of each copy call whose copy began on the GPU only well into the call -> when it began:
        a copy from pageable host memory waits for the stream's queued work before its copy can run, so the call's
        time until then is a wait (a sync), not the copy's launch."""
        found = {}
        for op in self.trace.gpu:
            launch = op.launch
            began = op.start
            if (
                op.category == "gpu_memcpy"
                and launch is not None
                and began is not None
                and (launch.ts + launch.dur / 2 <= began < launch.end)
            ):
                found[launch.tid, launch.ts] = began
        return found

    @functools.cached_property
    def first_launches(self) -> set[tuple[object, float]]:
        """(thread, start) of the launch call of each kernel's first launch in the trace: the launch that loads
        its module (lazy loading), a one-time cost however often the kernels launch later."""
        first: dict[str, Launch] = {}
        for op in self.trace.gpu:
            launch = op.launch
            if op.category == "kernel" and launch is not None and not launch.name.startswith(GRAPH_LAUNCHES):
                known = first.get(op.name)
                if known is None or launch.ts < known.ts:
                    first[op.name] = launch
        return {(launch.tid, launch.ts) for launch in first.values()}


def _overlapping(spans: list[tuple[float, float, str]], start: float, end: float) -> list[tuple[float, float, str]]:
    """Those of `spans` ((start, end, name) in start order, few: Kineto's overhead events) overlapping [start, end]."""
    return [span for span in spans[: bisect.bisect_left(spans, (end,))] if span[1] > start]


def gap_context(trace: Trace) -> GapContext:
    return GapContext(trace)


def host_wait_causes(
    trace: Trace, budgets: list[Budget], shortest: float = 0.0, context: GapContext | None = None
) -> Counter:
    """Where the host-wait idle went, µs over `budgets`, by what the CPU did during each such gap, from the call
    tree. Each microsecond falls in exactly one cause, taken in this order: ("compiling", label) for Dynamo,
    Inductor, autotuning or graph capture; ("one-time", name) for a runtime call or an op ONE_TIME_FACTOR times its
    kind's usual length (a first launch that loads a module, a library's initialisation) or a CUDA graph's
    capture; ("data loading", label), ("the optimizer", label); ("a sync", the op it was made in) for a call that
    blocks until the GPU catches up (a wait, not work); ("runtime call", name) for another runtime call of CPU_OP_US
    or more (an allocator's cudaFree); ("CPU op", name) for a top-level op of CPU_OP_US or more that launched
    nothing meanwhile; ("launches", "") for the short ops that launch the GPU's work one by one; ("no recorded op",
    "") for time in none (Python between ops). Gaps of `shortest` µs or less are left out."""
    causes: Counter = Counter()
    context = context or gap_context(trace)
    for b in budgets:
        for gap in b.gaps:
            if gap.kind == "host" and gap.us > max(shortest, 0.0):
                causes.update(gap_causes(trace, gap, context)[0])
    return +causes


def gap_causes(
    trace: Trace, gap: Gap, context: GapContext | None = None, once: list | None = None, work: list | None = None
) -> tuple[Counter, HeldBy | None]:
    """Where one host-wait gap's µs went (host_wait_causes' keys and order), and what held it: the node whose cause
    took the most of the gap (None: no recorded op, or not a host wait). `once`, where given, gets the (start, end)
    pieces of the gap its one-time causes took; `work` the pieces of the host's recorded work (RECURRING)."""
    causes: Counter = Counter()
    if gap.kind != "host" or gap.us <= 0:
        return causes, None
    context = context or gap_context(trace)
    usual, optimizer_phases = context.usual, context.optimizer_phases
    tree = trace.tree
    held: list = [None, 0.0]

    def claim(key: tuple[str, str], start: float, end: float, name: str, thread: object = None) -> None:
        us = claims.take(start, end)
        causes[key] += us
        if once is not None and key[0] in ONE_TIME:
            once.extend(claims.pieces)
        if work is not None and key[0] in RECURRING:
            work.extend(claims.pieces)
        if us > held[1]:
            held[:] = [HeldBy(name, start, end, thread), us]

    claims = _Claims(gap.start, gap.end)
    for start, end, name in _overlapping(trace.profiler_overhead, gap.start, gap.end):  # not the program's time
        claim(("one-time", f"the profiler's own overhead (CUPTI's {name})"), start, end, name)
    for node in tree.overlapping(gap.start, gap.end, "compiling"):
        claim(("compiling", _cut(node.name, 60)), node.start, node.end, node.name, node.tid)
    long_gap = gap.us >= ONE_TIME_US  # what runs once takes a millisecond or more: a shorter gap asks nothing of it
    for start, end, name, tid in context.scripted_first if long_gap else ():
        if start < gap.end and end > gap.start:
            claim(("compiling", f"TorchScript's first call of {_cut(name)}"), start, end, name, tid)
    for start, end in context.captures:
        if start < gap.end and end > gap.start:
            claim(("one-time", "CUDA graph capture"), start, end, "CUDA graph capture")
    for role in ("launch", "runtime call"):  # a sync is a wait, never a one-time cost
        for node in tree.overlapping(gap.start, gap.end, role):
            long = node.us >= ONE_TIME_US  # the usual lengths are only looked up for a long one
            began = context.copy_waits.get((node.tid, node.start)) if long else None
            if began is not None:  # a pageable copy waiting for the GPU's queued work: a sync until its copy ran
                claim(("a sync", PAGEABLE_WAIT), node.start, began, node.name, node.tid)
                continue
            # a kernel's first launch loads its module: against its kind's usual length, however many first
            # launches are slow (a cold start loads many)
            first = long and role == "launch" and (node.tid, node.start) in context.first_launches
            usual_us = (context.repeat_launch if first else usual.of_call(role, node.name)) if long else 0.0
            if long and node.name.startswith(GRAPH_LAUNCHES) and (role, node.name) not in usual.names:
                usual_us = math.inf  # its length is its graph's size: one-time only against its own kind's calls
            if node.name.startswith(CAPTURE_CALLS) or (long and usual.once(node.us, usual_us)):
                claim(("one-time", node.name), node.start, node.end, node.name, node.tid)
    waits = tree.overlapping(gap.start, gap.end, "sync")

    def waited(node: Node) -> float:
        return sum(min(w.end, node.end) - max(w.start, node.start) for w in waits
                   if w.tid == node.tid and w.start < node.end and w.end > node.start)  # fmt: skip

    def launched(start: float, end: float) -> bool:
        return bisect.bisect_left(context.launched, start) < bisect.bisect_right(context.launched, end)

    tops, quiet = tree.top_level(gap.start, gap.end, OP), []
    for node in tops:
        if node.us >= ONE_TIME_US and waited(node) < node.us / 2 and usual.once(node.us, usual.of_op(node.name)):
            claim(("one-time", f"first {node.name}"), node.start, node.end, node.name, node.tid)
        if node.us >= CPU_OP_US and launched(node.start, node.end):  # a wrapper: what inside it launched nothing
            quiet += _quiet_parts(tree, node, launched)
    for node in quiet:  # an allocation that grew the caching allocator (cudaMalloc), a first call inside a wrapper
        if node.us < ONE_TIME_US or waited(node) >= node.us / 2:
            continue
        rare = usual.seen(node.name) < ONE_TIME_MOST
        if node.name in ALLOCATIONS and (rare or usual.once(node.us, usual.of_op(node.name))):
            claim(("one-time", f"allocator growth ({node.name})"), node.start, node.end, node.name, node.tid)
        elif usual.once(node.us, usual.of_op(node.name)):
            claim(("one-time", f"first {node.name}"), node.start, node.end, node.name, node.tid)
    for start, end, name, tid in context.slow_ops if long_gap else ():  # own time ten times its usual: set-up
        if start < gap.end and end > gap.start:
            node = tree.innermost(tid, start + (end - start) / 2, MADE_IN)
            if node is None or waited(node) < (end - start) / 2:
                claim(("one-time", f"first {name}"), start, end, name, tid)
    for role in ("DataLoader", "optimizer", "label"):
        for node in tree.overlapping(gap.start, gap.end, role):
            if role == "DataLoader" and (node.tid, node.start) in context.first_loads:
                what = "the DataLoader's first batch" + (" (its workers started)" if MULTIPROCESSING_LOADER in node.name
                                                         else "")  # fmt: skip
                claim(("one-time", what), node.start, node.end, node.name, node.tid)
            if role != "label" or node.name in optimizer_phases:
                cause = "data loading" if node.name.startswith(DATALOADER) else "the optimizer"
                claim((cause, _cut(node.name, 60)), node.start, node.end, node.name, node.tid)
    for node in tree.overlapping(gap.start, gap.end, "sync"):
        if node.us >= ONE_TIME_US and (node.tid, node.start) in context.idle_syncs:  # start-up, no GPU work
            what = f"{node.name} with the GPU mostly idle (start-up)"
            claim(("one-time", what), node.start, node.end, node.name, node.tid)
            continue
        made = _made_in(trace, Launch(node.name, node.start, node.us, None, node.tid)) or node.name
        claim(("a sync", made), node.start, node.end, node.name, node.tid)
    shadows, longest = context.sync_shadows
    for i in range(bisect.bisect_left(shadows, (gap.start - longest,)), bisect.bisect_left(shadows, (gap.end,))):
        start, end, node = shadows[i]
        if end > gap.start:
            made = _made_in(trace, Launch(node.name, node.start, node.us, None, node.tid)) or node.name
            claim(("a sync", made), start, end, node.name, node.tid)
    for node in tree.overlapping(gap.start, gap.end, "runtime call"):
        if node.us >= CPU_OP_US:
            claim(("runtime call", node.name), node.start, node.end, node.name, node.tid)
    for node in quiet:  # CPU work inside a wrapper, not its launches
        claim(("CPU op", node.name), node.start, node.end, node.name, node.tid)
    for op_start, op_end, name in top_level_ops(trace, gap.start, gap.end):
        long = op_end - op_start >= CPU_OP_US
        if long and launched(op_start, op_end):
            long = False  # it launched GPU work meanwhile: a wrapper (aten::linear, a compiled region)
        claim(("CPU op", name) if long else ("launches", ""), op_start, op_end, name)
    for node in tree.overlapping(gap.start, gap.end, "launch"):  # a launch no op was recorded around
        claim(("launches", ""), node.start, node.end, node.name, node.tid)
    scripted = context.scripted_calls  # time in no op right before a scripted function's first call: its compile
    for a, b in list(claims.free) if long_gap and scripted else ():
        i = bisect.bisect_left(scripted, (b,))
        if i < len(scripted) and scripted[i][0] - b <= SCRIPTED_SLACK_US and b - a >= ONE_TIME_US:
            claim(("compiling", f"TorchScript's first call of {_cut(scripted[i][1])}"), a, b, scripted[i][1])
    pause = context.usual_pause  # one window's single long stretch of Python before its work: set-up, once
    if pause is not None:
        runs = context.launched
        for a, b in list(claims.free):
            later = len(runs) - bisect.bisect_left(runs, b)  # the launches made after it
            share = SET_UP_MOST if context.lone_pause else SET_UP_BEFORE
            if usual.once(b - a, pause) and later >= share * len(runs):
                claim(("one-time", LONG_PAUSE), a, b, LONG_PAUSE)
    if claims.left > 0:
        where = _python_at(tree, claims.free) if context.has_ops else NO_CPU_OPS
        causes["no recorded op", where] += claims.left
    return causes, held[0]


RECURRING = ("data loading", "the optimizer", "runtime call", "CPU op", "launches")  # the host's recorded work in a
# step: not one-time, not a sync (a wait), not time in no recorded op (a host idle while a peer is late reads so too)


def host_work(
    trace: Trace, spans: list[tuple[float, float]], number: int, context: GapContext
) -> tuple[Counter, list[tuple[float, float]]]:
    """The host's own recorded work (RECURRING causes) in `spans`, times the GPU waited on a one-time cost of its
    own (a cold GPU's first op queued, a collective waiting for its peers): (cause, what) -> µs, and its (start, end)
    pieces. Warmed up, that wait is gone but the host's work is not: the GPU waits for it then, so the steady
    state keeps it as host wait (a step's Python that ran while its first collective sat queued)."""
    found: Counter = Counter()
    pieces: list[tuple[float, float]] = []
    for a, b in spans:
        got: list[tuple[float, float]] = []
        causes = gap_causes(trace, Gap(a, b, "host", number, None), context, work=got)[0]
        found.update({key: us for key, us in causes.items() if key[0] in RECURRING})
        pieces += got
    return found, sorted(pieces)


PYTHON_ONLY = frozenset({PYTHON})
NO_CPU_OPS = "the trace records no CPU op"  # what a gap's unclaimed time is in a trace of runtime calls alone
LIBRARY_FRAMES = ("torch/", "<built-in", "<frozen", "<string>", "threading.py", "contextlib.py")
# Python frames of data preparation (image and audio processors, tokenizers, transforms, decoding, numpy and PIL
# arrays): time in them is the input's, which DataLoader workers or the GPU take off the step; CUDA graphs do not
DATA_PREP_FRAMES = re.compile(
    r"image_processing|image_transforms|feature_extraction|tokenization|processing_utils|torchvision/transforms|"
    r"torchvision/io|^PIL/|/PIL/|albumentations|^cv2|decord|^av/|of numpy\.ndarray|^numpy/|/numpy/|^datasets/"
)
DATA_PREP = "preparing the input: "  # where the Python was data preparation (DATA_PREP_FRAMES): the frame follows


def _python_at(tree: CallTree, pieces: list[tuple[float, float]]) -> str:
    """Where the Python ran in `pieces` (a gap's time in no recorded op), where the trace has with_stack's
    python_function events: the innermost frame of the reader's own code (not torch's, not a built-in, not a
    site-package) open at each piece's middle, the one holding the longest of them; "" without such events."""
    threads = [tid for tid, thread in tree.threads.items() if len(thread.layer(PYTHON))]
    if not threads:
        return ""
    held: Counter = Counter()
    for a, b in pieces:
        for tid in threads:
            node = tree.innermost(tid, (a + b) / 2, PYTHON_ONLY)
            if node is None:
                continue
            prep = node  # a frame of data preparation on the stack: its own lever (none of CUDA graphs' reach)
            while prep is not None and not DATA_PREP_FRAMES.search(prep.name):
                prep = prep.up
            if prep is not None:
                held[DATA_PREP + prep.name] += b - a
                break
            frame = node
            while frame is not None and (frame.name.startswith(LIBRARY_FRAMES) or "site-packages" in frame.name):
                frame = frame.up
            held[(frame or node).name] += b - a
            break
    return held.most_common(1)[0][0] if held else ""


def _quiet_parts(tree: CallTree, node: Node, launched: Callable[[float, float], bool]) -> list[Node]:
    """The ops inside `node` (an op that launched GPU work) of CPU_OP_US or more that launched nothing, none inside
    another: the CPU work a wrapper did between its launches (an allocation, a host-side op)."""
    parts, covered = [], -math.inf
    for inner in tree.starting(node.start, node.end, OP):
        if inner.tid != node.tid or inner.end > node.end or (inner.layer is node.layer and inner.index == node.index):
            continue
        if inner.start >= covered and inner.us >= CPU_OP_US and not launched(inner.start, inner.end):
            parts.append(inner)
            covered = inner.end
    return parts


def _applied(trace: Trace) -> dict[str, str]:
    """The levers the trace shows applied already, each with its evidence: "workers" (the DataLoader's iterator is
    _MultiProcessingDataLoaderIter), "fused optimizer" (a Fused* optimizer, or fused optimizer ops/kernels),
    "foreach optimizer", "CUDA graphs" (graph launches in the steps), "torch.compile" (its ops or labels). Compiled
    code of any kind, Triton kernels included, is the scan's (_Scan.compiled)."""
    found: dict[str, str] = {}
    labels = {node.name for node in trace.tree.of_role("DataLoader")} | {
        node.name for node in trace.tree.of_role("optimizer")
    }
    loaders = [name for name in labels if name.startswith(DATALOADER)]
    if any(MULTIPROCESSING_LOADER in name for name in loaders):
        found["workers"] = MULTIPROCESSING_LOADER
    steps_ops = Counter()
    for step in trace.steps:
        steps_ops.update(step.cpu_ops)
    kernels = {op.name for step in trace.steps for op in step.gpu if op.category == "kernel"}
    fused = next((name for name in labels if "Fused" in name and not name.startswith(DATALOADER)), None)
    fused = fused or next((name for name in steps_ops if name.startswith("aten::_fused_")), None)
    fused = fused or next((name for name in kernels if "multi_tensor_apply" in name and "adam" in name.lower()), None)
    if fused:
        found["fused optimizer"] = fused
    elif any(name.startswith("aten::_foreach_") for name in steps_ops):
        found["foreach optimizer"] = "aten::_foreach_* ops"
    graphs = trace.per_step(lambda s: s.graph_launches) or 0
    if graphs:
        found["CUDA graphs"] = f"{num(graphs)} graph launch{'' if graphs == 1 else 'es'} per step"
    compiled = _compile_evidence(trace)
    if compiled is not None:
        found["torch.compile"] = compiled
    return found


def _host_lever(cause: str, what: str, trace: Trace, phase: str | None, compiled: bool) -> str:
    """The lever for a cause of the host wait, from the table of levers and what the trace shows applied: an
    applied lever is never offered again; the next one is, saying what is on already."""
    applied = _applied(trace)
    if cause == "data loading":
        return loader_lever(MULTIPROCESSING_LOADER if "workers" in applied else what)
    if cause == "the optimizer":
        if "fused optimizer" in applied:
            return (f"the optimizer is fused already ({_cut(applied['fused optimizer'])}): capture its step in the "
                    "CUDA graph, or step it less often (gradient accumulation)")  # fmt: skip
        if "CUDA graphs" in applied:
            return "capture the optimizer step in the CUDA graph too, or a fused optimizer (AdamW(..., fused=True))"
        return "a fused optimizer (AdamW(..., fused=True)), or capture the optimizer step in the CUDA graph too"
    if cause == "a sync" and what == PAGEABLE_WAIT:
        return PIN_LEVER
    if cause == "a sync" and what.startswith("aten::") and what not in USER_READS:
        return (f"calling {_cut(what)} less often, or once before the loop: the op syncs inside itself (it reads a "
                "result on the host, such as a size that depends on the data), no .item() of yours")  # fmt: skip
    if cause == "a sync":
        return (f"keep values on the GPU inside the step: the sync in {_cut(what)} (.item(), .cpu(), a tensor from "
                "host data) waits for the GPU; synchronize once, at the step's end")  # fmt: skip
    if cause == "runtime call":
        if what.lower().replace("hip", "cuda").startswith(("cudafree", "cudamalloc")):
            return (f"keep memory cached: {what} in the step means the caching allocator frees and allocates "
                    "(fixed tensor sizes, no torch.cuda.empty_cache() in the loop)")  # fmt: skip
        return f"fewer {what} calls in the step"
    if cause == "CPU op":
        return (f"moving {what} off the CPU: make that tensor on the GPU (device='cuda'), or in DataLoader "
                "workers with pin_memory=True")  # fmt: skip
    graphs = trace.per_step(lambda s: s.graph_launches) or 0
    if cause == "no recorded op" and what.startswith(DATA_PREP):
        return (f"moving that input preparation ({_cut(what.removeprefix(DATA_PREP))}) out of the step: a DataLoader "
                "with workers (num_workers > 0, pin_memory=True) makes the next input while the model runs, or do it "
                "on the GPU; CUDA graphs and torch.compile do not reach it")  # fmt: skip
    if cause == "no recorded op" and what == NO_CPU_OPS:
        return ("recording the CPU side (ProfilerActivity.CPU in the profile's activities) to see what the host ran "
                "then")  # fmt: skip
    if cause == "no recorded op" and not graphs:
        if what:  # with_stack is on: the trace names the frame
            return (f"taking that Python ({_cut(what)} holds the most of it) out of the step: CUDA graphs or "
                    "torch.compile replace it")  # fmt: skip
        if compiled:
            return ("CUDA graphs (torch.compile mode=\"reduce-overhead\") to replace the Python between the "
                    "compiled ops, or with_stack=True to see where it runs")  # fmt: skip
        return ("taking the Python between the ops out of the step (no op was recorded then; with_stack=True "
                "shows where): CUDA graphs or torch.compile replace it")  # fmt: skip
    return _cpu_lever(trace, phase, compiled)


def _host_story(trace: Trace, causes: Counter, phase: str | None, compiled: bool, m: Budget) -> str:
    """'; N of each step's host wait is X → try LEVER (saves up to …)' for the largest cause of the median step
    `m` (two where they are close; `causes`: its host_wait_causes), each figure the median step's own, levers
    ranked by what they save. Its one-time causes are left out (the verdict says them apart)."""
    by: Counter = Counter()
    names: dict[str, Counter] = {}
    for (cause, what), us in causes.items():
        if cause in ONE_TIME:
            continue
        by[cause] += us
        names.setdefault(cause, Counter())[what] += us
    ranked = [(c, us) for c, us in by.most_common() if us > 0]
    if not ranked:
        return f" → try {_cpu_lever(trace, phase, compiled)}"
    picked = ranked[:2] if len(ranked) > 1 and ranked[1][1] >= CLOSE_SHARE * ranked[0][1] else ranked[:1]
    unit = _unit(trace)
    said, saves = [], {}
    one_launch = (trace.per_step(lambda s: s.launches) or 0) <= 1
    if one_launch and {cause for cause, _ in picked} == {"launches", "no recorded op"}:  # one cause: said once
        picked = [("launches", sum(us for _, us in picked))]  # not "53.1 µs launching … and 48.9 µs launching …"
    for cause, us in picked:
        what = names[cause].most_common(1)[0][0]
        if one_launch and cause in ("launches", "no recorded op"):  # a fixed cost per launch: more work per launch
            cause = "launches"
        label = {"data loading": f"the DataLoader ({what})", "the optimizer": f"the optimizer ({what})",
                 "CPU op": f"{what} on the CPU", "launches": "launching the GPU's work op by op",
                 "no recorded op": "in no recorded op (the trace records no CPU op: what the host ran is unknown)"
                 if what == NO_CPU_OPS else f"in Python preparing the input, no op recorded ({_cut(prep)})"
                 if (prep := what.removeprefix(DATA_PREP)) != what
                 else f"in Python, no op recorded ({_cut(what)})" if what
                 else "in no recorded op (Python)",
                 "a sync": f"waiting in a sync in {_cut(what)}",
                 "runtime call": f"in {what} calls"}[cause]  # fmt: skip
        said.append(f"{human_time(us)} {label}")
        lever = _host_lever(cause, what, trace, phase, compiled)
        saves[lever] = saves.get(lever, 0.0) + us  # two causes with one lever: it saves both
    tried = "; and ".join(f"{lever} (saves up to {human_time(us)} of the {human_time(m.span)} {unit})"
                          for lever, us in sorted(saves.items(), key=lambda kv: -kv[1]))  # fmt: skip
    return f"; of the host wait per {unit}, {' and '.join(said)} → try {tried}"


class OneTime(NamedTuple):
    """What ran once in a trace's profiled windows: each cost by name (its µs), and each window's share of them by
    the part of its budget they hold (Budget.split: "host wait", "queued", ...), so a step's bar shows them apart
    without counting them twice."""

    items: Counter
    per_step: list[dict[str, float]]


def one_time(trace: Trace, budgets: list[Budget], context: GapContext | None = None) -> OneTime:
    """What ran once in `budgets`: a first step FIRST_STEP_SLOWER times the others' median or more (and each step
    right after it that is too, up to half the steps) counts its excess over them (what it pays for start-up:
    compiling, autotuning, first launches), its window's share taken from the parts of its budget that exceed the
    others' (_excess); a cold GPU's first op queued (cold_start), from "queued"; a collective waiting for its peers
    (slow_collectives), from "exposed communication"; in the windows after the slow first steps, the one-time causes
    of their host-wait gaps of ONE_TIME_US or more (gap_causes), from "host wait". A window's shares are capped at
    its parts: a cost counted twice by name is never shown twice."""
    items: Counter = Counter()
    per_step: list[Counter] = [Counter() for _ in budgets]
    rest = 0
    if len(budgets) >= 2 and len(trace.steps) == len(budgets):
        usual = statistics.median(b.span for b in budgets[1:])
        # the first steps that each take FIRST_STEP_SLOWER times the others' median: a start-up can take more than
        # one step (TorchScript's profiling executor records one call, then fuses and compiles at the next), never
        # more than half of them
        while (rest < max(1, len(budgets) // 2) and usual > 0
               and budgets[rest].span >= FIRST_STEP_SLOWER * usual):  # fmt: skip
            step, slow = trace.steps[rest], budgets[rest]
            compiled = any(
                True for _ in trace.tree.overlapping(step.start_us, step.start_us + step.dur_us, "compiling")
            )
            items[f"step #{step.number}'s extra time{' (compiling)' if compiled else ''}"] += slow.span - usual
            per_step[rest].update(_excess(slow, budgets[1:], slow.span - usual))
            rest += 1
    context = context or gap_context(trace)
    for i, b in enumerate(budgets):  # less the host's own work meanwhile, which a warm run still waits for (host_work)
        for label, gaps in ((COLD_START, cold_start(b, context)), (STALLED_QUEUE, stalled_queue(b, context))):
            for gap in gaps:
                us = gap.us - _kept(trace, [(gap.start, gap.end)], gap.step, context)
                items[label] += us
                per_step[i]["queued"] += us
    if len(trace.steps) == len(budgets):
        slow = slow_collective_ops(trace, context)  # once: each window only asks where they lie
        for i, w in enumerate(trace.windows if slow else ()):
            comm = slow_collectives(trace, w.start, w.end, slow)
            if comm is not None and comm.exposed > 0:
                us = comm.exposed - _kept(trace, list(comm.spans), w.number, context)
                items[SLOW_COLLECTIVES] += us
                per_step[i]["exposed communication"] += us
    for i in range(rest, len(budgets)):
        for gap in budgets[i].gaps:
            if gap.kind != "host" or gap.us <= ONE_TIME_US:
                continue
            for (cause, what), us in gap_causes(trace, gap, context)[0].items():
                if cause in ONE_TIME and us > 0:
                    items[what if cause == "one-time" else f"compiling ({what})"] += us
                    per_step[i]["host wait"] += us
    capped = []
    for b, shares in zip(budgets, per_step, strict=True):
        parts = b.split() if shares else {}
        capped.append({part: min(us, parts[part]) for part, us in shares.items() if us > 0 and parts[part] > 0})
    return OneTime(items, capped)


def _excess(slow: Budget, others: list[Budget], extra: float) -> dict[str, float]:
    """Where `extra` µs of a slow first step `slow` lie in its budget: each part's excess over the median of that
    part in the `others`, scaled down to `extra` in all (a first step's compiling shows as host wait, its autotuning
    and first copies as GPU work: each is taken from its own part, never a part's usual share)."""
    splits = [b.split() for b in others]
    usual = {part: statistics.median(split[part] for split in splits) for part in PARTS}
    over = {part: us - usual[part] for part, us in slow.split().items() if us > usual[part]}
    total = sum(over.values())
    scale = min(1.0, extra / total) if total > 0 else 0.0
    return {part: us * scale for part, us in over.items()}


def _kept(trace: Trace, spans: list[tuple[float, float]], number: int, context: GapContext) -> float:
    """How long the host's own work ran in `spans` (host_work), µs."""
    return sum(b - a for a, b in host_work(trace, spans, number, context)[1])


COLD_START = "the GPU's first op queued (a cold GPU's set-up)"
STALLED_QUEUE = "the GPU's queued work held up by a first launch's stall"
LONG_PAUSE = "one long stretch of Python before the work (set-up: a model built, data loaded)"
PIN_LEVER = (
    "allocate the host tensor with pin_memory=True (a DataLoader: pin_memory=True) and copy with non_blocking=True"
)
PAGEABLE_WAIT = "a copy from pageable host memory, which waits for the GPU's queued work before it copies"
SET_UP_BEFORE = 0.9  # ... a stretch this share of the window's launches come after: set-up before the work
SET_UP_MOST = 0.5  # ... or, the window's only such stretch, this share (its ops otherwise follow each other closely)
SLOW_COLLECTIVES_MOST = 1  # one collective that slow is a late peer or a set-up; two or more recur (uneven all-to-all)
SLOW_COLLECTIVES = "a collective waiting for its peers (a late rank, connections set up)"


def cold_start(b: Budget, context: GapContext) -> list[Gap]:
    """The gaps of `b` in which the trace's first GPU op waited on the GPU's side, queued (launched, not run: the
    context's and the memory's first use, a cold GPU), ONE_TIME_US or longer: a one-time cost, once in a trace."""
    first = context.first_gpu
    if first is None:
        return []
    return [gap for gap in b.gaps if gap.after is first and gap.kind != "host" and gap.us >= ONE_TIME_US]


def stalled_queue(b: Budget, context: GapContext) -> list[Gap]:
    """The gaps of `b` in which the GPU held queued work, not run (no host wait), ONE_TIME_US or longer, that lie
    inside a kernel's first launch call that stalled the host (GapContext.launch_stalls: a module loaded lazily): the
    work waited on what the stall held up (a collective's peers stalled the same way, an event the host had yet to
    record), a one-time cost as the stall is. The trace's first GPU op's wait is cold_start's."""
    first = context.first_gpu
    queued = [gap for gap in b.gaps if gap.kind != "host" and gap.us >= ONE_TIME_US and gap.after is not first]
    stalls = context.launch_stalls if queued else []  # the launches are looked at only where a long wait is
    return [gap for gap in queued if any(a <= gap.start and gap.end <= z for a, z in stalls)]


def _one_time_parts(items: Counter, total: float) -> tuple[str, str]:
    """The one-time costs `items` (one_time) of windows `total` µs long: the three largest with their
    times, and their lever with what it saves."""
    least = ONE_TIME_LISTED * sum(items.values())  # a sliver a claim left (0.4 µs of a first op) is not listed
    listed = ", ".join(f"{human_time(us)} {what}" for what, us in items.most_common(3) if us >= least)
    saves = f"saves up to {human_time(sum(items.values()))} of the {human_time(total)} profiled"
    return listed, f"warm up before profiling (schedule(wait=1, warmup=1, ...)), or profile later steps ({saves})"


def _one_time(items: Counter, total: float) -> str:
    """'; one-time, not counted in the bound: 1.27 s compiling, 497 ms cudaLaunchKernel → warm up …' where the
    one-time costs `items` hold ONE_TIME_SHOWN of the profiled windows (`total` µs) or more; else ''."""
    once = sum(items.values())
    if once < ONE_TIME_SHOWN * total or once <= 0:
        return ""
    listed, lever = _one_time_parts(items, total)
    return f"; one-time, not counted in the bound: {listed} → {lever}"


def _unit(trace: Trace) -> str:
    return {"iteration": "iteration", "window": "window"}.get(trace.cpu_source, "step")


def cpu_context(trace: Trace, start: float, end: float) -> str:
    """What the CPU ran during [start, end]: the innermost record_function label open at its start (on any
    thread) and the ops it started then, most frequent first."""
    tree = trace.tree
    open_labels = [node for tid in tree.threads if (node := tree.innermost(tid, start, MADE_IN_LABEL)) is not None
                   and node.end > start]  # fmt: skip
    label = max(open_labels, key=lambda node: node.start).name if open_labels else None
    ops = Counter(node.name for node in tree.starting(start, end + 1e-9, OP))
    parts = []
    if label:
        parts.append(f"in {_cut(label)!r}")
    if ops:
        listed = ", ".join(f"{name} ×{count}" for name, count in ops.most_common(3))
        parts.append(f"starting {sum(ops.values())} ops ({listed})")
    else:
        inside = [node for tid in tree.threads if (node := tree.innermost(tid, start, MADE_IN)) is not None]
        if inside:
            parts.append(f"inside {max(inside, key=lambda node: node.start).name} (the op open then)")
    return "; ".join(parts) or "in no op the trace recorded (Python between ops, or a wait)"


def _gap_line(trace: Trace, gap: Gap) -> str:
    what = {"host": "waiting for the host", "kernel": "between queued kernels", "other": "a queued op waiting"}
    before = "the step's end" if gap.after is None else gap.after.name
    if len(before) > 40:
        before = before[:39] + "…"
    return (f"{human_time(gap.us)} in step #{gap.step} ({what[gap.kind]}) before {before}: the CPU was "
            f"{cpu_context(trace, gap.start, gap.end)}")  # fmt: skip


def _longest(budgets: list[Budget], n: int) -> list[Gap]:
    """The `n` longest gaps of `budgets`, longest first, an earlier one first among equals: what heapq.nlargest
    gives over all their gaps in order. The budgets are taken in order, keeping the n longest so far; a budget
    whose own longest gap is no longer than the n-th of them holds none that would enter (an equal one, being
    later, ranks after it), so its gaps are not looked at: on a trace of like steps, only the first few are."""
    if n < 1:
        return []
    best: list[Gap] = []
    negated: list[float] = []  # minus their lengths, ascending: bisect_right puts a new gap after its equals
    for b in budgets:
        if not b.gaps or (len(best) == n and b.longest_gap <= -negated[-1]):
            continue
        for gap in b.gaps:
            us = gap.end - gap.start
            if len(best) == n and us <= -negated[-1]:
                continue
            i = bisect.bisect_right(negated, -us)
            negated.insert(i, -us)
            best.insert(i, gap)
            if len(best) > n:
                negated.pop()
                best.pop()
    return best


def _rule_gaps(trace: Trace, gaps: list[Gap], median: Budget) -> Rule | None:
    """The longest gaps (`gaps`, longest first) and what the CPU ran in each, where the GPU idles enough."""
    if median.span <= 0 or median.idle < GAP_RULE_IDLE * median.span or not gaps:
        return None
    return Rule(
        "the longest GPU gaps",
        [_gap_line(trace, g) for g in gaps],
        "shorten what the CPU runs there, or take it off the critical path (CUDA graphs, torch.compile, "
        "a fused optimizer, a DataLoader with workers)",
    )


def _rule_first_step(trace: Trace) -> Rule | None:
    if len(trace.steps) < 2:
        return None
    first, rest = trace.steps[0], trace.steps[1:]
    usual = statistics.median(s.dur_us for s in rest)
    if usual <= 0 or first.dur_us < FIRST_STEP_SLOWER * usual:
        return None
    compile_labels = {
        node.name
        for node in trace.tree.starting(first.start_us, first.start_us + first.dur_us + 1e-9, LABEL)
        if any(word in node.name for word in COMPILE_WORDS)
    }
    extra = trace.extra_calls(first)
    listed = ", ".join(f"{name} {count}" for name, count in sorted(extra.items(), key=lambda kv: -kv[1])[:3])
    evidence = [f"step #{first.number} takes {human_time(first.dur_us)}, {first.dur_us / usual:.0f}× the others' "
                f"median {human_time(usual)}"]  # fmt: skip
    if listed:
        evidence.append(f"calls only the first step makes: {listed}")
    if compile_labels:
        evidence.append(f"compiler labels in it: {', '.join(sorted(compile_labels)[:3])}")
    return Rule(
        "a first step that pays for start-up",
        evidence,
        "warm up before measuring (the suite's --warmup, or the schedule's warmup steps), and read the later steps",
    )


def _rule_far_from_peak(trace: Trace, eff: dict, busy: float) -> Rule | None:
    """GEMM, attention and convolution ops far from their peak, each with its share of `busy`, the GPU work of the
    profiled steps (their ops' time summed over streams), taken as its own time is: a mean step's time over the
    median step's busy read "101% of GPU busy", and over the windows' busy a kernel running past its window too."""
    far = [
        (key, e) for key, e in eff.items()
        if busy > 0 and e.pct_peak is not None and e.pct_peak < 100 * FAR_FROM_PEAK and e.us >= FAR_SHARE * busy
    ]  # fmt: skip
    if not far:
        return None
    far.sort(key=lambda kv: -kv[1].us)
    lines = [
        f"{kv[0][1][:50]}: {kv[1].tflops:.3g} TFLOP/s, {num(kv[1].pct_peak, 2)}% of peak, "
        f"{100 * kv[1].us / busy:.0f}% of the GPU work"
        for kv in far[:3]
    ]
    return Rule(
        "GEMMs far from peak (from record_shapes)",
        lines,
        "give the GEMMs more work per launch (a larger batch, fused projections), dimensions in multiples of 64, "
        "16-bit inputs",
    )


def _rule_math_attention(trace: Trace) -> Rule | None:
    calls = trace.per_step(lambda s: s.cpu_ops.get(MATH_ATTENTION, 0)) or 0
    if not calls or not trace.has_gpu:
        return None
    return Rule(
        "attention on SDPA's math backend",
        [f"{MATH_ATTENTION} {calls:g} per step: unfused matmuls, softmax and masks"],
        "let SDPA pick a fused backend (16-bit inputs, a supported head_dim, no explicit mask where is_causal "
        "does), or pin one with torch.nn.attention.sdpa_kernel",
    )


# ---- the verdict ----


def _cpu_lever(trace: Trace, phase: str | None, compiled: bool) -> str:
    graphs = trace.per_step(lambda s: s.graph_launches) or 0
    optimizers = [p for p in trace.phases if "optim" in p.lower()]
    if graphs and optimizers:  # the phase still launching kernel by kernel, where the others replay graphs
        name = optimizers[0]
        launches = trace.per_step(lambda s: s.phase(name).kernel_launches) or 0
        if launches > (trace.per_step(lambda s: s.phase(name).graph_launches) or 0):
            return (f"a fused optimizer (AdamW(..., fused=True)): {name!r} still makes {num(launches)} kernel "
                    "launches per step where the rest replays CUDA graphs")  # fmt: skip
    if phase is not None:
        return "a fused optimizer (AdamW(..., fused=True)), or capture the optimizer step in the CUDA graph too"
    if graphs:
        return "a larger batch: CUDA graphs already launch the work, the GPU still has too little of it"
    kernels = trace.per_step(lambda s: s.launches) or 0
    if kernels == 1:
        return ("a larger batch (more work per launch): the step launches one kernel, so nothing is left to fuse "
                "or capture")  # fmt: skip
    if kernels < 1 and not trace.per_step(lambda s: len(s.kernels)):  # its GPU work is copies and sets alone
        return "fewer, larger copies (a larger batch): the step launches no kernel, only copies and memsets"
    syncs = _syncs_per_step(trace)
    first = (f"taking its {num(syncs)} sync{'' if syncs == 1 else 's'} per step out of the step first (.item(), "
             ".cpu(), a tensor in an `if`: no CUDA graph can hold one), then " if syncs else "")  # fmt: skip
    if "torch.compile" in _applied(trace):
        return first + 'CUDA graphs on top of torch.compile (its mode="reduce-overhead"), or a larger batch'
    if compiled:
        return first + 'CUDA graphs (torch.compile mode="reduce-overhead") or a larger batch'
    # CUDA graphs first: they take every launch off the CPU, where fusing removes only the fusable kernels'
    return (
        first
        + 'CUDA graphs (torch.compile mode="reduce-overhead"), or torch.compile to fuse kernels, or a larger batch'
    )


def _syncs_per_step(trace: Trace) -> float:
    """The median count of sync calls inside a step, the loop's own end-of-step synchronize left out."""

    def inside(step: Step) -> int:
        launches = [op.launch.ts for op in step.gpu if op.launch is not None]
        return len(_in_step_syncs(step, max(launches) if launches else None))

    return trace.per_step(inside) or 0


HOST_OP_SHARE = 0.3  # with no GPU events: a CPU op's self time this share of the median step is named, its lever
HOST_COPY_SHARE = 0.1  # ... and the host-device copy calls, at this share of it


def _host_aside(trace: Trace) -> str:
    """What the host side shows where the GPU's work was not recorded: the CPU op holding HOST_OP_SHARE of the
    median step's time by itself (aten::normal_: a batch made on the CPU) with its lever, and the time in the
    host-device copy calls (cudaMemcpyAsync) where they hold HOST_COPY_SHARE of it; '' where neither does."""
    step = trace.steps[median_index([s.dur_us for s in trace.steps])]
    start, end = step.start_us, step.start_us + step.dur_us
    if not step.dur_us > 0:
        return ""
    parts = []
    own = trace.tree.self_us(start, end)
    for role in ("launch", "runtime call", "sync"):  # an op that launches or copies: its CPU time is the GPU's work's
        for node in trace.tree.overlapping(start, end, role):
            own.pop(_made_in(trace, Launch(node.name, node.start, node.us, None, node.tid)), None)
    top = max(own, key=own.__getitem__, default=None)
    if top is not None and is_compute(top) and own[top] >= HOST_OP_SHARE * step.dur_us:
        lever = _host_lever("CPU op", top, trace, None, False)
        parts.append(f"{top} holds {percent(100 * own[top] / step.dur_us)} of the {human_time(step.dur_us)} "
                     f"{_unit(trace)} on the CPU by itself → try {lever}")  # fmt: skip
    copies = sum(min(n.end, end) - max(n.start, start) for role in ("runtime call", "sync")
                 for n in trace.tree.overlapping(start, end, role) if "Memcpy" in n.name)  # fmt: skip
    if copies >= HOST_COPY_SHARE * step.dur_us:
        parts.append(f"{human_time(copies)} ({percent(100 * copies / step.dur_us)}) in host-device copy calls")
    return f"; on the host, {'; and '.join(parts)}" if parts else ""


def diagnose(trace: Trace, peak_tflops: float | None = None) -> Diagnosis:
    """The verdict, the per-step budgets and the rules that fire for `trace`. The cyclic garbage collector is
    paused meanwhile, as while reading: its passes over the trace's millions of objects would cost more than this."""
    with no_gc():
        return _diagnose(trace, peak_tflops)


HOST_CRITICAL = 0.9  # a step whose host path is this share of its window: the host is its critical path


HOST_OWN = ("data loading", "CPU op", "runtime call", "the optimizer")  # host-wait causes not launching GPU work


def _host_critical(trace: Trace, step: Step, m: Budget, causes: Counter) -> bool:
    """Whether the host is the critical path of `step` (its budget `m`, its host-wait `causes`): the host worked
    HOST_CRITICAL of the window or more (its CPU span less the time in sync calls, waits for the GPU), and the
    largest recurring cause of the GPU's wait for it is work of the host's own, not launching the GPU's (a
    DataLoader's __next__ while the GPU finishes the last batch). The step then ends when the host's work does, and
    less GPU work would not shorten it: only the host's lever does."""
    by: Counter = Counter()
    for (cause, _), us in causes.items():
        if cause not in ONE_TIME:
            by[cause] += us
    top = max(by, key=by.__getitem__, default=None)
    if top not in HOST_OWN:
        return False
    return _host_worked(trace, step) >= HOST_CRITICAL * m.span


def _host_worked(trace: Trace, step: Step) -> float:
    """How long the host worked in `step`: its CPU span less the time in calls that wait for the GPU (sync calls,
    and the host-device copy calls, which return when the copy is done and so wait for the work queued before it)."""
    start, end = step.start_us, step.start_us + step.dur_us
    waits = [n for n in trace.tree.overlapping(start, end, "sync")]
    waits += [n for n in trace.tree.overlapping(start, end, "runtime call") if "Memcpy" in n.name]
    spans = merged((max(n.start, start), min(n.end, end)) for n in waits)
    return step.dur_us - sum(b - a for a, b in spans)


def bound_of(m: Budget) -> str:
    """What bounds the median step, from its budget alone, with the thresholds above: exposed communication, then
    an idle GPU (waiting for the host: "CPU", or on its own waits: "waits"), then copies, else the GPU itself, or
    "balanced" where the GPU also waits for the host a large share of the step."""
    if m.comm_exposed >= EXPOSED_COMM_BOUND * m.span:
        return "communication"
    if m.idle >= IDLE_BOUND * m.span:
        return "CPU" if m.host_wait >= m.kernel_wait + m.other_wait else "waits"
    if m.busy and m.non_compute >= NON_COMPUTE_BOUND * m.busy:
        return "copies"
    return "balanced" if m.host_wait >= BALANCED_IDLE * m.span else "GPU"


def _steady(
    m: Budget,
    once: float,
    pieces: list[tuple[float, float]] = (),
    cold: float = 0.0,
    comm: SlowCollectives | None = None,
    work: list[tuple[float, float]] = (),
    number: int = 0,
) -> Budget:
    """The median step's budget less its one-time host wait (`once` µs, the gaps' `pieces` it took), its cold
    start (`cold` µs of its GPU's own wait, cold_start) and its one-time collectives' wait for their peers (`comm`,
    slow_collectives: the part no other GPU work hid), plus the host's own work that ran under those two waits of the
    GPU's (`work`, host_work's pieces: warmed up, the GPU waits for it instead): the steady state the bound is decided
    on (the budget itself where they are under ONE_TIME_SHOWN of it). Its gaps are the step's less those pieces, and
    `work` as host waits of step `number`, so its longest gap and its idle per phase are the steady state's own."""
    exposed = comm.exposed if comm is not None else 0.0
    kept = sum(b - a for a, b in work)
    if once + cold + exposed - kept < ONE_TIME_SHOWN * m.span or once + cold + exposed - kept <= 0:
        return m
    span = max(m.span - once - cold - exposed + kept, 0.0)
    steady = Budget(span, parts=m.parts, busy=m.busy - exposed, window=m.window)
    moved = [Gap(a, b, "host", number, None) for a, b in work]
    steady.gaps = sorted(_less(m.gaps, sorted(pieces)) + moved, key=lambda gap: gap.start)
    steady.longest_gap = max((g.us for g in steady.gaps), default=0.0)
    steady.host_wait, steady.kernel_wait = max(m.host_wait - once, 0.0) + kept, m.kernel_wait
    steady.other_wait = max(m.other_wait - cold, 0.0)
    for name in ("compute", "non_compute", "comm", "comm_exposed"):
        setattr(steady, name, getattr(m, name))
    if comm is not None:
        steady.comm, steady.comm_exposed = max(m.comm - comm.us, 0.0), max(m.comm_exposed - exposed, 0.0)
    return steady


class SlowCollectives(NamedTuple):
    """The collectives of a trace that ran ONE_TIME_FACTOR times the usual collective, a few times at most (a
    rank waiting for a late peer, connections set up): their time in a window and the part no other GPU work hid,
    with its (start, end) pieces."""

    us: float
    exposed: float
    spans: tuple[tuple[float, float], ...] = ()


def slow_collective_ops(trace: Trace, context: GapContext | None = None) -> list[GpuOp]:
    """The one-time collectives of a trace: of three collective kernels or more, the one ONE_TIME_FACTOR times their
    median and ONE_TIME_US or more, where it is the only one (SLOW_COLLECTIVES_MOST; more: a recurring wait, the
    steady state's, such as an all-to-all whose peer is slower every half-step). In a trace of profiled steps, only in
    the first of two or more: a lone step (ProfilerStep#10, past the schedule's warm-up) gives no evidence that its
    slow collective runs once. Found once per trace and kept (while
    its `gpu` is the same list of the same length), then asked of each window (slow_collectives); one pass over the
    GPU ops, where the trace's timeline, made of them, holds a communication kernel (GpuTimeline.has_comm, once per
    distinct name, which the budgets ask too)."""
    gpu = trace.gpu
    kept = trace.__dict__.get("_slow_collectives")
    if kept is not None and kept[0] is gpu and kept[1] == len(gpu):
        return kept[2]
    slow: list[GpuOp] = []
    if gpu and trace.timeline.has_comm:
        comm = [op for op in trace.gpu
                if op.start is not None and op.category == "kernel" and op.family == "communication"]  # fmt: skip
        if len(comm) >= 3:
            usual = statistics.median(op.us for op in comm)
            slow = [op for op in comm if _Usual.once(op.us, usual)]
            if len(slow) > SLOW_COLLECTIVES_MOST:  # several: recurring, but for those a first launch's stall holds
                stalls = (context or gap_context(trace)).launch_stalls  # (the peers, the same code, stall there too)
                slow = [op for op in slow if any(a <= op.start and op.start + op.us <= b for a, b in stalls)]
        if slow and not trace.whole_trace:  # a profiled step is the loop's, past its warm-up: only the first of
            # several can hold a set-up (the others show the steady state without it); a lone one gives no evidence
            first = trace.windows[0] if len(trace.steps) > 1 else None
            slow = [op for op in slow if first is not None and first.start <= op.start < first.end]
    trace._slow_collectives = (gpu, len(gpu), slow)
    return slow


def slow_collectives(trace: Trace, start: float, end: float, slow: list[GpuOp] | None = None) -> SlowCollectives | None:
    """The one-time collectives' time in [start, end] (slow_collective_ops, or `slow` found already) and the part
    no other GPU work hid; None where none is in the window."""
    slow = slow_collective_ops(trace) if slow is None else slow
    if not slow:
        return None
    us = exposed = 0.0
    spans: list[tuple[float, float]] = []
    for first in slow:
        lo, hi = max(first.start, start), min(first.start + first.us, end)
        if hi <= lo:
            continue
        under = sorted((max(op.start, lo), min(op.start + op.us, hi)) for op in trace.gpu
                       if op.start is not None and op.start < hi and op.start + op.us > lo
                       and not (op.category == "kernel" and op.family == "communication"))  # fmt: skip
        reach = lo
        for a, b in [*under, (hi, hi)]:  # what their union leaves of [lo, hi]
            if a > reach:
                spans.append((reach, a))
            reach = max(reach, b)
        us += hi - lo
    exposed = sum(b - a for a, b in spans)
    return SlowCollectives(us, exposed, tuple(spans)) if us > 0 else None


def _less(gaps: list[Gap], pieces: list[tuple[float, float]]) -> list[Gap]:
    """`gaps` less the disjoint, sorted (start, end) `pieces`: each gap's parts outside them, as gaps of its kind."""
    out = []
    for gap in gaps:
        start = gap.start
        for a, b in pieces:
            if b <= start or a >= gap.end:
                continue
            if a > start:
                out.append(gap._replace(start=start, end=a))
            start = max(start, b)
        if gap.end > start:
            out.append(gap._replace(start=start))
    return out


class _Facts(NamedTuple):
    """What the verdict's wording reads, found once in _diagnose."""

    trace: Trace
    step: Step  # the median step: every figure of the verdict's line is its own
    m: Budget  # the median step's budget (its steady state, where one-time costs are left out)
    where: str  # "the 3.04 ms step", or the GPU window it was measured on
    scan: _Scan
    eff: dict
    causes: Counter  # the median step's host_wait_causes


SLOW_LINK = 1e9  # bytes/s: a collective moving its message slower than this (under any NCCL link, 10 GbE's 1.25 GB/s
# included) spent its time waiting for its peers, not moving data


def _says_communication(f: _Facts) -> str:
    m = f.m
    hidden = percent(100 * m.comm_hidden / m.comm if m.comm else 0)
    little = (
        f"; only {human_time(m.compute)} of compute kernels run in it to hide them behind"
        if m.compute < m.comm_exposed / 2
        else ""
    )  # overlapping hides no more of it than the compute there is
    peers = _waiting_for_peers(f.trace, f.step)
    if peers:  # the collectives' time is their peers' lateness: sending less or overlapping is not the lever
        return (f"bound by exposed communication that waits for its peers: {percent(m.pct(m.comm_exposed))} of "
                f"{f.where} is communication no compute hides ({hidden} of it hidden); {peers}{little}")  # fmt: skip
    return (f"bound by exposed communication: {percent(m.pct(m.comm_exposed))} of {f.where} is communication no "
            f"compute hides ({hidden} of it hidden) → {_comm_lever(f.trace)}{little}")  # fmt: skip


def _waiting_for_peers(trace: Trace, step: Step) -> str:
    """'its N collectives move X in Y (Z GB/s): …' where the collectives of `step` that ran on the GPU with a known
    message size moved it slower than SLOW_LINK: their time is the peers' lateness, whose lever is the ranks' own
    time per step; '' otherwise."""
    start, end = step.start_us, step.start_us + step.dur_us
    timed = [c for c in trace.collectives if start <= c.issued_us < end and c.where == "GPU" and c.bytes and c.us]
    moved, us = sum(c.bytes for c in timed), sum(c.us for c in timed)
    if not timed or moved / (us * 1e-6) >= SLOW_LINK:
        return ""
    return (f"its {len(timed)} collective{'s' if len(timed) > 1 else ''} move {human_bytes(moved)} in "
            f"{human_time(us)} ({moved / (us * 1e-6) / 1e9:.3g} GB/s), so that time is the peer ranks' lateness, not "
            "moving data → less host time per step on every rank (the latest one sets the pace), fewer, larger "
            "exchanges")  # fmt: skip


def _all_to_all(trace: Trace) -> bool:
    """Whether half the steps' communication kernel time or more is all-to-all (ALL_TO_ALL: expert or embedding
    parallel)."""
    kernels = Counter()
    for step in trace.steps:
        for op in step.gpu:
            if op.category == "kernel" and op.family == "communication":
                kernels[op.name.lower()] += op.us
    total = sum(kernels.values()) or 1.0
    return sum(us for name, us in kernels.items() if any(word in name for word in ALL_TO_ALL)) >= 0.5 * total


def _comm_lever(trace: Trace) -> str:
    """The communication lever for what the collectives belong to: all-to-all (expert or embedding parallel),
    the DDP reducer or FSDP in a backward, else collectives in a forward (tensor parallel)."""
    ops = Counter()
    for step in trace.steps:
        ops.update(step.cpu_ops)
    backward = any(name.startswith("autograd::") or "Backward" in name for name in ops)
    labels = {node.name for node in trace.tree.of_kind(LABEL)}
    if _all_to_all(trace):
        return ("overlap the all-to-all with compute (its own stream, the next micro-batch), or send less (fewer "
                "tokens or rows per exchange)")  # fmt: skip
    if any("FullyShardedDataParallel" in name or name.startswith("FSDP") for name in labels):
        return "FSDP prefetching (forward_prefetch, backward_prefetch), or larger shards per collective"
    if backward or any("DistributedDataParallel" in name for name in labels):
        return "overlap it with the backward (DDP's default), tune bucket_cap_mb, or communicate less often"
    return ("overlap the forward's collectives with compute (async tensor parallel), or fewer, larger collectives; "
            "there is no backward here to hide them behind")  # fmt: skip


def _says_idle(f: _Facts) -> str:
    """The verdict of a GPU idle half the step or more: waiting for the host (and why), or on its own waits. Its
    figures are the median step's own (its launches, its longest gap, its idle per phase), never a figure of all
    steps beside a share of one (issue 46: "longest gap 87.3 ms" in a 162 µs step)."""
    trace, m = f.trace, f.m
    host = m.host_wait >= m.kernel_wait + m.other_wait
    launches = f.step.launches + f.step.graph_launches
    by_phase = idle_by_phase(trace, [m])  # the steady state's gaps, where one-time costs are left out
    phase = max((p for p in by_phase if p is not None), key=by_phase.__getitem__, default=None)
    gap = f"; longest gap {human_time(m.longest_gap)}" if m.gaps else ""
    ranked = [(p, us) for p, us in by_phase.most_common() if p is not None][:3]
    if ranked:
        shown = ranked if not host else ranked[:1]  # the host wait's causes follow: the phase is its where
        gap += "; idle per step while the CPU ran " + ", ".join(f"{p} {human_time(us)}" for p, us in shown)
    optimizer = next((us for p, us in ranked if "optim" in p.lower()), 0.0)
    if optimizer < OPTIMIZER_IDLE * m.idle:
        phase = None
    if host:
        critical = (
            "; the host's own work ran the whole window, so less GPU work would not shorten it"
            if m.idle < IDLE_BOUND * m.span
            else ""
        )  # _host_critical: the bound without an idle GPU
        return (f"bound by the CPU: GPU idle {percent(m.pct(m.idle))} of {f.where} "
                f"({percent(m.pct(m.host_wait))} waiting for the host{critical})"
                f"{_launched(launches, f.step)}{gap}"
                f"{_host_story(trace, f.causes, phase, f.scan.compiled, m)}")  # fmt: skip
    lever = "remove the syncs and waits inside the step"
    synced = _synced_in_waits(trace, m)
    if synced and sum(synced.values()) >= SYNCED_WAITS * (m.kernel_wait + m.other_wait):
        made, us = synced.most_common(1)[0]  # the host sat in a sync meanwhile: where that sync was made is the lever
        lever = f"try {_host_lever('a sync', made, trace, None, f.scan.compiled)} ({human_time(us)} in that sync)"
    return (f"bound by waits on the GPU: idle {percent(m.pct(m.idle))} of {f.where}, "
            f"{percent(m.pct(m.kernel_wait + m.other_wait))} with work queued but waiting (syncs, events, "
            f"other streams){gap} → {lever}")  # fmt: skip


def _launched(launches: int, step: Step) -> str:
    """', N launches' for the verdict; nothing where the step holds kernels but no launch call (the legacy
    export's GPU ranges): the trace does not say how many there were."""
    if not launches and step.kernels:
        return ""
    return f", {num(launches)} launch{'' if launches == 1 else 'es'}"


SYNCED_WAITS = 0.5  # the host in a sync call this share of the GPU's queued waits: that sync is the waits' lever


def _synced_in_waits(trace: Trace, m: Budget) -> Counter:
    """Where the host sat in a sync call while the GPU waited with work queued (the budget's kernel and other
    gaps): the op each sync was made in (or the call, where no op was open) -> its µs in those gaps."""
    synced: Counter = Counter()
    for gap in m.gaps:
        if gap.kind == "host":
            continue
        for node in trace.tree.overlapping(gap.start, gap.end, "sync"):
            made = _made_in(trace, Launch(node.name, node.start, node.us, None, node.tid)) or node.name
            synced[made] += min(node.end, gap.end) - max(node.start, gap.start)
    return synced


def _says_copies(f: _Facts) -> str:
    m = f.m
    return (f"bound by copies: memcpy/memset {percent(100 * m.non_compute / m.busy)} of GPU busy "
            f"({human_time(m.non_compute)} of {human_time(m.busy)}) → {_copies_lever(f.trace, f.scan)}")  # fmt: skip


def _copies_lever(trace: Trace, scan: _Scan) -> str:
    """The lever for a GPU busy in copies, by what its copies show applied already: host copies all from pinned
    memory (no Pageable memcpy) need no "pinned memory"; on several streams they overlap already; what is left is
    moving less data."""
    host = ("HtoD", "DtoH")  # the host copies' streams: empty where there is none
    streams = {op.stream for op in trace.gpu if op.category == "gpu_memcpy" and any(h in op.name for h in host)}
    if not streams or scan.pageable:
        return "pinned memory, fewer host-device copies, in-place ops instead of copies"
    if len(streams) > 1:
        return (f"the copies are pinned and on {len(streams)} streams already: move less data between host and "
                "device (keep it on the GPU, send it in a lower precision)")  # fmt: skip
    return ("the copies are pinned already: overlap them with compute (non_blocking=True, a stream of their own), "
            "or move less data between host and device")  # fmt: skip


def _says_gpu(f: _Facts) -> str:
    """The verdict of a busy GPU: its busiest family, the GEMMs' share of peak, and the lever for what it runs."""
    trace, m, eff = f.trace, f.m, f.eff
    shares = Counter(f.scan.shares)
    total = sum(shares.values()) or 1.0
    family, us = max(shares.items(), key=lambda kv: kv[1])
    line = (f"bound by the GPU: busy {percent(m.pct(m.busy))} of {f.where}; {family} "
            f"{percent(100 * us / total)} of it")  # fmt: skip
    gemm = [e for e in eff.values() if e.tflops is not None]
    if gemm and all(e.peak_tflops for e in eff.values()):
        flops = sum(e.flops for e in gemm)
        peak_us = sum(e.peak_tflops * e.us for e in gemm)  # the peak each kernel's time is measured against
        share = rate(flops, 1e6 * peak_us)  # FLOPs over what the peak does in their time: the share of peak
        if share is not None and share > 1:  # never a rate above the peak: a broken link or a wrong peak
            why = "an External id link" if trace.broken_links else "the peak"
            line += f"; the GEMM kernels' rate reads above the device's peak: {why} is wrong"
        elif share is not None:
            kinds = [k for k in ("GEMM", "attention", "convolution") if any(e.kind == k for e in gemm)]
            line += f"; {', '.join(kinds[:-1])}{' and ' if len(kinds) > 1 else ''}{kinds[-1]} kernels at "
            line += f"{num(100 * share, 2)}% of peak"  # 0.019%, not "0%", for a GEMM far below its peak
    fusable = sum(shares[fam] for fam in ("pointwise", "reduce", "softmax")) / total
    if family == "communication":  # the GPU's busiest work is its collectives: their lever, by what they belong to
        hidden = m.comm_hidden / m.comm if m.comm else 0.0
        line += f" ({percent(100 * hidden)} of the communication hidden behind compute)"
        if hidden >= HIDDEN_ALREADY:  # overlapped already: what is left is to communicate less
            if _all_to_all(trace):
                return line + (" → send less in the all-to-all (fewer tokens or rows per exchange): its dispatch and "
                               "combine overlap with compute already")  # fmt: skip
            return line + " → fewer or smaller collectives (communicate less often): they overlap with compute already"
        return line + f" → {_comm_lever(trace)}"
    if trace.steps and any(s.cpu_ops.get(MATH_ATTENTION) for s in trace.steps):
        return line + " → a fused attention backend (SDPA flash/efficient/cudnn)"
    if fusable >= FUSABLE_SHARE:
        return line + f" → torch.compile to fuse the pointwise/reduce kernels ({percent(100 * fusable)} of GPU busy)"
    gemm_us = Counter()
    for step in trace.steps:
        for op in step.gpu:
            if op.category == "kernel" and op.family == "gemm":
                gemm_us[any(word in op.name.lower() for word in LOW_PRECISION)] += op.us
    if gemm_us[True] and gemm_us[True] >= gemm_us[False]:  # most GEMM time in FP8/FP4 already: precision is applied
        return line + " → less work per step (fewer FLOPs: the GEMMs run in FP8/FP4 already); launches no longer matter"
    return line + " → less work per step (lower precision, fewer FLOPs); launches no longer matter"


def _says_balanced(f: _Facts) -> str:
    """Neither side dominates: the GPU's lever, and the host's beside it."""
    gpu_part = _says_gpu(f).removeprefix("bound by the GPU: ")
    return (
        f"balanced between the GPU and the host: {gpu_part}; and the GPU waits for the host "
        f"{percent(f.m.pct(f.m.host_wait))} of it{_host_story(f.trace, f.causes, None, f.scan.compiled, f.m)}"
    )


def _says_gpu_and_host(f: _Facts) -> str:
    """A busy GPU's verdict, and where the GPU still waits HOST_ASIDE of the step or more for a host cause with a
    lever of its own (the DataLoader, the optimizer, a CPU op, a sync, a runtime call), that cause beside it."""
    line = _says_gpu(f)
    if f.m.host_wait < HOST_ASIDE * f.m.span:
        return line
    causes = Counter()
    for (cause, _), us in f.causes.items():
        causes[cause] += us
    top = max(causes, key=causes.__getitem__, default=None)
    if top not in ("data loading", "the optimizer", "CPU op", "a sync", "runtime call"):
        return line
    return (f"{line}; and the GPU waits for the host {percent(f.m.pct(f.m.host_wait))} of it"
            f"{_host_story(f.trace, f.causes, None, f.scan.compiled, f.m)}")  # fmt: skip


_SAYS = {"communication": _says_communication, "CPU": _says_idle, "waits": _says_idle, "copies": _says_copies,
         "GPU": _says_gpu_and_host, "balanced": _says_balanced}  # fmt: skip


def unrecorded_graph_work(trace: Trace, context: GapContext) -> list[tuple[float, float]]:
    """The (start, end) spans, merged, in which a sync call made after a CUDA (HIP) graph launch on its thread (no
    other sync between them) still waited ONE_TIME_US or more after the last GPU op the trace records had ended: a
    sync returns once the work it waits for is done, and the graph's work was queued, so the GPU was still running
    it; a replayed graph's kernels are not all recorded (ROCm's tracer keeps the first few of a hipGraphLaunch).
    Without a graph launch before it, such a sync is the context's start-up (idle_syncs), not unrecorded work."""
    starts, ends = context.busy
    pieces = []
    for thread in trace.tree.threads.values():
        calls = []
        for kind in (RUNTIME, DRIVER):
            layer = thread.layer(kind)
            if len(layer) and any(name.startswith(GRAPH_LAUNCHES) or name in SYNC_CALLS for name in set(layer.names)):
                calls += [(layer.starts[i], layer.ends[i], name.startswith(GRAPH_LAUNCHES))
                          for i, name in enumerate(layer.names)
                          if name.startswith(GRAPH_LAUNCHES) or name in SYNC_CALLS]  # fmt: skip
        after_graph = False
        for start, end, graph in sorted(calls):
            if not graph and after_graph:
                i = bisect.bisect_left(starts, end) - 1  # the last stretch of recorded GPU work begun before its end
                waited_from = max(start, ends[i]) if i >= 0 else start
                if end - waited_from >= ONE_TIME_US:
                    pieces.append((waited_from, end))
            after_graph = graph
    return merged(pieces)


def _with_unrecorded(b: Budget, start: float, end: float, spans: list[tuple[float, float]]) -> tuple[Budget, float]:
    """`b`, the budget of the window [start, end], with the parts of `spans` (unrecorded_graph_work) in it counted
    as GPU busy, compute, instead of the gaps they lay in; and how long they are there (µs; 0: `b` itself)."""
    inside = [(max(a, start), min(z, end)) for a, z in spans if a < end and z > start]
    us = sum(z - a for a, z in inside)
    if us <= 0:
        return b, 0.0
    out = Budget(b.span, parts=b.parts, busy=b.busy + us, window=b.window)
    for name in ("compute", "non_compute", "comm", "comm_exposed"):
        setattr(out, name, getattr(b, name))
    out.compute = b.compute + us
    taken = Counter()
    for gap in b.gaps:
        taken[gap.kind] += sum(max(0.0, min(z, gap.end) - max(a, gap.start)) for a, z in inside)
    out.host_wait = max(b.host_wait - taken["host"], 0.0)
    out.kernel_wait = max(b.kernel_wait - taken["kernel"], 0.0)
    out.other_wait = max(b.other_wait - taken["other"], 0.0)
    out.gaps = _less(b.gaps, inside)
    out.longest_gap = max((gap.us for gap in out.gaps), default=0.0)
    return out, us


def _recorded_work(trace: Trace) -> bool:
    """Whether any thread of the trace holds an op, a label or a Python frame: what a model's run leaves."""
    return any(len(thread.layer(kind)) for thread in trace.tree.threads.values() for kind in (OP, LABEL, PYTHON))


def _diagnose(trace: Trace, peak_tflops: float | None) -> Diagnosis:
    if trace.devices:  # a device the reader does not model: never "no GPU", never a bound (beside a GPU's too)
        line = (f"no bound: the trace's device is {', '.join(trace.devices)}, which the reader does not model, so "
                "nothing says how busy it was")  # fmt: skip
        if trace.gpu:
            line = (f"no bound: the trace also holds work of {', '.join(trace.devices)}, which the reader does not "
                    "model, so nothing says whether it or the GPU bounds the steps")  # fmt: skip
        return Diagnosis("—", line, [], [], None, {})
    if not trace.has_gpu and (evidence := gpu_evidence(trace)) is not None:  # a GPU ran, its events not recorded
        return Diagnosis("—", unrecorded_gpu(trace, evidence), [], [r for r in (_rule_first_step(trace),) if r], None)
    if not trace.has_gpu and not _recorded_work(trace):  # a capture around nothing: no bound for work not there
        line = (
            "no bound: the trace records no op, no label, no Python frame and no GPU work, only the profiler's "
            "own and runtime set-up events: nothing ran under the profiler; record the model's steps inside it"
        )
        return Diagnosis("—", line, [], [], None, {})
    if not trace.has_gpu:
        line = cpu_verdict(trace)  # common.analysis.cpu_bound: compute- or overhead-bound, from the ops' self times
        return Diagnosis("CPU", line, [], [r for r in (_rule_first_step(trace),) if r], None, efficiency(trace))
    if not trace.gpu_activity or not any(s.gpu for s in trace.steps):
        launches = sum(s.launches + s.graph_launches for s in trace.steps)
        why = (
            "ProfilerActivity.CUDA was not in the profile's activities, or CUPTI was off"
            if not trace.gpu_activity
            else "its GPU work ran outside the profiled steps"
        )
        made = (f"the trace has {num(launches)} launch{'' if launches == 1 else 'es'} but no GPU work (kernels, "
                "memcpy, memset) in its steps" if launches  # never "0 launches but no GPU work"
                else "its steps launch nothing and hold no GPU work (kernels, memcpy, memset)")  # fmt: skip
        line = (f"no bound: {made}, so nothing says how busy the GPU was; likely {why}, "
                "or the schedule's cycle ended before the export")  # fmt: skip
        line += (_host_aside(trace) + host_side(trace)) if launches else ""
        return Diagnosis("—", line, [], [r for r in (_rule_first_step(trace),) if r], None, efficiency(trace))
    budgets = step_budgets(trace)
    context = gap_context(trace)
    unrecorded = unrecorded_graph_work(trace, context) if any(s.graph_launches for s in trace.steps) else []
    graph_us = [0.0] * len(budgets)
    for i, w in enumerate(trace.windows if unrecorded else ()):
        budgets[i], graph_us[i] = _with_unrecorded(budgets[i], w.start, w.end, unrecorded)
    m = median_budget(budgets)
    assert m is not None
    if not m.span > 0:  # 0 µs (or a time no float holds): no share of it is a figure, so no rule may fire on one
        line = (f"no bound: the median step's window is {human_time(m.span)} (its events carry no duration), so "
                "nothing says where its time went")  # fmt: skip
        return Diagnosis("—", line, budgets, [], m, {})
    unit = {"iteration": "iteration", "window": "window"}.get(trace.cpu_source, "step")  # never "step" for either
    owner = "the" if unit == "window" else f"the {unit}'s"  # never "the window's … GPU window"
    where = (
        f"the {human_time(m.span)} {unit}"
        if m.window == "step"
        else (f"{owner} {human_time(m.span)} GPU window (its GPU work ran outside its CPU span)")
    )
    longest_gaps = _longest(budgets, GAPS_SHOWN)
    scan = _scan(trace)
    eff = rates(scan.groups, trace.shapes, find_peak(trace.device_name, peak_tflops)) if trace.shapes else {}
    causes: Counter = Counter()  # the median step's host_wait_causes, found once
    pieces: list[tuple[float, float]] = []  # ... and the pieces of its gaps its one-time causes took
    for gap in m.gaps:
        if gap.kind == "host" and gap.us > 0:
            causes.update(gap_causes(trace, gap, context, pieces)[0])
    causes = +causes
    once = sum(us for (cause, _), us in causes.items() if cause in ONE_TIME)
    cold = cold_start(m, context) + stalled_queue(m, context)
    pieces += [(gap.start, gap.end) for gap in cold]
    once_found = one_time(trace, budgets, context)
    items = once_found.items
    once_all, total = sum(items.values()), sum(b.span for b in budgets)
    w = trace.windows[budgets.index(m)]
    comm = slow_collectives(trace, w.start, w.end, slow_collective_ops(trace, context))
    gpu_once = [(gap.start, gap.end) for gap in cold] + list(comm.spans if comm is not None else ())
    work, kept = host_work(trace, gpu_once, w.number, context) if gpu_once else (Counter(), [])
    causes.update(work)  # the steady state's host wait holds them
    steady = _steady(m, once, pieces, sum(gap.us for gap in cold), comm, kept, w.number)
    if steady is not m:
        left_out = human_time(m.span - steady.span)
        where = f"the {human_time(steady.span)} steady state of {where} ({left_out} one-time left out)"
    step = trace.steps[next(i for i, b in enumerate(budgets) if b is m)]  # the budgets are the steps', in order
    facts = _Facts(trace, step, steady, where, scan, eff, causes)
    bound = bound_of(steady)
    if bound == "balanced" and _host_critical(trace, step, m, causes):
        bound = "CPU"  # the host ran the whole window on work of its own: less GPU work would not shorten the step
    hidden_by_host = (bound == "communication" and steady.host_wait >= steady.comm_exposed
                      and _host_worked(trace, step) >= HOST_CRITICAL * m.span)  # fmt: skip
    if hidden_by_host:  # the collectives ran while the host worked, which it did the whole window, and the GPU
        # waited for it longer than it communicated: the host is the bound
        bound = "CPU"
    line = _SAYS[bound](facts)
    if graph_us[budgets.index(m)] > 0:
        line += (f"; {human_time(graph_us[budgets.index(m)])} of its GPU busy is a graph replay's work the trace does "
                 "not record (a sync after the graph launch waited that long past the last recorded GPU op): "
                 "re-profile without the graph, or with a GPU profiler, to see those kernels")  # fmt: skip
    if hidden_by_host:
        exposed = percent(steady.pct(steady.comm_exposed))
        line += (f"; its exposed communication ({exposed} of the {unit}) ran while the host worked the whole window, "
                 "so hiding it behind compute would not shorten the step")  # fmt: skip
    if once_all >= ONE_TIME_DOMINATES * total:  # start-up, not the steady state: said first, the bound after it
        listed, lever = _one_time_parts(items, total)
        share = percent(100 * once_all / total)
        head = f"one-time costs hold {share} of the profiled {_unit(trace)}s: {listed} → {lever}"
        kernels = Counter(op.name for op in trace.gpu if op.category == "kernel")  # over the trace: steps recur
        if steady.span <= 0 or (
            steady.span < (1 - ONE_TIME_LEFT) * m.span
            and (steady.span < (1 - ONE_TIME_MOST_LEFT) * m.span or steady.busy < steady.span / 2)
        ):
            line = f"{head}; too little is left of them to bound a steady state"
        elif max(kernels.values(), default=0) < RECURS:  # one pass over cold code: nothing in it is steady
            line = (f"{head}; nothing else recurs (no kernel launched {RECURS} times), so no steady state is left to "
                    "bound")  # fmt: skip
        else:
            line = f"{head}; the steady state: {line}"
    else:
        line += _one_time(items, total)
    rules = [
        r
        for r in (
            _rule_syncs(trace, scan),
            _rule_pageable(trace, scan),
            _rule_short_kernels(trace, scan),
            _rule_gaps(trace, longest_gaps, m),
            _rule_first_step(trace),
            _rule_far_from_peak(trace, eff, sum(scan.shares.values())),
            _rule_math_attention(trace),
        )
        if r is not None
    ]
    return Diagnosis(bound, line, budgets, rules, m, eff, steady=steady, causes=causes, one_time=once_found.per_step)


def verdict_lines(diagnosis: Diagnosis, explain: bool = False) -> list[str]:
    """The verdict, the median step's budget, then each rule that fired: its name and fix, with its evidence
    under `explain`. Each is one line: a trace's name in it has its line breaks and controls escaped."""
    lines = [f"verdict: {diagnosis.verdict}"]
    if diagnosis.median is not None:
        lines.append(f"  {budget_line(diagnosis.median)}")
    for rule in diagnosis.rules:
        lines.append(f"  rule: {rule.name} → {rule.fix}")
        if explain:
            lines += [f"    {line}" for line in rule.evidence]
    return [printable(line, newlines=False) for line in lines]


def bound_lines(a: Diagnosis, b: Diagnosis) -> list[str]:
    """What a diff leads with: the bound before and after ("bound: CPU → GPU"), then each side's verdict. Two
    CPU-only traces say which kind of CPU-bound each is ("bound: CPU, overhead-bound → compute-bound")."""
    kinds = (cpu_kind(a.verdict), cpu_kind(b.verdict)) if a.bound == b.bound == "CPU" else (None, None)
    if None not in kinds:
        change = f"{kinds[0]} → {kinds[1]}" if kinds[0] != kinds[1] else f"{kinds[0]} in both"
        head = f"bound: CPU, {change}"
    else:
        head = f"bound: {a.bound} → {b.bound}" if a.bound != b.bound else f"bound: {a.bound} in both"
    return [printable(line, newlines=False) for line in (head, f"A: {a.verdict}", f"B: {b.verdict}")]
