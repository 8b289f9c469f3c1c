"""The GeGLU MLP family (03_simple_mlp.py, 03_kernels_mlp.py): the shape flags, the input, the fp32
reference, the physics, and Liger's layer built with the post's weights."""

from __future__ import annotations

from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from common.cli import SuiteError, shown
from common.harness.checks import reference_dtype
from common.physics import Work
from common.workloads.shapes import MLPShape as MLPShape


def make_input(batch: int, seq: int, dim: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """Random x: [batch, seq, dim] (drawn after the model's weights, from the fixed seed)."""
    return torch.randn(batch, seq, dim, device=device, dtype=dtype)


def geglu_reference(mlp: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """down(gelu_tanh(gate(x)) * up(x)) from `mlp`'s gate_proj/up_proj/down_proj weights, computed in the
    reference precision for `dtype` (fp32, fp64 for fp32 runs): the truth a GeGLU variant is checked against."""
    ref = reference_dtype(dtype)
    gate, up, down = (getattr(mlp, name).weight.to(ref) for name in ("gate_proj", "up_proj", "down_proj"))
    x = x.to(ref)
    with torch.no_grad():
        return (F.gelu(x @ gate.T, approximate="tanh") * (x @ up.T)) @ down.T


def mlp_memory(shape: MLPShape, dtype: torch.dtype) -> tuple[int, str]:
    """Bytes at the peak for `shape`, and for what: the three weights, x, the [batch*seq, hidden] activations held at
    once (gate, up, their product), y, and all of it again for the fp32/fp64 reference."""
    m, d, h = shape.batch * shape.seq, shape.dim, shape.hidden
    e, ref = dtype.itemsize, reference_dtype(dtype).itemsize
    need = 3 * d * h * (e + ref) + (2 * m * d + 3 * m * h) * (e + ref)
    return need, "weights, x, activations, y, reference"


def mlp_work(shape: MLPShape, element_size: int) -> Work:
    """FLOPs of `shape`'s three GEMMs (plus GeLU and mul, one op per element each), and the fewest bytes:
    read x and the three weights, write y. The [batch*seq, hidden] intermediates are not required traffic:
    a fully fused MLP never writes them out."""
    m, d, h = shape.batch * shape.seq, shape.dim, shape.hidden
    flops = 3 * 2 * m * d * h + 2 * m * h  # gate, up, down: 2*m*d*h each
    return Work(flops=flops, bytes=(2 * m * d + 3 * d * h) * element_size)


def pypi_liger_geglu(hub_failure: Exception | None = None) -> type[nn.Module]:
    """LigerGEGLUMLP from the liger-kernel package on PyPI: the same Triton kernel as the Hub's. Given the
    `hub_failure` that led here, say so first, in two notice lines."""
    if hub_failure is not None:
        print(f"notice: {shown(str(hub_failure))}")
        print("notice: falling back to LigerGEGLUMLP from the liger-kernel package on PyPI (the same Triton kernel)")
    print(
        "importing liger_kernel.transformers (Triton, transformers) ...", flush=True
    )  # 4 s on a 2-core CPU, 10-12 s on the H200's host
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError as exc:
        raise SuiteError(f"cannot import liger_kernel ({exc}): `uv sync` (or `pip install liger-kernel`)") from None
    return LigerGEGLUMLP


def liger_geglu(layer: type[nn.Module], dim: int, hidden: int, device: torch.device, dtype: torch.dtype) -> nn.Module:
    """A `layer` (LigerGEGLUMLP) with gate/up/down projections made as 03_simple_mlp.py makes them: three
    nn.Linear(bias=False) in the same order, so the same seed gives the post's SimpleGeGLUMLP's weights.

    Newer Hub builds ship a forward-only layer (no `__init__`; its forward reads gate_proj, up_proj and
    down_proj); PyPI's and older Hub builds build those from a config and always use the tanh GeLU.
    """
    projections = {
        "gate_proj": nn.Linear(dim, hidden, bias=False),
        "up_proj": nn.Linear(dim, hidden, bias=False),
        "down_proj": nn.Linear(hidden, dim, bias=False),
    }
    if layer.__init__ is nn.Module.__init__:
        mlp = layer()
        for name, linear in projections.items():
            setattr(mlp, name, linear)
    else:
        mlp = layer(SimpleNamespace(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
        mlp.load_state_dict({f"{name}.weight": linear.weight for name, linear in projections.items()})
    return mlp.to(device, dtype).eval()
