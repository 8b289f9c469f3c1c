"""Write the Chrome trace and the key_averages table under traces/<script>/, atomically."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

import torch
from torch.autograd.profiler_util import EventList



def sort_key(on_gpu: bool) -> str:
    """The table's sort key: CUDA total on a GPU (the name `table()` accepts), CPU total otherwise."""
    return "cuda_time_total" if on_gpu else "cpu_time_total"


TABLE_ROWS_PRINTED = 15


def key_averages_table(averages: EventList, on_gpu: bool, row_limit: int = -1) -> str:
    """`averages.table(...)` (from `prof.key_averages()`), sorted for the device.

    Torch releases disagree on the GPU key (`cuda_time_total` vs `device_time_total`);
    try both rather than crash on either.
    """
    keys = [sort_key(on_gpu)] + (["device_time_total", "self_cuda_time_total"] if on_gpu else [])
    for key in keys:
        try:
            return averages.table(sort_by=key, row_limit=row_limit)
        except (AttributeError, KeyError, ValueError):
            continue
    return averages.table(row_limit=row_limit)


def atomic_write(path: Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` on a hidden temporary beside `path`, then rename it into place.

    A killed run leaves at most a hidden `.name.tmp`, never a half-written trace
    (trace-util and Perfetto only look at `*.json`).
    """
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        write(tmp)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def export(prof: torch.profiler.profile, out_dir: Path, tag: str, on_gpu: bool) -> tuple[Path, Path, str]:
    """Export `<tag>.json` (Chrome trace) and `<tag>.txt` (full table); return both paths and the
    table's top TABLE_ROWS_PRINTED rows, for printing (key_averages is read once, while the data is there)."""
    trace_path = out_dir / f"{tag}.json"
    table_path = out_dir / f"{tag}.txt"
    averages = prof.key_averages()
    table = key_averages_table(averages, on_gpu)
    top = key_averages_table(averages, on_gpu, row_limit=TABLE_ROWS_PRINTED)
    atomic_write(trace_path, lambda tmp: prof.export_chrome_trace(str(tmp)))
    atomic_write(table_path, lambda tmp: tmp.write_text(table + "\n"))
    return trace_path, table_path, top


def share_command(traces_root: Path) -> str:
    """The trace-util command that uploads `traces_root` and prints Perfetto links (0.1.0 form)."""
    try:
        shown = traces_root.resolve().relative_to(Path.cwd())
    except ValueError:
        shown = traces_root
    return f"uvx trace-util {shown} -b traces"
