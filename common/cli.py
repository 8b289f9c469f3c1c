"""The command-line contract of the whole suite, scripts and summary alike.

Bad input or a machine that cannot do the job: one `error: ...` line on stderr and exit 2.
Ctrl-C: one `interrupted` line and exit 130. Never a traceback for either. While a `cli` main runs, what
it prints goes through one guard (`GuardedStream`): a control character (ESC, BEL, the C1 set, DEL, bidi
overrides) from a trace or a path is shown as its escape (`\\x1b`), so a trace cannot drive the terminal, and
on a terminal whose encoding lacks a character the suite prints (`LC_ALL=C`) an ASCII stand-in is printed
(`×` -> `x`, `→` -> `->`, `µ` -> `u`, `—` -> `-`, others as `\\u` escapes), never a UnicodeEncodeError. This
module never imports torch, so `python -m common.summary` starts without it.
"""

from __future__ import annotations

import argparse
import codecs
import contextlib
import functools
import os
import re
import sys
import textwrap
from collections.abc import Callable
from typing import NoReturn, TextIO

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for Ctrl-C
MAX_INT = 2**31 - 1  # larger integers are refused when parsed: no shape, step count or size here needs more
WIDTH = 120  # every line the suite prints fits a terminal this wide


REGION_HELP = (  # the summary's and the diff's --region
    "the record_function label whose span is the CPU column (default: the suite's own label on its traces, "
    "else the ProfilerStep#N span, or the whole profiled window in a trace without steps)"
)


# What is shown as its escape: C0 controls, DEL and C1, zero-width and bidirectional controls (U+202E turns the
# rest of a line around), line and paragraph separators, the byte order mark, lone surrogates.
_OTHER_CONTROLS = "\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff"
_CONTROL = re.compile(f"[\x00-\x1f{_OTHER_CONTROLS}]")
_CONTROL_BUT_NEWLINE = re.compile(f"[\x00-\x09\x0b-\x1f{_OTHER_CONTROLS}]")
# ASCII stand-ins for the characters the suite's own lines use, on a terminal that cannot show them.
STAND_INS = {"×": "x", "→": "->", "µ": "u", "μ": "u", "—": "-", "–": "-", "−": "-", "…": "...", "Δ": "d",
             "÷": "/", "∞": "inf", "²": "^2", "³": "^3", "≥": ">=", "≤": "<=", "≈": "~", "±": "+-"}  # fmt: skip
_STAND_IN_ERRORS = "common.cli.stand_in"


def _escape(found: re.Match[str]) -> str:
    return found[0].encode("unicode_escape").decode("ascii")


def shown(text: str, newlines: bool = False) -> str:
    """`text` (from a trace or a path: untrusted) with every control character as its escape (`\\x1b`,
    `\\u202e`, `\\n`); with `newlines` the line breaks are kept (a whole report)."""
    return (_CONTROL_BUT_NEWLINE if newlines else _CONTROL).sub(_escape, text)


def _stand_in(exc: UnicodeError) -> tuple[str, int]:
    """Encoding error handler: each character the encoding lacks as its STAND_INS entry, else a \\u escape."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    bad = exc.object[exc.start : exc.end]
    return "".join(STAND_INS.get(c) or c.encode("ascii", "backslashreplace").decode("ascii") for c in bad), exc.end


codecs.register_error(_STAND_IN_ERRORS, _stand_in)


class GuardedStream:
    """A text stream (stdout, stderr) that writes what it is given with its control characters escaped (line
    breaks kept) and the characters its encoding lacks as ASCII stand-ins; the rest is the stream's own."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        encoding = getattr(stream, "encoding", None) or "utf-8"
        try:
            self._recode = not codecs.lookup(encoding).name.startswith("utf")
        except LookupError:
            self._recode = True
        self._encoding = encoding if self._recode else "utf-8"

    def write(self, text: str) -> int:
        text = shown(text, newlines=True)
        if self._recode:
            text = text.encode(self._encoding, _STAND_IN_ERRORS).decode(self._encoding)
        return self.stream.write(text)

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def _guard_output() -> Callable[[], None]:
    """Put sys.stdout and sys.stderr behind GuardedStream; return what puts the old ones back."""
    old = sys.stdout, sys.stderr
    if sys.stdout is not None and not isinstance(sys.stdout, GuardedStream):
        sys.stdout = GuardedStream(sys.stdout)
    if sys.stderr is not None and not isinstance(sys.stderr, GuardedStream):
        sys.stderr = GuardedStream(sys.stderr)

    def restore() -> None:
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, GuardedStream):
                with contextlib.suppress(OSError, ValueError):  # a full or closed stream: the exit code stands
                    stream.flush()
        sys.stdout, sys.stderr = old

    return restore


class SuiteError(Exception):
    """A problem with the input or the machine, reported as one line (no traceback)."""


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised at a safe point (common.interrupts); the exit code is 128 + signum."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


_CLEANUPS: list[Callable[[], None]] = []
_SAID = {"interrupted": False}


def interrupt_said() -> bool:
    """Whether `cli` has printed (or is printing) this run's `interrupted` line: a second signal adds none."""
    return _SAID["interrupted"]


def on_exit(cleanup: Callable[[], None]) -> None:
    """Call `cleanup` once when the `cli`-wrapped main returns or fails (e.g. give the signals back)."""
    if cleanup not in _CLEANUPS:
        _CLEANUPS.append(cleanup)


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag prints one `error:` line (no usage dump) and exits 2; no abbreviated flags."""

    def __init__(self, doc: str | None = None, **kwargs: object) -> None:
        summary, _, details = (doc or "").strip().partition("\n")
        kwargs.setdefault("description", summary)
        kwargs.setdefault("epilog", details.strip() or None)
        super().__init__(allow_abbrev=False, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def parse_known_args(
        self, args: list[str] | None = None, namespace: argparse.Namespace | None = None
    ) -> tuple[argparse.Namespace, list[str]]:
        """argparse's, keeping the flags as given in `.argv` (for the cheaper command a long run suggests)."""
        parsed, extras = super().parse_known_args(args, namespace)
        parsed.argv = list(sys.argv[1:] if args is None else args)
        return parsed, extras

    def error(self, message: str) -> NoReturn:
        say(f"error: {message} (see --help)")
        raise SystemExit(EXIT_USAGE)


def _integer(text: str, least: int) -> int:
    wanted = "a positive integer" if least == 1 else f"an integer >= {least}"
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"expected {wanted}, got {value}")
    if value > MAX_INT:
        raise argparse.ArgumentTypeError(f"{value} is too large (at most {MAX_INT})")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer from 1 to MAX_INT."""
    return _integer(text, 1)


def non_negative_int(text: str) -> int:
    """argparse type: an integer from 0 to MAX_INT."""
    return _integer(text, 0)


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def fit(line: str, indent: str = "  ") -> str:
    """`line` wrapped at spaces to WIDTH columns, each continuation indented by `indent`: a progress or estimate
    line whose figures or names run long (a run past its estimate, a long flag list) stays within the terminal."""
    if len(line) <= WIDTH:
        return line
    lead = line[: len(line) - len(line.lstrip(" "))]
    return "\n".join(
        textwrap.wrap(line, WIDTH, subsequent_indent=lead + indent, break_long_words=False, break_on_hyphens=False)
    )


def fit_command(command: str, indent: str = "    ") -> str:
    """A shell command on lines of at most WIDTH columns, each but the last ended by ` \\` so that the lines,
    copied together, run as the one command; each continuation indented by `indent`."""
    lines: list[str] = []
    line = indent
    for word in command.split(" "):
        if line.strip() and len(line) + 1 + len(word) + 2 > WIDTH:
            lines.append(line + " \\")
            line = indent + "  "
        line += (" " if line.strip() else "") + word
    return "\n".join([*lines, line])


def say(line: str) -> None:
    """Print `line` to stderr and flush it. Where stderr cannot take it (a full device, a closed pipe), the line is
    lost but not the exit code: fd 2 then points at /dev/null, so neither this write nor Python's flush at exit
    turns the command's exit into a traceback, 1 or 120."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        with contextlib.suppress(OSError, ValueError, AttributeError):
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.__stderr__.fileno())


def fail(message: str, code: int = EXIT_USAGE) -> NoReturn:
    """Print `error: <message>` to stderr, on one line (a line break in it escaped), and exit with `code`."""
    say(f"error: {shown(message)}")
    raise SystemExit(code)


def end_process(code: int | None) -> NoReturn:
    """End a script's process with `code` (its main's return), once the output is flushed, without Python's
    interpreter teardown: torch.profiler's native thread, started as the trace is written, sits in a timed wait
    that holds a normal exit for about 5 s after the last line. By here main has committed its files (renamed
    into place) and run its cleanups (on_exit), so nothing is left to tear down; 06's ranks end the same way
    (common.harness.torchrun.exit_rank)."""
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(Exception):
            stream.flush()
    os._exit(code or 0)


def notice(message: str) -> None:
    """Print `notice: <message>` to stderr on one line, as `fail` does: a line break in a path or a name is shown
    as its escape, so a file name cannot forge a second line."""
    say(f"notice: {shown(message)}")


def _interrupted(exc: BaseException) -> KeyboardInterrupt | None:
    """The Ctrl-C (or other signal) behind `exc`, also when an error was raised while it was being handled."""
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        if isinstance(exc, KeyboardInterrupt):
            return exc
        seen.add(id(exc))
        exc = exc.__context__
    return None


def cli(main: Callable[..., int]) -> Callable[..., int]:
    """Decorate a `main(argv)` so user-facing failures become one line: exit 2, or 130 for Ctrl-C.

    Only errors a reader can act on are caught (bad input, out of memory, a folder that cannot be
    written); a bug in the suite still shows its traceback. Called from a script's `__main__`, such an exit ends
    the process as `end_process` ends a finished run, without the interpreter's teardown: a run stopped by Ctrl-C
    would otherwise free torch.profiler's events of every recorded step one by one (2 s for 7,000 tiny steps).
    """

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        caller = sys._getframe(1)
        if caller.f_code.co_name != "<module>" or caller.f_globals.get("__name__") != "__main__":
            return guarded(argv)  # not a script's own `end_process(main())` (a test, the summary): exits as raised
        try:
            return guarded(argv)
        except SystemExit as exc:  # a refusal (2), an interrupt (130): ended as end_process ends a finished run
            if exc.code is not None and not isinstance(exc.code, int):  # SystemExit("text"): printed, exit 1
                say(str(exc.code))
            end_process(exc.code if isinstance(exc.code, int) or exc.code is None else 1)

    def guarded(argv: list[str] | None) -> int:
        restore_output = _guard_output()
        try:
            return main(argv)
        except BrokenPipeError:  # `... | head` closed stdout: stop quietly, as other command-line tools do
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except SuiteError as exc:
            fail(str(exc))
        except MemoryError:
            fail("out of CPU memory at these sizes; try smaller shapes")
        except OSError as exc:
            where = f" ({exc.filename})" if exc.filename else ""
            fail(f"{exc.strerror or exc}{where}")
        except BaseException as exc:
            signal_exc = _interrupted(exc)
            if signal_exc is not None:
                _SAID["interrupted"] = True
                say("interrupted")
                raise SystemExit(128 + getattr(signal_exc, "signum", EXIT_INTERRUPTED - 128)) from None
            torch = sys.modules.get("torch")  # loaded by the scripts; the summary never imports it
            if torch is not None and isinstance(exc, torch.cuda.OutOfMemoryError):
                fail("out of GPU memory at these sizes; try smaller shapes")
            if isinstance(exc, RuntimeError) and "can't allocate memory" in str(exc):  # torch's CPU allocator
                tried = re.search(r"allocate (\d+) bytes", str(exc))
                size = f" (one allocation of {int(tried[1]) / 1e9:,.3g} GB failed)" if tried else ""
                fail(f"out of CPU memory at these sizes{size}; try smaller shapes")
            raise
        finally:
            while _CLEANUPS:
                _CLEANUPS.pop()()
            restore_output()

    return wrapper
