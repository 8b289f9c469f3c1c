"""DistributedDataParallel's side of 06_ddp_training_step.py: its flags, how many gradient buckets it fills,
and the memory a rank's step holds.
"""

from __future__ import annotations

import argparse
import math

import torch
from torch.nn.parallel import DistributedDataParallel

from common.cli import positive_float
from common.harness.private_api import ddp_bucket_caps
from common.harness.torchrun import STARTUP_S, Launch
from common.workloads.block import AMP, BlockShape, parameter_count, saved_for_backward

MAX_BUCKET_MB = (2**63 - 1) / 2**20  # DDP turns --bucket-cap-mb into an int64 count of bytes


def add_ddp_flags(parser: argparse.ArgumentParser) -> None:
    """06's own flags: DDP's bucket size, overlap or not, and how long the start-up waits."""
    ddp = parser.add_argument_group("data parallel")
    ddp.add_argument(
        "--bucket-cap-mb",
        type=bucket_cap_mb,
        default=None,
        help="DDP's gradient bucket size in MiB (default: DDP's, 25, with a first bucket of 1 MiB)",
    )
    ddp.add_argument(
        "--no-overlap",
        action="store_true",
        help="all-reduce the gradients after the backward instead of during it, for the comparison (default: off)",
    )
    ddp.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=STARTUP_S,
        help=f"seconds a rank waits for the others to join; then one line names the missing (default: {STARTUP_S:g})",
    )


def bucket_cap_mb(text: str) -> float:
    """argparse type for --bucket-cap-mb: what DistributedDataParallel can take, a finite number of MiB above 0
    whose bytes fit the int64 DDP counts them in."""
    try:
        mb = float(text)
    except ValueError:
        mb = math.nan
    if not 0 < mb <= MAX_BUCKET_MB:
        raise argparse.ArgumentTypeError(f"DDP takes a bucket above 0 and up to {MAX_BUCKET_MB:.3g} MiB, got {text}")
    return mb


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
