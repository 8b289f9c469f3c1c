"""Data parallel training on one machine (06_ddp_training_step.py): the torchrun environment, the process group,
and how many gradient buckets DistributedDataParallel will all-reduce per step."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from common.cli import SuiteError

FIRST_BUCKET_BYTES = 1 << 20  # DDP's first bucket is capped at 1 MiB, so the all-reduce can start early


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


def start_process_group(on_gpu: bool) -> str:
    """NCCL between GPUs, gloo between CPU processes; returns the backend's name."""
    backend = "nccl" if on_gpu else "gloo"
    dist.init_process_group(backend)
    return backend


def expected_buckets(parameters: list[torch.nn.Parameter], bucket_cap_mb: float) -> int:
    """How many buckets DDP fills from these parameters' gradients: it packs them in reverse order (the order
    the backward produces them), closing a bucket once it holds `bucket_cap_mb` MiB (the first one at 1 MiB)."""
    cap, buckets, size = min(FIRST_BUCKET_BYTES, bucket_cap_mb * (1 << 20)), 0, 0
    for p in reversed([p for p in parameters if p.requires_grad]):
        size += p.numel() * p.element_size()
        if size >= cap:
            buckets, size, cap = buckets + 1, 0, bucket_cap_mb * (1 << 20)
    return buckets + (size > 0)
