"""The suite's lines around a script's torch.profiler loop: the guard before it and the tail after it.

    with recording(run, tag, "matmul_add", work) as rec:   # memory watch, files written all or none
        with profile(..., on_trace_ready=rec.save) as prof:
            ...                                            # the loop, in torch's own words
    return finish(rec, guess(...), out, expected, bench=lambda: fn(x))

Delete these lines and the loop still runs on plain torch. Ctrl-C is handled process-wide by
`common.interrupts` (installed by `setup`), so nothing of the suite is needed inside the loop.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator

import torch

from common.bench import bench as time_step
from common.checks import check_close
from common.cli import SuiteError, on_exit
from common.estimate import Progress, estimate, estimate_lines, progress
from common.export import TraceFiles
from common.guess import Expect, check_guess
from common.interrupts import atomic
from common.memory import MemoryWatch
from common.physics import Work
from common.report import exit_code, print_bench, print_files, print_report
from common.runtime import Run
from common.trace import read_trace
from common.units import human_time

WARMUP_CALLS = 5  # calls of the step before the profiler starts, with --warmup


class Recording:
    """One profiled run: its files, its memory watch, and the writer torch.profiler calls."""

    def __init__(self, run: Run, tag: str, label: str, work: Work, meta: dict | None = None) -> None:
        self.run, self.label = run, label
        self.files = TraceFiles(run, tag, label, work, meta)
        self.watch = MemoryWatch(run.device, snapshot=run.memory)
        self.progress: Progress | None = None  # the progress line of a long run, while the guard is open
        self.checked = False  # the output matched the reference: the files are kept from here on
        self.grad = torch.is_grad_enabled()  # the mode the profiled block runs in: --bench times the step in it

    def keep(self) -> None:
        """The output is checked: rename its files into place (replacing an earlier run's), and from that
        moment they stay, whatever happens next (an interrupt while printing, another rank failing)."""
        with atomic():
            self.files.commit()
            self.checked = True

    def discard_unchecked(self) -> None:
        """When the run ends (common.cli) before its output was checked, remove its temporaries."""
        if not self.checked:
            self.files.discard()

    def warm_up(self, step: Callable[[], object]) -> None:
        """Call `step` WARMUP_CALLS times before profiling (--warmup) and print what the first call cost.

        The first call pays for compilation (--compile), cuBLAS set-up and the allocator; the trace of a
        warm run shows none of that, and neither do the memory figures (the watch restarts after).
        """
        if self.progress:
            self.progress.what = "warm-up"
        start = time.perf_counter()
        step()
        self._sync()
        first = time.perf_counter() - start
        start = time.perf_counter()
        for _ in range(WARMUP_CALLS - 1):
            step()
        self._sync()
        rest = (time.perf_counter() - start) / (WARMUP_CALLS - 1)
        what = "compile + first call" if self.run.compiled else "first call"
        print(f"warm-up: {what} {human_time(first * 1e6)} wall, then {WARMUP_CALLS - 1} more at "
              f"{human_time(rest * 1e6)} wall each (not profiled)")  # fmt: skip
        if self.progress:
            self.progress.what = "profiled steps, then the reference"
        self.watch.start()

    def _sync(self) -> None:
        if self.run.on_gpu:
            torch.cuda.synchronize(self.run.device)

    def save(self, prof: torch.profiler.profile) -> None:
        """`on_trace_ready`: write the trace and the table once the active steps are recorded.

        torch.profiler also calls it when the loop stops early (Ctrl-C, an error): then nothing is
        written, since a trace with missing steps would read as whole.
        """
        if prof.step_num < self.run.schedule.steps:
            return
        memory = self.watch.stop(prof.step_num)
        self.files.write(prof, memory, self.watch if self.run.memory and self.run.on_gpu else None)


@contextlib.contextmanager
def recording(run: Run, tag: str, label: str, work: Work, meta: dict | None = None) -> Iterator[Recording]:
    """The guard around a script's profiler block: the run's estimate before it starts (common.estimate;
    printed only for a run of more than a few seconds), a progress line while a long one goes on, the GPU
    memory watch over the steps, and no file of this run under a final name if anything in the block fails or
    is interrupted (an earlier run's files stay as they were). `meta`: more entries for the trace's `suite`
    metadata (a rank, say)."""
    rec = Recording(run, tag, label, work, meta)
    on_exit(rec.discard_unchecked)  # an interrupt between the guard and finish()'s check leaves nothing either
    guess = estimate(run, work, WARMUP_CALLS if run.warm else 0)
    for line in estimate_lines(run, work, guess):
        print(line)
    rec.watch.start()
    try:
        with progress("profiled steps, then the reference", guess.seconds if guess else None) as rec.progress:
            yield rec
    except BaseException:
        rec.files.discard()
        raise
    finally:
        rec.progress = None
        rec.watch.close()


def finish(
    rec: Recording,
    guess: list[Expect],
    output: torch.Tensor,
    expected: torch.Tensor,
    bench: Callable[[], object] | None = None,
    first_guess: list[Expect] | None = None,
    what: str | None = None,
) -> int:
    """The tail of every script, and its exit code.

    Check the last profiled step's `output` against the higher-precision `expected` (a wrong result's
    trace is not kept), read the trace back, print guess vs trace with the report, time the
    step without the profiler under --bench (`bench` is the step), and print the files written.
    `first_guess`: an earlier, wrong guess, shown before `guess` (the post's surprise, replayed).
    """
    run, files = rec.run, rec.files
    try:
        check_close(output, expected, run.dtype, what or rec.label)
    except SuiteError as exc:
        files.discard()
        raise SuiteError(f"{exc}: its trace is not kept") from None
    rec.keep()
    trace = read_trace(files.json)
    verdicts = check_guess(trace, guess)
    print_report(files, trace, verdicts, run, check_guess(trace, first_guess) if first_guess else None)
    if run.bench and bench is not None:
        with progress("--bench: the step timed without the profiler"):
            timed = time_step(bench, run.on_gpu, rec.grad)
        print_bench(timed, trace)
    print_files(files, run)
    return exit_code(verdicts, run.strict)
