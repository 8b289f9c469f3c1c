"""Time a step without the profiler, to see what profiling costs."""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Callable

import torch

MIN_RUN_TIME_S = 0.5  # wall-clock timing runs at least this long
GPU_TIMED_S = 0.3  # CUDA-event timing aims for about this much GPU work
GPU_CALLS = (10, 1000)  # ... within this many calls


@dataclass(frozen=True)
class Bench:
    wall_s: float  # median wall time per call, back to back (torch.utils.benchmark)
    wall_calls: int
    gpu_s: float | None  # median GPU-stream time per call between CUDA events; None on the CPU
    gpu_calls: int


def bench(step: Callable[[], object], on_gpu: bool) -> Bench:
    """Median time per call of `step`: wall clock, and on a GPU also CUDA events around each call.

    The calls are queued back to back, so each pair of events measures how long the GPU stream
    spent on one step (kernels and the gaps between them): the figure to set beside the profiler's
    GPU busy time. The step is called a few times first so compilation and set-up are not timed.
    """
    # Imported here: torch.utils.benchmark pulls in cpp_extension, which warns on machines without CUDA.
    from torch.utils import benchmark

    with torch.no_grad():
        for _ in range(3):
            step()
        wall = benchmark.Timer(stmt="step()", globals={"step": step}).blocked_autorange(min_run_time=MIN_RUN_TIME_S)
        wall_calls = len(wall.times) * wall.number_per_run
        if not on_gpu:
            return Bench(wall.median, wall_calls, None, 0)
        n = max(GPU_CALLS[0], min(GPU_CALLS[1], int(GPU_TIMED_S / wall.median)))
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(n)]
        torch.cuda.synchronize()
        for start, end in events:
            start.record()
            step()
            end.record()
        torch.cuda.synchronize()
        gpu = statistics.median(start.elapsed_time(end) for start, end in events) * 1e-3  # ms -> s
    return Bench(wall.median, wall_calls, gpu, n)
