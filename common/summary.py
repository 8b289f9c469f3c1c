"""`python -m common.summary`: the entry point of common.analysis.summary (kept short to type).

The signal handler goes in first, before the reader's modules load (0.1-1.3 s): a Ctrl-C while they do is the
one `interrupted` line and exit 130, as later, never a KeyboardInterrupt's traceback."""

import sys

from common import interrupts
from common.cli import Interrupted


def run(argv: list[str] | None = None) -> int:
    """common.analysis.summary's main, loaded after interrupts.install()."""
    interrupts.install()
    try:
        from common.analysis.summary import main  # noqa: PLC0415 (after the handler)
    except Interrupted as exc:
        print("interrupted", file=sys.stderr)
        return 128 + exc.signum
    return main(argv)


if __name__ == "__main__":
    raise SystemExit(run())
