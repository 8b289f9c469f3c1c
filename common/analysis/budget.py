"""A step's time budget: its span, how long the GPU was busy (compute, memcpy/memset, communication exposed or
hidden) and idle, and each idle gap's cause, as Holistic Trace Analysis splits it: the GPU waits for the host (the
next GPU op was not launched yet), or a kernel waits on another (launched in time; a gap under KERNEL_WAIT_US is
launch latency, a longer one a dependency: an event, another stream, a sync).
"""

from __future__ import annotations

import bisect
import functools
from dataclasses import dataclass, field
from typing import NamedTuple

from common.reader.intervals import exposed_us, merged
from common.reader.model import GpuOp, Trace, median_index
from common.reader.naming import kernel_family
from common.reader.timeline import SAME_TIME_US
from common.units import human_time

KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay: 30, compared with the trace's µs timestamps


class Gap(NamedTuple):
    """A time the GPU ran nothing inside a step, and why: "host" (the next op was not launched yet), "kernel"
    (launched, a short wait), "other" (launched, waiting on something else). A named tuple: a step has a gap
    per op or so, and the budget makes them with `_new_gap` in C."""

    start: float
    end: float
    kind: str
    step: int
    after: GpuOp | None  # the GPU op that ended the gap (None: the step's tail)

    @property
    def us(self) -> float:
        return self.end - self.start


_new_gap = functools.partial(tuple.__new__, Gap)  # Gap((start, end, kind, step, after)), without its Python __new__


@dataclass
class Budget:
    """One step's time, µs: its span, and how the GPU spent it."""

    span: float
    busy: float = 0.0  # union over streams of kernel, memcpy and memset
    compute: float = 0.0  # union of compute kernels (all but communication)
    non_compute: float = 0.0  # memcpy/memset not under a compute kernel
    comm: float = 0.0  # union of communication kernels
    comm_exposed: float = 0.0  # communication while no other GPU work ran
    host_wait: float = 0.0
    kernel_wait: float = 0.0
    other_wait: float = 0.0
    gaps: list[Gap] = field(default_factory=list)
    longest_gap: float = 0.0  # the length of the longest of `gaps` (0: none)
    window: str = "step"  # "step": the step's CPU span; "gpu": its GPU work's own window (the GPU ran behind)

    @property
    def idle(self) -> float:
        return self.host_wait + self.kernel_wait + self.other_wait

    @property
    def comm_hidden(self) -> float:
        return self.comm - self.comm_exposed

    def pct(self, us: float) -> float:
        return 100.0 * us / self.span if self.span > 0 else 0.0


def _start(op: GpuOp) -> float:
    return op.start  # type: ignore[return-value]


def _length(spans: list[tuple[float, float]]) -> float:
    return sum(end - start for start, end in merged(spans, SAME_TIME_US))


def budget(ops: list[GpuOp], start: float, end: float, number: int = 0, edges: bool = True) -> Budget:
    """The budget of the GPU work `ops` over [start, end], each op cut to the window. With `edges`, the time before
    the first op and after the last counts as waiting for the host (nothing was launched yet, or nothing is left);
    without, the window is the ops' own (HTA's temporal breakdown: first start to last end). Busy time and every
    part of it are unions (common.reader.intervals.merged, the one union), on times taken from the window's start
    so that each length stays exact on a clock near 1e12 µs."""
    out = Budget(end - start)
    timed = sorted((op for op in ops if op.start is not None and op.start <= end and op.start + op.us >= start),
                   key=_start)  # fmt: skip
    if not timed:
        out.host_wait = max(0.0, end - start) if edges else 0.0
        return out
    span = end - start
    spans = [(max(op.start - start, 0.0), min(op.start - start + op.us, span)) for op in timed]
    union = merged(spans, SAME_TIME_US)
    out.busy = sum(b - a for a, b in union)
    begins = [a for a, _ in spans]
    gaps, waits = out.gaps, {"host": 0.0, "kernel": 0.0, "other": 0.0}
    idle_from = 0.0 if edges else union[0][0]
    for a, b in union:
        if a > idle_from + SAME_TIME_US:  # a gap in the window: classed as HTA classes it
            after = timed[bisect.bisect_left(begins, a)]
            length = a - idle_from
            launch = after.launch
            if launch is None or launch.ts > start + idle_from:
                kind = "host"
            else:
                kind = "kernel" if length < KERNEL_WAIT_US else "other"
            waits[kind] += length
            gaps.append(_new_gap((start + idle_from, start + a, kind, number, after)))
        idle_from = b
    if edges and idle_from < span:  # nothing left to run: the GPU waits for the host's next step
        waits["host"] += span - idle_from
        gaps.append(_new_gap((start + idle_from, end, "host", number, None)))
    out.host_wait, out.kernel_wait, out.other_wait = waits["host"], waits["kernel"], waits["other"]
    out.longest_gap = max((g.end - g.start for g in gaps), default=0.0)
    is_comm = [op.category == "kernel" and kernel_family(op.name) == "communication" for op in timed]
    if any(is_comm):
        others = [s for s, c in zip(spans, is_comm, strict=True) if not c]
        out.comm = _length([s for s, c in zip(spans, is_comm, strict=True) if c])
        out.compute = _length(
            [s for s, op, c in zip(spans, timed, is_comm, strict=True) if not c and op.category == "kernel"]
        )
        out.non_compute = _length(others) - out.compute
        out.comm_exposed = exposed_us([s for s, c in zip(spans, is_comm, strict=True) if c], others)
    else:
        kernels = [s for s, op in zip(spans, timed, strict=True) if op.category == "kernel"]
        out.compute = out.busy if len(kernels) == len(spans) else _length(kernels)
        out.non_compute = out.busy - out.compute
    return out


def step_budgets(trace: Trace) -> list[Budget]:
    """Each step's budget over its window on the GPU timeline (Trace.windows: they tile it), counting every GPU op
    in the window, whoever launched it."""
    timeline = trace.timeline
    out = []
    for w in trace.windows:
        b = budget(timeline.ops_in(w.start, w.end), w.start, w.end, w.number)
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
