"""FLOPs of a GEMM or attention op from the input shapes `record_shapes` writes, as TraceLens puts ops on a roofline.

An op's `Input Dims` (and `Input type`, `Concrete Inputs`) in a torch.profiler trace give its FLOPs: 2·M·K·N for a
matrix product (an FP8 `_scaled_mm` and a grouped GEMM too), 4·B·H·Sq·Sk·D for attention's two products (half
under a causal mask), 2.5 times that for its backward (five products where the forward has two). The kernels an op
launched carry its `External id`, so its FLOPs over their time is what they achieved. Pure Python, no torch: it
works on any trace with record_shapes.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

# Attention ops as the kernels' External id names them (the innermost op at the launch): (layout of q, the index
# of is_causal in Concrete Inputs, FLOPs as a multiple of the forward's). "BHSD": q is [batch, heads, seq, dim];
# "BSHD": [batch, seq, heads, dim] (the fused kernels' own layout).
ATTENTION = {
    "aten::_scaled_dot_product_flash_attention": ("BHSD", 4, 1.0),
    "aten::_flash_attention_forward": ("BSHD", 8, 1.0),
    "aten::_scaled_dot_product_efficient_attention": ("BHSD", 6, 1.0),
    "aten::_efficient_attention_forward": ("BSHD", 9, 1.0),  # custom_mask_type: 1 or 2 is causal
    "aten::_scaled_dot_product_cudnn_attention": ("BHSD", 6, 1.0),
    "aten::_cudnn_attention_forward": ("BHSD", 10, 1.0),
    "aten::_scaled_dot_product_flash_attention_backward": ("BHSD", 11, 2.5),
    "aten::_flash_attention_backward": ("BSHD", 11, 2.5),
    "aten::_scaled_dot_product_efficient_attention_backward": ("BHSD", 11, 2.5),
    "aten::_efficient_attention_backward": ("BSHD", 14, 2.5),
    "aten::_scaled_dot_product_cudnn_attention_backward": ("BHSD", 14, 2.5),
    "aten::_cudnn_attention_backward": ("BHSD", 14, 2.5),
}
CAUSAL = ("True", "1", "2")  # is_causal, or the efficient kernels' custom_mask_type (1, 2: causal from a corner)
# The backward ops take the output gradient first, then q, k, v.
_BACKWARD_Q = 1
MATMULS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear")
# FP8 GEMMs (their scales are inputs 2 and 3) and grouped GEMMs (a mixture of experts' one launch for all of them).
SCALED = ("aten::_scaled_mm",)
GROUPED = ("aten::_grouped_mm", "aten::_scaled_grouped_mm")
SHAPED_OPS = frozenset((*MATMULS, *SCALED, *GROUPED, *ATTENTION))  # the cpu_ops whose shapes the reader keeps


@dataclass(frozen=True)
class ShapedOp:
    """One GEMM or attention op as record_shapes wrote it."""

    name: str
    dims: list  # Input Dims: one list of ints per input ([] for a scalar or None)
    types: list  # Input type: "c10::BFloat16", "float", "Scalar", ...
    concrete: list  # Concrete Inputs: the scalar arguments as text ("True", "0.125"), "" for tensors

    @property
    def precision(self) -> str:
        """What its first tensor holds, as the device's roofline names it: "fp8" (c10::Float8_e4m3fn, ...),
        "fp32" (float, double: on tensor cores its kernels run TF32, which their names say), else "16bit"."""
        types = self.types if isinstance(self.types, list) else []  # a trace may write null or a number here
        first = next((t for t in types if isinstance(t, str) and t and t != "Scalar"), "")
        return "fp8" if "Float8" in first else "fp32" if first in ("float", "double") else "16bit"

    @functools.cached_property
    def flops(self) -> float | None:
        """op_flops of this op, once: the reader keeps one ShapedOp per distinct shape, met every step."""
        return op_flops(self)


def _shape(value: object) -> tuple[int, ...] | None:
    """A tensor's dims: whole numbers of zero or more, else None (a negative or non-integer dim is no shape)."""
    if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
        return None
    return tuple(value)


def _float(count: int) -> float | None:
    """An exact count of FLOPs as a float; None where no float holds it (dims of 10**30 multiplied out)."""
    try:
        value = float(count)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _matmul_flops(a: tuple[int, ...], b: tuple[int, ...]) -> float | None:
    """2·batch·M·K·N for torch.matmul(a, b) with broadcast batch dimensions; None for shapes that do not fit."""
    if len(a) < 1 or len(b) < 1:
        return None
    a2 = (1, *a) if len(a) == 1 else a
    b2 = (*b, 1) if len(b) == 1 else b
    if a2[-1] != b2[-2]:
        return None
    batch_a, batch_b = a2[:-2], b2[:-2]
    width = max(len(batch_a), len(batch_b))
    batch_a = (1,) * (width - len(batch_a)) + batch_a
    batch_b = (1,) * (width - len(batch_b)) + batch_b
    batch = math.prod(max(x, y) for x, y in zip(batch_a, batch_b, strict=True))
    return _float(2 * batch * a2[-2] * a2[-1] * b2[-1])


def _grouped_flops(a: tuple[int, ...], b: tuple[int, ...]) -> float | None:
    """2·M·K·N summed over the groups of a grouped GEMM, whatever the offsets split: [M, K] × [G, K, N] (each row
    of `a` meets one group's weight), [G, M, K] × [G, K, N] (a batch), [M, K] × [K, N] (the K split among groups:
    each column of the product sums the groups' parts)."""
    if len(a) == 2 and len(b) == 3:
        return _float(2 * a[0] * a[1] * b[2]) if a[1] == b[1] else None
    if len(a) in (2, 3) and len(a) == len(b):
        return _matmul_flops(a, b)
    return None


def op_flops(op: ShapedOp) -> float | None:
    """The FLOPs `op` does, from its input shapes; None where its shapes are missing or do not fit its formula."""
    shapes = [_shape(d) for d in op.dims] if isinstance(op.dims, list) else []
    if op.name in GROUPED and len(shapes) >= 2 and shapes[0] and shapes[1]:
        return _grouped_flops(shapes[0], shapes[1])
    if op.name in ("aten::mm", "aten::bmm", "aten::matmul", *SCALED) and len(shapes) >= 2 and shapes[0] and shapes[1]:
        return _matmul_flops(shapes[0], shapes[1])
    if op.name in ("aten::addmm", "aten::baddbmm") and len(shapes) >= 3 and shapes[1] and shapes[2]:
        return _matmul_flops(shapes[1], shapes[2])
    if op.name == "aten::linear" and len(shapes) >= 2 and shapes[0] and shapes[1] and len(shapes[1]) == 2:
        x, w = shapes[0], shapes[1]
        return _float(2 * math.prod(x[:-1]) * x[-1] * w[0]) if x[-1] == w[1] else None
    if op.name in ATTENTION:
        layout, causal_at, factor = ATTENTION[op.name]
        first = _BACKWARD_Q if factor != 1.0 else 0
        if len(shapes) < first + 2 or not shapes[first] or not shapes[first + 1]:
            return None
        q, k = shapes[first], shapes[first + 1]
        if len(q) != 4 or len(k) != 4:
            return None
        if layout == "BHSD":
            (b, h, sq, d), sk = q, k[2]
        else:
            (b, sq, h, d), sk = q, k[1]
        flops = _float(4 * b * h * sq * sk * d)
        concrete = op.concrete if isinstance(op.concrete, list) else []
        causal = causal_at is not None and causal_at < len(concrete) and concrete[causal_at] in CAUSAL
        return None if flops is None else flops * factor / (2 if causal else 1)
    return None
