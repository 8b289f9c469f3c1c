"""A stopped run's table, steps and label, read from its exported Chrome trace instead of torch's parse (issue 51).

torch's `key_averages()` first parses every recorded event into a Python `FunctionEvent` and builds their tree
(`prof.events()`): for 300 of 06's tiny CPU steps (265,800 events) 60-76 s on the 2-core machine, against 2.0 s for
the suite's reader of the same trace (msgspec) and 2.8 s for torch's own C++ export of it. A run stopped by a signal
under torchrun has 30 s (torchrun's shutdown timeout) before it is killed, so its table is summed here, in one pass
over the trace torch exported: per name, the calls, the CPU time in all and the self CPU time (the time outside the
op's direct children on its thread), as `key_averages()` sums them, into torch's own `FunctionEventAvg`s so that
the table is torch's layout (`EventList.table`). CPU times only: a GPU kernel's time is not given to the op that
launched it here (the summary reads the kernels from the trace). The same pass counts the ProfilerStep#N spans the
trace recorded and finds the record_function label directly inside them (loop.read_steps' answers).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from torch.autograd.profiler_util import EventList, FunctionEventAvg

from common.harness.loop import STEP_NAME
from common.reader.trace_json import stream_json

# Not in torch's table: a GPU's events, the profiler's own span ("PyTorch Profiler (0)"), and with_stack's Python
# frames (nor are they an op's parent there)
NOT_CPU = ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation", "Trace", "python_function")
SLACK_US = 0.002  # the trace's times are microseconds with 3 decimals, each rounded: an end may pass its parent's


class _Sums:
    __slots__ = ("calls", "total", "own")

    def __init__(self) -> None:
        self.calls, self.total, self.own = 0, 0.0, 0.0


def read_stopped(path: Path | str, record_steps: bool = True) -> tuple[EventList, int, str | None]:
    """The table's averages, the ProfilerStep#N spans recorded (top-level ones; 0 without a schedule) and the label
    directly inside them (the most common, the longest of those tied; without `record_steps`, the top-level
    label), from the Chrome trace at `path` as torch exported it.

    Each thread's ops nest by their times, as torch's tree does, and an op whose one child has its own name
    (aten::mean inside aten::mean) counts once, as torch's `_remove_dup_nodes` leaves it, its child's children its."""
    threads: dict[object, list[tuple[float, float, str, bool]]] = {}

    def take(events: list) -> None:
        for event in events:
            if event.ph != "X" or event.cat in NOT_CPU or event.name is None or not event.dur >= 0:
                continue
            threads.setdefault(event.tid, []).append((event.ts, event.dur, event.name, event.cat == "user_annotation"))

    stream_json(path, take)
    sums: dict[str, _Sums] = {}
    counts: Counter = Counter()
    labelled: Counter = Counter()
    steps = 0
    for events in threads.values():
        events.sort(key=lambda e: (e[0], -e[1]))
        roots: list[list] = []
        stack: list[tuple[float, list]] = []  # (end, node) of the ops open here; a node: [name, dur, kids, label]
        for ts, dur, name, annotation in events:
            end = ts + dur
            while stack and end > stack[-1][0] + SLACK_US:
                stack.pop()
            node = [name, dur, [], annotation]
            (stack[-1][1][2] if stack else roots).append(node)
            stack.append((end, node))
        todo: list[tuple[list, str | None]] = [(node, None) for node in roots]  # (node, its parent's name)
        while todo:
            (name, dur, kids, annotation), outer = node, _ = todo.pop()
            while len(kids) == 1 and kids[0][0] == name:  # torch drops an only child of the same name
                kids = node[2] = kids[0][2]
            step = annotation and STEP_NAME.match(name) is not None
            key = "ProfilerStep*" if step else name  # as prof.events() names every step
            mine = sums.get(key)
            if mine is None:
                mine = sums[key] = _Sums()
            mine.calls += 1
            mine.total += dur
            mine.own += dur - sum(kid[1] for kid in kids)
            if step:
                steps += outer is None
            elif annotation and ((outer is None and not record_steps) or (outer and STEP_NAME.match(outer))):
                counts[name] += 1
                labelled[name] += dur
            todo.extend((kid, name) for kid in kids)
    averages = []
    for name, mine in sums.items():
        average = FunctionEventAvg()
        average.key, average.count, average.node_id = name, mine.calls, -1  # -1: no Node ID column
        average.cpu_time_total, average.self_cpu_time_total = mine.total, mine.own
        averages.append(average)
    label = max(counts, key=lambda n: (counts[n], labelled[n]), default=None)
    return EventList(averages), steps, label
