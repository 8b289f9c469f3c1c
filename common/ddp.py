"""Data parallel training on one machine (06_ddp_training_step.py): the torchrun environment, and how many
gradient buckets DistributedDataParallel will all-reduce per step."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
from torch.nn.parallel import DistributedDataParallel

from common.cli import SuiteError
from common.private_api import ddp_bucket_caps


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process."""

    rank: int
    local_rank: int
    world_size: int


def torchrun_launch() -> Launch:
    """The rank and world size torchrun sets; one line when the script was not started by torchrun with 2+."""
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    missing = [n for n in names if n not in os.environ]
    if missing:
        raise SuiteError(
            "start it with torchrun, one process per GPU (or CPU rank): "
            "torchrun --nproc-per-node 2 06_ddp_training_step.py [flags]"
        )
    try:
        rank, local_rank, world = (int(os.environ[n]) for n in names)
    except ValueError:
        raise SuiteError("RANK, LOCAL_RANK and WORLD_SIZE must be integers (torchrun sets them)") from None
    if world < 2:
        raise SuiteError(f"a world size of {world}: data parallel needs at least 2 processes (--nproc-per-node 2)")
    return Launch(rank, local_rank, world)


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
