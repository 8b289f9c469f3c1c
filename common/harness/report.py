"""What a run prints after profiling: the table, guess vs trace, the physics, the unprofiled time (--bench), the files.

Every function here prints and returns nothing, except `exit_code`, which prints nothing.
"""

from __future__ import annotations

import math
import textwrap

from common.analysis.diagnosis import diagnose, verdict_lines
from common.analysis.figures import shapes_check
from common.analysis.invariants import invariant_notes
from common.analysis.tables import TEXT_WIDTH, phase_table, step_table
from common.cli import shown
from common.harness.bench import UnprofiledTime
from common.harness.export import TraceFiles
from common.harness.guess import Verdict, calls_per_step, format_verdicts
from common.harness.memory import memory_line
from common.harness.runtime import Run
from common.harness.share import share_lines
from common.physics import Work, achieved, find_peak
from common.reader.model import Trace
from common.units import human_time


def step_seconds(trace: Trace) -> tuple[float, str, str] | None:
    """The time per step, what it measures (GPU busy on a GPU, the label's CPU time otherwise) and how it was
    taken from the steps: the median of 3 or more; the later of 2 (a median of two is their mean, and the
    first step of a cold run is often many times the second); per call where the trace's one step holds every
    call of the label (no schedule)."""
    us, where = trace.step_time_us()
    if us is None:
        return None
    what = "GPU busy (the union over streams)" if where == "GPU" else f"CPU (the {trace.label!r} label)"
    value = (lambda s: s.gpu_busy_us) if where == "GPU" else (lambda s: s.region_us)
    times = [t for t in map(value, trace.steps) if t is not None]
    calls = calls_per_step(trace)
    if calls > 1:
        return us / calls * 1e-6, what, f"per call: the one recording's {human_time(us)} over its {calls} calls"
    if len(times) == 2:
        return times[1] * 1e-6, what, f"the later of 2 profiled steps (the first: {human_time(times[0])})"
    return us * 1e-6, what, "the one profiled step" if len(times) == 1 else f"median of {len(times)} profiled steps"


def physics_lines(work: Work, seconds: float, what: str, how: str, run: Run, device_name: str | None) -> list[str]:
    """Achieved TFLOP/s and GB/s for `work` done in `seconds`; % of peak only where the peak is known."""
    peak = find_peak(device_name, run.peak_tflops, run.peak_gbps) if run.on_gpu else None
    got = achieved(work, seconds, peak, run.dtype_name)
    moved = f"at least {work.bytes / 1e6:.3g} MB" if math.isfinite(work.bytes) else "— MB (the ops' shapes give none)"
    flops = f"{got.tflops:.3g} TFLOP/s" if got.tflops is not None else "— TFLOP/s"
    if got.pct_flops is not None:
        flops += f" ({got.pct_flops:.1f}% of {peak.name} peak {peak.tflops(run.dtype_name):g})"
    gbps = (f"{got.gbps:.3g} GB/s" if got.gbps is not None else "— GB/s") + (
        f" ({got.pct_bytes:.1f}% of {peak.gbps:g})" if got.pct_bytes is not None else ""
    )
    lines = [
        f"step time: {human_time(seconds * 1e6)} {what}, {how}",
        f"physics: {work.flops / 1e9:.3g} GFLOP and {moved} per step -> {flops}, {gbps}",
    ]
    if run.on_gpu and peak is None:
        lines.append(f"  (no peak figures for {device_name!r}: pass --peak-tflops/--peak-gbps for % of peak)")
    elif not run.on_gpu:
        lines.append("  (on the CPU: no % of peak; the figures above use CPU time)")
    return lines


def print_report(
    files: TraceFiles,
    trace: Trace,
    verdicts: list[Verdict],
    run: Run,
    first_guess: list[Verdict] | None = None,
) -> None:
    """The top of the profiler table, guess vs trace with one step's GPU work, the physics, and the verdict: what
    bounds the run's steps (common.analysis.diagnosis).

    `first_guess`: an earlier, wrong guess, shown before the corrected one (the post's surprise, replayed).
    """
    print()
    print(files.table)
    if first_guess:
        print("\n".join(format_verdicts(first_guess, trace, "the post's first guess vs trace", gpu_work=False)))
        print("... so the guess was corrected:")
    print("\n".join(format_verdicts(verdicts, trace)))
    if trace.phases:
        print(f"per phase (the labels inside {trace.label}; medians over the profiled steps):")
        print(phase_table(trace))
    diagnosis = diagnose(trace, run.peak_tflops)
    if run.per_step or len(trace.steps) > 3:
        print(f"per profiled step (the {trace.label!r} label on the CPU, busy time on the GPU):")
        print(step_table(trace, every=run.per_step, budgets=diagnosis.budgets))
    timed = step_seconds(trace)
    if timed:
        work = Work(files.work.flops, files.work.bytes)
        check = shapes_check(trace)  # the script's shapes edited since the flags: rated from the ops' own
        if check is not None and not check.agree:
            print(check.line())
            work = Work(check.shapes, math.nan)
        print("\n".join(physics_lines(work, *timed, run, trace.device_name or run.device_name)))
    print(memory_line(files.memory, files.work.bytes))
    said = [*verdict_lines(diagnosis), *(f"note: {note}" for note in invariant_notes(trace, diagnosis))]
    print("\n".join(textwrap.fill(line, TEXT_WIDTH, subsequent_indent="      ") for line in said))


def print_unprofiled(b: UnprofiledTime, trace: Trace) -> None:
    """The unprofiled timing (--bench), set beside the profiler's figure for the same step."""
    lines = ["bench (no profiler):"]
    if b.gpu_s is not None:
        burst = f"CUDA events, median of a {b.gpu_calls}-call burst"
        lines.append(f"  {human_time(b.gpu_s * 1e6)} per step on the GPU stream ({burst})")
    lines.append(f"  {human_time(b.wall_s * 1e6)} wall per step sustained (median over {b.wall_calls} calls)")
    timed = step_seconds(trace)
    if timed:
        ref, what = (b.gpu_s, "the CUDA-event time") if b.gpu_s is not None else (b.wall_s, "the unprofiled wall time")
        lines.append(f"  the profiler's {timed[1]}: {human_time(timed[0] * 1e6)}, {timed[0] / ref:.2f}x {what} above")
    print("\n".join(lines))


def print_files(cycles: list[TraceFiles], run: Run) -> None:
    """The files written (a trace and a table per profiler cycle), and how to open or share them."""
    files = cycles[0]
    for n, written in enumerate(cycles, 1):
        cycle = f" (cycle {n} of {len(cycles)})" if len(cycles) > 1 else ""
        print(f"trace: {shown(str(written.json))}{cycle}")
        print(f"table: {shown(str(written.txt))}{cycle}")
    if run.memory and files.pickle.exists():
        print(f"memory snapshot: {shown(str(files.pickle))} (drag it into https://pytorch.org/memory_viz)")
    elif run.memory:
        print("memory snapshot: GPU-only (torch.cuda.memory); the trace holds the profiler's CPU memory events")
    print("\n".join(share_lines(run.traces_dir.parent)))


def exit_code(verdicts: list[Verdict], strict: bool) -> int:
    """1 under --strict when a checked guess missed, else 0."""
    missed = any(v.checked and not v.matched for v in verdicts)
    return 1 if strict and missed else 0
