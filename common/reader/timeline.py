"""The GPU's timeline: every GPU op of the trace (kernel, memcpy, memset) on one clock, whoever launched it, and the
steps' windows on it.

Built once for the whole trace: the ops in start order, the running maximum of their ends (so the ops open in a
window are found by binary search, with no look-back) and their union over every stream (common.reader.intervals).
Each step's window is a slice of it, and the windows tile the timeline without overlap: a step's CPU span where
its GPU work ran inside it; on a GPU that runs behind its CPU, from the first GPU op the step launched to the first
the next step launched, and for the last step as long as the steps' period (the median of the windows before it,
else its CPU span), not to its own last op, nor past `until`, the end of what the trace recorded. Pure Python, no torch.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import statistics
from array import array
from collections.abc import Callable
from typing import Any, NamedTuple

from common.reader.intervals import doubles, merged, running_max_list, union_sorted
from common.reader.naming import kernel_family

GpuOp = Step = Any  # common.reader.model's, which imports this module: named here, not imported (no circle)

OUTSIDE_SPAN_US = 1.0  # GPU work of a step this far outside its CPU span: the step is measured on the GPU's window
SPILL_SHARE = 0.1  # ... where most steps' work runs past their span's end by this share of it or more (the GPU
# lags the CPU); where most end within it, a step's last kernels finishing after its CPU side (no synchronize at its
# end) leave every step its CPU span, and what spills counts in the next step's window
START, US, NAME, CATEGORY = (operator.attrgetter(a) for a in ("start", "us", "name", "category"))  # of a GpuOp, in C
NEAR_INTERVALS = 32  # a window's intervals of the union are searched among the next this many first, then all
SAME_TIME_US = 0.001  # Kineto's resolution, 1 ns: two ops closer than this touch (0.000977 µs is a double's rounding)


class Window(NamedTuple):
    """A step's window on the GPU timeline: [start, end] µs, and whether it is the step's CPU span ("step") or the
    GPU's own window of a GPU running behind ("gpu")."""

    start: float
    end: float
    kind: str
    number: int  # the step's number


class Union(NamedTuple):
    """Disjoint (start, end) intervals in time order, µs from the timeline's origin, as two arrays (for bisect)."""

    starts: array
    ends: array


class WindowParts:
    """What the GPU did in one window [lo, hi] (µs from the timeline's origin): the union's length (`busy`) and,
    made when asked for, its idle gaps (`gaps`) and the lengths of the unions of compute kernels (every kernel but
    communication), of every op but communication, and of communication (a summary asks them of its median step)."""

    __slots__ = ("busy", "_timeline", "_lo", "_hi", "_first", "_last", "_edges", "_parts")

    def __init__(self, busy: float, timeline: GpuTimeline, lo: float, hi: float, first: int, last: int, edges: bool):
        self.busy, self._timeline, self._lo, self._hi = busy, timeline, lo, hi
        self._first, self._last, self._edges = first, last, edges  # the union's intervals in the window: first..last-1
        self._parts: tuple[float, float, float] | None = None

    @property
    def gaps(self) -> list[tuple[float, float, GpuOp | None]]:
        """The idle gaps in the window, as (start, end, the op that ended it; None: the window's tail), µs from the
        window's start: before the first op and after the last too, with `edges`. A list, made in one loop over
        the slices of the union in the window (a generator's resume per gap costs more than the gap)."""
        timeline, lo, hi = self._timeline, self._lo, self._hi
        ops, firsts, starts, ends = timeline.ops, timeline.firsts, timeline.union.starts, timeline.union.ends
        begin = starts[self._first]
        idle_from = 0.0 if self._edges else (lo if lo > begin else begin) - lo  # max(begin, lo) - lo
        out: list[tuple[float, float, GpuOp | None]] = []
        add, touch = out.append, SAME_TIME_US
        for j in range(self._first, self._last):  # max and min as comparisons: a builtin call each costs more
            begin = starts[j]
            a = (lo if lo > begin else begin) - lo
            if a > idle_from + touch:
                add((idle_from, a, ops[firsts[j]]))
            end = ends[j]
            idle_from = (hi if hi < end else end) - lo
        if self._edges and idle_from < hi - lo:
            add((idle_from, hi - lo, None))
        return out

    def _lengths(self) -> tuple[float, float, float]:
        if self._parts is None:
            self._parts = self._timeline.parts_in(self._lo, self._hi, self.busy)
        return self._parts

    @property
    def compute(self) -> float:
        return self._lengths()[0]

    @property
    def others(self) -> float:
        return self._lengths()[1]

    @property
    def comm(self) -> float:
        """Communication's union (0.0 at once on a timeline without communication)."""
        return self._lengths()[2] if self._timeline.has_comm else 0.0


class GpuTimeline:
    """Every timed GPU op of a trace in start order, with the union of their intervals over every stream (and of
    its parts: compute kernels, communication), built once. Times are kept from the first op's start (`origin`),
    so each length stays exact on a clock near 1e12 µs (common.reader.intervals); the queries take and give the
    trace's own times."""

    __slots__ = ("ops", "starts", "reach", "origin", "union", "firsts", "_ends", "__dict__")

    def __init__(self, ops: list[GpuOp]) -> None:
        try:  # with no look for an op with no start time: its None fails the first comparison or subtraction
            self._build(ops)
        except TypeError:  # an op with no start time (not the reader's): left out
            self._build([op for op in ops if op.start is not None])

    def _build(self, ops: list[GpuOp]) -> None:
        begins = [op.start for op in ops]  # a comprehension reads an attribute in half the time attrgetter's map does
        in_order = not any(map(operator.gt, begins, itertools.islice(begins, 1, None)))  # a trace's most often are
        self.ops = list(ops) if in_order else sorted(ops, key=START)
        if not in_order:
            begins = [op.start for op in self.ops]
        origin = self.origin = begins[0] if begins else 0.0
        starts = [begin - origin for begin in begins]  # ascending; as lists first: read without a float made each
        ends = [start + op.us for start, op in zip(starts, self.ops, strict=True)]
        reach = ends if all(map(operator.le, ends, itertools.islice(ends, 1, None))) else running_max_list(ends)
        begins, lasts, self.firsts = union_sorted(starts, ends, SAME_TIME_US, reach)  # firsts: its first ops
        self.union = Union(begins, lasts)
        self.starts, self._ends = doubles(starts), doubles(ends)
        self.reach = doubles(reach)  # the latest end up to each op: ascending

    @functools.cached_property
    def has_comm(self) -> bool:
        """Whether any op is a communication kernel (NCCL, RCCL): once per distinct kernel name."""
        kernels = itertools.compress(map(NAME, self.ops), map("kernel".__eq__, map(CATEGORY, self.ops)))
        return any(_talks(name) for name in set(kernels))

    @functools.cached_property
    def all_kernels(self) -> bool:
        """Whether every op is a kernel (no memcpy, no memset)."""
        return all(map("kernel".__eq__, map(CATEGORY, self.ops)))

    def parts_in(self, lo: float, hi: float, busy: float) -> tuple[float, float, float]:
        """In [lo, hi] (from the origin), whose union is `busy` long: the lengths of the unions of the compute kernels
        (every kernel but communication), of every op but communication, and of communication, from the ops in it."""
        if self.all_kernels and not self.has_comm:
            return busy, busy, 0.0
        first, last = bisect.bisect_right(self.reach, lo), bisect.bisect_left(self.starts, hi)
        compute, others, comm = [], [], []
        for i in range(first, last):
            op, end = self.ops[i], self._ends[i]
            if end <= lo:
                continue
            span = (max(self.starts[i], lo), min(end, hi))
            if op.category == "kernel" and _talks(op.name):
                comm.append(span)
            else:
                others.append(span)
                if op.category == "kernel":
                    compute.append(span)
        return tuple(sum(b - a for a, b in merged(spans, SAME_TIME_US)) for spans in (compute, others, comm))

    def windows(self, bounds: list[tuple[float, float]], edges: bool = True) -> list[WindowParts | None]:
        """What the GPU did in each window of `bounds` (the steps' windows, in time order), as `window` says, in one
        sweep over the timeline."""
        origin = self.origin
        rel = [(start - origin, end - origin) for start, end in bounds]
        starts, ends = self.union.starts, self.union.ends
        out: list[WindowParts | None] = []
        i, last, n, find_right, find_left = 0, -math.inf, len(ends), bisect.bisect_right, bisect.bisect_left
        for lo, hi in rel:
            # the first interval ending after `lo`, then the first starting at or after `hi`: each searched among the
            # next NEAR_INTERVALS first (a window holds a few; the next window starts where this one ends)
            i = i if lo >= last else 0
            near = i + NEAR_INTERVALS
            i = find_right(ends, lo, i, near if near < n else n)
            if i == near:
                i = find_right(ends, lo, near)
            near = i + NEAR_INTERVALS
            j = find_left(starts, hi, i, near if near < n else n)
            if j == near:
                j = find_left(starts, hi, near)
            last = lo
            if j <= i:  # nothing ran in the window
                out.append(None)
                continue
            busy = math.fsum(map(operator.sub, ends[i:j], starts[i:j]))  # in C, less what lies outside the window
            before, after = lo - starts[i], ends[j - 1] - hi  # each less a part of the window, where it is one
            busy -= (0.0 if before < 0.0 else before) + (0.0 if after < 0.0 else after)  # max(x, 0.0), no call
            out.append(WindowParts(busy, self, lo, hi, i, j, edges))
        return out

    def window(self, start: float, end: float, edges: bool = True) -> WindowParts | None:
        """What the GPU did in [start, end] (a step's window): its busy time and parts, and its idle gaps, each
        with the op that ended it. With `edges`, the time before the first op and after the last is a gap too
        (nothing was launched yet, or nothing is left); without, the window is the ops' own. Times relative to
        `start`; None where no op ran in the window."""
        return self.windows([(start, end)], edges)[0]


@functools.cache
def _talks(name: str) -> bool:
    """Whether a kernel of this name is communication (common.reader.naming.kernel_family)."""
    return kernel_family(name) == "communication"


def windows(steps: list[Step], until: float | Callable[[], float] = math.inf) -> list[Window]:
    """The steps' windows on the GPU timeline, tiling it: a step's CPU span where its GPU work ran inside it, else
    from its first GPU op to the next step's first (a GPU running behind: most steps' work runs SPILL_SHARE of their
    span past it, or a step's starts before it or runs mostly after it), the last one the steps' period long. A
    window never starts before the one before it ends. `until` (or the function that gives it, called only where the
    last step's window needs it): the end of what the trace recorded."""
    firsts, lasts = [], []
    add_first, add_last = firsts.append, lasts.append
    for step in steps:  # each step's first start and last end, an op without a start time left out: a comparison
        first = last = None  # each (a min or max call costs several times a step's few ops)
        for op in step.gpu:
            begin = op.start
            if begin is None:
                continue
            end = begin + op.us
            if first is None:
                first, last = begin, end
                continue
            if begin < first:
                first = begin
            if end > last:
                last = end
        add_first(first)
        add_last(last)
    ends = [s.start_us + s.dur_us for s in steps]
    spills = [last > end + OUTSIDE_SPAN_US + SPILL_SHARE * s.dur_us  # type: ignore[operator]
              for s, end, last in zip(steps, ends, lasts, strict=True) if last is not None]  # fmt: skip
    lags = 2 * sum(spills) > len(spills)  # most steps' GPU work runs well past their span: the GPU lags the CPU
    behind = [  # ... or this step's work started before its span, or ran mostly after it
        first is not None and (first < s.start_us - OUTSIDE_SPAN_US or (last > end + OUTSIDE_SPAN_US and (
            lags or last - end > (last - first) / 2)))  # type: ignore[operator]
        for s, end, first, last in zip(steps, ends, firsts, lasts, strict=True)
    ]  # fmt: skip
    begins = [first if late else s.start_us for s, first, late in zip(steps, firsts, behind, strict=True)]
    out: list[Window] = []
    periods: list[float] = []
    add, new, n, before = out.append, tuple.__new__, len(steps), None  # before: the last window's end
    for k, (step, begin, late, end) in enumerate(zip(steps, begins, behind, ends, strict=True)):
        # max(x, y) as `y if y > x else x` and min(x, y) as `y if y < x else x`: the same value, without a call
        if before is not None and before > begin:
            begin = before
        if not late:
            if k + 1 < n and behind[k + 1]:
                nxt = begins[k + 1]
                nxt = begin if begin > nxt else nxt
                end = nxt if nxt < end else end
            before = begin if begin > end else end
            add(new(Window, (begin, before, "step", step.number)))
            continue
        if k + 1 < n:
            nxt = begins[k + 1]
            end = begin if begin > nxt else nxt
            periods.append(end - begin)
        else:  # the last: as long as the steps' period or its own work, whichever is longer (a short last kernel
            # leaves the period's idle in it; a step that waited for its input runs its work late), never past what
            # was recorded
            period = max(statistics.median(periods) if periods else step.dur_us, lasts[k] - begin)
            last = until() if callable(until) else until
            end = begin + max(min(period, last - begin), 0.0)
        before = end
        add(new(Window, (begin, end, "gpu", step.number)))
    return out
