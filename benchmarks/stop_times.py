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

Usage:
    python benchmarks/stop_times.py tiny --trials 3
    python benchmarks/stop_times.py slow --trials 2 [--signal TERM]
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


def trial(kind: str, signum: int, delay_s: float) -> str:
    script, flags = KINDS[kind]
    with tempfile.TemporaryDirectory() as traces:
        env = {**os.environ, "PYTHONUNBUFFERED": "1"}
        cmd = [sys.executable, str(ROOT / f"{script}.py"), *flags, "--device", "cpu", "--traces-dir", traces]
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: list[tuple[float, str]] = []
        reader = threading.Thread(target=lambda: err.extend((time.monotonic(), line) for line in proc.stderr))
        reader.start()
        for line in proc.stdout:
            if line.startswith(("importing torch's compiler", "...", "the profiled steps (")):  # the steps come next
                break
        time.sleep(delay_s)
        sent = time.monotonic()
        proc.send_signal(signum)
        out = proc.stdout.read()  # to the end
        print(out[-3000:], "".join(line for _, line in err)[-2000:], file=sys.stderr)
        proc.wait(timeout=GUARD_S)
        ended = time.monotonic()
        reader.join()
        ack = next((t for t, line in err if ACK in line), None)
        kept = sorted(Path(traces).rglob("*.json"))
        steps = f"{len(read_trace(kept[0]).steps):,} steps kept" if kept else "no trace kept"
        stopped = next((line.strip() for line in out.splitlines() if line.startswith("stopped by")), "")
        ack_s = f"{ack - sent:.2f} s" if ack is not None else "none"
        return f"{kind}: ack {ack_s}, exit {ended - sent:.1f} s (rc {proc.returncode}), {steps}; {stopped[:60]}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("kind", choices=sorted(KINDS))
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--signal", default="INT", choices=["INT", "TERM", "HUP"])
    parser.add_argument("--delay", type=float, default=4.0, help="seconds after the profiler's imports")
    args = parser.parse_args()
    for _ in range(args.trials):
        print(trial(args.kind, getattr(signal, f"SIG{args.signal}"), args.delay), flush=True)


if __name__ == "__main__":
    main()
