"""The summary's --html report: one self-contained HTML file of figures (plotly) that opens offline, fetching nothing.

For each trace: the verdict, its levers and the saving it predicts at the top; every step's budget as stacked bars
with the median step marked; a timeline of the median step's window (the GPU streams with kernels coloured by
family, the idle gaps coloured by cause, the CPU's top-level ops under them); the roofline, each shaped op a point
under the device's compute and memory roofs; the top kernels and the collectives as tables sorted by a click on a
column. The ranks of one run stand side by side, under a comparison of their figures and the skew of their
collectives. plotly.js is inlined once in the page (as plotly's include_plotlyjs=True does), so nothing is fetched:
no CDN, no fonts. The figures are the diagnosis' (common.analysis.picture): nothing is measured again here."""

from __future__ import annotations

import html
import math
from pathlib import Path

from common.analysis.collectives import Skew, size, skews
from common.analysis.digest import Digest
from common.analysis.picture import CAUSES, PARTS, KernelRow, Picture, RoofPoint
from common.cli import SuiteError
from common.files import shown_path, write_whole
from common.reader.naming import short_name
from common.units import human_bytes, human_time

DASH = "—"
PART_COLOURS = {"compute": "#2ca02c", "copies": "#ff7f0e", "exposed communication": "#9467bd",
                "host wait": "#d62728", "queued": "#7f7f7f", "one-time": "#c49c94", "CPU span": "#1f77b4"}  # fmt: skip
CAUSE_COLOURS = {"data loading": "#8c564b", "the optimizer": "#e377c2", "CPU op": "#bcbd22", "launches": "#d62728",
                 "no recorded op": "#ff9896", "compiling": "#17becf", "one-time": "#c49c94", "a sync": "#aec7e8",
                 "runtime call": "#7f7f7f", "kernel": "#c7c7c7", "other": "#9467bd"}  # fmt: skip
CPU_COLOUR = "#1f77b4"
STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.4em; }
h2 { font-size: 1.2em; border-top: 1px solid #ccc; padding-top: 0.8em; overflow-wrap: anywhere; }
h3 { font-size: 1em; margin-bottom: 0.2em; }
.verdict { background: #fff6e0; border-left: 5px solid #e0a000; padding: 0.6em 1em; }
.verdict .bound { font-size: 1.15em; font-weight: bold; margin: 0.2em 0; }
.verdict .lever { font-size: 1.05em; margin: 0.3em 0; }
.verdict .saving { font-weight: bold; margin: 0.3em 0; }
.meta, .note { color: #555; font-size: 0.9em; }
table { border-collapse: collapse; font-size: 0.85em; margin: 0.4em 0 1em; }
th, td { border: 1px solid #ddd; padding: 2px 6px; text-align: right; }
th { background: #f3f3f3; cursor: pointer; user-select: none; }
th[data-order="asc"]::after { content: " ▲"; } th[data-order="desc"]::after { content: " ▼"; }
td.text { text-align: left; max-width: 40em; overflow-wrap: anywhere; }
.side > section { min-width: 0; }
.side { display: grid; grid-auto-flow: column; grid-auto-columns: minmax(560px, 1fr); gap: 1.5em; overflow-x: auto; }
.figure { min-height: 200px; }
.scroll { max-height: 28em; overflow: auto; display: inline-block; }
"""
SORTER = """
document.addEventListener('click', function (e) {
  var th = e.target.closest('table.sortable th'); if (!th) return;
  var row = th.parentNode, i = Array.prototype.indexOf.call(row.children, th);
  var asc = th.dataset.order !== 'asc';
  row.querySelectorAll('th').forEach(function (h) { delete h.dataset.order; });
  th.dataset.order = asc ? 'asc' : 'desc';
  var body = th.closest('table').tBodies[0];
  var key = function (r) {
    var c = r.children[i]; return c.dataset.v !== undefined ? parseFloat(c.dataset.v) : c.textContent;
  };
  Array.prototype.slice.call(body.rows).sort(function (a, b) {
    var x = key(a), y = key(b);
    var d = (typeof x === 'number' && typeof y === 'number') ? x - y : String(x).localeCompare(String(y));
    return asc ? d : -d;
  }).forEach(function (r) { body.appendChild(r); });
});
"""


def check_html() -> None:
    """Before any work: plotly is there (the `html` extra), or one line saying what to install."""
    try:
        import plotly  # noqa: F401
    except ImportError:
        raise SuiteError(
            "--html needs plotly: run `uv run --extra html python -m common.summary ...` (or pip install plotly)"
        ) from None


def _esc(text: object) -> str:
    return html.escape(str(text))


def _num(value: float | None, digits: int = 3) -> str:
    if value is None or not math.isfinite(value):
        return DASH
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.0f}" if abs(value) >= 10**digits else f"{value:#.{digits}g}".rstrip(".")


class _Page:
    """The figures of a page, each a div plotly fills, numbered in order."""

    def __init__(self) -> None:
        self.count = 0

    def figure(self, fig, kind: str) -> str:
        self.count += 1
        div = fig.to_html(
            full_html=False,
            include_plotlyjs=False,
            div_id=f"fig{self.count}",
            config={"displaylogo": False, "responsive": True},
        )
        return f'<div class="figure {kind}">{div}</div>'


def _budget_figure(pic: Picture, page: _Page) -> str:
    import plotly.graph_objects as go

    if not pic.steps:
        return '<p class="note">No profiled steps: no budget to draw.</p>'
    x = [f"#{s.number}" for s in pic.steps]
    fig = go.Figure()
    parts = [p for p in (*PARTS, "CPU span") if any(s.parts.get(p) for s in pic.steps)]
    for part in parts:
        ys = [s.parts.get(part, 0.0) for s in pic.steps]
        fig.add_trace(go.Bar(x=x, y=ys, name=part, marker_color=PART_COLOURS[part],
                             hovertemplate=f"{part}: %{{y:.4g}} µs<extra>%{{x}}</extra>"))  # fmt: skip
    if pic.median is not None:
        top = max(s.span for s in pic.steps if s.number == pic.median)
        fig.add_annotation(x=f"#{pic.median}", y=top, text="median step", showarrow=True, arrowhead=2, ay=-30)
    windowed = any(s.window == "gpu" for s in pic.steps)
    fig.update_layout(
        barmode="stack",
        showlegend=True,
        height=340,
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        title="Budget of each step" + (" (GPU windows where the GPU ran behind the CPU)" if windowed else ""),
        yaxis_title="µs",
        xaxis_title="profiled step",
        legend={"orientation": "h", "y": -0.25},
    )
    return page.figure(fig, "budget")


def _lane_order(lane: str) -> tuple:
    if lane.startswith("GPU stream"):
        return (0, lane.removeprefix("GPU stream ").zfill(20))
    return (1, "") if lane == "GPU idle" else (2, "")


def _timeline_figure(pic: Picture, page: _Page) -> str:
    import plotly.colors
    import plotly.graph_objects as go

    if not pic.timeline:
        return '<p class="note">Nothing recorded in the median step\'s window to draw.</p>'
    lanes = sorted({s.lane for s in pic.timeline}, key=_lane_order)
    groups: dict[tuple[str, str], list] = {}
    for s in pic.timeline:
        kind = "gap" if s.lane == "GPU idle" else "cpu" if s.lane == "CPU ops" else "gpu"
        groups.setdefault((kind, s.group), []).append(s)
    families = sorted(g for k, g in groups if k == "gpu")
    taken = {c.lower() for c in (*CAUSE_COLOURS.values(), CPU_COLOUR)}  # a family never wears a gap's or the CPU's
    qualitative = plotly.colors.qualitative
    palette = [c for c in qualitative.D3 + qualitative.Bold + qualitative.Set3 if c.lower() not in taken]
    colour = {f: palette[i % len(palette)] for i, f in enumerate(families)}
    fig = go.Figure()
    for (kind, group), slices in sorted(groups.items(), key=lambda kv: ("gpu", "gap", "cpu").index(kv[0][0])):
        name = {"gpu": group, "gap": CAUSES.get(group, group), "cpu": "CPU top-level op"}[kind]
        shade = {"gpu": colour.get(group), "gap": CAUSE_COLOURS.get(group), "cpu": CPU_COLOUR}[kind]
        fig.add_trace(
            go.Bar(
                orientation="h",
                y=[s.lane for s in slices],
                x=[s.dur for s in slices],
                base=[s.start for s in slices],
                name=_esc(name),
                marker={"color": shade, "pattern": {"shape": "/" if kind == "gap" else ""}},
                hovertext=[f"{_esc(s.name[:200])}<br>{human_time(s.dur)} at +{human_time(s.start)}" for s in slices],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        barmode="overlay",
        showlegend=True,
        height=160 + 46 * len(lanes),
        margin={"l": 110, "r": 20, "t": 40, "b": 40},
        title=f"Timeline of the median step (#{pic.median}), from its window's start",
        xaxis={"ticksuffix": " µs"},  # the unit on the ticks: an axis title under them would sit under the legend
        yaxis={"categoryorder": "array", "categoryarray": lanes[::-1]},
        legend={"orientation": "h", "y": -0.3},
    )
    note = f'<p class="note">{pic.left_out} more slices of this window are not drawn.</p>' if pic.left_out else ""
    return page.figure(fig, "timeline") + note


def _hover(p: RoofPoint) -> str:
    gflop = p.flops / 1e9 if p.flops is not None else None
    moved = human_bytes(p.bytes) if p.bytes is not None else DASH
    return "<br>".join([
        f"<b>{_esc(p.op)}</b>  shapes {_esc(p.shape)}",
        f"kernel {_esc(p.kernel[:80])}",
        f"{_num(gflop)} GFLOP and {moved} per call, {_num(p.calls)} calls/step, {_num(p.us)} µs/step",
        f"{_num(p.intensity)} FLOP/B, {_num(p.tflops)} TFLOP/s, {_num(p.pct_roof)}% of roof ({p.bound or DASH}-bound)",
    ])  # fmt: skip


def _roofline_figure(pic: Picture, page: _Page) -> str:
    import plotly.graph_objects as go

    points = [p for p in pic.roofline if p.intensity and p.tflops and p.intensity > 0 and p.tflops > 0]
    if not points:
        why = "no op has record_shapes figures" if not pic.roofline else "no shaped op has both FLOPs and bytes"
        return f'<p class="note">No roofline: {why}.</p>'
    fig = go.Figure()
    xs = [p.intensity for p in points]
    low, high = min(xs) / 10, max(xs) * 10
    for peak, gbps in sorted({(p.peak_tflops, p.peak_gbps) for p in points if p.peak_tflops and p.peak_gbps}):
        ridge = 1e3 * peak / gbps
        rx = [low, ridge, max(high, ridge * 10)] if low < ridge else [low, high]
        ry = [min(peak, gbps * x / 1e3) for x in rx]
        fig.add_trace(go.Scatter(x=rx, y=ry, mode="lines", line={"dash": "dash"},
                                 name=f"roof: {_num(peak)} TFLOP/s, {_num(gbps)} GB/s"))  # fmt: skip
    for bound in sorted({p.bound or DASH for p in points}):
        mine = [p for p in points if (p.bound or DASH) == bound]
        fig.add_trace(
            go.Scatter(
                x=[p.intensity for p in mine],
                y=[p.tflops for p in mine],
                mode="markers",
                marker={"size": 10},
                name=f"ops ({bound}-bound)" if bound != DASH else "ops (no roof)",
                hovertext=[_hover(p) for p in mine],
                hoverinfo="text",
            )
        )
    fig.update_layout(
        height=420,
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        title="Roofline of the shaped ops (per call, from record_shapes)",
        xaxis={"type": "log", "title": "arithmetic intensity (FLOP/B)"},
        yaxis={"type": "log", "title": "achieved TFLOP/s"},
        legend={"orientation": "h", "y": -0.2},
    )
    return page.figure(fig, "roofline")


def _table(headers: list[str], rows: list[list[tuple]], text: set[str]) -> str:
    """A sortable table in a scrolled box: each cell (shown text, its number for sorting or None for a text cell,
    and optionally its full text, shown on hover)."""
    head = "".join(f"<th>{_esc(h)}</th>" for h in headers)
    body = []
    for row in rows:
        cells = []
        for h, (shown, value, *full) in zip(headers, row, strict=True):
            sort = "" if value is None else f' data-v="{value if math.isfinite(value) else "-Infinity"}"'
            title = f' title="{_esc(full[0])}"' if full and full[0] != shown else ""
            cells.append(f"<td{' class=text' if h in text else ''}{sort}{title}>{_esc(shown)}</td>")
        body.append(f"<tr>{''.join(cells)}</tr>")
    table = f'<table class="sortable"><thead><tr>{head}</tr></thead><tbody>{"".join(body)}</tbody></table>'
    return f'<div class="scroll">{table}</div>'


def _cell(value: float | None, digits: int = 3) -> tuple[str, float]:
    return _num(value, digits), value if value is not None else -math.inf


def _kernel_table(kernels: list[KernelRow]) -> str:
    headers = ["kernel", "family", "µs/step", "calls/step", "% sum", "TFLOP/s", "%peak"]
    rows = [
        [
            (short_name(k.name, 100), None, k.name),
            (k.family, None),
            _cell(k.us_per_step),
            _cell(k.calls_per_step),
            _cell(k.share),
            _cell(k.tflops),
            _cell(k.pct_peak),
        ]  # fmt: skip
        for k in kernels
    ]
    return _table(headers, rows, {"kernel", "family"})


def _collective_table(pic: Picture) -> str:
    headers = ["kind", "group", "n", "dtype", "size", "calls/step", "mean µs", "on", "algbw GB/s", "busbw GB/s"]
    rows = [
        [
            (c.kind, None),
            (c.group or DASH, None),
            _cell(c.group_size),
            (c.dtype or DASH, None),
            (size(c.bytes), c.bytes if c.bytes is not None else -math.inf),
            _cell(c.calls_per_step),
            _cell(c.mean_us),
            (c.on or DASH, None),
            _cell(c.algbw_gbps),
            _cell(c.busbw_gbps),
        ]  # fmt: skip
        for c in pic.collectives
    ]
    return _table(headers, rows, {"kind", "group", "dtype", "on"})


def _verdict(pic: Picture) -> str:
    levers = "".join(f'<p class="lever">lever: {_esc(lever)}</p>' for lever in pic.levers)
    if pic.levers:
        said = "; ".join(pic.savings) or f"{DASH} (the verdict predicts none for this lever)"
        levers += f'<p class="saving">predicted saving: {_esc(said)}</p>'
    rules = "".join(
        f"<li><b>{_esc(name)}</b> → {_esc(fix)}<ul>{''.join(f'<li>{_esc(e)}</li>' for e in evidence)}</ul></li>"
        for name, fix, evidence in pic.rules
    )
    return (
        f'<div class="verdict"><p class="bound">bound: {_esc(pic.bound)}</p>'
        f'<p class="verdict-text">verdict: {_esc(pic.verdict)}</p>{levers}'
        + (f'<p class="meta">{_esc(pic.budget_line)}</p>' if pic.budget_line else "")
        + (f"<details><summary>{len(pic.rules)} rule(s) fired</summary><ul>{rules}</ul></details>" if rules else "")
        + "</div>"
    )


def _section(trace: Digest, page: _Page, anchor: str) -> str:
    pic = trace.picture
    assert pic is not None
    parts = [
        f'<section id="{anchor}"><h2>{_esc(trace.name)}</h2>',
        f'<p class="meta">{_esc(shown_path(trace.path))} · {_esc(pic.device or "no GPU named")} · '
        f"{trace.steps} profiled step(s)</p>",
        _verdict(pic),
        _budget_figure(pic, page),
        _timeline_figure(pic, page),
    ]
    if trace.has_gpu:
        parts.append(_roofline_figure(pic, page))
    if pic.kernels:
        parts += [f"<h3>Top {len(pic.kernels)} GPU work (per step, over {trace.steps} steps)</h3>"]
        parts.append(_kernel_table(pic.kernels))
    elif not trace.has_gpu:
        parts.append('<p class="note">No GPU lane (a CPU run): no kernels, no roofline.</p>')
    if pic.collectives:
        parts += ["<h3>Collectives (per step)</h3>", _collective_table(pic)]
    parts += [f'<p class="note">note: {_esc(n)}</p>' for n in trace.notes]
    return "".join(parts) + "</section>"


def _skew_table(found: list[Skew]) -> str:
    headers = ["group", "kind", "calls", "arrival spread µs", "max µs", "duration spread µs", "straggler", "last in"]
    rows = [
        [
            (s.group or DASH, None),
            (s.kind, None),
            _cell(s.calls),
            _cell(s.arrival_spread_us),
            _cell(s.max_spread_us),
            _cell(s.duration_spread_us),
            _cell(s.straggler),
            _cell(s.last_in),
        ]  # fmt: skip
        for s in found
    ]
    return _table(headers, rows, {"group", "kind"})


def _ranks(run: str, members: list[Digest], page: _Page, anchors: dict[int, str]) -> str:
    import plotly.graph_objects as go

    fig = go.Figure()
    labels = [f"rank {t.rank}" for t in members]
    figures = ("GPU busy", "compute Σ", "communication Σ", "exposed communication", "CPU")
    for i, name in enumerate(figures):
        values = [t.ranked[i] if len(t.ranked) > i else None for t in members]
        if any(v is not None for v in values):
            fig.add_trace(go.Bar(x=labels, y=values, name=name, hovertemplate=f"{name}: %{{y:.4g}} µs<extra></extra>"))
    fig.update_layout(barmode="group", height=320, showlegend=True, title=f"Ranks of {run} (per step, medians)",
                      yaxis_title="µs", margin={"l": 60, "r": 20, "t": 40, "b": 40})  # fmt: skip
    found = skews({t.rank: t.arrivals for t in members if t.arrivals})
    skew = ("<h3>Collective skew across the ranks</h3>" + _skew_table(found)) if found else ""
    side = "".join(_section(t, page, anchors[id(t)]) for t in members)
    head = f"<section><h2>Ranks of {_esc(run)}</h2>{page.figure(fig, 'ranks')}{skew}"
    return f'{head}<div class="side">{side}</div></section>'


def report(traces: list[Digest], runs: list[tuple[str, list[Digest]]]) -> str:
    """The page: plotly.js inlined, the list of traces, each run's ranks side by side, then each other trace."""
    from plotly.offline import get_plotlyjs

    page = _Page()
    anchors = {id(t): f"trace{i}" for i, t in enumerate(traces)}
    ranked = {id(t) for _, members in runs if len(members) > 1 for t in members}
    body = [_ranks(run, members, page, anchors) for run, members in runs if len(members) > 1]
    body += [_section(t, page, anchors[id(t)]) for t in traces if id(t) not in ranked]
    listing = "".join(
        f'<li><a href="#{anchors[id(t)]}">{_esc(t.name)}</a>: {_esc(t.picture.verdict if t.picture else "")}</li>'
        for t in traces
    )
    title = f"Profile report of {len(traces)} trace(s)"
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{_esc(title)}</title>'
        f"<style>{STYLE}</style><script>{get_plotlyjs()}</script><script>{SORTER}</script></head>"
        f"<body><h1>{_esc(title)}</h1><ul>{listing}</ul>{''.join(body)}</body></html>"
    )


def write_report(traces: list[Digest], runs: list[tuple[str, list[Digest]]], path: Path) -> None:
    """Write the report of `traces` (each with its Picture) to `path`, whole or not at all."""
    write_whole(path, report(traces, runs).encode())
