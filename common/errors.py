"""One clear line and a non-zero exit for anything the user can fix."""

from __future__ import annotations

import functools
import sys
from typing import Callable

EXIT_USAGE = 2


class SuiteError(Exception):
    """A problem with the input or the machine, reported as one line (no traceback)."""


def fail(message: str) -> None:
    """Print `error: <message>` to stderr and exit with EXIT_USAGE."""
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(EXIT_USAGE)


def cli(main: Callable[..., int]) -> Callable[..., int]:
    """Decorate a script's `main(argv)` so user-facing failures become one line and exit 2.

    Only the errors a reader can act on are caught (bad input, out of memory, an
    unwritable folder); a bug in the suite still shows its traceback.
    """

    @functools.wraps(main)
    def wrapper(argv: list[str] | None = None) -> int:
        import torch  # here, not at the top: `python -m common.summary` uses this module without torch

        try:
            return main(argv)
        except SuiteError as exc:
            fail(str(exc))
        except torch.cuda.OutOfMemoryError:
            fail("out of GPU memory at these sizes; try smaller shapes")
        except OSError as exc:
            fail(f"{exc.strerror or exc} ({exc.filename})" if exc.filename else str(exc))
        return EXIT_USAGE  # unreachable: fail() raises

    return wrapper
