"""Time the suite's summary on large traces against JSON parsers and against the summary of an earlier commit.

Setup: `uv sync --group bench` (orjson, pysimdjson, ijson; msgspec is the reader's own dependency).
Usage (from the repository root; make the traces with benchmarks/make_trace.py, under /tmp):
    uv run --group bench python benchmarks/reader_speed.py /tmp/bench/trace_100mb.json [--runs 3] [--before REV]
    uv run --group bench python benchmarks/reader_speed.py BIG.json --runs 1 --only summary,before,simdjson
    python3 benchmarks/reader_speed.py /tmp/bench/trace_100mb.json --runs 5 --only summary,folder   # 1 vs 8 traces

Each cell is one fresh subprocess per run (the columns taken in turn, run after run), its wall time (imports
included) taken here and its peak RSS from os.wait4, as min/median/max over --runs runs and the largest peak:
  summary   `python -m common.summary TRACE` in this checkout: what a user runs.
  folder    the same on a folder of --copies hard links to TRACE (one copy each where links fail): a folder of
            rank traces, read a process per core; "folder ÷ one" below the row is its median over summary's.
  before    the same in the `common/` of commit --before (exported with git archive into a temp folder), or of
            a folder holding a `common/` (--before PATH, where there is no git), the reader this one
            replaces; --before "" leaves the column out. Both trees are byte-compiled first, as a user's
            second run finds them (PYTHONDONTWRITEBYTECODE would otherwise time compiling the sources).
  json      stdlib `json.load` of the whole file.        orjson, orjson-nogc  `orjson.loads` of its bytes, gc on/off.
  ijson     iterate `ijson.items(f, "traceEvents.item")` (the yajl2_c backend; the worker fails on another).
  msgspec   `msgspec.json.decode` of the whole file into the reader's own `Event` structs.
  simdjson  pysimdjson `Parser().parse` of its bytes (a lazy document: the bare parse).
  hta       with --hta only: benchmarks/hta_compare.py's HTA worker (HolisticTraceAnalysis, in --hta-python).
Below each trace's row: the summary's median against `before` (wall time, and CPU time: user + system, which
a busy machine inflates less; then the median of the per-run ratios, each run's summary against the `before` run
right after it, and the ratio of the fastest runs, which a machine that is slow in spells moves less) and
against the pysimdjson parse, and its peak memory against the file's size. `--pin CPU` runs every measured
process on that one CPU (its affinity; not with the folder column, which reads a process per usable CPU).
"""

from __future__ import annotations

import argparse
import gc
import gzip
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from subproc import Measured, measure

HERE = Path(__file__).resolve()
REPO = HERE.parent.parent
BEFORE = "4ae4dcb"  # the last commit whose reader decoded JSON by hand (stdlib raw_decode, one event at a time)
COLUMNS = {
    "summary": "`common.analysis.summary`",
    "folder": "`common.analysis.summary`, folder of copies",
    "before": "summary before",
    "json": "stdlib `json.load`",
    "orjson": "`orjson.loads`",
    "orjson-nogc": "`orjson`, gc off",
    "ijson": "`ijson` (yajl2_c) items",
    "msgspec": "`msgspec` structs",
    "simdjson": "`pysimdjson` parse",
    "hta": "HTA 0.5",
}
PARSERS = ("json", "orjson", "orjson-nogc", "ijson", "msgspec", "simdjson")


def read_bytes(path: Path) -> bytes:
    """The file's JSON bytes (`.json.gz` decompressed)."""
    return gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()


def parse_worker(what: str, path: Path) -> None:
    """(In a subprocess) parse `path` with one library and print how many events it holds."""
    if what == "json":
        import json

        with gzip.open(path, "rt") if path.suffix == ".gz" else open(path) as fh:
            count = len(json.load(fh)["traceEvents"])
    elif what in ("orjson", "orjson-nogc"):
        import orjson

        if what == "orjson-nogc":
            gc.disable()
        count = len(orjson.loads(read_bytes(path))["traceEvents"])
    elif what == "ijson":
        import ijson

        if ijson.backend != "yajl2_c":
            sys.exit(f"ijson backend is {ijson.backend}, not yajl2_c")
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as fh:
            count = sum(1 for _ in ijson.items(fh, "traceEvents.item", use_float=True))
    elif what == "msgspec":
        import msgspec

        sys.path.insert(0, str(REPO))
        from common.reader.trace_json import Event

        file = msgspec.defstruct("File", [("traceEvents", list[Event])])
        count = len(msgspec.json.decode(read_bytes(path), type=file).traceEvents)
    else:
        import simdjson

        count = len(simdjson.Parser().parse(read_bytes(path))["traceEvents"])
    print(count)


def copies_of(trace: Path, count: int, into: Path) -> Path:
    """A folder in `into` holding `count` hard links to `trace` (copies where the file system refuses links)."""
    folder = into / f"{trace.name}.x{count}"
    folder.mkdir()
    suffix = ".json.gz" if trace.name.endswith(".gz") else ".json"
    for i in range(count):
        target = folder / f"rank{i}{suffix}"
        try:
            os.link(trace, target)
        except OSError:
            shutil.copyfile(trace, target)
    return folder


def command(what: str, trace: Path, before: Path | None, args: argparse.Namespace) -> tuple[list[str], Path]:
    """The command line that measures `what` on `trace`, and the folder it runs in."""
    if what == "summary":
        return [sys.executable, "-m", "common.summary", str(trace)], REPO
    if what == "folder":
        return [sys.executable, "-m", "common.summary", str(args.folders[trace])], REPO
    if what == "before":
        return [sys.executable, "-m", "common.summary", str(trace)], before
    if what == "hta":
        return [args.hta_python, str(HERE.parent / "hta_compare.py"), "--worker", "hta", str(trace)], REPO
    return [sys.executable, str(HERE), "--worker", what, str(trace)], REPO


def cell(runs: list[Measured]) -> str:
    """min/median/max s and the largest peak, or why it has no figure."""
    failed = [r for r in runs if r.rc != 0]
    if failed:
        return failed[0].why
    walls = sorted(r.wall_s for r in runs)
    peak = max(r.peak_mib for r in runs)
    spread = (walls[0], statistics.median(walls), walls[-1]) if len(walls) > 1 else walls
    return "/".join(f"{w:.2f}" for w in spread) + f" s, {peak:,.0f} MiB"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("traces", nargs="*", type=Path, help="trace files (.json or .json.gz)")
    parser.add_argument("--runs", type=int, default=3, help="runs per cell (default 3)")
    parser.add_argument("--before", default=BEFORE, help=f"the commit whose summary is 'before' (default {BEFORE})")
    parser.add_argument("--only", help="comma-separated columns to measure: " + ",".join(COLUMNS))
    parser.add_argument("--copies", type=int, default=8, help="traces in the folder column's folder (default 8)")
    parser.add_argument("--hta", action="store_true", help="also time HTA (slow: minutes at 100 MB)")
    parser.add_argument("--hta-python", default="/tmp/hta-venv/bin/python", help="a Python with HTA installed")
    parser.add_argument("--timeout", type=float, default=900, help="seconds per run (default 900)")
    parser.add_argument("--pin", type=int, metavar="CPU", help="run every measured process on this one CPU")
    parser.add_argument("--worker", choices=PARSERS, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        parse_worker(args.worker, args.traces[0])
        return
    if not args.traces or args.runs < 1 or args.copies < 1:
        parser.error("give at least one trace, --runs >= 1 and --copies >= 1")
    if args.pin is not None:
        if args.only is None or "folder" in args.only.split(","):
            parser.error("--pin goes with --only, without the folder column (it reads a process per usable CPU)")
        try:
            os.sched_setaffinity(0, {args.pin})  # the measured processes inherit it
        except (AttributeError, OSError, ValueError) as exc:
            parser.error(f"--pin {args.pin}: {exc}")
    columns = [c for c in COLUMNS if (c != "hta" or args.hta) and (c != "before" or args.before)]
    if args.only:
        columns = [c for c in columns if c in args.only.split(",")]

    with tempfile.TemporaryDirectory() as folder:
        before = Path(folder)
        if "before" in columns and Path(args.before, "common").is_dir():
            before = Path(args.before).resolve()
        elif "before" in columns:
            archive = subprocess.run(
                ["git", "archive", args.before, "common"], cwd=REPO, capture_output=True, check=True
            )
            subprocess.run(["tar", "-x", "-C", folder], input=archive.stdout, check=True)
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        for tree in {REPO, before} if "before" in columns else {REPO}:
            subprocess.run([sys.executable, "-m", "compileall", "-q", "common"], cwd=tree, env=env,
                           stdout=subprocess.DEVNULL, check=True)  # fmt: skip
        if "folder" in columns:
            args.folders = {t.resolve(): copies_of(t.resolve(), args.copies, Path(folder)) for t in args.traces}
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        pinned = "" if args.pin is None else f", pinned to CPU {args.pin}"
        print(
            f"python {sys.version.split()[0]}, {cores} usable CPUs{pinned}; before = {args.before}; {args.runs} run(s) "
            f"a cell; folder = {args.copies} copies"
        )
        print("| trace | MB | " + " | ".join(COLUMNS[c] for c in columns) + " |")
        print("|---|---:|" + "---|" * len(columns), flush=True)
        notes = []
        for trace in (t.resolve() for t in args.traces):
            runs: dict[str, list[Measured]] = {what: [] for what in columns}
            for _ in range(args.runs):  # round-robin, so a busy spell on the machine hits every column alike
                for what in columns:
                    runs[what].append(measure(*command(what, trace, before, args), args.timeout))
            size = trace.stat().st_size
            cells = " | ".join(cell(runs[c]) for c in columns)
            print(f"| {trace.name} | {size / 1e6:,.0f} | {cells} |", flush=True)
            notes.append(ratios(trace.name, size, runs))
        print("\n".join(n for n in notes if n))


def ratios(name: str, size: int, runs: dict[str, list[Measured]]) -> str:
    """The summary's median time against `before` and the pysimdjson parse, and its peak against the file."""
    ok = {k: v for k, v in runs.items() if all(r.rc == 0 for r in v)}
    if "summary" not in ok:
        return ""
    median = {k: statistics.median(r.wall_s for r in v) for k, v in ok.items()}
    peak = max(r.peak_mib for r in ok["summary"]) * 2**20
    parts = [f"{name}: summary peak {peak / size:.2f}x the file"]
    if "before" in median:
        cpu = {k: statistics.median(r.cpu_s for r in ok[k]) for k in ("before", "summary")}
        wall = median["summary"] / median["before"]
        parts.append(f"wall {wall:.3f}x and CPU {cpu['summary'] / cpu['before']:.3f}x the time of before "
                     f"(CPU medians {cpu['summary']:.3f} s against {cpu['before']:.3f} s)")  # fmt: skip
        paired = sorted(a.cpu_s / b.cpu_s for a, b in zip(ok["summary"], ok["before"], strict=True) if b.cpu_s > 0)
        if paired:
            fastest = min(r.cpu_s for r in ok["summary"]) / min(r.cpu_s for r in ok["before"])
            parts.append(f"CPU per run {statistics.median(paired):.3f}x ({paired[0]:.2f}-{paired[-1]:.2f}x), "
                         f"fastest runs {fastest:.3f}x")  # fmt: skip
    if "simdjson" in median:
        parts.append(f"{median['summary'] / median['simdjson']:.1f}x the time of a pysimdjson parse")
    if "folder" in median:
        walls = sorted(r.wall_s for r in ok["folder"])
        ratio = median["folder"] / median["summary"]
        parts.append(f"folder ÷ one {ratio:.2f}x (the folder's runs {walls[0]:.2f}-{walls[-1]:.2f} s)")
    return "; ".join(parts)


if __name__ == "__main__":
    main()
