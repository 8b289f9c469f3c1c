"""The verdict of a trace with no GPU lane, Part 1's first lesson on the CPU: is the step's time inside the ops'
own work (compute-bound: a 4096 matmul, 96% of the step inside aten::mm) or around it, in dispatch and Python
(overhead-bound: a 64 matmul)? From the ops' self times: an op's time less the ops it called, on its thread. No
torch here (the reader's analysis wing)."""

from __future__ import annotations

import statistics

from common.reader.model import Trace
from common.units import human_time

COMPUTE_SHARE = 0.8  # one op's self time at least this share of the step's CPU time: compute-bound
KINDS = ("compute-bound", "overhead-bound")  # how a CPU verdict begins: "<kind> on the CPU: ..."


def cpu_kind(verdict: str) -> str | None:
    """The kind a CPU verdict (cpu_verdict's line) says its step is, one of KINDS; None for another line."""
    return next((kind for kind in KINDS if verdict.startswith(f"{kind} on the CPU")), None)


def cpu_verdict(trace: Trace) -> str:
    """One line: compute-bound when one op's own time (self time, the median step's) is COMPUTE_SHARE or more of
    the step's CPU time, else overhead-bound; either names the busiest op, its share and, where the suite wrote
    the step's FLOPs, its GFLOP/s (a 64 matmul's aten::mm runs at a tenth of a 1024 one's rate here)."""
    cpu = trace.per_step(lambda s: s.region_us)
    per = ("in the one recording (no ProfilerStep#N)" if trace.whole_trace
           else "per iteration" if trace.cpu_source == "iteration" else "per step")  # fmt: skip
    spent = f"{human_time(cpu)} of CPU {per}" if cpu else f"no CPU time {per}"
    # each op's self time (its span less the ops it called, on its thread) is the call tree's: no second read
    per_step = [trace.tree.self_us(s.start_us, s.start_us + s.dur_us) for s in trace.steps] if cpu else []
    names = {n for own in per_step for n in own}
    own = {n: statistics.median(p.get(n, 0.0) for p in per_step) for n in names}
    if not cpu or not own:
        return f"bound by the CPU: no GPU activity in the trace; {spent}"
    top, top_us = max(own.items(), key=lambda kv: kv[1])
    share = min(1.0, max(0.0, top_us) / cpu)
    flops = trace.meta.get("flops")
    rate = f" at {flops / (top_us * 1e-6) / 1e9:.3g} GFLOP/s" if isinstance(flops, (int, float)) and top_us > 0 else ""
    if share < COMPUTE_SHARE:
        return (f"{KINDS[1]} on the CPU: the busiest op, {top}, is {share:.0%} of the step{rate}, the rest "
                f"dispatch and Python; {spent}")  # fmt: skip
    return f"{KINDS[0]} on the CPU: {share:.0%} of the step inside {top}{rate}; {spent}"
