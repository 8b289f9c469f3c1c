"""Each shaped op's place on the roofline, and the ops furthest below their own roof: TraceLens' per-op roofline.

An op's FLOPs and bytes (common.reader.roofline, from record_shapes) over its kernels' time give what it achieved;
its roof is the time the device's peaks allow, max(FLOPs / peak FLOP/s, bytes / peak bandwidth), and the time it
lost is its time less that. The ridge point, peak FLOP/s over peak bandwidth, calls it compute-bound (its FLOPs per
byte at or above the ridge) or memory-bound. A GEMM's, an attention's or a convolution's FLOPs run against the
tensor cores' peak of its precision (TF32 where its kernel's name says so); the others' against the plain fp32
peak, the CUDA cores' (a 16-bit norm computes in fp32). No figure without shapes, a dtype or a known peak.
"""

from __future__ import annotations

from dataclasses import dataclass

from common.analysis.efficiency import kernel_roof
from common.analysis.tables import DASH, num, table
from common.physics import Peak, rate
from common.reader.model import Trace
from common.reader.roofline import ShapedOp

ROOFS_SHOWN = 5  # rows of the table of the ops furthest below their roof
HEADERS = ["op", "shape", "calls", "µs", "lost", "GFLOP", "MB", "FLOP/B", "TFLOP/s", "TB/s", "%roof", "bound"]
LEFT = {"op", "shape", "bound"}
LEGEND = (
    "calls, µs and lost per step (µs: the op's kernels' time; lost: the µs less its roof, max(FLOPs / peak FLOP/s, "
    "bytes / peak bandwidth)); GFLOP and MB per call, from record_shapes (common.reader.roofline's model); "
    "%roof = its roof's share of its time; bound: FLOP/B against the ridge point, peak FLOP/s / peak bandwidth."
)


@dataclass(frozen=True)
class OpRoof:
    """One distinct shaped op run by one main kernel, over the profiled steps: its calls and its kernels' time per
    step, and the peaks its roof is made of (None where the device's are unknown)."""

    op: ShapedOp
    calls: float
    us: float
    peak_tflops: float | None
    peak_gbps: float | None
    kernel: str = ""  # the longest kernel of each of its calls: which one ran it (an fp32 GEMM on TF32 or FFMA)

    @property
    def ridge(self) -> float | None:
        """FLOPs per byte where the roof turns: peak FLOP/s over peak bytes/s."""
        per_byte = rate(1e3 * self.peak_tflops, self.peak_gbps) if self.peak_tflops else None
        return per_byte or None

    @property
    def bound(self) -> str | None:
        """ "compute" where its FLOPs per byte reach the ridge, else "memory"; None where either is no figure."""
        intensity, ridge = self.op.intensity, self.ridge
        if ridge is None or intensity is None:
            return None
        return "compute" if intensity >= ridge else "memory"

    @property
    def roof_us(self) -> float | None:
        """µs per step the peaks allow its FLOPs and bytes: the slower of the two."""
        flops, moved = self.op.flops, self.op.bytes
        if flops is None or moved is None or not self.peak_tflops or not self.peak_gbps:
            return None
        compute = rate(flops * self.calls, 1e6 * self.peak_tflops)
        memory = rate(moved * self.calls, 1e3 * self.peak_gbps)
        return None if compute is None or memory is None else max(compute, memory)

    @property
    def lost_us(self) -> float | None:
        """µs per step it took beyond its roof; None without a roof or a time above 0 µs."""
        roof = self.roof_us
        return None if roof is None or not self.us > 0 else self.us - roof

    @property
    def pct_roof(self) -> float | None:
        roof = self.roof_us
        share = rate(roof, self.us) if roof is not None else None
        return None if share is None else 100 * share

    @property
    def tflops(self) -> float | None:
        per_us = rate(self.op.flops * self.calls, self.us) if self.op.flops is not None else None
        return None if per_us is None else per_us / 1e6

    @property
    def tbps(self) -> float | None:
        per_us = rate(self.op.bytes * self.calls, self.us) if self.op.bytes is not None else None
        return None if per_us is None else per_us / 1e6


def op_roofs(trace: Trace, peak: Peak | None) -> list[OpRoof]:
    """An OpRoof per distinct shaped op (the reader shares one ShapedOp among the calls of one name and shape) and
    main kernel whose kernels ran in the steps, its roof against `peak` (None: no roof)."""
    shapes, n = trace.shapes, len(trace.steps)
    if not shapes or not n:
        return []
    found: dict[tuple[int, str], list] = {}  # (id of the ShapedOp, main kernel) -> [op, calls, µs]
    for step in trace.steps:
        by_call: dict[object, list] = {}
        for op in step.gpu:
            if op.category == "kernel" and op.external in shapes:
                by_call.setdefault(op.external, []).append(op)
        for ext, kernels in by_call.items():
            shaped, main = shapes[ext], max(kernels, key=lambda k: k.us).name
            entry = found.setdefault((id(shaped), main), [shaped, 0, 0.0])
            entry[1] += 1
            entry[2] += sum(k.us for k in kernels)
    out = []
    for (_, main), (shaped, calls, us) in found.items():
        roof = kernel_roof(shaped, main, peak) if shaped.tensor_core else peak.tflops_fp32 if peak else None
        gbps = (peak.gbps or None) if peak else None
        out.append(OpRoof(op=shaped, calls=calls / n, us=us / n, peak_tflops=roof or None, peak_gbps=gbps, kernel=main))
    return out


def shape_text(op: ShapedOp) -> str:
    """Its tensor inputs' dims, "8192×4096 4096": scalars left out."""
    dims = op.dims if isinstance(op.dims, list) else []
    return " ".join("×".join(map(str, d)) for d in dims if isinstance(d, list) and d) or DASH


def _cut(text: str, room: int) -> str:
    return text if len(text) <= room else text[: room - 1] + "…"


def furthest_below(roofs: list[OpRoof], n: int = ROOFS_SHOWN) -> list[OpRoof]:
    """The `n` ops that lost the most time per step against their own roof (those with a roof only)."""
    ranked = [r for r in roofs if r.lost_us is not None]
    return sorted(ranked, key=lambda r: -r.lost_us)[:n]  # type: ignore[operator]


def roof_cells(roofs: list[OpRoof], cut: bool = True) -> list[list[str]]:
    """The table's rows; the op's name and shape `cut` to fit 120 columns (not in Markdown, which wraps)."""
    room = (22, 20) if cut else (10**6, 10**6)
    cells = []
    for r in roofs:
        flops, moved = r.op.flops, r.op.bytes
        cells.append([
            _cut(r.op.name.removeprefix("aten::"), room[0]),
            _cut(shape_text(r.op), room[1]),
            num(r.calls),
            f"{r.us:.1f}",
            num(r.lost_us),
            num(flops / 1e9 if flops is not None else None),
            num(moved / 1e6 if moved is not None else None),
            num(r.op.intensity),
            num(r.tflops),
            num(r.tbps),
            num(r.pct_roof, 2),
            r.bound or DASH,
        ])  # fmt: skip
    return cells


def roof_table(trace: Trace, peak: Peak | None, markdown: bool = False) -> str | None:
    """The table of the ops furthest below their roof, with its legend; None where no op has one."""
    worst = furthest_below(op_roofs(trace, peak))
    if not worst:
        return None
    return table(HEADERS, roof_cells(worst, cut=not markdown), LEFT, markdown)


def kernel_roofs(roofs: list[OpRoof]) -> dict[str, tuple[float | None, str | None]]:
    """Kernel name -> (MB per step its ops move, their bound), over the ops it is the main kernel of: the top-kernels
    table's --wide columns. Bytes None where one op's are unknown; the bound "mixed" where its ops differ."""
    out: dict[str, tuple[float | None, str | None]] = {}
    for r in roofs:
        moved = r.op.bytes * r.calls / 1e6 if r.op.bytes is not None else None
        if r.kernel not in out:
            out[r.kernel] = (moved, r.bound)
            continue
        total, bound = out[r.kernel]
        total = total + moved if total is not None and moved is not None else None
        out[r.kernel] = (total, bound if bound == r.bound else "mixed")
    return out
