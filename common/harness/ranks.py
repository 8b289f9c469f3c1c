"""One voice for all the ranks of a data-parallel run, and their agreement on a refusal.

Rank 0 prints the report. Another rank holds its output and, wherever the ranks agree (`one_verdict`), prints
only the lines whose words differ from rank 0's, as `[rank N] ...`: figures aside, since each rank's figures
are in the summary of the folder, torch's profiler table aside, since each rank's is in its own .txt, and
progress lines aside (the run's pace is rank 0's to say). A refusal is rank 0's one `error:` line, the same
exit code (2) on every rank, and the same line in the error file torchrun gives each rank
(TORCHELASTIC_ERROR_FILE), so that torchrun's own report, which it prints after any rank fails (a
ChildFailedError traceback, then a box of failures), ends with that line: its `Root Cause ... traceback :`
entry is the rank's line, and its `exitcode` entries the ranks' codes. torchrun itself then exits 1, whatever
the ranks' codes.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

import torch.distributed as dist

from common.cli import EXIT_USAGE, SuiteError, on_exit
from common.files import shown_path
from common.interrupts import signals_seen

if TYPE_CHECKING:  # the launch is torchrun's, which makes this process speak as its rank
    from common.harness.torchrun import Launch

HOLD_S = 30.0  # how long another rank, refused like rank 0, waits for torchrun to end it after rank 0
AGREE_S = 5.0  # how long a rank waits at a step's end for the other ranks' proposals before it stops alone
AGREE_POLL_S = 0.001
REQUEST = "request"  # the store key a rank sets, to the signal's number, when a signal stops its recorded steps
SAVED_WAIT_S = 600.0  # how long a rank that has written its stopped trace waits for the others to write theirs


def exit_on_signal(code: int) -> None:
    """From here a SIGTERM or SIGINT (torchrun's, sent once another rank has exited) ends this rank with `code`,
    its output flushed: a rank that has agreed to refuse exits 2 like the others, never -15 for being killed
    between the agreement and its own exit."""

    def leave(*_: object) -> None:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        os._exit(code)

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, leave)


@contextlib.contextmanager
def one_verdict(launch: Launch) -> Iterator[None]:
    """Run the block on every rank, then agree: a refusal (SuiteError) on any rank becomes every rank's, so all
    stop together on rank 0's one line (naming the rank it came from when that is not rank 0); and another
    rank prints the lines it printed since the last agreement whose words differ from rank 0's."""
    refusal = None
    try:
        yield
    except SuiteError as exc:
        refusal = str(exc)
    voice = _Voice.current
    lines = voice.take_lines() if voice else []
    everyone: list[tuple[str | None, list[str]]] = [(None, [])] * launch.world_size
    dist.all_gather_object(everyone, (refusal, lines if launch.rank == 0 else []))
    if voice and launch.rank != 0:
        voice.say_differences(lines, everyone[0][1])
    refused = [(rank, text) for rank, (text, _) in enumerate(everyone) if text]
    if refused:
        rank, text = refused[0]
        exit_on_signal(EXIT_USAGE)  # torchrun ends the other ranks as soon as one exits: each exits as it refused
        if voice:
            voice.shared = True
        raise SuiteError(text if rank == 0 else f"rank {rank}: {text}")
    if voice:
        voice.shared = False  # past the first agreement a rank's error is its own, printed as [rank N] error: ...


def rank_line(launch: Launch, backend: str) -> str:
    """The setup line of the data-parallel run: ranks, backend, OMP_NUM_THREADS, and what one rank cannot show."""
    line = f"data parallel: {launch.world_size} rank{'s' * (launch.world_size > 1)}, {backend}"
    if threads := os.environ.get("OMP_NUM_THREADS"):
        line += f", OMP_NUM_THREADS={threads} per rank"
        if threads == "1" and launch.local_world_size > 1:
            line += " (torchrun's default for 2+ ranks, as its warning above says)"
    if launch.world_size == 1:
        line += "\n  one rank: DDP's reducer, hooks and buckets run; no rank waits on another: no communication exposed"
    return line


def read_together(folder: Path, launch: Launch) -> str:
    """The line after the report: where the ranks' traces are read side by side."""
    last = launch.world_size - 1
    return f"the traces of ranks 0 to {last} together: uv run python -m common.summary {shown_path(folder)}"


class _Stream(io.TextIOBase):
    """sys.stdout or sys.stderr of one rank, as `_Voice` routes it."""

    def __init__(self, voice: _Voice, target: io.TextIOBase, err: bool) -> None:
        self.voice, self.target, self.err, self.pending = voice, target, err, ""

    def write(self, text: str) -> int:
        if self.voice.rank == 0:
            self.target.write(text)
        self.pending += text
        *complete, self.pending = self.pending.split("\n")
        for line in complete:
            self.voice.line(line, self.err)
        return len(text)

    def flush(self) -> None:
        self.target.flush()

    def fileno(self) -> int:
        return self.target.fileno()

    def isatty(self) -> bool:
        return self.target.isatty()

    @property
    def encoding(self) -> str:
        return self.target.encoding


FIGURE = re.compile(  # a number with its unit, if any: 987 µs and 1.07 ms are the same word here
    r"[-+]?\d[\d,.]*(?:e[-+]?\d+)?(?:\s*(?:[nµu]s|ms|s|%|[KMGT]i?B|B|[GT]FLOP(?:/s)?|[KMGT]B/s|×|x)(?![A-Za-z]))?"
)
TORCH_TABLE_BORDER = re.compile(r"^-{10,}(\s+-{5,})+\s*$")
PROGRESS = "... "  # common.harness.estimate's progress lines: how long the run has gone, rank 0's to say


def _words(line: str) -> str:
    return " ".join(FIGURE.sub("#", line).split())


def _verdict_kind(line: str) -> str | None:
    """The verdict's call ("overhead-bound on the CPU"), or None for another line: the evidence after it (which op
    was busiest, by how much) is the run's timing, which differs between ranks that ran the same step."""
    if not line.startswith("verdict: "):
        return None
    return line[len("verdict: ") :].split(":", 1)[0].strip()


class StopTogether:
    """The profiled step every rank stops after when a signal comes during the recorded steps (issue 51).

    DDP all-reduces inside every step, so a rank that stopped alone would leave the others waiting in the next
    step's all-reduce until torchrun kills them, their traces lost. The ranks agree through torchrun's store, at no
    cost to a step until a signal comes: a rank that gets one while it records sets REQUEST (`ask`); each rank's
    watcher thread, blocked on REQUEST over a connection of its own, wakes and publishes the step that rank is in
    (`on_request`: the harness's count of ended steps); and a rank at the end of the step it proposed waits for
    every rank's proposal and stops after the largest (`stop_step`). The ranks run in lockstep a step apart at
    most and each proposal is published by its watcher, not by a loop that may wait on another rank's all-reduce,
    so no rank waits on another to propose. A rank whose peers do not all answer within AGREE_S stops alone."""

    current: StopTogether | None = None

    def __init__(
        self,
        store: dist.Store,
        watch_store: dist.Store,
        rank: int,
        world_size: int,
        grace_s: float = 30.0,
        grace_settable: bool = True,
    ) -> None:
        self.store, self.rank, self.world_size = store, rank, world_size
        self.grace_s = grace_s  # how long torchrun, signalled, waits for the ranks before it kills them
        self.grace_settable = grace_settable  # torchrun takes --shutdown-timeout (torch 2.12 on)
        self.on_request: Callable[[int], int | None] | None = None  # (signal) -> the step to propose, or None
        self.signum: int | None = None  # the signal REQUEST carried
        self.agreed: int | None = None
        self.asked = False
        watcher = threading.Thread(target=self._watch, args=(watch_store,), name="stop-together", daemon=True)
        watcher.start()

    def ask(self, signum: int) -> None:
        """Ask every rank to stop (any thread; it never waits: a thread of its own sets REQUEST)."""
        if self.asked:
            return
        self.asked = True
        threading.Thread(target=self._set, args=(REQUEST, str(signum)), name="stop-ask", daemon=True).start()

    def _set(self, key: str, value: str) -> None:
        with contextlib.suppress(Exception):  # the store is gone (torchrun ended): each rank stops alone
            self.store.set(key, value)

    def _watch(self, store: dist.Store) -> None:
        try:
            store.wait([REQUEST], timedelta(days=365))  # in C++, the GIL let go: the loop runs on meanwhile
            self.signum = int(store.get(REQUEST))
            step = self.on_request(self.signum) if self.on_request is not None else None
            if step is not None:
                store.set(f"rank{self.rank}", str(step))
        except Exception:  # noqa: BLE001 (the store is gone, the process ends: nothing to agree on)
            return

    def saved(self, wait_s: float = SAVED_WAIT_S) -> None:
        """This rank's stopped trace is written: wait for every rank's before exiting. torchrun ends the other ranks
        (SIGTERM) as soon as one exits, and to a rank still writing that is a second signal, which keeps no trace.
        The wait ends early where the store is gone or a signal comes while it waits (torchrun ending this rank)."""
        keys = [f"saved{r}" for r in range(self.world_size)]
        deadline, seen = time.monotonic() + wait_s, signals_seen()
        with contextlib.suppress(Exception):  # the store is gone (torchrun ended): nothing to wait for
            self.store.set(f"saved{self.rank}", "1")
            while not self.store.check(keys) and time.monotonic() < deadline and signals_seen() == seen:
                time.sleep(AGREE_POLL_S * 20)

    def stop_step(self, proposed: int) -> int:
        """The step every rank stops after: the largest proposal, waited for (AGREE_S at most) the first time; this
        rank's own (`proposed`) where the others do not all answer."""
        if self.agreed is None:
            keys = [f"rank{r}" for r in range(self.world_size)]
            deadline = time.monotonic() + AGREE_S
            with contextlib.suppress(Exception):
                while not self.store.check(keys) and time.monotonic() < deadline:
                    time.sleep(AGREE_POLL_S)
            found = [proposed]
            for key in keys:
                with contextlib.suppress(Exception):
                    if self.store.check([key]):
                        found.append(int(self.store.get(key)))
            self.agreed = max(found)
        return self.agreed


class _Voice:
    """One rank's stdout and stderr: rank 0's pass through; another rank's stdout is held for `one_verdict`,
    and its stderr printed as `[rank N] ...`, except a refusal it shares with rank 0 and `interrupted`
    (a signal reaches every rank). At exit, a refused rank writes its line to torchrun's error file."""

    current: _Voice | None = None

    def __init__(self, launch: Launch) -> None:
        self.rank = launch.rank
        self.out, self.err = sys.stdout, sys.stderr
        self.lines: list[str] = []  # stdout since the last agreement
        self.shared = True  # before the first agreement every rank refuses alike: only rank 0 says so
        self.held: list[str] = []
        self.error: str | None = None

    def line(self, line: str, err: bool) -> None:
        if not err:
            self.lines.append(line)
            return
        if line.startswith("error: "):
            self.error = line
        if self.rank == 0 or line == "interrupted":
            return
        if self.shared:
            self.held.append(line)
        else:
            self.err.write(f"[rank {self.rank}] {line}\n")
            self.err.flush()

    def take_lines(self) -> list[str]:
        lines, self.lines = self.lines, []
        return lines

    def say_differences(self, mine: list[str], rank0: list[str]) -> None:
        theirs, in_table = {_words(line) for line in rank0}, False
        their_kinds = {_verdict_kind(line) for line in rank0} - {None}
        in_verdict = (
            None  # the kind of the verdict whose wrapped lines these are; a rank says its own only if it differs
        )
        for line in mine:
            if in_verdict is not None and line.startswith(" " * 6):  # the verdict wrapped (report.TEXT_WIDTH)
                if in_verdict not in their_kinds:
                    self.out.write(f"[rank {self.rank}] {line}\n")
                continue
            in_verdict = _verdict_kind(line)
            if in_verdict is not None:
                if in_verdict not in their_kinds:
                    self.out.write(f"[rank {self.rank}] {line}\n")
            elif TORCH_TABLE_BORDER.match(line) and not in_table:
                in_table = True
            elif line.startswith(("Self CPU time total", "Self CUDA time total")):
                in_table = False
            elif not in_table and line.strip() and not line.startswith(PROGRESS) and _words(line) not in theirs:
                self.out.write(f"[rank {self.rank}] {line}\n")
        self.out.flush()

    def close(self) -> None:
        """At exit: give the streams back, write a refusal to torchrun's error file, and keep the exit code
        the same on every rank whatever torchrun sends (it ends the other ranks once one has exited)."""
        sys.stdout, sys.stderr = self.out, self.err
        _Voice.current = None
        if self.error is None:
            return
        error_file = os.environ.get("TORCHELASTIC_ERROR_FILE")
        if error_file:
            info = {"py_callstack": self.error, "timestamp": str(int(time.time()))}  # torch's ErrorHandler format
            with contextlib.suppress(OSError), open(error_file, "w") as fh:
                json.dump({"message": {"message": self.error, "extraInfo": info}}, fh)
        exit_on_signal(EXIT_USAGE)
        if self.rank != 0 and self.held and "TORCHELASTIC_RUN_ID" in os.environ:
            time.sleep(HOLD_S)  # torchrun ends this rank once rank 0 has said it; if it never does, say it here
        for line in self.held:
            self.err.write(f"[rank {self.rank}] {line}\n")
        self.err.flush()


def speak_as(launch: Launch) -> None:
    """From here this process speaks as rank `launch.rank` (`_Voice`): rank 0's output passes through, another
    rank's is held for `one_verdict`; at exit the streams are given back."""
    voice = _Voice.current = _Voice(launch)
    sys.stdout, sys.stderr = _Stream(voice, voice.out, False), _Stream(voice, voice.err, True)
    on_exit(voice.close)
