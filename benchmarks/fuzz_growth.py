"""Time and memory of the summary and the diff on the inputs issue 47 found growing faster than their size.

Usage (from the repository root):
    uv run python benchmarks/fuzz_growth.py [--before REV] [--sizes 2000 4000] [--timeout 600]

`shapes`: a 1 MB trace holding one aten::add whose two inputs have 24,000 dims near 2^62 each (`Input Dims`); the
roofline multiplied them out as exact ints. `renumbered N`: two traces of N Inductor kernels whose names differ
only by their number (`triton_poi_fused_add_mul_0` ... N-1, the other side renumbered from N): every kernel's word
set is {add, mul}, and the diff's pairing built the N^2 pairs. Each cell is `python -m common.summary` (shapes)
or `python -m common.diff` (renumbered) in a fresh subprocess (benchmarks/subproc.py: wall time, CPU time and
peak RSS), in this checkout and, with --before, in the `common/` of commit REV (exported with git archive).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from subproc import measure

REPO = Path(__file__).resolve().parent.parent


def ev(cat: str, name: str, ts: float, dur: float, tid: int = 1, **args) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": tid, "ts": ts, "dur": dur, "args": args}


def shapes_trace(dims: int = 24_000) -> dict:
    """One step whose aten::add has two inputs of `dims` dims near 2^62, and launches one kernel."""
    huge = [2**62 - k for k in range(dims)]
    shapes = {"Input Dims": [huge, huge], "Input type": ["float", "float"], "Concrete Inputs": ["", ""]}
    add = ev("cpu_op", "aten::add", 12, 10, **{"External id": 1}, **shapes)
    return {"traceEvents": [
        ev("user_annotation", "ProfilerStep#1", 10, 100), add,
        ev("cuda_runtime", "cudaLaunchKernel", 13, 2, correlation=1, **{"External id": 1}),
        ev("kernel", "void at::native::vectorized_elementwise_kernel<4>(int)", 20, 5, tid=7, correlation=1,
           **{"External id": 1}),
    ]}  # fmt: skip


def renumbered_trace(n: int, first: int) -> dict:
    """One step launching n kernels `triton_poi_fused_add_mul_<first + k>`, each 1 to 3 µs."""
    events = [ev("user_annotation", "ProfilerStep#1", 0, 10 * n + 10)]
    for k in range(n):
        t = 5 + 10 * k
        events.append(ev("cuda_runtime", "cudaLaunchKernel", t, 1, correlation=k + 1))
        events.append(ev("kernel", f"triton_poi_fused_add_mul_{first + k}", t + 2, 1 + k % 3, tid=7, correlation=k + 1))
    return {"traceEvents": events}


def cell(tree: Path, argv: list[str], timeout: float) -> str:
    got = measure([sys.executable, *argv], tree, timeout)
    status = "ok" if got.rc == 0 else got.why
    return f"{got.wall_s:.2f} s wall | {got.cpu_s:.2f} s CPU | {got.peak_mib:,.0f} MiB | {status}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", help="a commit to compare with (its common/, exported with git archive)")
    parser.add_argument("--sizes", type=int, nargs="*", default=[2000, 4000], help="N of `renumbered` (2000 4000)")
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
        shapes = folder / "shapes.json"
        shapes.write_text(json.dumps(shapes_trace()))
        cases = [(f"shapes ({shapes.stat().st_size / 1e6:.2f} MB)", ["-m", "common.summary", str(shapes)])]
        for n in args.sizes:
            sides = [folder / f"renumbered_{n}_{side}.json" for side in "ab"]
            for path, first in zip(sides, (0, n), strict=True):
                path.write_text(json.dumps(renumbered_trace(n, first)))
            cases.append((f"renumbered {n:,}", ["-m", "common.diff", *map(str, sides)]))
        print("| input | tree | wall | CPU | peak RSS | result |")
        print("| --- | --- | ---: | ---: | ---: | --- |")
        for name, argv in cases:
            for label, tree in trees:
                print(f"| {name} | {label} | {cell(tree, argv, args.timeout)} |", flush=True)


if __name__ == "__main__":
    main()
