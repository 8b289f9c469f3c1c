"""Time a step without the profiler, to see what profiling costs."""

from __future__ import annotations

from typing import Callable

import torch

MIN_RUN_TIME_S = 0.5


def bench(step: Callable[[], object]) -> tuple[float, int]:
    """Median seconds per call of `step` and how many calls were timed.

    `torch.utils.benchmark.Timer` synchronizes CUDA around its measurements; the step
    is called a few times first so compilation and cuBLAS set-up are not timed.
    """
    # Imported here: torch.utils.benchmark pulls in cpp_extension, which warns on machines without CUDA.
    from torch.utils import benchmark

    with torch.no_grad():
        for _ in range(3):
            step()
        measurement = benchmark.Timer(stmt="step()", globals={"step": step}).blocked_autorange(
            min_run_time=MIN_RUN_TIME_S)
    return measurement.median, len(measurement.times) * measurement.number_per_run
