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
import itertools
import math
import operator
import struct
import sys
from array import array
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from itertools import compress
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from common.reader import comms
from common.reader.calltree import FEW_THREADS, CallTree, Layer, Thread
from common.reader.intervals import union_us
from common.reader.kinds import (
    CAPTURE_BEGIN,
    CAPTURE_END,
    COMPILER_LABELS,
    CPU_KINDS,
    DRIVER,
    GPU_WORK,
    GPU_WORK_CALLS,
    GRAPH_LAUNCHES,
    KERNEL_LAUNCHES,
    LABEL,
    OP,
    PYTHON,
    RUNTIME,
    STEP,
    SYNC_CALLS,
    UNMODELLED_DEVICES,
)
from common.reader.model import GpuOp, Launch, Phase, Step, Trace, busy_us
from common.reader.occupancy import sm_limits
from common.reader.roofline import SHAPED_OPS, TENSOR_CORE_OPS, ShapedOp
from common.units import human_time

if TYPE_CHECKING:  # common.reader.trace_json is imported where a trace is read: msgspec's import would slow `--help`
    from common.reader.trace_json import Args, Event, GpuArgs


STEP_NAME = STEP
EMPTY_STEPS = 0.05  # steps holding at most this share of the top-level ops' time hold none of the work
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


KEPT = {*CPU_KINDS, *GPU_WORK}  # the categories the reader uses
KIND_CODE = {kind: code for code, kind in enumerate(CPU_KINDS)}
NAME = operator.itemgetter(0)  # of an (name, ts, dur, tid) record, or of a Launch
TS_OF_CALL = operator.itemgetter(0)  # of a shaped call (ts, dur, tid, shapes), or of a GPU op's (ts, correlation, op)
OP_OF_GPU = operator.itemgetter(2)  # of a GPU op's (ts, correlation, op)
_NO_THREAD = object()  # before the first event: no thread id is this
# Kineto's first schema (torch 1.8-1.9, 2021, the TensorBoard plugin's era: libkineto/src/output_json.cpp wrote
# "Operator", "Runtime", "Kernel", "Memcpy", "Memset"; ProfilerStep#N and record_function labels were Operators
# too), read as today's categories. An Operator whose name has no "::" (aten::, c10d::, autograd::...) is a
# record_function label, what today's traces call user_annotation. The legacy autograd profiler's export
# (torch.autograd.profiler's export_chrome_trace before Kineto: pid "CPU functions", no "cat", read as "") is read the
# same way; a "cat" that is not a string (None) is no category. With use_cuda=True that export's pid "CUDA functions"
# holds, after each op's event, that op's time range on the GPU (CUDA events recorded at its start and end): read by
# legacy_gpu_ops, not as ops of a thread.
LEGACY_GPU = "CUDA functions"
EXTERNAL = operator.attrgetter("external")
UNMODELLED = tuple(UNMODELLED_DEVICES)  # category prefixes of devices the reader does not model
PROFILER_OVERHEAD = "overhead"  # Kineto's category for CUPTI's own time on the host
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

    def slices(self, times: Sequence[float]) -> Iterator[tuple[int, int]]:
        """For each span in turn, the range [lo, hi) of the sorted `times` that __call__ places in it, made as they
        are asked for (the spans can be a trace's phase labels, hundreds of thousands: a list of them took 22 MiB at
        720,720 labels)."""
        los = map(bisect.bisect_left, itertools.repeat(times), self.starts)
        his = map(bisect.bisect_right, itertools.repeat(times), self.ends)
        bounds = itertools.pairwise(itertools.chain(los, (len(times),)))  # each span's lo and the next one's
        return ((lo, min(hi, next_lo)) for (lo, next_lo), hi in zip(bounds, his, strict=True))


class Tops(NamedTuple):
    """Some of the top-level labels of one thread (_Collector.children): the thread's top labels' columns, and the
    positions in them of those picked."""

    begins: array
    ends: array
    idx: array  # each top label's index in the thread's labels (their names)
    names: list[str]
    picked: list[int]


def _timed(ts: float, dur: float) -> bool:
    """Whether an event's start and duration are usable: finite, not negative, not absurd (_Collector._add makes the
    same test inline, per event)."""
    return 0 <= ts < math.inf and 0 <= dur < LONGEST_US


class _Collector:
    """Keeps what the reader needs of each event, compactly, as the events stream past."""

    def __init__(self) -> None:
        # The CPU events, the nodes of the call tree (common.reader.calltree, built once they are all read). The
        # cpu_ops, most of a trace, in flat columns, their threads as runs (index of the first, thread id); the
        # others as the records the reader keeps of them anyway.
        self.op_names: list[str] = []
        self.op_ts = array("d")  # µs: flat doubles, not a float object each
        self.op_end = array("d")  # its start plus its duration: the ends the call tree keeps, added as read
        self.op_tids: list[tuple[int, object]] = []  # (index of the first op of a run on one thread, the thread)
        self.ops_rising = True  # each op (on any thread) starts after the one read before it: checked op by op
        self.last_op_ts = -math.inf  # the start of the last op read
        self.tids: dict[object, object] = {}  # one object per thread id (a tid past 256 is a new int per event)
        self.annotations: list[tuple[str, float, float, object]] = []  # user_annotation: (name, ts, dur, tid)
        self.python: list[tuple[str, float, float, object]] = []  # python_function: (name, ts, dur, tid)
        self.launches: list[Launch] = []  # cuda_runtime, cuda_driver
        self.launch_kinds = bytearray()  # RUNTIME or DRIVER per launch
        self.passed: set[str | None] = set()  # categories neither read nor of a device the reader does not model
        self.unmodelled: Counter = Counter()  # events of a device the reader does not model (MTIA): name -> count
        self.shaped_spans: dict[object, tuple] = {}  # External id -> a shaped op's (ts, dur, tid, shapes)
        self.gpu: list[tuple[float, object, GpuOp]] = []  # (ts, correlation, op)
        self.skipped = 0
        self.names: dict[str, str] = {}  # one string object per distinct name
        self.shapes: dict[object, ShapedOp] = {}  # External id -> shapes, for the ops in SHAPED_OPS only
        self.distinct_shapes: dict[tuple, ShapedOp] = {}
        self.shaped_calls: list[tuple[float, float, object, ShapedOp]] = []  # a GEMM/attention op's (ts, dur, tid)
        self.iteration_mark: str | None = None  # a trace without steps: the label that ends each iteration found
        self.empty_steps: list[Step] = []  # ProfilerStep#N that hold (almost) none of the work: set aside
        self.work_us = (0.0, 0.0)  # the top-level ops' time inside the steps, and in all
        self.comms: list[comms.Collective] = []  # record_param_comms and c10d ops (common.reader.comms)
        # The legacy export's GPU ranges: (start, end, name, the end of the op it mirrors or None, device)
        self.legacy: list[tuple[float, float, str, float | None, object]] = []
        self.legacy_host: tuple[str, float] | None = None  # its last CPU op read: (name, end)
        self.overheads: list[tuple[float, float, str]] = []  # Kineto's `overhead` events: (start, end, name)
        from common.reader import trace_json

        self.args_of, self.decoded, self.raw_key = trace_json.args_of, trace_json.decoded, trace_json.raw_key
        self.repaired_key = trace_json.REPAIRED  # stream_json's answer's count of repaired backslashes
        self.typed_args, self.dims = trace_json.typed_args, {}  # dims: one tuple per grid or block value
        self.gpu_args, self.launch_args = trace_json.GPU_ARGS_DECODER, trace_json.LAUNCH_ARGS_DECODER

    def add(self, events: list[Event]) -> None:
        """Keep what the reader uses of a run of events (metadata and other non-`X` events it does not use).
        One loop over the run, not a call per event: this is where a trace's millions of events pass."""
        starts: list[float] = []  # the run's ops' starts and ends, packed into their columns once the run is read
        ends: list[float] = []
        done = False
        try:
            self._add(events, starts.append, ends.append)
            done = True
        finally:  # a float list's append is cheaper than an array's, which parses its argument as a C double
            if starts:
                if not done:  # the loop's check of the order did not finish: the call tree checks the order itself
                    self.ops_rising = False
                self.op_ts.frombytes(struct.pack(f"{len(starts)}d", *starts))
                self.op_end.frombytes(struct.pack(f"{len(ends)}d", *ends))

    def _add(self, events: list[Event], add_ts: Callable[[float], None], add_end: Callable[[float], None]) -> None:
        """add's loop, the ops' starts and ends given to `add_ts` and `add_end`."""
        names, inf, unmodelled, passed = self.names, math.inf, self.unmodelled, self.passed
        add_name = self.op_names.append
        args_of, kind_code, tids, launches = self.args_of, KIND_CODE, self.tids, self.launches
        typed_args, gpu_args, launch_args, dims = self.typed_args, self.gpu_args, self.launch_args, self.dims
        add_label, add_gpu, add_kind = self.annotations.append, self.gpu.append, self.launch_kinds.append
        issue_ops, skipped, last_tid, tid, new = comms.ISSUE_OPS, 0, _NO_THREAD, None, tuple.__new__
        op_tid = self.op_tids[-1][1] if self.op_tids else _NO_THREAD
        rising, last_ts = self.ops_rising, self.last_op_ts  # each op starts after the one read before it
        for e in events:
            cat, ts, dur = e.cat, e.ts, e.dur
            if cat not in KEPT:
                if cat in passed:  # ac2g flows, gpu_user_annotation: looked at once per category, then passed by
                    continue
                if cat == "Operator" or cat == "":
                    if e.name is None:
                        continue
                    if cat == "" and e.ph == "X":  # the legacy export (LEGACY_GPU)
                        if e.pid == LEGACY_GPU:
                            self.legacy_range(e)
                            continue
                        self.legacy_host = (e.name, ts + dur)
                    cat = "cpu_op" if "::" in e.name else "user_annotation"
                else:
                    old = OLD_CATEGORIES.get(cat)  # type: ignore[arg-type]
                    if cat == PROFILER_OVERHEAD:  # CUPTI's own time (a buffer request, instrumenting a module)
                        self.profiler_overhead(e)
                        continue
                    if old is None:
                        if cat is not None and cat.startswith(UNMODELLED):
                            unmodelled[cat] += 1
                        else:
                            passed.add(cat)
                        continue
                    cat = old
                e.cat = cat
            if e.ph != "X" or (name := e.name) is None:
                continue
            if not (0 <= ts < inf and 0 <= dur < LONGEST_US):  # NaN (absent, not a number), infinite, negative, absurd
                skipped += 1
                continue
            name = names.setdefault(name, name)
            if cat == "cpu_op":  # most of a trace: a node of the call tree, in the ops' columns
                if e.tid != last_tid:  # one object per thread id
                    last_tid = e.tid
                    tid = tids.setdefault(last_tid, last_tid) if type(last_tid) in ID_TYPES else None
                if tid is not op_tid:
                    self.op_tids.append((len(self.op_names), tid))
                    op_tid = tid
                add_name(name)
                add_ts(ts)
                add_end(ts + dur)
                if ts <= last_ts:  # a comparison here costs less than a pass over the run's starts after it
                    rising = False
                last_ts = ts
                if name in SHAPED_OPS and (args := args_of(e.args)) is not None and args.dims is not None:
                    self.shaped(name, args, ts, dur, tid)
                elif name in issue_ops:  # a collective; its args decoded where they are record_param_comms'
                    args = args_of(e.args) if name == comms.ISSUE_OP else None
                    if (issued := comms.issued(name, ts, dur, tid, args)) is not None:
                        self.comms.append(issued)
                continue
            code = kind_code.get(cat)
            if code is not None:  # another CPU event: a node of the call tree, from the record kept of it
                if e.tid != last_tid:
                    last_tid = e.tid
                    tid = tids.setdefault(last_tid, last_tid) if type(last_tid) in ID_TYPES else None
                if code == LABEL:
                    add_label((name, ts, dur, tid))
                elif code >= RUNTIME:  # a runtime or driver call
                    typed = typed_args(e.args, launch_args)
                    corr = typed.correlation if typed is not None else _correlation(args_of(e.args))
                    launches.append(new(Launch, (name, ts, dur, corr, tid)))  # without its Python __new__
                    add_kind(code)
                else:
                    self.python.append((name, ts, dur, tid))
            else:
                e.name = name
                typed = typed_args(e.args, gpu_args)
                if typed is not None:
                    add_gpu((ts, typed.correlation, typed_gpu_op(e, typed, dims)))
                else:
                    args = args_of(e.args)
                    add_gpu((ts, _correlation(args), gpu_op(e, args)))
        self.skipped += skipped
        self.ops_rising, self.last_op_ts = rising, last_ts

    def profiler_overhead(self, e: Event) -> None:
        """Keep one of Kineto's `overhead` events (CUPTI's own time: "Activity Buffer Request", "Unrecognized"), as
        (start, end, name): time the profiler took, not the program's."""
        ts, dur, name = e.ts, e.dur, e.name
        if e.ph == "X" and name is not None and _timed(ts, dur):
            self.overheads.append((ts, ts + dur, self.names.setdefault(name, name)))

    def legacy_range(self, e: Event) -> None:
        """Keep one GPU range of the legacy export, tied to the op it mirrors: the CPU op written just before it,
        where that one has its name (torch's export writes each op, then the ranges of its CUDA events)."""
        ts, dur, name = e.ts, e.dur, e.name
        if not _timed(ts, dur):
            self.skipped += 1
            return
        host = self.legacy_host
        end = host[1] if host is not None and host[0] == name else None
        self.legacy.append((ts, ts + dur, self.names.setdefault(name, name), end, _id(e.tid)))

    def shaped(self, name: str, args: object, ts: float, dur: float, tid: object) -> ShapedOp:
        """Keep a GEMM or attention op's shapes by its External id (the kernels it launched carry that id), with its
        call (ts, dur, tid, shapes) for checking the link, and return them; a tensor-core op's call is kept in
        `shaped_calls` too, the same record. Ops of the same name and arguments share one ShapedOp, decoded once: a
        loop repeats a few shapes many times."""
        ext, key_of = args.external, self.raw_key
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
        call = (ts, dur, tid, op)
        if name in TENSOR_CORE_OPS:
            self.shaped_calls.append(call)
        if type(ext) in ID_TYPES:  # an External id (_id)
            self.shaped_spans[ext] = call
            self.shapes[ext] = op
        return op

    def call_tree(self) -> CallTree:
        """The call tree of every CPU event kept, a Layer per thread and category: the ops from their columns (a
        thread's ops most often one run of them, kept as read where they come in order), the labels,
        python_function events and runtime and driver calls from their records, column by column in C. The ops'
        columns are freed."""
        layers: dict[object, dict[int, Layer]] = {}
        runs = [*self.op_tids, (len(self.op_names), None)]
        by_tid: dict[object, list[tuple[int, int]]] = {}
        for (lo, tid), (hi, _) in itertools.pairwise(runs):
            by_tid.setdefault(tid, []).append((lo, hi))
        for tid, slices in by_tid.items():
            if len(slices) == 1:  # a thread's ops in one run: the columns as they are
                (lo, hi), whole = slices[0], slices[0] == (0, len(self.op_names))
                starts = self.op_ts if whole else self.op_ts[lo:hi]
                ends = self.op_end if whole else self.op_end[lo:hi]
                names = self.op_names if whole else self.op_names[lo:hi]
            else:
                starts, ends, names, whole = array("d"), array("d"), [], False
                for lo, hi in slices:
                    starts += self.op_ts[lo:hi]
                    ends += self.op_end[lo:hi]
                    names += self.op_names[lo:hi]
            if whole and self.ops_rising:  # in start order, none starting together: the columns as they are
                layers.setdefault(tid, {})[OP] = Layer(OP, starts, ends, names)
            else:
                layers.setdefault(tid, {})[OP] = Layer.of(OP, starts, ends, names)
        self.op_names, self.op_ts, self.op_end, self.op_tids = [], array("d"), array("d"), []
        is_runtime = self.launch_kinds.translate(bytes(int(code == RUNTIME) for code in range(256)))
        runtime = list(compress(self.launches, is_runtime))
        driver = list(compress(self.launches, map(operator.not_, is_runtime)))
        for kind, records, at in ((LABEL, self.annotations, 3), (PYTHON, self.python, 3), (RUNTIME, runtime, 4),
                                  (DRIVER, driver, 4)):  # fmt: skip
            for tid, kept in _by_thread(records, at).items():
                layers.setdefault(tid, {})[kind] = Layer.of_records(kind, kept)
        return CallTree({tid: Thread(tid, dict(sorted(by_kind.items()))) for tid, by_kind in layers.items()})

    def steps(self, path: Path | str, tree: CallTree, find_iterations: bool = True) -> tuple[list[Step], bool]:
        """The ProfilerStep#N steps in time order; else the iterations its repeated labels give (`iterations`),
        where `find_iterations`; else one step over the whole trace (True). A trace the suite wrote is not searched:
        the harness checks it per call of its own label."""
        steps = sorted(
            (Step(int(m.group(1)), ts, dur) for name, ts, dur, _ in self.annotations if (m := STEP_NAME.match(name))),
            key=lambda s: s.start_us,
        )
        if steps:
            if self.holds_work(steps, tree):
                return steps, False
            self.empty_steps = steps  # the whole trace is read instead
        layers = [layer for thread in tree.threads.values() for layer in thread.layers.values() if len(layer)]
        spans = [(min(layer.starts[0] for layer in layers), max(max(layer.ends) for layer in layers))] if layers else []
        spans += [(ts, ts + op.us) for ts, _, op in self.gpu]  # GPU work the CPU side did not record launching too
        if not spans:
            why = f" ({self.skipped} events had an unusable ts or dur)" if self.skipped else ""
            raise ValueError(f"{path}: no profiler events{why} (was it exported by torch.profiler?)")
        start = min(s for s, _ in spans)
        found = self.iterations(start, tree) if find_iterations else None
        if found:
            return found, False
        return [Step(0, start, max(e for _, e in spans) - start)], True

    def holds_work(self, steps: list[Step], tree: CallTree) -> bool:
        """Whether the ProfilerStep#N `steps` hold the trace's work: false where they launch no GPU work, hold at
        most EMPTY_STEPS of the time of its top-level ops (every thread's), and what lies outside them is longer
        than the steps themselves (a marker around the profiler's own step call, the work run before it). A trace
        without ops trusts its steps."""
        bounds = [(s.start_us, s.start_us + s.dur_us) for s in steps]
        starts = [s for s, _ in bounds]
        for launch in self.launches:
            i = bisect.bisect_right(starts, launch.ts) - 1
            if i >= 0 and launch.ts <= bounds[i][1] and launch.name.startswith(GPU_WORK_CALLS):
                return True
        inside = total = 0.0
        for thread in tree.threads.values():
            begins, ends, _ = thread.layer(OP).tops()
            total += math.fsum(ends) - math.fsum(begins)
            for lo, hi in bounds:
                for i in range(bisect.bisect_left(begins, lo), bisect.bisect_left(begins, hi)):
                    inside += min(ends[i], hi) - begins[i]
        self.work_us = (inside, total)
        return inside > EMPTY_STEPS * total or total - inside <= sum(hi - lo for lo, hi in bounds)

    def iterations(self, start: float, tree: CallTree) -> list[Step] | None:
        """The iterations of a trace without ProfilerStep#N, where its top-level labels repeat: on the thread with
        the most labels, the sequence of labels not nested in another (torch's own `Optimizer.step#AdamW.step` and
        `Optimizer.zero_grad#…` count, compiler labels do not) that is one pattern two or more times over. Iteration
        k runs from the end of the pattern's last label in iteration k-1 (the first: from the trace's start) to its
        end in iteration k, so what runs between two (a DataLoader's next batch) is in an iteration. None where no
        pattern repeats: the trace stays one window. The pattern's last label is kept in `self.iteration_mark`."""
        self.iteration_mark = None
        masks = {tid: _label_mask(thread.layer(LABEL)) for tid, thread in tree.threads.items()}
        if not any(mask.count(1) for mask in masks.values()):
            return None
        tid = max(masks, key=lambda t: masks[t].count(1))
        labels = tree.threads[tid].layer(LABEL)
        starts, ends, idx = labels.tops(masks[tid], "labels")
        top = [(start, end, labels.names[i]) for start, end, i in zip(starts, ends, idx, strict=True)]
        names = [name for _, _, name in top]
        period = next((p for p in range(1, len(names) // 2 + 1)
                       if len(names) % p == 0 and names == names[:p] * (len(names) // p)), None)  # fmt: skip
        if period is None:
            return None
        ends = [end for _, end, _ in top[period - 1 :: period]]
        self.iteration_mark = names[period - 1]
        bounds = [start, *ends]
        return [Step(k + 1, bounds[k], bounds[k + 1] - bounds[k]) for k in range(len(ends))]

    @staticmethod
    def count_ops(tree: CallTree, step_at: _Spans, phase_at: _Spans) -> None:
        """Count the cpu_ops of each step and of each phase, on every thread: each thread's nodes are in start order,
        so a step's are one slice of them, its ops picked and counted in C (itertools.compress, Counter)."""
        for thread in tree.threads.values():
            ops = thread.layer(OP)
            names = ops.names
            inside = list(step_at.slices(ops.starts))  # a phase counts the ops inside a step only
            his = [hi for _, hi in inside]
            for step, (lo, hi) in zip(step_at.items, inside, strict=True):
                step.cpu_ops.update(names[lo:hi])
            for phase, (lo, hi) in zip(phase_at.items, phase_at.slices(ops.starts), strict=True):
                for step_lo, step_hi in inside[bisect.bisect_right(his, lo) :]:
                    if step_lo >= hi:
                        break
                    phase.cpu_ops.update(names[max(lo, step_lo) : min(hi, step_hi)])

    @staticmethod
    def children(tree: CallTree, outer: list[tuple[float, float, object]], skip: str | None) -> dict[tuple, Tops]:
        """The labels directly inside each span of `outer` ((start, end, tid), sorted; tid None: any thread),
        each thread apart: (span index, tid) -> its top-level labels, in time order (Tops: their starts, ends and
        names on that thread, and which of them are its), from the call tree. Steps, the label `skip` itself and
        torch.compile's own annotations are no labels here: a label inside one of them is still directly inside the
        span."""
        starts = [start for start, _, _ in outer]
        top: dict[tuple, Tops] = {}
        for tid, thread in tree.threads.items():
            labels = thread.layer(LABEL)
            begins, ends, idx = labels.tops(_label_mask(labels, skip), ("children", skip))
            names = labels.names
            for j, (begin, end) in enumerate(zip(begins, ends, strict=True)):
                k = bisect.bisect_right(starts, begin) - 1
                if k >= 0 and end <= outer[k][1] and outer[k][2] in (None, tid):
                    found = top.get((k, tid))
                    if found is None:
                        found = top[k, tid] = Tops(begins, ends, idx, names, [])
                    found.picked.append(j)
        return top

    def outline(
        self, tree: CallTree, steps: list[Step], whole: bool
    ) -> tuple[str | None, list[tuple[float, float, object]]]:
        """Where a step's phases are, without a named label: inside the one label that wraps every step's work
        (train_step, if each step holds that label alone), else directly inside the steps. (that label or None,
        its spans or the steps' spans as (start, end, tid))."""
        tids = {(ts, dur): tid for name, ts, dur, tid in self.annotations if STEP_NAME.match(name)}
        outer = [(s.start_us, s.start_us + s.dur_us, None if whole else tids.get((s.start_us, s.dur_us)))
                 for s in steps]  # fmt: skip
        tops = self.children(tree, outer, None)
        names = {labels.names[labels.idx[j]] for labels in tops.values() for j in labels.picked}
        if len(names) == 1 and all(len(labels.picked) == 1 for labels in tops.values()):
            [wrapper] = names
            return wrapper, self.spans_of(wrapper)
        return None, outer

    def spans_of(self, label: str) -> list[tuple[float, float, object]]:
        """Every span of the record_function `label`, as (start, end, tid), in time order."""
        return sorted((ts, ts + dur, tid) for name, ts, dur, tid in self.annotations if name == label)

    def phase_spans(
        self, tree: CallTree, outer: list[tuple[float, float, object]], label: str | None, step_at: _Spans
    ) -> list[tuple[float, float, Phase]]:
        """The record_function labels directly inside each span of `outer` ((start, end, tid): the spans of
        `label`, or the steps) on its thread: (start, end, phase), one Phase per step and name, its CPU time
        summed over its spans."""
        spans: list[tuple[float, float, Phase]] = []
        for labels in self.children(tree, outer, label).values():
            begins, ends, idx, names = labels.begins, labels.ends, labels.idx, labels.names
            for j in labels.picked:
                ts = begins[j]
                step = step_at(ts)
                if step is None:
                    continue  # outside the steps
                name, dur = names[idx[j]], ends[j] - ts
                phase = step.phases.setdefault(name, Phase(name))
                phase.cpu_us += dur
                spans.append((ts, ts + dur, phase))
        return spans

    def relink(self, tree: CallTree, broken: list[GpuOp], linked: int) -> list[str]:
        """Where the External id of a kernel (of `linked` kernels linked to a shaped op, Trace.shapes: what its FLOPs
        are read from) names an op that does not enclose its launch call on its thread (`broken`, found as the GPU
        ops were placed: trace), take the op from the time nesting (the innermost enclosing shaped op, else none);
        the note says how many disagreed, once."""
        if not broken:
            return []
        spans = self.shaped_spans
        at = {(tid, ts): ext for ext, (ts, _, tid, _) in spans.items()}  # (thread, start) -> External id
        for op in broken:
            launch = op.launch
            thread = tree.threads.get(launch.tid)
            layer = thread.layer(OP) if thread is not None else None
            i = layer.innermost(launch.ts) if layer is not None else -1
            while i >= 0 and (launch.tid, layer.starts[i]) not in at:  # type: ignore[union-attr]
                i = layer.ancestor(i)  # type: ignore[union-attr]
            op.external = at[launch.tid, layer.starts[i]] if i >= 0 else None  # type: ignore[union-attr]
        return [f"{len(broken)} of {linked} External ids name an op that does not enclose the launch: the op is taken "
                "from the time nesting"]  # fmt: skip

    def capture_windows(self) -> Callable[[object, float], bool] | None:
        """Where CUDA (or HIP) stream capture records instead of launching: per CPU thread, the spans from a
        cudaStreamBeginCapture to its cudaStreamEndCapture (nested captures on one thread count as one; one never
        ended lasts to the end). A function (thread, time) -> captured?, or None for a trace without capture."""
        capture = CAPTURE_BEGIN + CAPTURE_END
        if not any(name.startswith(capture) for name in set(map(NAME, self.launches))):  # once per distinct name
            return None
        calls = sorted((ts, name.startswith(CAPTURE_BEGIN), ts + dur, tid) for name, ts, dur, _, tid in self.launches
                       if name.startswith(capture))  # fmt: skip
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
        self.gpu += ((op.start, None, op) for op in legacy_gpu_ops(self.legacy))
        tree = self.call_tree()
        steps, whole = self.steps(path, tree, find_iterations=not meta)  # the suite's own: per call of its label
        notes = [meta["stopped"]] if isinstance(meta.get("stopped"), str) and meta["stopped"] else []  # Ctrl-C
        if count := header.get(self.repaired_key):  # how many lone backslashes the reading doubled
            notes.append(f"repaired {count} unescaped backslash{'' if count == 1 else 'es'} (Windows paths in Python "
                         "frames, a known exporter bug)")  # fmt: skip
        step_at = _Spans([(s.start_us, s.start_us + s.dur_us, s) for s in steps])
        label = region or (meta.get("label") if isinstance(meta.get("label"), str) and meta.get("label") else None)
        if self.empty_steps:
            (inside, total), count = self.work_us, len(self.empty_steps)
            read = "the whole trace is" if whole else f"the {len(steps)} iterations its repeated labels give are"
            notes.append(f"its {count} ProfilerStep#N span{'s hold' if count > 1 else ' holds'} "
                         f"({human_time(sum(s.dur_us for s in self.empty_steps))}) {human_time(inside)} of the "
                         f"{human_time(total)} its top-level ops take: the work ran outside them, "
                         f"so {read} summarised instead")  # fmt: skip
        elif whole:
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
            parent, outer = self.outline(tree, steps, whole)
            for step in steps:
                step.region_us = step.dur_us
        spans = self.phase_spans(tree, outer, parent, step_at)
        phase_at = _Spans(spans)
        self.count_ops(tree, step_at, phase_at)
        if label:
            for name, ts, dur, _ in self.annotations:
                if name == label and (step := step_at(ts)) is not None:
                    step.region_us = (step.region_us or 0.0) + dur
            if region and all(step.region_us is None for step in steps):
                notes.append(f"record_function {region!r} (--region) is in no profiled step: no CPU figure")
        launch_step: dict[object, Step] = {}
        launch_of: dict[object, Launch] = {}
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

        self.gpu.sort(key=TS_OF_CALL)  # by start, in C
        by_time = not any(corr is not None for _, corr, _ in self.gpu)
        if self.legacy:
            notes.append(legacy_note(self.legacy, [op for _, _, op in self.gpu]))
        elif by_time and self.gpu:
            notes.append("no correlation ids: GPU work is placed in the step its start time falls in (a guess)")
        left_out: list[tuple[object, GpuOp]] = []
        calls, linked, broken = self.shaped_spans, 0, []  # a kernel's link to its shaped op, checked on the way
        for ts, corr, op in self.gpu:
            op.launch = launch = launch_of.get(corr)
            if launch is not None and (call := calls.get(op.external)) is not None and op.category == "kernel":
                linked += 1  # the op the External id names must enclose the launch call, on its thread
                if not (call[2] == launch[4] and call[0] <= launch[1] <= call[0] + call[1]):
                    broken.append(op)
            step = step_at(ts) if by_time else launch_step.get(corr)
            if step is None:
                if step_at(ts) is not None:  # ran inside a step, launched outside every step
                    left_out.append((corr, op))
                continue
            step.gpu.append(op)
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
        gpu = list(map(OP_OF_GPU, self.gpu))
        link_notes = self.relink(tree, broken, linked)
        notes += link_notes
        devices = [UNMODELLED_DEVICES[p] for p in UNMODELLED if any(cat.startswith(p) for cat in self.unmodelled)]
        if devices:
            count = sum(self.unmodelled.values())
            notes.append(f"the trace holds {count} events of {', '.join(devices)}, a device the reader does not model: "
                         "its work is not read, so the figures say nothing of it")  # fmt: skip
        props = header.get("deviceProperties") or header.get("computeProperties") or []  # the latter: 2021's name
        first = props[0] if isinstance(props, list) and props and isinstance(props[0], dict) else {}
        device = first.get("name") if isinstance(first.get("name"), str) else meta.get("device")
        has_gpu = bool(self.gpu) or any(launch.name.startswith(GPU_WORK_CALLS) for launch in self.launches)
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
            step.syncs.sort(key=lambda launch: launch.ts)
        return Trace(
            path=Path(path), label=label, steps=steps, has_gpu=has_gpu, device_name=device, meta=meta,
            skipped=self.skipped, notes=notes, whole_trace=whole, empty_steps=len(self.empty_steps),
            distributed=distributed, sm=sm_limits(first),
            phases=phases, cpu_source=cpu, phase_parent=parent, gpu_activity=bool(self.gpu), shapes=self.shapes,
            tree=tree, gpu=gpu, devices=devices, broken_links=bool(link_notes),
            shaped_calls=_by_start(self.shaped_calls), profiler_overhead=sorted(self.overheads),
            collectives=comms.timed(self.comms, [op for s in steps for op in s.gpu], self.annotations)
            if self.comms else [],  # no pass over the GPU ops for a trace without collectives
        )  # fmt: skip


def legacy_gpu_ops(ranges: list[tuple[float, float, str, float | None, object]]) -> list[GpuOp]:
    """The GPU work of the legacy export's ranges (start, end, name, the end of the op it mirrors, device): on each
    device, each range's own time (less the ranges nested in it, those of the ops its op called) from the moment
    its op returned on the host, when all its work was queued, so the GPU was busy with queued work until the
    range ended. Before that moment the GPU may have been waiting for the host to launch the op's work: not
    counted. A GpuOp per piece, named after its op."""
    out: list[GpuOp] = []

    def own(item: list, hi: float) -> None:  # the range's own time from its cursor to `hi`, from its host end on
        (start, end, name, host_end, device), lo = item
        lo = lo if host_end is None or host_end < lo else host_end
        if hi > lo:
            out.append(GpuOp("kernel", name, hi - lo, start=lo, stream=device))

    for device in dict.fromkeys(r[4] for r in ranges):
        stack: list[list] = []  # [range, where its own time not yet taken starts]
        for r in sorted((r for r in ranges if r[4] == device), key=lambda r: (r[0], -r[1])):
            start, end = r[0], r[1]
            while stack and stack[-1][0][1] < end:  # ended before this one (or overlaps its start): closed there
                top = stack.pop()
                own(top, min(top[0][1], start))
            if stack:
                own(stack[-1], start)
                stack[-1][1] = max(stack[-1][1], end)
            stack.append([r, start])
        while stack:
            top = stack.pop()
            own(top, top[0][1])
    return out


def legacy_note(ranges: list[tuple[float, float, str, float | None, object]], ops: list[GpuOp]) -> str:
    """The one note of a legacy export with GPU ranges: what its GPU lane is, and what GPU busy counts of it."""
    covered = union_us((r[0], r[1]) for r in ranges)
    return (
        f"a legacy autograd-profiler export (use_cuda): its GPU lane is {len(ranges)} per-op time ranges from "
        "CUDA events, not kernels (no kernel names, no launches); they cover "
        f"{human_time(covered)}, of which GPU busy counts {human_time(busy_us(ops))}: each range from its op's "
        "return on the host, when all its work was queued (before that the GPU may have waited for the launch)"
    )


def _by_start(calls: list[tuple[float, float, object, ShapedOp]]) -> list[tuple[float, float, object, ShapedOp]]:
    """The shaped calls (ts, dur, tid, shapes) in start order, the longer first where two start together: as they
    are where they come so (checked in C; a trace's ops most often do), else sorted."""
    starts = list(map(TS_OF_CALL, calls))
    if all(map(operator.lt, starts, itertools.islice(starts, 1, None))):
        return calls
    return sorted(calls, key=lambda c: (c[0], -c[1]))


def _by_thread(records: list, at: int) -> dict[object, list]:
    """`records` grouped by their thread (the item at index `at` of each), each group in the records' order: a pass
    per thread in C where the threads are few."""
    tids = [record[at] for record in records]
    distinct = dict.fromkeys(tids)
    if len(distinct) <= 1:
        return {tid: records for tid in distinct}
    if len(distinct) <= FEW_THREADS:
        return {tid: list(compress(records, map(operator.eq, tids, itertools.repeat(tid)))) for tid in distinct}
    out: dict[object, list] = {}
    for record, tid in zip(records, tids, strict=True):
        out.setdefault(tid, []).append(record)
    return out


def _label_mask(labels: Layer, skip: str | None = None) -> bytes:
    """A byte per record_function label of a thread (`labels`): 1 for one that is not a step, not `skip`, and not
    one of torch.compile's own annotations (COMPILER_LABELS). Once per distinct name."""
    keep: dict[str, int] = {}
    for name in labels.names:
        if name not in keep:
            keep[name] = int(not (name == skip or name.startswith(COMPILER_LABELS) or STEP_NAME.match(name)))
    return bytes(map(keep.__getitem__, labels.names))


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
    from common.reader.trace_json import UnescapedBackslashError, stream_json

    collector = _Collector()
    with no_gc():
        try:
            header = stream_json(path, collector.add)
        except UnescapedBackslashError:
            header = None  # the traceback, which holds the first reading, is let go before the second
        if header is None:  # read again from the start, its lone backslashes doubled
            collector = _Collector()
            header = stream_json(path, collector.add, repair=True)
        trace = collector.trace(header, path, region)
        del collector  # its per-event lists are freed before the garbage collector runs again
    return trace
