"""--bench: time a step without the profiler, to see what profiling costs."""

from __future__ import annotations

import logging
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

import torch

MIN_RUN_TIME_S = 0.5  # wall-clock timing runs at least this long (sustained)
MIN_CALLS = 5  # the wall-clock median is over at least this many calls
BURST_CALLS = 20  # CUDA-event timing: a short burst, like the profiled window
UNTIMED_CALLS = 3  # calls before any timing, so compilation is not timed
TIMEIT_WARMUP_CALLS = 2  # torch.utils.benchmark's Timer.timeit(1) calls the step twice before timing it


@dataclass(frozen=True)
class UnprofiledTime:
    """A step's time without the profiler: wall clock, and on a GPU the stream's time."""

    wall_s: float  # median wall time per call, back to back for MIN_RUN_TIME_S (torch.utils.benchmark)
    wall_calls: int
    gpu_s: float | None  # median GPU-stream time per call of a short burst (CUDA events); None on the CPU
    gpu_calls: int


def timing_calls(step_s: float) -> int:
    """How many times time_unprofiled calls a step of `step_s` seconds on the CPU (for the run's estimate).

    UNTIMED_CALLS; then blocked_autorange(min_run_time=MIN_RUN_TIME_S), which calls blocks of 1, 10, 100 ... once
    each until one takes a thousandth of MIN_RUN_TIME_S (or all of it), then blocks of that size until
    MIN_RUN_TIME_S has passed (torch also wants a block to be 10,000 timer overheads: a µs or so, which only makes
    a step of under 10 ms, called hundreds of times anyway, a larger block); where that timed fewer than MIN_CALLS,
    MIN_CALLS single timings, each after Timer.timeit's warm-up calls.
    """
    step_s = max(step_s, 1e-9)
    block, calibration = 1, 0
    while True:
        calibration += block
        if block * step_s >= MIN_RUN_TIME_S / 1000:
            break
        block *= 10
    timed = block * max(1, math.ceil(MIN_RUN_TIME_S / (block * step_s)))
    single = MIN_CALLS * (1 + TIMEIT_WARMUP_CALLS) if timed < MIN_CALLS else 0
    return UNTIMED_CALLS + calibration + timed + single


def time_unprofiled(step: Callable[[], object], on_gpu: bool, grad: bool = False) -> UnprofiledTime:
    """Median time per call of `step`: on a GPU, CUDA events around each call of a short burst;
    everywhere, wall clock over a sustained run.

    The burst's calls are queued back to back, so each pair of events measures how long the GPU
    stream spent on one step (kernels and the gaps between them), under the same conditions as the
    few profiled steps: the figure to set beside the profiler's GPU busy time. A sustained run can
    be slower: on an H200 heavy GEMMs reach the power cap within about 0.1 s and the SM clock drops
    (1980 -> 1590 MHz measured). The step is called a few times first so compilation is not timed.
    `grad`: autograd on, as for a training step; off (the default) for a forward pass.
    """
    # torch.utils.benchmark pulls in cpp_extension, which logs "No CUDA runtime is found" without a GPU.
    logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)
    from torch.utils import benchmark

    gpu = None
    with torch.set_grad_enabled(grad):
        for _ in range(UNTIMED_CALLS):
            step()
        if on_gpu:
            events = [
                (torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(BURST_CALLS)
            ]
            torch.cuda.synchronize()
            for start, end in events:
                start.record()
                step()
                end.record()
            torch.cuda.synchronize()
            gpu = statistics.median(start.elapsed_time(end) for start, end in events) * 1e-3  # ms -> s
        # torch's Timer times on 1 thread unless told (num_threads=1 by default): time the step on the threads the
        # profiled steps had, or a CPU step reads up to cores x slower than it ran (04_c flash: 324 ms, not 180)
        timer = benchmark.Timer(stmt="step()", globals={"step": step}, num_threads=torch.get_num_threads())
        wall = timer.blocked_autorange(min_run_time=MIN_RUN_TIME_S)
        calls = len(wall.times) * wall.number_per_run
        if calls < MIN_CALLS:  # a slow step: time MIN_CALLS single calls rather than a median of one or two
            times = [timer.timeit(1).median for _ in range(MIN_CALLS)]
            return UnprofiledTime(statistics.median(times), MIN_CALLS, gpu, BURST_CALLS if on_gpu else 0)
    return UnprofiledTime(wall.median, calls, gpu, BURST_CALLS if on_gpu else 0)
