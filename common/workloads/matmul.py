"""The physics of Part 1's two GEMM workloads, torch.add(torch.matmul(x, w), b) and nn.Linear: the FLOPs,
the fewest bytes a step must move, and the memory a run needs (with its higher-precision reference)."""

from __future__ import annotations

import torch

from common.harness.checks import reference_dtype
from common.physics import Work


def matmul_add_work(batch: int, n: int, dtype: torch.dtype, batched: bool = False) -> Work:
    """`batch` products of two N x N matrices plus an N x N add; read x, w, b and write y once. Compiled, the 2-D
    add rides in the BLAS's addmm; a `batched` one (aten::bmm) is a kernel of Inductor's own."""
    flops, moved = batch * (2 * n**3 + n**2), batch * 4 * n * n * dtype.itemsize
    return Work(flops=flops, bytes=moved, kernels=batched, shaped=batch * 2 * n**3)  # shaped: the mm's (or bmm's)


def matmul_add_memory(batch: int, n: int, dtype: torch.dtype) -> tuple[int, str]:
    """Bytes at the peak, and for what: x, w, b, y, and the four again in the reference's precision plus one."""
    need = batch * n * n * (4 * dtype.itemsize + 5 * reference_dtype(dtype).itemsize)
    return need, "x, w, b, y, reference"


def linear_work(batch: int, in_dim: int, out_dim: int, dtype: torch.dtype) -> Work:
    """y = x @ w.T + b: the GEMM and the bias add; read x, w, b and write y once."""
    m, k, n = batch, in_dim, out_dim
    moved = (m * k + k * n + n + m * n) * dtype.itemsize
    # compiled: one addmm, bias folded in; shaped: the addmm's product, as record_shapes shows it
    return Work(flops=2 * m * k * n + m * n, bytes=moved, kernels=False, shaped=2 * m * k * n)


def linear_memory(batch: int, in_dim: int, out_dim: int, dtype: torch.dtype) -> tuple[int, str]:
    """Bytes at the peak, and for what: x, the weight, the bias, y, the same in the reference's precision, and
    the reference's product before its bias add."""
    m, k, n = batch, in_dim, out_dim
    e, r = dtype.itemsize, reference_dtype(dtype).itemsize
    return (m * k + k * n + n + m * n) * (e + r) + m * n * r, "x, weight, y, reference"
