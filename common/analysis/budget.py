"""A step's time budget: its span, how long the GPU was busy (compute, memcpy/memset, communication exposed or
hidden) and idle, and each idle gap's cause, as Holistic Trace Analysis splits it: the GPU waits for the host (the
next GPU op was not launched yet), or a kernel waits on another (launched in time; a gap under KERNEL_WAIT_US is
launch latency, a longer one a dependency: an event, another stream, a sync).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import NamedTuple

from common.reader.model import GpuOp, Step, median_index
from common.reader.naming import kernel_family
from common.units import human_time

KERNEL_WAIT_US = 30.0  # HTA's consecutive_kernel_delay: 30, compared with the trace's µs timestamps
OUTSIDE_SPAN_US = 1.0  # GPU work of a step this far outside its CPU span: the step is measured on the GPU's window
SAME_TIME_US = 0.001  # Kineto's resolution, 1 ns: two ops closer than this touch (0.000977 µs is a double's rounding)


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
    return op.start


def _length(ops: list[GpuOp]) -> float:
    """How long at least one of `ops` (in start order) runs: a group of overlapping ops adds its span, a lone op
    its own duration (exact, to the last bit, for back-to-back ops on one stream)."""
    total, group_start, group_end, single, size = 0.0, 0.0, -math.inf, 0.0, 0
    for op in ops:
        start, us = op.start, op.us
        if size and start < group_end:
            if start + us > group_end:
                group_end = start + us
            size += 1
            continue
        if size:
            total += single if size == 1 else group_end - group_start
        group_start, group_end, single, size = start, start + us, us, 1
    return total + (single if size == 1 else group_end - group_start if size else 0.0)


def budget(ops: list[GpuOp], start: float, end: float, number: int = 0, edges: bool = True) -> Budget:
    """The budget of the GPU work `ops` over [start, end]. With `edges`, the time before the first op and after
    the last counts as waiting for the host (nothing was launched yet, or nothing is left); without, the window
    is the ops' own (HTA's temporal breakdown: first start to last end). One pass over the ops in start order
    (a step's are in that order already) finds the union over streams, the union of the kernels and the gaps;
    communication, rare, takes a second pass."""
    timed, last = ops, -math.inf
    for op in ops:  # in start order, none untimed (a step's ops): used as they are
        begin = op.start
        if begin is None or begin < last:
            timed = sorted((op for op in ops if op.start is not None), key=_start)
            break
        last = begin
    out = Budget(end - start)
    if not timed:
        out.host_wait = max(0.0, end - start) if edges else 0.0
        return out
    gaps = out.gaps
    busy_until = start if edges else timed[0].start
    busy = 0.0  # the union of every op, and of the kernels, built group by group as the ops come
    group_start, single, size = 0.0, 0.0, 0
    kernels, k_start, k_end, k_single, k_size = 0.0, 0.0, -math.inf, 0.0, 0
    comm = False
    host = kernel = other = longest = 0.0
    for op in timed:
        begin, us = op.start, op.us
        stop = begin + us
        if begin > busy_until + SAME_TIME_US:
            if size:
                busy += single if size == 1 else busy_until - group_start
            group_start, single, size = begin, us, 0
            if begin > start and busy_until < end:  # a gap in the window: classed as HTA classes it
                gap_start = start if start > busy_until else busy_until  # max(busy_until, start)
                gap_end = end if end < begin else begin  # min(begin, end)
                length = gap_end - gap_start
                launch = op.launch
                if launch is None or launch[1] > gap_start:
                    host += length
                    kind = "host"
                elif length < KERNEL_WAIT_US:
                    kernel += length
                    kind = "kernel"
                else:
                    other += length
                    kind = "other"
                gaps.append(_new_gap((gap_start, gap_end, kind, number, op)))
                if length > longest:
                    longest = length
        elif size == 0:
            group_start, single = begin, us
        size += 1
        if stop > busy_until:
            busy_until = stop
        if op.category == "kernel":
            if kernel_family(op.name) == "communication":
                comm = True
            if k_size and begin < k_end:
                if stop > k_end:
                    k_end = stop
                k_size += 1
            else:
                if k_size:
                    kernels += k_single if k_size == 1 else k_end - k_start
                k_start, k_end, k_single, k_size = begin, stop, us, 1
    busy += single if size == 1 else busy_until - group_start
    kernels += (k_single if k_size == 1 else k_end - k_start) if k_size else 0.0
    if edges and busy_until < end:  # nothing left to run: the GPU waits for the host's next step
        gap_start = max(busy_until, start)
        host += end - gap_start
        gaps.append(_new_gap((gap_start, end, "host", number, None)))
        if end - gap_start > longest:
            longest = end - gap_start
    out.busy, out.host_wait, out.kernel_wait, out.other_wait = busy, host, kernel, other
    out.longest_gap = longest
    if comm:
        is_comm = [op.category == "kernel" and kernel_family(op.name) == "communication" for op in timed]
        others = [op for op, c in zip(timed, is_comm, strict=True) if not c]
        out.comm = _length([op for op, c in zip(timed, is_comm, strict=True) if c])
        out.compute = _length([op for op in others if op.category == "kernel"])
        out.non_compute = _length(others) - out.compute
        out.comm_exposed = out.busy - out.compute - out.non_compute
    else:
        out.compute = kernels
        out.non_compute = busy - kernels
    return out


def step_budget(step: Step, next_start: float | None = None) -> Budget:
    """The budget of one profiled step: over its CPU span where its GPU work ran inside it; else (no sync per step,
    graph replays, a GPU steps behind the CPU) over the GPU's own window, from its first GPU op to the next step's
    first (`next_start`; its own last op's end for the last step), so busy and idle add up to that window."""
    start, end = step.start_us, step.start_us + step.dur_us
    timed = [op for op in step.gpu if op.start is not None]
    if timed:
        first = min(op.start for op in timed)
        last = max(op.start + op.us for op in timed)
        if first < start - OUTSIDE_SPAN_US or last > end + OUTSIDE_SPAN_US:
            stop = next_start if next_start is not None and next_start >= last else last
            out = budget(step.gpu, first, stop, step.number)
            out.window = "gpu"
            return out
    return budget(step.gpu, start, end, step.number)


def step_budgets(steps: list[Step]) -> list[Budget]:
    """Each step's budget (step_budget), the next step's first GPU op closing a GPU window."""
    firsts = [min((op.start for op in s.gpu if op.start is not None), default=None) for s in steps]
    return [step_budget(s, firsts[i + 1] if i + 1 < len(steps) else None) for i, s in enumerate(steps)]


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
