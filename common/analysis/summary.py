"""Summarise exported traces as the posts' tables: one row per trace, ratios to a baseline, top kernels.

Usage:
    uv run python -m common.summary traces/01_matmul_add
    uv run python -m common.summary traces/04_a_naive_attention traces/04_c_sdpa_attention
    uv run python -m common.summary traces --markdown --top 3
    uv run python -m common.summary traces/01_matmul_add --per-step     # one row per profiled step
    uv run --extra plot python -m common.summary traces --plot traces/summary.png

PATH is a trace (.json or .json.gz) or a folder searched for them; a path that does not exist or a
folder without traces is skipped with a notice (no traces at all is an error). A file that cannot be
read as a trace gets one `notice:` line naming it and why, and every other trace is summarised; the
exit status is 2 only when none could be read. Several traces are read in parallel, a process per
usable core, with the same output. A trace without profiler steps (a bare `with profile()`) is
split into iterations where its top-level labels repeat (torch's own `Optimizer.step#…` among them),
else summarised as one window; a note says which. One event (or run of whitespace)
larger than 64 MiB makes a file unreadable, naming the byte where it starts: memory stays bounded
whatever a file holds. The baseline
of the ×base ratios is, unless --baseline names another, the slowest trace (the most GPU time per
step, or CPU time where no trace has a GPU lane), so every ratio reads as a fraction of it. The
table fits 120 columns; --wide shows every column. "Per step" is the median over the trace's
profiler steps (ProfilerStep#N). GPU time is GPU busy time: the time at least one stream runs a kernel,
memcpy or memset (the union of their intervals over every stream), not wall time. CPU time is the span of
the script's record_function label on the suite's own traces, of the label --region names, or else of the
ProfilerStep#N (the whole profiled window in a trace without steps); the header says which. TFLOP/s and
GB/s divide the FLOPs and bytes the script recorded by the GPU time; on a CPU-only trace by the CPU
time (column "on" says which), and % of peak is left out there: there is no CPU peak to compare
with. "—" marks a figure the trace cannot give, never a zero. Under the table, each trace's verdict
(common.analysis.diagnosis): what bounds its steps, with its figures and what to try, the median step's time budget
(GPU busy: compute, memcpy/memset, exposed communication; GPU idle: waiting for the host, or kernels waiting),
and the expert rules that fired; --explain adds each rule's evidence. The per-step table shows each step's
budget; the top-kernels table, where the trace has record_shapes, the TFLOP/s and % of peak of each GEMM and
attention kernel, from its op's input shapes. A trace with collectives gets a table of them (kind, group, size,
calls per step, mean duration, algorithm and bus bandwidth), and a run of rank traces the skew of its
collectives across the ranks and the straggler (common.analysis.collectives).
"""

from __future__ import annotations

import argparse
import functools
import io
import multiprocessing
import os
import re
import signal
import stat
import sys
import textwrap
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from common import interrupts
from common.analysis.collectives import (
    COLLECTIVE_LEGEND,
    SKEW_LEGEND,
    arrivals,
    collective_table,
    skew_table,
    skews,
    straggler_lines,
)
from common.analysis.diagnosis import diagnose, verdict_lines
from common.analysis.figures import CALLS, LAUNCH_COLUMNS, Row, launch_line, summarize, with_ratios
from common.analysis.tables import (
    BUDGET_LEGEND,
    DASH,
    LAUNCH_HEADERS,
    LAUNCH_LEGEND,
    TEXT_WIDTH,
    fit_last_column,
    launch_cells,
    num,
    phase_table,
    printable,
    room_for,
    step_table,
    table,
)
from common.cli import REGION_HELP, OneLineParser, SuiteError, cli, notice, positive_float, positive_int, shown
from common.files import not_a_file, shown_path, write_whole
from common.reader.naming import cut_name, short_name
from common.reader.occupancy import SmLimits
from common.reader.trace import CPU_SOURCES, GpuOp, Step, Trace, no_gc, read_trace
from common.units import human_bytes, human_time

LEFT = {"trace", "on", "family", "kernel"}  # text columns are left-aligned, numbers right-aligned


def _is_trace_name(name: str) -> bool:
    return not name.startswith(".") and name.lower().endswith((".json", ".json.gz"))


def traces_in(folder: Path) -> list[Path] | None:
    """The trace files under `folder`, its subfolders searched (links to folders are not followed), sorted; None
    when `folder` itself cannot be read. A subfolder that cannot be read or searched (no permission) is skipped
    with a notice, and the rest is still searched."""
    found: list[Path] = []
    pending = [folder]
    while pending:
        here = pending.pop()
        try:
            with os.scandir(here) as listing:
                entries = list(listing)
        except OSError as exc:
            if here == folder:
                notice(f"{here}: this folder cannot be read ({exc.strerror or exc}), skipped")
                return None
            notice(f"{here}: a folder that cannot be read ({exc.strerror or exc}), skipped")
            continue
        inside: list[Path] = []
        folders: list[Path] = []
        try:
            for entry in entries:
                mode = entry.stat(follow_symlinks=False).st_mode  # EACCES: listed, but no permission to search
                if stat.S_ISDIR(mode):
                    folders.append(Path(entry.path))
                elif _is_trace_name(entry.name) and (stat.S_ISREG(mode) or os.path.isfile(entry.path)):
                    inside.append(Path(entry.path))
        except OSError as exc:
            notice(f"{here}: a folder that cannot be searched ({exc.strerror or exc}), skipped")
            continue
        found += inside
        pending += folders
    return sorted(found)


def find_traces(paths: list[str]) -> list[Path]:
    """The trace files named by `paths`, folders searched (sorted) for *.json and *.json.gz; no duplicates.
    A folder without traces, or one that cannot be read, is skipped with a notice; no traces at all is an error."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if os.path.isdir(path):  # os.path's: False, not an error, where the path cannot be looked at
            inside = traces_in(path)
            if inside == []:
                notice(f"{path}: no *.json or *.json.gz traces in this folder, skipped")
            found += inside or []
        elif os.path.isfile(path):
            found.append(path)
        else:  # e.g. the folder of a script not run yet, a pipe or a device: the other paths still count
            notice(f"{path}: {not_a_file(path)}, skipped")
    if not found:
        raise SuiteError(f"no traces in {', '.join(paths)}")
    return list(dict.fromkeys(p.resolve() for p in found))


@dataclass
class Digest:
    """What the summary prints of one trace, made where the trace was read (a worker process, for a folder): its
    row, the figures the other traces are compared by, and its own tables, never its events."""

    path: Path
    name: str
    row: Row
    has_gpu: bool
    gpu_activity: bool  # False: launches but no GPU event in the whole trace
    step_time: float | None  # the per-step time the default baseline is chosen by (GPU busy, else CPU)
    notes: list[str]
    streams: str | None  # streams_line(), for a trace of several streams
    cpu_source: str  # what its CPU column measures (common.reader.trace.CPU_SOURCES)
    label: str | None  # the record_function label it measures, if one
    skipped: int  # events with a bad ts/dur
    distributed: dict  # the trace's distributedInfo
    rank: int | None
    ranked: tuple[float | None, ...]  # rank_figures(), for the rank table
    steps: int  # how many profiled steps
    phases: str | None  # the phase table, if the trace has phases
    per_step: str | None  # the per-step table, if shown
    kernels: str | None  # the top-kernels table, if the trace has a GPU lane and GPU activity
    verdict: list[
        str
    ]  # what bounds its steps (common.analysis.diagnosis): the verdict, the budget, the rules that fired
    budgeted: bool  # its per-step table shows the time budget
    collectives: str | None = None  # its collectives table (common.analysis.collectives), if it has any
    arrivals: list | None = None  # a rank's collectives as the skew across ranks matches them


def digest(trace: Trace, args: argparse.Namespace) -> Digest:
    """The Digest of `trace` for the summary's flags `args` (--top, --per-step, --markdown, the peaks)."""
    kernels = None
    diagnosis = diagnose(trace, args.peak_tflops)
    if trace.has_gpu and trace.gpu_activity:
        stats = top_kernels(trace, args.top)
        headers, cells = kernel_cells(stats, 200 if args.wide else 48, trace.sm, diagnosis.rates)
        if not args.markdown and not args.wide and cells:  # the kernel names take what is left of TEXT_WIDTH
            cells = fit_last_column(headers, cells, cut_name)
        kernels = table(headers, cells, LEFT, args.markdown) if stats else "no GPU work in the steps"
    shown = args.per_step or len(trace.steps) > 3
    return Digest(
        trace.path,
        trace.name,
        summarize(trace, args.peak_tflops, args.peak_gbps),
        trace.has_gpu,
        trace.gpu_activity,
        trace.step_time_us()[0],
        trace.notes,
        streams_line(trace),
        trace.cpu_source,
        trace.label,
        trace.skipped,
        trace.distributed,
        trace.rank,
        rank_figures(trace) if trace.rank is not None else (),
        len(trace.steps),
        phase_table(trace, args.markdown) if trace.phases else None,
        step_table(trace, every=args.per_step, markdown=args.markdown, budgets=diagnosis.budgets) if shown else None,
        kernels,
        verdict_lines(diagnosis, args.explain),
        shown and bool(diagnosis.budgets),
        collective_table(trace, args.markdown),
        arrivals(trace) if trace.rank is not None else [],
    )


def read_digest(path: Path, args: argparse.Namespace) -> Digest | str:
    """The Digest of the trace at `path`, or why it cannot be read (the message names the file). The cyclic
    garbage collector stays paused until the trace is freed: its millions of objects make no cycles, and a pass
    over them on the way (once the reader or the diagnosis resumed it) would find nothing to free."""
    try:
        with no_gc():
            return digest(read_trace(path, args.region), args)
    except ValueError as exc:
        return str(exc)


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity, as taskset or a container's cpuset sets it)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def _ignore_interrupts() -> None:
    """A worker leaves Ctrl-C to the main process, which ends the workers itself: no traceback from them. The
    signals were blocked while the worker was forked (one sent then waits); here Ctrl-C is ignored and SIGTERM and
    SIGHUP end a worker silently, then they are unblocked; a worker ends with the main process. A worker forked
    with them unblocked ran the main process's handler until here: pool.terminate()'s SIGTERM in that window raised
    in the worker, and multiprocessing printed its traceback."""
    interrupts.in_worker()
    if hasattr(signal, "pthread_sigmask"):
        signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupts.SIGNALS))


def _read_in_parallel(paths: list[Path], args: argparse.Namespace, workers: int) -> list[Digest | str]:
    """read_digest of each path, a process per core, in the order of `paths`. Ctrl-C (or any failure) ends
    every worker before it goes on: no process is left behind. While the workers start, SIGINT is blocked, so a
    Ctrl-C then reaches neither a worker that does not ignore it yet nor a pool half made: it waits, and lands once
    the pool can be ended; SIGTERM and SIGHUP the same."""
    start = "fork" if sys.platform == "linux" else None  # fork: the workers need not import the reader again
    masks = hasattr(signal, "pthread_sigmask")
    pool = None
    try:
        if masks:
            signal.pthread_sigmask(signal.SIG_BLOCK, set(interrupts.SIGNALS))
        try:
            pool = multiprocessing.get_context(start).Pool(workers, initializer=_ignore_interrupts)
        finally:
            if masks:
                signal.pthread_sigmask(signal.SIG_UNBLOCK, set(interrupts.SIGNALS))
        results = list(pool.imap(functools.partial(read_digest, args=args), paths))
        pool.close()
    except BaseException:
        if pool is not None:
            pool.terminate()
        raise
    finally:
        if pool is not None:
            pool.join()
    return results


def read_all(paths: list[Path], args: argparse.Namespace) -> list[Digest]:
    """The Digest of each trace of `paths`, in order: read in this process for one file, else a process per usable
    core (the output is the same). One that cannot be read gets one `notice:` line on stderr naming it and why, and
    the others are still read; SuiteError when none could be (the one line of a single file's why)."""
    workers = min(len(paths), usable_cores())
    if workers > 1:
        from common.reader.trace_json import say_fallback

        say_fallback()  # once here, not once per worker
        results = _read_in_parallel(paths, args, workers)
    else:
        results = [read_digest(path, args) for path in paths]
    traces = []
    for result in results:
        if isinstance(result, Digest):
            traces.append(result)
        elif len(paths) == 1:
            raise SuiteError(result)
        else:
            notice(f"{result}; skipped")
    if not traces:
        raise SuiteError(f"none of the {len(paths)} traces could be read (each one's why is above)")
    return traces


def slowest(traces: list[Digest]) -> Digest:
    """The default baseline: the trace with the most GPU time per step (CPU time if none has a GPU lane)."""
    gpu = [t for t in traces if t.has_gpu and t.step_time is not None]
    pool = gpu or [t for t in traces if t.step_time is not None] or traces
    return max(pool, key=lambda t: t.step_time or 0.0)


def pick_baseline(traces: list[Digest], wanted: str | None, args: argparse.Namespace) -> Digest:
    """The trace `wanted` names (a path, `script/tag`, a tag, or a unique part of a name); default the slowest.
    A file outside `traces` is read with the CPU column timing --region, as the others."""
    if wanted is None:
        return slowest(traces)
    if Path(wanted).is_file():
        path = Path(wanted).resolve()
        found = next((t for t in traces if t.path.resolve() == path), None)
        return found or digest(read_trace(path, args.region), args)
    for match in (lambda t: t.name == wanted, lambda t: t.name.split("/")[-1] == wanted, lambda t: wanted in t.name):
        hits = [t for t in traces if match(t)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise SuiteError(
                f"--baseline {wanted!r} matches {len(hits)} traces: "
                + ", ".join(f"{t.name} ({t.path})" for t in hits)
                + "; give the full script/tag or a path"
            )
    raise SuiteError(f"--baseline {wanted!r} matches no trace (give a path, script/tag or tag)")


def _ratio(value: float | None) -> str:
    """A time ratio with three significant digits ("1.00", "0.260", "214", "1,250"), "< 0.001" below a
    thousandth (never an exponent), or the dash."""
    if value is None:
        return DASH
    if 0 < value < 0.001:
        return "< 0.001"
    return f"{value:,.0f}" if value >= 1000 else f"{value:#.3g}".rstrip(".")


def short_trace_names(names: list[str]) -> dict[str, str]:
    """`script/tag` -> the same with the script cut to the fewest leading words that still tell the scripts
    apart (`04_c_sdpa_attention/...` -> `04_c/...`, `03_kernels_mlp/...` -> `03_kernels/...`)."""
    scripts = sorted({n.split("/")[0] for n in names if "/" in n})
    short = {}
    for script in scripts:
        words = script.split("_")
        for k in range(1, len(words) + 1):
            prefix = "_".join(words[:k])
            if sum(other == prefix or other.startswith(prefix + "_") for other in scripts) == 1:
                short[script] = prefix
                break
    return {
        n: short.get(n.split("/")[0], n.split("/")[0]) + n[len(n.split("/")[0]) :] if "/" in n else n for n in names
    }


def without_shared_words(tags: list[str], room: int) -> list[str]:
    """The tags with words (between `_`) that every one of them has left out, each run of them one `…`, the last
    such word first, as few as make every tag fit `room`: what is left tells the tags apart
    (`1_128_768_12_3072_cudagraphs_amp_bf16_cold_compiled` among the H200's 05 tags ->
    `1_128_768_12_…_cudagraphs_…_compiled`)."""
    words = [tag.split("_") for tag in tags]
    shared = set.intersection(*map(set, words)) if len(tags) > 1 else set()
    order = [w for w in reversed(dict.fromkeys(words[0])) if w in shared]  # the last shared word goes first
    out = tags
    for k in range(1, len(order) + 1):
        gone = set(order[:k])
        out = []
        for tag_words in words:
            kept: list[str] = []
            for word in tag_words:
                if word not in gone:
                    kept.append(word)
                elif not kept or kept[-1] != "…":
                    kept.append("…")
            out.append("_".join(kept))
        if all(len(tag) <= room for tag in out):
            break
    return out


def _cut_middle(text: str, room: int) -> str:
    if len(text) <= room:
        return text
    keep = room - 1
    return text[: keep - keep // 2] + "…" + text[len(text) - keep // 2 :]


def fitted_names(names: list[str], room: int) -> dict[str, str]:
    """Each of `names` (distinct) made to fit `room` characters, keeping what tells it from the others: the script
    cut to its fewest telling words; where a script's names are still too long, the tag words all of them share
    left out (`…`); only then a cut in the middle. No two come out alike (a clash is numbered)."""
    if all(len(name) <= room for name in names):
        return {name: name for name in names}
    short = short_trace_names(names)
    scripts: dict[str, list[str]] = {}
    for name in names:
        scripts.setdefault(name.split("/")[0] if "/" in name else "", []).append(name)
    fitted = {}
    for script, members in scripts.items():
        if not script or all(len(short[n]) <= room for n in members):
            fitted.update({n: short[n] for n in members})
            continue
        head = short[members[0]].split("/")[0]
        tags = without_shared_words([n.split("/", 1)[1] for n in members], room - len(head) - 1)
        fitted.update({n: f"{head}/{tag}" for n, tag in zip(members, tags, strict=True)})
    fitted = {n: _cut_middle(text, room) for n, text in fitted.items()}
    clashes = Counter(fitted.values())
    numbered: Counter = Counter()
    for name in names:
        if clashes[fitted[name]] > 1:
            numbered[fitted[name]] += 1
            mark = f" #{numbered[fitted[name]]}"
            fitted[name] = _cut_middle(fitted[name], room - len(mark)) + mark
    return fitted


def table_cells(rows: list[Row], wide: bool = False, markdown: bool = False) -> tuple[list[str], list[list[str]]]:
    """The summary table as (headers, one list of cells per row): the default columns, or every one. The
    default text table fits TEXT_WIDTH: long trace names lose words of their script name, then the tag words that
    all of their script's rows share, then their middle (fitted_names); ratios below 0.001 read "< 0.001"."""
    if wide:  # the launch API columns add up to `launches`: the two of the posts, then any other seen
        apis = [*LAUNCH_COLUMNS, *sorted({api for r in rows for api in r.launch_apis} - set(LAUNCH_COLUMNS))]
        headers = ["trace", "steps", "kernels", "GPU busy", "CPU", "launches", *apis, *CALLS, "memcpy", "memset",
                   "peak MB", "TFLOP/s", "GB/s", "on", "%peak TF", "%peak BW", "GPU ×base", "CPU ×base"]  # fmt: skip
        cells = [
            [
                r.name,
                str(r.steps),
                num(r.kernels),
                human_time(r.gpu_us),
                human_time(r.cpu_us),
                num(r.launches),
                *(DASH if r.launches is None else num(r.launch_apis.get(api, 0)) for api in apis),
                *(num(v) for v in r.calls.values()),
                num(r.peak_mb, 4),
                num(r.tflops),
                num(r.gbps),
                r.on or DASH,
                num(r.pct_flops, 2),
                num(r.pct_bytes, 2),
                _ratio(r.gpu_ratio),
                _ratio(r.cpu_ratio),
            ]  # fmt: skip
            for r in rows
        ]
        return headers, cells
    headers = ["trace", "kernels", "GPU busy", "CPU", "launches", "memcpy", "peak MB", "TFLOP/s", "%peak", "×base"]
    cells = [
        [
            r.name,
            num(r.kernels),
            human_time(r.gpu_us),
            human_time(r.cpu_us),
            num(r.launches),
            num(r.calls["memcpy"]),
            num(r.peak_mb, 4),
            num(r.tflops),
            num(r.pct_flops, 2),
            _ratio(r.ratio),
        ]  # fmt: skip
        for r in rows
    ]
    if markdown or len(max((c[0] for c in cells), key=len, default="")) <= room_for(headers, cells, 0):
        return headers, cells
    names = fitted_names([r.name for r in rows], room_for(headers, cells, 0))
    return headers, [[names[c[0]], *c[1:]] for c in cells]


@dataclass
class KernelStat:
    """One kernel name's share of a trace's GPU work, and its launch figures (from its first launch)."""

    op: GpuOp
    us_per_step: float  # total over the profiled steps / number of steps
    calls_per_step: float
    share: float  # % of the trace's GPU work summed over streams (more than GPU busy where streams overlap)


def top_kernels(trace: Trace, n: int) -> list[KernelStat]:
    """The `n` kernels (and memcpy/memset) with the most total time over the profiled steps."""
    uses = sorted(trace.kernel_uses().values(), key=lambda u: -u.us)
    busy = sum(u.us for u in uses) or 1.0
    return [KernelStat(u.op, u.us, u.calls, 100.0 * u.us / busy) for u in uses[:n]]


def kernel_cells(
    stats: list[KernelStat], name_width: int = 48, sm: SmLimits | None = None, rates: dict | None = None
) -> tuple[list[str], list[list[str]]]:
    """A top-kernels table as (headers, cells): time, calls and share, the TFLOP/s and % of peak its op's
    record_shapes give (`rates`: common.analysis.diagnosis.efficiency; the columns only where some kernel has one),
    then the launch figures (theoretical occupancy on a GPU of limits `sm`) and the name."""
    rates = {key: rates[key] for key in ((k.op.category, k.op.name) for k in stats) if key in rates} if rates else {}
    headers = ["µs/step", "calls", "% sum", *(["TFLOP/s", "%peak"] if rates else []), "family", *LAUNCH_HEADERS,
               "kernel"]  # fmt: skip
    cells = []
    for k in stats:
        rate = rates.get((k.op.category, k.op.name))
        if not rates:
            shaped = []
        elif rate and rate.helper:  # a helper kernel of an op: the op's rate is on its main kernel's row
            shaped = ["helper", DASH]
        else:
            shaped = [num(rate.tflops) if rate else DASH, num(rate.pct_peak, 2) if rate else DASH]
        cells.append([
            f"{k.us_per_step:.1f}",
            f"{k.calls_per_step:g}",
            f"{k.share:.1f}",
            *shaped,
            k.op.family,
            *launch_cells(k.op, sm),
            short_name(k.op.name, name_width),
        ])  # fmt: skip
    return headers, cells


def streams_line(trace: Trace) -> str | None:
    """For a trace whose GPU work ran on several streams: per step (medians), GPU busy (the union), the sum over
    the streams and each stream's sum, and how long two or more were busy at once; None on one stream."""
    if not any(len(s.streams) > 1 for s in trace.steps):
        return None
    streams = sorted(
        {op.stream for s in trace.steps for op in s.gpu}, key=lambda x: (not isinstance(x, int), str(x).zfill(20))
    )
    each = ", ".join(
        f"stream {x}: {human_time(trace.per_step(lambda s, x=x: sum(op.us for op in s.gpu if op.stream == x)))}"
        for x in streams
    )
    busy, total = trace.per_step(lambda s: s.gpu_busy_us), trace.per_step(lambda s: s.gpu_sum_us)
    overlap = trace.per_step(lambda s: s.stream_overlap_us)
    return (
        f"GPU work on {len(streams)} streams: per step, GPU busy {human_time(busy)} (the union), summed over the "
        f"streams {human_time(total)} (sums per stream: {each}); two or more busy at once {human_time(overlap)}"
    )


def trace_notes(traces: list[Digest], rows: list[Row]) -> list[str]:
    """One line per thing to know about a trace: how its steps were found, what was left out or guessed, its
    graph launches, its streams, its rank."""
    lines = []
    for trace, row in zip(traces, rows, strict=True):
        lines += [f"note: {row.name}: {note}" for note in trace.notes]
        launches = launch_line(row)
        if launches:
            lines.append(f"note: {row.name}: per step, {launches}")
        if trace.streams:
            lines.append(f"note: {row.name}: {trace.streams}")
        if trace.distributed:
            info = trace.distributed
            world = info.get("world_size", "?")
            lines.append(f"note: {row.name}: rank {info.get('rank', '?')} of {world} ({info.get('backend', '?')})")
    return lines


def _communication_us(step: Step) -> float:
    return sum(op.us for op in step.kernels if op.family == "communication")


def _compute_us(step: Step) -> float:
    return sum(op.us for op in step.gpu if op.family != "communication")


RANK_WORD = re.compile(r"[_.-]?rank\d+")  # `_rank1` in a file name: the rank, the rest names the run


def runs_of(traces: list[Digest]) -> list[tuple[str, list[Digest]]]:
    """The traces of ranks (distributedInfo) grouped by the run they belong to, each run's ranks in order, with the
    run's name. One run is one folder's traces of one world size and backend; where a rank repeats in it (several
    runs side by side, as 06's tags put them), the file name without its `rank<r>` tells the runs apart."""
    folders: dict[tuple, list[Digest]] = {}
    for trace in (t for t in traces if t.rank is not None):
        info = trace.distributed
        key = (trace.path.parent, str(info.get("world_size")), str(info.get("backend")))
        folders.setdefault(key, []).append(trace)
    runs = []
    for (folder, world, _), members in folders.items():
        if len({t.rank for t in members}) == len(members):
            runs.append((f"{folder.name} ({world} ranks)", members))
            continue
        split: dict[str, list[Digest]] = {}
        for trace in members:
            stem = trace.path.name.removesuffix(".gz").removesuffix(".json")
            split.setdefault(RANK_WORD.sub("", stem), []).append(trace)
        runs += [(f"{folder.name}/{stem} ({world} ranks)", group) for stem, group in split.items()]
    return [(name, sorted(group, key=lambda t: t.rank)) for name, group in runs]


def rank_figures(trace: Trace) -> tuple[float | None, ...]:
    """A rank's figures per step (medians): GPU busy (the union over streams), the sums of compute and of
    communication kernel time, exposed communication, CPU time and its peak GPU memory in bytes (None where the
    trace cannot give one)."""
    gpu = trace.has_gpu and trace.gpu_activity  # launches without GPU events give no GPU figure, never a zero
    busy = trace.per_step(lambda s: s.gpu_busy_us) if gpu else None
    comm = trace.per_step(_communication_us) if gpu else None
    compute = trace.per_step(_compute_us) if gpu else None
    exposed = trace.per_step(lambda s: s.exposed_communication_us) if gpu else None
    memory = trace.meta.get("memory") if isinstance(trace.meta.get("memory"), dict) else {}
    peak = memory.get("peak_bytes") if isinstance(memory.get("peak_bytes"), (int, float)) else None
    return busy, compute, comm, exposed, trace.per_step(lambda s: s.region_us), peak


def rank_table(traces: list[Digest], markdown: bool = False) -> list[str]:
    """For the ranks of one run: a row per rank (GPU busy, the union over streams; the sums of compute and of
    communication kernel time (Σ), which overlap where streams do; the communication no compute kernel hid; CPU
    time; peak GPU memory), then the spread, slowest ÷ fastest rank; [] for fewer than two ranks."""
    ranked = sorted((t for t in traces if t.rank is not None), key=lambda t: t.rank)
    if len({t.rank for t in ranked}) < 2:
        return []
    cells = [[str(t.rank), t.name, *map(human_time, t.ranked[:5]), human_bytes(t.ranked[5])] for t in ranked]
    gpu, cpu = [t.ranked[0] for t in ranked], [t.ranked[4] for t in ranked]
    headers = ["rank", "trace", "GPU busy", "compute Σ", "comm. Σ", "exposed comm.", "CPU", "peak memory"]
    if not markdown:  # the trace names take what is left of TEXT_WIDTH, keeping what tells them apart
        names = fitted_names([c[1] for c in cells], room_for(headers, cells, 1))
        cells = [[c[0], names[c[1]], *c[2:]] for c in cells]

    def spread(values: list[float | None]) -> str:
        known = [v for v in values if v is not None]
        return f"{max(known) / min(known):.3g}×" if known and min(known) > 0 else DASH

    line = f"spread, slowest ÷ fastest rank: GPU {spread(gpu)}, CPU {spread(cpu)}"
    return [table(headers, cells, {"trace"}, markdown), "", line]


def cpu_line(traces: list[Digest]) -> str:
    """What the CPU column measures, for the header: one source for all, or which traces use which."""
    groups: dict[str, list[Digest]] = {}
    for trace in traces:
        groups.setdefault(trace.cpu_source, []).append(trace)

    def said(source: str, group: list[Digest]) -> str:
        if source in ("suite", "region"):
            labels = ", ".join(dict.fromkeys(repr(t.label) for t in group))
            return f"{CPU_SOURCES[source]} ({labels})"
        return CPU_SOURCES[source]

    if len(groups) == 1:
        [(source, group)] = groups.items()
        return f"CPU = {said(source, group)}."
    parts = [f"{said(source, group)} for {', '.join(t.name for t in group)}" for source, group in groups.items()]
    return f"CPU = {'; '.join(parts)}."


def launch_names(rows: list[Row]) -> str:
    """The launch calls the legend names: the two the traces use most (ROCm's hipLaunchKernel on a ROCm trace),
    cudaLaunchKernel and cuLaunchKernelEx where no trace launched any."""
    used: Counter = Counter()
    for row in rows:
        used.update(row.launch_apis)
    names = [name for name, n in used.most_common(2) if n > 0]
    return ", ".join(printable(n, newlines=False) for n in names) if names else "cudaLaunchKernel, cuLaunchKernelEx"


def render(traces: list[Digest], rows: list[Row], baseline: Digest, args: argparse.Namespace) -> str:
    """The whole report: the summary table and its legend, per-step tables, then each trace's top kernels."""
    heading = (lambda s: f"### {s}") if args.markdown else (lambda s: "\n".join(textwrap.wrap(s, TEXT_WIDTH)))  # noqa: E731
    gap = [""] if args.markdown else []
    why = "named by --baseline" if args.baseline else "the slowest; --baseline picks another"
    legend = (
        "Per step = median over the profiled steps. GPU busy = the time at least one stream runs a kernel, "
        "memcpy or memset (their union over streams, not wall); CPU = the span the line above names. "
        f"launches = kernel launches ({launch_names(rows)}, ...). "
        "peak MB = GPU memory a step held at its peak above its inputs (torch.cuda statistics; GPU runs only). "
        "TFLOP/s divides the script's FLOPs by GPU time (CPU time on a CPU trace; on a trace the suite did not "
        "write, the FLOPs of its GEMM and attention ops from record_shapes, with no %peak); %peak only on a known GPU "
        f"(--peak-tflops for others). ×base = GPU time / the baseline's (CPU time on a CPU trace). {DASH} = not "
        "in this trace. --wide shows every column."
    )
    out = [
        *(
            [heading(f"Per-step summary of {len(rows)} trace(s); baseline {baseline.name} ({why})")]
            if args.markdown
            else textwrap.wrap(
                f"Per-step summary of {len(rows)} trace(s); baseline {baseline.name} ({why})", TEXT_WIDTH
            )
        ),
        *([cpu_line(traces)] if args.markdown else textwrap.wrap(cpu_line(traces), TEXT_WIDTH)),
        "",
        table(*table_cells(rows, args.wide, args.markdown), LEFT, args.markdown),
        "",
        *([legend] if args.markdown else textwrap.wrap(legend, TEXT_WIDTH)),
    ]
    skipped = [t for t in traces if t.skipped]
    if skipped:
        out += ["", *(f"note: {shown_path(t.path)}: {t.skipped} event(s) with a bad ts/dur skipped" for t in skipped)]
    verdicts = []
    for row, trace in zip(rows, traces, strict=True):
        verdicts += ["", *([heading(row.name)] if args.markdown else [row.name]), *gap]
        verdicts += [f"- {line.strip()}" for line in trace.verdict] if args.markdown else trace.verdict
    if not args.markdown:
        verdicts = [line for v in verdicts for line in textwrap.wrap(v, TEXT_WIDTH, subsequent_indent="      ") or [""]]
    out += ["", heading("What bounds each trace (--explain: each rule's evidence)"), *verdicts]
    said = [*trace_notes(traces, rows)]
    if not args.markdown:  # a long trace name must not push a note past the terminal's width
        said = [line for note in said for line in textwrap.wrap(note, TEXT_WIDTH, subsequent_indent="  ")]
    if said:
        out += ["", *said]
    for run, members in runs_of(traces):  # a spread compares the ranks of one run only
        ranks = rank_table(members, args.markdown)
        if ranks:
            title = f"Ranks of {run} (per step, medians)"
            out += ["", *([heading(title)] if args.markdown else textwrap.wrap(title, TEXT_WIDTH)), *gap, *ranks]
    out += collectives_part(traces, heading, gap, args)
    for trace in (t for t in traces if t.phases):
        out += ["", heading(f"Phases of {trace.name} (per step, medians)"), *gap, trace.phases]
    for trace in (t for t in traces if t.per_step):
        out += ["", heading(f"Per profiled step of {trace.name}"), *gap, trace.per_step]
    if any(t.budgeted for t in traces):
        out += ["", *([BUDGET_LEGEND] if args.markdown else textwrap.wrap(BUDGET_LEGEND, TEXT_WIDTH))]
    for trace in (t for t in traces if t.kernels is not None):
        out += ["", heading(f"Top {args.top} GPU work of {trace.name} (over {trace.steps} steps)"), *gap]
        out.append(trace.kernels)
    if any(t.kernels is not None for t in traces):
        legend = f"% sum = the share of the GPU work summed over streams; {LAUNCH_LEGEND}"
        out += ["", *([legend] if args.markdown else textwrap.wrap(legend, TEXT_WIDTH))]
    cpu_only = [t.name for t in traces if not t.has_gpu]
    if cpu_only:
        line = f"No GPU lane (CPU runs), so no kernels to list: {', '.join(cpu_only)}"
        out += ["", *([line] if args.markdown else textwrap.wrap(line, TEXT_WIDTH, break_on_hyphens=False))]
    unrecorded = [t.name for t in traces if t.has_gpu and not t.gpu_activity]
    if unrecorded:
        line = f"No GPU activity recorded (launches only), so no kernels to list: {', '.join(unrecorded)}"
        out += ["", *([line] if args.markdown else textwrap.wrap(line, TEXT_WIDTH, break_on_hyphens=False))]
    return "\n".join(out)


def collectives_part(traces: list[Digest], heading, gap: list[str], args: argparse.Namespace) -> list[str]:
    """Each trace's collectives table, then each run's skew across its ranks, each with its legend; with
    --explain, a line naming the straggler where the skew is large."""
    out = []
    wrap = (lambda s: [s]) if args.markdown else (lambda s: textwrap.wrap(s, TEXT_WIDTH))  # noqa: E731
    for trace in (t for t in traces if t.collectives):
        out += ["", heading(f"Collectives of {trace.name} (over {trace.steps} steps)"), *gap, trace.collectives]
    if any(t.collectives for t in traces):
        out += ["", *wrap(COLLECTIVE_LEGEND)]
    for run, members in runs_of(traces):
        found = skews({t.rank: t.arrivals for t in members if t.arrivals})
        if found:
            out += ["", *wrap(f"Collective skew across the ranks of {run}"), *gap, skew_table(found, args.markdown)]
            out += ["", *wrap(SKEW_LEGEND)]
            out += [line for s in (straggler_lines(found) if args.explain else []) for line in wrap(s)]
    return out


def plot(rows: list[Row], path: Path) -> None:
    """Write a bar chart of GPU and CPU time per step for each trace to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nan = float("nan")
    y = range(len(rows))
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(rows)))
    gpu = [r.gpu_us if r.gpu_us is not None else nan for r in rows]
    cpu = [r.cpu_us if r.cpu_us is not None else nan for r in rows]
    if any(r.gpu_us for r in rows):  # a CPU trace draws no GPU bars, so its legend has no entry for them
        ax.barh([i - 0.2 for i in y], gpu, 0.4, label="GPU busy (union over streams)")
    ax.barh([i + 0.2 for i in y], cpu, 0.4, label="CPU (annotated region)")
    times = [t for r in rows for t in (r.gpu_us, r.cpu_us) if t]
    if times and max(times) / min(times) > 100:
        ax.set_xscale("log")
    ax.set_yticks(list(y), [r.name for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("µs per step (median over profiled steps)")
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False)  # above the bars
    fig.tight_layout()
    picture = io.BytesIO()
    fig.savefig(picture, format="png", dpi=120, bbox_inches="tight")  # keep the legend above the axes
    plt.close(fig)
    write_whole(path, picture.getvalue())


def check_plot_path(path: Path) -> Path:
    """Before any work: matplotlib is there, and `path` is a file name in a folder that can be written."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SuiteError("--plot needs matplotlib: run `uv run --extra plot python -m common.summary ...`") from None
    if path.is_dir():
        raise SuiteError(f"--plot {path}: is a folder; give a file name such as {path / 'summary.png'}")
    if path.exists() and not path.is_file():
        raise SuiteError(f"--plot {path}: not a regular file (a device or a pipe); give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise SuiteError(f"--plot {path}: cannot write into {folder}")
    return path


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command-line flags (one `error:` line and exit 2 on a bad one)."""
    parser = OneLineParser(__doc__, prog="python -m common.summary")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files (.json, .json.gz) or folders of them")
    parser.add_argument(
        "--baseline",
        help="the trace the ×base ratios divide by: a path, script/tag, or tag (default: the slowest trace)",
    )
    parser.add_argument("--wide", action="store_true", help="every column, wider than 120 (default: off)")
    parser.add_argument(
        "--per-step",
        action="store_true",
        help="a table of every profiled step for each trace (default: off; traces of more than 3 steps "
        "show their first 20 steps anyway)",
    )
    parser.add_argument("--markdown", action="store_true", help="Markdown tables instead of plain text (default: off)")
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also write a PNG bar chart of GPU and CPU time (default: none; needs matplotlib: uv run --extra plot)",
    )
    parser.add_argument(
        "--peak-tflops", type=positive_float, help="the device's peak TFLOP/s (default: the datasheet of known GPUs)"
    )
    parser.add_argument(
        "--peak-gbps", type=positive_float, help="the device's peak memory GB/s (default: the datasheet of known GPUs)"
    )
    parser.add_argument("--top", type=positive_int, default=5, help="kernels listed per trace (default: 5)")
    parser.add_argument("--region", metavar="NAME", help=REGION_HELP)
    parser.add_argument(
        "--explain", action="store_true", help="print each rule's evidence under the verdicts (default: off)"
    )
    return parser.parse_args(argv)


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the summary of the traces named on the command line; 0 on success, 2 on bad input."""
    args = parse_args(argv)
    interrupts.install()  # a signal: one `interrupted` line, its exit code, and the workers end with it
    try:
        if args.plot:
            check_plot_path(args.plot)
        traces = read_all(find_traces(args.paths), args)
        baseline = pick_baseline(traces, args.baseline, args)
        if baseline not in traces:  # a baseline file outside PATH...: show it first
            traces.insert(0, baseline)
        rows = [t.row for t in traces]
        names = Counter(r.name for r in rows)
        for row, trace in zip(rows, traces, strict=True):
            if names[row.name] > 1:  # the same script/tag twice (copies, .json and .json.gz): tell them apart
                row.name = f"{row.name} ({trace.path})"
        with_ratios(rows, rows[traces.index(baseline)])
        print(printable(render(traces, rows, baseline, args)))
        if args.plot:
            plot(rows, args.plot)
            print(f"\nplot: {shown(str(args.plot.resolve()))}")
    except ValueError as exc:  # a file that is not a trace
        raise SuiteError(str(exc)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
