"""A thread that says, every PROGRESS_EVERY_S, how long a slow phase has been going: free of torch, so the import
of torch itself (common.harness.early) ticks as the later phases do (common.harness.estimate)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Iterator

from common.cli import fit
from common.units import human_time

PROGRESS_AFTER_S = 10.0  # no progress line before this: a short run's output stays the same every time
PROGRESS_EVERY_S = 10.0


class Progress:
    """A thread that prints, every `every_s` once `after_s` have passed, how long the run has been going."""

    def __init__(
        self, what: str, estimate_s: float | None, after_s: float | None, every_s: float, started: float | None = None
    ) -> None:
        self.what, self.estimate_s, self.after_s, self.every_s = what, estimate_s, after_s, every_s
        self.started = time.monotonic() if started is None else started  # the run's estimate's time, where it has one
        self.note: Callable[[], str | None] | None = None  # asked at each line: a line more, said under it
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._tick, name="progress", daemon=True)

    def line(self) -> str:
        """`... 20 s of about 1 min estimated: profiled steps`; past the estimate, what is still left to run:
        `... 80.1 s, past the 27.5 s estimated; left: profiled steps, then the reference`."""
        spent = time.monotonic() - self.started
        elapsed = human_time(spent * 1e6)
        if self.estimate_s and spent > self.estimate_s:
            return f"... {elapsed}, past the {human_time(self.estimate_s * 1e6)} estimated; left: {self.what}"
        of = f" of about {human_time(self.estimate_s * 1e6)} estimated" if self.estimate_s else ""
        return f"... {elapsed}{of}: {self.what}"

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _tick(self) -> None:
        if self.after_s is None or self._stop.wait(self.after_s):
            return
        while True:
            print(fit(self.line(), indent="    "), flush=True)
            more = self.note() if self.note is not None else None
            if more:
                print(more, flush=True)
            if self._stop.wait(self.every_s):
                return


@contextlib.contextmanager
def progress(
    what: str,
    estimate_s: float | None = None,
    after_s: float | None = PROGRESS_AFTER_S,
    every_s: float = PROGRESS_EVERY_S,
    started: float | None = None,
) -> Iterator[Progress]:
    """Print progress lines while the block runs (see Progress); none after it ends, none at all with `after_s`
    None. `what` may be changed through the object yielded, as the run moves on (warm-up, profiled steps).
    `started`: the time.monotonic() the elapsed time counts from (default: now), the estimate's where a run said
    one before this phase."""
    ticker = Progress(what, estimate_s, after_s, every_s, started)
    ticker.start()
    try:
        yield ticker
    finally:
        ticker.stop()
