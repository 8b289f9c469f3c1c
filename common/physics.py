"""The physics of a step: its FLOPs, the fewest bytes it must move, and the device's peaks."""

from __future__ import annotations

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
    (None: they run at a matmul's rate).
    """

    flops: float
    bytes: float
    moved: float = 0.0
    reference: Work | None = None
    ops: int = 0
    fused: FusedAttention | None = None

    @property
    def has_reference(self) -> bool:
        """Whether a reference is left to compute in the run: None is the step's own work; a Work of nothing
        (05 and 06: made before the estimate, or rank 0's weights) is none."""
        ref = self.reference
        return ref is None or bool(ref.flops or ref.bytes or ref.moved)


@dataclass(frozen=True)
class Peak:
    """Dense peaks of one GPU: 16-bit tensor-core TFLOP/s, plain fp32 TFLOP/s, memory GB/s."""

    name: str
    tflops_16bit: float
    tflops_fp32: float
    gbps: float

    def tflops(self, dtype_name: str) -> float:
        return self.tflops_fp32 if dtype_name == "fp32" else self.tflops_16bit


# Vendor datasheet figures, dense (no sparsity), bf16/fp16 with fp32 accumulation.
# First match wins, so more specific names come first. Override with --peak-tflops/--peak-gbps.
PEAKS = [
    Peak("H200", 989.0, 67.0, 4800.0),  # H200 SXM datasheet
    Peak("H100 NVL", 835.0, 60.0, 3900.0),  # H100 NVL datasheet
    Peak("H100 PCIe", 756.0, 51.0, 2000.0),  # H100 PCIe datasheet
    Peak("H100", 989.0, 67.0, 3350.0),  # H100 SXM datasheet
    Peak("A100-SXM4-80GB", 312.0, 19.5, 2039.0),  # A100 datasheet (80GB SXM, the posts' GPU)
    Peak("A100", 312.0, 19.5, 1555.0),  # A100 40GB datasheet
    Peak("L40S", 362.0, 91.6, 864.0),  # L40S datasheet
    Peak("L4", 121.0, 30.3, 300.0),  # L4 datasheet
    Peak("A10G", 70.0, 31.2, 600.0),  # AWS A10G (half the A10's tensor rate)
    Peak("A10", 125.0, 31.2, 600.0),  # A10 datasheet
    Peak("RTX 5090", 209.5, 104.8, 1792.0),  # GeForce RTX 5090 (fp32-accumulate rate)
    Peak("RTX 4090", 165.2, 82.6, 1008.0),  # GeForce RTX 4090 (fp32-accumulate rate)
    Peak("RTX 3090", 71.0, 35.6, 936.0),  # GeForce RTX 3090 (fp32-accumulate rate)
    Peak("T4", 65.0, 8.1, 320.0),  # T4 datasheet (fp16; no bf16 tensor cores)
]


def find_peak(device_name: str | None, tflops: float | None = None, gbps: float | None = None) -> Peak | None:
    """The peaks for `device_name` (None on CPU or an unknown GPU), with flag overrides applied."""
    known = next((p for p in PEAKS if device_name and p.name.lower() in device_name.lower()), None)
    if tflops is None and gbps is None:
        return known
    base = known or Peak(device_name or "custom", 0.0, 0.0, 0.0)
    t16 = tflops if tflops is not None else base.tflops_16bit
    t32 = tflops if tflops is not None else base.tflops_fp32
    return Peak(base.name, t16, t32, gbps if gbps is not None else base.gbps)


@dataclass(frozen=True)
class Achieved:
    tflops: float
    gbps: float
    pct_flops: float | None  # of the device's peak; None when the peak is unknown (CPU)
    pct_bytes: float | None


def achieved(work: Work, seconds: float, peak: Peak | None, dtype_name: str) -> Achieved:
    """TFLOP/s and GB/s reached by doing `work` in `seconds`, and the share of `peak` (None without one)."""
    tflops = work.flops / seconds / 1e12
    gbps = work.bytes / seconds / 1e9
    pct_f = 100.0 * tflops / peak.tflops(dtype_name) if peak and peak.tflops(dtype_name) else None
    pct_b = 100.0 * gbps / peak.gbps if peak and peak.gbps else None
    return Achieved(tflops, gbps, pct_f, pct_b)
