"""Summarise exported traces as the posts' tables: one row per trace, ratios to a baseline, top kernels.

Usage:
    uv run python -m common.summary traces/01_matmul_add
    uv run python -m common.summary traces/04_a_naive_attention traces/04_c_sdpa_attention --baseline naive
    uv run python -m common.summary traces --markdown --top 3
    uv run --extra plot python -m common.summary traces --plot traces/summary.png

PATH is a trace (.json or .json.gz) or a folder searched for them; a file that is not a trace, a
folder without traces or a trace without profiler steps stops the run with one `error:` line
(exit 2). "Per step" is the median over the trace's profiler steps (ProfilerStep#N). GPU time is
GPU busy time: the sum of kernel, memcpy and memset durations, not wall time. CPU time is the span
of the script's record_function label. TFLOP/s and GB/s divide the FLOPs and bytes the script
recorded by the GPU time; on a CPU-only trace by the CPU time (column "on" says which), and % of
peak is left out there: there is no CPU peak to compare with. "—" marks a figure the trace cannot
give, never a zero.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from common.cli import OneLineParser, SuiteError, cli, positive_float, positive_int
from common.physics import Work, achieved, find_peak
from common.trace import GpuOp, Trace, read_trace, short_name

DASH = "—"
TEXT_COLUMNS = {"trace", "on", "family", "kernel"}  # left-aligned; numbers are right-aligned
LAUNCHES = {  # column -> runtime/driver call name prefix
    "cudaLaunchKernel": "cudaLaunchKernel",
    "cuLaunchKernelEx": "cuLaunchKernelEx",
    "occupancy": "cudaOccupancyMaxActiveBlocksPerMultiprocessor",
}


@dataclass
class Row:
    """One trace's figures per profiled step (medians); None where the trace cannot give one."""

    name: str
    steps: int
    kernels: float | None
    gpu_us: float | None
    cpu_us: float | None
    launches: dict[str, float | None]  # column name (LAUNCHES, then memcpy, memset) -> count
    on: str | None  # "GPU" or "CPU": which time the rates below divide by
    tflops: float | None = None
    gbps: float | None = None
    pct_flops: float | None = None
    pct_bytes: float | None = None
    gpu_ratio: float | None = None  # this trace's GPU time / the baseline's
    cpu_ratio: float | None = None


def find_traces(paths: list[str]) -> list[Path]:
    """The trace files named by `paths`, folders searched (sorted) for *.json and *.json.gz; no duplicates."""
    found: list[Path] = []
    for text in paths:
        path = Path(text)
        if path.is_dir():
            inside = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not p.name.startswith(".") and p.name.endswith((".json", ".json.gz"))
            )
            if not inside:
                raise SuiteError(f"{path}: no *.json or *.json.gz traces in this folder")
            found += inside
        elif path.is_file():
            found.append(path)
        else:
            raise SuiteError(f"{path}: no such file or folder")
    return list(dict.fromkeys(p.resolve() for p in found))


def summarize(trace: Trace, peak_tflops: float | None = None, peak_gbps: float | None = None) -> Row:
    """One table row for `trace`: per-step medians, and the rates its `suite` FLOPs/bytes give."""
    gpu = trace.has_gpu
    launches = {
        col: trace.per_step(lambda s, p=prefix: s.calls(p)) if gpu else None for col, prefix in LAUNCHES.items()
    }
    launches["memcpy"] = trace.per_step(lambda s: len(s.memcpy)) if gpu else None
    launches["memset"] = trace.per_step(lambda s: len(s.memset)) if gpu else None
    row = Row(
        trace.name,
        len(trace.steps),
        kernels=trace.per_step(lambda s: len(s.kernels)) if gpu else None,
        gpu_us=trace.per_step(lambda s: s.gpu_busy_us) if gpu else None,
        cpu_us=trace.per_step(lambda s: s.region_us),
        launches=launches,
        on=None,
    )
    us, on = trace.step_time_us()
    flops, nbytes = trace.meta.get("flops"), trace.meta.get("bytes")
    if us and isinstance(flops, (int, float)) and isinstance(nbytes, (int, float)):
        peak = find_peak(trace.device_name, peak_tflops, peak_gbps) if gpu else None
        got = achieved(Work(flops, nbytes), us * 1e-6, peak, str(trace.meta.get("dtype", "bf16")))
        row.on, row.tflops, row.gbps = on, got.tflops, got.gbps
        row.pct_flops, row.pct_bytes = got.pct_flops, got.pct_bytes
    return row


def with_ratios(rows: list[Row], baseline: Row) -> list[Row]:
    """`rows` with GPU and CPU time ratios against `baseline` (None where either time is missing)."""
    for row in rows:
        row.gpu_ratio = row.gpu_us / baseline.gpu_us if row.gpu_us is not None and baseline.gpu_us else None
        row.cpu_ratio = row.cpu_us / baseline.cpu_us if row.cpu_us is not None and baseline.cpu_us else None
    return rows


def pick_baseline(traces: list[Trace], wanted: str | None) -> Trace:
    """The trace `wanted` names (a path, `script/tag`, a tag, or a unique part of a name); default the first."""
    if wanted is None:
        return traces[0]
    if Path(wanted).is_file():
        path = Path(wanted).resolve()
        return next((t for t in traces if t.path.resolve() == path), None) or read_trace(path)
    for match in (lambda t: t.name == wanted, lambda t: t.name.split("/")[-1] == wanted, lambda t: wanted in t.name):
        hits = [t for t in traces if match(t)]
        if len(hits) == 1:
            return hits[0]
        if hits:
            raise SuiteError(
                f"--baseline {wanted!r} matches {len(hits)} traces: "
                + ", ".join(t.name for t in hits)
                + "; give the full script/tag or a path"
            )
    raise SuiteError(f"--baseline {wanted!r} matches no trace (give a path, script/tag or tag)")


def _num(value: float | None, digits: int = 3) -> str:
    """`value` with `digits` significant digits (whole numbers from 10**digits up), or the dash if missing."""
    if value is None:
        return DASH
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def _ratio(value: float | None) -> str:
    """A time ratio with three significant digits ("1.00", "0.260", "214"), or the dash."""
    return DASH if value is None else f"{value:#.3g}".rstrip(".")


def table_cells(rows: list[Row]) -> tuple[list[str], list[list[str]]]:
    """The summary table as (headers, one list of cells per row)."""
    headers = [
        "trace",
        "steps",
        "kernels",
        "GPU µs",
        "CPU µs",
        *LAUNCHES,
        "memcpy",
        "memset",
        "TFLOP/s",
        "GB/s",
        "on",
        "%peak TF",
        "%peak BW",
        "GPU ×base",
        "CPU ×base",
    ]
    cells = [
        [
            r.name,
            str(r.steps),
            _num(r.kernels),
            _num(r.gpu_us, 4),
            _num(r.cpu_us, 4),
            *(_num(v) for v in r.launches.values()),
            _num(r.tflops),
            _num(r.gbps),
            r.on or DASH,
            _num(r.pct_flops, 2),
            _num(r.pct_bytes, 2),
            _ratio(r.gpu_ratio),
            _ratio(r.cpu_ratio),
        ]
        for r in rows
    ]
    return headers, cells


@dataclass
class KernelStat:
    """One kernel name's share of a trace's GPU work."""

    name: str
    family: str
    us_per_step: float  # total over the profiled steps / number of steps
    calls_per_step: float
    share: float  # % of the trace's GPU busy time


def top_kernels(trace: Trace, n: int) -> list[KernelStat]:
    """The `n` kernels (and memcpy/memset) with the most total time over the profiled steps."""
    total: dict[tuple[str, str], float] = defaultdict(float)
    calls: dict[tuple[str, str], int] = defaultdict(int)
    for step in trace.steps:
        for op in step.gpu:
            total[op.category, op.name] += op.us
            calls[op.category, op.name] += 1
    busy = sum(total.values()) or 1.0
    ranked = sorted(total, key=total.get, reverse=True)[:n]
    steps = len(trace.steps)
    family = {key: GpuOp(*key, 0.0).family for key in ranked}
    return [
        KernelStat(
            short_name(name, 70),
            family[cat, name],
            total[cat, name] / steps,
            calls[cat, name] / steps,
            100.0 * total[cat, name] / busy,
        )
        for cat, name in ranked
    ]


def kernel_cells(stats: list[KernelStat]) -> tuple[list[str], list[list[str]]]:
    """A top-kernels table as (headers, cells)."""
    return (
        ["µs/step", "calls/step", "% GPU", "family", "kernel"],
        [[f"{k.us_per_step:.1f}", f"{k.calls_per_step:g}", f"{k.share:.1f}", k.family, k.name] for k in stats],
    )


def text_table(headers: list[str], cells: list[list[str]]) -> str:
    """An aligned plain-text table: text columns left-aligned, numbers right-aligned."""
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    left = [h in TEXT_COLUMNS for h in headers]

    def line(row: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if lft else c.rjust(w) for c, w, lft in zip(row, widths, left, strict=True)
        ).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, cells)])


def markdown_table(headers: list[str], cells: list[list[str]]) -> str:
    """A GitHub-flavoured Markdown table (numbers right-aligned)."""
    align = ["---" if h in TEXT_COLUMNS else "---:" for h in headers]
    rows = [headers, align, *cells]
    return "\n".join("| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows)


def render(traces: list[Trace], rows: list[Row], baseline: Trace, top: int, markdown: bool) -> str:
    """The whole report: the summary table, its legend, then each trace's top kernels."""
    table = markdown_table if markdown else text_table
    heading = (lambda s: f"### {s}") if markdown else (lambda s: s)
    out = [
        heading(f"Per-step summary of {len(rows)} trace(s), baseline {baseline.name}"),
        "",
        table(*table_cells(rows)),
        "",
        "Per step = median over profiled steps. GPU µs = kernel+memcpy+memset busy time (not wall); "
        "CPU µs = the annotated region. Rates divide the script's FLOPs/bytes by the time named in 'on'; "
        "no % of peak on CPU or an unknown GPU (see --peak-tflops/--peak-gbps). ×base = time / baseline time. "
        f"{DASH} = not in this trace.",
    ]
    for trace in (t for t in traces if t.has_gpu):
        out += ["", heading(f"Top {top} GPU work of {trace.name} (by total time over {len(trace.steps)} steps)")]
        stats = top_kernels(trace, top)
        out += (
            (["", table(*kernel_cells(stats))] if markdown else [table(*kernel_cells(stats))])
            if stats
            else ["no GPU work inside the profiled steps"]
        )
    cpu_only = [t.name for t in traces if not t.has_gpu]
    if cpu_only:
        out += ["", f"No GPU lane (CPU runs), so no kernels to list: {', '.join(cpu_only)}"]
    return "\n".join(out)


def plot(rows: list[Row], path: Path) -> None:
    """Write a bar chart of GPU and CPU time per step for each trace to `path` (PNG)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    nan = float("nan")
    y = range(len(rows))
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.5 * len(rows)))
    ax.barh(
        [i - 0.2 for i in y],
        [r.gpu_us if r.gpu_us is not None else nan for r in rows],
        0.4,
        label="GPU busy (kernel sum)",
    )
    ax.barh(
        [i + 0.2 for i in y],
        [r.cpu_us if r.cpu_us is not None else nan for r in rows],
        0.4,
        label="CPU (annotated region)",
    )
    times = [t for r in rows for t in (r.gpu_us, r.cpu_us) if t]
    if times and max(times) / min(times) > 100:
        ax.set_xscale("log")
    ax.set_yticks(list(y), [r.name for r in rows])
    ax.invert_yaxis()
    ax.set_xlabel("µs per step (median over profiled steps)")
    ax.legend(loc="lower left", bbox_to_anchor=(0, 1), ncol=2, frameon=False)  # above the bars
    fig.tight_layout()
    fig.savefig(path, dpi=120, bbox_inches="tight")  # keep the legend above the axes in the picture
    plt.close(fig)


def _check_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise SuiteError("--plot needs matplotlib: run `uv run --extra plot python -m common.summary ...`") from None


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """The command-line flags (one `error:` line and exit 2 on a bad one)."""
    parser = OneLineParser(__doc__, prog="python -m common.summary")
    parser.add_argument("paths", nargs="+", metavar="PATH", help="trace files (.json, .json.gz) or folders of them")
    parser.add_argument(
        "--baseline", help="the trace ratios are taken against: a path, script/tag, or tag (default: the first trace)"
    )
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables instead of plain text")
    parser.add_argument(
        "--plot",
        type=Path,
        metavar="FILE",
        help="also write a PNG bar chart of GPU and CPU time (needs matplotlib: uv run --extra plot ...)",
    )
    parser.add_argument("--peak-tflops", type=positive_float, help="the device's peak TFLOP/s for %% of peak")
    parser.add_argument("--peak-gbps", type=positive_float, help="the device's peak memory GB/s for %% of peak")
    parser.add_argument("--top", type=positive_int, default=5, help="kernels listed per trace (default: 5)")
    return parser.parse_args(argv)


@cli
def main(argv: list[str] | None = None) -> int:
    """Print the summary of the traces named on the command line; 0 on success, 2 on bad input."""
    args = parse_args(argv)
    try:
        if args.plot:
            _check_matplotlib()
        traces = [read_trace(p) for p in find_traces(args.paths)]
        baseline = pick_baseline(traces, args.baseline)
        if baseline not in traces:  # a baseline file outside PATH...: show it first
            traces.insert(0, baseline)
        rows = [summarize(t, args.peak_tflops, args.peak_gbps) for t in traces]
        with_ratios(rows, rows[traces.index(baseline)])
        print(render(traces, rows, baseline, args.top, args.markdown))
        if args.plot:
            plot(rows, args.plot)
            print(f"\nplot: {args.plot}")
    except BrokenPipeError:  # `... | head` closed stdout: stop quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    except ValueError as exc:  # a file that is not a trace
        raise SuiteError(str(exc)) from None
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
