"""What a script's profiler loop handed torch, read back from the profile object: the schedule (from what the
schedule function does, step by step), the options, the record_function label and the steps recorded.

The loop in the script is the only copy of these: edit `schedule(...)`, the label or an option there and the
suite follows, since it never reads them from the flags.
"""

from __future__ import annotations

import re
import textwrap
from collections import Counter
from dataclasses import dataclass

import torch
from torch.profiler import ProfilerAction

from common.analysis.tables import TEXT_WIDTH

OPTIONS = ("record_shapes", "profile_memory", "with_stack", "with_flops", "with_modules")
MAX_CYCLES = 1000  # a schedule still recording after this many cycles repeats forever (repeat=0)
MAX_CYCLE_STEPS = 10_000_000  # a first cycle longer than this is not read (a second or so of calls)
CYCLE_ORDER = (ProfilerAction.NONE, ProfilerAction.WARMUP, ProfilerAction.RECORD, ProfilerAction.RECORD_AND_SAVE)
STEP_NAME = re.compile(r"ProfilerStep(#\d+|\*)$")  # prof.events() names every step ProfilerStep*


@dataclass(frozen=True)
class Schedule:
    """torch.profiler.schedule's numbers: steps skipped, traced but dropped, recorded; cycles (0: no end)."""

    wait: int = 1
    warmup: int = 1
    active: int = 3
    repeat: int = 1

    @property
    def steps(self) -> int:
        """The steps of all its cycles (wait + warmup + active per cycle); a repeat=0 schedule counts one."""
        return (self.wait + self.warmup + self.active) * max(self.repeat, 1)

    @property
    def is_default(self) -> bool:
        return self == Schedule()

    def tag_part(self) -> str:
        """`w0u0a20` for a schedule other than the default (and `r2` for more cycles), '' for the default."""
        if self.is_default:
            return ""
        return f"w{self.wait}u{self.warmup}a{self.active}" + (f"r{self.repeat}" if self.repeat != 1 else "")

    def describe(self) -> str:
        """As the loop writes it: `wait=1, warmup=1, active=3, repeat=1` (repeat=0: cycles until the loop ends)."""
        return f"wait={self.wait}, warmup={self.warmup}, active={self.active}, repeat={self.repeat}"


def read_schedule(prof: torch.profiler.profile) -> Schedule | None:
    """The schedule `prof` runs, from the actions its schedule function returns step by step: the first cycle's
    NONE, WARMUP and RECORD steps, then how many cycles record. None for a profile without a schedule (it
    records every step) and for a schedule function of another shape."""
    if not prof.record_steps:
        return None
    fn = prof.schedule
    counts = dict.fromkeys(CYCLE_ORDER, 0)
    at = 0  # where in CYCLE_ORDER the first cycle has got to: its actions come in that order, each kind in a run
    for step in range(MAX_CYCLE_STEPS):
        action = fn(step)
        if action not in counts or CYCLE_ORDER.index(action) < at:
            return None
        at = CYCLE_ORDER.index(action)
        counts[action] += 1
        if action == ProfilerAction.RECORD_AND_SAVE:
            break
    else:
        return None
    wait, warmup = counts[ProfilerAction.NONE], counts[ProfilerAction.WARMUP]
    active = counts[ProfilerAction.RECORD] + 1
    length = wait + warmup + active
    cycles = 1
    while cycles < MAX_CYCLES and fn(length * (cycles + 1) - 1) == ProfilerAction.RECORD_AND_SAVE:
        cycles += 1
    return Schedule(wait, warmup, active, 0 if cycles == MAX_CYCLES else cycles)


def parent_of(event: object) -> object | None:
    """The op or label an event of `prof.events()` runs inside, past the Python frames that with_stack=True puts
    between them (a ProfilerStep's own parent is then `<module>`, not None)."""
    parent = event.cpu_parent
    while parent is not None and getattr(parent, "is_python_function", False):
        parent = parent.cpu_parent
    return parent


def read_steps(prof: torch.profiler.profile) -> tuple[int, str | None]:
    """The ProfilerStep#N spans this cycle recorded (0 without a schedule), and the record_function label directly
    inside them (the most common one, the longest of those tied: train_step, not the forward inside it; the
    top-level label without a schedule): one pass over `prof.events()`, whose cost grows with the steps recorded."""
    counts: Counter = Counter()
    total: Counter = Counter()
    steps = 0
    for event in prof.events():
        if not event.is_user_annotation:  # an op: most events (a ProfilerStep#N is a record_function's too)
            continue
        name, parent = event.name, parent_of(event)
        if STEP_NAME.match(name):
            steps += parent is None
        elif (parent is None and not prof.record_steps) or (parent is not None and STEP_NAME.match(parent.name)):
            counts[name] += 1
            total[name] += event.cpu_time_total
    return steps, max(counts, key=lambda n: (counts[n], total[n]), default=None)


def read_options(prof: torch.profiler.profile) -> dict[str, bool]:
    """The profile's options as the loop set them (record_shapes, profile_memory, with_stack, ...)."""
    return {name: bool(getattr(prof, name, False)) for name in OPTIONS}


# The words an option adds to the tag where the loop sets it otherwise than the scripts do (record_shapes=True,
# the rest off): each changes what the trace holds, so its trace sits beside the plain run's instead of over it.
OPTION_WORDS = {
    "record_shapes": (True, "noshapes"),
    "profile_memory": (False, "memory"),
    "with_stack": (False, "stack"),
    "with_flops": (False, "flops"),
    "with_modules": (False, "modules"),
}


def options_tag_part(options: dict[str, bool]) -> str:
    """`memory` for profile_memory=True (--memory), `stack` for with_stack=True, ..., joined by `_`; '' for the
    scripts' own options."""
    return "_".join(word for name, (usual, word) in OPTION_WORDS.items() if options.get(name, usual) != usual)


def describe_loop(
    schedule: Schedule | None, options: dict[str, bool], label: str | None, recorded: int, unscheduled: int = 0
) -> str:
    """What the profiler ran, within TEXT_WIDTH: the schedule, the steps recorded, the options set, the label.
    `unscheduled`: the loop's prof.step() calls where the profile has no schedule (it records them all as one)."""
    how = f"schedule({schedule.describe()})" if schedule else "a schedule of its own" if recorded else "no schedule"
    steps = f"{recorded} steps recorded"
    if how == "no schedule":
        steps = f"all {unscheduled} steps in one recording (no ProfilerStep#N)" if unscheduled else "one recording"
    on = [name for name, value in options.items() if value]
    named = f"label {label!r}" if label else "no record_function label"
    text = f"profiled: {how}, {steps}, {', '.join(on) or 'no options'}, {named}"
    return "\n".join(textwrap.wrap(text, TEXT_WIDTH, subsequent_indent="  "))
