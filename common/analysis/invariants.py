"""The invariants a Diagnosis keeps, checked in one pass before anything prints: a broken one is a note, never a crash.

Issue 46's list, each checked on the figures the diagnosis holds and on the lines it prints (its verdict, its rules):

- every share is of the window it names: each budget's parts lie in its window and add up to it; no share is over
  100%; a time "of the" window is no longer than it; each window the verdict names is the median step's or its
  steady state's;
- every figure in a line comes from the same step: the verdict's launches and longest gap are the median step's,
  and no time of that step's clause is longer than its window; the host wait's causes add up to no more than its
  host wait;
- no rate is over its peak: no "N% of peak" above 100;
- a device not read gives no bound: a trace with events of a device the reader does not model (trace.devices) has
  the bound "—";
- a wait is never called work: no time of a sync (a call that blocks until the GPU catches up) is in the median
  step's "launches", "CPU op" or "no recorded op" causes.

The pass reads what the diagnosis found, never the trace's events again: its budgets (one per step), the median
step's host-wait gaps and the syncs overlapping them (a binary search each), and the printed lines.
"""

from __future__ import annotations

import math
import os
import re

from common.analysis.budget import Budget
from common.analysis.diagnosis import Diagnosis
from common.reader.model import Trace, median_index
from common.units import human_time

STRICT = "PROFILING_STRICT_CHECKS"  # set (to anything but "" or "0"): a broken invariant raises (the tests set it)
WORK = ("launches", "CPU op", "no recorded op")  # the host wait's causes that are the CPU's own work
_TIME = r"(\d[\d,]*(?:\.\d+)?) (µs|ms|s)\b"
_SCALE = {"µs": 1.0, "ms": 1e3, "s": 1e6}
_WINDOW = re.compile(rf"(?:\bthe|'s) {_TIME} (?:steady state|step|window|iteration|GPU window)\b")
_PART_OF = re.compile(rf"{_TIME} of the {_TIME}")
_SHARE = re.compile(r"(\d[\d,]*(?:\.\d+)?)% (of peak)?")
_LAUNCHES = re.compile(r"\), (\d[\d,]*) launch(?:es)?\b")
_LONGEST = re.compile(rf"longest gap {_TIME}")
_CAUSES = re.compile(r"of the host wait per (?:step|window|iteration), (.*?) → try")


class InvariantError(AssertionError):
    """A Diagnosis broke an invariant (raised only under PROFILING_STRICT_CHECKS, as in the tests)."""


def _us(value: str, unit: str) -> float:
    return float(value.replace(",", "")) * _SCALE[unit]


def _slack(us: float) -> float:
    """How far a figure printed to three significant figures may lie from the one it stands for, µs."""
    return 0.006 * abs(us) + 0.01


def _budget_parts(b: Budget, what: str, whole: bool) -> list[str]:
    """The parts of `b` that lie outside its window or do not add up to it; with `whole`, its compute, copies and
    communication too (worked out from the timeline when first read: only the median and its steady state)."""
    out = []
    tol = 1e-6 * abs(b.span) + 1e-3
    figures = {"busy": b.busy, "host wait": b.host_wait, "kernel wait": b.kernel_wait, "other wait": b.other_wait}
    if not math.isfinite(b.span) or b.span < 0:
        return [f"{what}'s window is {b.span!r} µs"]
    for name, value in figures.items():
        if not (math.isfinite(value) and -tol <= value <= b.span + tol):
            out.append(f"{what}'s {name} {human_time(value)} is not within its {human_time(b.span)} window")
    if abs(b.busy + b.idle - b.span) > tol:
        out.append(f"{what}'s busy {human_time(b.busy)} and idle {human_time(b.idle)} do not add up to its "
                   f"{human_time(b.span)} window")  # fmt: skip
    if whole:
        parts = {"compute": b.compute, "memcpy/memset": b.non_compute, "exposed communication": b.comm_exposed}
        for name, value in {**parts, "communication": b.comm}.items():
            if not (math.isfinite(value) and -tol <= value <= b.busy + tol) and name != "communication":
                out.append(f"{what}'s {name} {human_time(value)} is not within its {human_time(b.busy)} busy")
        if b.comm_hidden < -tol:
            out.append(f"{what}'s hidden communication is {human_time(b.comm_hidden)}")
        if abs(sum(parts.values()) - b.busy) > tol:
            out.append(f"{what}'s compute, memcpy/memset and exposed communication do not add up to its busy")
    return out


def _budget_holds(b: Budget) -> bool:
    """Whether _budget_parts(b, ..., whole=False) finds nothing, without its lines: the same tests, a step each. A
    figure within [-tol, span + tol] of a finite span is finite too."""
    span = b.span
    if not (math.isfinite(span) and span >= 0):
        return False
    tol, busy = 1e-6 * abs(span) + 1e-3, b.busy
    high = span + tol
    return (
        -tol <= busy <= high
        and -tol <= b.host_wait <= high
        and -tol <= b.kernel_wait <= high
        and -tol <= b.other_wait <= high
        and abs(busy + b.idle - span) <= tol
    )


def _shares(lines: list[str]) -> list[str]:
    """No share over 100%, no rate over its peak, no time longer than the window it is "of"."""
    out = []
    for line in lines:
        for share in _SHARE.finditer(line):
            value = float(share.group(1).replace(",", ""))
            if value > 100.5:
                what = "a rate over its peak" if share.group(2) else "a share over its whole"
                out.append(f"{what}: {share.group(0).strip()} in {line[:60]!r}")
        for part in _PART_OF.finditer(line):
            x, whole = _us(*part.group(1, 2)), _us(*part.group(3, 4))
            if x > whole + _slack(whole):
                out.append(f"a part longer than its whole: {part.group(0)!r}")
    return out


def _step_clause(verdict: str) -> str:
    """The part of a verdict that speaks of the median step: without the one-time costs said before or after it."""
    if verdict.startswith("one-time costs hold"):
        if "; the steady state: " not in verdict:
            return ""
        verdict = verdict.split("; the steady state: ", 1)[1]
    return verdict.split("; one-time, not counted in the bound:", 1)[0]


def _same_step(trace: Trace, d: Diagnosis, m: Budget, steady: Budget) -> list[str]:
    """The verdict's windows are the median step's (or its steady state's), its launches and longest gap that
    step's own, its times within that step, and its host wait's causes within its host wait."""
    out = []
    clause = _step_clause(d.verdict)
    named = {human_time(m.span), human_time(steady.span)}
    for window in _WINDOW.finditer(clause):
        if f"{window.group(1)} {window.group(2)}" not in named:
            out.append(f"a window other than the median step's: {window.group(0)!r} (it is {human_time(m.span)})")
    for value, unit in re.findall(_TIME, clause):
        if _us(value, unit) > m.span + _slack(m.span):
            out.append(f"{value} {unit} in a line of the {human_time(m.span)} median step: from another step")
    i = next((k for k, b in enumerate(d.budgets) if b is m), None)
    if i is None or len(d.budgets) != len(trace.steps):
        return [*out, "the median budget is not one step's"]
    if i != median_index([b.span for b in d.budgets]):
        out.append(f"the budget of step #{trace.steps[i].number} is not the median step's")
    step = trace.steps[i]
    for found in _LAUNCHES.finditer(clause):
        launches = int(found.group(1).replace(",", ""))
        if launches != step.launches + step.graph_launches:
            out.append(f"{launches} launches, where the median step makes {step.launches + step.graph_launches}")
    for found in _LONGEST.finditer(clause):  # the steady state's own, where one-time costs are left out
        if f"{found.group(1)} {found.group(2)}" != human_time(steady.longest_gap):
            out.append(f"{found.group(0)!r}, where the median step's is {human_time(steady.longest_gap)}")
    for found in _CAUSES.finditer(clause):
        said = sum(_us(value, unit) for value, unit in re.findall(_TIME, found.group(1)))
        if said > steady.host_wait + _slack(said):
            out.append(f"{human_time(said)} of host-wait causes in a {human_time(steady.host_wait)} host wait")
    return out


def _waits_as_work(trace: Trace, d: Diagnosis, m: Budget) -> list[str]:
    """No sync's time among the causes that are work: of the median step's host-wait gaps, those causes hold no
    more than the time outside every sync."""
    if not d.causes:
        return []
    synced = 0.0
    for gap in m.gaps:
        if gap.kind != "host" or gap.end <= gap.start:
            continue
        spans = sorted(
            (max(n.start, gap.start), min(n.end, gap.end)) for n in trace.tree.overlapping(gap.start, gap.end, "sync")
        )
        reach = gap.start
        for start, end in spans:
            start = max(start, reach)
            if end > start:
                synced += end - start
                reach = end
    total = sum(d.causes.values())
    work = sum(us for (cause, _), us in d.causes.items() if cause in WORK)
    if work > total - synced + 1e-6 * total + 1e-3:
        return [f"a wait called work: {human_time(work - (total - synced))} of a sync among "
                f"{', '.join(WORK)}"]  # fmt: skip
    return []


def check_invariants(trace: Trace, d: Diagnosis) -> list[str]:
    """What `d` (common.analysis.diagnosis.diagnose of `trace`) says against the invariants: one line each; []
    where it keeps them all."""
    out: list[str] = []
    if trace.devices and d.bound != "—":
        out.append(f"a bound ({d.bound}) for a trace of {', '.join(trace.devices)}, a device the reader does not read")
    if not all(map(_budget_holds, d.budgets)):  # the lines only where some budget breaks them: a step each
        numbers = [s.number for s in trace.steps] if len(trace.steps) == len(d.budgets) else range(len(d.budgets))
        pairs = zip(numbers, d.budgets, strict=True)
        broken = [line for n, b in pairs for line in _budget_parts(b, f"step #{n}", whole=False)]
        out += broken[:3]  # the first few: one broken budget or a thousand, the note stays a line
    m = d.median
    if m is not None:
        steady = d.steady or m
        if steady.span > m.span + 1e-6 * m.span:
            out.append(f"a steady state ({human_time(steady.span)}) longer than its step ({human_time(m.span)})")
        out += _budget_parts(m, "the median step", whole=True)
        if steady is not m:
            out += _budget_parts(steady, "the steady state", whole=True)
        if d.budgets:
            out += _same_step(trace, d, m, steady)
            out += _waits_as_work(trace, d, m)
    lines = [d.verdict, *(line for rule in d.rules for line in (rule.fix, *rule.evidence))]
    return out + _shares(lines)


def _strict() -> bool:
    return os.environ.get(STRICT, "") not in ("", "0")


def invariant_notes(trace: Trace, d: Diagnosis) -> list[str]:
    """The one note a broken invariant of `d` makes ("internal check: ..."), or []: a user's run goes on. Under
    PROFILING_STRICT_CHECKS (the tests), a broken invariant, or the check failing, raises InvariantError."""
    try:
        broken = check_invariants(trace, d)
    except Exception as exc:  # the check must never stop a run: it says it failed
        if _strict():
            raise
        return [f"internal check: the check itself failed ({type(exc).__name__}: {exc})"]
    if broken and _strict():
        raise InvariantError(f"{trace.name}: " + "; ".join(broken))
    return [f"internal check: {'; '.join(broken)}"] if broken else []
