"""How far each GEMM and attention kernel ran from its roof: an op's FLOPs from record_shapes (common.reader.roofline)
joined to its kernels by External id, over their time, against the device's peak for the op's precision (TF32 where
the kernel's name says tensor cores ran an fp32 op).
"""

from __future__ import annotations

from dataclasses import dataclass

from common.physics import Peak, find_peak, rate
from common.reader.model import GpuOp, Trace
from common.reader.roofline import ATTENTION, CONVOLUTIONS, ShapedOp


@dataclass
class Efficiency:
    """A kernel name's FLOPs and time over the steps, and the rate they give against the device's peak. The op's
    main kernel (its longest) holds the op's FLOPs and the time of all its kernels: the op's rate. A helper kernel
    of an op (`flash_bwd_convert_dq_kernel`, cuDNN's `dot(dO, O)`, `prepare_grouped_gemm_data`) holds no FLOPs
    and no rate: `helper`, printed as such (it printed the whole op's rate, the FLOPs split by time)."""

    flops: float
    us: float
    peak_tflops: float | None
    helper: bool = False
    kind: str = "GEMM"  # whose FLOPs: "GEMM", "attention" or "convolution" (roofline_kind)

    @property
    def tflops(self) -> float | None:
        """FLOPs per µs / 1e6; None for a helper, and where the time or the FLOPs are not a figure (0 µs, negative,
        1e400)."""
        if self.helper:
            return None
        per_us = rate(self.flops, self.us)
        return per_us / 1e6 if per_us is not None else None

    @property
    def pct_peak(self) -> float | None:
        tflops = self.tflops
        return 100.0 * tflops / self.peak_tflops if tflops is not None and self.peak_tflops else None


def peak_cell(e: Efficiency, broken_links: bool) -> str:
    """The % of peak as a table prints it, never above 100: a rate over the peak is a broken link (the trace's
    External ids disagreed with the nesting: Trace.broken_links) or a wrong peak, and the cell says which."""
    from common.analysis.tables import DASH, num  # the table's own formatting

    pct = e.pct_peak
    if pct is None:
        return DASH
    if pct > 100:
        return "over: link?" if broken_links else "over: peak?"
    return num(pct, 2)


def efficiency(trace: Trace, peak_tflops: float | None = None) -> dict[tuple[str, str], Efficiency]:
    """(category, name) -> the FLOPs and time of that kernel's launches whose op has shapes (record_shapes; an op's
    FLOPs on its main kernel, over all its kernels' time; its helpers none), and the peak it is measured against: the
    datasheet's for the trace's GPU, 16-bit or fp32 by the op's inputs; `peak_tflops` wins."""
    shapes = trace.shapes
    if not shapes:
        return {}
    groups = []
    for step in trace.steps:
        by_op: dict[object, list[GpuOp]] = {}
        for op in step.gpu:
            if op.external in shapes and op.category == "kernel":
                by_op.setdefault(op.external, []).append(op)
        groups.append(by_op)
    return rates(groups, shapes, find_peak(trace.device_name, peak_tflops))


def rates(groups: list[dict], shapes: dict, peak: Peak | None) -> dict[tuple[str, str], Efficiency]:
    """efficiency's figures from `groups`: per step, External id -> the kernels with that id, in order."""
    out: dict[tuple[str, str], Efficiency] = {}
    for by_op in groups:
        for ext, kernels in by_op.items():
            shaped = shapes[ext]
            flops = shaped.flops
            if not flops or not shaped.tensor_core:  # a norm's or a pointwise op's place is the roofline table's
                continue
            main = max(kernels, key=lambda k: k.us)
            for k in kernels:
                e = out.get((k.category, k.name))
                if e is None:
                    e = out[k.category, k.name] = Efficiency(0.0, 0.0, kernel_roof(shaped, k.name, peak))
                if k is main:
                    e.flops += flops
                    e.kind = roofline_kind(shaped.name)
                    e.us += sum(other.us for other in kernels)
                    e.helper = False
                elif e.flops == 0:  # a helper wherever it ran (a kernel that was some op's main keeps its rate)
                    e.helper = True
    return out


def roofline_kind(op: str) -> str:
    """Whose FLOPs an op of the tensor cores does, as the verdict names them: "convolution", "attention", "GEMM"."""
    return "convolution" if op in CONVOLUTIONS else "attention" if op in ATTENTION else "GEMM"


def kernel_roof(shaped: ShapedOp, kernel: str, peak: Peak | None) -> float | None:
    """The peak a kernel of `shaped` runs against: its op's precision (FP8, 16-bit, fp32), and TF32 for an fp32 op
    whose kernel is a TF32 one (`sm90_xmma_gemm_f32f32_tf32f32…`, `cutlass…tf32…`): the name says tensor cores
    ran it, where the plain fp32 peak would read "533% of peak"."""
    if peak is None:
        return None
    precision = shaped.precision
    if precision == "fp32" and "tf32" in kernel.lower():
        precision = "tf32"
    return peak.roof(precision) or None
