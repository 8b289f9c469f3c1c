"""How long a refusal takes with `uv run`: the runs a machine without a GPU, or without the memory, cannot do.

Usage (from the repository root): `python3 benchmarks/refusal_times.py [--repeat N] [--root PATH]`.

Each command runs as `uv run --no-sync <script>.py ...` in `--root` (another checkout: the same commands on other
code), N times; the table gives the exit code, the fastest and slowest wall time, and the error line. These
refusals are made by common.harness.early before the script imports torch; before it, each paid for torch's import.

Measured 2026-12-02 on the 2-core helper VM (no GPU, native bf16, ~22 GB free, load average 0.6-2.7 from
other helpers), `--repeat 1 --root /work/main` (cffd820, before) and `--repeat 3` here (after, fastest-slowest):

| command | before | after |
| --- | --- | --- |
| 03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 | 5.93 s | 0.07 s |
| 03_kernels_mlp.py ... --source pypi | 5.24 s | 0.08-0.27 s |
| 04_d_kernels_attention.py | 5.05 s | 0.07-0.10 s |
| 04_d_kernels_attention.py --repo kernels-community/flash-attn2 --version 1 | 4.70 s | 0.07-0.09 s |
| 05_training_step.py --cudagraphs | 7.62 s | 0.07-0.09 s |
| 05_training_step.py --batch 1 --seq 128 --cudagraphs --bench | 8.08 s | 0.16-0.33 s |
| 04_a_naive_attention.py --seq 4096 --memory | 8.38 s | 0.06-0.18 s |

(The issue's laptop, at load 2.5-15, took 16-30 s before: the import of torch is the whole difference.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from subproc import measure  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
COMMANDS = [
    "03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072",
    "03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --source pypi",
    "04_d_kernels_attention.py",
    "04_d_kernels_attention.py --repo kernels-community/flash-attn2 --version 1",
    "05_training_step.py --cudagraphs",
    "05_training_step.py --batch 1 --seq 128 --cudagraphs --bench",
    "04_a_naive_attention.py --seq 4096 --memory",
]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to run (default: this one)")
    args = parser.parse_args()
    print("| command | exit | fastest | slowest | error line |\n| --- | --- | --- | --- | --- |")
    for line in COMMANDS:
        runs = [measure(["uv", "run", "--no-sync", *line.split()], args.root, 120) for _ in range(args.repeat)]
        walls = sorted(r.wall_s for r in runs)
        said = runs[-1].why.partition(": ")[2][:80]
        print(f"| {line} | {runs[-1].rc} | {walls[0]:.2f} s | {walls[-1]:.2f} s | {said} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
