"""Peak memory and time of the trace reader on files built to exhaust it (issues 22, item 8, and 31, item 4), with
and without msgspec.

Usage (from the repository root; the files are written once into FOLDER, about 2.7 GB of disk):
    uv run python benchmarks/bounded_memory.py /tmp/bad_traces [--before REV] [--only arrays,header,tail,both]

The files: `{"traceEvents": [` followed by 2 GB of zeros (`zeros.json`), by 600 MB of whitespace (`spaces.json`),
and a gzip (about 1.5 MB) of 1.5 GB of whitespace after the same opening (`bomb.json.gz`); then gzips of tens of
kB of small values the reader keeps nothing of (memory amplification): 20M `[]` as elements of traceEvents
(`arrays.json.gz`), a top-level entry before the events holding 15M `{}` (`header.json.gz`), one after them
(`tail.json.gz`), and that header entry followed by the 20M `[]` (`both.json.gz`). Each is read by
`common.reader.build.read_trace` in a fresh subprocess (benchmarks/subproc.py: wall time and peak RSS from os.wait4), in
this checkout and, with --before, in the `common/` of commit REV (exported with git archive), each with msgspec
and without it (`sys.modules["msgspec"] = None`, the fallback path). Prints one row per file, reader and path:
peak RSS, wall time, and the one line the reader refused the file with.
"""

from __future__ import annotations

import argparse
import gzip
import subprocess
import sys
import tempfile
from pathlib import Path

from subproc import measure

REPO = Path(__file__).resolve().parent.parent
OPENING = b'{"traceEvents": ['
CHUNK = 1 << 20
EVENT = b'{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 1, "dur": 2, "tid": 1}'
HEADER = [(b'{"x": [', 1), (b"{},", 15_000_000), (b'{}], "traceEvents": [' + EVENT, 1)]  # 45 MB of `{}` first
FILES = {  # name -> (its pieces, each (bytes, how many times), gzipped)
    "zeros": ([(OPENING, 1), (b"0", 2_000_000_000)], False),
    "spaces": ([(OPENING, 1), (b" \n\t\r", 150_000_000)], False),
    "bomb": ([(OPENING, 1), (b" ", 1_500_000_000)], True),
    "arrays": ([(OPENING + EVENT, 1), (b",[]", 20_000_000), (b"]}", 1)], True),
    "header": ([*HEADER, (b"]}", 1)], True),
    "tail": ([(OPENING + EVENT + b'], "x": [', 1), (b"{},", 15_000_000), (b"{}]}", 1)], True),
    "both": ([*HEADER, (b",[]", 20_000_000), (b"]}", 1)], True),
}
READ = """
import sys
if sys.argv[2] == "stdlib":
    sys.modules["msgspec"] = None
from common.reader.build import read_trace
try:
    read_trace(sys.argv[1])
    print("read")
except ValueError as exc:
    print(str(exc).split(": ", 1)[1])
"""


def make(folder: Path, name: str) -> Path:
    """Write the file `name` into `folder` a chunk at a time (kept if it is there already)."""
    pieces, gz = FILES[name]
    path = folder / (f"{name}.json.gz" if gz else f"{name}.json")
    if not path.exists():
        part = path.with_suffix(".part")
        with gzip.open(part, "wb", compresslevel=9) if gz else open(part, "wb") as out:
            for piece, times in pieces:
                per_chunk = max(1, CHUNK // len(piece))
                for _ in range(times // per_chunk):
                    out.write(piece * per_chunk)
                out.write(piece * (times % per_chunk))
        part.rename(path)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="where the files are written (kept for later runs)")
    parser.add_argument("--before", help="also measure the reader of this commit")
    parser.add_argument("--only", default=",".join(FILES), help="comma-separated files: " + ",".join(FILES))
    parser.add_argument("--timeout", type=float, default=600, help="seconds per run (default 600)")
    args = parser.parse_args()
    args.folder.mkdir(parents=True, exist_ok=True)
    readers = {"this checkout": REPO}
    with tempfile.TemporaryDirectory() as tmp:
        if args.before:
            archive = subprocess.run(
                ["git", "archive", args.before, "common"], cwd=REPO, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
            readers = {args.before: Path(tmp), **readers}
        print("| file | size | reader | path | peak RSS | wall | what it said |")
        print("| --- | ---: | --- | --- | ---: | ---: | --- |")
        for name in args.only.split(","):
            path = make(args.folder, name)
            for reader, root in readers.items():
                for mode in ("msgspec", "stdlib"):
                    run = measure([sys.executable, "-c", READ, str(path), mode], root, args.timeout)
                    said = run.out[-1] if run.out else run.why
                    size = f"{path.stat().st_size / 1e6:,.1f} MB"
                    cells = [name, size, reader, mode, f"{run.peak_mib:,.0f} MiB", f"{run.wall_s:.1f} s", said]
                    print("| " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
