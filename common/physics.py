"""The physics of a step: its FLOPs, the fewest bytes it must move, and the device's peaks."""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass


@dataclass(frozen=True)
class FusedAttention:
    """The shape of a step whose FLOPs run in torch's fused CPU attention kernel (SDPA's flash backend, causal),
    not at a matmul's rate: the CPU estimate times that kernel on a slice of it (common.harness.estimate)."""

    batch: int
    heads: int
    seq: int
    head_dim: int


@dataclass(frozen=True)
class Work:
    """What one step must do: floating-point operations and the fewest bytes it must move to/from memory.

    `moved`, `reference`, `ops` and `fused` are for the CPU estimate only (common.harness.estimate), never a figure of
    the trace: `moved`, the bytes the step's eager code reads and writes in its intermediates, an out-of-place op
    writing a fresh output (attention's [batch, heads, seq, seq] scores, scaled, masked and softmaxed; 0 where they
    are small beside the FLOPs); `reference`, the work of the higher-precision reference the output is checked
    against, in the reference's dtype (None: the step's FLOPs, nothing moved); `ops`, the aten ops one step
    dispatches, views left out (0 where a step's few ops are nothing beside its FLOPs): each pays a per-op cost,
    most of a small training step's time; `fused`, the shape of the fused attention kernel the FLOPs run in
    (None: they run at a matmul's rate); `kernels`, whether torch.compile builds kernels of its own for the step
    (False: a forward whose GEMMs and bias go to the BLAS, as 01's and 02's do); `shaped`, the FLOPs of its GEMM,
    attention and convolution ops as record_shapes will show them run (common.analysis.figures.shapes_check: an
    edit of the script's shapes shows there; None: not known, not checked).
    """

    flops: float
    bytes: float
    moved: float = 0.0
    reference: Work | None = None
    ops: int = 0
    fused: FusedAttention | None = None
    kernels: bool = True
    shaped: float | None = None

    @property
    def has_reference(self) -> bool:
        """Whether a reference is left to compute in the run: None is the step's own work; a Work of nothing
        (05 and 06: made before the estimate, or rank 0's weights) is none."""
        ref = self.reference
        return ref is None or bool(ref.flops or ref.bytes or ref.moved)


@dataclass(frozen=True)
class Peak:
    """Dense peaks of one GPU, TFLOP/s: 16-bit tensor cores, plain fp32, TF32 tensor cores (fp32 GEMMs under
    allow_tf32 or torch.set_float32_matmul_precision("high")), FP8 tensor cores (None where the GPU has none or the
    datasheet gives none); and memory GB/s."""

    name: str
    tflops_16bit: float
    tflops_fp32: float
    gbps: float
    tflops_tf32: float | None = None
    tflops_fp8: float | None = None

    def tflops(self, dtype_name: str) -> float:
        return self.tflops_fp32 if dtype_name == "fp32" else self.tflops_16bit

    def roof(self, precision: str) -> float | None:
        """The peak a GEMM of `precision` ("16bit", "fp32", "tf32", "fp8") runs against; None where unknown."""
        return {"fp32": self.tflops_fp32, "tf32": self.tflops_tf32, "fp8": self.tflops_fp8}.get(
            precision, self.tflops_16bit
        )


# Vendor datasheet figures, dense (no sparsity: the TF32, 16-bit and FP8 tensor figures halved where a datasheet
# prints them with sparsity), 16-bit and FP8 with fp32 accumulation. A device takes the entry whose every word is a
# word of its name (find_peak), the entry of the most words where several do: "NVIDIA H200 NVL" is the H200 NVL,
# never the H200 SXM; "NVIDIA GH200 480GB" the GH200, never an H200 (whose word is not GH200's). Override with
# --peak-tflops/--peak-gbps (the one figure then stands for every precision).
PEAKS = [
    Peak("H200", 989.0, 67.0, 4800.0, 494.7, 1979.0),  # H200 SXM datasheet ("NVIDIA H200", "NVIDIA H200 141GB HBM3e")
    Peak("H200 NVL", 835.0, 60.0, 4800.0, 417.5, 1670.5),  # H200 NVL datasheet: same memory, a 600 W card's rates
    # GH200 Grace Hopper Superchip datasheet (nvidia.com/en-us/data-center/grace-hopper-superchip): its Hopper GPU
    # has the H100 SXM's compute (67 fp32, 494 TF32, 990 16-bit, 1,979 FP8 dense) and 96 GB HBM3 at 4.0 TB/s
    # ("NVIDIA GH200 480GB": 480 GB is the Grace CPU's LPDDR5X), or 144 GB HBM3e at 4.9 TB/s ("NVIDIA GH200 144G
    # HBM3e").
    Peak("GH200", 989.0, 67.0, 4000.0, 494.7, 1979.0),
    Peak("GH200 HBM3e", 989.0, 67.0, 4900.0, 494.7, 1979.0),
    Peak("H100 NVL", 835.0, 60.0, 3900.0, 417.5, 1670.5),  # H100 NVL datasheet
    Peak("H100 PCIe", 756.0, 51.0, 2000.0, 378.0, 1513.0),  # H100 PCIe datasheet
    Peak("H100", 989.0, 67.0, 3350.0, 494.7, 1979.0),  # H100 SXM datasheet ("NVIDIA H100 80GB HBM3")
    Peak("A100-SXM4-80GB", 312.0, 19.5, 2039.0, 156.0),  # A100 datasheet (80GB SXM, the posts' GPU); no FP8
    Peak("A100 80GB PCIe", 312.0, 19.5, 1935.0, 156.0),  # A100 datasheet (80GB PCIe)
    Peak("A100", 312.0, 19.5, 1555.0, 156.0),  # A100 40GB datasheet
    Peak("L40S", 362.0, 91.6, 864.0, 183.0, 733.0),  # L40S datasheet
    Peak("L4", 121.0, 30.3, 300.0, 60.0, 242.5),  # L4 datasheet
    Peak("A10G", 70.0, 31.2, 600.0),  # AWS A10G (half the A10's tensor rate)
    Peak("A10", 125.0, 31.2, 600.0, 62.5),  # A10 datasheet
    Peak("RTX 5090", 209.5, 104.8, 1792.0, 104.8, 419.0),  # GeForce RTX 5090 (fp32-accumulate rates)
    Peak("RTX 4090", 165.2, 82.6, 1008.0, 82.6, 330.3),  # GeForce RTX 4090 (fp32-accumulate rates)
    Peak("RTX 3090", 71.0, 35.6, 936.0, 35.6),  # GeForce RTX 3090 (fp32-accumulate rate)
    Peak("T4", 65.0, 8.1, 320.0),  # T4 datasheet (fp16; no bf16 tensor cores)
]

_WORD = re.compile(r"[^\s\-_/(),]+")  # a device name's words: "NVIDIA A100-SXM4-80GB" is nvidia, a100, sxm4, 80gb


def _words(name: str) -> frozenset[str]:
    return frozenset(w.lower() for w in _WORD.findall(name))


def _known_peak(device_name: str) -> Peak | None:
    """The PEAKS entry of `device_name`: of the entries whose every word is a word of the name, the one of the
    most words (the first of those). Whole words, never a part of one: "GH200" holds "H200", "L40S" holds "L4",
    "A100" holds "A10", and none of them is the other GPU."""
    words = _words(device_name)
    fits = [p for p in PEAKS if _words(p.name) <= words]
    return max(fits, key=lambda p: len(_words(p.name)), default=None)


def find_peak(device_name: str | None, tflops: float | None = None, gbps: float | None = None) -> Peak | None:
    """The peaks for `device_name` (None on CPU or an unknown GPU), with flag overrides applied."""
    if not isinstance(device_name, str):  # a trace's deviceProperties may hold any JSON value as its name
        device_name = None
    known = _known_peak(device_name) if device_name else None
    if tflops is None and gbps is None:
        return known
    base = known or Peak(device_name or "custom", 0.0, 0.0, 0.0)
    if tflops is not None:
        return Peak(base.name, tflops, tflops, gbps if gbps is not None else base.gbps, tflops, tflops)
    return dataclasses.replace(base, gbps=gbps)


@dataclass(frozen=True)
class Achieved:
    tflops: float | None  # None where the work or the time is not a figure (see `rate`)
    gbps: float | None
    pct_flops: float | None  # of the device's peak; None when the peak is unknown (CPU)
    pct_bytes: float | None


def rate(amount: object, seconds: object) -> float | None:
    """`amount` per second: None unless the amount is a finite figure of zero or more and the time a finite one
    above zero, and the quotient a float (a trace's 0 µs or denormal step, 1e400 or a 400-digit integer of FLOPs,
    a negative figure: no rate, never a division by zero or an overflow)."""
    try:
        a, t = float(amount), float(seconds)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    if not (math.isfinite(a) and math.isfinite(t)) or a < 0 or t <= 0:
        return None
    try:
        value = a / t
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def achieved(work: Work, seconds: float, peak: Peak | None, dtype_name: str) -> Achieved:
    """TFLOP/s and GB/s reached by doing `work` in `seconds`, and the share of `peak` (None without one, and None
    wherever `rate` gives no figure)."""
    per_s_flops, per_s_bytes = rate(work.flops, seconds), rate(work.bytes, seconds)
    tflops = per_s_flops / 1e12 if per_s_flops is not None else None
    gbps = per_s_bytes / 1e9 if per_s_bytes is not None else None
    roof = peak.tflops(dtype_name) if peak else None
    pct_f = 100.0 * tflops / roof if tflops is not None and roof else None
    pct_b = 100.0 * gbps / peak.gbps if gbps is not None and peak and peak.gbps else None
    return Achieved(tflops, gbps, pct_f, pct_b)
