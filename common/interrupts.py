"""Ctrl-C, SIGTERM and SIGHUP end a run cleanly: at a safe point, with one line, and no file left behind.

A first signal raises `Interrupted` in the main thread as soon as it runs the suite's or the script's
own code: never inside torch.profiler's or record_function's code, where an exception can leave the
profiler half-stopped (a KeyboardInterrupt raised in the profiler's callbacks once took the process
down with SIGSEGV). A second signal ends the process at once, even inside a long native call that holds
the main thread: a watchdog thread, woken by the signal itself (`signal.set_wakeup_fd`), removes the
temporaries a save had open (never a file under a final name) and exits. A Ctrl-C during `import torch`,
before `setup()`, is Python's own. A signal the process was started with ignored (`nohup` ignores SIGHUP,
`trap '' INT` SIGINT) stays ignored.

An `Interrupted` raised where Python swallows exceptions (a weakref callback, a `__del__`: "Exception ignored
in ...") is not lost: `sys.unraisablehook` puts its signal back to wait for the next safe point.

Renames that must all land or none (common.harness.export's commit) run inside `atomic()`: a first signal still
waiting when it begins is taken before it, one arriving during it after it, and a second waits for its end
(at most HARD_EXIT_WAIT_S) before the process ends.

While a profiler loop records its steps, the harness holds a first signal for the end of the step in progress
(`hold_for_step_end`, common.harness.recording): it is taken there (`take_at_step_end`), from the harness's hook on
`prof.step()`, so that the steps already recorded make a whole trace. The watchdog says so at once, with the line
the harness hands `acknowledge_with`, whatever the main thread is running: a step of microseconds, whose Python
would meet no safe point, or one long native call.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from types import FrameType

from common.cli import Interrupted, interrupt_said, on_exit

SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
POLL_S = 0.02  # while a signal waits for a safe point, how often the main thread is looked at again
HARD_EXIT_WAIT_S = 10.0  # how long a second signal waits for renames in progress (a few system calls) to end
# Code an exception must not cross: the profiler's state machine and record_function's enter/exit.
UNSAFE = (f"{os.sep}torch{os.sep}profiler{os.sep}", f"{os.sep}torch{os.sep}autograd{os.sep}profiler")


class _State:
    installed = False
    pending: int | None = None  # the signal waiting for a safe point
    previous: dict[int, object] = {}
    open_files: dict[Path, None] = {}  # temporaries to remove if the process must end at once, in the order made
    unlink: Callable[[bytes], int] | None = None  # libc's unlink, called with the GIL held (install())
    wakeup_write: int | None = None  # the pipe the C-level handler writes each signal's number to
    seen = 0  # signals since install()
    taken = False  # a signal was raised as `Interrupted` since install(): the run is ending
    renaming = threading.RLock()  # held by `atomic()`: the watchdog takes it before it ends the process
    unraisable_hook: Callable | None = None  # sys.unraisablehook before install()
    atomic_depth = 0  # `atomic()` blocks the main thread is in: a first signal waits for their end
    first: int | None = None  # the first signal since install(), whoever saw it first (handler or watchdog)
    hold = False  # a first signal waits for the end of the profiled step in progress (take_at_step_end)
    acknowledge: Callable[[int], str | None] | None = None  # the line the watchdog prints on a first signal
    acknowledged = False  # that line was printed (by the watchdog, or by the main thread that got there first)
    saying = threading.Lock()  # held while the line is made and printed: it is printed once


_state = _State()


def _unsafe(frame: FrameType | None) -> bool:
    """Whether the main thread is inside torch's profiler code (anywhere up its stack)."""
    while frame is not None:
        if any(part in frame.f_code.co_filename for part in UNSAFE):
            return True
        frame = frame.f_back
    return False


def _raise_when_safe(signum: int, frame: FrameType | None) -> None:
    if _state.taken:  # the run is ending on an earlier signal: a second is the watchdog's (a hard exit), and
        return  # raising it here would land inside the first one's handling, as a traceback
    if signum in SIGNALS:
        _state.pending = _state.pending or signum
        _state.first = _state.first or signum
    if _state.pending is None or _state.hold:  # held: taken at the end of the step (take_at_step_end)
        return
    if _state.atomic_depth or _unsafe(frame):
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, POLL_S)  # look again soon (SIGALRM comes back here)
        return
    pending, _state.pending, _state.taken = _state.pending, None, True
    raise Interrupted(pending)


def _unraisable(report: object) -> None:
    """sys.unraisablehook: an `Interrupted` that Python swallowed (raised inside a weakref callback or a
    finalizer) waits for the next safe point again, unsaid; anything else goes to the hook there was before."""
    exc = getattr(report, "exc_value", None)
    if isinstance(exc, Interrupted) and _state.installed:
        _state.pending, _state.taken = _state.pending or exc.signum, False  # not taken after all: the run goes on
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, POLL_S)
        return
    (_state.unraisable_hook or sys.__unraisablehook__)(report)


def _hard_exit(signum: int) -> None:
    """End the process now: after any rename in progress, with `interrupted` as the last line it prints,
    removing only the temporaries of a save still being written."""
    _state.renaming.acquire(timeout=HARD_EXIT_WAIT_S)  # held from here on: no rename starts after this
    if not interrupt_said():  # the first signal's line, if the run got to say it, stays the only one
        os.write(2, b"interrupted\n")
    quiet = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):  # the main thread runs on meanwhile: a write failing on a removed temporary stays unsaid
        os.dup2(quiet, fd)
    # The main thread runs on between any two calls that let go of the GIL (os.unlink does): it could open a
    # temporary just removed by its name again and write it whole before the exit. So the temporaries go, the last
    # made first (Kineto's own `.tmp` before the file it is renamed to), through libc's unlink called with the GIL
    # held, and the process ends in the same stretch: no Python code of the main thread runs in between.
    paths = [os.fsencode(path) for path in reversed(list(_state.open_files))]
    unlink = _state.unlink or os.unlink
    for path in paths:
        with contextlib.suppress(OSError):  # os.unlink's; libc's returns -1
            unlink(path)
    os._exit(128 + signum)


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
                _state.first = _state.first or signum
                if _state.seen >= 2:
                    _hard_exit(signum)
                _acknowledge(signum)


def _acknowledge(signum: int) -> None:
    """Print the harness's line for a first signal (acknowledge_with), at once: the watchdog's, so a main thread
    busy in a long native call or in a loop of tiny steps does not hold it back. Printed once: by whichever of the
    watchdog and the main thread (acknowledge_now) gets to it first."""
    say = _state.acknowledge
    if say is None:
        return
    with _state.saying:
        if _state.acknowledged:
            return
        try:
            line = say(signum)
            if line:
                os.write(2, line.encode("ascii", "replace") + b"\n")
                _state.acknowledged = True
        except Exception:  # noqa: BLE001 (a line that cannot be made or written is lost, never the watchdog)
            return


def acknowledge_now() -> None:
    """From the main thread, as it takes a first signal at a step's end: the signal's line, if the watchdog has
    not printed it yet. The watchdog needs the GIL to print, and the main thread goes on from here into torch's
    collection of the recorded events, a native call that holds the GIL for seconds: on a GPU run (seen on an
    H100: 2.3-5.4 s in 4 of 5 trials) the line came only after it."""
    if _state.installed and _state.first is not None and not _state.acknowledged:
        _acknowledge(_state.first)


def _gil_holding_unlink() -> Callable[[bytes], int] | None:
    """libc's unlink through ctypes.PyDLL, which keeps the GIL during the call (os.unlink lets go of it); None where
    there is no libc to load."""
    try:
        import ctypes  # noqa: PLC0415 (only scripts install the handlers)

        unlink = ctypes.PyDLL(None).unlink
    except (OSError, AttributeError):
        return None
    unlink.argtypes, unlink.restype = [ctypes.c_char_p], ctypes.c_int
    return unlink


def _start_unsignalled(thread: threading.Thread) -> None:
    """Start `thread` with SIGNALS blocked in it (a thread inherits its creator's mask), so the kernel hands a
    process-wide signal to the main thread: its sleep or lock wait is cut short there and the handler runs at
    once, never later when a thread that cannot run Python handlers happens to be scheduled (a loaded machine)."""
    if not hasattr(signal, "pthread_sigmask"):
        thread.start()
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, set(SIGNALS))
    try:
        thread.start()
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def in_worker() -> None:
    """In a process forked from one that install()ed (a pool worker): Ctrl-C is left to the parent (ignored),
    SIGTERM and SIGHUP end it at once and silently (the defaults, as the parent's pool.terminate() sends), its
    signals no longer write to the parent's watchdog pipe, and it ends with its parent (Linux), so a parent that
    had to exit at once leaves no worker behind to print a broken pipe's traceback."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_IGN if signum == signal.SIGINT else signal.SIG_DFL)
    if hasattr(signal, "SIGALRM"):
        signal.signal(signal.SIGALRM, signal.SIG_DFL)
    if sys.platform != "win32":
        signal.set_wakeup_fd(-1)
    sys.unraisablehook = _state.unraisable_hook or sys.__unraisablehook__
    _state.installed, _state.pending, _state.open_files = False, None, {}
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            import ctypes  # noqa: PLC0415

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
        if os.getppid() == 1:  # the parent ended before the line above took effect
            os._exit(0)


def install() -> None:
    """Route SIGINT, SIGTERM and SIGHUP through the safe-point handler (main thread only; idempotent),
    except a signal that is ignored (SIG_IGN, inherited from the parent): it stays ignored."""
    if _state.installed or threading.current_thread() is not threading.main_thread():
        return
    for signum in (*SIGNALS, *([signal.SIGALRM] if hasattr(signal, "SIGALRM") else [])):
        if signum in SIGNALS and signal.getsignal(signum) == signal.SIG_IGN:
            continue
        _state.previous[signum] = signal.signal(signum, _raise_when_safe)
    if sys.platform != "win32":
        if _state.unlink is None:
            _state.unlink = _gil_holding_unlink()
        if _state.wakeup_write is None:  # one pipe and one watchdog thread per process
            read, _state.wakeup_write = os.pipe()
            os.set_blocking(_state.wakeup_write, False)
            _start_unsignalled(threading.Thread(target=_watchdog, args=(read,), name="signal-watchdog", daemon=True))
        signal.set_wakeup_fd(_state.wakeup_write, warn_on_full_buffer=False)
    _state.unraisable_hook, sys.unraisablehook = sys.unraisablehook, _unraisable
    _state.installed, _state.seen, _state.pending, _state.taken = True, 0, None, False
    _state.first, _state.hold, _state.acknowledge, _state.acknowledged = None, False, None, False
    on_exit(uninstall)


def _end_quietly(signum: int, frame: FrameType | None) -> None:
    os._exit(128 + signum)


def uninstall() -> None:
    """Give the signals back to the handlers they had before `install()`. After a signal (the run is ending,
    its `interrupted` said, or one arrived too late to be taken), one more ends the process at once and quietly
    instead: Python's own handler would raise a KeyboardInterrupt into the interpreter's shutdown, with a
    traceback and exit 1."""
    if not _state.installed or threading.current_thread() is not threading.main_thread():
        return
    with _state.renaming:  # a hard exit under way holds it to the end: its exit code, not the run's, is the one
        if hasattr(signal, "setitimer"):
            signal.setitimer(signal.ITIMER_REAL, 0)
        for signum, handler in _state.previous.items():
            signalled = _state.seen or _state.taken or _state.pending is not None  # a first one not yet taken too
            signal.signal(signum, _end_quietly if signalled and signum in SIGNALS else handler)
        if _state.wakeup_write is not None:
            signal.set_wakeup_fd(-1)
        if sys.unraisablehook is _unraisable:
            sys.unraisablehook = _state.unraisable_hook or sys.__unraisablehook__
        _state.previous, _state.pending, _state.installed = {}, None, False
        _state.hold, _state.acknowledge = False, None


def _take_pending() -> None:
    """Raise the signal waiting for a safe point now, where the caller's stack is one (outside torch.profiler)."""
    if _state.pending is not None and _state.installed and threading.current_thread() is threading.main_thread():
        _raise_when_safe(_state.pending, sys._getframe())


@contextlib.contextmanager
def atomic() -> Iterator[None]:
    """A block of renames that must all happen or none. A signal still waiting for a safe point when it
    begins is taken before it (the renames do not start); one that arrives during it raises `Interrupted`
    after it, and a second signal's hard exit waits for it to end. Keep it to a few system calls."""
    _take_pending()
    with _state.renaming:
        _state.atomic_depth += 1
        try:
            yield
        finally:
            _state.atomic_depth -= 1
    _take_pending()  # now, not at the next poll


def removed_on_hard_exit(*paths: Path) -> None:
    """Remember temporaries the watchdog removes if a second signal ends the process mid-write (only this
    run's temporaries: a file under its final name is never handed here)."""
    _state.open_files.update(dict.fromkeys(paths))


def forget(*paths: Path) -> None:
    """The temporaries are renamed or removed: nothing to clean up for them any more."""
    for path in paths:
        _state.open_files.pop(path, None)


def signal_name(signum: int) -> str:
    """How a line names the signal: `Ctrl-C` for SIGINT, else its name (`SIGTERM`, `SIGHUP`)."""
    return "Ctrl-C" if signum == signal.SIGINT else signal.Signals(signum).name


def first_signal() -> int | None:
    """The first SIGINT, SIGTERM or SIGHUP since install(), taken or not; None while none came."""
    return _state.first if _state.installed else None


def hold_for_step_end(hold: bool) -> None:
    """While `hold`, a first signal is not raised at the next safe point but waits for `take_at_step_end`, at the end
    of the profiled step in progress; turned off, one already waiting is raised at the next safe point."""
    _state.hold = hold
    if not hold and _state.pending is not None and _state.installed and hasattr(signal, "setitimer"):
        signal.setitimer(signal.ITIMER_REAL, POLL_S)


def take_at_step_end(signum: int | None = None) -> None:
    """Raise the first signal as `Interrupted` if one is waiting, or as if `signum` had come (another rank's, that
    this one stops on too): call it at the end of a step, outside torch's profiler code, where the steps before
    make a whole recording."""
    if _state.installed and not _state.taken and (_state.pending or signum) is not None:
        pending, _state.pending, _state.taken = _state.pending or signum, None, True
        _state.first = _state.first or pending
        raise Interrupted(pending)


def signals_seen() -> int:
    """How many SIGINT, SIGTERM or SIGHUP came since install() (0 where the handlers are not installed)."""
    return _state.seen if _state.installed else 0


def signal_waiting() -> int | None:
    """The first signal, if one waits to be taken."""
    return _state.pending if _state.installed and not _state.taken else None


def acknowledge_with(line: Callable[[int], str | None] | None) -> None:
    """`line(signum)`: what the watchdog prints to stderr the moment a first signal arrives (None: nothing). It runs
    in the watchdog thread while the main thread goes on: it reads, it never waits."""
    _state.acknowledge = line
