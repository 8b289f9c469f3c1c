"""Where a stopped 06 rank's way out goes under torchrun (issue 51): one Ctrl-C to torchrun after N recorded steps.

torchrun, signalled, passes the signal on to its ranks and SIGKILLs those still running after its shutdown timeout
(30 s by default; `--shutdown-timeout`, TORCH_ELASTIC_SHUTDOWN_TIMEOUT from torch 2.12). Each trial starts 06 on
two gloo ranks at the tests' tiny shape, sends SIGINT to torchrun once a rank enters its (N+2)-th train_step (wait=1,
warmup=1: N profiled steps done), and prints, per rank, the seconds each phase of its way out took (the calls timed
as benchmarks/stop_times.py times them), from the signal to the rank's exit, and which files were kept.

Usage:
    python benchmarks/ddp_stop_times.py 300 1000 3000              # the grace raised to 900 s: the whole way out
    python benchmarks/ddp_stop_times.py 1000 --grace 30            # torchrun's default: are the traces kept?
    python3 benchmarks/ddp_stop_times.py 300 1000 --device cuda --nproc 1   # one GPU rank (NCCL)
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.stop_times import PHASES  # noqa: E402

TINY_06 = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]
LAUNCHER = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")
GUARD_S = 1800
# PHASES with each phase line saying its rank, and a MARKED line as the rank enters its N-th train_step
MARKED = (
    PHASES.replace('f"phase {phase}', "f\"phase {os.environ['RANK']} {phase}")
    .replace("script, *rest = sys.argv[1:]", "mark, script, *rest = sys.argv[1:]")
    .replace(
        "runpy.run_path",
        "enter, calls = ap.record_function.__enter__, [0]\n"
        "def marking(self):\n"
        "    out = enter(self)\n"
        "    if self.name == 'train_step':\n"
        "        calls[0] += 1\n"
        "        if calls[0] == 3:\n"
        "            os.write(2, b'RECORDING\\n')\n"
        "        if calls[0] == int(mark):\n"
        "            os.write(2, b'MARKED\\n')\n"
        "    return out\n"
        "ap.record_function.__enter__ = marking\n"
        "runpy.run_path",
    )
)


def trial(steps: int, grace: int, device: str = "cpu", nproc: int = 2) -> str:
    with tempfile.TemporaryDirectory() as traces:
        env = {k: v for k, v in os.environ.items() if k not in LAUNCHER and not k.startswith("TORCHELASTIC")}
        env.update(PYTHONUNBUFFERED="1", TORCH_ELASTIC_SHUTDOWN_TIMEOUT=str(grace))
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(nproc),
               "--no-python", sys.executable, "-c", MARKED, str(steps + 2), str(ROOT / "06_ddp_training_step.py"),
               *TINY_06, "--active", "100000", "--device", device, "--traces-dir", traces]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        err: list[tuple[float, str]] = []
        marked = threading.Event()
        recording: list[float] = []  # as the first rank's first recorded step began

        def read() -> None:
            for line in proc.stderr:
                err.append((time.monotonic(), line))
                if line.strip() == "RECORDING" and not recording:
                    recording.append(time.monotonic())
                if line.strip() == "MARKED":
                    marked.set()

        reader = threading.Thread(target=read)
        reader.start()
        out = []
        threading.Thread(target=lambda: out.extend(proc.stdout)).start()
        marked.wait(GUARD_S)
        sent = time.monotonic()
        proc.send_signal(signal.SIGINT)
        proc.wait(GUARD_S)
        ended = time.monotonic()
        reader.join()
        spent: dict[str, dict[str, float]] = {}
        for _, text in err:
            if m := re.match(r"phase (\d) (.+) ([\d.]+)$", text.strip()):
                spent.setdefault(m[1], {})
                spent[m[1]][m[2]] = spent[m[1]].get(m[2], 0.0) + float(m[3])
        kept = sorted(p.name for p in Path(traces).rglob("*") if p.is_file() and not p.name.startswith("."))
        killed = any("forcefully exiting" in line for _, line in err)
        stopped = sorted({m for _, line in err for m in re.findall(r"stopped by \S+ after [\d,]+", line)})
        stopped += sorted({m for line in out for m in re.findall(r"stopped by \S+ after [\d,]+", line)})
        lines = [
            f"{steps} steps on {nproc} {device} rank(s) (recorded in {sent - recording[0]:.1f} s), grace {grace} s:"
            f" torchrun ended {ended - sent:.1f} s after the signal"
            f"{', SIGKILLed its ranks' if killed else ''}; {stopped[:1]}; kept: {', '.join(kept) or 'nothing'}"
        ]
        lines += [f"  said: {line.rstrip()}" for _, line in err if line.startswith("  the trace may take")]
        for rank, phases in sorted(spent.items()):
            lines.append(f"  rank {rank}: " + ", ".join(f"{name} {s:.2f} s" for name, s in phases.items()))
        if not spent or os.environ.get("SHOW"):
            lines.append("".join(line for _, line in err)[-3000:])
        return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("steps", type=int, nargs="+", help="recorded steps before the signal")
    parser.add_argument("--grace", type=int, default=900, help="torchrun's shutdown timeout, seconds")
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="06's --device (cuda: NCCL)")
    parser.add_argument("--nproc", type=int, default=2, help="ranks (one a GPU on cuda)")
    args = parser.parse_args()
    for steps in args.steps:
        print(trial(steps, args.grace, args.device, args.nproc), flush=True)


if __name__ == "__main__":
    main()
