"""The workloads' shapes and flags, free of torch: a script builds its whole parser, and checks every flag, before
torch loads (common.harness.early.importing_torch)."""

from __future__ import annotations

import argparse
import math
from typing import NamedTuple

from common.cli import positive_float
from common.harness.early import AttentionShape as AttentionShape  # 04_a to 04_d's, refused early on memory
from common.harness.flags import STARTUP_S

SDPA_BACKEND_NAMES = ("math", "flash", "efficient", "cudnn")  # 04_c's --backend (attention.SDPA_BACKENDS: torch's)
FLASH_VERSION = 1  # 04_d's default kernel version on the Hub


class MLPShape(NamedTuple):
    """The GeGLU MLP shape of 03_simple_mlp and 03_kernels_mlp: a flag per field (runtime.add_shape_flags)."""

    batch: int = 64
    seq: int = 128
    dim: int = 768
    hidden: int = 3072

    HELP = {
        "batch": "batch size",
        "seq": "sequence length",
        "dim": "model width, in and out",
        "hidden": "gate/up width",
    }


class BlockShape(NamedTuple):
    """The decoder block shape of 05 and 06 (per rank): a flag per field (runtime.add_shape_flags)."""

    batch: int = 8
    seq: int = 1024
    dim: int = 768
    heads: int = 12
    hidden: int = 3072

    HELP = {
        "batch": "batch size",
        "seq": "sequence length",
        "dim": "model width",
        "heads": "attention heads (dim must divide by it)",
        "hidden": "MLP gate/up width",
    }


# --dtype's help in the training scripts: left out, parameters and AdamW state stay fp32 and the forward runs
# under bf16 autocast (AMP), as real training keeps them; given, it names one dtype for everything
AMP_DTYPE_HELP = "one dtype for parameters, activations and AdamW state (default: fp32 parameters, bf16 autocast)"


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
