"""Time the diff's kernel pairing on a recompiled model: N distinct Triton kernels a side, before and after.

Usage (from the repository root; BEFORE a copy of an older tree's `common/`, made as below):
    git archive 8334530 common | tar -x -C /tmp/diff-before
    PYTHONPATH=. uv run python benchmarks/diff_speed.py --before /tmp/diff-before [--sizes 1000 2000] [--runs 5]

A's N names are Inductor-like (`triton_red_fused__to_copy_add_mean_mul_pow_rsqrt_12`: 1 to 6 ops of a skewed
choice, add and mul in most, sorted, numbered); B is A recompiled: every kernel renumbered, a fifth with an op
more, a fifth other work. Each cell is a fresh process per tree: `match_kernels` on the two sides' KernelUse
dicts (`--runs` times in that process), and `python -m common.diff` on the two trace files (wall time, imports
included, `--runs` processes). Prints min/median/max and the pairs found. The tree before runs `--before-runs`
times (default 1: it took minutes a cell).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OPS = [  # the ops Inductor names its kernels by, the most common first
    "add", "mul", "_to_copy", "sum", "mean", "pow", "rsqrt", "native_layer_norm", "view", "permute", "clone", "exp",
    "sub", "div", "where", "gelu", "gelu_backward", "native_layer_norm_backward", "amax", "log", "tanh", "sigmoid",
    "relu", "threshold_backward", "cat", "slice", "select", "embedding", "embedding_dense_backward", "neg", "sqrt",
    "var_mean", "_softmax", "_softmax_backward_data", "masked_fill", "eq", "lt", "full", "arange", "native_dropout",
    "native_dropout_backward", "maximum", "clamp", "erf", "silu", "scatter_add", "index_select",
]  # fmt: skip


def names(n: int, seed: int = 0) -> tuple[list[str], list[str]]:
    """A's `n` distinct Triton kernel names and B's, the same model recompiled."""
    rng = random.Random(seed)
    weights = [1 / (k + 1) for k in range(len(OPS))]
    a = []
    for i in range(n):
        fused = "_".join(sorted(set(rng.choices(OPS, weights, k=rng.randint(1, 6)))))
        a.append((rng.choice(["poi", "red", "per"]), fused, i))
    b = []
    for kind, fused, i in a:
        roll = rng.random()
        if roll < 0.2:
            fused = f"{fused}_{rng.choice(OPS)}"
        elif roll < 0.4:
            fused = "_".join(sorted(rng.sample(OPS, rng.randint(1, 5))))
        b.append((kind, fused, n + i))
    rng.shuffle(b)
    return [f"triton_{k}_fused_{f}_{i}" for k, f, i in a], [f"triton_{k}_fused_{f}_{i}" for k, f, i in b]


def trace(kernels: list[str], seed: int) -> dict:
    """One profiled step that launches each kernel 1 to 3 times."""
    rng = random.Random(seed)
    events = [{"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "pid": 1, "tid": 1, "ts": 0,
               "dur": 10_000_000, "args": {}}]  # fmt: skip
    corr, t = 1, 10.0
    for name in kernels:
        for _ in range(rng.randint(1, 3)):
            us = round(rng.uniform(1, 50), 3)
            events.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1,
                           "ts": t, "dur": 1, "args": {"correlation": corr}})  # fmt: skip
            events.append({"ph": "X", "cat": "kernel", "name": name, "pid": 0, "tid": 7, "ts": t + 2, "dur": us,
                           "args": {"correlation": corr}})  # fmt: skip
            corr, t = corr + 1, t + us + 3
    return {"traceEvents": events}


# Run in the tree's own process: time its match_kernels on the two traces' kernel uses, its caches emptied.
PAIRING = """
import json, sys, time
from common.analysis import diff
from common.analysis.diff import match_kernels
from common.reader import naming
from common.reader.build import read_trace
a, b = read_trace(sys.argv[1]).kernel_uses(), read_trace(sys.argv[2]).kernel_uses()
times = []
for _ in range(int(sys.argv[3])):
    for cached in (getattr(diff, "_short_of", None), getattr(diff, "words", None), naming.kernel_family):
        if hasattr(cached, "cache_clear"):
            cached.cache_clear()  # each run from cold, as a diff's one run is
    start = time.perf_counter()
    pairs = match_kernels(a, b)
    times.append(time.perf_counter() - start)
print(json.dumps({"times": times, "paired": sum(1 for u, v in pairs if u and v), "kernels": [len(a), len(b)]}))
"""


def in_tree(tree: Path, argv: list[str]) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    return subprocess.run([sys.executable, *argv], cwd=tree, env=env, capture_output=True, text=True, check=True)


def spread(times: list[float]) -> str:
    shown = [f"{x:.3g}" for x in (min(times), statistics.median(times), max(times))]
    return "/".join(shown) + " s" if len(times) > 1 else f"{times[0]:.3g} s (1 run)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2000], help="N a side (default: 1000 2000)")
    parser.add_argument("--runs", type=int, default=5, help="runs of the tree after (default: 5)")
    parser.add_argument("--before", type=Path, help="a folder holding an older tree's common/ (default: none)")
    parser.add_argument("--before-runs", type=int, default=1, help="runs of the tree before (default: 1)")
    args = parser.parse_args()
    trees = [("after", ROOT, args.runs)] + (
        [("before", args.before.resolve(), args.before_runs)] if args.before else []
    )
    print("| N a side | tree | match_kernels min/median/max | pairs | `python -m common.diff` min/median/max |")
    print("| ---: | --- | --- | ---: | --- |")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.sizes:
            a, b = names(n)
            files = [Path(tmp) / f"{side}{n}.json" for side in "ab"]
            for path, kernels, seed in zip(files, (a, b), (1, 2), strict=True):
                path.write_text(json.dumps(trace(kernels, seed)))
            for label, tree, runs in trees:
                got = json.loads(in_tree(tree, ["-c", PAIRING, *map(str, files), str(runs)]).stdout)
                assert got["kernels"] == [n, n], got
                walls = []
                for _ in range(runs):
                    start = time.perf_counter()
                    in_tree(tree, ["-m", "common.diff", *map(str, files)])
                    walls.append(time.perf_counter() - start)
                print(f"| {n:,} | {label} | {spread(got['times'])} | {got['paired']:,} | {spread(walls)} |", flush=True)


if __name__ == "__main__":
    main()
