"""DistributedDataParallel's side of 06_ddp_training_step.py: its flags, how many gradient buckets it fills,
and the memory a rank's step holds.
"""

from __future__ import annotations

import torch
from torch.nn.parallel import DistributedDataParallel

from common.harness.private_api import ddp_bucket_caps
from common.harness.torchrun import Launch
from common.workloads.block import AMP, BlockShape, parameter_count, saved_for_backward
from common.workloads.shapes import MAX_BUCKET_MB as MAX_BUCKET_MB
from common.workloads.shapes import add_ddp_flags as add_ddp_flags
from common.workloads.shapes import bucket_cap_mb as bucket_cap_mb


def ddp_memory(shape: BlockShape, precision: str, dtype: torch.dtype, launch: Launch, on_gpu: bool) -> tuple[int, str]:
    """Bytes at the peak of 06's step, and for what: 05's step (common.workloads.block.block_memory) without its
    reference, plus DDP's buckets (a copy of the gradients) and the gathered weights of the check; on the CPU times the
    ranks on this machine, which share its memory."""
    batch, seq, dim, hidden = shape.batch, shape.seq, shape.dim, shape.hidden
    p = parameter_count(dim, hidden) * (4 if precision == AMP else dtype.itemsize)
    saved = sum(saved_for_backward(shape, precision, dtype).values())
    tokens = batch * seq
    need = 5 * p + 2 * tokens * dim * 4 + saved + 4 * tokens * hidden * dtype.itemsize
    need += launch.world_size * dim * dim * 4
    what = "weights, grads, DDP buckets, AdamW state, activations"
    if on_gpu or launch.local_world_size == 1:
        return need, what
    return need * launch.local_world_size, f"{what}; x {launch.local_world_size} ranks on this CPU"


def expected_buckets(model: DistributedDataParallel) -> int:
    """How many gradient buckets `model` all-reduces per step, from its parameters and the caps it was built with."""
    return bucket_count(list(model.module.parameters()), *ddp_bucket_caps(model))


def bucket_count(parameters: list[torch.nn.Parameter], first_cap: int, cap: int) -> int:
    """How many buckets DDP fills from these parameters' gradients: it packs them in reverse order (the order
    the backward produces them), closing a bucket once it holds its cap, `first_cap` for the first one and `cap`
    for the rest."""
    limit, buckets, size = first_cap, 0, 0
    for p in reversed([p for p in parameters if p.requires_grad]):
        size += p.numel() * p.element_size()
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, cap
    return buckets + (size > 0)
