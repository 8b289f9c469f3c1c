"""What the HTML report and the annotated trace show of one trace, as plain figures (a Picture), made where it is read.

Nothing is measured here that the diagnosis (common.analysis.diagnosis) and its budgets, the roofline
(common.analysis.roofline_table), the kernel table and the collectives do not already give: a Picture copies their
figures into small records a worker process hands back and the report draws (common.analysis.html_report), or the
annotated copy of the trace marks (common.analysis.annotate). Each idle gap is named by its cause, the cause the
verdict's host-wait story adds up (diagnosis.gap_causes).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from common.analysis.budget import PARTS as BUDGET_PARTS
from common.analysis.budget import Budget, Gap
from common.analysis.collectives import CollectiveRow, collective_rows
from common.analysis.diagnosis import (
    Diagnosis,
    GapContext,
    HeldBy,
    gap_causes,
    gap_context,
    top_level_ops,
    verdict_lines,
)
from common.analysis.roofline_table import op_roofs, shape_text
from common.physics import Peak
from common.reader.model import Trace, median_index

TIMELINE_OPS = 4000  # GPU ops drawn in the median step's timeline; the rest are counted, not drawn
TIMELINE_CPU_OPS = 2000  # top-level CPU ops drawn under them
KERNELS_LISTED = 200  # rows of the report's kernel table
# A gap's cause, as the legend and the annotated trace name it: the verdict's host-wait causes, then the GPU's waits.
CAUSES = {
    "data loading": "waiting for the host: the DataLoader",
    "the optimizer": "waiting for the host: the optimizer",
    "CPU op": "waiting for the host: an op's CPU work",
    "launches": "waiting for the host: launching op by op",
    "no recorded op": "waiting for the host: no recorded op (Python)",
    "compiling": "waiting for the host: compiling (one-time)",
    "one-time": "waiting for the host: a one-time cost (start-up, a first call, graph capture)",
    "a sync": "waiting for the host: a sync (the host waits on the GPU)",
    "runtime call": "waiting for the host: a runtime call (cudaFree, cudaMalloc, ...)",
    "kernel": "kernels waiting (launch latency)",
    "other": "a queued op waiting (sync, event, other stream)",
}
# The parts of a step's budget, as its stacked bar shows them (Budget.split, µs); they add up to its span. The
# one-time part is what the verdict finds ran once (Diagnosis.one_time), each share out of the part that held it.
PARTS = (*BUDGET_PARTS, "one-time")


@dataclass(frozen=True)
class GapMark:
    """One idle gap of the GPU in a step: its window, its cause (a key of CAUSES), what the cause names (the op or
    label) and what held it on the CPU (None: nothing recorded, or a wait on the GPU's side)."""

    start: float
    end: float
    step: int
    cause: str
    what: str
    held: HeldBy | None

    @property
    def label(self) -> str:
        """The gap's name on the timeline: its cause, and the op it names."""
        return CAUSES[self.cause] + (f" ({self.what})" if self.what else "")


@dataclass(frozen=True)
class StepBar:
    """One step's budget as its bar: its window and the µs of each of PARTS (a CPU trace: its CPU time alone)."""

    number: int
    start: float
    span: float
    window: str  # "step" (its CPU span), "gpu" (its GPU work's window) or "cpu" (a CPU trace's step)
    parts: dict[str, float]


@dataclass(frozen=True)
class Lane:
    """A slice on one lane of the timeline: a GPU stream's op, a gap, or a top-level CPU op."""

    lane: str
    start: float
    dur: float
    name: str
    group: str  # the colour's key: a kernel family, a gap's cause, or "CPU op"


@dataclass(frozen=True)
class RoofPoint:
    """One shaped op on the roofline (roofline_table.OpRoof's figures): per call its FLOPs and bytes."""

    op: str
    shape: str
    kernel: str
    calls: float
    us: float
    flops: float | None
    bytes: float | None
    intensity: float | None
    tflops: float | None
    pct_roof: float | None
    bound: str | None
    peak_tflops: float | None
    peak_gbps: float | None


@dataclass(frozen=True)
class KernelRow:
    """One kernel (memcpy, memset) name over the profiled steps, as the top-kernels table has it."""

    name: str
    family: str
    us_per_step: float
    calls_per_step: float
    share: float
    tflops: float | None
    pct_peak: float | None


@dataclass(kw_only=True)
class Picture:
    """What the report draws of one trace and the annotated copy marks on it."""

    device: str | None
    bound: str
    verdict: str
    levers: list[str]
    savings: list[str]  # what the verdict predicts its levers save (savings_of); none: it predicts none
    budget_line: str | None
    rules: list[tuple[str, str, list[str]]]  # (name, fix, evidence)
    steps: list[StepBar]
    median: int | None  # the number of the median step
    timeline: list[Lane] = field(default_factory=list)  # the median step's window, from its start
    left_out: int = 0  # GPU and CPU slices of that window not drawn (more than TIMELINE_OPS)
    gaps: list[GapMark] = field(default_factory=list)  # every step's
    roofline: list[RoofPoint] = field(default_factory=list)
    kernels: list[KernelRow] = field(default_factory=list)
    collectives: list[CollectiveRow] = field(default_factory=list)


def savings_of(verdict: str) -> list[str]:
    """What a verdict predicts its levers save: each "saves up to … of the …" it says, in its order."""
    return re.findall(r"saves up to [^()]*? of the [^()]*?(?=\))", verdict)


def levers_of(verdict: str) -> list[str]:
    """The levers a verdict names: what follows each "→" (up to the next ";" but for the last, which runs to the
    end: the host story joins its levers with "; and")."""
    parts = verdict.split(" → ")[1:]
    return [p if i == len(parts) - 1 else p.split(";")[0] for i, p in enumerate(parts)]


def _bar(b: Budget, number: int, start: float, once: dict[str, float]) -> StepBar:
    """Step `number`'s bar from its budget `b`, the µs of each part that ran once (`once`) shown apart as one-time."""
    parts = b.split()
    taken = {part: min(max(us, 0.0), parts[part]) for part, us in once.items()}
    for part, us in taken.items():
        parts[part] -= us
    parts["one-time"] = sum(taken.values(), 0.0)
    return StepBar(number=number, start=start, span=b.span, window=b.window, parts=parts)


def _window_start(trace: Trace, i: int, b: Budget) -> float:
    """Where step `i`'s budget window starts: its CPU span, or its first GPU op where it was measured on the GPU."""
    step = trace.steps[i]
    if b.window == "gpu":
        return min(op.start for op in step.gpu if op.start is not None)
    return step.start_us


def gap_marks(trace: Trace, budgets: list[Budget]) -> list[GapMark]:
    """Every gap of `budgets` with its cause: a host wait's largest (diagnosis.gap_causes), else the GPU's wait."""
    context = gap_context(trace)
    return [_mark(trace, gap, context) for b in budgets for gap in b.gaps]


def _mark(trace: Trace, gap: Gap, context: GapContext) -> GapMark:
    if gap.kind != "host":
        return GapMark(gap.start, gap.end, gap.step, gap.kind, "", None)
    causes, held = gap_causes(trace, gap, context)
    by: Counter = Counter()
    for (cause, _), us in causes.items():
        by[cause] += us
    cause = by.most_common(1)[0][0] if by else "no recorded op"
    what = max((w for (c, w) in causes if c == cause), key=lambda w: causes[cause, w], default="")
    return GapMark(gap.start, gap.end, gap.step, cause, what, held if cause != "no recorded op" else None)


def _timeline(trace: Trace, i: int, start: float, end: float, marks: list[GapMark]) -> tuple[list[Lane], int]:
    """The slices of step `i`'s window [start, end], times from `start`: its GPU ops by stream, its gaps, and the
    top-level CPU ops; and how many were left out."""
    step = trace.steps[i]
    gpu = [op for op in step.gpu if op.start is not None]
    lanes = [Lane(f"GPU stream {op.stream}", op.start - start, op.us, op.name, op.family) for op in gpu[:TIMELINE_OPS]]
    lanes += [Lane("GPU idle", g.start - start, g.end - g.start, g.label, g.cause) for g in marks]
    cpu = [(s, e, n) for s, e, n in top_level_ops(trace, start, end)]
    lanes += [
        Lane("CPU ops", max(s, start) - start, min(e, end) - max(s, start), n, "CPU op")
        for s, e, n in cpu[:TIMELINE_CPU_OPS]
    ]
    return lanes, max(0, len(gpu) - TIMELINE_OPS) + max(0, len(cpu) - TIMELINE_CPU_OPS)


def _roof_points(trace: Trace, peak: Peak | None) -> list[RoofPoint]:
    return [
        RoofPoint(
            op=r.op.name,
            shape=shape_text(r.op),
            kernel=r.kernel,
            calls=r.calls,
            us=r.us,
            flops=r.op.flops,
            bytes=r.op.bytes,
            intensity=r.op.intensity,
            tflops=r.tflops,
            pct_roof=r.pct_roof,
            bound=r.bound,
            peak_tflops=r.peak_tflops,
            peak_gbps=r.peak_gbps,
        )  # fmt: skip
        for r in op_roofs(trace, peak)
    ]


def _kernels(trace: Trace, rates: dict) -> list[KernelRow]:
    uses = sorted(trace.kernel_uses().values(), key=lambda u: -u.us)
    total = sum(u.us for u in uses) or 1.0
    rows = []
    for u in uses[:KERNELS_LISTED]:
        rate = rates.get((u.op.category, u.op.name))
        rows.append(KernelRow(name=u.op.name, family=u.op.family, us_per_step=u.us, calls_per_step=u.calls,
                              share=100.0 * u.us / total, tflops=rate.tflops if rate else None,
                              pct_peak=rate.pct_peak if rate else None))  # fmt: skip
    return rows


def picture(trace: Trace, diagnosis: Diagnosis, peak: Peak | None, draw: bool = True) -> Picture:
    """The Picture of `trace` from its `diagnosis`: with `draw`, all the report draws; without, only what the
    annotated trace marks (the steps and the gaps)."""
    budgets = diagnosis.budgets
    lines = verdict_lines(diagnosis)
    out = Picture(
        device=trace.device_name,
        bound=diagnosis.bound,
        verdict=diagnosis.verdict,
        levers=levers_of(diagnosis.verdict),
        savings=savings_of(diagnosis.verdict),
        budget_line=lines[1].strip() if diagnosis.median is not None else None,
        rules=[(r.name, r.fix, r.evidence) for r in diagnosis.rules],
        steps=[],
        median=None,
    )
    if budgets:
        starts = [_window_start(trace, i, b) for i, b in enumerate(budgets)]
        once = diagnosis.one_time or [{} for _ in budgets]
        out.steps = [
            _bar(b, s.number, start, o) for b, s, start, o in zip(budgets, trace.steps, starts, once, strict=True)
        ]
        m = median_index([b.span for b in budgets])
        out.median = trace.steps[m].number
        out.gaps = gap_marks(trace, budgets)
    elif trace.steps:  # a CPU trace (or no GPU work): each step's CPU time
        out.steps = [
            StepBar(number=s.number, start=s.start_us, span=s.dur_us, window="cpu", parts={"CPU span": s.dur_us})
            for s in trace.steps
        ]
        m = median_index([s.dur_us for s in trace.steps])
        out.median = trace.steps[m].number
    if not draw:
        return out
    if out.median is not None:
        bar = out.steps[m]
        inside = [g for g in out.gaps if g.step == bar.number]
        out.timeline, out.left_out = _timeline(trace, m, bar.start, bar.start + bar.span, inside)
    if trace.has_gpu:
        out.roofline = _roof_points(trace, peak)
        out.kernels = _kernels(trace, diagnosis.rates)
    out.collectives = collective_rows(trace)
    return out
