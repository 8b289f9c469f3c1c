"""The longest silence of each README command: how long a reader waits with no new line, and whether the line
before the wait said what was coming.

Usage (from the repository root): `python3 benchmarks/silences.py [--only SUBSTR] [--pages README.md ...]`.

Each command of the pages' ``` blocks (as benchmarks/estimate_accuracy.py finds them) runs as the reader runs it,
`uv run --no-sync <script>.py ...` (torchrun lines through `uv run --no-sync torchrun ...`), with its traces in a
temporary folder, HF_HUB_OFFLINE=1 and PYTHONUNBUFFERED=1. Its stdout and stderr are read together, each line
stamped as it arrives. A wait is announced when the line before it ends in "..." (a phase saying it starts) or is
a progress line ("... 10.0 s of about ..."). The table gives, per command: its exit code, its wall time, the wait
before its first line, its longest announced and unannounced waits (with the line before the unannounced one), and
the exit tail, from its last line to the prompt.
"""

from __future__ import annotations

import argparse
import itertools
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from estimate_accuracy import ROOT, Command, readme_commands  # noqa: E402


def announced(line: str) -> bool:
    """Whether `line` says that something slow follows: a phase's "... ..." or a progress line."""
    line = line.strip()
    return line.endswith("...") or line.startswith("... ")


def silences(stamped: list[tuple[float, str]], end: float) -> dict[str, object]:
    """From a run's lines, each with the second it arrived (from the start), and the second it ended: the wait
    before its first line, its longest announced and unannounced waits between lines, the line before the
    unannounced one, and the tail from its last line to its end."""
    first = stamped[0][0] if stamped else end
    loud, quiet, before = 0.0, 0.0, ""
    for (t0, line), (t1, _) in itertools.pairwise(stamped):
        if announced(line):
            loud = max(loud, t1 - t0)
        elif t1 - t0 > quiet:
            quiet, before = t1 - t0, line.strip()
    tail = end - stamped[-1][0] if stamped else 0.0
    return {"first": first, "announced": loud, "unannounced": quiet, "before": before, "tail": tail}


def argv(command: Command, traces: Path) -> list[str]:
    """The command as the reader types it (`uv run`, no sync), its traces in `traces`."""
    run = ["torchrun", *command.torchrun] if command.torchrun else []
    return ["uv", "run", "--no-sync", *run, command.script, *command.args, "--traces-dir", str(traces)]


def stamp(cmd: list[str], timeout: float) -> tuple[int | None, list[tuple[float, str]], float]:
    """Run `cmd` in the repository root: its exit code (None: killed at `timeout`), its lines stamped, its end."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    start = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    # Past the timeout its whole process group is killed (uv's python, torchrun's ranks hold the pipe too), as
    # benchmarks/subproc.measure does.
    killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
    killer.start()
    stamped = [(time.perf_counter() - start, line) for line in proc.stdout]
    rc = proc.wait()
    killed = not killer.is_alive()
    killer.cancel()
    return (None if killed else rc), stamped, time.perf_counter() - start


def main(argv_: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="run only the commands whose line holds this text")
    parser.add_argument("--pages", nargs="+", default=["README.md"], help="the pages whose commands run")
    parser.add_argument("--timeout", type=float, default=900, help="seconds a command may take (default: 900)")
    args = parser.parse_args(argv_)
    text = "\n".join((ROOT / page).read_text() for page in args.pages)
    commands = [c for c in readme_commands(text) if args.only in c.line]
    print(f"{len(commands)} commands of {', '.join(args.pages)}, 2-core load {os.getloadavg()[0]:.1f}")
    print("| command | exit | wall | first line | longest announced | longest unannounced (after) | exit tail |")
    print("| --- | ---: | ---: | ---: | ---: | --- | ---: |")
    for command in commands:
        with tempfile.TemporaryDirectory() as traces:
            rc, stamped, end = stamp(argv(command, Path(traces)), args.timeout)
        s = silences(stamped, end)
        after = str(s["before"])[:60].replace("|", "/")
        waits = f"{s['announced']:.2f} s | {s['unannounced']:.2f} s ({after}) | {s['tail']:.2f} s"
        line = command.line.removeprefix("uv run ")
        print(f"| `{line}` | {rc} | {end:.1f} s | {s['first']:.2f} s | {waits} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
