"""Ctrl-C, SIGTERM and SIGHUP end a run cleanly: at a safe point, with one line, and no file left behind.

A first signal raises `Interrupted` in the main thread as soon as it runs the suite's or the script's
own code: never inside torch.profiler's or record_function's code, where an exception can leave the
profiler half-stopped (a KeyboardInterrupt raised in the profiler's callbacks once took the process
down with SIGSEGV). A second signal ends the process at once, even inside a long native call that holds
the main thread: a watchdog thread, woken by the signal itself (`signal.set_wakeup_fd`), removes the
temporaries a save had open and exits. A Ctrl-C during `import torch`, before `setup()`, is Python's own.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from pathlib import Path
from types import FrameType

from common.cli import Interrupted, on_exit

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
POLL_S = 0.02  # while a signal waits for a safe point, how often the main thread is looked at again
# Code an exception must not cross: the profiler's state machine and record_function's enter/exit.
UNSAFE = (f"{os.sep}torch{os.sep}profiler{os.sep}", f"{os.sep}torch{os.sep}autograd{os.sep}profiler")


class _State:
    installed = False
    pending: int | None = None  # the signal waiting for a safe point
    previous: dict[int, object] = {}
    open_files: set[Path] = set()  # temporaries to remove if the process must end at once
    wakeup_write: int | None = None  # the pipe the C-level handler writes each signal's number to
    seen = 0  # signals since install()


_state = _State()


def _unsafe(frame: FrameType | None) -> bool:
    """Whether the main thread is inside torch's profiler code (anywhere up its stack)."""
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in UNSAFE):
            return True
        frame = frame.f_back
    return False


def _raise_when_safe(signum: int, frame: FrameType | None) -> None:
    if signum in SIGNALS:
        _state.pending = _state.pending or signum
    if _state.pending is None:
        return
    if _unsafe(frame):
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, POLL_S)  # look again soon (SIGALRM comes back here)
        return
    pending, _state.pending = _state.pending, None
    raise Interrupted(pending)


def _watchdog(fd: int) -> None:
    """Count the signals as they arrive; on the second, clean up and end the process at once."""
    while True:
        try:
            data = os.read(fd, 64)
        except OSError:
            return
        for signum in data:
            if signum in SIGNALS and _state.installed:
                _state.seen += 1
                if _state.seen >= 2:
                    for path in list(_state.open_files):
                        Path(path).unlink(missing_ok=True)
                    os.write(2, b"interrupted\n")
                    os._exit(128 + signum)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through the safe-point handler (main thread only; idempotent)."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    for signum in (*SIGNALS, *([signal.SIGALRM] if hasattr(signal, "SIGALRM") else [])):
        _state.previous[signum] = signal.signal(signum, _raise_when_safe)
    if sys.platform != "win32":
        if _state.wakeup_write is None:  # one pipe and one watchdog thread per process
            read, _state.wakeup_write = os.pipe()
            os.set_blocking(_state.wakeup_write, False)
            threading.Thread(target=_watchdog, args=(read,), name="signal-watchdog", daemon=True).start()
        signal.set_wakeup_fd(_state.wakeup_write, warn_on_full_buffer=False)
    _state.installed, _state.seen, _state.pending = True, 0, None
    on_exit(uninstall)


def uninstall() -> None:
    """Give the signals back to the handlers they had before `install()`."""
    if not _state.installed or threading.current_thread() is not threading.main_thread():
        return
    if hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, 0)
    for signum, handler in _state.previous.items():
        signal.signal(signum, handler)
    if _state.wakeup_write is not None:
        signal.set_wakeup_fd(-1)
    _state.previous, _state.pending, _state.installed = {}, None, False


def removed_on_hard_exit(*paths: Path) -> None:
    """Remember temporaries the watchdog removes if a second signal ends the process mid-write."""
    _state.open_files.update(paths)


def forget(*paths: Path) -> None:
    """The temporaries are renamed or removed: nothing to clean up for them any more."""
    _state.open_files.difference_update(paths)
