"""A step's time budget: its span, how long the GPU was busy (compute, memcpy/memset, communication exposed or
hidden) and idle, and each idle gap's cause, as Holistic Trace Analysis splits it: the GPU waits for the host (the
next GPU op was not launched yet), or a kernel waits on another (launched in time; a gap under KERNEL_WAIT_US is
launch latency, a longer one a dependency: an event, another stream, a sync).
"""

from __future__ import annotations

from typing import NamedTuple

from common.reader.model import GpuOp, Trace, median_index
from common.reader.timeline import GpuTimeline, WindowParts
from common.units import human_time

KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay: 30, compared with the trace's µs timestamps
FIGURES = ("busy", "compute", "non_compute", "comm", "comm_exposed", "host_wait", "kernel_wait", "other_wait")
# The parts that tile a step's span, as its stacked bar shows them (Budget.split): GPU busy in three, idle in two.
PARTS = ("compute", "copies", "exposed communication", "host wait", "queued")


class Gap(NamedTuple):
    """A time the GPU ran nothing inside a step, and why: "host" (the next op was not launched yet), "kernel"
    (launched, a short wait), "other" (launched, waiting on something else). A named tuple: a step has a gap
    per op or so, and the budget makes them with tuple.__new__ in C."""

    start: float
    end: float
    kind: str
    step: int
    after: GpuOp | None  # the GPU op that ended the gap (None: the step's tail)

    @property
    def us(self) -> float:
        return self.end - self.start


class Budget:
    """One step's time, µs: its span, and how the GPU spent it. Its compute, copies and communication figures are
    given, or worked out from the timeline (`parts`: common.reader.timeline.WindowParts) when first read."""

    __slots__ = ("span", "busy", "host_wait", "kernel_wait", "other_wait", "gaps", "longest_gap", "window", "parts",
                 "given")  # fmt: skip

    def __init__(self, span: float, *, parts: WindowParts | None = None, **figures: object) -> None:
        self.span = span
        self.busy = 0.0  # union over streams of kernel, memcpy and memset
        self.host_wait = self.kernel_wait = self.other_wait = 0.0
        self.gaps: list[Gap] = []
        self.longest_gap = 0.0  # the length of the longest of `gaps` (0: none)
        self.window = "step"  # "step": the step's CPU span; "gpu": its GPU work's own window (the GPU ran behind)
        self.parts = parts
        self.given: dict[str, float] = {}  # the compute, copies and communication figures set, not worked out
        for name, value in figures.items():
            setattr(self, name, value)

    def __repr__(self) -> str:
        figures = ", ".join(f"{name}={getattr(self, name)!r}" for name in FIGURES)
        return f"Budget(span={self.span!r}, {figures}, gaps={len(self.gaps)}, window={self.window!r})"

    def _figure(self, name: str) -> float:
        if name in self.given:
            return self.given[name]
        parts = self.parts
        if parts is None:
            return 0.0
        if name == "compute":
            return parts.compute
        if name == "non_compute":
            return parts.others - parts.compute
        if name == "comm":
            return parts.comm
        return parts.busy - parts.others if parts.comm else 0.0  # comm_exposed

    compute = property(lambda self: self._figure("compute"), lambda self, v: self.given.__setitem__("compute", v),
                       doc="The union of compute kernels (all but communication).")  # fmt: skip
    non_compute = property(lambda self: self._figure("non_compute"),
                           lambda self, v: self.given.__setitem__("non_compute", v),
                           doc="memcpy/memset not under a compute kernel.")  # fmt: skip
    comm = property(lambda self: self._figure("comm"), lambda self, v: self.given.__setitem__("comm", v),
                    doc="The union of communication kernels.")  # fmt: skip
    comm_exposed = property(lambda self: self._figure("comm_exposed"),
                            lambda self, v: self.given.__setitem__("comm_exposed", v),
                            doc="Communication while no other GPU work ran.")  # fmt: skip

    @property
    def idle(self) -> float:
        return self.host_wait + self.kernel_wait + self.other_wait

    @property
    def comm_hidden(self) -> float:
        return self.comm - self.comm_exposed

    def pct(self, us: float) -> float:
        return 100.0 * us / self.span if self.span > 0 else 0.0

    def split(self) -> dict[str, float]:
        """Its span in PARTS, µs: compute, copies (memcpy/memset under no compute), communication under no other
        work, waiting for the host, queued (kernels waiting on each other or on something else); they add up to it."""
        queued = self.kernel_wait + self.other_wait
        figures = (self.compute, self.non_compute, self.comm_exposed, self.host_wait, queued)
        return dict(zip(PARTS, figures, strict=True))


def budget(ops: list[GpuOp], start: float, end: float, number: int = 0, edges: bool = True) -> Budget:
    """The budget of the GPU work `ops` over [start, end], each op cut to the window. With `edges`, the time before
    the first op and after the last counts as waiting for the host (nothing was launched yet, or nothing is left);
    without, the window is the ops' own (HTA's temporal breakdown: first start to last end)."""
    return window_budget(GpuTimeline(ops), start, end, number, edges)


def window_budget(timeline: GpuTimeline, start: float, end: float, number: int = 0, edges: bool = True) -> Budget:
    """The budget of [start, end] on `timeline`, counting every GPU op in it, whoever launched it."""
    return _budget(timeline.window(start, end, edges), start, end, number, edges)


def _budget(parts: WindowParts | None, start: float, end: float, number: int, edges: bool = True) -> Budget:
    """The budget of a window from what the GPU did in it (common.reader.timeline: busy time and every part of it
    from the one union, built once). Each gap is classed as HTA classes it: the host was late (the op that ended
    it was launched after the gap began, or the window's tail), else a kernel waited (under KERNEL_WAIT_US: launch
    latency; longer: a dependency). Where the op's launch call ended KERNEL_WAIT_US or more before the gap did, the
    gap is split there: the host was late (or still in a slow launch call: a first launch loading its module) up to
    it, and from it the op was queued on the GPU, a wait of the GPU's own (a cold GPU's first kernel, a dependency),
    never the host's."""
    out = Budget(end - start)
    if parts is None:
        out.host_wait = max(0.0, end - start) if edges else 0.0
        return out
    out.busy, gaps = parts.busy, out.gaps
    add, new = gaps.append, tuple.__new__  # tuple.__new__(Gap, ...): a Gap without its Python __new__
    host = kernel = other = longest = 0.0  # longest: max(gap.us), as gaps are never negative
    wait = KERNEL_WAIT_US
    for a, b, after in parts.gaps:
        launch = after.launch if after is not None else None
        late = True  # no launch call known: the host was late
        if launch is not None:  # where its launch call ended: from then on the op was the GPU's to run
            called = launch[1]  # its ts (a Launch is a tuple: read by index, not by name, a gap per op or so)
            queued = called + launch[2] - start
            late = called > start + a
            if (queued - a >= wait or late) and b - queued >= wait:
                split = queued if queued > a else a  # max(a, queued): the host was late (or still in a slow launch
                if split > a:  # call) up to it; then queued
                    host += split - a
                    gap_start, gap_end = start + a, start + split
                    add(new(Gap, (gap_start, gap_end, "host", number, after)))
                    if gap_end - gap_start > longest:
                        longest = gap_end - gap_start
                other += b - split
                gap_start, gap_end = start + split, start + b
                add(new(Gap, (gap_start, gap_end, "other", number, after)))
                if gap_end - gap_start > longest:
                    longest = gap_end - gap_start
                continue
            if not late and queued - a >= wait:  # still in its launch call (a first launch, say)
                late = True
        length = b - a
        if late:  # launched after the gap began (or still in its call, or unknown): the host was late
            host += length
            kind = "host"
        elif length < wait:
            kernel += length
            kind = "kernel"
        else:
            other += length
            kind = "other"
        gap_start, gap_end = start + a, start + b
        add(new(Gap, (gap_start, gap_end, kind, number, after)))
        if gap_end - gap_start > longest:
            longest = gap_end - gap_start
    out.host_wait, out.kernel_wait, out.other_wait, out.longest_gap = host, kernel, other, longest
    out.parts = parts
    return out


def step_budgets(trace: Trace) -> list[Budget]:
    """Each step's budget over its window on the GPU timeline (Trace.windows: they tile it), counting every GPU op
    in the window, whoever launched it (Step.on_gpu: one sweep over the timeline)."""
    out = []
    for step, w in zip(trace.steps, trace.windows, strict=True):
        parts = step.on_gpu if step.window is w else trace.timeline.window(w.start, w.end)
        b = _budget(parts, w.start, w.end, w.number)
        b.window = w.kind
        out.append(b)
    return out


def median_budget(budgets: list[Budget]) -> Budget | None:
    """The budget of the median step: the step whose span is the median (the later of the two middle ones for an
    even count: median_index), its own figures whole. Medians taken figure by figure came from different steps,
    so they did not add up to the span, and of two steps they were the mean, which describes neither."""
    if not budgets:
        return None
    return budgets[median_index([b.span for b in budgets])]


def percent(value: float) -> str:
    """A share of a step as printed: whole percents from 1%, one decimal below."""
    return f"{value:.0f}%" if value >= 1 else f"{value:.1f}%"


# ---- the per-op roofline: FLOPs from record_shapes, joined to kernels by External id ----


def budget_line(b: Budget) -> str:
    """The median step's budget in one line: span, GPU busy and its parts, GPU idle and its parts."""
    what = "GPU window" if b.window == "gpu" else "span"
    line = (f"budget of the median step: {what} {human_time(b.span)} = GPU busy {percent(b.pct(b.busy))} (compute "
            f"{percent(b.pct(b.compute))}, memcpy/memset {percent(b.pct(b.non_compute))}")  # fmt: skip
    if b.comm:
        line += (
            f", communication exposed {percent(b.pct(b.comm_exposed))} with {percent(b.pct(b.comm_hidden))} more hidden"
        )
    return line + (f") + idle {percent(b.pct(b.idle))} (waiting for the host {percent(b.pct(b.host_wait))}, kernels "
                   f"waiting {percent(b.pct(b.kernel_wait + b.other_wait))})")  # fmt: skip
