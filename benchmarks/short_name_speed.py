"""Time common.reader.naming.short_name on nested-template kernel names of growing length (linear: each size ~2x).

Usage (from the repository root):
    PYTHONPATH=. uv run python benchmarks/short_name_speed.py [--max-mb 1]

Each name is `void outer<Wrap<…<SumFunctor>…>>(int)` followed by `x<LerpFunctor>` repeats, half of its length
nested, half flat (a depth-1 `<` every 14 characters: where the old per-`<` regex search was quadratic).
"""

from __future__ import annotations

import argparse
import time

from common.reader.naming import short_name


def name_of(size: int) -> str:
    depth = size // 10
    return "void outer<" + "Wrap<" * depth + "SumFunctor" + ">" * depth + ">(int)" + "x<LerpFunctor>" * (size // 28)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-mb", type=float, default=1.0, help="the longest name, in MB (default: 1)")
    args = parser.parse_args()
    size = 16_384
    while size <= args.max_mb * 1_000_000:
        name = name_of(size)
        start = time.perf_counter()
        short_name(name)
        took = time.perf_counter() - start
        print(f"{len(name) / 1e6:8.3f} MB  {took * 1e3:9.1f} ms  {took * 1e9 / len(name):6.1f} ns/char")
        size *= 2


if __name__ == "__main__":
    main()
