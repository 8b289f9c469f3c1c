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
import statistics
from array import array
from typing import Any, NamedTuple

from common.reader.intervals import merged

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


class GpuTimeline:
    """Every timed GPU op of a trace in start order, with the union of their intervals over every stream."""

    __slots__ = ("ops", "starts", "reach", "union", "_busy_before")

    def __init__(self, ops: list[GpuOp]) -> None:
        self.ops = sorted((op for op in ops if op.start is not None), key=_start)
        self.starts = array("d", (op.start for op in self.ops))
        reach, most = array("d"), float("-inf")
        for op in self.ops:
            end = op.start + op.us
            if end > most:
                most = end
            reach.append(most)
        self.reach = reach  # the latest end among the ops up to each: ascending
        self.union = merged(((op.start, op.start + op.us) for op in self.ops), SAME_TIME_US)
        total, before = 0.0, array("d")
        for start, end in self.union:
            before.append(total)
            total += end - start
        self._busy_before = before  # the busy time before each interval of the union

    def ops_in(self, start: float, end: float) -> list[GpuOp]:
        """The ops that run during (start, end), in start order: found by binary search over the running maximum
        end (the first op that can still be open at `start`) and over the starts."""
        lo = bisect.bisect_right(self.reach, start)
        hi = bisect.bisect_left(self.starts, end)
        return [op for op in self.ops[lo:hi] if op.start + op.us > start]

    def busy_us(self, start: float, end: float) -> float:
        """How long at least one GPU op runs in [start, end] (µs), from the trace's one union."""
        return self._busy_until(end) - self._busy_until(start)

    def _busy_until(self, t: float) -> float:
        union = self.union
        i = bisect.bisect_right(union, (t, float("inf"))) - 1
        if i < 0:
            return 0.0
        begin, end = union[i]
        return self._busy_before[i] + min(end, t) - begin


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
