"""Turn trace figures into the printed tables: plain text or Markdown, a row per step or per kernel.

No torch: the summary uses it, and so does a run's report. A figure the trace cannot give is shown
as DASH, never as zero.
"""

from __future__ import annotations

import math

from common.cli import WIDTH, shown
from common.reader.model import GpuOp, Trace
from common.reader.occupancy import SmLimits
from common.units import human_time

DASH = "—"
TEXT_WIDTH = WIDTH  # plain-text tables fit a terminal this wide
STEP_ROWS_SHOWN = 20  # per-step tables show this many rows unless asked for all


def num(value: float | None, digits: int = 3) -> str:
    """`value` with `digits` significant digits (whole numbers from 10**digits up), or the dash if missing."""
    if value is None:
        return DASH
    if not math.isfinite(value):
        return DASH if math.isnan(value) else "∞" if value > 0 else "−∞"
    if abs(value) >= 1e15:  # no 16-digit column: a figure this large is shown with its exponent
        return f"{value:.{digits}g}"
    return f"{value:.{digits}g}" if abs(value) < 10**digits else f"{value:.0f}"


def column(values: list[float | None], digits: int = 4) -> list[str]:
    """A column of figures at one precision: the decimals that give its largest value `digits` significant
    digits (none from 10**(digits - 1) up), for every value; the dash where one is missing. `52.0` beside `51.43`
    reads `52.00`, and beside `9844` both read whole."""
    finite = [abs(v) for v in values if v is not None and math.isfinite(v)]
    if not finite:
        return [num(v, digits) for v in values]
    largest = max(finite)
    whole = len(f"{largest:.0f}") if largest >= 1 else 1
    decimals = max(0, digits - whole)
    if largest >= 1e15:
        return [num(v, digits) for v in values]
    return [num(v) if v is None or not math.isfinite(v) else f"{v:.{decimals}f}" for v in values]


def printable(text: str, newlines: bool = True) -> str:
    """`text` with every control character (ESC, BEL, C1, DEL, bidi overrides, a lone surrogate from a trace's
    names) as its backslash escape, so a trace's names cannot drive the terminal; line breaks are kept unless
    `newlines` is False (a table cell, a name: one line)."""
    return shown(text, newlines)


def _markdown_cell(text: str) -> str:
    """A Markdown table cell showing `text` as it is: controls escaped, and `\\`, `|` and backticks too, so a
    name can neither end its cell nor open a code span."""
    text = printable(text, newlines=False).replace("\\", "\\\\")
    return text.replace("|", "\\|").replace("`", "\\`")


def text_table(headers: list[str], cells: list[list[str]], left: set[str]) -> str:
    """An aligned plain-text table: the `left` columns left-aligned, the others (numbers) right-aligned; a cell's
    control characters (a line break too) are shown as escapes."""
    headers = [printable(h, newlines=False) for h in headers]
    cells = [[printable(c, newlines=False) for c in row] for row in cells]
    widths = [max(len(h), *(len(c[i]) for c in cells)) for i, h in enumerate(headers)]
    align_left = [h in left for h in headers]

    def line(row: list[str]) -> str:
        pairs = zip(row, widths, align_left, strict=True)
        return "  ".join(c.ljust(w) if is_left else c.rjust(w) for c, w, is_left in pairs).rstrip()

    return "\n".join([line(headers), "  ".join("-" * w for w in widths), *map(line, cells)])


def markdown_table(headers: list[str], cells: list[list[str]], left: set[str]) -> str:
    """A GitHub-flavoured Markdown table (the `left` columns left-aligned, numbers right-aligned)."""
    align = ["---" if h in left else "---:" for h in headers]
    rows = [headers, align, *cells]
    return "\n".join("| " + " | ".join(map(_markdown_cell, r)) + " |" for r in rows)


def table(headers: list[str], cells: list[list[str]], left: set[str], markdown: bool = False) -> str:
    return (markdown_table if markdown else text_table)(headers, cells, left)


def room_for(headers: list[str], cells: list[list[str]], column: int, width: int = TEXT_WIDTH) -> int:
    """How many characters `column` may take for the text table of `cells` to fit `width` (at least 20)."""
    others = sum(max(len(h), *(len(c[i]) for c in cells)) + 2 for i, h in enumerate(headers) if i != column)
    return max(width - others, 20)


def fit_last_column(headers: list[str], cells: list[list[str]], cut=None) -> list[list[str]]:
    """`cells` with the last column cut (ending in …) to what is left of TEXT_WIDTH by the others (measured as
    printed: control characters escaped); `cut(text, room)` does the cutting where given (a kernel name's)."""
    cells = [[printable(c, newlines=False) for c in row] for row in cells]
    room = room_for(headers, cells, len(headers) - 1)
    if cut is not None:
        return [[*row[:-1], cut(row[-1], room)] for row in cells]
    return [[*row[:-1], row[-1] if len(row[-1]) <= room else row[-1][: room - 1] + "…"] for row in cells]


def _dims(dims: tuple[int, ...] | None) -> str:
    if dims is None:
        return DASH
    while len(dims) > 1 and dims[-1] == 1:
        dims = dims[:-1]
    return "×".join(map(str, dims))


def launch_cells(op: GpuOp, sm: SmLimits | None = None) -> list[str]:
    """grid, block, registers per thread, shared memory per block, the profiler's estimated achieved occupancy
    (the figures Perfetto's kernel panel shows), and the theoretical occupancy on a GPU of limits `sm`; DASH
    where there is none (memcpy, memset), and for the 0% the profiler writes where it could not estimate."""
    smem = DASH if op.shared_bytes is None else f"{op.shared_bytes / 1024:.3g} KB"
    occupancy = DASH if not op.occupancy_pct else f"{op.occupancy_pct:.0f}%"
    theoretical = op.theoretical_occupancy(sm)
    regs = DASH if op.registers is None else str(op.registers)
    return [
        _dims(op.grid),
        _dims(op.block),
        regs,
        smem,
        occupancy,
        DASH if theoretical is None else f"{theoretical:.3g}%",
    ]


LAUNCH_HEADERS = ["grid", "block", "regs", "smem", "occ", "theo"]
LAUNCH_LEGEND = (
    "regs = registers per thread, smem = shared memory per block, occ = the profiler's estimated achieved "
    "occupancy (— where it has none), theo = theoretical occupancy from the launch and the device's limits"
)


def _calls(counts: dict[str, int], limit: int = 3) -> str:
    if not counts:
        return ""
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    text = ", ".join(f"{name} {n}" for name, n in ranked[:limit])
    return text + (f", +{len(ranked) - limit} more" if len(ranked) > limit else "")


def _share(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}" if whole > 0 else DASH


BUDGET_HEADERS = ["span µs", "idle%", "host%", "wait%", "copy%", "comm%"]
BUDGET_LEGEND = (
    "span = the step's ProfilerStep span; idle% = GPU idle share of it, host% the part waiting for the host to "
    "launch, wait% the part with work queued but waiting (HTA's kernel and other wait); copy% = memcpy/memset "
    "not under a kernel; comm% = communication no compute hides (copy% and comm% where a step has any)"
)


def step_table(trace: Trace, every: bool = False, markdown: bool = False, budgets: list | None = None) -> str:
    """One row per profiled step: CPU time (Trace.cpu_source), GPU busy time (the union over streams; with
    several streams, also how long two or more were busy at once), kernels, launches, memcpy/memset, the step's
    time budget where `budgets` (common.analysis.diagnosis, one per step) are given, and the runtime calls the step
    makes beyond a typical step. Without `every`, long traces show their first STEP_ROWS_SHOWN steps and a line about
    the rest."""
    gpu = trace.has_gpu
    ran = gpu and trace.gpu_activity  # launches without GPU events: no figure of the GPU's own, never a zero
    budgets = budgets if ran and budgets else None
    streams = gpu and any(len(s.streams) > 1 for s in trace.steps)  # then: how long two or more were busy at once
    shown = [h for h in BUDGET_HEADERS if budgets and _budget_shown(h, budgets)]
    headers = ["step", "CPU µs", "GPU µs", *(["overlap µs"] if streams else []), "kernels", "launches", "memcpy",
               "memset", *shown, "extra runtime calls"]  # fmt: skip
    steps = trace.steps if every else trace.steps[:STEP_ROWS_SHOWN]
    cpu = column([s.region_us for s in steps])  # each column of times at one precision
    busy = column([s.gpu_busy_us for s in steps]) if ran else [DASH] * len(steps)
    overlap = column([s.stream_overlap_us for s in steps])
    spans = column([b.span for b in budgets[: len(steps)]]) if budgets else []
    cells = [
        [
            f"#{s.number}",
            cpu[i],
            busy[i],
            *([overlap[i]] if streams else []),
            str(len(s.kernels)) if ran else DASH,
            str(s.launches) if gpu else DASH,
            str(len(s.memcpy)) if ran else DASH,
            str(len(s.memset)) if ran else DASH,
            *(_budget_cells(budgets[i], spans[i], shown) if budgets else []),
            _calls(trace.extra_calls(s)) if gpu else DASH,
        ]
        for i, s in enumerate(steps)
    ]
    if not markdown:  # the calls column takes what is left of TEXT_WIDTH
        cells = fit_last_column(headers, cells)
    out = table(headers, cells, {"step", "extra runtime calls"}, markdown)
    if len(steps) < len(trace.steps):
        out += f"\n… {len(trace.steps) - len(steps)} more steps (--per-step shows every one)"
    return out


def _budget_shown(header: str, budgets: list) -> bool:
    """copy% and comm% only where some step has copies or communication."""
    if header == "copy%":
        return any(b.non_compute for b in budgets)
    if header == "comm%":
        return any(b.comm for b in budgets)
    return True


def _budget_cells(b, span: str, shown: list[str]) -> list[str]:
    """A step's budget (common.analysis.budget.Budget) as the cells of the `shown` BUDGET_HEADERS, its `span`
    given as its column prints it."""
    waits = b.kernel_wait + b.other_wait
    cells = [span, _share(b.idle, b.span), _share(b.host_wait, b.span), _share(waits, b.span),
             _share(b.non_compute, b.span), _share(b.comm_exposed, b.span)]  # fmt: skip
    return [cell for header, cell in zip(BUDGET_HEADERS, cells, strict=True) if header in shown]


def phase_table(trace: Trace, markdown: bool = False) -> str:
    """One row per phase of `trace` (the labels inside its step label), medians over the steps: CPU time of the
    phase's span, GPU busy time of the work launched inside it, kernels, launches (kernel + graph launches)."""
    headers = ["phase", "CPU", "GPU busy", "kernels", "launches", "graph launches"]
    gpu = trace.has_gpu
    ran = gpu and trace.gpu_activity
    cells = []
    for name in trace.phases:

        def median(value, name=name):
            return trace.per_step(lambda s: value(s.phase(name)))

        cells.append([
            name,
            human_time(median(lambda p: p.cpu_us)),
            human_time(median(lambda p: p.gpu_busy_us)) if ran else DASH,
            num(median(lambda p: p.kernels)) if ran else DASH,
            num(median(lambda p: p.launches)) if gpu else DASH,
            num(median(lambda p: p.graph_launches)) if gpu else DASH,
        ])  # fmt: skip
    return table(headers, cells, {"phase"}, markdown)
