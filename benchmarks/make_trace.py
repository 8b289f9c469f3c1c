"""Make a large synthetic Chrome trace by repeating one profiler step of a real one.

Usage (stdlib only, any Python >= 3.10):
    python3 benchmarks/make_trace.py --mb 100 --out /tmp/bench/trace_100mb.json
    python3 benchmarks/make_trace.py --steps 500 --source traces/04_a_naive_attention/x.json.gz --out big.json

One step of the source (`--step N`, default its first ProfilerStep#N) is taken as:
  - the CPU `user_annotation` slice `ProfilerStep#N` and every other non-GPU "X" event whose `ts` lies in
    [ts, ts + dur] of that slice (cpu_op, user_annotation, cuda_runtime, cuda_driver, ...);
  - the GPU events (`kernel`, `gpu_memcpy`, `gpu_memset`, `gpu_user_annotation`) whose `args.correlation`
    matches a `cuda_runtime`/`cuda_driver` launch of the step; a `gpu_user_annotation` has no correlation, so
    it is matched by `args["External id"]` to a CPU event of the step;
  - the flow events (`ph` "s"/"f") whose `id` is one of those correlations.
That step is written N times: copy k has every `ts` shifted by k step periods, is named ProfilerStep#(N + k), and
has `correlation`, `External id` and flow `id` raised by k * (largest id in the source + 1), so ids stay unique
and still link launch, kernel and flow. The period is the source's start-to-start spacing of that step and the
next one, or the step's extent (GPU work included) if that is longer, or if it is the last step.
The source's top-level keys (deviceProperties, schemaVersion, `suite`, ...) and its metadata events (`ph` "M")
are kept; its other events (other steps, instant events, the profiler's own span) are not.
The output is written event by event; `--mb` counts uncompressed bytes (an `--out` ending in .gz is gzipped).
"""

from __future__ import annotations

import argparse
import gzip
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, cast

Event = dict[str, Any]

REPO = Path(__file__).resolve().parent.parent
DEFAULT_SOURCE_DIR = REPO / "tests" / "fixtures" / "h200" / "04_a_naive_attention"
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")
LAUNCH_CATS = ("cuda_runtime", "cuda_driver")
GPU_WORK_CATS = ("kernel", "gpu_memcpy", "gpu_memset")
GPU_CATS = (*GPU_WORK_CATS, "gpu_user_annotation")
ID_KEYS = ("correlation", "External id")


def open_text(path: Path, mode: str) -> IO[str]:
    """Open a `.json` or `.json.gz` file in text mode."""
    if path.suffix == ".gz":
        return cast(IO[str], gzip.open(path, mode + "t", encoding="utf-8"))
    return open(path, mode, encoding="utf-8")


def default_source() -> Path:
    """The one trace in tests/fixtures/h200/04_a_naive_attention/."""
    found = sorted(DEFAULT_SOURCE_DIR.glob("*.json*"))
    if len(found) != 1:
        sys.exit(f"error: expected one trace in {DEFAULT_SOURCE_DIR}, found {len(found)}; give --source")
    return found[0]


def _args(event: Event) -> dict[str, Any]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _end(event: Event) -> float:
    return float(event["ts"]) + float(event.get("dur", 0))


def pick_step(events: list[Event], number: int | None) -> tuple[list[Event], int, float]:
    """The events of ProfilerStep#`number` (default: the first step), its number and its period in µs."""
    steps = sorted(
        (
            e
            for e in events
            if e.get("ph") == "X" and e.get("cat") == "user_annotation" and STEP_NAME.match(str(e.get("name")))
        ),
        key=lambda e: float(e["ts"]),
    )
    if not steps:
        sys.exit("error: the source has no ProfilerStep#N user_annotation")
    numbers = [int(STEP_NAME.match(e["name"]).group(1)) for e in steps]  # type: ignore[union-attr]
    index = 0 if number is None else numbers.index(number) if number in numbers else -1
    if index < 0:
        sys.exit(f"error: no ProfilerStep#{number} in the source (it has {numbers})")
    step = steps[index]
    start, end = float(step["ts"]), _end(step)

    cpu = [
        e
        for e in events
        if e.get("ph") == "X"
        and e.get("cat") not in GPU_CATS
        and e.get("cat") != "Trace"
        and isinstance(e.get("ts"), (int, float))
        and start <= float(e["ts"]) <= end
    ]
    correlations = {_args(e).get("correlation") for e in cpu if e.get("cat") in LAUNCH_CATS} - {None}
    external_ids = {_args(e).get("External id") for e in cpu} - {None}
    gpu = [
        e
        for e in events
        if e.get("ph") == "X"
        and (
            (e.get("cat") in GPU_WORK_CATS and _args(e).get("correlation") in correlations)
            or (e.get("cat") == "gpu_user_annotation" and _args(e).get("External id") in external_ids)
        )
    ]
    flows = [e for e in events if e.get("ph") in ("s", "f") and e.get("id") in correlations]
    chosen = cpu + gpu + flows

    extent = max(_end(e) for e in chosen) - start
    spacing = float(steps[index + 1]["ts"]) - start if index + 1 < len(steps) else 0.0
    return chosen, numbers[index], max(spacing, extent + 1.0)


def id_stride(events: list[Event]) -> int:
    """One more than the largest correlation, External id or flow id in the source."""
    ids = [v for e in events for v in (*(_args(e).get(k) for k in ID_KEYS), e.get("id")) if isinstance(v, int)]
    return max(ids, default=0) + 1


def shifted(step: list[Event], copy: int, number: int, period: float, stride: int) -> Iterator[Event]:
    """Copy `copy` of the step's events: later by `copy` periods, renumbered, with fresh ids."""
    dt, did = copy * period, copy * stride
    for event in step:
        out = dict(event, ts=round(float(event["ts"]) + dt, 3))
        if "id" in out and isinstance(out["id"], int):
            out["id"] += did
        args = _args(event)
        if args:
            out["args"] = dict(args)
            for key in ID_KEYS:
                if isinstance(args.get(key), int):
                    out["args"][key] = args[key] + did
        if event.get("cat") == "user_annotation" and STEP_NAME.match(str(event.get("name"))):
            out["name"] = f"ProfilerStep#{number + copy}"
        yield out


def write_trace(
    out: Path,
    data: dict[str, Any],
    step: list[Event],
    number: int,
    period: float,
    steps: int | None,
    target_bytes: int | None,
) -> tuple[int, int]:
    """Stream the trace to `out`; stop after `steps` copies or once `target_bytes` are written. (bytes, steps)"""
    stride = id_stride(data["traceEvents"])
    written = copies = 0
    with open_text(out, "w") as fh:

        def put(text: str) -> None:
            nonlocal written
            fh.write(text)
            written += len(text.encode("utf-8"))

        put("{\n")
        for key, value in data.items():
            if key != "traceEvents":
                put(f"  {json.dumps(key)}: {json.dumps(value)},\n")
        put('  "traceEvents": [')
        sep = "\n"
        for event in (e for e in data["traceEvents"] if e.get("ph") == "M"):
            put(f"{sep}  {json.dumps(event)}")
            sep = ",\n"
        while (steps is not None and copies < steps) or (target_bytes is not None and written < target_bytes):
            for event in shifted(step, copies, number, period, stride):
                put(f"{sep}  {json.dumps(event)}")
                sep = ",\n"
            copies += 1
        put("\n  ]\n}\n")
    return written, copies


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--source", type=Path, help="a real trace (.json or .json.gz); default: the H200 04_a_naive_attention fixture"
    )
    parser.add_argument("--step", type=int, help="which ProfilerStep#N of the source to repeat (default: the first)")
    size = parser.add_mutually_exclusive_group(required=True)
    size.add_argument("--steps", type=int, help="how many steps to write")
    size.add_argument("--mb", type=float, help="write steps until the file holds this many MB (10^6 bytes)")
    parser.add_argument("--out", type=Path, required=True, help="the trace to write (.json, or .json.gz)")
    args = parser.parse_args(argv)
    if (args.steps is not None and args.steps < 1) or (args.mb is not None and args.mb <= 0):
        parser.error("--steps and --mb must be positive")

    source: Path = args.source or default_source()
    with open_text(source, "r") as fh:
        data = json.load(fh)
    if isinstance(data, list):
        data = {"traceEvents": data}
    events = [e for e in data.get("traceEvents", []) if isinstance(e, dict)]
    data["traceEvents"] = events
    step, number, period = pick_step(events, args.step)
    target = int(args.mb * 1e6) if args.mb is not None else None
    args.out.parent.mkdir(parents=True, exist_ok=True)
    written, copies = write_trace(args.out, data, step, number, period, args.steps, target)
    print(
        f"{args.out}: {args.out.stat().st_size / 1e6:.1f} MB on disk ({written / 1e6:.1f} MB of JSON), "
        f"{copies} steps (ProfilerStep#{number}..#{number + copies - 1}, {len(step)} events each, "
        f"period {period:.1f} µs) from {source.name} ProfilerStep#{number}"
    )


if __name__ == "__main__":
    main()
