"""Read exported Chrome traces: profiler steps and what happened inside each.

Pure functions over the JSON torch.profiler writes (`.json` or `.json.gz`). GPU work
(`kernel`, `gpu_memcpy`, `gpu_memset`) is assigned to the step whose CPU thread launched
it, through the `correlation` id it shares with its `cuda_runtime`/`cuda_driver` launch.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

GPU_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")
STEP_NAME = re.compile(r"^ProfilerStep#(\d+)$")


@dataclass
class Step:
    """One recorded profiler step (`ProfilerStep#N`)."""

    number: int
    start_us: float
    dur_us: float
    region_us: float | None = None  # CPU time of the record_function label inside the step
    cpu_ops: Counter = field(default_factory=Counter)  # aten op name -> calls (nested ones too)
    gpu: list[tuple[str, str, float]] = field(default_factory=list)  # (category, name, µs) in GPU time order
    runtime: Counter = field(default_factory=Counter)  # cudaLaunchKernel, cuLaunchKernelEx, ... -> calls

    def _of(self, category: str) -> list[tuple[str, float]]:
        return [(name, us) for cat, name, us in self.gpu if cat == category]

    @property
    def kernels(self) -> list[tuple[str, float]]:
        """(name, µs) of each kernel, in order."""
        return self._of("kernel")

    @property
    def memcpy(self) -> list[tuple[str, float]]:
        return self._of("gpu_memcpy")

    @property
    def memset(self) -> list[tuple[str, float]]:
        return self._of("gpu_memset")

    @property
    def gpu_busy_us(self) -> float:
        """Sum of kernel, memcpy and memset durations (GPU busy time, not wall)."""
        return sum(us for _, _, us in self.gpu)

    def calls(self, prefix: str) -> int:
        """How many runtime/driver calls in this step have a name starting with `prefix`."""
        return sum(n for name, n in self.runtime.items() if name.startswith(prefix))


@dataclass
class Trace:
    """A loaded trace: its file, its steps, the label and whether it has a GPU lane."""

    path: Path
    label: str | None
    steps: list[Step]
    has_gpu: bool
    device_name: str | None
    meta: dict  # the harness's `suite` metadata (script, tag, label, dtype, flops, bytes); {} if absent

    @property
    def name(self) -> str:
        """`script/tag` from the metadata, else `<folder>/<file name without .json[.gz]>`."""
        if self.meta.get("script") and self.meta.get("tag"):
            return f"{self.meta['script']}/{self.meta['tag']}"
        stem = self.path.name.removesuffix(".gz").removesuffix(".json")
        return f"{self.path.parent.name}/{stem}" if self.path.parent.name else stem

    def per_step(self, value: Callable[[Step], float | None]) -> float | None:
        """The median of `value(step)` over the profiled steps, skipping None; None if every step gives None."""
        values = [v for v in map(value, self.steps) if v is not None]
        return statistics.median(values) if values else None

    def step_time_us(self) -> tuple[float | None, str]:
        """The time per step rates are computed from, and where it was spent: ("GPU") the median GPU busy
        time where the trace has a GPU lane, else ("CPU") the median span of the annotated region."""
        if self.has_gpu:
            return self.per_step(lambda s: s.gpu_busy_us), "GPU"
        return self.per_step(lambda s: s.region_us), "CPU"


def load_json(path: Path | str) -> dict:
    """Parse a Chrome trace (`.json` or `.json.gz`); raise ValueError naming the file if it is not one."""
    path = Path(path)
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable Chrome trace ({exc})") from None
    if isinstance(data, list):  # the bare-array form of the format
        data = {"traceEvents": data}
    if not isinstance(data, dict) or not isinstance(data.get("traceEvents"), list):
        raise ValueError(f"{path}: not a Chrome trace (no traceEvents list)")
    return data


def _complete_events(data: dict) -> list[dict]:
    """The duration ("X") events that have a name, a start and a length; anything else is skipped."""
    return [e for e in data["traceEvents"]
            if isinstance(e, dict) and e.get("ph") == "X" and isinstance(e.get("name"), str)
            and isinstance(e.get("ts"), (int, float)) and isinstance(e.get("dur"), (int, float))]


def _correlation(event: dict) -> int | None:
    """The id that ties a GPU event to the runtime/driver call that launched it."""
    args = event.get("args")
    return args.get("correlation") if isinstance(args, dict) else None


def _inside(event: dict, step: Step) -> bool:
    return step.start_us <= float(event["ts"]) <= step.start_us + step.dur_us


def _find_label(events: list[dict], steps: list[Step]) -> str | None:
    """The record_function label: the most common user annotation inside the steps."""
    names = Counter(e["name"] for e in events
                    if e.get("cat") == "user_annotation" and not STEP_NAME.match(e["name"])
                    and any(_inside(e, s) for s in steps))
    return names.most_common(1)[0][0] if names else None


def parse(data: dict, path: Path | str = "<trace>", label: str | None = None) -> Trace:
    """Split a loaded trace into its profiler steps; raise ValueError if it has none."""
    events = _complete_events(data)
    steps = sorted(
        (Step(int(m.group(1)), float(e["ts"]), float(e["dur"]))
         for e in events if e.get("cat") == "user_annotation" and (m := STEP_NAME.match(e["name"]))),
        key=lambda s: s.start_us,
    )
    if not steps:
        raise ValueError(f"{path}: no ProfilerStep#N events (was it exported by a scheduled torch.profiler run?)")
    meta = data.get("suite") if isinstance(data.get("suite"), dict) else {}
    label = label or meta.get("label") or _find_label(events, steps)

    def step_of(event: dict) -> Step | None:
        return next((s for s in steps if _inside(event, s)), None)

    launch_step: dict[int, Step] = {}
    for e in events:
        cat = e.get("cat")
        if cat in LAUNCH_CATEGORIES:
            step = step_of(e)
            if step is None:
                continue
            step.runtime[e["name"]] += 1
            corr = _correlation(e)
            if corr is not None:
                launch_step[corr] = step
        elif cat == "cpu_op" and (step := step_of(e)):
            step.cpu_ops[e["name"]] += 1
        elif cat == "user_annotation" and label and e["name"] == label and (step := step_of(e)):
            step.region_us = (step.region_us or 0.0) + float(e["dur"])

    has_gpu = False
    for e in sorted((e for e in events if e.get("cat") in GPU_WORK), key=lambda e: float(e["ts"])):
        has_gpu = True
        corr = _correlation(e)
        step = launch_step.get(corr) if corr is not None else None
        step = step or step_of(e)
        if step is None:
            continue
        step.gpu.append((e["cat"], e["name"], float(e["dur"])))
    has_gpu = has_gpu or any(e.get("cat") in LAUNCH_CATEGORIES for e in events)
    props = data.get("deviceProperties") or []
    device_name = props[0].get("name") if props and isinstance(props[0], dict) else meta.get("device")
    return Trace(Path(path), label, steps, has_gpu, device_name, meta)


def read_trace(path: Path | str, label: str | None = None) -> Trace:
    """Load and parse one exported trace file."""
    return parse(load_json(path), path, label)
