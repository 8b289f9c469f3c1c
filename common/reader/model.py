"""What a read trace is: its profiler steps, what happened inside each, and what each kernel is.

The data model common.reader.build fills in from the JSON torch.profiler writes: a Trace holds its Steps; a Step
its CPU-side span and counts, the GPU work it launched (GpuOp: a kernel, memcpy or memset, with its launch figures)
and its Phases (the record_function labels directly inside the step's label: forward, backward, optimizer). GPU busy
is the union of the GPU work's intervals over every stream (common.reader.intervals). Pure Python, no torch.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple

from common.cli import shown
from common.reader import comms
from common.reader.calltree import CallTree
from common.reader.intervals import exposed_us, overlap_us, union_us
from common.reader.kinds import GRAPH_LAUNCHES, KERNEL_LAUNCHES, LAUNCH_APIS
from common.reader.naming import kernel_family
from common.reader.occupancy import SmLimits, theoretical_occupancy
from common.reader.roofline import ShapedOp
from common.reader.timeline import GpuTimeline, Window, WindowParts, windows

CPU_SOURCES = {  # Trace.cpu_source -> what a step's CPU time (Step.region_us) is the span of
    "suite": "the suite's record_function label",  # the label in the trace's `suite` metadata
    "region": "the record_function label named by --region",
    "step": "the ProfilerStep#N span",  # a trace the suite did not write
    "iteration": "an iteration's span (no ProfilerStep#N: from one end of its repeated labels to the next)",
    "window": "the whole profiled window",  # ... without steps
}


class Launch(NamedTuple):
    """One runtime or driver call of the CPU side (a kernel launch, a graph launch, a copy, a sync): the record that
    ties it to its GPU work (by `correlation`) and, through the call tree, to the op that made it
    (CallTree.innermost on its thread at its start). A named tuple: a trace has one per kernel."""

    name: str
    ts: float  # µs, the trace's clock
    dur: float
    correlation: int | str | None
    tid: object  # its CPU thread

    @property
    def end(self) -> float:
        return self.ts + self.dur


@dataclass(slots=True)  # not frozen: a frozen dataclass is built 5x slower, and a trace has millions of these
class GpuOp:
    """One kernel, memcpy or memset on the GPU lane, with the launch figures Perfetto's panel shows.

    The figures are None where the trace does not have them (memcpy/memset, other profilers).
    """

    category: str  # "kernel", "gpu_memcpy" or "gpu_memset"
    name: str
    us: float
    grid: tuple[int, ...] | None = None
    block: tuple[int, ...] | None = None
    registers: int | None = None  # registers per thread
    shared_bytes: int | None = None  # shared memory per block
    occupancy_pct: float | None = None  # the profiler's "est. achieved occupancy %"
    start: float | None = None  # µs, the trace's clock: when it began on the GPU
    stream: int | str | None = None  # the GPU stream it ran on (the event's tid in Kineto's traces)
    external: int | str | None = None  # the External id of the cpu_op that launched it (record_shapes' link)
    launch: Launch | None = None  # its runtime/driver launch call; None where unknown

    @property
    def family(self) -> str:
        """The kernel family, or 'memcpy'/'memset'."""
        return kernel_family(self.name) if self.category == "kernel" else self.category.removeprefix("gpu_")

    def theoretical_occupancy(self, sm: SmLimits | None) -> float | None:
        """% of the SM's warps this launch keeps resident on a GPU of limits `sm` (common.reader.occupancy); None
        for memcpy/memset, a launch without its figures, or a device without known limits."""
        if self.block is None or self.registers is None or self.shared_bytes is None:
            return None
        return theoretical_occupancy(math.prod(self.block), self.registers, self.shared_bytes, sm)


def intervals(ops: list[GpuOp]) -> list[tuple[float, float]]:
    """The (start, end) of each op that has a start time, in µs from the first start (common.reader.intervals says
    why)."""
    first = min((op.start for op in ops if op.start is not None), default=0.0)
    return [(op.start - first, op.start - first + op.us) for op in ops if op.start is not None]


def busy_us(ops: list[GpuOp]) -> float:
    """GPU busy time of `ops` (µs): the union of their intervals over every stream, the time at least one stream
    is busy (common.reader.intervals); an op without a start time adds its duration."""
    return union_us(intervals(ops)) + sum(op.us for op in ops if op.start is None)


def exposed_communication_us(ops: list[GpuOp]) -> float:
    """Communication kernel time (NCCL) during which no other GPU work (compute, memcpy, memset) ran on any stream:
    what the overlap did not hide (intervals.exposed_us); a communication op without a start time adds its duration.
    The budget's `comm_exposed` is this figure over its window."""
    comm, others = [], []
    first = min((op.start for op in ops if op.start is not None), default=0.0)
    untimed = 0.0
    for op in ops:
        is_comm = op.category == "kernel" and op.family == "communication"
        if op.start is None:
            untimed += op.us if is_comm else 0.0
            continue
        (comm if is_comm else others).append((op.start - first, op.start - first + op.us))
    return exposed_us(comm, others) + untimed if comm or untimed else 0.0


def stream_overlap_us(ops: list[GpuOp]) -> float:
    """How long two or more streams are busy at once (µs) in `ops`; 0 on one stream."""
    streams: dict[object, list[GpuOp]] = {}
    for op in ops:
        if op.start is not None:
            streams.setdefault(op.stream, []).append(op)
    if len(streams) < 2:
        return 0.0
    first = min(op.start for op in ops if op.start is not None)
    return overlap_us([(op.start - first, op.start - first + op.us) for op in group] for group in streams.values())


@dataclass
class Phase:
    """One record_function label directly inside a step's label (forward, backward, optimizer) in one step:
    the CPU span of the label, and the GPU work launched inside that span from any CPU thread."""

    name: str
    cpu_us: float = 0.0  # the span(s) of the label in this step
    kernels: int = 0
    kernel_launches: int = 0
    graph_launches: int = 0
    gpu: list[GpuOp] = field(default_factory=list)  # the GPU work it launched, in GPU time order
    cpu_ops: Counter = field(default_factory=Counter)  # aten op name -> calls inside its span, on any thread

    @property
    def launches(self) -> int:
        """Kernel launches plus CUDA graph launches."""
        return self.kernel_launches + self.graph_launches

    @property
    def gpu_busy_us(self) -> float:
        """GPU busy time of what the phase launched: the union of its kernel, memcpy and memset intervals."""
        return busy_us(self.gpu)


@functools.lru_cache(maxsize=4096)
def _starting_with(names: tuple[str, ...], prefix: str | tuple[str, ...]) -> tuple[str, ...]:
    """The `names` that start with `prefix` (Step.calls)."""
    return tuple(name for name in names if name.startswith(prefix))


@dataclass
class Step:
    """One recorded profiler step (`ProfilerStep#N`)."""

    number: int
    start_us: float
    dur_us: float
    region_us: float | None = None  # CPU time: the span of the timed label in the step, else the step's own span
    cpu_ops: Counter = field(default_factory=Counter)  # aten op name -> calls (nested ones too)
    gpu: list[GpuOp] = field(default_factory=list)  # in GPU time order
    runtime: Counter = field(default_factory=Counter)  # cudaLaunchKernel, cuLaunchKernelEx, ... -> calls
    phases: dict[str, Phase] = field(default_factory=dict)  # in order of first appearance
    captured: Counter = field(default_factory=Counter)  # kernel launch calls made during stream capture -> calls
    syncs: list[Launch] = field(default_factory=list)  # its SYNC_CALLS, in time order
    # Its window on its trace's GPU timeline and what the GPU did in it (None: nothing ran), where Trace placed it;
    # None for a step on its own.
    window: Window | None = field(default=None, repr=False, compare=False)
    on_gpu: WindowParts | None = field(default=None, repr=False, compare=False)

    def _of(self, category: str) -> list[GpuOp]:
        return [op for op in self.gpu if op.category == category]

    @property
    def kernels(self) -> list[GpuOp]:
        return self._of("kernel")

    @property
    def memcpy(self) -> list[GpuOp]:
        return self._of("gpu_memcpy")

    @property
    def memset(self) -> list[GpuOp]:
        return self._of("gpu_memset")

    @property
    def gpu_busy_us(self) -> float:
        """GPU busy time: the time at least one stream runs a kernel, memcpy or memset (the union of their
        intervals over every stream, not wall time). Placed on its trace's timeline (`window`), of every GPU op in the
        step's window, whoever launched it (`on_gpu`); a step on its own, of its ops. Kept once found (the summary's
        tables and figures each ask for it), while `gpu` is the same list of the same length."""
        ops, kept = self.gpu, self.__dict__.get("_busy")
        if kept is not None and kept[0] is ops and kept[1] == len(ops):
            return kept[2]
        if self.window is not None:
            busy = (self.on_gpu.busy if self.on_gpu is not None else 0.0) + sum(op.us for op in ops if op.start is None)
        else:
            busy = busy_us(ops)
        self._busy = (ops, len(ops), busy)
        return busy

    @property
    def gpu_sum_us(self) -> float:
        """The sum of kernel, memcpy and memset durations over every stream (more than busy where streams overlap)."""
        return sum(op.us for op in self.gpu)

    @property
    def streams(self) -> set:
        """The GPU streams this step's work ran on."""
        return {op.stream for op in self.gpu}

    @property
    def stream_overlap_us(self) -> float:
        """How long two or more streams were busy at once in this step (0 on one stream)."""
        return stream_overlap_us(self.gpu)

    @property
    def exposed_communication_us(self) -> float:
        """Communication kernel time (NCCL) during which no other GPU work ran on any stream: what the overlap with
        the backward did not hide (exposed_communication_us)."""
        if self.window is not None:
            parts = self.on_gpu
            return parts.busy - parts.others if parts is not None and parts.comm else 0.0
        return exposed_communication_us(self.gpu)

    def calls(self, prefix: str | tuple[str, ...]) -> int:
        """How many runtime/driver calls in this step have a name starting with `prefix` (or one of them). Which
        names match is worked out once per set of names: the steps of a trace mostly make the same calls."""
        runtime = self.runtime
        return sum(map(runtime.__getitem__, _starting_with(tuple(runtime), prefix)))

    @property
    def launches(self) -> int:
        """Kernel launches through the runtime or the driver, CUDA or HIP (cudaLaunchKernel, cuLaunchKernelEx,
        hipLaunchKernel, ...); CUDA graph launches are counted apart, in graph_launches."""
        return self.calls(KERNEL_LAUNCHES)

    @property
    def graph_launches(self) -> int:
        """CUDA (or HIP) graph launches: each replays a whole graph of kernels."""
        return self.calls(GRAPH_LAUNCHES)

    def launch_apis(self) -> Counter:
        """Kernel launches per launch API (LAUNCH_APIS: cudaLaunchKernel, cuLaunchKernelEx, hipLaunchKernel, ...);
        they add up to `launches`."""
        apis: Counter = Counter()
        for name, n in self.runtime.items():
            api = next((api for api in LAUNCH_APIS if name.startswith(api)), None)
            if api is not None:
                apis[api] += n
        return apis

    @property
    def captured_launches(self) -> int:
        """Kernel launch calls made while a stream was being captured: recorded into a graph, nothing ran."""
        return sum(self.captured.values())

    def phase(self, name: str) -> Phase:
        """The figures of phase `name` in this step (all zero if this step has no such label)."""
        return self.phases.get(name) or Phase(name)


@dataclass
class KernelUse:
    """One kernel name's use in a trace, per profiled step (mean over the steps)."""

    op: GpuOp  # its first launch: name, family, launch figures
    calls: float
    us: float


@dataclass(kw_only=True)  # built by keyword: a trace has 19 fields
class Trace:
    """A loaded trace: its file, its steps, the label and whether it has a GPU lane."""

    path: Path
    label: str | None  # the record_function label the CPU column times (the suite's, or --region); else None
    steps: list[Step]
    has_gpu: bool
    device_name: str | None
    meta: dict  # the suite's `suite` metadata (script, tag, label, dtype, flops, bytes); {} if absent
    skipped: int = 0  # events dropped for a missing, non-numeric, negative, non-finite or absurd ts/dur
    notes: list[str] = field(default_factory=list)  # how the steps were found, what was left out or guessed
    whole_trace: bool = False  # no ProfilerStep#N events: the one step is the whole trace
    empty_steps: int = 0  # ProfilerStep#N spans set aside for holding (almost) none of the work: the whole trace read
    distributed: dict = field(default_factory=dict)  # the trace's distributedInfo (rank, world_size, backend)
    sm: SmLimits | None = None  # the device's per-SM limits, for theoretical occupancy
    phases: list[str] = field(default_factory=list)  # the labels inside the step label, in order
    cpu_source: str = "step"  # what the CPU column measures (Step.region_us): a key of CPU_SOURCES
    phase_parent: str | None = None  # the label the phases sit inside; None: directly inside the steps
    gpu_activity: bool = True  # False: runtime calls but no GPU event (kernel, memcpy, memset) in the whole trace
    shapes: dict[object, ShapedOp] = field(default_factory=dict)  # External id -> a GEMM/attention op's shapes
    tree: CallTree = field(default_factory=lambda: CallTree({}))  # every CPU event, nested (common.reader.calltree)
    gpu: list[GpuOp] = field(default_factory=list)  # every timed GPU op of the trace, in or out of the steps
    devices: list[str] = field(default_factory=list)  # devices whose events the reader does not model (MTIA)
    broken_links: bool = False  # an External id named an op not around its launch (build._Collector.relink)
    # each call of a GEMM, attention or convolution op with shapes: (ts, dur, tid, its shapes), in time order
    shaped_calls: list[tuple[float, float, object, ShapedOp]] = field(default_factory=list)
    collectives: list[comms.Collective] = field(default_factory=list)  # in issue order (common.reader.comms)
    # the profiler's own time on the host (Kineto's `overhead` events: CUPTI's buffer requests, its instrumenting of a
    # module on a kernel's first launch): (start, end, name), in time order
    profiler_overhead: list[tuple[float, float, str]] = field(default_factory=list)

    def __post_init__(self) -> None:
        """Place the steps on the GPU timeline (Step.window, Step.on_gpu), where the reader gave the trace's GPU ops:
        each step's busy time is then its window's, from one sweep over the timeline."""
        if self.gpu:
            parts = self.timeline.windows([(w.start, w.end) for w in self.windows])
            for step, window, on_gpu in zip(self.steps, self.windows, parts, strict=True):
                step.window, step.on_gpu = window, on_gpu

    @functools.cached_property
    def timeline(self) -> GpuTimeline:
        """The GPU's timeline: every GPU op of the trace and their union over the streams, built once (of the
        steps' ops, where the trace was made without its `gpu`)."""
        return GpuTimeline(self.gpu or [op for step in self.steps for op in step.gpu])

    @functools.cached_property
    def windows(self) -> list[Window]:
        """Each step's window on the GPU timeline; they tile it (common.reader.timeline.windows), the last one not
        past the end of what the trace recorded (its last CPU event or GPU op)."""
        return windows(self.steps, self._recorded_until)

    def _recorded_until(self) -> float:
        """The end of what the trace recorded: its last CPU event's end or GPU op's (math.inf where it has none)."""
        ends = [max(layer.ends) for thread in self.tree.threads.values() for layer in thread.layers.values() if layer]
        reach = self.timeline.reach
        return max([*ends, reach[-1] + self.timeline.origin] if reach else ends, default=math.inf)

    @property
    def cpu_what(self) -> str:
        """What this trace's CPU column is the span of, in words: "record_function 'fwd' (the suite's label)",
        "the ProfilerStep#N span", ..."""
        if self.cpu_source == "suite":
            return f"record_function {self.label!r} (the suite's label)"
        if self.cpu_source == "region":
            return f"record_function {self.label!r} (--region)"
        return CPU_SOURCES[self.cpu_source]

    @property
    def rank(self) -> int | None:
        """The rank of a distributed run's trace (distributedInfo), else None."""
        rank = self.distributed.get("rank")
        return rank if isinstance(rank, int) and not isinstance(rank, bool) else None

    @property
    def name(self) -> str:
        """`script/tag` from the metadata, else `<folder>/<file name without .json[.gz]>`; its control characters
        escaped (`shown`): the name is printed."""
        if self.meta.get("script") and self.meta.get("tag"):
            return shown(f"{self.meta['script']}/{self.meta['tag']}")
        stem = self.path.name.removesuffix(".gz").removesuffix(".json")
        return shown(f"{self.path.parent.name}/{stem}" if self.path.parent.name else stem)

    def per_step(self, value: Callable[[Step], float | None]) -> float | None:
        """The median of `value(step)` over the profiled steps, skipping None; None if every step gives None. Of an
        even count, the value of the later of the two middle steps (median_of): one step's own figure."""
        values = [v for v in map(value, self.steps) if v is not None]
        return median_of(values) if values else None

    def median_counts(self, counts: Callable[[Step], Counter]) -> dict[str, float]:
        """name -> the median of `counts(step)[name]` over the steps, for every name any step has (a step
        without it counts 0): e.g. `median_counts(lambda s: s.cpu_ops)`."""
        names = {n for s in self.steps for n in counts(s)}
        return {n: median_of([counts(s).get(n, 0) for s in self.steps]) for n in names}

    @functools.cached_property
    def typical_calls(self) -> dict[str, float]:
        """The median count per runtime/driver call name over the steps (0 where most steps make none)."""
        return self.median_counts(lambda s: s.runtime)

    def kernel_uses(self) -> dict[tuple[str, str], KernelUse]:
        """(category, name) -> how often and how long per step each kernel, memcpy and memset ran. Found once (the
        diagnosis and the kernel table both read it), while the trace has as many steps; do not change it."""
        kept = self.__dict__.get("_uses")
        if kept is not None and kept[0] is self.steps and kept[1] == len(self.steps):
            return kept[2]
        uses: dict[tuple[str, str], KernelUse] = {}
        for step in self.steps:
            for op in step.gpu:
                use = uses.get((op.category, op.name))
                if use is None:  # its first launch
                    use = uses[op.category, op.name] = KernelUse(op, 0.0, 0.0)
                use.calls += 1
                use.us += op.us
        for use in uses.values():
            use.calls /= len(self.steps)
            use.us /= len(self.steps)
        self._uses = (self.steps, len(self.steps), uses)
        return uses

    def extra_calls(self, step: Step) -> dict[str, int]:
        """The runtime/driver calls `step` makes beyond a typical step: what a cold first step pays for,
        such as cudaMalloc, occupancy or attribute queries."""
        typical = self.typical_calls
        return {n: int(c - typical[n]) for n, c in step.runtime.items() if c > typical[n]}

    def step_time_us(self) -> tuple[float | None, str]:
        """The time per step rates are computed from, and where it was spent: ("GPU") the median GPU busy
        time where the trace has a GPU lane, else ("CPU") the median CPU time (Trace.cpu_source)."""
        if self.has_gpu:
            return (self.per_step(lambda s: s.gpu_busy_us) if self.gpu_activity else None), "GPU"
        return self.per_step(lambda s: s.region_us), "CPU"


def median_index(values: list) -> int:
    """The index of the median of `values` (in step order): of an even count, the later of the two middle ones,
    since a first step more often pays for start-up. One step's own figure: the mean of two described neither
    step (of 2 steps), and gave counts no step had (1.5 kernels)."""
    ranked = sorted(range(len(values)), key=values.__getitem__)  # stable: equal values stay in step order, in C
    middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
    return max(middle)


def median_of(values: list):
    """`values[median_index(values)]`: the median, one step's own value."""
    return values[median_index(values)]
