"""The profiler loop every script shares: warm-up, schedule, record_function, prof.step()."""

from __future__ import annotations

import json
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.export import export
from common.physics import Work
from common.runtime import Run

WARMUP_ITERS = 5  # steps run before the profiler starts when --warmup is given


@dataclass
class Profiled:
    """What one profiled run produced."""

    step: Callable[[], object]
    label: str
    tag: str
    trace_path: Path
    table_path: Path
    table: str  # the top of the key_averages table, sorted for the device (the file holds all of it)
    output: object  # what the last profiled step returned, for the correctness check

    def discard(self) -> None:
        """Remove the exported files (used when the output turns out wrong)."""
        self.trace_path.unlink(missing_ok=True)
        self.table_path.unlink(missing_ok=True)


def synchronize(run: Run) -> None:
    """Wait for queued GPU work, so a step's kernels finish inside its step."""
    if run.on_gpu:
        torch.cuda.synchronize(run.device)


def warm_up(step: Callable[[], object], run: Run) -> None:
    """Run `step` WARMUP_ITERS times before profiling; the first call (compile, cuBLAS init) is timed apart."""
    start = time.perf_counter()
    step()
    synchronize(run)
    first = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(WARMUP_ITERS - 1):
        step()
    synchronize(run)
    rest = (time.perf_counter() - start) / max(WARMUP_ITERS - 1, 1)
    what = "compile + first call" if run.compiled else "first call"
    print(f"warm-up: {what} {first * 1e3:.1f} ms wall, then {WARMUP_ITERS - 1} more at "
          f"{rest * 1e3:.3f} ms wall each (not profiled)")


def profile_steps(step: Callable[[], object], label: str, run: Run, tag: str, work: Work) -> Profiled:
    """Profile `step` under `schedule(wait, warmup, active, repeat=1)` and export the result.

    Each iteration wraps the step in `record_function(label)`, waits for the GPU, and
    calls `prof.step()`. The trace and table are written once, from `on_trace_ready`;
    the trace carries a `suite` metadata entry (script, tag, label, dtype, FLOPs, bytes)
    that the summary reads back.
    """
    if run.warm:
        warm_up(step, run)
    activities = [ProfilerActivity.CPU]
    if run.on_gpu:
        activities.append(ProfilerActivity.CUDA)
    else:  # without a GPU, Kineto logs a misleading "ERROR ... gpuGetDeviceCount failed"; keep only fatal logs
        os.environ.setdefault("KINETO_LOG_LEVEL", "5")
    written: dict[str, object] = {}

    def on_trace_ready(prof: torch.profiler.profile) -> None:
        written["paths"] = export(prof, run.traces_dir, tag, run.on_gpu)

    s = run.schedule
    with warnings.catch_warnings(), profile(
        activities=activities,
        schedule=schedule(wait=s.wait, warmup=s.warmup, active=s.active, repeat=1),
        on_trace_ready=on_trace_ready,
        record_shapes=True,
    ) as prof:
        # torch 2.11 warns that a cycle's events are cleared after on_trace_ready: we export once, in it
        warnings.filterwarnings("ignore", message=".*Profiler clears events at the end of each cycle")
        for i in range(s.steps):
            if i == s.steps - 1:  # metadata must be added while recording, before the last prof.step()
                prof.add_metadata_json("suite", json.dumps({
                    "script": run.script, "tag": tag, "label": label, "dtype": run.dtype_name,
                    "device": run.device_name, "flops": work.flops, "bytes": work.bytes,
                }))
            with record_function(label):
                output = step()
            synchronize(run)
            prof.step()
    trace_path, table_path, table = written["paths"]  # type: ignore[misc]
    return Profiled(step, label, tag, trace_path, table_path, table, output)
