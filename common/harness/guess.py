"""Guess first, then look: a script's prediction of one profiled step, checked against its trace.

A training step's trace has phases: the record_function labels `forward`, `backward` and `optimizer` directly
inside the step's label. The reader (common.reader.build) gives each phase its own GPU work and CPU ops; `in_phase`
turns any guess line into one about a single phase.
"""

from __future__ import annotations

import math
import re
import textwrap
from dataclasses import dataclass

from common.analysis.tables import LAUNCH_HEADERS, LAUNCH_LEGEND, TEXT_WIDTH, launch_cells, text_table
from common.cli import SuiteError
from common.reader.kinds import LABEL
from common.reader.model import Step, Trace
from common.reader.naming import FAMILIES, short_name

ANY = "any"  # kernels(ANY, n, ...) counts every kernel of the step
GRAPH_LAUNCH = "cudaGraphLaunch"  # one launch that replays a whole CUDA graph of kernels
KERNEL_LAUNCH = "kernel launches"  # every kernel launch call (cudaLaunchKernel, cuLaunchKernel[Ex], ...)
BESIDES_GEMMS = "besides GEMMs"  # expect_kernels(BESIDES_GEMMS, ...) in a phase: every kernel not of the gemm family
PHASE_ONLY = {("launch", KERNEL_LAUNCH), ("launch", GRAPH_LAUNCH), ("kernel", BESIDES_GEMMS)}  # counted per phase


@dataclass(frozen=True)
class Expect:
    """One line of a guess: how many of something appear in each profiled step."""

    kind: str  # "kernel", "cpu_op", "memcpy" or "launch"
    key: str  # kernel family (or a regex on kernel names), aten op, or runtime/driver call
    count: int
    why: str
    at_least: bool = False

    @property
    def needs_gpu(self) -> bool:
        return self.kind != "cpu_op"

    @property
    def title(self) -> str:
        if self.kind == "kernel" and self.key == ANY:
            name = "kernels in all"
        elif self.kind == "kernel":
            name = f"{self.key} kernels" if self.key in dict(FAMILIES) else f"kernels /{self.key}/"
        elif self.kind == "memcpy":
            name = f"{self.kind} on the GPU"
        else:
            name = self.key
        return name

    def observe(self, step: Step) -> int:
        """How many this step shows."""
        if (self.kind, self.key) in PHASE_ONLY:
            raise SuiteError(self.blind())
        if self.kind == "kernel":
            if self.key == ANY:
                return len(step.kernels)
            if self.key in dict(FAMILIES) or self.key == "other":
                return sum(k.family == self.key for k in step.kernels)
            return sum(bool(re.search(self.key, k.name, re.I)) for k in step.kernels)
        if self.kind == "memcpy":
            return len(step.memcpy)
        if self.kind == "cpu_op":
            return step.cpu_ops[self.key]
        if self.kind == "launch":
            return step.calls(self.key)
        raise ValueError(f"unknown guess kind {self.kind!r}")

    def blind(self) -> str:
        """Why this line, a phase's count outside `in_phase`, can observe nothing."""
        return (f"the guess line '{self.title}' counts one phase's work, so on a whole step it observes "
                "nothing: wrap it in in_phase(...)")  # fmt: skip

    def holds(self, seen: int) -> bool:
        return seen >= self.count if self.at_least else seen == self.count


def expect_kernels(family: str, count: int, why: str, at_least: bool = False) -> Expect:
    """Guess `count` kernels of `family` (see FAMILIES; "any" for all) or whose name matches the regex `family`."""
    return Expect("kernel", family, count, why, at_least)


def expect_op(name: str, count: int, why: str, at_least: bool = False) -> Expect:
    """Guess `count` calls of the CPU op `name` (e.g. 'aten::addmm'); 0 means it must not appear."""
    return Expect("cpu_op", name, count, why, at_least)


def expect_memcpy(count: int, why: str) -> Expect:
    """Guess `count` device copies (gpu_memcpy) per step."""
    return Expect("memcpy", "memcpy", count, why)


def expect_launches(call: str, count: int, why: str, at_least: bool = False) -> Expect:
    """Guess `count` runtime/driver calls starting with `call` (cudaLaunchKernel, cuLaunchKernelEx, ...)."""
    return Expect("launch", call, count, why, at_least)


@dataclass(frozen=True)
class PhaseExpect(Expect):
    """A guess line about one phase of the step (its record_function label inside the step's label)."""

    phase: str = ""

    @property
    def title(self) -> str:
        if self.kind == "kernel" and self.key == BESIDES_GEMMS:
            return f"{self.phase}: kernels {BESIDES_GEMMS}"
        return f"{self.phase}: {super().title}"

    def observe(self, step: Step) -> int:
        phase = step.phase(self.phase)
        if self.kind == "launch":
            return phase.graph_launches if self.key == GRAPH_LAUNCH else phase.kernel_launches
        if self.kind == "kernel" and self.key == BESIDES_GEMMS:
            return sum(op.category == "kernel" and op.family != "gemm" for op in phase.gpu)
        only = Step(step.number, step.start_us, step.dur_us, phase.cpu_us, phase.cpu_ops, phase.gpu)
        return Expect.observe(self, only)


def in_phase(phase: str, *lines: Expect) -> list[Expect]:
    """The guess `lines` (expect_kernels, expect_op, ...), each about phase `phase` of the step only."""
    return [PhaseExpect(**{**vars(line), "phase": phase}) for line in lines]


def expect_kernel_launches(count: int, why: str, at_least: bool = False) -> Expect:
    """Guess `count` kernel launches (any launch API, graph launches not included), for one phase (`in_phase`)."""
    return Expect("launch", KERNEL_LAUNCH, count, why, at_least)


def expect_graph_launches(count: int, why: str) -> Expect:
    """Guess `count` CUDA graph launches (cudaGraphLaunch), each replaying a whole graph of kernels, for one
    phase (`in_phase`)."""
    return Expect("launch", GRAPH_LAUNCH, count, why)


@dataclass(frozen=True)
class Verdict:
    expect: Expect
    seen: list[float] | None  # one count per profiled step (per call: calls_per_step); None when not checked
    calls: int = 1  # the label's calls the one step holds (a loop without a schedule): `seen` is per call

    @property
    def checked(self) -> bool:
        return self.seen is not None

    @property
    def matched(self) -> bool:
        return self.seen is not None and all(self.expect.holds(n) for n in self.seen)


def calls_per_step(trace: Trace) -> int:
    """How many calls of the step's label the trace's one step holds where it has no ProfilerStep#N (a loop
    without `schedule=` records every step as one); 1 for a trace with steps or without the label."""
    if not trace.whole_trace or not trace.label:
        return 1
    return max(1, len(trace.tree.named(trace.label, LABEL)))


def check_guess(trace: Trace, guess: list[Expect]) -> list[Verdict]:
    """Compare each guess line with every profiled step; GPU lines go unchecked on a CPU-only trace. A trace
    without steps whose one step holds N calls of the label is checked per call: its counts divided by N.

    A line that can observe nothing (a phase's count, outside `in_phase`) is refused, on the CPU too."""
    blind = [e for e in guess if (e.kind, e.key) in PHASE_ONLY and not isinstance(e, PhaseExpect)]
    if blind:
        raise SuiteError(blind[0].blind())
    calls = calls_per_step(trace)

    def seen(e: Expect) -> list[float] | None:
        if e.needs_gpu and not trace.has_gpu:
            return None
        return [e.observe(s) / calls if calls > 1 else e.observe(s) for s in trace.steps]

    return [Verdict(e, seen(e), calls) for e in guess]


def _count(n: float) -> str:
    """A count as printed: 1, or 1.2 for a per-call average that is not whole."""
    return str(int(n)) if n == int(n) else f"{n:.3g}"


NOTE_MIN = 30  # the fewest columns a guess line's note wraps in beside its head; with less it goes under it


def even_wrap(text: str, width: int) -> list[str]:
    """`text` wrapped at word boundaries within `width`, in as few lines as that takes, the lines as even as they
    can be: the last one is never a word left alone while the lines before it could share theirs."""
    lines = textwrap.wrap(text, width)
    if len(lines) <= 1:
        return lines
    for narrower in range(math.ceil(len(text) / len(lines)), width):
        even = textwrap.wrap(text, narrower)
        if len(even) == len(lines):
            return even
    return lines


def note_lines(head: str, note: str) -> list[str]:
    """A guess line: `head` (mark, what, guess, trace) then its `note`, wrapped evenly under itself within TEXT_WIDTH
    (even_wrap); where the head leaves it under NOTE_MIN columns, the note goes on the lines below, indented."""
    room = TEXT_WIDTH - len(head)
    if len(note) <= room or room >= NOTE_MIN:
        why = even_wrap(note, max(room, 1)) or [""]
        return [head + why[0], *(" " * len(head) + more for more in why[1:])]
    return [head.rstrip(), *("      " + more for more in even_wrap(note, TEXT_WIDTH - 6))]


def format_verdicts(
    verdicts: list[Verdict], trace: Trace, title: str = "guess vs trace", gpu_work: bool = True
) -> list[str]:
    """Guess vs trace, a line each, then (with `gpu_work`) the kernels one step launched, or why there are none."""
    numbers = [s.number for s in trace.steps]
    steps = ", ".join(f"#{n}" for n in numbers) if len(numbers) <= 5 else f"#{numbers[0]} to #{numbers[-1]}"
    calls = verdicts[0].calls if verdicts else 1
    if calls > 1:
        lines = [f"{title} (per call of {trace.label!r}: {calls} calls in the one recorded step, counts ÷ {calls})"]
        lines += textwrap.wrap(
            "no ProfilerStep#N in this trace (the loop has no schedule=?): every call of the loop is in one "
            "recording, so each count is the recording's divided by its calls",
            TEXT_WIDTH, initial_indent="  ", subsequent_indent="  ",
        )  # fmt: skip
    else:
        lines = [f"{title} (per profiled step; steps {steps})"]
    if not trace.has_gpu:
        lines.append("  on the CPU: only the CPU-op lines can be checked; GPU lines are shown, not checked")
    width = max((len(v.expect.title) for v in verdicts), default=10)
    for v in verdicts:
        e = v.expect
        want = f"{'>=' if e.at_least else ''}{e.count}"
        if not v.checked:
            mark, seen = "[ -- ]", "n/a"
        else:
            mark = "[ ok ]" if v.matched else "[MISS]"
            uniq = sorted(set(v.seen))
            if len(uniq) == 1:
                seen = _count(uniq[0])
            elif len(v.seen) <= 5:
                seen = "/".join(_count(n) for n in v.seen)
            else:
                seen = f"{_count(uniq[0])}..{_count(uniq[-1])}"
        head = f"  {mark} {e.title:<{width}}  guess {want:>4}  trace {seen:>5}   "
        lines += note_lines(head, e.why)
    missed = [v for v in verdicts if v.checked and not v.matched]
    checked = sum(v.checked for v in verdicts)
    if missed:
        lines.append(
            f"  >>> {len(missed)} of {checked} checked guesses did not match the trace: "
            "the most interesting thing on this screen <<<"
        )
    elif verdicts:
        lines.append(f"  all {checked} checked guesses match the trace")
    if not gpu_work:
        return lines
    step = trace.steps[0]
    if trace.has_gpu:
        lines.append(f"GPU work of step #{step.number}, in launch order:")
        lines += textwrap.wrap(f"({LAUNCH_LEGEND})", TEXT_WIDTH, initial_indent="  ", subsequent_indent="   ")
        cells = [
            [str(i), f"{op.us:.1f}", op.family, *launch_cells(op, trace.sm), short_name(op.name, 70)]
            for i, op in enumerate(step.gpu, 1)
        ]
        headers = ["#", "µs", "family", *LAUNCH_HEADERS, "kernel"]
        lines += ["  " + line for line in text_table(headers, cells, {"family", "kernel"}).splitlines()]
    else:
        lines.append("no GPU lane in this trace (CPU run): no kernels to list")
    return lines
