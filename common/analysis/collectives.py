"""The collectives of a trace as TraceLens tabulates them, and their skew across the ranks of one run.

Per trace: a row per kind, process group and message size: its group size, calls per profiled step, mean
duration, algorithm bandwidth (bytes / time) and bus bandwidth (nccl-tests' factor × algbw; — where the group has
one rank). Across a run's rank traces: each collective matched by its step and its order of issue within its
process group in that step; per group and kind, the spread of arrivals (the GPU start of its work, or its CPU
issue where it has no GPU work) and of durations, and the straggler: the rank the others wait for, the latest to
arrive. No torch.
"""

from __future__ import annotations

import bisect
from collections import Counter
from dataclasses import dataclass

from common.analysis.tables import DASH, num, table
from common.physics import rate
from common.reader.comms import Collective
from common.reader.model import Trace, median_of
from common.units import human_bytes, human_time

COLLECTIVE_HEADERS = ["kind", "group", "n", "dtype", "size", "calls/step", "mean", "on", "algbw GB/s", "busbw GB/s"]
COLLECTIVE_LEGEND = (
    "Collectives: n = ranks in the process group; size = the message (the larger of its input and output, as "
    "nccl-tests counts it; — without record_param_comms); mean = its work's duration (on: GPU, the kernels or "
    "copies it launched; CPU, gloo's worker; — where it ran no work: NCCL on one rank returns at once); "
    "algbw = size / mean; busbw = algbw × nccl-tests' factor (all_reduce 2(n-1)/n; all_gather, "
    "reduce_scatter, all_to_all (n-1)/n; broadcast, reduce, send/recv 1; — where n = 1)."
)
SKEW_HEADERS = ["group", "kind", "calls", "arrival spread", "max", "duration spread", "straggler", "last in"]
SKEW_LEGEND = (
    "Skew: each call matched across ranks by its step and order of issue in its group; arrival spread = the "
    "median of latest − earliest arrival (GPU start of its work, else its CPU issue), max its largest; duration "
    "spread = median of longest − shortest; straggler = the rank last to arrive most often (the one the others "
    "wait for). Start times compare across traces on one host's clock only."
)
LARGE_SKEW = 0.5  # an arrival spread this share of the calls' median duration or more: the others wait on one rank


@dataclass
class CollectiveRow:
    """One kind, group and message size of a trace's collectives, per profiled step."""

    kind: str
    group: str | None
    group_size: int | None
    dtype: str | None
    bytes: int | None
    calls_per_step: float
    mean_us: float | None
    on: str | None
    algbw_gbps: float | None
    busbw_gbps: float | None


def in_steps(trace: Trace) -> list[tuple[int, Collective]]:
    """The trace's collectives issued inside a profiled step, with that step's number, in issue order."""
    starts = [s.start_us for s in trace.steps]
    found = []
    for c in trace.collectives:
        i = bisect.bisect_right(starts, c.issued_us) - 1
        if i >= 0 and c.issued_us <= starts[i] + trace.steps[i].dur_us:
            found.append((trace.steps[i].number, c))
    return found


def collective_rows(trace: Trace) -> list[CollectiveRow]:
    """A row per (kind, group, group size, dtype, size) of the collectives in the profiled steps, in order of
    first issue."""
    groups: dict[tuple, list[Collective]] = {}
    for _, c in in_steps(trace):
        groups.setdefault((c.kind, c.group, c.group_size, c.dtype, c.bytes), []).append(c)
    rows = []
    for (kind, group, size, dtype, nbytes), calls in groups.items():
        timed = [c.us for c in calls if c.us is not None]
        mean = sum(timed) / len(timed) if timed else None
        algbw = rate(nbytes, mean / 1e6) if nbytes is not None and mean is not None else None
        factor = calls[0].bus_factor
        rows.append(CollectiveRow(
            kind=kind, group=group, group_size=size, dtype=dtype, bytes=nbytes,
            calls_per_step=len(calls) / len(trace.steps), mean_us=mean,
            on="/".join(sorted({c.where for c in calls if c.where})) or None,
            algbw_gbps=algbw / 1e9 if algbw is not None else None,
            busbw_gbps=algbw * factor / 1e9 if algbw is not None and factor is not None else None,
        ))  # fmt: skip
    return rows


def collective_table(trace: Trace, markdown: bool = False) -> str | None:
    """The table of collective_rows(trace); None where the trace has no collective in its steps."""
    rows = collective_rows(trace)
    if not rows:
        return None
    cells = [
        [
            _cut(r.kind, 16),
            _cut(r.group, 12) if r.group is not None else DASH,
            str(r.group_size) if r.group_size is not None else DASH,
            r.dtype or DASH,
            size(r.bytes),
            f"{r.calls_per_step:g}",
            human_time(r.mean_us),
            r.on or DASH,
            num(r.algbw_gbps),
            num(r.busbw_gbps),
        ]
        for r in rows
    ]
    return table(COLLECTIVE_HEADERS, cells, {"kind", "group", "dtype", "on"}, markdown)


def _cut(text: str, room: int) -> str:
    """A name a trace wrote (an unknown collective's, a group's), cut to `room` characters: the table fits 120."""
    return text if len(text) <= room else text[: room - 1] + "…"


def size(n: int | None) -> str:
    """A message size: in whole MiB or KiB where it is one (1<<22 -> 4 MiB), else human_bytes; — for None."""
    if n is None:
        return DASH
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale and n % scale == 0:
            return f"{n // scale} {unit}"
    return human_bytes(n)


# One rank's calls for the skew: (group, step number, order in its group in that step, kind, arrival, duration).
Arrival = tuple[str | None, int, int, str, float, float | None]


def arrivals(trace: Trace) -> list[Arrival]:
    """The trace's collectives in its steps as the skew matches them across ranks: a few numbers each."""
    order: Counter = Counter()
    out = []
    for step, c in in_steps(trace):
        k = order[c.group, step]
        order[c.group, step] += 1
        arrived = c.start_us if c.where == "GPU" and c.start_us is not None else c.issued_us
        out.append((c.group, step, k, c.kind, arrived, c.us))
    return out


@dataclass
class Skew:
    """The skew of one process group's calls of one kind across the ranks of a run."""

    group: str | None
    kind: str
    calls: int  # calls matched on every rank
    arrival_spread_us: float  # median over the calls of latest - earliest arrival
    max_spread_us: float
    duration_spread_us: float | None  # median of longest - shortest duration, where every rank timed it
    median_us: float | None  # the calls' median duration over ranks
    straggler: int  # the rank last to arrive most often
    last_in: int  # in how many of the calls


def skews(ranks: dict[int, list[Arrival]]) -> list[Skew]:
    """Per group and kind, the skew of the calls every rank of `ranks` (rank -> its arrivals) made; [] for one
    rank. A call is matched by (group, step, order in its group in that step) and must have one kind on all."""
    if len(ranks) < 2:
        return []
    keyed = {rank: {(a[0], a[1], a[2]): a for a in calls} for rank, calls in ranks.items()}
    first = min(keyed)
    found: dict[tuple, list[tuple[float, float | None, int, float | None]]] = {}
    for key, call in keyed[first].items():
        each = [keyed[rank].get(key) for rank in sorted(keyed)]
        if any(a is None or a[3] != call[3] for a in each):
            continue
        arrived = {rank: a[4] for rank, a in zip(sorted(keyed), each, strict=True)}
        durations = [a[5] for a in each]
        late = max(arrived, key=lambda r: (arrived[r], r))
        spread = max(arrived.values()) - min(arrived.values())
        timed = None if None in durations else max(durations) - min(durations)
        typical = None if None in durations else median_of(sorted(durations))
        found.setdefault((call[0], call[3]), []).append((spread, timed, late, typical))
    out = []
    for (group, kind), calls in found.items():
        spreads = sorted(c[0] for c in calls)
        timed = sorted(c[1] for c in calls if c[1] is not None)
        typical = sorted(c[3] for c in calls if c[3] is not None)
        [(straggler, last_in)] = Counter(c[2] for c in calls).most_common(1)
        out.append(Skew(
            group=group, kind=kind, calls=len(calls), arrival_spread_us=median_of(spreads), max_spread_us=spreads[-1],
            duration_spread_us=median_of(timed) if len(timed) == len(calls) else None,
            median_us=median_of(typical) if typical else None, straggler=straggler, last_in=last_in,
        ))  # fmt: skip
    return out


def skew_table(found: list[Skew], markdown: bool = False) -> str | None:
    """The table of `found` (skews()); None where there is none."""
    if not found:
        return None
    cells = [
        [
            _cut(s.group, 12) if s.group is not None else DASH,
            _cut(s.kind, 16),
            str(s.calls),
            human_time(s.arrival_spread_us),
            human_time(s.max_spread_us),
            human_time(s.duration_spread_us),
            f"rank {s.straggler}",
            f"{s.last_in}/{s.calls}",
        ]
        for s in found
    ]
    return table(SKEW_HEADERS, cells, {"group", "kind", "straggler"}, markdown)


def straggler_lines(found: list[Skew]) -> list[str]:
    """For --explain: a line per group and kind whose median arrival spread is LARGE_SKEW of the calls' median
    duration or more, naming the straggler."""
    lines = []
    for s in found:
        if s.median_us is None or s.median_us <= 0 or s.arrival_spread_us < LARGE_SKEW * s.median_us:
            continue
        group = f"group {s.group}" if s.group is not None else "its group"
        lines.append(
            f"straggler: rank {s.straggler} arrives last at {s.last_in} of {s.calls} {s.kind} calls of {group}, "
            f"{human_time(s.arrival_spread_us)} after the first (median; the calls take {human_time(s.median_us)}): "
            f"the other ranks wait for it; look at what rank {s.straggler} does before each call"
        )
    return lines
