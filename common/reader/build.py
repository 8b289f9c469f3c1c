"""Read exported Chrome traces into common.reader.model's Trace: find the profiler steps and what happened in each.

Pure Python over the JSON torch.profiler writes (`.json` or `.json.gz`), no torch. GPU work
(`kernel`, `gpu_memcpy`, `gpu_memset`) belongs to the step whose CPU side launched it, on any thread and
any stream, through the `correlation` id it shares with its `cuda_runtime`/`cuda_driver` launch (a kernel
replayed from a CUDA graph carries its cudaGraphLaunch's id). Work launched outside the profiled steps is
counted in no step, and the trace's notes say how much was left out; only a trace without any
correlation id has its GPU work placed by time, and its notes say so. A trace without ProfilerStep#N
events (a bare `with profile()`) is one step over the whole trace. GPU busy is the union of the GPU work's
intervals over every stream (common.reader.intervals). A step's CPU time is the span of a record_function label
only where the suite wrote it (its metadata) or the reader names it (`region`), else the step's own span.
Within a step, the record_function labels directly inside that label (or inside the one label that wraps
each step's work, or inside the step) are its phases (forward, backward, optimizer). Launches, GPU work
and labels are assigned to steps by binary search over the step start times; the CPU ops, most of a trace,
are sorted by time once (they are mostly written in time order, so that is near linear) and each step's ops
counted as one slice. Reading costs time about linear in the number of events, and keeps no object per CPU op.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import gc
import math
import re
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from common.reader import comms
from common.reader.model import (
    CAPTURE_BEGIN,
    CAPTURE_END,
    COMPILER_LABELS,
    GPU_WORK,
    GRAPH_LAUNCHES,
    KERNEL_LAUNCHES,
    LAUNCH_CATEGORIES,
    SYNC_CALLS,
    GpuOp,
    Phase,
    Step,
    Trace,
)
from common.reader.occupancy import sm_limits
from common.reader.roofline import SHAPED_OPS, ShapedOp
from common.units import human_time

if TYPE_CHECKING:  # common.reader.trace_json is imported where a trace is read: msgspec's import would slow `--help`
    from common.reader.trace_json import Args, Event, GpuArgs


STEP_NAME = re.compile(r"^ProfilerStep#(\d{1,18})$")  # a longer number is not a step the profiler wrote
LONGEST_US = 1e15  # a duration beyond 31 years is not a measurement: the event is skipped
FLOAT_MAX = sys.float_info.max
NUMBERS = (int, float)  # what JSON numbers decode to (bool is its own type, so it is not one)


def _finite(value: object) -> bool:
    """A finite float, or an int a float can hold (a 400-digit one cannot: it is not a figure)."""
    kind = type(value)
    return kind is float and math.isfinite(value) or kind is int and -FLOAT_MAX <= value <= FLOAT_MAX


def _dims(value: object) -> tuple[int, ...] | None:
    if not (type(value) is list and value):
        return None
    try:  # the cache's key holds each element's type too: True == 1 as a key, yet only 1 is a dimension
        return _int_dims(tuple(value), tuple(map(type, value)))
    except TypeError:  # an element that cannot be hashed, so not a number
        return None


@functools.cache
def _int_dims(dims: tuple, _types: tuple) -> tuple[int, ...] | None:
    """`dims` as whole numbers if each is a finite number; cached, since kernels launch with few shapes."""
    return tuple(int(v) for v in dims) if all(_finite(v) for v in dims) else None


def _number(value: object) -> float | None:
    return float(value) if _finite(value) else None


def _count(value: object) -> int | None:
    """A whole count (registers, bytes): an int as it is, a finite float cut to one, else None."""
    if type(value) is int:
        return value
    return int(value) if type(value) is float and math.isfinite(value) else None


def gpu_op(event: Event, args: Args | None) -> GpuOp:
    """A GpuOp from one `kernel`/`gpu_memcpy`/`gpu_memset` trace event and its loosely decoded `args`
    (trace_json.args_of): each figure kept where it has a usable type, else None."""
    if args is None:
        return GpuOp(event.cat, event.name, event.dur, start=_number(event.ts), stream=_id(event.tid))
    return GpuOp(
        event.cat,
        event.name,
        float(event.dur),
        _dims(args.grid),
        _dims(args.block),
        _count(args.registers),
        _count(args.shared_memory),
        _number(args.occupancy),
        start=_number(event.ts),
        stream=_id(event.tid),
        external=_id(args.external if args.external is not None else args.external_2021),
    )


def typed_gpu_op(event: Event, args: GpuArgs, dims: dict[tuple, tuple]) -> GpuOp:
    """gpu_op's GpuOp from args msgspec typed whole (trace_json.typed_args): the same figures with no check left.
    Each grid and block is the one tuple of its value in `dims` (gpu_op's tuples are shared the same way)."""
    grid, block = args.grid, args.block
    return GpuOp(
        event.cat,
        event.name,
        event.dur,
        (dims.setdefault(grid, grid) or None) if grid is not None else None,
        (dims.setdefault(block, block) or None) if block is not None else None,
        args.registers,
        args.shared_memory,
        args.occupancy,
        start=_number(event.ts),
        stream=_id(event.tid),
        external=args.external if args.external is not None else args.external_2021,
    )


ID_TYPES = (int, str)


def _id(value: object) -> int | str | None:
    """A thread or correlation id: the value if it is a number or text, else None."""
    return value if type(value) in ID_TYPES else None  # JSON's own types: a bool is not an int here


def _correlation(args: Args | None) -> int | str | None:
    """The id in an event's decoded `args` that ties a GPU event to the runtime/driver call that launched it."""
    return None if args is None else _id(args.correlation)


KEPT = {"user_annotation", "cpu_op", *LAUNCH_CATEGORIES, *GPU_WORK}  # the categories the reader uses
# Kineto's first schema (torch 1.8-1.9, 2021, the TensorBoard plugin's era: libkineto/src/output_json.cpp wrote
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset"; ProfilerStep#N and record_function labels were Operators
# too), read as today's categories. An Operator whose name has no "::" (aten::, c10d::, autograd::...) is a
# record_function label, what today's traces call user_annotation.
OLD_CATEGORIES = {"Runtime": "cuda_runtime", "Kernel": "kernel", "Memcpy": "gpu_memcpy", "Memset": "gpu_memset"}


class _Spans:
    """Non-overlapping CPU-side spans (the steps, or the phases) and what each one is. Called with a timestamp,
    it gives what the span the timestamp falls in is: the latest span starting at or before it, if that one has
    not ended, by binary search over the starts."""

    def __init__(self, spans: list[tuple[float, float, Step | Phase]]) -> None:
        spans = sorted(spans, key=lambda span: span[0])
        self.starts = [start for start, _, _ in spans]
        self.ends = [end for _, end, _ in spans]
        self.items = [item for _, _, item in spans]

    def __call__(self, ts: float) -> Step | Phase | None:
        i = bisect.bisect_right(self.starts, ts) - 1
        return self.items[i] if i >= 0 and ts <= self.ends[i] else None

    def slices(self, times: list[float]) -> list[tuple[int, int]]:
        """For each span in turn, the range [lo, hi) of the sorted `times` that __call__ places in it."""
        if not self.starts:
            return []
        los = [bisect.bisect_left(times, start) for start in self.starts]
        his = [bisect.bisect_right(times, end) for end in self.ends]
        return [(lo, min(hi, next_lo)) for lo, hi, next_lo in zip(los, his, [*los[1:], len(times)], strict=True)]


class _Collector:
    """Keeps what the reader needs of each event, compactly, as the events stream past."""

    def __init__(self) -> None:
        self.op_names: list[str] = []  # cpu_op events, most of a trace: names and starts in two flat lists
        self.op_ts: list[float] = []
        self.op_dur: list[float] = []
        self.ops_end = -math.inf  # the last cpu_op's end
        self.annotations: list[tuple[str, float, float, object]] = []  # user_annotation: (name, ts, dur, tid)
        self.launches: list[tuple] = []  # cuda_runtime, cuda_driver: (name, ts, dur, corr, tid)
        self.gpu: list[tuple[float, object, GpuOp]] = []  # (ts, correlation, op)
        self.skipped = 0
        self.names: dict[str, str] = {}  # one string object per distinct name
        self.shapes: dict[object, ShapedOp] = {}  # External id -> shapes, for the ops in SHAPED_OPS only
        self.distinct_shapes: dict[tuple, ShapedOp] = {}
        self.iteration_mark: str | None = None  # a trace without steps: the label that ends each iteration found
        self.comms: list[comms.Collective] = []  # record_param_comms and c10d ops (common.reader.comms)
        from common.reader import trace_json

        self.args_of, self.decoded, self.raw_key = trace_json.args_of, trace_json.decoded, trace_json.raw_key
        self.typed_args, self.dims = trace_json.typed_args, {}  # dims: one tuple per grid or block value
        self.gpu_args, self.launch_args = trace_json.GPU_ARGS_DECODER, trace_json.LAUNCH_ARGS_DECODER

    def add(self, events: list[Event]) -> None:
        """Keep what the reader uses of a run of events (metadata and other non-`X` events it does not use).
        One loop over the run, not a call per event: this is where a trace's millions of events pass."""
        names, op_names, op_ts, op_dur, inf = self.names, self.op_names, self.op_ts, self.op_dur, math.inf
        args_of = self.args_of
        typed_args, gpu_args, launch_args, dims = self.typed_args, self.gpu_args, self.launch_args, self.dims
        ops_end, skipped = self.ops_end, 0
        for e in events:
            cat, ts, dur = e.cat, e.ts, e.dur
            if cat not in KEPT:
                if cat == "Operator" and e.name is not None:
                    cat = "cpu_op" if "::" in e.name else "user_annotation"
                else:
                    cat = OLD_CATEGORIES.get(cat)  # type: ignore[arg-type]
                if cat is None:
                    continue
                e.cat = cat
            if e.ph != "X" or e.name is None:
                continue
            if not (0 <= ts < inf and 0 <= dur < LONGEST_US):  # NaN (absent, not a number), infinite, negative, absurd
                skipped += 1
                continue
            name = names.setdefault(e.name, e.name)
            if cat == "cpu_op":
                op_names.append(name)
                op_ts.append(ts)
                op_dur.append(dur)
                if ts + dur > ops_end:
                    ops_end = ts + dur
                if name in SHAPED_OPS and (args := args_of(e.args)) is not None and args.dims is not None:
                    self.shaped(name, args)
                elif name in comms.ISSUE_OPS:  # a collective; its args decoded where they are record_param_comms'
                    args = args_of(e.args) if name == comms.ISSUE_OP else None
                    if (issued := comms.issued(name, ts, dur, _id(e.tid), args)) is not None:
                        self.comms.append(issued)
            elif cat == "user_annotation":
                self.annotations.append((name, ts, dur, _id(e.tid)))
            elif cat in GPU_WORK:
                e.name = name
                typed = typed_args(e.args, gpu_args)
                if typed is not None:
                    self.gpu.append((ts, typed.correlation, typed_gpu_op(e, typed, dims)))
                else:
                    args = args_of(e.args)
                    self.gpu.append((ts, _correlation(args), gpu_op(e, args)))
            else:
                typed = typed_args(e.args, launch_args)
                corr = typed.correlation if typed is not None else _correlation(args_of(e.args))
                self.launches.append((name, ts, dur, corr, _id(e.tid)))
        self.ops_end, self.skipped = ops_end, self.skipped + skipped

    def shaped(self, name: str, args: object) -> None:
        """Keep a GEMM or attention op's shapes by its External id (the kernels it launched carry that id). Ops of
        the same name and arguments share one ShapedOp, decoded once: a loop repeats a few shapes many times."""
        ext, key_of = args.external, self.raw_key
        if _id(ext) is None:
            return
        types, concrete = args.types, args.concrete
        key = (
            name,
            key_of(args.dims),
            None if types is None else key_of(types),
            None if concrete is None else key_of(concrete),
        )
        op = self.distinct_shapes.get(key)
        if op is None:
            get = self.decoded
            op = self.distinct_shapes[key] = ShapedOp(name, get(args.dims), get(args.types), get(args.concrete))
        self.shapes[ext] = op

    def steps(self, path: Path | str, find_iterations: bool = True) -> tuple[list[Step], bool]:
        """The ProfilerStep#N steps in time order; else the iterations its repeated labels give (`iterations`),
        where `find_iterations`; else one step over the whole trace (True). A trace the suite wrote is not searched:
        the harness checks it per call of its own label."""
        steps = sorted(
            (Step(int(m.group(1)), ts, dur) for name, ts, dur, _ in self.annotations if (m := STEP_NAME.match(name))),
            key=lambda s: s.start_us,
        )
        if steps:
            return steps, False
        spans = [(ts, ts + dur) for _, ts, dur, *_ in (*self.annotations, *self.launches)]
        spans += [(min(self.op_ts), self.ops_end)] if self.op_ts else []
        spans = spans or [(ts, ts + op.us) for ts, _, op in self.gpu]
        if not spans:
            why = f" ({self.skipped} events had an unusable ts or dur)" if self.skipped else ""
            raise ValueError(f"{path}: no profiler events{why} (was it exported by torch.profiler?)")
        start = min(s for s, _ in spans)
        found = self.iterations(start) if find_iterations else None
        if found:
            return found, False
        return [Step(0, start, max(e for _, e in spans) - start)], True

    def iterations(self, start: float) -> list[Step] | None:
        """The iterations of a trace without ProfilerStep#N, where its top-level labels repeat: on the thread with
        the most labels, the sequence of labels not nested in another (torch's own `Optimizer.step#AdamW.step` and
        `Optimizer.zero_grad#…` count, compiler labels do not) that is one pattern two or more times over. Iteration
        k runs from the end of the pattern's last label in iteration k-1 (the first: from the trace's start) to its
        end in iteration k, so what runs between two (a DataLoader's next batch) is in an iteration. None where no
        pattern repeats: the trace stays one window. The pattern's last label is kept in `self.iteration_mark`."""
        self.iteration_mark = None
        by_tid: dict[object, list[tuple[float, float, str]]] = {}
        for name, ts, dur, tid in self.annotations:
            if not name.startswith(COMPILER_LABELS):
                by_tid.setdefault(tid, []).append((ts, -dur, name))
        if not by_tid:
            return None
        labels = sorted(max(by_tid.values(), key=len))
        top, last_end = [], -math.inf
        for ts, neg_dur, name in labels:
            if ts >= last_end:  # not nested in the label before it
                top.append((ts, ts - neg_dur, name))
                last_end = ts - neg_dur
        names = [name for _, _, name in top]
        period = next((p for p in range(1, len(names) // 2 + 1)
                       if len(names) % p == 0 and names == names[:p] * (len(names) // p)), None)  # fmt: skip
        if period is None:
            return None
        ends = [end for _, end, _ in top[period - 1 :: period]]
        self.iteration_mark = names[period - 1]
        bounds = [start, *ends]
        return [Step(k + 1, bounds[k], bounds[k + 1] - bounds[k]) for k in range(len(ends))]

    def count_ops(self, step_at: _Spans, phase_at: _Spans) -> tuple[list[float], list[str], list[float]]:
        """Count the cpu_ops of each step and of each phase. Sorted by start time once, each step's ops are one
        slice of the list, counted by Counter in C: no Python work per event. The starts, names and durations in
        time order."""
        ts, names, durs = sorted(self.op_ts), self.op_names, self.op_dur
        if ts != self.op_ts:  # not written in time order: put the names in the same order as the times
            order = sorted(range(len(self.op_ts)), key=self.op_ts.__getitem__)
            names, durs = [names[i] for i in order], [durs[i] for i in order]
        in_ts: list[float] = []  # the ops inside some step, in time order
        in_names: list[str] = []
        for step, (lo, hi) in zip(step_at.items, step_at.slices(ts), strict=True):
            step.cpu_ops.update(names[lo:hi])
            if phase_at.items:
                in_ts += ts[lo:hi]
                in_names += names[lo:hi]
        for phase, (lo, hi) in zip(phase_at.items, phase_at.slices(in_ts), strict=True):
            phase.cpu_ops.update(in_names[lo:hi])
        return ts, names, durs

    def children(self, outer: list[tuple[float, float, object]], skip: str | None) -> dict[tuple, list]:
        """The labels directly inside each span of `outer` ((start, end, tid), sorted; tid None: any thread),
        each thread apart: (span index, tid) -> [(start, -duration, name)] of its top-level labels, in time order.
        Steps, the label `skip` itself and torch.compile's own annotations are no labels here."""
        starts = [start for start, _, _ in outer]
        inside: dict[tuple, list[tuple[float, float, str]]] = {}
        for name, ts, dur, tid in self.annotations:
            if name == skip or STEP_NAME.match(name) or name.startswith(COMPILER_LABELS):
                continue
            i = bisect.bisect_right(starts, ts) - 1
            if i >= 0 and ts + dur <= outer[i][1] and outer[i][2] in (None, tid):
                inside.setdefault((i, tid), []).append((ts, -dur, name))
        top: dict[tuple, list] = {}
        for key, labels in inside.items():
            last_end = -math.inf
            for ts, neg_dur, name in sorted(labels):
                if ts >= last_end:  # not nested in the label before it
                    top.setdefault(key, []).append((ts, neg_dur, name))
                    last_end = ts - neg_dur
        return top

    def outline(self, steps: list[Step], whole: bool) -> tuple[str | None, list[tuple[float, float, object]]]:
        """Where a step's phases are, without a named label: inside the one label that wraps every step's work
        (train_step, if each step holds that label alone), else directly inside the steps. (that label or None,
        its spans or the steps' spans as (start, end, tid))."""
        tids = {(ts, dur): tid for name, ts, dur, tid in self.annotations if STEP_NAME.match(name)}
        outer = [(s.start_us, s.start_us + s.dur_us, None if whole else tids.get((s.start_us, s.dur_us)))
                 for s in steps]  # fmt: skip
        tops = self.children(outer, None)
        names = {name for labels in tops.values() for _, _, name in labels}
        if len(names) == 1 and all(len(labels) == 1 for labels in tops.values()):
            [wrapper] = names
            return wrapper, self.spans_of(wrapper)
        return None, outer

    def spans_of(self, label: str) -> list[tuple[float, float, object]]:
        """Every span of the record_function `label`, as (start, end, tid), in time order."""
        return sorted((ts, ts + dur, tid) for name, ts, dur, tid in self.annotations if name == label)

    def phase_spans(
        self, outer: list[tuple[float, float, object]], label: str | None, step_at: _Spans
    ) -> list[tuple[float, float, Phase]]:
        """The record_function labels directly inside each span of `outer` ((start, end, tid): the spans of
        `label`, or the steps) on its thread: (start, end, phase), one Phase per step and name, its CPU time
        summed over its spans."""
        spans: list[tuple[float, float, Phase]] = []
        for labels in self.children(outer, label).values():
            for ts, neg_dur, name in labels:
                step = step_at(ts)
                if step is None:
                    continue  # outside the steps
                phase = step.phases.setdefault(name, Phase(name))
                phase.cpu_us += -neg_dur
                spans.append((ts, ts - neg_dur, phase))
        return spans

    def capture_windows(self) -> Callable[[object, float], bool] | None:
        """Where CUDA (or HIP) stream capture records instead of launching: per CPU thread, the spans from a
        cudaStreamBeginCapture to its cudaStreamEndCapture (nested captures on one thread count as one; one never
        ended lasts to the end). A function (thread, time) -> captured?, or None for a trace without capture."""
        calls = sorted((ts, name.startswith(CAPTURE_BEGIN), ts + dur, tid) for name, ts, dur, _, tid in self.launches
                       if name.startswith(CAPTURE_BEGIN + CAPTURE_END))  # fmt: skip
        if not calls:
            return None
        windows: dict[object, list[list[float]]] = {}
        depth: Counter = Counter()
        for ts, begins, end, tid in calls:
            if begins:
                depth[tid] += 1
                if depth[tid] == 1:
                    windows.setdefault(tid, []).append([ts, math.inf])
            elif depth[tid] > 0:
                depth[tid] -= 1
                if depth[tid] == 0:
                    windows[tid][-1][1] = end
        spans = {tid: _Spans([(start, end, None) for start, end in w]) for tid, w in windows.items()}

        def captured(tid: object, ts: float) -> bool:
            at = spans.get(tid)
            if at is None:
                return False
            i = bisect.bisect_right(at.starts, ts) - 1
            return i >= 0 and ts <= at.ends[i]

        return captured

    def trace(self, header: dict, path: Path | str, region: str | None) -> Trace:
        """Split the collected events into profiler steps (one step over the whole trace if it has none). The CPU
        column is the span of `region` (--region) where named, else of the suite's label (its metadata), else
        the step's own span (the whole profiled window where there are no steps)."""
        meta = header.get("suite") if isinstance(header.get("suite"), dict) else {}
        steps, whole = self.steps(path, find_iterations=not meta)  # the suite's own: per call of its label
        notes = [meta["stopped"]] if isinstance(meta.get("stopped"), str) and meta["stopped"] else []  # Ctrl-C
        step_at = _Spans([(s.start_us, s.start_us + s.dur_us, s) for s in steps])
        label = region or (meta.get("label") if isinstance(meta.get("label"), str) and meta.get("label") else None)
        if whole:
            notes.append("no ProfilerStep#N events (no schedule?) and no repeated labels: the whole trace is "
                         "summarised as one window, its figures per window")  # fmt: skip
        elif self.iteration_mark is not None:
            notes.append(f"no ProfilerStep#N events (no schedule?): {len(steps)} iterations found by their "
                         f"repeated labels, each ending with {self.iteration_mark!r}; the figures are per "
                         "iteration")  # fmt: skip
        if label:
            cpu = "region" if region else "suite"
            outer, parent = self.spans_of(label), label
        else:
            cpu = "window" if whole else "iteration" if self.iteration_mark is not None else "step"
            parent, outer = self.outline(steps, whole)
            for step in steps:
                step.region_us = step.dur_us
        spans = self.phase_spans(outer, parent, step_at)
        phase_at = _Spans(spans)

        *cpu_starts, cpu_durs = self.count_ops(step_at, phase_at)
        if label:
            for name, ts, dur, _ in self.annotations:
                if name == label and (step := step_at(ts)) is not None:
                    step.region_us = (step.region_us or 0.0) + dur
            if region and all(step.region_us is None for step in steps):
                notes.append(f"record_function {region!r} (--region) is in no profiled step: no CPU figure")
        launch_step: dict[object, Step] = {}
        launch_of: dict[object, tuple] = {}
        launch_phase: dict[object, Phase] = {}
        launched_outside: dict[object, float] = {}
        starts, ends, items, find = step_at.starts, step_at.ends, step_at.items, bisect.bisect_right
        capturing = self.capture_windows()
        for launch in self.launches:  # the step lookup inlined: a launch per kernel
            name, ts, _, corr, tid = launch
            i = find(starts, ts) - 1
            if i < 0 or ts > ends[i]:
                if corr is not None:
                    launched_outside[corr] = ts
                continue
            step = items[i]
            if capturing and name.startswith(KERNEL_LAUNCHES) and capturing(tid, ts):
                step.captured[name] += 1  # recorded into a graph: nothing runs
                continue
            step.runtime[name] += 1
            if name in SYNC_CALLS:
                step.syncs.append(launch)
            phase = phase_at(ts) if spans else None
            if phase is not None:
                phase.kernel_launches += name.startswith(KERNEL_LAUNCHES)
                phase.graph_launches += name.startswith(GRAPH_LAUNCHES)
            if corr is not None:
                launch_step[corr] = step
                launch_of[corr] = launch
                if phase is not None:
                    launch_phase[corr] = phase

        self.gpu.sort(key=lambda item: item[0])
        by_time = not any(corr is not None for _, corr, _ in self.gpu)
        if by_time and self.gpu:
            notes.append("no correlation ids: GPU work is placed in the step its start time falls in (a guess)")
        left_out: list[tuple[object, GpuOp]] = []
        for ts, corr, op in self.gpu:
            step = step_at(ts) if by_time else launch_step.get(corr)
            if step is None:
                if step_at(ts) is not None:  # ran inside a step, launched outside every step
                    left_out.append((corr, op))
                continue
            step.gpu.append(op)
            op.launch = launch_of.get(corr)
            phase = launch_phase.get(corr)
            if phase is not None:
                phase.gpu.append(op)
                phase.kernels += op.category == "kernel"
        if left_out:
            first = steps[0].start_us
            known = [launched_outside[corr] for corr, _ in left_out if corr in launched_outside]
            unknown = len(left_out) - len(known)
            us = human_time(sum(op.us for _, op in left_out))
            if not known:  # no launch record at all: where they were launched is not in the trace
                notes.append(
                    f"{len(left_out)} GPU ops ({us}) ran during the profiled steps with no launch call in the trace "
                    "(launched before the profiler recorded, still running: no synchronize between steps?): not "
                    "counted"
                )
            else:
                where = "before the first profiled step" if max(known) < first else "outside the profiled steps"
                if unknown:
                    where += f" ({unknown} of them with no launch call in the trace)"
                notes.append(
                    f"{len(left_out)} GPU ops ({us}) launched {where} ran during them (no synchronize between "
                    "steps?): not counted"
                )
        props = header.get("deviceProperties") or header.get("computeProperties") or []  # the latter: 2021's name
        first = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
        device = first.get("name") if isinstance(first.get("name"), str) else meta.get("device")
        has_gpu = bool(self.gpu or self.launches)
        if has_gpu and not self.gpu:
            notes.append(
                "the trace holds no GPU activity (runtime calls but no kernel, memcpy or memset events: was "
                "ProfilerActivity.CUDA recorded?): its GPU figures are —"
            )
        captured = sum(step.captured_launches for step in steps)
        if captured:
            notes.append(
                f"a CUDA graph capture: {captured} kernel launches between cudaStreamBeginCapture and "
                "cudaStreamEndCapture recorded into a graph and ran nothing; counted apart as captured, not as launches"
            )
        distributed = header.get("distributedInfo") if isinstance(header.get("distributedInfo"), dict) else {}
        phases = list(dict.fromkeys(name for step in steps for name in step.phases))
        for step in steps:
            step.syncs.sort(key=lambda launch: launch[1])
        return Trace(
            path=Path(path), label=label, steps=steps, has_gpu=has_gpu, device_name=device, meta=meta,
            skipped=self.skipped, notes=notes, whole_trace=whole, distributed=distributed, sm=sm_limits(first),
            phases=phases, cpu_source=cpu, phase_parent=parent, gpu_activity=bool(self.gpu), shapes=self.shapes,
            cpu_starts=tuple(cpu_starts), labels=self.annotations, cpu_durs=cpu_durs,
            collectives=comms.timed(self.comms, [op for s in steps for op in s.gpu], self.annotations),
        )  # fmt: skip


@contextlib.contextmanager
def no_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector: reading makes millions of objects and no cycles, and the collector's
    passes over them would make the reading cost grow faster than the trace."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def parse(data: dict, path: Path | str = "<trace>", region: str | None = None) -> Trace:
    """Split a loaded trace (a dict with `traceEvents`) into its profiler steps, the CPU column timing the
    record_function `region` where given; ValueError if it has no events."""
    from common.reader.trace_json import as_events

    collector = _Collector()
    with no_gc():
        collector.add(as_events(data["traceEvents"]))
        return collector.trace(data, path, region)


def read_trace(path: Path | str, region: str | None = None) -> Trace:
    """Read one exported trace file, streaming its events: time and memory grow linearly with its size. The CPU
    column times the record_function `region` where given (else the suite's label, else the step's span)."""
    from common.reader.trace_json import stream_json

    collector = _Collector()
    with no_gc():
        header = stream_json(path, collector.add)
        trace = collector.trace(header, path, region)
        del collector  # its per-event lists are freed before the garbage collector runs again
    return trace
