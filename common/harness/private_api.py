"""Every private API and message text of torch and huggingface_hub the suite relies on, in one place.

None of these is a public, stable interface: a new release may rename or reword them. Each entry says
what the suite does with it; tests/harness/test_private_api.py fails, naming the entry, when one changes.
"""

from __future__ import annotations

import contextlib
import pickle
import re
from collections.abc import Iterator
from pathlib import Path

import torch

from common.files import reopen

# torch.profiler: warnings the suite replaces with its own line (schedule) or knows to be harmless (cycle).
PROFILER_NO_WARMUP_WARNING = ".*won't be using warmup"  # schedule(warmup=0): the cold-start experiment
PROFILER_CYCLE_WARNING = ".*Profiler clears events at the end of each cycle"  # torch >= 2.11, on_trace_ready

# SDPA's dispatcher explains a refused backend in warnings: "<header> kernel not used because:", then reasons.
SDPA_REFUSAL_HEADERS = {"flash": "Flash attention", "efficient": "Memory efficient", "cudnn": "CuDNN attention"}
SDPA_REFUSAL_END = "because:"
SDPA_TRIGGERED_AT = re.compile(r"\s*\(Triggered internally at .*$", re.S)

# kernels (0.17): the texts of its failures that the suite turns into its own one-line advice.
KERNELS_NOT_CACHED = ("local cache", "local snapshot")  # offline, the kernel was never downloaded
KERNELS_HUB_UNREACHABLE = "could not verify publisher trust status"  # what an unreachable Hub surfaces as
KERNELS_NO_BUILD = "Cannot find a build variant"


def fused_sdp_choice(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> int:
    """The causal SDPA kernel the dispatcher would pick under the current `sdpa_kernel` pin, without running
    one (`torch._fused_sdp_choice`); RuntimeError when no allowed backend can run these inputs."""
    return torch._fused_sdp_choice(q, k, v, is_causal=True)


def record_memory_history(max_entries: int) -> None:
    """Start recording CUDA allocations for a snapshot (`torch.cuda.memory._record_memory_history`)."""
    torch.cuda.memory._record_memory_history(max_entries=max_entries)


def stop_memory_history() -> None:
    torch.cuda.memory._record_memory_history(enabled=None)


def dump_memory_snapshot(path: Path) -> None:
    """Write the recorded allocations as a pickle for https://pytorch.org/memory_viz, as `_dump_snapshot` does, into
    the temporary `path` made beforehand (reopened, never made anew: common.files.reopen)."""
    with reopen(path) as out:
        pickle.dump(torch.cuda.memory._snapshot(), out)


@contextlib.contextmanager
def hub_offline() -> Iterator[None]:
    """Make huggingface_hub (and `kernels`, which reads it at call time) use the local cache alone, by setting
    `huggingface_hub.constants.HF_HUB_OFFLINE` for the block: the environment variable is read only at import."""
    from huggingface_hub import constants

    saved = constants.HF_HUB_OFFLINE
    constants.HF_HUB_OFFLINE = True
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved


def ddp_bucket_caps(model: torch.nn.parallel.DistributedDataParallel) -> tuple[int, int]:
    """The byte caps a DistributedDataParallel model fills its gradient buckets to: (first bucket, the others).

    Releases that keep a `_bucket_config` cap the first bucket at 1 MiB only when `bucket_cap_mb` is left at its
    default; earlier ones always start with a 1 MiB bucket (`torch.distributed._DEFAULT_FIRST_BUCKET_BYTES`)."""
    config = getattr(model, "_bucket_config", None)
    if config is not None:
        return config.first_bucket_bytes_cap, config.bucket_bytes_cap
    return torch.distributed._DEFAULT_FIRST_BUCKET_BYTES, model.bucket_bytes_cap
