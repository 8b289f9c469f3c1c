"""What the summary keeps of one trace, a Digest, made where the trace is read (a worker process, for a folder):
its row, the figures the other traces are compared by, and its own tables (top kernels, phases, steps, verdict).
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from common.analysis.collectives import arrivals, collective_table
from common.analysis.diagnosis import diagnose, verdict_lines
from common.analysis.efficiency import peak_cell
from common.analysis.figures import Row, metadata_figure, summarize
from common.analysis.invariants import invariant_notes
from common.analysis.roofline_table import kernel_roofs, op_roofs, roof_table
from common.analysis.tables import (
    DASH,
    LAUNCH_HEADERS,
    fit_last_column,
    launch_cells,
    num,
    phase_table,
    step_table,
    table,
)
from common.physics import find_peak
from common.reader.build import no_gc, read_trace
from common.reader.model import GpuOp, Step, Trace
from common.reader.naming import cut_name, short_name
from common.reader.occupancy import SmLimits
from common.units import human_time

if TYPE_CHECKING:  # drawn only under --html or --annotate: common.analysis.picture is loaded then
    from common.analysis.picture import Picture

LEFT = {"trace", "on", "family", "kernel"}  # text columns are left-aligned, numbers right-aligned


@dataclass(kw_only=True)  # built by keyword: it has 20 fields
class Digest:
    """What the summary prints of one trace, made where the trace was read (a worker process, for a folder): its
    row, the figures the other traces are compared by, and its own tables, never its events."""

    path: Path
    name: str
    row: Row
    has_gpu: bool
    gpu_activity: bool  # False: launches but no GPU event in the whole trace
    step_time: float | None  # the per-step time the default baseline is chosen by (GPU busy, else CPU)
    notes: list[str]
    streams: str | None  # streams_line(), for a trace of several streams
    cpu_source: str  # what its CPU column measures (common.reader.model.CPU_SOURCES)
    label: str | None  # the record_function label it measures, if one
    skipped: int  # events with a bad ts/dur
    distributed: dict  # the trace's distributedInfo
    rank: int | None
    ranked: tuple[float | None, ...]  # rank_figures(), for the rank table
    steps: int  # how many profiled steps
    phases: str | None  # the phase table, if the trace has phases
    per_step: str | None  # the per-step table, if shown
    kernels: str | None  # the top-kernels table, if the trace has a GPU lane and GPU activity
    verdict: list[str]  # what bounds its steps (common.analysis.diagnosis): the verdict, its budget, the rules fired
    budgeted: bool  # its per-step table shows the time budget
    roofs: str | None = None  # under --explain, the ops furthest below their roof (common.analysis.roofline_table)
    collectives: str | None = None  # its collectives table (common.analysis.collectives), if it has any
    arrivals: list | None = None  # a rank's collectives as the skew across ranks matches them
    picture: Picture | None = None  # under --html or --annotate, what they draw (common.analysis.picture)


def digest(trace: Trace, args: argparse.Namespace) -> Digest:
    """The Digest of `trace` for the summary's flags `args` (--top, --per-step, --markdown, the peaks)."""
    kernels = None
    diagnosis = diagnose(trace, args.peak_tflops)
    peak = find_peak(trace.device_name, args.peak_tflops, args.peak_gbps)  # the per-op roofline's
    if trace.has_gpu and trace.gpu_activity:
        stats = top_kernels(trace, args.top)
        roofs = kernel_roofs(op_roofs(trace, peak)) if args.wide else None
        headers, cells = kernel_cells(
            stats, 200 if args.wide else 48, trace.sm, diagnosis.rates, roofs, trace.broken_links
        )
        if not args.markdown and not args.wide and cells:  # the kernel names take what is left of TEXT_WIDTH
            cells = fit_last_column(headers, cells, cut_name)
        kernels = table(headers, cells, LEFT, args.markdown) if stats else "no GPU work in the steps"
    shown = args.per_step or len(trace.steps) > 3
    html, annotate = getattr(args, "html", None), getattr(args, "annotate", None)
    if html or annotate:
        from common.analysis.picture import picture
    return Digest(
        path=trace.path,
        name=trace.name,
        row=summarize(trace, args.peak_tflops, args.peak_gbps),
        has_gpu=trace.has_gpu,
        gpu_activity=trace.gpu_activity,
        step_time=trace.step_time_us()[0],
        notes=trace.notes + invariant_notes(trace, diagnosis),  # a broken invariant: one note, before any prints
        streams=streams_line(trace),
        cpu_source=trace.cpu_source,
        label=trace.label,
        skipped=trace.skipped,
        distributed=trace.distributed,
        rank=trace.rank,
        ranked=rank_figures(trace) if trace.rank is not None else (),
        steps=len(trace.steps),
        phases=phase_table(trace, args.markdown) if trace.phases else None,
        per_step=step_table(trace, every=args.per_step, markdown=args.markdown, budgets=diagnosis.budgets)
        if shown
        else None,
        kernels=kernels,
        verdict=verdict_lines(diagnosis, args.explain),
        budgeted=shown and bool(diagnosis.budgets),
        roofs=roof_table(trace, peak, args.markdown) if args.explain and trace.has_gpu else None,
        collectives=collective_table(trace, args.markdown),
        arrivals=arrivals(trace) if trace.rank is not None else [],
        picture=picture(trace, diagnosis, peak, draw=bool(html)) if html or annotate else None,
    )


def read_digest(path: Path, args: argparse.Namespace) -> Digest | str:
    """The Digest of the trace at `path`, or why it cannot be read (the message names the file). The cyclic
    garbage collector stays paused until the trace is freed: its millions of objects make no cycles, and a pass
    over them on the way (once the reader or the diagnosis resumed it) would find nothing to free."""
    try:
        with no_gc():
            return digest(read_trace(path, args.region), args)
    except ValueError as exc:
        return str(exc)


@dataclass
class KernelStat:
    """One kernel name's share of a trace's GPU work, and its launch figures (from its first launch)."""

    op: GpuOp
    us_per_step: float  # total over the profiled steps / number of steps
    calls_per_step: float
    share: float  # % of the trace's GPU work summed over streams (more than GPU busy where streams overlap)


def top_kernels(trace: Trace, n: int) -> list[KernelStat]:
    """The `n` kernels (and memcpy/memset) with the most total time over the profiled steps."""
    uses = sorted(trace.kernel_uses().values(), key=lambda u: -u.us)
    busy = sum(u.us for u in uses) or 1.0
    return [KernelStat(u.op, u.us, u.calls, 100.0 * u.us / busy) for u in uses[:n]]


def kernel_cells(
    stats: list[KernelStat],
    name_width: int = 48,
    sm: SmLimits | None = None,
    rates: dict | None = None,
    roofs: dict | None = None,
    broken_links: bool = False,
) -> tuple[list[str], list[list[str]]]:
    """A top-kernels table as (headers, cells): time, calls and share, the TFLOP/s and % of peak its op's
    record_shapes give (`rates`: common.analysis.efficiency.efficiency; the columns only where some kernel has one),
    the MB per step its ops move and their bound (`roofs`: common.analysis.roofline_table.kernel_roofs; likewise),
    then the launch figures (theoretical occupancy on a GPU of limits `sm`) and the name. No % of peak is above 100
    (efficiency.peak_cell: over the peak, the cell says "link?" where `broken_links`, else "peak?")."""
    rates = {key: rates[key] for key in ((k.op.category, k.op.name) for k in stats) if key in rates} if rates else {}
    roofs = (
        {k.op.name: roofs[k.op.name] for k in stats if k.op.category == "kernel" and k.op.name in roofs}
        if roofs
        else {}
    )
    headers = ["µs/step", "calls", "% sum", *(["TFLOP/s", "%peak"] if rates else []),
               *(["MB/step", "bound"] if roofs else []), "family", *LAUNCH_HEADERS, "kernel"]  # fmt: skip
    cells = []
    for k in stats:
        rate = rates.get((k.op.category, k.op.name))
        if not rates:
            shaped = []
        elif rate and rate.helper:  # a helper kernel of an op: the op's rate is on its main kernel's row
            shaped = ["helper", DASH]
        else:
            shaped = [num(rate.tflops) if rate else DASH, peak_cell(rate, broken_links) if rate else DASH]
        cells.append([
            f"{k.us_per_step:.1f}",
            f"{k.calls_per_step:g}",
            f"{k.share:.1f}",
            *shaped,
            *(_roof_cells(roofs.get(k.op.name)) if roofs else []),
            k.op.family,
            *launch_cells(k.op, sm),
            short_name(k.op.name, name_width),
        ])  # fmt: skip
    return headers, cells


def _roof_cells(roof: tuple[float | None, str | None] | None) -> list[str]:
    """The MB/step and bound cells of a kernel's row: dashes where its op has no shapes."""
    return [num(roof[0]), roof[1] or DASH] if roof else [DASH, DASH]


def streams_line(trace: Trace) -> str | None:
    """For a trace whose GPU work ran on several streams: per step (medians), GPU busy (the union), the sum over
    the streams and each stream's sum, and how long two or more were busy at once; None on one stream."""
    if not any(len(s.streams) > 1 for s in trace.steps):
        return None
    streams = sorted(
        {op.stream for s in trace.steps for op in s.gpu}, key=lambda x: (not isinstance(x, int), str(x).zfill(20))
    )
    each = ", ".join(
        f"stream {x}: {human_time(trace.per_step(lambda s, x=x: sum(op.us for op in s.gpu if op.stream == x)))}"
        for x in streams
    )
    busy, total = trace.per_step(lambda s: s.gpu_busy_us), trace.per_step(lambda s: s.gpu_sum_us)
    overlap = trace.per_step(lambda s: s.stream_overlap_us)
    return (
        f"GPU work on {len(streams)} streams: per step, GPU busy {human_time(busy)} (the union), summed over the "
        f"streams {human_time(total)} (sums per stream: {each}); two or more busy at once {human_time(overlap)}"
    )


def _communication_us(step: Step) -> float:
    return sum(op.us for op in step.kernels if op.family == "communication")


def _compute_us(step: Step) -> float:
    return sum(op.us for op in step.gpu if op.family != "communication")


def rank_figures(trace: Trace) -> tuple[float | None, ...]:
    """A rank's figures per step (medians): GPU busy (the union over streams), the sums of compute and of
    communication kernel time, exposed communication, CPU time and its peak GPU memory in bytes (None where the
    trace cannot give one)."""
    gpu = trace.has_gpu and trace.gpu_activity  # launches without GPU events give no GPU figure, never a zero
    busy = trace.per_step(lambda s: s.gpu_busy_us) if gpu else None
    comm = trace.per_step(_communication_us) if gpu else None
    compute = trace.per_step(_compute_us) if gpu else None
    exposed = trace.per_step(lambda s: s.exposed_communication_us) if gpu else None
    memory = trace.meta.get("memory") if isinstance(trace.meta.get("memory"), dict) else {}
    peak = metadata_figure(memory.get("peak_bytes"))
    return busy, compute, comm, exposed, trace.per_step(lambda s: s.region_us), peak
