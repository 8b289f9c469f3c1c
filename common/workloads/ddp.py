"""Data parallel training on one machine (06_ddp_training_step.py): the torchrun environment, the process
group's start-up, one voice for all the ranks, and how many gradient buckets DistributedDataParallel fills.

How the ranks speak: rank 0 prints the report. Another rank holds its output and, wherever the ranks agree
(`one_verdict`), prints only the lines whose words differ from rank 0's, as `[rank N] ...`: figures aside,
since each rank's figures are in the summary of the folder, torch's profiler table aside, since each rank's
is in its own .txt, and progress lines aside (the run's pace is rank 0's to say). A refusal is rank 0's one
`error:` line, the same exit code (2) on every rank, and the same line in the error file torchrun gives each
rank (TORCHELASTIC_ERROR_FILE), so that torchrun's own report, which it prints after any rank fails (a
ChildFailedError traceback, then a box of failures), ends with that line: its `Root Cause ... traceback :`
entry is the rank's line, and its `exitcode` entries the ranks' codes. torchrun itself then exits 1, whatever
the ranks' codes.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import io
import json
import math
import os
import re
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import NoReturn

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel

from common.cli import EXIT_USAGE, SuiteError, on_exit, positive_float
from common.files import shown_path
from common.harness.private_api import ddp_bucket_caps
from common.workloads.block import AMP, BlockShape, parameter_count, saved_for_backward

TORCHRUN = "uv run torchrun --standalone --nproc-per-node"  # how every command this suite prints starts 06
STARTUP_S = 120.0  # how long a rank waits for the others to join the process group, unless --startup-timeout
SAY_WAITING_S = 10.0  # ... and after how long it says so
MAX_BUCKET_MB = (2**63 - 1) / 2**20  # DDP turns --bucket-cap-mb into an int64 count of bytes
HOLD_S = 30.0  # how long another rank, refused like rank 0, waits for torchrun to end it after rank 0
LAUNCHER_GONE_S = 5.0  # after the launcher dies: how long the first SIGTERM has before a second one ends the rank
PR_SET_PDEATHSIG = 1  # linux/prctl.h


def torchrun_command(script: str, nproc: int = 2) -> str:
    """The command that starts `script` on `nproc` ranks, as every line of the suite prints it."""
    return f"{TORCHRUN} {nproc} {script}"


@dataclass(frozen=True)
class Launch:
    """What torchrun told this process."""

    rank: int
    local_rank: int
    world_size: int
    local_world_size: int  # ranks on this machine


def _integers(names: tuple[str, ...]) -> dict[str, int]:
    values = {}
    for name in names:
        if name in os.environ:
            try:
                values[name] = int(os.environ[name])
            except ValueError:
                raise SuiteError(f"{name}={os.environ[name]!r} is not an integer (torchrun sets it)") from None
    return values


def not_launched(script: str) -> SuiteError:
    """The one line for a run that torchrun did not start."""
    return SuiteError(f"start it with torchrun, one process per GPU (or CPU rank): {torchrun_command(script)} [flags]")


def torchrun_launch(script: str) -> Launch | None:
    """The rank and world size torchrun set (None where it set none of them: `--help` still works), refused in
    one line when they cannot be right or some are missing.

    Before returning, the rank arranges to end with its launcher (`follow_launcher`) and, on a rank other than
    0, to hold its output (`_Voice`); nothing of that happens for a refused environment.
    """
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE")
    if not any(n in os.environ for n in names):
        return None
    if any(n not in os.environ for n in names):
        raise not_launched(script)
    values = _integers((*names, "LOCAL_WORLD_SIZE", "MASTER_PORT"))
    rank, local_rank, world = values["RANK"], values["LOCAL_RANK"], values["WORLD_SIZE"]
    local_world = values.get("LOCAL_WORLD_SIZE", world)
    if world < 1:
        raise SuiteError(f"WORLD_SIZE={world}: a world has at least 1 rank")
    if not 0 <= rank < world:
        raise SuiteError(f"RANK={rank} with WORLD_SIZE={world}: the ranks are 0 to {world - 1}")
    if not 1 <= local_world <= world:
        raise SuiteError(f"LOCAL_WORLD_SIZE={local_world} with WORLD_SIZE={world}: expected 1 to {world}")
    if not 0 <= local_rank < local_world:
        raise SuiteError(
            f"LOCAL_RANK={local_rank} with {local_world} rank(s) on this machine: expected 0 to {local_world - 1}"
        )
    if not os.environ.get("MASTER_ADDR") or "MASTER_PORT" not in values:
        raise SuiteError("MASTER_ADDR and MASTER_PORT are not both set (torchrun sets them)")
    if not 0 < values["MASTER_PORT"] < 65536:
        raise SuiteError(f"MASTER_PORT={values['MASTER_PORT']}: a port is 1 to 65535")
    launch = Launch(rank, local_rank, world, local_world)
    follow_launcher()
    _Voice.install(launch)
    return launch


def exit_rank(main: Callable[[], int]) -> NoReturn:
    """Run a rank's `main` and end the process with its exit code, without Python's interpreter teardown.

    A collective returns once it is done, but the gloo worker thread that ran it drops its own reference to the
    work a moment later. When that reference is the last, the work's tensors are freed on that thread, and a
    tensor that Python made needs the GIL for that. If the main thread has meanwhile begun Python's shutdown, that
    thread is killed mid-destructor (pthread_exit), and a rank that finished cleanly aborts: 'terminate called
    without an active exception', SIGABRT (2 of 55 two-rank CPU runs here; `destroy_process_group` does not end
    gloo's threads while other references to the group live on). By here the traces are whole
    on disk, the process group is destroyed and the output is flushed below: nothing is left to tear down."""
    try:
        code = main()
    except SystemExit as exc:  # argparse, a refusal (2), an interrupt (128 + signal)
        code = exc.code
    if code is not None and not isinstance(code, int):  # SystemExit("text"): Python prints it and exits 1
        print(code, file=sys.stderr)
        code = 1
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


def follow_launcher() -> None:
    """End this rank when the process that started it (torchrun) dies, even by SIGKILL: on Linux the kernel
    sends SIGTERM at once (prctl PR_SET_PDEATHSIG), elsewhere a thread that sees the parent change sends it;
    that thread sends a second SIGTERM LAUNCHER_GONE_S later, which ends the run even inside a long native
    call (common.interrupts)."""
    parent, told = os.getppid(), False
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            told = ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) == 0

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        if not told:
            os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(LAUNCHER_GONE_S)
        os.kill(os.getpid(), signal.SIGTERM)

    threading.Thread(target=watch, name="launcher-watch", daemon=True).start()


def add_ddp_flags(parser: argparse.ArgumentParser) -> None:
    """06's own flags: DDP's bucket size, overlap or not, and how long the start-up waits."""
    ddp = parser.add_argument_group("data parallel")
    ddp.add_argument(
        "--bucket-cap-mb",
        type=bucket_cap_mb,
        default=None,
        help="DDP's gradient bucket size in MiB (default: DDP's, 25, with a first bucket of 1 MiB)",
    )
    ddp.add_argument(
        "--no-overlap",
        action="store_true",
        help="all-reduce the gradients after the backward instead of during it, for the comparison (default: off)",
    )
    ddp.add_argument(
        "--startup-timeout",
        type=positive_float,
        default=STARTUP_S,
        help=f"seconds a rank waits for the others to join; then one line names the missing (default: {STARTUP_S:g})",
    )


def bucket_cap_mb(text: str) -> float:
    """argparse type for --bucket-cap-mb: what DistributedDataParallel can take, a finite number of MiB above 0
    whose bytes fit the int64 DDP counts them in."""
    try:
        mb = float(text)
    except ValueError:
        mb = math.nan
    if not 0 < mb <= MAX_BUCKET_MB:
        raise argparse.ArgumentTypeError(f"DDP takes a bucket above 0 and up to {MAX_BUCKET_MB:.3g} MiB, got {text}")
    return mb


def start_process_group(launch: Launch, backend: str, timeout_s: float) -> None:
    """`dist.init_process_group` after every rank has said it is here, through torchrun's store (or rank 0's,
    without torchrun's agent), waiting in Python so a signal ends the wait; one line naming the ranks that
    did not come within `timeout_s`."""
    addr, port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    agent_store = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    deadline = time.monotonic() + timeout_s
    master = launch.rank == 0 and not agent_store  # without torchrun's agent, rank 0 serves the store
    store = None
    while store is None:  # tries of 2 s at most, so that a signal ends the wait between two
        try:
            store = dist.TCPStore(
                addr, port, launch.world_size, is_master=master, wait_for_workers=False,
                timeout=timedelta(seconds=max(1.0, min(2.0, deadline - time.monotonic()))),
                use_libuv=os.environ.get("USE_LIBUV", "0") == "1",  # as init_process_group's env:// store does
            )  # fmt: skip
        except (RuntimeError, ValueError, OSError) as exc:  # DistNetworkError, DistStoreError are RuntimeErrors
            if master or time.monotonic() > deadline:
                doing, why = "open" if master else "reach", (str(exc).splitlines() or [""])[0]
                raise SuiteError(f"rank {launch.rank} could not {doing} the store at {addr}:{port}: {why}") from None
    store.set_timeout(timedelta(seconds=timeout_s))  # for the process group's own start-up through it
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    joined = dist.PrefixStore(f"06_ddp/joined/{attempt}/", store)
    joined.set(str(launch.rank), "1")
    said = False
    while missing := [r for r in range(launch.world_size) if not joined.check([str(r)])]:
        if time.monotonic() > deadline:
            ranks = ", ".join(map(str, missing))
            raise SuiteError(
                f"start-up: waited {timeout_s:g} s for rank(s) {ranks} of {launch.world_size} to join "
                "(the same WORLD_SIZE, MASTER_ADDR and MASTER_PORT on every rank?)"
            )
        if not said and time.monotonic() > deadline - timeout_s + SAY_WAITING_S:
            print(f"start-up: waiting up to {timeout_s:g} s for rank(s) {', '.join(map(str, missing))} to join")
            said = True
        time.sleep(0.05)
    pg_store = dist.PrefixStore(f"06_ddp/pg/{attempt}/", store)
    dist.init_process_group(backend, store=pg_store, rank=launch.rank,
                            world_size=launch.world_size)  # fmt: skip


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


def ddp_memory(shape: BlockShape, precision: str, dtype: torch.dtype, launch: Launch, on_gpu: bool) -> tuple[int, str]:
    """Bytes at the peak of 06's step, and for what: 05's step (common.workloads.block.block_memory) without its
    reference, plus DDP's buckets (a copy of the gradients) and the gathered weights of the check; on the CPU times the
    ranks on this machine, which share its memory."""
    batch, seq, dim, hidden = shape.batch, shape.seq, shape.dim, shape.hidden
    p = parameter_count(dim, hidden) * (4 if precision == AMP else dtype.itemsize)
    saved = sum(saved_for_backward(shape, precision, dtype).values())
    tokens = batch * seq
    need = 5 * p + 2 * tokens * dim * 4 + saved + 4 * tokens * hidden * dtype.itemsize
    need += launch.world_size * dim * dim * 4
    what = "parameters, gradients, DDP's buckets, AdamW state, saved activations"
    if on_gpu or launch.local_world_size == 1:
        return need, what
    return need * launch.local_world_size, f"{what}; x {launch.local_world_size} ranks on this CPU"


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

    @classmethod
    def install(cls, launch: Launch) -> None:
        voice = cls.current = cls(launch)
        sys.stdout, sys.stderr = _Stream(voice, voice.out, False), _Stream(voice, voice.err, True)
        on_exit(voice.close)

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


def expected_buckets(model: DistributedDataParallel) -> int:
    """How many gradient buckets `model` all-reduces per step, from its parameters and the caps it was built with."""
    return bucket_count(list(model.module.parameters()), *ddp_bucket_caps(model))


def bucket_count(parameters: list[torch.nn.Parameter], first_cap: int, cap: int) -> int:
    """How many buckets DDP fills from these parameters' gradients: it packs them in reverse order (the order
    the backward produces them), closing a bucket once it holds its cap, `first_cap` for the first one and `cap`
    for the rest."""
    limit, buckets, size = first_cap, 0, 0
    for p in reversed([p for p in parameters if p.requires_grad]):
        size += p.numel() * p.element_size()
        if size >= limit:
            buckets, size, limit = buckets + 1, 0, cap
    return buckets + (size > 0)
