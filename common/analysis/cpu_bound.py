"""The verdict of a trace with no GPU lane, Part 1's first lesson on the CPU: is the step's time inside the ops'
own work (compute-bound: a 4096 matmul, 96% of the step inside aten::mm) or around it, in dispatch and Python
(overhead-bound: a 64 matmul)? From the ops' self times: an op's time less the ops it called, on its thread. No
torch here (the reader's analysis wing)."""

from __future__ import annotations

import statistics
from collections import defaultdict

from common.analysis.figures import step_flops
from common.reader.model import Trace
from common.units import human_time

COMPUTE_SHARE = 0.8  # one op's self time at least this share of the step's CPU time: compute-bound
KINDS = ("compute-bound", "overhead-bound")  # how a CPU verdict begins: "<kind> on the CPU: ..."


def cpu_kind(verdict: str) -> str | None:
    """The kind a CPU verdict (cpu_verdict's line) says its step is, one of KINDS; None for another line."""
    return next((kind for kind in KINDS if verdict.startswith(f"{kind} on the CPU")), None)


def cpu_ops(trace: Trace) -> list[tuple[float, float, object, str]]:
    """Every complete cpu_op event of the trace's file: (ts, dur, tid, name)."""
    from common.reader.trace_json import stream_json  # where a trace is read: msgspec's import would slow `--help`

    ops: list[tuple[float, float, object, str]] = []

    def keep(events: list) -> None:
        for e in events:
            operator = e.cat == "cpu_op" or (e.cat == "Operator" and e.name and "::" in e.name)
            if (
                operator
                and e.ph == "X"
                and e.name
                and isinstance(e.ts, (int, float))
                and isinstance(e.dur, (int, float))
            ):
                ops.append((float(e.ts), float(e.dur), e.tid, e.name))

    stream_json(trace.path, keep)
    return ops


def self_us(ops: list[tuple[float, float, object, str]], start: float, end: float) -> dict[str, float]:
    """name -> the summed self time (its span less the spans of the ops it called, on its thread) of the ops
    that start in [start, end)."""
    by_thread: dict[object, list[tuple[float, float, str]]] = defaultdict(list)
    for ts, dur, tid, name in ops:
        if start <= ts < end:
            by_thread[tid].append((ts, dur, name))
    own: dict[str, float] = defaultdict(float)
    for spans in by_thread.values():
        spans.sort(key=lambda s: (s[0], -s[1]))
        stack: list[tuple[float, str]] = []  # (end, name) of the ops open at this point
        for ts, dur, name in spans:
            while stack and stack[-1][0] <= ts:
                stack.pop()
            if stack:
                own[stack[-1][1]] -= dur  # a call inside its caller: not the caller's own time
            own[name] += dur
            stack.append((ts + dur, name))
    return own


def cpu_verdict(trace: Trace) -> str:
    """One line: compute-bound when one op's own time (self time, the median step's) is COMPUTE_SHARE or more of
    the step's CPU time, else overhead-bound; either names the busiest op, its share and, where the suite wrote
    the step's FLOPs, its GFLOP/s (a 64 matmul's aten::mm runs at a tenth of a 1024 one's rate here)."""
    cpu = trace.per_step(lambda s: s.region_us)
    per = ("in the one recording (no ProfilerStep#N)" if trace.whole_trace
           else "per iteration" if trace.cpu_source == "iteration" else "per step")  # fmt: skip
    spent = f"{human_time(cpu)} of CPU {per}" if cpu else f"no CPU time {per}"
    try:  # the ops' spans are read again from the file: the reader keeps only their starts and names
        ops = cpu_ops(trace) if cpu else []
    except ValueError:  # a trace parsed from memory (common.reader.build.parse), or a file gone since: the plain line
        ops = []
    per_step = [self_us(ops, s.start_us, s.start_us + s.dur_us) for s in trace.steps]
    names = {n for own in per_step for n in own}
    own = {n: statistics.median(p.get(n, 0.0) for p in per_step) for n in names}
    if not cpu or not own:
        return f"bound by the CPU: no GPU activity in the trace; {spent}"
    top, top_us = max(own.items(), key=lambda kv: kv[1])
    share = min(1.0, max(0.0, top_us) / cpu)
    flops = step_flops(trace)[0]  # the flags', or the ops' shapes' where the script's shapes were edited
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if flops is not None and top_us > 0 else ""
    if share < COMPUTE_SHARE:
        return (f"{KINDS[1]} on the CPU: the busiest op, {top}, is {share:.0%} of the step{rate}, the rest "
                f"dispatch and Python; {spent}")  # fmt: skip
    return f"{KINDS[0]} on the CPU: {share:.0%} of the step inside {top}{rate}; {spent}"
