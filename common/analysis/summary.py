"""Summarise exported traces as the posts' tables: one row per trace, ratios to a baseline, top kernels.

Usage:
    uv run python -m common.summary traces/01_matmul_add
    uv run python -m common.summary traces/04_a_naive_attention traces/04_c_sdpa_attention
    uv run python -m common.summary traces --markdown --top 3
    uv run python -m common.summary traces/01_matmul_add --per-step     # one row per profiled step
    uv run --extra plot python -m common.summary traces --plot traces/summary.png
    uv run python -m common.summary traces/01_matmul_add/64_bf16_cold_eager.json --annotate traces/annotated.json
    uv run --extra html python -m common.summary traces --html traces/report.html

PATH is a trace (.json or .json.gz) or a folder searched for them; a path that does not exist or a folder
without traces is skipped with a notice (no traces at all is an error). A file that cannot be read as a trace
gets one `notice:` line naming it and why, and every other trace is summarised; the exit status is 2 only when
none could be read. Several traces are read in parallel, a process per usable core, with the same output. A
trace without profiler steps (a bare `with profile()`) is split into iterations where its top-level labels
repeat (torch's own `Optimizer.step#…` among them), else summarised as one window; a note says which. One
event (or run of whitespace) larger than 64 MiB makes a file unreadable, naming the byte where it starts:
memory stays bounded whatever a file holds. The baseline of the ×base ratios is, unless --baseline names
another, the slowest trace (the most GPU time per step, or CPU time where no trace has a GPU lane), so every
ratio reads as a fraction of it. The table fits 120 columns; --wide shows every column. "Per step" is the
median over the trace's profiler steps (ProfilerStep#N). GPU time is GPU busy time: the time at least one
stream runs a kernel, memcpy or memset (the union of their intervals over every stream), not wall time. CPU
time is the span of the script's record_function label on the suite's own traces, of the label --region names,
or else of the ProfilerStep#N (the whole profiled window in a trace without steps); the header says which.
TFLOP/s and GB/s divide the FLOPs and bytes the script recorded by the GPU time; on a CPU-only trace by the
CPU time (--wide shows GB/s, and says which time in its column "on"), and % of peak is left out there: there
is no CPU peak to compare with. "—" marks a figure the trace cannot give, never a zero. Under the table, each
trace's verdict (common.analysis.diagnosis): what bounds its steps, with its figures and what to try, the
median step's time budget (GPU busy: compute, memcpy/memset, exposed communication; GPU idle: waiting for the
host, or kernels waiting), and the expert rules that fired; --explain adds each rule's evidence. The per-step
table shows each step's budget; the top-kernels table, where the trace has record_shapes, the TFLOP/s and % of
peak of each GEMM and attention kernel, from its op's input shapes. A trace with collectives gets a table of
them (kind, group, size, calls per step, mean duration, algorithm and bus bandwidth), and a run of rank traces
the skew of its collectives across the ranks and the straggler (common.analysis.collectives). --annotate OUT writes
a copy of the trace with a "diagnosis" track for Perfetto: the step windows, each GPU idle gap named by its cause,
and an arrow from each gap to the CPU op that held it (common.analysis.annotate); for several traces OUT is a
folder, one copy each. --html FILE writes one self-contained page that opens offline (plotly, inlined: the `html`
extra) with each trace's verdict and levers, its steps' budgets, the median step's timeline, its roofline and its
kernels and collectives as sortable tables, the ranks of a run side by side (common.analysis.html_report).
"""

from __future__ import annotations

import argparse
import io
import os
import re
import textwrap
from collections import Counter
from pathlib import Path

from common import interrupts
from common.analysis.collectives import COLLECTIVE_LEGEND, SKEW_LEGEND, skew_table, skews, straggler_lines
from common.analysis.digest import LEFT, Digest, digest
from common.analysis.figures import CALLS, LAUNCH_COLUMNS, Row, launch_line, with_ratios
from common.analysis.folders import find_traces, read_all
from common.analysis.names import fitted_names
from common.analysis.roofline_table import LEGEND as ROOF_LEGEND
from common.analysis.tables import (
    BUDGET_LEGEND,
    DASH,
    LAUNCH_LEGEND,
    TEXT_WIDTH,
    num,
    printable,
    room_for,
    table,
)
from common.cli import REGION_HELP, OneLineParser, SuiteError, cli, positive_float, positive_int, shown
from common.files import shown_path, write_whole
from common.reader.build import read_trace
from common.reader.model import CPU_SOURCES
from common.units import human_bytes, human_time


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
            lines.append(f"note: {row.name}: {rank_words(trace.distributed)}")
    return lines


def rank_words(info: dict) -> str:
    """A trace's place in its run, from its distributedInfo, saying only what it records: "rank 0 of 2 (nccl)", "rank
    0" where the world size and backend are not in it, never "rank 0 of ? (?)"."""
    rank, world, backend = (info.get(key) for key in ("rank", "world_size", "backend"))
    said = f"rank {shown(str(rank))}" if rank is not None else "a rank of a distributed run (its rank not recorded)"
    if world is not None:
        said += f" of {shown(str(world))}"
    return said + (f" ({shown(str(backend))})" if backend else "")


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
        size = f"{world} ranks" if world != "None" else "world size not recorded"
        if len({t.rank for t in members}) == len(members):
            runs.append((f"{folder.name} ({size})", members))
            continue
        split: dict[str, list[Digest]] = {}
        for trace in members:
            stem = trace.path.name.removesuffix(".gz").removesuffix(".json")
            split.setdefault(RANK_WORD.sub("", stem), []).append(trace)
        runs += [(f"{folder.name}/{stem} ({size})", group) for stem, group in split.items()]
    return [(name, sorted(group, key=lambda t: t.rank)) for name, group in runs]


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
        "write, the FLOPs of its GEMM, attention and convolution ops from record_shapes, with no %peak); %peak only "
        "on a known GPU "
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
    for trace in (t for t in traces if t.roofs):
        out += ["", heading(f"Ops of {trace.name} furthest below their roof (per step)"), *gap, trace.roofs]
    if any(t.roofs for t in traces):
        out += ["", *([ROOF_LEGEND] if args.markdown else textwrap.wrap(ROOF_LEGEND, TEXT_WIDTH))]
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
    return check_out_path("--plot", path, "summary.png")


def check_out_path(flag: str, path: Path, example: str) -> Path:
    """Before any work: `path` is a file name (not a folder, a device or a pipe) in a folder that can be written."""
    if path.is_dir():
        raise SuiteError(f"{flag} {path}: is a folder; give a file name such as {path / example}")
    if path.exists() and not path.is_file():
        raise SuiteError(f"{flag} {path}: not a regular file (a device or a pipe); give a file name")
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir() or not os.access(folder, os.W_OK):
        raise SuiteError(f"{flag} {path}: cannot write into {folder}")
    return path


def check_annotate_path(out: Path, count: int) -> Path:
    """Before any work: where --annotate OUT can write `count` annotated traces: OUT a file name for one trace (or an
    existing folder), a folder (made here if missing) for several."""
    if count == 1 and not out.is_dir():
        return check_out_path("--annotate", out, "annotated.json")
    if out.exists() and not out.is_dir():
        raise SuiteError(f"--annotate {out}: {count} traces need a folder, and this is a file")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SuiteError(f"--annotate {out}: cannot make this folder ({exc.strerror or exc})") from None
    if not os.access(out, os.W_OK):
        raise SuiteError(f"--annotate {out}: cannot write into this folder")
    return out


def annotated_paths(traces: list[Digest], out: Path) -> list[Path]:
    """Where --annotate OUT writes each trace's annotated copy: OUT itself, a file, for one trace; else into the
    folder OUT, as `<script>_<tag>.json` (the trace's name, made a file name; a number added where two are alike)."""
    if not out.is_dir():
        return [out]
    names: Counter = Counter()
    paths = []
    for trace in traces:
        stem = re.sub(r"[^\w.+-]+", "_", trace.name).strip("_") or "trace"
        names[stem] += 1
        paths.append(out / (f"{stem}.json" if names[stem] == 1 else f"{stem}_{names[stem]}.json"))
    return paths


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
        "--html",
        type=Path,
        metavar="FILE",
        help="also write a self-contained HTML report with figures (default: none; needs plotly: uv run --extra html)",
    )
    parser.add_argument(
        "--annotate",
        type=Path,
        metavar="OUT",
        help="also write a copy of the trace with a 'diagnosis' track for Perfetto (a folder OUT for several traces)",
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
        if args.html:
            from common.analysis.html_report import check_html  # only for --html: not loaded for a plain summary

            check_html()
            check_out_path("--html", args.html, "report.html")
        paths = find_traces(args.paths)
        if args.annotate:
            check_annotate_path(args.annotate, len(paths))
        traces = read = read_all(paths, args)
        baseline = pick_baseline(traces, args.baseline, args)
        if baseline not in traces:  # a baseline file outside PATH...: show it first
            traces = [baseline, *read]
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
    if args.annotate:  # the traces PATH names (a --baseline file from elsewhere is not one of them)
        from common.analysis.annotate import write_annotated  # only for --annotate, as html_report for --html

        print()
        for trace, out in zip(read, annotated_paths(read, args.annotate), strict=True):
            write_annotated(trace.path, trace.picture, out)
            print(f"annotated: {shown(str(out.resolve()))}")
    if args.html:
        from common.analysis.html_report import write_report

        write_report(traces, runs_of(traces), args.html)
        print(f"\nhtml: {shown(str(args.html.resolve()))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
