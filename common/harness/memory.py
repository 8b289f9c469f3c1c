"""GPU memory over the profiled steps, from PyTorch's CUDA caching allocator, and the --memory snapshot.

Memory is measured on a GPU only: the figures come from `torch.cuda` memory statistics, which the CPU
has no counterpart of. On the CPU the suite says so rather than print a number.
"""

from __future__ import annotations

from pathlib import Path

import torch

from common.harness.private_api import dump_memory_snapshot, record_memory_history, stop_memory_history

SNAPSHOT_EVENTS = 100_000  # allocation events the --memory snapshot keeps


class MemoryWatch:
    """From `start()` to `stop(steps)`: the peak allocated above what was allocated at the start (the steps'
    own working memory: scores, activations, workspaces) and the bytes allocated per step."""

    def __init__(self, device: torch.device, snapshot: bool = False) -> None:
        self.device, self.snapshot = device, snapshot
        self.on_gpu = device.type == "cuda"
        self.base = self.allocated_before = 0

    def start(self) -> None:
        if not self.on_gpu:
            return
        torch.cuda.synchronize(self.device)
        if self.snapshot:
            record_memory_history(SNAPSHOT_EVENTS)
        torch.cuda.reset_peak_memory_stats(self.device)
        self.base = torch.cuda.memory_allocated(self.device)
        self.allocated_before = torch.cuda.memory_stats(self.device).get("allocated_bytes.all.allocated", 0)

    def stop(self, steps: int) -> dict | None:
        """The figures for the trace's metadata, or None on the CPU."""
        if not self.on_gpu:
            return None
        torch.cuda.synchronize(self.device)
        allocated = torch.cuda.memory_stats(self.device).get("allocated_bytes.all.allocated", 0)
        return {
            "inputs_bytes": self.base,  # allocated before the steps: inputs, weights, the mask
            "peak_bytes": torch.cuda.max_memory_allocated(self.device) - self.base,
            "allocated_per_step_bytes": (allocated - self.allocated_before) / max(steps, 1),
        }

    def close(self) -> None:
        """Stop recording the allocation history, if it still is (a run that ended before its save)."""
        if self.on_gpu and self.snapshot:
            stop_memory_history()

    def dump_snapshot(self, path: Path) -> None:
        """Write the allocation history recorded since `start()` to `path` (a pickle) and stop recording.
        The caller writes to a temporary and renames it, with the trace (export.TraceFiles.write)."""
        try:
            dump_memory_snapshot(path)
        finally:
            stop_memory_history()


def memory_line(memory: dict | None, min_bytes: float) -> str:
    """What the run prints beside the step time: the peak, and what a step allocates set beside the
    `min_bytes` it must move at least (the physics line's figure)."""
    if memory is None:
        return "memory: GPU-only (torch.cuda allocator statistics); not measured on the CPU"
    allocated = memory["allocated_per_step_bytes"]
    times = f", {allocated / min_bytes:,.1f}x the {min_bytes / 1e6:,.3g} MB it must move" if min_bytes else ""
    return (
        f"memory: peak {memory['peak_bytes'] / 1e6:,.1f} MB above the {memory['inputs_bytes'] / 1e6:,.1f} MB of "
        f"inputs during the steps; {allocated / 1e6:,.1f} MB allocated per step{times} "
        "(torch.cuda memory statistics)"
    )
