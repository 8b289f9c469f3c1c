"""FLOPs and bytes of an op from the shapes `record_shapes` writes: its place on the roofline, as TraceLens puts it.

An op's `Input Dims`, `Input type` and `Concrete Inputs` in a torch.profiler trace give its FLOPs: 2·M·K·N for a
matrix product (an FP8 `_scaled_mm` and a grouped GEMM too), 4·B·H·Sq·Sk·D for attention's two products (half
under a causal mask), 2.5 times that for its backward (five products where the forward has two), 2·N·Cout·Hout·Wout
·(Cin/groups)·kh·kw for a convolution (its backward once per gradient asked for, input and weight), and a few per
element for the rest (NORMS, SOFTMAXES; one for an elementwise op or a reduction, none for a copy or a gather).

And its bytes, the fewest a kernel must move: every tensor input read once, every output written once (an `out=`
tensor, listed as the last input, is the output: written, not read), from the dims and the element size `Input type`
names. A GEMM: M·K + K·N + M·N elements (and a bias); attention: q, k, v, o,
with the gradients in the backward; an embedding: the rows gathered, read and written, and its indices. Left out: a
few per-row or per-channel statistics (a norm's mean and rstd, its weight's gradient), and gather's index (an
embedding's is an expanded view, stride 0); a view whose strides repeat its elements otherwise counts whole (the
reader keeps no strides).

No figure where a dtype, a dim or a scalar argument the formula needs is missing: never a guess. The kernels an op
launched carry its `External id`, so its FLOPs and bytes over their time are what they achieved. Pure Python, no
torch: it works on any trace with record_shapes.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
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
# Convolutions as the kernels' External id names them: aten::convolution and aten::_convolution wrap the backend's
# op (cudnn_convolution, the innermost at the launch, takes padding before stride); the backward is one op.
CONVOLUTIONS = ("aten::convolution", "aten::_convolution", "aten::cudnn_convolution", "aten::convolution_backward")
TENSOR_CORE_OPS = frozenset((*MATMULS, *SCALED, *GROUPED, *ATTENTION, *CONVOLUTIONS))  # against a tensor-core peak
# An element's bytes by `Input type`; a type not here has no bytes figure.
ELEMENT_BYTES = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4, "short int": 2,
    "signed char": 1, "unsigned char": 1, "bool": 1, "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1,
    "c10::Float8_e4m3fnuz": 1, "c10::Float8_e5m2fnuz": 1, "c10::complex<float>": 8, "c10::complex<double>": 16,
}  # fmt: skip
# torch's ScalarType numbers, as a dtype argument's Concrete Input writes them ("15": bfloat16) -> an element's bytes.
SCALAR_TYPE_BYTES = {0: 1, 1: 1, 2: 2, 3: 4, 4: 8, 5: 2, 6: 4, 7: 8, 11: 1, 15: 2, 23: 1, 24: 1}


@dataclass(frozen=True)
class ShapedOp:
    """One op as record_shapes wrote it (an op of SHAPED_OPS: one whose work op_work models)."""

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

    @property
    def tensor_core(self) -> bool:
        """Whether its FLOPs are a GEMM's, an attention's or a convolution's: run against a tensor-core peak, where
        a norm's or an elementwise op's run on the CUDA cores."""
        return self.name in TENSOR_CORE_OPS

    @functools.cached_property
    def work(self) -> tuple[float | None, float | None]:
        """op_work of this op, once: the reader keeps one ShapedOp per distinct shape, met every step."""
        return op_work(self)

    @property
    def flops(self) -> float | None:
        return self.work[0]

    @property
    def bytes(self) -> float | None:
        return self.work[1]

    @property
    def intensity(self) -> float | None:
        """FLOPs per byte moved; None where either is no figure or no byte moves."""
        flops, moved = self.work
        if flops is None or not moved:
            return None
        value = flops / moved
        return value if math.isfinite(value) else None


TENSOR_ELEMENTS = 2**63 - 1  # the most elements a tensor can hold: its numel is an int64


def _shape(value: object) -> tuple[int, ...] | None:
    """A tensor's dims: whole numbers of zero or more whose product a tensor can hold (TENSOR_ELEMENTS), else None
    (a negative or non-integer dim, or dims no tensor has, is no shape). The product is taken once, in floats
    capped as it goes, so tens of thousands of dims near 2^62 cost no exact multiplication; every product of a
    shape's dims after this one is of at most 63 bits."""
    if not isinstance(value, list):
        return None
    count = 1.0
    for v in value:
        if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= TENSOR_ELEMENTS:
            return None
        count = min(count * v, 2.0 * TENSOR_ELEMENTS)  # capped: never inf, and still past the bound once past it
    if count > TENSOR_ELEMENTS:
        return None
    return tuple(value)


def _float(count: int) -> float | None:
    """An exact count of FLOPs as a float; None where no float holds it (dims of 10**30 multiplied out)."""
    try:
        value = float(count)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def _matmul_dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of torch.matmul(a, b) with broadcast batch dimensions; None for shapes that do not fit."""
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
    return batch, a2[-2], a2[-1], b2[-1]


def _grouped_dims(a: tuple[int, ...], b: tuple[int, ...]) -> tuple[int, int, int, int] | None:
    """(batch, M, K, N) of a grouped GEMM, its FLOPs 2·M·K·N summed over the groups whatever the offsets split:
    [M, K] × [G, K, N] (each row of `a` meets one group's weight: batch 1), [G, M, K] × [G, K, N] (a batch),
    [M, K] × [K, N] (the K split among groups: each column of the product sums the groups' parts)."""
    if len(a) == 2 and len(b) == 3:
        return (1, a[0], a[1], b[2]) if a[1] == b[1] else None
    if len(a) in (2, 3) and len(a) == len(b):
        return _matmul_dims(a, b)
    return None


class _Inputs:
    """An op's inputs as record_shapes wrote them: each one's dims, its element's bytes and its scalar text."""

    def __init__(self, op: ShapedOp) -> None:
        dims = op.dims if isinstance(op.dims, list) else []
        types = op.types if isinstance(op.types, list) else []
        concrete = op.concrete if isinstance(op.concrete, list) else []
        self.shapes = [_shape(d) for d in dims]
        self.types = [t if isinstance(t, str) else None for t in types] + [None] * (len(dims) - len(types))
        self.concrete = [c if isinstance(c, str) else "" for c in concrete]
        self.out_at = self._out_at(op.name)

    def _out_at(self, name: str) -> int | None:
        """The input that is an `out=` tensor (Inductor's mm and addmm, mse_loss's mean, DDP's mul write into one),
        or None: the last input, where it is a tensor and the op has one tensor more than its functional form
        takes (OUT_FREE_TENSORS). It is written, not read: counted once, as the output."""
        expected = OUT_FREE_TENSORS.get(name)
        tensors = [i for i in range(len(self.shapes)) if self.shapes[i] is not None and self.size(i) is not None]
        last = len(self.shapes) - 1
        if expected is None or len(tensors) != expected + 1 or not tensors or tensors[-1] != last:
            return None
        return last

    def shape(self, i: int) -> tuple[int, ...] | None:
        return self.shapes[i] if i < len(self.shapes) else None

    def size(self, i: int) -> int | None:
        """Input i's element bytes; None where it is no tensor of a known type."""
        return ELEMENT_BYTES.get(self.types[i] or "") if i < len(self.types) else None

    def nbytes(self, i: int) -> int | None:
        shape, size = self.shape(i), self.size(i)
        return None if shape is None or size is None else math.prod(shape) * size

    def reads(self) -> int | None:
        """The bytes of every tensor input, read once (an `out=` tensor is the output: not read); None where a
        tensor's dims or element size is unknown (an input of an unknown type with dims is such a tensor; one
        without dims is a scalar)."""
        total = 0
        for i, dims in enumerate(self.shapes):
            if i == self.out_at:
                continue
            size = self.size(i)
            if size is not None and dims is not None:
                total += math.prod(dims) * size
            elif size is not None or dims is None or (dims and self.types[i] not in NOT_TENSORS):
                return None  # a tensor of dims no shape holds (a negative one), or of an unknown type
        return total

    def text(self, i: int) -> str:
        return self.concrete[i] if i < len(self.concrete) else ""

    def ints(self, i: int) -> tuple[int, ...] | None:
        """A scalar argument's whole numbers ("[1, 1]", "2"); None where it holds none."""
        text = self.text(i).strip().removeprefix("[").removesuffix("]")
        try:
            return tuple(int(part) for part in text.split(",")) if text.strip() else ()
        except ValueError:
            return None

    def dtype_size(self, i: int) -> int | None:
        """The bytes of the dtype a scalar argument names as torch's ScalarType number ("15": bfloat16)."""
        number = self.ints(i)
        return SCALAR_TYPE_BYTES.get(number[0]) if number and len(number) == 1 else None


# The tensor inputs of each op's functional form (no `out=`), where that count tells an `out=` tensor apart: one
# more tensor, last, is it (clamp, pow and linear left out: their optional tensors make the count ambiguous).
OUT_FREE_TENSORS = {
    **dict.fromkeys(("aten::mm", "aten::bmm", "aten::matmul"), 2), **dict.fromkeys(("aten::addmm", "aten::baddbmm"), 3),
    **dict.fromkeys((f"aten::{n}" for n in ("add", "sub", "rsub", "mul", "div", "maximum", "minimum")), 2),
    **dict.fromkeys((f"aten::{n}" for n in ("neg", "abs", "exp", "log", "sqrt", "rsqrt", "gelu", "silu", "relu",
                                            "sigmoid", "tanh")), 1),
    **dict.fromkeys((f"aten::{n}_backward" for n in ("threshold", "gelu", "silu", "sigmoid", "tanh")), 2),
    "aten::where": 3, **dict.fromkeys(("aten::sum", "aten::mean", "aten::amax", "aten::amin"), 1),
    **dict.fromkeys(("aten::_softmax", "aten::_log_softmax"), 1),
    **dict.fromkeys(("aten::_softmax_backward_data", "aten::_log_softmax_backward_data"), 2),
}  # fmt: skip
NOT_TENSORS = ("", "Scalar", "ScalarList", "GenericList", "TensorList", "string", "Device", "ScalarType", "Layout")
Work = tuple[int | None, int | None]  # (FLOPs, bytes), exact counts; None where no formula fits
_NONE: Work = (None, None)


def _plus(*terms: int | None) -> int | None:
    return None if any(t is None for t in terms) else sum(terms)  # type: ignore[arg-type]


def _gemm(op: ShapedOp, x: _Inputs) -> Work:
    """A GEMM: 2·batch·M·K·N FLOPs; its inputs read (a bias, FP8 scales too) and its batch·M·N output written, in
    the dtype `out_dtype` names (an FP8 GEMM's) or its first input's."""
    first = 1 if op.name in ("aten::addmm", "aten::baddbmm") else 0
    a, b = x.shape(first), x.shape(first + 1)
    if not a or not b:
        return _NONE
    outputs = 1  # how many M·N products are written: the K-split grouped GEMM writes one per group
    if op.name in GROUPED:
        found = _grouped_dims(a, b)
        if len(a) == len(b) == 2:
            groups = x.shape(2)
            outputs = groups[0] if groups is not None and len(groups) == 1 else 0
    elif op.name == "aten::linear":
        found = (math.prod(a[:-1]), 1, a[-1], b[0]) if len(b) == 2 and a[-1] == b[1] else None
    else:
        found = _matmul_dims(a, b)
    if found is None:
        return _NONE
    batch, m, k, n = found
    out_size = (x.dtype_size(6) if op.name in SCALED else None) or x.size(first)
    written = None if out_size is None or not outputs else outputs * batch * m * n * out_size
    return 2 * batch * m * k * n, _plus(x.reads(), written)


def _attention(op: ShapedOp, x: _Inputs) -> Work:
    """Attention: 4·B·H·Sq·Sk·D FLOPs (half under a causal mask; 2.5 times that for the backward); its tensors read
    (q, k, v; the backward's output gradient, output and logsumexp too) and its outputs written (o; the backward's
    dq, dk, dv)."""
    layout, causal_at, factor = ATTENTION[op.name]
    first = _BACKWARD_Q if factor != 1.0 else 0
    q, k, v = x.shape(first), x.shape(first + 1), x.shape(first + 2)
    if q is None or k is None or len(q) != 4 or len(k) != 4:
        return _NONE
    if layout == "BHSD":
        (b, h, sq, d), sk = q, k[2]
    else:
        (b, sq, h, d), sk = q, k[1]
    flops = 4 * b * h * sq * sk * d
    causal = causal_at is not None and x.text(causal_at) in CAUSAL
    flops = flops * 5 // 2 if factor != 1.0 else flops
    size = x.size(first)
    if size is None or v is None or len(v) != 4 or not d:
        return flops // (2 if causal else 1), None
    written = math.prod(q) + math.prod(k) + math.prod(v) if factor != 1.0 else math.prod(q) // d * v[-1]
    return flops // (2 if causal else 1), _plus(x.reads(), written * size)


def _spread(values: tuple[int, ...] | None, n: int) -> tuple[int, ...] | None:
    """A per-dimension argument for `n` spatial dims: one value stands for all."""
    if values is None or len(values) not in (1, n):
        return None
    return values * n if len(values) == 1 else values


def _conv_flops(n: int, out: tuple[int, ...], weight: tuple[int, ...]) -> int:
    """2·N·Cout·(output's spatial)·(Cin/groups)·(kernel's spatial): weight is [Cout, Cin/groups, *kernel]."""
    return 2 * n * weight[0] * math.prod(out) * weight[1] * math.prod(weight[2:])


def _convolution(op: ShapedOp, x: _Inputs) -> Work:
    """A convolution's forward: FLOPs by _conv_flops, the output's spatial dims from the input's, the kernel's and
    stride, padding and dilation (Concrete Inputs); its input, weight and bias read and its output written. A
    transposed convolution is not modelled."""
    inp, weight = x.shape(0), x.shape(1)
    if inp is None or weight is None or len(inp) < 3 or len(weight) != len(inp) or weight[1] == 0:
        return _NONE
    cudnn = op.name == "aten::cudnn_convolution"
    if not cudnn and x.text(6) != "False":
        return _NONE  # transposed, or not said
    spatial = len(inp) - 2
    padding, stride, dilation = (_spread(x.ints(i), spatial) for i in ((2, 3, 4) if cudnn else (4, 3, 5)))
    if padding is None or stride is None or dilation is None or min((*stride, *dilation)) < 1 or min(padding) < 0:
        return _NONE
    out = tuple(
        (size + 2 * p - d * (k - 1) - 1) // s + 1
        for size, k, s, p, d in zip(inp[2:], weight[2:], stride, padding, dilation, strict=True)
    )
    if any(o <= 0 for o in out):
        return _NONE
    size = x.size(0)
    written = None if size is None else inp[0] * weight[0] * math.prod(out) * size
    return _conv_flops(inp[0], out, weight), _plus(x.reads(), written)


def _convolution_backward(op: ShapedOp, x: _Inputs) -> Work:
    """A convolution's backward: _conv_flops once for the input's gradient and once for the weight's, as
    output_mask asks (the bias's, a sum, counts none, as FlopCounterMode's); the output gradient, input and weight
    read and the gradients asked for written."""
    grad, inp, weight = x.shape(0), x.shape(1), x.shape(2)
    mask = [part.strip() == "True" for part in x.text(10).strip("[]").split(",")]
    if grad is None or inp is None or weight is None or len(grad) < 3 or len(weight) != len(grad) or len(mask) != 3:
        return _NONE
    if x.text(7) != "False":
        return _NONE
    flops = _conv_flops(grad[0], grad[2:], weight) * (mask[0] + mask[1])
    size = x.size(0)
    if size is None:
        return flops, None
    written = (mask[0] * math.prod(inp) + mask[1] * math.prod(weight) + mask[2] * weight[0]) * size
    return flops, _plus(x.reads(), written)


def _per_element(flops: int, out_dtype_at: int | None = None) -> Callable[[ShapedOp, _Inputs], Work]:
    """An op whose output is its first input's shape (a norm, a softmax, their backwards): `flops` per element,
    every tensor input read and the output written, in the dtype the argument at `out_dtype_at` names (a
    softmax's half_to_float: "True" is fp32) or the first input's."""

    def work(op: ShapedOp, x: _Inputs) -> Work:
        shape = x.shape(0)
        if shape is None:
            return _NONE
        size = x.size(0)
        if out_dtype_at is not None and x.text(out_dtype_at) == "True":
            size = 4
        elif out_dtype_at is not None and x.dtype_size(out_dtype_at):
            size = x.dtype_size(out_dtype_at)
        n = math.prod(shape)
        return flops * n, _plus(x.reads(), None if size is None else n * size)

    return work


def _broadcast(shapes: list[tuple[int, ...]]) -> tuple[int, ...] | None:
    width = max((len(s) for s in shapes), default=0)
    out = []
    for column in zip(*((1,) * (width - len(s)) + s for s in shapes), strict=True):
        sizes = {c for c in column if c != 1}
        if len(sizes) > 1:
            return None
        out.append(sizes.pop() if sizes else 1)
    return tuple(out)


def _elementwise(op: ShapedOp, x: _Inputs) -> Work:
    """An elementwise op: one FLOP per output element, every tensor input read and the output written: the
    inputs' broadcast shape in the widest input's element (in place, the first input's shape and element)."""
    tensors = [(s, x.size(i)) for i, s in enumerate(x.shapes) if x.size(i) is not None]
    if not tensors or any(s is None for s, _ in tensors):
        return _NONE
    if op.name.endswith("_"):
        shape, size = x.shape(0), x.size(0)
    else:
        shape = _broadcast([s for s, _ in tensors])
        shaped = [size for s, size in tensors if s] or [size for _, size in tensors]
        size = max(shaped)  # type: ignore[type-var]
    if shape is None or size is None:
        return _NONE
    n = math.prod(shape)
    return n, _plus(x.reads(), n * size)


def _copy(op: ShapedOp, x: _Inputs) -> Work:
    """copy_(self, src): no FLOPs; src read, self written."""
    return 0, _plus(x.nbytes(0), x.nbytes(1))


def _fill(op: ShapedOp, x: _Inputs) -> Work:
    """fill_ and zero_: no FLOPs; self written."""
    return 0, x.nbytes(0)


def _reduction(op: ShapedOp, x: _Inputs) -> Work:
    """sum, mean, amax, amin over `dim` (none given or [] is every dim): one FLOP per input element; the input
    read and the reduced output written, in `dtype` where given (sum, mean) or the input's element."""
    shape = x.shape(0)
    if shape is None:
        return _NONE
    listed = len(x.types) > 1 and x.types[1] == "ScalarList"
    dims = x.ints(1) if listed else ()
    if dims is None or any(not -len(shape) <= d < max(len(shape), 1) for d in dims):
        return _NONE
    kept = set(range(len(shape))) - {d % len(shape) for d in dims} if dims and shape else set()  # a 0-dim: 1
    size = (x.dtype_size(3 if listed else 1) if op.name in ("aten::sum", "aten::mean") else None) or x.size(0)
    written = None if size is None else math.prod(shape[i] for i in kept) * size
    return math.prod(shape), _plus(x.reads(), written)


def _gathered(rows: int | None, row: int | None, size: int | None, index: int | None) -> int | None:
    """An embedding's bytes: the rows gathered read and written to the output, and the indices read."""
    return None if rows is None or row is None or size is None else _plus(2 * rows * row * size, index)


def _embedding(op: ShapedOp, x: _Inputs) -> Work:
    """embedding(weight, indices): no FLOPs; a row of the weight per index read and written, the indices read."""
    weight, index = x.shape(0), x.shape(1)
    if weight is None or index is None or len(weight) != 2:
        return _NONE
    return 0, _gathered(math.prod(index), weight[1], x.size(0), x.nbytes(1))


def _index_select(op: ShapedOp, x: _Inputs) -> Work:
    """index_select(self, dim, index) and gather(self, dim, index): no FLOPs; an element of self per output element
    read and written, the index read (gather's not: the fewest bytes, where its index repeats, are unknown)."""
    self_, dim, index = x.shape(0), x.ints(1), x.shape(2)
    if self_ is None or index is None or not dim or len(dim) != 1 or not -len(self_) <= dim[0] < len(self_):
        return _NONE
    if op.name == "aten::gather":  # its index left out: an embedding's is an expanded view (stride 0) of the ids
        return 0, _gathered(math.prod(index), 1, x.size(0), 0)
    picked = self_[dim[0]]
    rows = math.prod(self_) // picked * math.prod(index) if picked else 0
    return 0, _gathered(rows, 1, x.size(0), x.nbytes(2))


def _embedding_backward(op: ShapedOp, x: _Inputs) -> Work:
    """embedding_dense_backward(grad_output, indices, num_weights): one add per element of the output gradient; it
    and the indices read, the [num_weights, dim] weight gradient written."""
    grad, rows, size = x.shape(0), x.ints(2), x.size(0)
    if grad is None or not grad or not rows or len(rows) != 1 or rows[0] < 0 or size is None:
        return (math.prod(grad) if grad else None), None
    return math.prod(grad), _plus(x.reads(), rows[0] * grad[-1] * size)


# Per element FLOPs of the ops that touch each element a few times, counted per element of the first input: a layer
# or batch norm's 7 (the mean's add, the variance's multiply-add, normalising's subtract and multiply, the affine's
# multiply-add), an RMS norm's 4 (the square's multiply-add, normalising's and the weight's multiplies), a
# softmax's 5 (max, subtract, exp, sum, divide; log_softmax's log in the divide's place); a backward twice its
# forward's (a softmax's: multiply, sum, multiply-subtract). Their bytes are what bounds them.
NORMS = {
    "aten::native_layer_norm": 7, "aten::layer_norm": 7, "aten::native_batch_norm": 7, "aten::cudnn_batch_norm": 7,
    "aten::batch_norm": 7, "aten::_batch_norm_impl_index": 7, "aten::rms_norm": 4, "aten::_fused_rms_norm": 4,
    "aten::native_layer_norm_backward": 14, "aten::native_batch_norm_backward": 14,
    "aten::cudnn_batch_norm_backward": 14, "aten::_fused_rms_norm_backward": 8,
}  # fmt: skip
SOFTMAXES = {  # name -> (FLOPs per element, the argument naming the output's dtype)
    "aten::_softmax": (5, 2), "aten::softmax": (5, 2), "aten::_log_softmax": (5, 2), "aten::log_softmax": (5, 2),
    "aten::_softmax_backward_data": (3, 3), "aten::_log_softmax_backward_data": (3, 3),
}  # fmt: skip
ELEMENTWISE = (
    "add", "sub", "mul", "div", "rsub", "neg", "abs", "exp", "log", "sqrt", "rsqrt", "pow", "gelu", "silu", "relu",
    "sigmoid", "tanh", "clamp", "clamp_min", "clamp_max", "maximum", "minimum", "where", "threshold_backward",
    "gelu_backward", "silu_backward", "sigmoid_backward", "tanh_backward",
)  # fmt: skip
IN_PLACE = ("add_", "sub_", "mul_", "div_", "neg_", "exp_", "sqrt_", "pow_", "relu_", "silu_", "sigmoid_", "clamp_",
            "clamp_min_", "threshold_")  # fmt: skip
MODELS: dict[str, Callable[[ShapedOp, _Inputs], Work]] = {
    **dict.fromkeys((*MATMULS, *SCALED, *GROUPED), _gemm),
    **dict.fromkeys(ATTENTION, _attention),
    **dict.fromkeys(CONVOLUTIONS[:3], _convolution),
    "aten::convolution_backward": _convolution_backward,
    **{name: _per_element(flops) for name, flops in NORMS.items()},
    **{name: _per_element(flops, at) for name, (flops, at) in SOFTMAXES.items()},
    **{f"aten::{name}": _elementwise for name in (*ELEMENTWISE, *IN_PLACE)},
    "aten::copy_": _copy,
    "aten::fill_": _fill,
    "aten::zero_": _fill,
    **dict.fromkeys(("aten::sum", "aten::mean", "aten::amax", "aten::amin"), _reduction),
    "aten::embedding": _embedding,
    "aten::index_select": _index_select,
    "aten::gather": _index_select,
    "aten::embedding_dense_backward": _embedding_backward,
}
SHAPED_OPS = frozenset(MODELS)  # the cpu_ops whose shapes the reader keeps: those whose work is modelled


def op_work(op: ShapedOp) -> tuple[float | None, float | None]:
    """(FLOPs, bytes) of `op` from its input shapes (the module's docstring: the model); each None where its
    shapes, dtypes or scalar arguments are missing or do not fit its formula, or no float holds it."""
    model = MODELS.get(op.name)
    if model is None:
        return None, None
    flops, moved = model(op, _Inputs(op))
    return (None if flops is None else _float(flops)), (None if moved is None else _float(moved))


def op_flops(op: ShapedOp) -> float | None:
    """The FLOPs `op` does, from its input shapes; None where its shapes are missing or do not fit its formula."""
    return op_work(op)[0]
