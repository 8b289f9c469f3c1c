"""The suite's lines around a script's torch.profiler loop: the guard before it and the tail after it.

    with recording(run, tag, work) as rec:                 # memory watch, files written all or none
        with profile(..., on_trace_ready=rec.save) as prof:
            ...                                            # the loop, in torch's own words
    return finish(rec, guess(...), out, expected, step=lambda: fn(x))

The loop is the truth: `rec.save` reads the schedule, the options and the label from the profile object it is
handed (common.harness.loop), never from the flags, so an edited loop runs as edited. Give `on_trace_ready` a handler
of your own (`torch.profiler.tensorboard_trace_handler(dir)`) and the loop runs on plain torch: the suite then
checks the output and says in one line that it has no trace to report on. Ctrl-C is handled process-wide by
`common.interrupts` (installed by `setup`), so nothing of the suite is needed inside the loop.

A Ctrl-C (SIGTERM, SIGHUP) while the loop records its steps stops it at the end of the step in progress, and the
steps recorded are kept: the guard hooks `prof.step()` for the profiles whose `on_trace_ready` is `rec.save`
(`stepping`), where a first signal is taken before torch's step runs, and the exception on its way out through the
profile block has torch hand `rec.save` what was recorded. The watchdog of common.interrupts says so at once
(`Recording.acknowledge`); the trace and its table say "stopped by Ctrl-C after 2 of 3 profiled steps", and the
run reports on them, without the output check and the guess (the script's lines after the loop never run), and
exits 130.
"""

from __future__ import annotations

import ast
import contextlib
import functools
import inspect
import math
import signal
import sys
import textwrap
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

import torch

from common.analysis.tables import TEXT_WIDTH
from common.cli import Interrupted, fit, on_exit, shown
from common.harness.bench import time_unprofiled
from common.harness.checks import compare
from common.harness.estimate import (
    Progress,
    Said,
    announce_compile,
    checked_lines,
    estimate,
    estimate_lines,
    profiler_imports,
    progress,
    progress_after,
)
from common.harness.export import TraceFiles
from common.harness.guess import Expect, check_guess
from common.harness.loop import (
    Schedule,
    describe_loop,
    options_tag_part,
    read_options,
    read_schedule,
    read_steps,
)
from common.harness.memory import MemoryWatch
from common.harness.ranks import StopTogether
from common.harness.report import exit_code, print_files, print_report, print_unprofiled
from common.harness.runtime import REPO_ROOT, Run
from common.interrupts import (
    acknowledge_now,
    acknowledge_with,
    atomic,
    first_signal,
    hold_for_step_end,
    signal_name,
    signal_waiting,
    take_at_step_end,
)
from common.physics import Work
from common.reader.build import read_trace
from common.units import human_time

WARMUP_CALLS = 5  # calls of the step before the profiler starts, with --warmup
SAY_LEFT_ABOVE_S = 1.0  # a step at least this long: the line acknowledging a Ctrl-C says how long it has left
RECORDING = (torch.profiler.ProfilerAction.RECORD, torch.profiler.ProfilerAction.RECORD_AND_SAVE)
# A stopped rank's write (torch's collection, its export, the suite's table: common.harness.trace_table) against the
# time its recorded steps took: 2.8-3.6 for 300 to 3,000 of 06's tiny CPU steps, two gloo ranks on the 2-core machine
# (benchmarks/ddp_stop_times.py; docs/files-and-signals.md)
WRITE_PER_RECORDED_S = 3.5
MTIME_SLACK_S = 2.0  # a file's mtime runs behind time.time() (the kernel's coarse clock, a file system's 2 s)


class Recording:
    """One profiled run: its files (one set per profiler cycle), its memory watch, and the writer torch.profiler
    calls."""

    def __init__(self, run: Run, tag: str, work: Work, said: Said, meta: dict | None = None) -> None:
        self.run, self.tag, self.work, self.said, self.meta = run, tag, work, said, meta or {}
        self.cycles: list[TraceFiles] = []  # what each save wrote: the first is the one reported on
        self.loop = ""  # what the profiler ran, read back from it by the first save (common.harness.loop)
        self.schedule: Schedule | None = None
        self.recorded = 0
        self.watch = MemoryWatch(run.device, snapshot=run.memory)
        self.progress: Progress | None = None  # the progress line of a long run, while the guard is open
        self.checked = False  # the output matched the reference: the files are kept from here on
        self.started = time.time()  # a handler of the loop's own writes its traces after this (own_handler_lines)
        self.grad = torch.is_grad_enabled()  # the mode the profiled block runs in: --bench times the step in it
        guess = said.estimate
        self.unchecked = guess is not None and guess.step_s is not None  # its estimate is still to check (check)
        self.loop_started: float | None = None  # time.monotonic() as the profiler started, and as each step ended
        self.step_times: list[float] = []  # (step_clock); a compiled run's first call compiles: its second checks
        self.calls_to_check = 2 if run.compiled else 1
        self.stepped = threading.Event()  # the call to check has ended (or the recording has)
        self.took: float | None = None
        self.prof: torch.profiler.profile | None = None  # the loop's profile, from its start (stepping)
        self.step_started: float | None = None  # time.monotonic() when the step in progress began
        self.last_step_s: float | None = None  # how long the step before it took
        self.holding = False  # a first signal waits for the end of the step in progress: one is being recorded
        self.writing = False  # rec.save is writing the trace
        self.stop: int | None = None  # the signal that ended the loop at the end of a recorded step
        self.stop_step = ""  # which step that was: "step 998 of 100,000"
        self.stopped = ""  # what the trace's metadata and table say of a signal: "stopped by Ctrl-C after ..."
        self.together: StopTogether | None = None  # the ranks' agreement on the step a signal stops them after
        self.lock = threading.Lock()  # a step's end, and a signal noted in another thread, one after the other
        self.ended = 0  # steps of the loop ended (step_ends): the number of the step in progress, from 0
        self.proposed: int | None = None  # the step this rank proposed to stop after (StopTogether)
        self.stopped_by_peer = False  # the loop stopped on another rank's signal, none of this rank's
        self.recording_since: float | None = None  # time.monotonic() as the first recorded step began
        self.grace_told = False  # grace_note said its line

    @property
    def files(self) -> TraceFiles | None:
        """The first cycle's files, the ones the report reads; None until rec.save has written them."""
        return self.cycles[0] if self.cycles else None

    def keep(self) -> None:
        """The output is checked: rename its files into place (replacing an earlier run's), and from that
        moment they stay, whatever happens next (an interrupt while printing, another rank failing)."""
        with atomic():
            for files in self.cycles:
                files.commit()
            self.checked = True

    def discard(self) -> None:
        """Remove every temporary written (an earlier run's files under the final names stay as they were)."""
        for files in self.cycles:
            files.discard()

    def discard_unchecked(self) -> None:
        """When the run ends (common.cli) before its output was checked, remove its temporaries."""
        if not self.checked:
            self.discard()

    def warm_up(self, step: Callable[[], object]) -> None:
        """Call `step` WARMUP_CALLS times before profiling (--warmup) and print what the first call cost.

        The first call pays for compilation (--compile), cuBLAS set-up and the allocator; the trace of a
        warm run shows none of that, and neither do the memory figures (the watch restarts after).
        """
        if self.progress:
            self.progress.what = "warm-up"
        if self.said.phases:
            print(f"warm-up: {WARMUP_CALLS} calls first, not profiled ...", flush=True)
        start = time.perf_counter()
        step()
        self._sync()
        first = time.perf_counter() - start
        if not self.run.compiled:  # an eager run's first call checks the estimate (a compiled one's compiles)
            self.check(first)
        start = time.perf_counter()
        step()
        self._sync()
        second = time.perf_counter() - start
        self.check(second)
        start = time.perf_counter()
        for _ in range(WARMUP_CALLS - 2):
            step()
        self._sync()
        rest = (second + time.perf_counter() - start) / (WARMUP_CALLS - 1)
        what = "compile + first call" if self.run.compiled else "first call"
        print(f"warm-up: {what} {human_time(first * 1e6)} wall, then {WARMUP_CALLS - 1} more at "
              f"{human_time(rest * 1e6)} wall each (not profiled)")  # fmt: skip
        if self.progress:
            self.progress.what = progress_what(self.said)
        self.say_steps()
        self.watch.start()

    def check(self, took_s: float) -> None:
        """Check the estimate against a call of the step that took `took_s` (its first, a compiled run's second),
        once: say what checked_lines says (a corrected estimate, a cheaper command for a long run), and a corrected
        estimate becomes the one the progress lines count against."""
        if not self.unchecked:
            return
        self.unchecked = False
        lines, corrected = checked_lines(self.run, self.said.estimate, took_s)
        for line in lines:
            print(line if "\n" in line else fit(line), flush=True)
        if corrected is not None and self.progress:
            self.progress.estimate_s = corrected

    def step_ended(self, at: float) -> None:
        """A step of the profiled loop ended at `at` (time.monotonic(); step_clock): the call that checks the
        estimate has ended once there are `calls_to_check` of them. Nothing is printed here, inside the loop: the
        checking thread of `recording` prints."""
        self.step_times.append(at)
        if len(self.step_times) == self.calls_to_check and self.loop_started is not None:
            before = self.step_times[-2] if len(self.step_times) > 1 else self.loop_started
            self.took = at - before
            self.stepped.set()

    def say_steps(self) -> None:
        """A longer run (its estimate said) says its profiled steps as they start, as it says its other phases."""
        if self.said.phases:
            steps = self.run.planned_steps
            print(f"the profiled steps ({steps} calls of the step, as the schedule asks) ...", flush=True)

    def _sync(self) -> None:
        if self.run.on_gpu:
            torch.cuda.synchronize(self.run.device)

    def step_begins(self, prof: torch.profiler.profile) -> None:
        """After torch's start() or step(): a step begins. While it is recorded, a first signal waits for its end."""
        self.prof, self.step_started = prof, time.monotonic()
        self.holding = bool(prof.record_steps) and prof.current_action in RECORDING
        if self.holding and self.recording_since is None:
            self.recording_since = self.step_started
        hold_for_step_end(self.holding)
        if not self.holding:
            take_at_step_end()  # nothing recorded is lost by stopping now (or the trace was just written)

    def step_ends(self, prof: torch.profiler.profile) -> None:
        """Before torch's step(): the step ends. A signal that came during it ends the loop here, outside torch's
        code; if the step was recorded, the exception has torch hand rec.save the steps recorded, this one too.
        Under torchrun, at the end of the step every rank agreed on (stop_together), not before."""
        if self.step_started is not None:
            self.last_step_s = time.monotonic() - self.step_started
        last = prof.current_action == torch.profiler.ProfilerAction.RECORD_AND_SAVE
        signum = signal_waiting() if self.together is None else self.stop_together(signal_waiting())
        if signum is not None and self.holding:
            self.stop, self.stop_step = signum, self.step_number(prof)
        if self.holding and (last or signum is not None):
            self.writing = True  # torch.profiler collects the steps' events (seconds for thousands), then rec.save
        if signum is not None and self.holding:
            acknowledge_now()  # said before torch's collection of the events, whether the watchdog got to it or not
        if signum is not None:  # the signal looked at above, and only it: one that lands after the look (the handler
            take_at_step_end(signum)  # holds it) is taken at the next step's end, with its stop noted, not here unnoted

    def stop_together(self, signum: int | None) -> int | None:
        """At a step's end under torchrun: the signal to stop on now, at the step every rank agreed on
        (StopTogether), or None to go on. No signal here or at another rank: a count, under a lock."""
        together = self.together
        assert together is not None
        with self.lock:
            if self.proposed is None and (signum is None or not self.holding):
                self.ended += 1
                return signum  # none, or one outside the recorded steps: taken now, as on one process
            ask = self.proposed is None  # a signal the watchdog has not passed on yet: proposed here
            if ask:
                self.proposed = self.ended
            step, proposed = self.ended, self.proposed
            self.ended += 1
        if ask:
            together.ask(signum)
        if step < together.stop_step(proposed):
            return None
        self.stopped_by_peer = signum is None  # another rank's signal: this one's stops it as if it came here
        return signum or together.signum or signal.SIGINT

    def proposal(self, signum: int | None = None) -> int | None:
        """The step this rank stops after at the least: the step in progress as the first signal (`signum`, from
        the watchdog) or another rank's request (None, from StopTogether's watcher) is noted; a signal outside the
        recorded steps is left to its usual path (taken at the next safe point), and proposes nothing."""
        with self.lock:
            if self.proposed is None and (signum is None or self.holding):
                self.proposed = self.ended
            proposed = self.proposed
        if signum is not None and proposed is not None and self.together is not None:
            self.together.ask(signum)
        return proposed

    def acknowledge(self, signum: int) -> str | None:
        """The line a first signal gets at once (from common.interrupts' watchdog thread, while the main thread
        runs on): the step the loop will stop after, and how long it has left where a step takes seconds; or that
        the trace's write goes on to its end. None elsewhere (the signal is taken at the next safe point) and on
        a rank other than 0 (rank 0 speaks for the run)."""
        if self.together is not None:
            self.proposal(signum)  # the other ranks asked to stop after the same step
        if self.meta.get("rank", 0) != 0:
            return None
        who = signal_name(signum)
        again = f"; {'Ctrl-C again' if who == 'Ctrl-C' else 'a second signal'} quits now, keeping no trace"
        if self.stop is not None and self.stopped_by_peer:  # stopping already, as another rank asked: nothing to say
            return None
        if self.stop is not None:  # the main thread took it at the step's end before this thread got to say so
            return f"{who}: stopping after this step ({self.stop_step}){again}{self.past_grace()}"
        with self.lock:
            writing, holding = self.writing, self.holding
        if writing:
            return f"{who}: letting the trace's write finish, then stopping{again}"
        prof, started, last = self.prof, self.step_started, self.last_step_s
        if not holding or prof is None or started is None:
            return None
        number = self.step_number(prof)
        left = ""
        if last is not None and last >= SAY_LEFT_ABOVE_S:
            spent = time.monotonic() - started
            left = f", about {human_time((last - spent) * 1e6)} left in it"
            if spent >= last:
                left = f", {human_time(spent * 1e6)} into it, longer than the {human_time(last * 1e6)} of the last"
        # under torchrun the ranks stop after the same step: this one, or the next where a rank is a step ahead
        after = "every rank after this step or the next" if self.together is not None else "after this step"
        return f"{who}: stopping {after} ({number}{left}){again}{self.past_grace()}"

    def past_grace(self) -> str:
        """Under torchrun, where the trace of the steps recorded so far may take longer to write than torchrun waits
        before it kills its ranks (its grace, 30 s unless raised), two lines more for the acknowledgement: how long,
        and how to keep such a trace next time. The write's time is guessed from the recording's: torch's collection
        and the suite's export of a step's events take WRITE_PER_RECORDED_S of each second that recording them took
        (06's tiny CPU steps; steps of long kernels or long ops take less to write than this guesses)."""
        together, since = self.together, self.recording_since
        if together is None or since is None:
            return ""
        guess = WRITE_PER_RECORDED_S * (time.monotonic() - since)
        if guess <= together.grace_s:
            return ""
        grace = f"{together.grace_s:g} s"
        if together.grace_settable:
            how = f"torchrun --shutdown-timeout {10 * math.ceil(guess / 5)} ..., or stop one rank: kill -INT <its pid>"
        else:  # torch before 2.12: torchrun's grace is fixed, but a signal to one rank stops every rank untimed
            how = "send the signal to one rank (kill -INT <its pid>), which no grace bounds"
        return (
            f"\n  the trace may take about {guess:.0f} s to write, more than the {grace} torchrun waits before it"
            f" kills its ranks\n  (their traces lost); next time: {how}"
        )

    def grace_note(self) -> str | None:
        """Under torchrun, on rank 0, once: that from here a signal to torchrun may leave more to write than torchrun
        waits before it kills its ranks (past_grace's guess), with the flag that covers every step the schedule
        records; None otherwise. The progress thread asks at each of its lines, so it is said before it is too late."""
        together, since, prof, schedule = self.together, self.recording_since, self.prof, self.schedule
        if together is None or since is None or prof is None or schedule is None or self.grace_told:
            return None
        if self.meta.get("rank", 0) != 0 or not self.holding:
            return None
        spent, recorded = time.monotonic() - since, prof.step_num - schedule.wait - schedule.warmup
        if WRITE_PER_RECORDED_S * spent <= together.grace_s or recorded < 1:
            return None
        self.grace_told = True
        every = WRITE_PER_RECORDED_S * spent / recorded * schedule.active  # the write of all the recorded steps
        grace = f"{together.grace_s:g} s"
        keep = f"torchrun --shutdown-timeout {10 * math.ceil(every / 5)} ... (all {schedule.active:,} steps)"
        if not together.grace_settable:
            keep = "a signal to one rank, kill -INT <its pid>, which no grace bounds"
        return (f"note: from here a Ctrl-C to torchrun may lose the traces: writing them may outlast the {grace} it"
                f" waits\n  before it kills its ranks; to keep them: {keep}")  # fmt: skip

    def step_number(self, prof: torch.profiler.profile) -> str:
        """The step in progress, as the acknowledgement says it: `step 3 of 5` in the schedule's recorded steps."""
        schedule = self.schedule
        if schedule is None:
            return f"step {prof.step_num + 1:,}"
        cycle = schedule.wait + schedule.warmup + schedule.active
        return f"step {prof.step_num % cycle - schedule.wait - schedule.warmup + 1:,} of {schedule.active:,}"

    def stopped_line(self) -> str:
        """What the trace and its table say of a signal that ended the run, as the trace is written: after how many
        of the schedule's steps, or that it came while the trace was being written; '' for none."""
        if self.stop is not None:
            of = f" of {self.schedule.active:,}" if self.schedule else ""
            return f"stopped by {signal_name(self.stop)} after {self.recorded:,}{of} profiled steps"
        signum = first_signal()
        if signum is not None and self.writing:
            return f"stopped by {signal_name(signum)} while the trace was written, after its {self.recorded:,} steps"
        return ""

    def save(self, prof: torch.profiler.profile) -> None:
        """`on_trace_ready`: write the cycle's trace and table, named and labelled as the profiler ran them.

        torch.profiler calls it at the end of each cycle of its schedule, and once more when the loop stops
        while recording. Stopped by an error, nothing is written; stopped by a signal at the end of a step
        (step_ends), the steps recorded are, and the trace says it stopped early. A signal during the write lets
        it finish, and the trace says so too. A second cycle (`repeat=2`) goes to `<tag>_cycle2.*`, beside the first.
        """
        if sys.exc_info()[0] is not None and self.stop is None:
            return
        with self.lock:
            self.writing, self.holding = True, False
        hold_for_step_end(False)
        try:
            self._save(prof)
        finally:
            # What the watchdog said of a signal (acknowledge reads `writing` under the lock) is what the run does:
            # one that came before this point, even after the files' last look at it, keeps the trace written
            with self.lock:
                if not self.stopped and self.cycles and first_signal() is not None:
                    self.stopped = self.stopped_line()
                self.writing = False

    def _save(self, prof: torch.profiler.profile) -> None:
        # A run a signal stopped reads its steps, label and table from the trace it exports (TraceFiles.write's
        # `counted`), not from torch's parse of every event: under torchrun it has 30 s before it is killed
        quick = self.stop is not None or first_signal() is not None
        schedule, (recorded, label) = read_schedule(prof), (0, None) if quick else read_steps(prof)
        first = not self.cycles
        unscheduled = 0 if prof.record_steps else prof.step_num

        def counted(steps: int, found: str | None) -> None:
            if first:
                self.recorded = steps
                self.loop = describe_loop(schedule, read_options(prof), found, steps, unscheduled)

        if first:
            self.schedule, self.recorded = schedule, recorded
            self.loop = describe_loop(schedule, read_options(prof), label, recorded, unscheduled)
        part = schedule.tag_part() if schedule else "custom" if prof.record_steps else "noschedule"
        options = options_tag_part(read_options(prof))  # profile_memory=True: `memory`, and so on
        tag = "_".join(w for w in (self.tag, part, options, "" if first else f"cycle{len(self.cycles) + 1}") if w)
        meta = {**self.meta, "steps": recorded, "schedule": schedule.describe() if schedule else None}
        files = TraceFiles(self.run, tag, label, self.work, meta)
        writing = "writing the trace" + (", then the reference" if self.said.reference_left else "")
        if self.progress:
            self.progress.what = writing
        if self.said.phases and first:  # a longer run's trace takes seconds to write: said as it starts
            print(f"{writing} ...", flush=True)
        memory = self.watch.stop(prof.step_num) if first else None
        self.recorded = recorded if first else self.recorded
        said = files.write(prof, memory, self.watch if first and self.run.memory and self.run.on_gpu else None,
                           self.stopped_line if first else str, counted if quick else None)  # fmt: skip
        self.stopped = said if first else self.stopped
        self.cycles.append(files)

    def stop_after_write(self) -> None:
        """A first signal after every cycle's trace was written, before the output was checked (during the
        reference): what was recorded is kept as a stop during the steps keeps it, the files saying so."""
        signum = first_signal()
        if signum is None:
            return
        of = f"all {self.recorded:,}" if self.recorded > 1 else f"its {self.recorded:,}"
        self.stopped = f"stopped by {signal_name(signum)} after {of} profiled steps, before the output check"
        for files in self.cycles:
            files.say_stopped(self.stopped)

    def report_stopped(self) -> None:
        """A signal ended the run after its trace was written (stopped_line): keep the files and report on them,
        saying what was skipped (the output check and the guess: the script's lines after the loop never ran)."""
        self.keep()
        print(self.loop)
        print(self.files.table)
        print(f"{self.stopped}: the output check, the guess and the report were skipped")
        print_files(self.cycles, self.run)
        print(f"read it with: uv run python -m common.summary {shown(str(self.files.json))}")


def own_handler_lines(scope: Iterable[object], since: float) -> list[str]:
    """What a run whose loop hands `on_trace_ready` a handler of its own prints instead of the report: whose
    handler it is, the traces it wrote since `since` (time.time()) where the handler says where it writes
    (torch's tensorboard_trace_handler(dir_name) keeps its folder), and how to read them with the summary.
    `scope`: the script's local values, where its `with profile(...) as prof` left the profile."""
    profiles = [v for v in scope if isinstance(v, torch.profiler.profile)]
    handler = getattr(profiles[0], "on_trace_ready", None) if profiles else None
    if profiles and handler is None:
        return ["the loop's profile has no on_trace_ready, so nothing exported its trace and the suite has no report:",
                "  give it on_trace_ready=rec.save, or call prof.export_chrome_trace(path) after the loop"]  # fmt: skip
    qualname = getattr(handler, "__qualname__", "") or type(handler).__name__
    torchs = getattr(handler, "__module__", "").startswith("torch.")  # torch's handler: name its factory
    name = qualname.split(".<locals>")[0] if torchs else qualname.rsplit(".", 1)[-1]
    folder = None
    if handler is not None and getattr(handler, "__code__", None) is not None:
        folder = inspect.getclosurevars(handler).nonlocals.get("dir_name")
    text = f"the loop's own on_trace_ready ({name}) got the trace: the suite wrote none and has no report on it"
    lines = textwrap.wrap(text, TEXT_WIDTH, subsequent_indent="  ")
    if not isinstance(folder, str):
        return [*lines, "  read the trace it wrote with: uv run python -m common.summary <file or folder>"]
    since -= MTIME_SLACK_S
    written = sorted(p for p in Path(folder).glob("*.json*") if p.is_file() and p.stat().st_mtime >= since)
    lines += [f"trace: {p} (written by {name})" for p in written] or [f"no trace written in {folder} by this run"]
    return [*lines, f"read it with: uv run python -m common.summary {folder}"]


def progress_what(said: Said) -> str:
    """What a progress line says the run is doing: its profiled steps, then the reference where it has one left to
    compute (05 and 06 have none: 05 makes it before the profiled steps, 06 checks against rank 0's weights)."""
    return "profiled steps, then the reference" if said.reference_left else "profiled steps"


def say_estimate(run: Run, work: Work, checked_first: bool = False, tag: str | None = None) -> Said:
    """Print the run's estimate (common.harness.estimate; only for a run of more than a few seconds) and return it
    with the time it was said, which the run's progress lines count from. `recording` calls it where the script
    did not; a script that computes its reference and one checked step before the recording (05) calls it first,
    with `checked_first`: the estimate counts both and is said before them. `tag`: the run's file stem, whose trace
    from an earlier run says a compiled graph may be in Inductor's cache."""
    profiler_imports()  # torch._inductor, which the profiler loads as it starts: said and paid before the run
    warmup = (WARMUP_CALLS if run.warm else 0) + checked_first
    estimated = estimate(run, work, warmup, backward=torch.is_grad_enabled(), tag=tag)
    lines = estimate_lines(run, work, estimated)
    for line in lines:
        print(line if "\n" in line else fit(line), flush=True)  # a command on lines of its own is fitted already
    left = work.has_reference and not checked_first
    return Said(estimated, time.monotonic(), printed=bool(lines), reference_left=left)


@contextlib.contextmanager
def step_clock(rec: Recording) -> Iterator[None]:
    """While open, note when a torch.profiler.profile starts and when each of its steps ends, for `rec`
    (Recording.step_ended): torch's own `start` and `step` wrapped, so the script's loop stays as written."""
    profile = torch.profiler.profile
    start, step = profile.start, profile.step

    def timed_start(prof: torch.profiler.profile) -> None:
        rec.loop_started = time.monotonic()
        start(prof)

    def timed_step(prof: torch.profiler.profile) -> None:
        rec.step_ended(time.monotonic())
        step(prof)

    profile.start, profile.step = timed_start, timed_step
    try:
        yield
    finally:
        profile.start, profile.step = start, step


@contextlib.contextmanager
def checking(rec: Recording) -> Iterator[None]:
    """A cold run's estimate checked against its first calls in the profiled loop (a warm run's warm-up checks it
    before): a thread waits for the call to end and prints the check, so nothing of the suite prints inside the
    loop; it is done before the block ends."""
    if rec.run.warm or not rec.unchecked:
        yield
        return

    def wait() -> None:
        rec.stepped.wait()
        if rec.took is not None:
            rec.check(rec.took)

    thread = threading.Thread(target=wait, name="estimate check", daemon=True)
    thread.start()
    try:
        with step_clock(rec):
            yield
    finally:
        rec.stepped.set()
        thread.join()


@contextlib.contextmanager
def recording(
    run: Run, tag: str, work: Work, meta: dict | None = None, said: Said | None = None
) -> Iterator[Recording]:
    """The guard around a script's profiler block: the run's estimate before it starts (say_estimate, unless the
    script `said` it already), a progress line while a long one goes on, the GPU memory watch over the steps, and
    no file of this run under a final name if anything in the block fails or is interrupted (an earlier run's
    files stay as they were). `meta`: more entries for the trace's `suite` metadata (a rank, say)."""
    said = said or say_estimate(run, work, tag=tag)
    rec = Recording(run, tag, work, said, meta)
    rec.together = StopTogether.current  # under torchrun: the ranks stop after the same step
    if rec.together is not None:
        rec.together.on_request = lambda _: rec.proposal()
    on_exit(rec.discard_unchecked)  # an interrupt between the guard and finish()'s check leaves nothing either
    if run.compiled:
        announce_compile(rec.grad, said)
    rec.watch.start()
    if not run.warm:  # a warm run says them after its warm-up (Recording.warm_up), as they start
        rec.say_steps()
    acknowledge_with(rec.acknowledge)
    try:
        seconds = said.seconds
        with (
            stepping(rec),
            progress(progress_what(said), seconds, progress_after(seconds), started=said.started) as rec.progress,
            checking(rec),
        ):
            rec.progress.note = rec.grace_note
            yield rec
    except Interrupted:
        rec.progress = None
        if not rec.stopped and rec.files is not None and rec.files.ready:  # after the write (the reference)
            rec.stop_after_write()
        if not rec.stopped:  # before a trace was written: nothing of this run is kept
            rec.discard()
            raise
        rec.report_stopped()
        if rec.together is not None:  # under torchrun: exit once every rank's trace is written, not before
            rec.together.saved()
        raise
    except BaseException:
        rec.discard()
        raise
    finally:
        acknowledge_with(None)
        hold_for_step_end(False)
        rec.progress = None
        rec.watch.close()


@contextlib.contextmanager
def stepping(rec: Recording) -> Iterator[None]:
    """torch.profiler.profile's start() and step(), while the guard is open, tell `rec` where the loop is, for the
    profiles whose on_trace_ready is `rec.save` (Recording.step_begins, step_ends): the harness's hook on the loop's
    prof.step(), so the script's loop stays as torch writes it."""
    cls = torch.profiler.profile
    start, step = cls.start, cls.step

    def ours(prof: torch.profiler.profile) -> bool:
        return getattr(prof, "on_trace_ready", None) == rec.save

    @functools.wraps(start)
    def hooked_start(prof: torch.profiler.profile) -> None:
        if ours(prof):
            rec.schedule = read_schedule(prof)  # before the profiler starts: no step pays for it
        start(prof)
        if ours(prof):
            rec.step_begins(prof)

    @functools.wraps(step)
    def hooked_step(prof: torch.profiler.profile) -> None:
        if ours(prof):
            rec.step_ends(prof)
        step(prof)
        if ours(prof):
            rec.step_begins(prof)

    cls.start, cls.step = hooked_start, hooked_step
    try:
        yield
    finally:
        cls.start, cls.step = start, step


def finish(
    rec: Recording,
    guess: list[Expect],
    output: torch.Tensor,
    expected: torch.Tensor,
    step: Callable[[], object] | None = None,
    first_guess: list[Expect] | None = None,
    what: str | None = None,
) -> int:
    """The tail of every script, and its exit code.

    Check the last profiled step's `output` against the higher-precision `expected` (an output that does not
    match, say after the reader edited the model, is said first, and its trace kept but marked as not matching in
    its metadata: exit 1 under --strict), read the trace back, print guess vs trace with the report, time the
    step without the profiler under --bench (`step` is the step), and print the files written.
    `first_guess`: an earlier, wrong guess, shown before `guess` (the post's surprise, replayed).
    """
    run, files = rec.run, rec.files
    caller = sys._getframe(1)
    differs, figures = compare(output, expected, run.dtype, what or (files.label if files else None) or "the output")
    where = reference_where(caller) if differs else None
    if differs:
        print("\n".join(mismatch_lines(differs, where, kept=files is not None)))
    if files is None:
        print("\n".join(own_handler_lines(caller.f_locals.values(), rec.started)))
        return 1 if differs and run.strict else 0
    if differs:
        files.amend(reference={"matches": False, **figures, "where": where})
    rec.keep()
    print(rec.loop)
    if rec.schedule and rec.schedule.warmup == 0:
        print("  (no profiler warm-up step: the first recorded step also pays for starting the tracer)")
    if rec.schedule and rec.recorded < rec.schedule.active:
        print(f"  (the loop ended inside the schedule's active steps: {rec.recorded} of {rec.schedule.active})")
    trace = read_trace(files.json)
    verdicts = check_guess(trace, guess)
    print_report(files, trace, verdicts, run, check_guess(trace, first_guess) if first_guess else None)
    if run.bench and step is not None:
        said = rec.said
        bench = "--bench: the step timed without the profiler"
        if rec.progress is not None:  # finish() inside the recording: its ticker goes on, saying the bench runs
            rec.progress.what = bench
        ticking = (contextlib.nullcontext() if rec.progress is not None
                   else progress(bench, said.seconds, progress_after(said.seconds), started=said.started))  # fmt: skip
        with ticking:
            timed = time_unprofiled(step, run.on_gpu, rec.grad)
        print_unprofiled(timed, trace)
    print_files(rec.cycles, run)
    if differs:
        print("note: this run's output does not match its reference: see the MISMATCH lines above")
    return 1 if differs and run.strict else exit_code(verdicts, run.strict)


def reference_where(frame: object) -> str:
    """Where the script computed its reference, read from the function that called finish (`frame`): the line
    `expected = ...` there (`03_simple_mlp.py:98`), and the file and line of the function it calls
    (`geglu_reference, common/workloads/mlp.py:37`); the finish call's line where no such line is found."""
    code = frame.f_code
    here = shown_path(code.co_filename)
    try:
        lines, first = inspect.getsourcelines(code)
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError):
        return f"{here}:{frame.f_lineno}, the expected output handed to finish()"
    assigned = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "expected" for t in node.targets)
    ]
    if not assigned:
        return f"{here}:{frame.f_lineno}, the expected output handed to finish()"
    node = max(assigned, key=lambda n: n.lineno)
    said = f"{here}:{first + node.lineno - 1} (expected = ...)"
    call = node.value
    name = call.func.id if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) else None
    function = frame.f_locals.get(name, frame.f_globals.get(name)) if name else None
    try:
        file, (_, line) = inspect.getsourcefile(function), inspect.getsourcelines(function)
    except (OSError, TypeError):
        return said
    return f"{said}, from {name} at {shown_path(file)}:{line}"


def shown_path(file: str) -> str:
    """`file` relative to the repository where it is in it (`common/workloads/mlp.py`), else as it is."""
    path = Path(file).resolve()
    return str(path.relative_to(REPO_ROOT)) if path.is_relative_to(REPO_ROOT) else str(path)


def mismatch_lines(differs: str, where: str, kept: bool) -> list[str]:
    """What a run whose output does not match its reference prints where the check line would be: how it
    differs, that its trace is kept and marked, where the reference is, and what --strict does."""
    trace = "the trace and table are kept, marked as not matching (the trace's suite metadata: reference)"
    lines = [f"MISMATCH: {differs}", *textwrap.wrap(trace if kept else "no trace of the suite's to mark", TEXT_WIDTH,
             initial_indent="  ", subsequent_indent="    ")]  # fmt: skip
    lines += textwrap.wrap(f"the reference: {where}", TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")
    tail = ("an edit of the model changes what it computes: edit the reference the same way to check it again; "
            "--strict makes this run exit 1")  # fmt: skip
    return lines + textwrap.wrap(tail, TEXT_WIDTH, initial_indent="  ", subsequent_indent="    ")
