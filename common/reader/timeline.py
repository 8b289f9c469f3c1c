"""The GPU's timeline: every GPU op of the trace (kernel, memcpy, memset) on one clock, whoever launched it, and the
steps' windows on it.

Built once for the whole trace: the ops in start order, the running maximum of their ends (so the ops open in a
window are found by binary search, with no look-back) and their union over every stream (common.reader.intervals).
Each step's window is a slice of it, and the windows tile the timeline without overlap: a step's CPU span where
its GPU work ran inside it; on a GPU that runs behind its CPU, from the first GPU op the step launched to the first
the next step launched, and for the last step as long as the steps' period (the median of the windows before it,
else its CPU span), not to its own last op. Pure Python, no torch.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import math
import operator
import statistics
from array import array
from collections.abc import Iterable
from typing import Any, NamedTuple

GpuOp = Step = Any  # common.reader.model's, which imports this module: named here, not imported (no circle)

OUTSIDE_SPAN_US = 1.0  # GPU work of a step this far outside its CPU span: the step is measured on the GPU's window
SAME_TIME_US = 0.001  # Kineto's resolution, 1 ns: two ops closer than this touch (0.000977 µs is a double's rounding)


class Window(NamedTuple):
    """A step's window on the GPU timeline: [start, end] µs, and whether it is the step's CPU span ("step") or the
    GPU's own window of a GPU running behind ("gpu")."""

    start: float
    end: float
    kind: str
    number: int  # the step's number


class Union:
    """Disjoint (start, end) intervals in time order, µs from the timeline's origin, as two arrays (for bisect)."""

    __slots__ = ("starts", "ends")

    def __init__(self, intervals: list[tuple[float, float]]) -> None:
        self.starts = array("d", (a for a, _ in intervals))
        self.ends = array("d", (b for _, b in intervals))

    @classmethod
    def of(cls, starts: array, ends: array) -> Union:
        """The union whose intervals are given as two arrays."""
        union = cls.__new__(cls)
        union.starts, union.ends = starts, ends
        return union

    def __len__(self) -> int:
        return len(self.starts)

    def between(self, start: float, end: float) -> range:
        """The indices of the intervals that overlap (start, end): those ending after `start` and starting before
        `end`, by two binary searches."""
        return range(bisect.bisect_right(self.ends, start), bisect.bisect_left(self.starts, end))

    def length(self, start: float, end: float) -> float:
        """How long the union covers [start, end] (µs), each interval cut to the window."""
        return self.lengths([(start, end)])[0]

    def lengths(self, bounds: list[tuple[float, float]]) -> list[float]:
        """How long the union covers each window of `bounds` (µs), each interval cut to it: one sweep where the
        windows come in time order (each binary search starts where the last one ended)."""
        starts, ends, n = self.starts, self.ends, len(self.starts)
        out, i, last = [], 0, -math.inf
        for lo, hi in bounds:
            i = bisect.bisect_right(ends, lo, i if lo >= last else 0)  # the first interval ending after `lo`
            last, total, j = lo, 0.0, i
            while j < n and starts[j] < hi:
                total += min(ends[j], hi) - max(starts[j], lo)
                j += 1
            out.append(total)
        return out


def union_of(starts: array, ends: Iterable[float]) -> tuple[Union, array]:
    """The union of intervals given in start order (as `starts` and their `ends`), in C: an interval of the union
    opens at each one that starts more than SAME_TIME_US after every earlier one has ended, and closes at the
    latest end before the next one opens. With the index of the interval each one of the union opens with."""
    if not starts:
        return Union.of(array("d"), array("d")), array("l")
    reach = array("d", itertools.accumulate(ends, max))  # the latest end up to each: ascending
    later = map(operator.gt, itertools.islice(starts, 1, None), map(SAME_TIME_US.__add__, reach))
    firsts = array("l", itertools.chain((0,), itertools.compress(itertools.count(1), later)))
    closes = itertools.chain(itertools.islice(firsts, 1, None), (len(starts),))
    union = Union.of(array("d", map(starts.__getitem__, firsts)), array("d", (reach[j - 1] for j in closes)))
    return union, firsts


class WindowParts(NamedTuple):
    """What the GPU did in one window (µs, on the timeline's clock: from its origin): the union's length, the idle
    gaps (start, end, the op that ended it; None: the window's tail), and the lengths of the unions of compute
    kernels (every kernel but communication), of every op but communication, and of communication."""

    busy: float
    gaps: list[tuple[float, float, GpuOp | None]]
    compute: float
    others: float
    comm: float


class GpuTimeline:
    """Every timed GPU op of a trace in start order, with the union of their intervals over every stream (and of
    its parts: compute kernels, communication), built once. Times are kept from the first op's start (`origin`),
    so each length stays exact on a clock near 1e12 µs (common.reader.intervals); the queries take and give the
    trace's own times."""

    __slots__ = ("ops", "starts", "reach", "origin", "union", "firsts", "_ends", "_parts")

    def __init__(self, ops: list[GpuOp]) -> None:
        self.ops = sorted((op for op in ops if op.start is not None), key=_start)
        origin = self.origin = self.ops[0].start if self.ops else 0.0
        self.starts = starts = array("d", (op.start - origin for op in self.ops))  # from the origin, ascending
        ends = array("d", map(operator.add, starts, (op.us for op in self.ops)))
        self.reach = array("d", itertools.accumulate(ends, max))  # the latest end up to each op: ascending
        self.union, self.firsts = union_of(starts, ends)  # firsts: the op each interval of the union opens with
        self._ends = ends
        self._parts: tuple[Union, Union, Union | None] | None = None

    def ops_in(self, start: float, end: float) -> list[GpuOp]:
        """The ops that run during (start, end), in start order: found by binary search over the running maximum
        end (the first op that can still be open at `start`) and over the starts."""
        lo = bisect.bisect_right(self.reach, start - self.origin)
        hi = bisect.bisect_left(self.starts, end - self.origin)
        return [op for op in self.ops[lo:hi] if op.start + op.us > start]

    def busy_us(self, start: float, end: float) -> float:
        """How long at least one GPU op runs in [start, end] (µs), from the trace's one union."""
        return self.union.length(start - self.origin, end - self.origin)

    def parts(self) -> tuple[Union, Union, Union | None]:
        """The unions of the compute kernels (every kernel but communication) and of every op but communication,
        and of communication (None: the trace has none), made when first asked for. Where every op is a compute
        kernel, each is the union itself."""
        if self._parts is None:
            comm = [op.category == "kernel" and op.family == "communication" for op in self.ops]
            kernel = [op.category == "kernel" for op in self.ops]
            if not any(comm) and all(kernel):
                self._parts = (self.union, self.union, None)
            else:
                pick = functools.partial(itertools.compress, range(len(self.ops)))
                not_comm = list(map(operator.not_, comm))
                self._parts = (
                    self._union_of(pick(map(operator.and_, kernel, not_comm))),
                    self._union_of(pick(not_comm)) if any(comm) else self.union,
                    self._union_of(pick(comm)) if any(comm) else None,
                )
        return self._parts

    def _union_of(self, picked: Iterable[int]) -> Union:
        """The union of the ops at the indices `picked` (ascending)."""
        idx = list(picked)
        return union_of(array("d", map(self.starts.__getitem__, idx)), map(self._ends.__getitem__, idx))[0]

    def windows(self, bounds: list[tuple[float, float]], edges: bool = True) -> list[WindowParts | None]:
        """What the GPU did in each window of `bounds` (the steps' windows, in time order), as `window` says, in one
        sweep over the timeline."""
        origin = self.origin
        rel = [(start - origin, end - origin) for start, end in bounds]
        union, ops, firsts = self.union, self.ops, self.firsts
        starts, ends, n = union.starts, union.ends, len(union)
        compute, others, comm = self.parts()
        computes = None if compute is union else compute.lengths(rel)
        other = None if others is union else others.lengths(rel)
        comms = comm.lengths(rel) if comm is not None else None
        out: list[WindowParts | None] = []
        i, last = 0, -math.inf
        for k, (lo, hi) in enumerate(rel):
            i = bisect.bisect_right(ends, lo, i if lo >= last else 0)
            last, j, busy, gaps = lo, i, 0.0, []
            idle_from = 0.0 if edges or i >= n else max(starts[i], lo) - lo
            while j < n and starts[j] < hi:
                a, b = max(starts[j], lo) - lo, min(ends[j], hi) - lo
                busy += b - a
                if a > idle_from + SAME_TIME_US:
                    gaps.append((idle_from, a, ops[firsts[j]]))
                idle_from = b
                j += 1
            if j == i:  # nothing ran in the window
                out.append(None)
                continue
            if edges and idle_from < hi - lo:
                gaps.append((idle_from, hi - lo, None))
            out.append(
                WindowParts(
                    busy,
                    gaps,
                    busy if computes is None else computes[k],
                    busy if other is None else other[k],
                    0.0 if comms is None else comms[k],
                )
            )
        return out

    def window(self, start: float, end: float, edges: bool = True) -> WindowParts | None:
        """What the GPU did in [start, end] (a step's window): its busy time and parts, and its idle gaps, each
        with the op that ended it. With `edges`, the time before the first op and after the last is a gap too
        (nothing was launched yet, or nothing is left); without, the window is the ops' own. Times relative to
        `start`; None where no op ran in the window."""
        return self.windows([(start, end)], edges)[0]


def _start(op: GpuOp) -> float:
    return op.start  # type: ignore[return-value]


def windows(steps: list[Step]) -> list[Window]:
    """The steps' windows on the GPU timeline, tiling it: a step's CPU span where its GPU work ran inside it, else
    from its first GPU op to the next step's first (a GPU running behind), the last one the steps' period long. A
    window never starts before the one before it ends."""
    firsts, lasts = [], []
    for step in steps:
        timed = [op for op in step.gpu if op.start is not None]
        firsts.append(min((op.start for op in timed), default=None))
        lasts.append(max((op.start + op.us for op in timed), default=None))
    behind = [
        first is not None and (first < s.start_us - OUTSIDE_SPAN_US or last > s.start_us + s.dur_us + OUTSIDE_SPAN_US)  # type: ignore[operator]
        for s, first, last in zip(steps, firsts, lasts, strict=True)
    ]
    begins = [first if late else s.start_us for s, first, late in zip(steps, firsts, behind, strict=True)]
    out: list[Window] = []
    periods: list[float] = []
    for k, step in enumerate(steps):
        begin = begins[k] if not out else max(begins[k], out[-1].end)  # type: ignore[type-var]
        if not behind[k]:
            end = step.start_us + step.dur_us
            if k + 1 < len(steps) and behind[k + 1]:
                end = min(end, max(begins[k + 1], begin))  # type: ignore[type-var]
            out.append(Window(begin, max(end, begin), "step", step.number))
            continue
        if k + 1 < len(steps):
            end = max(begins[k + 1], begin)  # type: ignore[type-var]
            periods.append(end - begin)
        else:  # the last: as long as the steps' period, not to its own last op
            period = statistics.median(periods) if periods else step.dur_us
            end = begin + max(period, 0.0)
        out.append(Window(begin, end, "gpu", step.number))  # type: ignore[arg-type]
    return out
