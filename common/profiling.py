"""The small tools a script's torch.profiler loop calls: what to record, a GPU sync, a warm-up.

The loop itself (`profile`, `schedule`, `record_function`, `prof.step()`) is written out in every
script, as Part 1 prints it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
import warnings
from collections.abc import Callable

import torch
from torch.profiler import ProfilerActivity

from common.runtime import Run

WARMUP_CALLS = 5  # calls of the step before the profiler starts, with --warmup


def activities(run: Run) -> list[ProfilerActivity]:
    """CPU, plus CUDA on a GPU (the GPU lane of the trace: kernels, memcpy, memset)."""
    # torch >= 2.11 warns that a cycle's events are cleared after on_trace_ready; the scripts export once, in it.
    warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
    if run.on_gpu:
        return [ProfilerActivity.CPU, ProfilerActivity.CUDA]
    # Without a GPU, Kineto logs a misleading "ERROR ... gpuGetDeviceCount failed" and, at its USDT level (5),
    # "profiler_start"/"profiler_stop" lines: above 5 it logs nothing. Read when the first profiler starts.
    os.environ.setdefault("KINETO_LOG_LEVEL", "6")
    return [ProfilerActivity.CPU]


def sync(run: Run) -> None:
    """Wait for the GPU to finish the queued work, so each step's kernels end inside its step.

    Also where a Ctrl-C pressed during the profiled loop takes effect (see `interrupt_between_steps`).
    """
    if run.on_gpu:
        torch.cuda.synchronize(run.device)
    if _interrupt.pending:
        _interrupt.pending = False
        raise KeyboardInterrupt


class _Interrupt:
    pending = False
    previous: object = None


_interrupt = _Interrupt()


def interrupt_between_steps(on: bool) -> None:
    """While on, a first Ctrl-C is held until the step ends (`sync`), where the profiler stops cleanly: raised
    inside the profiler's own callbacks it can take the process down. A second Ctrl-C interrupts at once."""
    if threading.current_thread() is not threading.main_thread():
        return
    if on:

        def hold(signum: int, frame: object) -> None:
            _interrupt.pending = True
            signal.signal(signal.SIGINT, signal.default_int_handler)

        _interrupt.pending = False
        _interrupt.previous = signal.signal(signal.SIGINT, hold)
    elif _interrupt.previous is not None:
        signal.signal(signal.SIGINT, _interrupt.previous)
        _interrupt.previous = None


def warm_up(step: Callable[[], object], run: Run) -> None:
    """Call `step` WARMUP_CALLS times before profiling (--warmup) and print what the first call cost.

    The first call pays for compilation (--compile), cuBLAS set-up and the allocator; the trace of
    a warm run shows none of that.
    """
    start = time.perf_counter()
    step()
    sync(run)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(WARMUP_CALLS - 1):
        step()
    sync(run)
    rest = (time.perf_counter() - start) / (WARMUP_CALLS - 1)
    what = "compile + first call" if run.compiled else "first call"
    print(
        f"warm-up: {what} {first * 1e3:.1f} ms wall, then {WARMUP_CALLS - 1} more at "
        f"{rest * 1e3:.3f} ms wall each (not profiled)"
    )
