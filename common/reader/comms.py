"""Read a trace's collectives: what each one is (kind, process group, message size) and how long it ran.

torch's `record_param_comms` CPU event carries a collective's args ('Collective name', 'In msg nelems', 'Out msg
nelems', 'Group size', 'dtype', 'Process Group Name'); a trace without any (gloo on torch 2.15) has only the
dispatcher's `c10d::allreduce_`-style ops, which name the kind and nothing else: no size, never a guess. Its
duration is that of the GPU work launched inside its CPU span on its thread (the NCCL kernel, or on one rank a
DtoD memcpy); without GPU work, that of the `gloo:<kind>` annotation its process group's worker ran for it (the
first of its kind starting after it was issued); else none. No torch: a file's events in, Collective records out,
one per collective (a few numbers each, however many events the trace holds).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

# Collective names (record_param_comms' 'Collective name', a c10d:: op without its underscores) -> the kind.
KINDS = {
    "allreduce": "all_reduce", "allreduce_coalesced": "all_reduce", "all_reduce": "all_reduce",
    "allgather": "all_gather", "allgather_base": "all_gather", "allgather_coalesced": "all_gather",
    "allgather_into_tensor_coalesced": "all_gather", "all_gather": "all_gather",
    "reduce_scatter": "reduce_scatter", "reduce_scatter_base": "reduce_scatter",
    "reduce_scatter_tensor_coalesced": "reduce_scatter",
    "broadcast": "broadcast", "reduce": "reduce", "alltoall": "all_to_all", "alltoall_base": "all_to_all",
    "all_to_all": "all_to_all", "send": "send", "recv": "recv", "recvAnySource": "recv", "recv_any_source": "recv",
    "gather": "gather", "scatter": "scatter", "barrier": "barrier", "monitored_barrier": "barrier",
}  # fmt: skip
# nccl-tests' bus bandwidth factors (doc/PERFORMANCE.md), n the group size: busbw = algbw × factor.
BUS_FACTORS = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
    "gather": lambda n: (n - 1) / n,
    "scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "reduce": lambda n: 1.0,
    "send": lambda n: 1.0,
    "recv": lambda n: 1.0,
}
# c10's ScalarType names, as record_param_comms writes 'dtype' -> bytes per element.
DTYPE_BYTES = {
    "Byte": 1, "Char": 1, "Bool": 1, "QInt8": 1, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1,
    "Float8_e5m2": 1, "Float8_e4m3fn": 1, "Float8_e5m2fnuz": 1, "Float8_e4m3fnuz": 1, "Float8_e8m0fnu": 1,
    "Float4_e2m1fn_x2": 1, "UInt8": 1, "Int8": 1,
    "Short": 2, "Half": 2, "BFloat16": 2, "UInt16": 2, "Int16": 2,
    "Int": 4, "Float": 4, "QInt32": 4, "ComplexHalf": 4, "UInt32": 4, "Int32": 4,
    "Long": 8, "Double": 8, "ComplexFloat": 8, "UInt64": 8, "Int64": 8,
    "ComplexDouble": 16,
}  # fmt: skip
ISSUE_OP = "record_param_comms"
MOST_ELEMENTS = 1 << 62  # a count beyond this is not a tensor's


@dataclass(slots=True)
class Collective:
    """One collective as one rank issued it. Figures the trace does not give are None."""

    kind: str  # all_reduce, all_gather, reduce_scatter, broadcast, all_to_all, send, recv, ...
    issued_us: float  # when the CPU issued it (the trace's clock)
    cpu_us: float  # its CPU span
    tid: object  # the issuing thread
    group: str | None = None  # the process group's name
    group_size: int | None = None
    bytes: int | None = None  # the message: the larger of its input and output (nccl-tests' size)
    dtype: str | None = None
    start_us: float | None = None  # when its work began: on the GPU, or on gloo's worker
    us: float | None = None  # how long its work ran
    where: str | None = None  # "GPU" or "CPU": what `us` is the span of

    @property
    def bus_factor(self) -> float | None:
        """nccl-tests' factor from algorithm to bus bandwidth for this kind and group size; None for n < 2 (no
        bus), an unknown group size or a kind without one (barrier)."""
        factor, n = BUS_FACTORS.get(self.kind), self.group_size
        return factor(n) if factor is not None and n is not None and n >= 2 else None


def _whole(value: object, most: int = MOST_ELEMENTS) -> int | None:
    return value if type(value) is int and 0 <= value <= most else None


def _text(value: object) -> str | None:
    return value if type(value) is str and len(value) <= 200 else None


def kind_of(name: str) -> str | None:
    """The kind of a `c10d::` op or a 'Collective name' (`c10d::_allgather_base_` -> all_gather); None if none."""
    return KINDS.get(name.removeprefix("c10d::").strip("_"))


def issued(name: str, ts: float, dur: float, tid: object, args: object) -> Collective | None:
    """The Collective of a `record_param_comms` event (`args`: its trace_json.Args) or of a `c10d::` op (`args`
    unused); None for a c10d op that is no collective (`c10d::wait`) or args without a collective name."""
    if name != ISSUE_OP:
        kind = kind_of(name)
        return None if kind is None else Collective(kind, ts, dur, tid)
    if args is None:
        return None
    collective = _text(args.collective)
    kind = (kind_of(collective) or collective) if collective else None
    if kind is None:
        return None
    dtype = _text(args.dtype)
    sizes = [n for n in (_whole(args.in_nelems), _whole(args.out_nelems)) if n is not None]
    each = DTYPE_BYTES.get(dtype) if dtype else None
    size = max(sizes) * each if sizes and each else None
    return Collective(kind, ts, dur, tid, _text(args.group), _whole(args.group_size, 1 << 30), size, dtype)


def timed(found: list[Collective], gpu: list, labels: list[tuple[str, float, float, object]]) -> list[Collective]:
    """`found` (record_param_comms where the trace has any, else its c10d ops), in issue order, each given its
    work's start and duration: the span of the GPU ops (`gpu`: GpuOps with their launch) launched inside its CPU
    span on its thread, communication kernels alone where it launched any; else the `gloo:<kind>` label (of
    `labels`: user_annotation (name, ts, dur, tid)) of its kind first starting at or after its issue."""
    if any(c.bytes is not None or c.group is not None for c in found):
        found = [c for c in found if c.group is not None or c.bytes is not None]
    found.sort(key=lambda c: c.issued_us)
    by_tid: dict[object, list[int]] = {}
    for i, c in enumerate(found):
        by_tid.setdefault(c.tid, []).append(i)
    starts = {tid: [found[i].issued_us for i in idx] for tid, idx in by_tid.items()}
    work: dict[int, list] = {}
    for op in gpu:
        launch = op.launch
        if launch is None or op.start is None or launch.tid not in by_tid:
            continue
        tid, ts = launch.tid, launch.ts
        k = bisect.bisect_right(starts[tid], ts) - 1
        if k >= 0:
            c = found[by_tid[tid][k]]
            if ts <= c.issued_us + c.cpu_us:
                work.setdefault(by_tid[tid][k], []).append(op)
    for i, ops in work.items():
        comm = [op for op in ops if op.family == "communication"] or ops
        first = min(op.start for op in comm)
        span = max(op.start - first + op.us for op in comm)  # from the first start: one op's is its own duration
        if math.isfinite(span):
            found[i].start_us, found[i].us, found[i].where = first, span, "GPU"
    gloo: dict[str, list[tuple[float, float]]] = {}
    for name, ts, dur, _ in labels:
        if name.startswith("gloo:") and (kind := kind_of(name[5:])) is not None:
            gloo.setdefault(kind, []).append((ts, dur))
    for kind, spans in gloo.items():
        spans.sort()
        j = 0
        for c in (c for c in found if c.kind == kind and c.where is None):
            while j < len(spans) and spans[j][0] < c.issued_us:
                j += 1
            if j == len(spans):
                break
            c.start_us, c.us, c.where = spans[j][0], spans[j][1], "CPU"
            j += 1
    return found


# The cpu_op names that issue a collective: record_param_comms, and the c10d:: ops of KINDS' names.
ISSUE_OPS = frozenset({ISSUE_OP, *(f"c10d::{u}{k}{v}" for k in KINDS for u in ("", "_") for v in ("", "_"))})
