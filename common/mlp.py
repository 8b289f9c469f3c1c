"""What the two MLP scripts share: the shape flags, the input, the fp32 reference, the physics, the post's MLP."""

from __future__ import annotations

import argparse
import copy
import importlib.util

import torch
from torch import nn

from common.checks import reference_dtype
from common.physics import Work
from common.runtime import REPO_ROOT, Run

SIMPLE_MLP_SCRIPT = REPO_ROOT / "03_simple_mlp.py"

# The post's shape: flag -> (default, help); see runtime.add_shape_flags.
SHAPE = {
    "batch": (64, "batch size"),
    "seq": (128, "sequence length"),
    "dim": (768, "model width, in and out"),
    "hidden": (3072, "gate/up width"),
}


def make_input(args: argparse.Namespace, run: Run) -> torch.Tensor:
    """Random x: [batch, seq, dim] on the run's device and dtype (drawn after the model, from the fixed seed)."""
    return torch.randn(args.batch, args.seq, args.dim, device=run.device, dtype=run.dtype)


def reference_output(model: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """`model(x)` on an fp32 copy (fp64 for fp32 runs): the truth an MLP variant is checked against."""
    ref = reference_dtype(dtype)
    with torch.no_grad():
        return copy.deepcopy(model).to(ref)(x.to(ref))


def mlp_memory(args: argparse.Namespace, dtype: torch.dtype, models: int = 1) -> tuple[int, str]:
    """Bytes at the peak, and for what: `models` sets of the three weights, x, the [batch*seq, hidden]
    activations held at once (gate, up, their product), y, and all of it again for the fp32/fp64 reference."""
    m, d, h = args.batch * args.seq, args.dim, args.hidden
    e, ref = dtype.itemsize, reference_dtype(dtype).itemsize
    need = 3 * d * h * (models * e + ref) + (2 * m * d + 3 * m * h) * (e + ref)
    return need, "the weights, x, the hidden activations, y, and the higher-precision reference"


def mlp_work(args: argparse.Namespace, element_size: int) -> Work:
    """FLOPs of the three GEMMs (plus GeLU and mul, one op per element each), and the fewest bytes:
    read x and the three weights, write y. The [batch*seq, hidden] intermediates are not required traffic:
    a fully fused MLP never writes them out."""
    m, d, h = args.batch * args.seq, args.dim, args.hidden
    flops = 3 * 2 * m * d * h + 2 * m * h  # gate, up, down: 2*m*d*h each
    return Work(flops=flops, bytes=(2 * m * d + 3 * d * h) * element_size)


def simple_mlp_class() -> type[nn.Module]:
    """The post's SimpleGeGLUMLP, loaded from 03_simple_mlp.py, where the reader sees it, rather than copied."""
    spec = importlib.util.spec_from_file_location("simple_mlp", SIMPLE_MLP_SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    return module.SimpleGeGLUMLP
