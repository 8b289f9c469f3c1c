"""How long a run takes to answer a Ctrl-C during its profiled steps (issue 51): signal -> acknowledgement line,
and signal -> exit, with what the run kept.

Each trial starts a fresh run, waits until its profiled steps are under way (--delay seconds after the line
that says torch's compiler is imported for the profiler, the one that announces the profiled steps, or the first
progress line, whichever comes first),
sends one signal and timestamps every line of stderr as it arrives.
Prints one line per trial: the times, the exit code, and the steps the kept trace holds (read back with the
suite's reader, as `python -m common.summary` does). The kinds:

    tiny      01_matmul_add.py --size 8 --active 100000 (steps of tens of microseconds), as the issue ran it
    slow      04_a_naive_attention.py --batch 16 on the CPU (seconds a step)

With --phases, each run also says where its way out went, per phase (seconds, and µs per kept step): torch's
stop (Kineto's collection of the recorded events), torch's parse of them into FunctionEvents (prof.events(), which
the .txt's key_averages table needs), key_averages, export_chrome_trace, the suite's own pass over the events
(loop.read_steps: the steps recorded and the label; the first to ask for prof.events(), so its time holds the
parse's), the trace's metadata added (export.add_metadata: a rewrite of the file), the tables, and rec.save in
all. --finished lets the run end on its own (no signal) with --active steps, so a stopped run's way out can be
set against a finished one's.

Usage:
    python benchmarks/stop_times.py tiny --trials 3
    python benchmarks/stop_times.py slow --trials 2 [--signal TERM]
    python benchmarks/stop_times.py tiny --trials 1 --phases
    python benchmarks/stop_times.py tiny --trials 1 --phases --finished --active 10000
    python3 benchmarks/stop_times.py tiny --trials 3 --device cuda      # the same on a GPU
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from common.reader.build import read_trace  # noqa: E402

KINDS = {
    "tiny": ("01_matmul_add", ["--size", "8", "--active", "100000"]),
    "slow": ("04_a_naive_attention", ["--batch", "16"]),
}
GUARD_S = 900  # a run not ended by then is stuck (a guard, not a measure)
ACK = ": stopping after this step"
# `python -c PHASES script.py ...`: the script with the calls of its way out timed, each said on stderr as it ends
PHASES = """
import functools, os, runpy, sys, time
sys.path.insert(0, os.getcwd())
import torch.autograd.profiler as ap, torch.profiler.profiler as pp
import common.harness.export as export, common.harness.recording as recording
def timed(owner, name, phase):
    call = getattr(owner, name)
    @functools.wraps(call)
    def timing(*args, **kwargs):
        start = time.perf_counter()
        try:
            return call(*args, **kwargs)
        finally:
            os.write(2, f"phase {phase} {time.perf_counter() - start:.6f}\\n".encode())
    setattr(owner, name, timing)
timed(pp._KinetoProfile, "stop_trace", "collect")
timed(ap.profile, "_ensure_function_events", "parse")
timed(pp._KinetoProfile, "key_averages", "key_averages")
timed(pp._KinetoProfile, "export_chrome_trace", "export")
timed(recording, "read_steps", "suite's scan")
timed(export, "add_metadata", "metadata")
if hasattr(export, "read_stopped"):
    timed(export, "read_stopped", "suite's table")
timed(export, "key_averages_table", "tables")
timed(recording.Recording, "save", "save in all")
script, *rest = sys.argv[1:]
sys.argv = [script, *rest]
runpy.run_path(script, run_name="__main__")
"""


def trial(kind: str, signum: int | None, delay_s: float, phases: bool, active: str | None, device: str = "cpu") -> str:
    script, flags = KINDS[kind]
    if active is not None:
        flags = [*flags[: flags.index("--active")], *flags[flags.index("--active") + 2 :], "--active", active]
    with tempfile.TemporaryDirectory() as traces:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        prefix = [sys.executable, "-c", PHASES] if phases else [sys.executable]
        cmd = [*prefix, str(ROOT / f"{script}.py"), *flags, "--device", device, "--traces-dir", traces]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: err.extend((time.monotonic(), line) for line in proc.stderr))
        reader.start()
        for line in proc.stdout:
            if line.startswith(("importing torch's compiler", "...", "the profiled steps (")):  # the steps come next
                break
        if signum is not None:
            time.sleep(delay_s)
        sent = time.monotonic()
        if signum is not None:
            proc.send_signal(signum)
        out = proc.stdout.read()  # to the end
        print(out[-3000:], "".join(line for _, line in err if not line.startswith("phase "))[-2000:], file=sys.stderr)
        proc.wait(timeout=GUARD_S)
        ended = time.monotonic()
        reader.join()
        ack = next((t for t, line in err if ACK in line), None)
        kept = sorted(Path(traces).rglob("*.json"))
        count = len(read_trace(kept[0]).steps) if kept else 0
        steps = f"{count:,} steps kept" if kept else "no trace kept"
        stopped = next((line.strip() for line in out.splitlines() if line.startswith("stopped by")), "")
        ack_s = f"{ack - sent:.2f} s" if ack is not None else "none"
        line = f"{kind} ({device}): ack {ack_s}, exit {ended - sent:.1f} s (rc {proc.returncode}), {steps};"
        line += f" {stopped[:60]}"
        if signum is None:
            line = f"{kind} finished: exit {ended - sent:.1f} s after the steps began (rc {proc.returncode}), {steps}"
        if phases:
            spent: dict[str, float] = {}
            for _, text in err:
                if text.startswith("phase "):
                    name, seconds = text[len("phase ") :].rsplit(" ", 1)
                    spent[name] = spent.get(name, 0.0) + float(seconds)
            each = ", ".join(f"{name} {s:.2f} s ({1e6 * s / max(count, 1):.0f} µs/step)" for name, s in spent.items())
            line += f"\n  way out: {each}"
        return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--signal", default="INT", choices=["INT", "TERM", "HUP"])
    parser.add_argument("--delay", type=float, default=4.0, help="seconds after the profiler's imports")
    parser.add_argument("--phases", action="store_true", help="time each phase of the way out")
    parser.add_argument("--finished", action="store_true", help="no signal: the run ends on its own")
    parser.add_argument("--active", help="the profiled steps, in place of the kind's")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="the script's --device")
    args = parser.parse_args()
    signum = None if args.finished else getattr(signal, f"SIG{args.signal}")
    for _ in range(args.trials):
        print(trial(args.kind, signum, args.delay, args.phases, args.active, args.device), flush=True)


if __name__ == "__main__":
    main()
