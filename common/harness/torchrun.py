"""The torchrun environment of a data-parallel run (06_ddp_training_step.py): the rank and world size it set,
checked; the rendezvous before `dist.init_process_group`, which names the ranks that never came; and a rank's
end, with its launcher and without Python's interpreter teardown.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
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

from common.cli import SuiteError
from common.harness.flags import STARTUP_S as STARTUP_S  # how long a rank waits for the others to join
from common.harness.ranks import StopTogether, speak_as

TORCHRUN = "uv run torchrun --standalone --nproc-per-node"  # how every command this suite prints starts 06

SAY_WAITING_S = 10.0  # ... and after how long it says so
GRACE_S = 30  # how long torchrun, signalled, waits for its ranks before it SIGKILLs them, unless told otherwise
GRACE_FLAG = "--shutdown-timeout"  # torchrun's flag for it (torch 2.12 on), or TORCH_ELASTIC_SHUTDOWN_TIMEOUT
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
    speak_as(launch)
    return launch


def grace_settable() -> bool:
    """Whether this torch's torchrun takes GRACE_FLAG: from torch 2.12 (pytorch/pytorch#172596, merged 2026-03-03;
    before, its 30 s are fixed). By the version: importing torchrun's launcher to look costs a rank 0.4 s."""
    return torch.torch_version.TorchVersion(torch.__version__) >= "2.12"


def torchrun_grace(parent: int | None = None) -> int:
    """How long torchrun waits, once signalled, before it SIGKILLs the ranks it passed the signal on to: the
    GRACE_FLAG on its command line (`parent`: its pid, this rank's parent; read on Linux), else the PET_ or
    TORCH_ELASTIC_SHUTDOWN_TIMEOUT this rank inherited from it, else GRACE_S; GRACE_S where torch has no such flag."""
    if not grace_settable():
        return GRACE_S
    words: list[str] = []
    with contextlib.suppress(OSError):
        words = Path(f"/proc/{parent or os.getppid()}/cmdline").read_bytes().decode(errors="replace").split("\0")
    given = None
    for at, word in enumerate(words):
        name, _, value = word.partition("=")
        if name.replace("_", "-") == GRACE_FLAG:
            given = value if value else (words[at + 1] if at + 1 < len(words) else None)
        if at > 1 and word.endswith(".py"):
            break  # the script: its own flags from here
    for text in (given, os.environ.get("PET_SHUTDOWN_TIMEOUT"), os.environ.get("TORCH_ELASTIC_SHUTDOWN_TIMEOUT")):
        with contextlib.suppress(TypeError, ValueError):
            return int(text)
    return GRACE_S


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


@contextlib.contextmanager
def rendezvous(launch: Launch, timeout_s: float) -> Iterator[dist.Store]:
    """The store for the `dist.init_process_group(..., store=store)` call inside the block, once every rank has
    said it is here, through torchrun's store (or rank 0's, without torchrun's agent): the wait is in Python, so
    a signal ends it, and one line names the ranks that did not come within `timeout_s`. The ranks' agreement on
    the step a signal stops them after (StopTogether) opens then too, on a second connection to the store."""
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
    watch = dist.TCPStore(
        addr,
        port,
        launch.world_size,
        is_master=False,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_s),
        use_libuv=os.environ.get("USE_LIBUV", "0") == "1",
    )
    stop = f"06_ddp/stop/{attempt}/"
    StopTogether.current = StopTogether(dist.PrefixStore(stop, store), dist.PrefixStore(stop, watch), launch.rank,
                                        launch.world_size, torchrun_grace(), grace_settable())  # fmt: skip
    yield dist.PrefixStore(f"06_ddp/pg/{attempt}/", store)
