"""Time the suite's trace reader against Holistic Trace Analysis (HTA) on one or more traces, side by side.

Setup (once; PyPI only):
    uv venv /tmp/hta-venv --python 3.11 && uv pip install --python /tmp/hta-venv HolisticTraceAnalysis
Usage (the orchestrator is stdlib only; run it with any python3 from the repository root):
    python3 benchmarks/make_trace.py --mb 10 --out /tmp/bench/trace_10mb.json
    python3 benchmarks/hta_compare.py /tmp/bench/trace_10mb.json [--timeout 600] [--only hta] [--exact]

Each measurement is a fresh subprocess, its wall time taken here and its peak RSS from os.wait4 (the largest
process of its tree, `uv` and the Python it starts included):
  hta      HTA_PYTHON runs this file's HTA worker: TraceAnalysis(trace_dir=<a temp folder holding only a link
           `rank-0.json` to the trace>, include_last_profiler_step=True), then sums the `kernel` rows of
           `t.get_trace(0)` per value of HTA's own `iteration` column (the ProfilerStep#N its CPU launch falls in).
  hta-ns   with --exact: the same with HTA_DISABLE_NS_ROUNDING=1 (HTA otherwise ceils ts and floors ts + dur to
           whole µs, which shortens every kernel by about 1 µs).
  summary  `uv run python -m common.summary TRACE` in SUITE_ROOT: what a user runs.
  reader   `uv run python` this file's suite worker in SUITE_ROOT: common.reader.build.read_trace(TRACE), then
           the sum of the durations of each Step's kernels.
Agreement: per-step kernel time (sum of kernel durations in a step) is compared step by step on the steps both
found; the table gives each side's median over steps and the largest per-step difference (within 1% passes).
Breakdown (a second table): HTA's temporal breakdown (idle, compute, non-compute as % of its window, the first GPU
op's start to the last one's end) and its idle-time breakdown (host wait, kernel wait, other: its per-stream idle
intervals summed, as % of the same window), against common.analysis.budget.budget over the same window (the GPU work
of every profiled step, edges=False); "Δ pp" is the largest difference in percentage points (within 1 passes). The
suite's per-step figures (what the summary prints) count the step's whole span, so they differ by design.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import subproc

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
TOLERANCE = 0.01


@dataclass
class Run:
    """One measured subprocess."""

    what: str
    wall_s: float
    peak_mib: float
    rc: int | None  # None: killed at the timeout
    steps: dict[int, float] = field(default_factory=dict)  # step number -> kernel µs (workers only)
    breakdown: dict[str, float] = field(default_factory=dict)  # idle, compute, ... -> share of the window
    note: str = ""


def measure(what: str, cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Run:
    """Run `cmd`, killing its process group after `timeout` s; wall time, peak RSS and a worker's JSON line."""
    got = subproc.measure(cmd, cwd, timeout, env)
    run = Run(what, got.wall_s, got.peak_mib, got.rc, note=got.why)
    result = next((json.loads(line) for line in reversed(got.out) if line.startswith('{"steps"')), None)
    if result:
        run.steps = {int(k): v for k, v in result["steps"].items()}
        run.breakdown = result.get("breakdown", {})
        run.note = run.note or f"load {result['load_s']:.1f} s"
    return run


def hta_worker(trace: Path) -> None:
    """(In the HTA venv) load `trace` with HTA and print {"steps": {iteration: kernel µs}, "load_s": s}."""
    from hta.trace_analysis import TraceAnalysis

    with tempfile.TemporaryDirectory() as folder:
        suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
        (Path(folder) / f"rank-0{suffix}").symlink_to(trace.resolve())
        start = time.perf_counter()
        analysis = TraceAnalysis(trace_dir=folder, include_last_profiler_step=True)
        load_s = time.perf_counter() - start
    df = analysis.t.get_trace(0)
    kernel = analysis.t.symbol_table.get_sym_id_map()["kernel"]
    kernels = df[(df["cat"] == kernel) & (df["iteration"] >= 0)]
    steps = {int(k): float(v) for k, v in kernels.groupby("iteration")["dur"].sum().items()}
    temporal = analysis.get_temporal_breakdown(visualize=False).iloc[0]
    window = float(temporal["kernel_time(us)"])
    idle, _ = analysis.get_idle_time_breakdown(visualize=False)
    waits = idle.groupby("idle_category")["idle_time"].sum()
    breakdown = {
        "idle": float(temporal["idle_time(us)"]) / window,
        "compute": float(temporal["compute_time(us)"]) / window,
        "non-compute": float(temporal["non_compute_time(us)"]) / window,
        "host wait": float(waits.get("host_wait", 0.0)) / window,  # HTA's IdleTimeType names, lower case
        "kernel wait": float(waits.get("kernel_wait", 0.0)) / window,
        "other wait": float(waits.get("other", 0.0)) / window,
    }
    print(json.dumps({"steps": steps, "load_s": load_s, "breakdown": breakdown}))


def suite_worker(trace: Path) -> None:
    """(In SUITE_ROOT's environment) read `trace` with common.reader.build; print the same JSON as hta_worker."""
    sys.path.insert(0, os.getcwd())
    from common.analysis.budget import budget
    from common.reader.build import read_trace

    start = time.perf_counter()
    steps = read_trace(trace).steps
    load_s = time.perf_counter() - start
    kernel_us = {s.number: sum(k.us for k in s.kernels) for s in steps}
    ops = sorted((op for s in steps for op in s.gpu), key=lambda op: op.start)
    b = budget(ops, ops[0].start, max(op.start + op.us for op in ops), edges=False)
    breakdown = {
        "idle": b.idle / b.span,
        "compute": b.compute / b.span,
        "non-compute": (b.non_compute + b.comm_exposed) / b.span,  # HTA's non-compute holds communication too
        "host wait": b.host_wait / b.span,
        "kernel wait": b.kernel_wait / b.span,
        "other wait": b.other_wait / b.span,
    }
    print(json.dumps({"steps": kernel_us, "load_s": load_s, "breakdown": breakdown}))


def agreement(hta: Run, suite: Run) -> tuple[str, str, str, str]:
    """(HTA median µs, suite median µs, largest per-step difference, verdict) over the steps both found."""
    common = sorted(hta.steps.keys() & suite.steps.keys())
    if not common:
        return "—", "—", "—", "no steps to compare"
    worst = max(abs(hta.steps[n] - suite.steps[n]) / suite.steps[n] for n in common)
    verdict = "yes" if worst <= TOLERANCE else "NO"
    if len(hta.steps) != len(suite.steps):
        verdict += f" (steps: HTA {len(hta.steps)}, suite {len(suite.steps)})"
    return (
        f"{statistics.median(hta.steps[n] for n in common):.1f}",
        f"{statistics.median(suite.steps[n] for n in common):.1f}",
        f"{worst:.2%}",
        verdict,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="+", type=Path, help="trace files (.json or .json.gz)")
    parser.add_argument("--timeout", type=float, default=600, help="seconds per measurement (default 600)")
    parser.add_argument("--only", choices=("hta", "suite"), help="measure one side only")
    parser.add_argument("--exact", action="store_true", help="also run HTA with HTA_DISABLE_NS_ROUNDING=1")
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python", help="a Python with HTA installed")
    parser.add_argument("--suite-root", type=Path, default=REPO, help="the checkout whose common/ is measured")
    parser.add_argument(
        "--suite-python", help="a Python with the suite's dependencies (default: `uv run python` in SUITE_ROOT)"
    )
    parser.add_argument("--worker", choices=("hta", "suite"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        (hta_worker if args.worker == "hta" else suite_worker)(args.traces[0])
        return

    root: Path = args.suite_root.resolve()
    suite_python = [args.suite_python] if args.suite_python else ["uv", "run", "python"]
    breakdowns: list[str] = []
    header = (
        "| trace | MB | run | wall s | peak MiB | steps | kernel µs/step HTA | suite | max step Δ | within 1% | note |"
    )
    print(header + "\n|" + "---|" * header.count(" | ") + "---|", flush=True)
    for trace in (t.resolve() for t in args.traces):
        runs: list[Run] = []
        if args.only != "suite":
            runs.append(measure("hta", [args.hta_python, str(HERE), "--worker", "hta", str(trace)], root, args.timeout))
            if args.exact:
                env = dict(os.environ, HTA_DISABLE_NS_ROUNDING="1")
                runs.append(
                    measure(
                        "hta-ns", [args.hta_python, str(HERE), "--worker", "hta", str(trace)], root, args.timeout, env
                    )
                )
        if args.only != "hta":
            runs.append(measure("summary", [*suite_python, "-m", "common.summary", str(trace)], root, args.timeout))
            runs.append(
                measure("reader", [*suite_python, str(HERE), "--worker", "suite", str(trace)], root, args.timeout)
            )
        reader = next((r for r in runs if r.what == "reader"), None)
        breakdowns += breakdown_rows(trace, runs, reader)
        size = f"{trace.stat().st_size / 1e6:.0f}"
        for run in runs:
            cells = ["", "", "", ""]
            if run.what.startswith("hta") and reader:
                cells = list(agreement(run, reader))
            steps = str(len(run.steps)) if run.steps else "—"
            print(
                f"| {trace.name} | {size} | {run.what} | {run.wall_s:.1f} | {run.peak_mib:.0f} | {steps} | "
                + " | ".join(cells)
                + f" | {run.note} |",
                flush=True,
            )
    if breakdowns:
        header = "| trace | run | " + " | ".join(f"{k} %" for k in BREAKDOWN) + " | Δ pp (within 1) |"
        print("\n" + header + "\n|" + "---|" * (len(BREAKDOWN) + 3))
        print("\n".join(breakdowns))


BREAKDOWN = ("idle", "compute", "non-compute", "host wait", "kernel wait", "other wait")


def breakdown_rows(trace: Path, runs: list[Run], reader: Run | None) -> list[str]:
    """The breakdown table's rows for one trace: each HTA run's shares and the reader's, in %, and the largest
    difference in percentage points."""
    if reader is None or not reader.breakdown:
        return []
    rows = [f"| {trace.name} | reader | " + " | ".join(f"{100 * reader.breakdown[k]:.2f}" for k in BREAKDOWN) + " | |"]
    for run in (r for r in runs if r.what.startswith("hta") and r.breakdown):
        worst = max(abs(run.breakdown[k] - reader.breakdown[k]) for k in BREAKDOWN) * 100
        cells = " | ".join(f"{100 * run.breakdown[k]:.2f}" for k in BREAKDOWN)
        rows.append(f"| {trace.name} | {run.what} | {cells} | {worst:.2f} ({'yes' if worst <= 1 else 'NO'}) |")
    return rows


if __name__ == "__main__":
    main()
