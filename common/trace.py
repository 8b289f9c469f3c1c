"""Read exported Chrome traces: the profiler steps, what happened inside each, and what each kernel is.

Pure Python over the JSON torch.profiler writes (`.json` or `.json.gz`), no torch. GPU work
(`kernel`, `gpu_memcpy`, `gpu_memset`) belongs to the step whose CPU thread launched it, through the
`correlation` id it shares with its `cuda_runtime`/`cuda_driver` launch. Events are assigned to steps
by binary search over the step start times, so reading costs time linear in the number of events.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import math
import re
import statistics
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from common.naming import kernel_family

if TYPE_CHECKING:  # common.trace_json is imported where a trace is read: msgspec's import would slow `--help`
    from common.trace_json import Event

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass(frozen=True)
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

    @property
    def family(self) -> str:
        """The kernel family, or 'memcpy'/'memset'."""
        return kernel_family(self.name) if self.category == "kernel" else self.category.removeprefix("gpu_")


def _dims(value: object) -> tuple[int, ...] | None:
    if not (isinstance(value, list) and value):
        return None
    try:
        return _int_dims(tuple(value))
    except TypeError:  # an element that cannot be hashed, so not a number
        return None


@functools.cache
def _int_dims(dims: tuple) -> tuple[int, ...] | None:
    """`dims` as whole numbers if each is a finite number; cached, since kernels launch with few shapes."""
    ok = all(isinstance(v, (int, float)) and math.isfinite(v) for v in dims)
    return tuple(int(v) for v in dims) if ok else None


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def gpu_op(event: Event) -> GpuOp:
    """A GpuOp from one `kernel`/`gpu_memcpy`/`gpu_memset` trace event."""
    args = event.args
    if args is None:
        return GpuOp(event.cat, event.name, event.dur)
    registers, shared = _number(args.registers), _number(args.shared_memory)
    return GpuOp(
        event.cat,
        event.name,
        float(event.dur),
        _dims(args.grid),
        _dims(args.block),
        None if registers is None else int(registers),
        None if shared is None else int(shared),
        _number(args.occupancy),
    )


LAUNCH_CALLS = ("cudaLaunchKernel", "cuLaunchKernel", "cudaLaunchCooperativeKernel")  # name prefixes


@dataclass
class Step:
    """One recorded profiler step (`ProfilerStep#N`)."""

    number: int
    start_us: float
    dur_us: float
    region_us: float | None = None  # CPU time of the record_function label inside the step
    cpu_ops: Counter = field(default_factory=Counter)  # aten op name -> calls (nested ones too)
    gpu: list[GpuOp] = field(default_factory=list)  # in GPU time order
    runtime: Counter = field(default_factory=Counter)  # cudaLaunchKernel, cuLaunchKernelEx, ... -> calls

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
        """Sum of kernel, memcpy and memset durations (GPU busy time, not wall)."""
        return sum(op.us for op in self.gpu)

    def calls(self, prefix: str) -> int:
        """How many runtime/driver calls in this step have a name starting with `prefix`."""
        return sum(n for name, n in self.runtime.items() if name.startswith(prefix))

    @property
    def launches(self) -> int:
        """Kernel launches through the runtime or the driver (cudaLaunchKernel, cuLaunchKernelEx, ...)."""
        return sum(self.calls(p) for p in LAUNCH_CALLS)


@dataclass
class KernelUse:
    """One kernel name's use in a trace, per profiled step (mean over the steps)."""

    op: GpuOp  # its first launch: name, family, launch figures
    calls: float
    us: float


@dataclass
class Trace:
    """A loaded trace: its file, its steps, the label and whether it has a GPU lane."""

    path: Path
    label: str | None
    steps: list[Step]
    has_gpu: bool
    device_name: str | None
    meta: dict  # the suite's `suite` metadata (script, tag, label, dtype, flops, bytes); {} if absent
    skipped: int = 0  # events dropped for a missing, non-numeric, negative or non-finite ts/dur

    @property
    def name(self) -> str:
        """`script/tag` from the metadata, else `<folder>/<file name without .json[.gz]>`."""
        if self.meta.get("script") and self.meta.get("tag"):
            return f"{self.meta['script']}/{self.meta['tag']}"
        stem = self.path.name.removesuffix(".gz").removesuffix(".json")
        return f"{self.path.parent.name}/{stem}" if self.path.parent.name else stem

    def per_step(self, value: Callable[[Step], float | None]) -> float | None:
        """The median of `value(step)` over the profiled steps, skipping None; None if every step gives None."""
        values = [v for v in map(value, self.steps) if v is not None]
        return statistics.median(values) if values else None

    def median_counts(self, counts: Callable[[Step], Counter]) -> dict[str, float]:
        """name -> the median of `counts(step)[name]` over the steps, for every name any step has (a step
        without it counts 0): e.g. `median_counts(lambda s: s.cpu_ops)`."""
        names = {n for s in self.steps for n in counts(s)}
        return {n: statistics.median(counts(s).get(n, 0) for s in self.steps) for n in names}

    @functools.cached_property
    def typical_calls(self) -> dict[str, float]:
        """The median count per runtime/driver call name over the steps (0 where most steps make none)."""
        return self.median_counts(lambda s: s.runtime)

    def kernel_uses(self) -> dict[tuple[str, str], KernelUse]:
        """(category, name) -> how often and how long per step each kernel, memcpy and memset ran."""
        uses: dict[tuple[str, str], KernelUse] = {}
        for step in self.steps:
            for op in step.gpu:
                use = uses.setdefault((op.category, op.name), KernelUse(op, 0.0, 0.0))
                use.calls += 1
                use.us += op.us
        for use in uses.values():
            use.calls /= len(self.steps)
            use.us /= len(self.steps)
        return uses

    def extra_calls(self, step: Step) -> dict[str, int]:
        """The runtime/driver calls `step` makes beyond a typical step: what a cold first step pays for,
        such as cudaMalloc, occupancy or attribute queries."""
        typical = self.typical_calls
        return {n: int(c - typical[n]) for n, c in step.runtime.items() if c > typical[n]}

    def step_time_us(self) -> tuple[float | None, str]:
        """The time per step rates are computed from, and where it was spent: ("GPU") the median GPU busy
        time where the trace has a GPU lane, else ("CPU") the median span of the annotated region."""
        if self.has_gpu:
            return self.per_step(lambda s: s.gpu_busy_us), "GPU"
        return self.per_step(lambda s: s.region_us), "CPU"


def _correlation(event: Event) -> object:
    """The id that ties a GPU event to the runtime/driver call that launched it."""
    return None if event.args is None else event.args.correlation


class _StepFinder:
    """Which step a CPU-side timestamp falls in, by binary search over the (non-overlapping) steps."""

    def __init__(self, steps: list[Step]) -> None:
        self.steps = steps
        self.starts = [s.start_us for s in steps]
        self.ends = [s.start_us + s.dur_us for s in steps]

    def __call__(self, ts: float) -> Step | None:
        i = bisect.bisect_right(self.starts, ts) - 1
        return self.steps[i] if i >= 0 and ts <= self.ends[i] else None


KEPT = {"user_annotation", "cpu_op", *LAUNCH_CATEGORIES, *GPU_WORK}  # the categories the reader uses


class _Collector:
    """Keeps what the reader needs of each event, compactly, as the events stream past."""

    def __init__(self) -> None:
        self.ops: list[tuple[str, float]] = []  # cpu_op: (name, ts)
        self.annotations: list[tuple[str, float, float]] = []  # user_annotation: (name, ts, dur)
        self.launches: list[tuple[str, float, object]] = []  # cuda_runtime, cuda_driver: (name, ts, correlation)
        self.gpu: list[tuple[float, object, GpuOp]] = []  # (ts, correlation, op)
        self.skipped = 0
        self.names: dict[str, str] = {}  # one string object per distinct name

    def add(self, e: Event) -> None:
        cat, ts, dur = e.cat, e.ts, e.dur
        if cat not in KEPT or e.ph != "X" or e.name is None:
            return
        if not (0 <= ts < math.inf and 0 <= dur < math.inf):  # NaN (absent, not a number), infinite, negative
            self.skipped += 1
            return
        name = e.name = self.names.setdefault(e.name, e.name)
        if cat == "cpu_op":
            self.ops.append((name, ts))
        elif cat == "user_annotation":
            self.annotations.append((name, ts, dur))
        elif cat in GPU_WORK:
            self.gpu.append((ts, _correlation(e), gpu_op(e)))
        else:
            self.launches.append((name, ts, _correlation(e)))

    def trace(self, header: dict, path: Path | str, label: str | None) -> Trace:
        """Split the collected events into profiler steps; raise ValueError if there are none."""
        steps = sorted(
            (Step(int(m.group(1)), ts, dur) for name, ts, dur in self.annotations if (m := STEP_NAME.match(name))),
            key=lambda s: s.start_us,
        )
        if not steps:
            why = f" ({self.skipped} events had an unusable ts or dur)" if self.skipped else ""
            raise ValueError(
                f"{path}: no ProfilerStep#N events{why} (was it exported by a scheduled torch.profiler run?)"
            )
        meta = header.get("suite") if isinstance(header.get("suite"), dict) else {}
        step_at = _StepFinder(steps)
        if not label:
            label = meta.get("label") if isinstance(meta.get("label"), str) else None
        if not label:  # the record_function label: the most common user annotation inside the steps
            names = Counter(name for name, ts, _ in self.annotations if not STEP_NAME.match(name) and step_at(ts))
            label = names.most_common(1)[0][0] if names else None

        starts, ends, find = step_at.starts, step_at.ends, bisect.bisect_right
        for name, ts in self.ops:  # the step lookup inlined: this loop runs for most of the events
            i = find(starts, ts) - 1
            if i >= 0 and ts <= ends[i]:
                steps[i].cpu_ops[name] += 1
        for name, ts, dur in self.annotations:
            if name == label and (step := step_at(ts)) is not None:
                step.region_us = (step.region_us or 0.0) + dur
        launch_step: dict[object, Step] = {}
        for name, ts, corr in self.launches:
            if (step := step_at(ts)) is not None:
                step.runtime[name] += 1
                if corr is not None:
                    launch_step[corr] = step

        self.gpu.sort(key=lambda item: item[0])
        for ts, corr, op in self.gpu:
            step = launch_step.get(corr) if corr is not None else None
            step = step or step_at(ts)
            if step is not None:
                step.gpu.append(op)
        props = header.get("deviceProperties") or []
        first = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
        device = first.get("name") if isinstance(first.get("name"), str) else meta.get("device")
        has_gpu = bool(self.gpu or self.launches)
        return Trace(Path(path), label, steps, has_gpu, device, meta, self.skipped)


@contextlib.contextmanager
def _no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: reading makes millions of objects and no cycles, and the collector's
    passes over them would make the reading cost grow faster than the trace."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse(data: dict, path: Path | str = "<trace>", label: str | None = None) -> Trace:
    """Split a loaded trace (a dict with `traceEvents`) into its profiler steps; ValueError if it has none."""
    from common.trace_json import as_events

    collector = _Collector()
    with _no_gc():
        for event in as_events(data["traceEvents"]):
            collector.add(event)
        return collector.trace(data, path, label)


def read_trace(path: Path | str, label: str | None = None) -> Trace:
    """Read one exported trace file, streaming its events: time and memory grow linearly with its size."""
    from common.trace_json import stream_json

    collector = _Collector()
    with _no_gc():
        header = stream_json(path, collector.add)
        return collector.trace(header, path, label)
