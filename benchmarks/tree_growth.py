"""Time and memory of the summary on the two inputs issue 45 found growing faster than their size: many CPU steps
(the CPU verdict re-read the file once per step) and many record_function labels (phases nested per step).

Usage (from the repository root):
    uv run python benchmarks/tree_growth.py [--before REV] [--steps 250 500 1000] [--labels 90090 180180 360360
        720720] [--timeout 600]

`cpu steps N`: a CPU-only trace (no GPU event, so the CPU verdict runs) of N ProfilerStep#k, each a forward of 24
aten::linear (aten::t, aten::addmm, aten::relu below each) inside a record_function label, about 20 KB a step (a
1,000-step trace is 20 MB). `labels N`: 8 steps holding N record_function labels between them, each label around
one aten::add, the labels nested 4 deep (phase > block > layer > op label). Each cell is `python -m
common.summary` in a fresh subprocess (benchmarks/subproc.py: wall time, CPU time and peak RSS), in this checkout
and, with --before, in the `common/` of commit REV (exported with git archive). A column of time per step (or per
1,000 labels) that stays flat as N doubles is linear.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from subproc import measure

REPO = Path(__file__).resolve().parent.parent


def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": {}}


def cpu_steps_trace(steps: int, layers: int = 24) -> dict:
    """`steps` CPU steps, each a label `forward` around `layers` aten::linear with their children."""
    events, t = [], 0.0
    for k in range(steps):
        step_start = t
        inner = [ev("user_annotation", "forward", t + 1, layers * 40 + 2)]
        for j in range(layers):
            s = t + 2 + j * 40
            inner += [ev("cpu_op", "aten::linear", s, 38), ev("cpu_op", "aten::t", s + 1, 3),
                      ev("cpu_op", "aten::transpose", s + 1.5, 1.5), ev("cpu_op", "aten::addmm", s + 5, 25),
                      ev("cpu_op", "aten::relu", s + 31, 6), ev("cpu_op", "aten::clamp_min", s + 32, 4)]  # fmt: skip
        t += layers * 40 + 10
        events.append(ev("user_annotation", f"ProfilerStep#{k + 1}", step_start, t - step_start))
        events += inner
    return {"traceEvents": events}


def labels_trace(labels: int, steps: int = 8) -> dict:
    """`steps` steps holding `labels` record_function labels, 4 deep, each innermost one around one aten::add."""
    per_step = max(labels // steps, 4)
    groups = per_step // 4  # phase > block > layer > op label: 4 labels a group
    events, t = [], 0.0
    for k in range(steps):
        start = t
        for g in range(groups):
            s = t + g * 10
            events += [ev("user_annotation", f"phase_{g % 3}", s, 9.5),
                       ev("user_annotation", f"block_{g % 12}", s + 0.5, 8.5),
                       ev("user_annotation", f"layer_{g % 48}", s + 1, 7.5), ev("user_annotation", "add", s + 2, 5),
                       ev("cpu_op", "aten::add", s + 3, 3)]  # fmt: skip
        t += groups * 10 + 10
        events.append(ev("user_annotation", f"ProfilerStep#{k + 1}", start, t - start))
    return {"traceEvents": events}


def make(kind: str, n: int, path: Path) -> None:
    """Write the `kind` trace of size `n` to `path` in a child process: the parent stays small, so the peak RSS
    that os.wait4 reports of each measured child (which starts from its parent's at fork) is the summary's own."""
    code = (f"import json, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); import tree_growth as t; "
            f"json.dump(t.{kind}_trace({n}), open({str(path)!r}, 'w'))")  # fmt: skip
    subprocess.run([sys.executable, "-c", code], check=True)


def cell(tree: Path, argv: list[str], timeout: float, per: float, unit: str) -> str:
    got = measure([sys.executable, *argv], tree, timeout)
    status = "ok" if got.rc == 0 else got.why
    return (f"{got.wall_s:.2f} s | {got.cpu_s:.2f} s | {1000 * got.cpu_s / per:.2f} ms {unit} | "
            f"{got.peak_mib:,.0f} MiB | {status}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a commit to compare with (its common/, exported with git archive)")
    parser.add_argument("--steps", type=int, nargs="*", default=[250, 500, 1000], help="N of `cpu steps`")
    parser.add_argument("--labels", type=int, nargs="*", default=[90090, 180180, 360360, 720720], help="N of `labels`")
    parser.add_argument("--timeout", type=float, default=600, help="seconds before a cell is killed (600)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        trees = [("now", REPO)]
        if args.before:
            before = folder / "before"
            before.mkdir()
            archive = subprocess.run(
                ["git", "archive", args.before, "common"], cwd=REPO, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", str(before)], input=archive.stdout, check=True)
            trees.append((args.before, before))
        cases = []
        for n in args.steps:
            path = folder / f"cpu_steps_{n}.json"
            make("cpu_steps", n, path)
            cases.append((f"cpu steps {n:,} ({path.stat().st_size / 1e6:.1f} MB)", path, n, "a step"))
        for n in args.labels:
            path = folder / f"labels_{n}.json"
            make("labels", n, path)
            cases.append((f"labels {n:,} ({path.stat().st_size / 1e6:.0f} MB)", path, n / 1000, "per 1,000 labels"))
        print("| input | tree | wall | CPU | CPU per unit | peak RSS | result |")
        print("| --- | --- | ---: | ---: | ---: | ---: | --- |")
        for name, path, per, unit in cases:
            for label, tree in trees:
                argv = ["-m", "common.summary", str(path)]
                print(f"| {name} | {label} | {cell(tree, argv, args.timeout, per, unit)} |", flush=True)


if __name__ == "__main__":
    main()
