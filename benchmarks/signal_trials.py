"""Repeated trials of what a signal (or a memory cgroup) does to a run's files, outside pytest, for issue 22.

Each trial starts a fresh run of the scripts in --repo (this checkout, or another one, to compare releases),
sends real signals at a random delay, and counts what the reader lost. Prints one line per trial, then the
counts. The kinds:

    save      05 (tiny shape, --active 60) rerun over a good trace of its tag; two SIGINTs 20 ms apart, a random
              0-200 ms after its first hidden temporary appears. Lost: a final name gone; mixed: the .json and
              the .txt from different runs; error: an "error:" line; left: a temporary left behind.
    torchrun  06 on two gloo ranks rerun over good traces; one SIGINT to torchrun a random 0-50 ms after rank
              0's .json is replaced, or (every other trial) 0-200 ms after the first temporary. Lost / mixed.
    ignored   01 started under `nohup` (then sent SIGHUP) or after `trap '' INT` (then SIGINT), once it has
              set up: ended by the ignored signal, or not.
    cgroup    05 --dim 4096 --heads 32 --hidden 16384 in a new child of this process's cgroup v1 memory
              cgroup, limited to --limit-gb (needs root and cgroup v1): refused in one line, or killed.

Usage:
    python benchmarks/signal_trials.py save --trials 50 [--repo DIR]
    python benchmarks/signal_trials.py torchrun --trials 6
    python benchmarks/signal_trials.py ignored --trials 4
    python benchmarks/signal_trials.py cgroup --trials 2 --limit-gb 4
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

PY = sys.executable
TINY_05 = ["--batch", "1", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--active", "60"]
TINY_06 = ["--batch", "2", "--seq", "16", "--dim", "32", "--heads", "2", "--hidden", "64", "--dtype", "fp32"]
TINY_06 += ["--active", "40"]
GUARD_S = 600  # a run not ended by then is stuck (a guard, not a measure)


def visible(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if not p.name.startswith(".")}


def hidden(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.startswith(".")]


def popen(cmd: list[str], repo: Path) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "LOCAL_RANK", "WORLD_SIZE")}
    return subprocess.Popen(
        cmd, cwd=repo, env={**env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def wait_until(done: Callable[[], bool], proc: subprocess.Popen) -> bool:
    """Poll every ms until `done()`; False if the run ended first."""
    end = time.monotonic() + GUARD_S
    while not done():
        if proc.poll() is not None or time.monotonic() > end:
            return False
        time.sleep(0.001)
    return True


def verdict(earlier: dict[str, bytes], after: dict[str, bytes], groups: list[list[str]]) -> list[str]:
    """What the reader lost: names gone, and groups (a rank's .json + .txt) of mixed origin."""
    bad = [f"lost {name}" for name in earlier if name not in after]
    for names in groups:
        new = [n for n in names if n in after and after[n] != earlier[n]]
        if new and len(new) != len([n for n in names if n in after]):
            bad.append(f"mixed {names[0]}")
    return bad


def good_run(cmd: list[str], repo: Path, folder: Path) -> dict[str, bytes]:
    proc = popen(cmd, repo)
    out, err = proc.communicate(timeout=GUARD_S)
    if proc.returncode != 0:
        raise SystemExit(f"the good run failed ({proc.returncode}): {err.strip()[-500:]}")
    return visible(folder)


def trial_save(repo: Path, work: Path, earlier: dict[str, bytes]) -> tuple[str, list[str]]:
    traces = Path(tempfile.mkdtemp(dir=work))
    folder = traces / "05_training_step"
    folder.mkdir()
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    proc = popen([PY, "05_training_step.py", *TINY_05, "--device", "cpu", "--traces-dir", str(traces)], repo)
    delay = random.uniform(0, 0.2)
    if wait_until(lambda: bool(list(folder.glob(".*.tmp"))), proc):
        time.sleep(delay)
        for _ in range(2):
            os.kill(proc.pid, signal.SIGINT)
            time.sleep(0.02)
    _, err = proc.communicate(timeout=GUARD_S)
    after = visible(folder)
    bad = verdict(earlier, after, [sorted(earlier)])
    bad += ["error line"] * ("error:" in err) + [f"left {len(hidden(folder))} temporaries"] * bool(hidden(folder))
    bad += ["traceback"] * ("Traceback" in err) + [f"rc {proc.returncode}"] * (proc.returncode not in (0, 130))
    shutil.rmtree(traces)
    tail = f" stderr {err.strip()[-300:]!r}" if bad else ""
    return f"delay {delay * 1000:5.1f} ms rc {proc.returncode}{tail}", bad


def torchrun_cmd(traces: Path) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "06_ddp_training_step.py",
            *TINY_06, "--device", "cpu", "--traces-dir", str(traces)]  # fmt: skip


def trial_torchrun(repo: Path, work: Path, earlier: dict[str, bytes], k: int) -> tuple[str, list[str]]:
    traces = Path(tempfile.mkdtemp(dir=work))
    folder = traces / "06_ddp_training_step"
    folder.mkdir()
    for name, data in earlier.items():
        (folder / name).write_bytes(data)
    rank0 = folder / next(n for n in earlier if "_rank0" in n and n.endswith(".json"))
    inode = rank0.stat().st_ino
    proc = popen(torchrun_cmd(traces), repo)
    if k % 2 == 0:
        when, delay = "rank 0 replaced", random.uniform(0, 0.05)
        ready = wait_until(lambda: not rank0.exists() or rank0.stat().st_ino != inode, proc)
    else:
        when, delay = "temporary", random.uniform(0, 0.2)
        ready = wait_until(lambda: bool(list(folder.glob(".*.tmp"))), proc)
    if ready:
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=GUARD_S)
    after = visible(folder)
    groups = [sorted(n for n in earlier if f"_rank{r}" in n) for r in (0, 1)]
    bad = verdict(earlier, after, groups)
    shutil.rmtree(traces)
    return f"{when:15} + {delay * 1000:5.1f} ms rc {proc.returncode}", bad


def trial_ignored(repo: Path, work: Path, k: int) -> tuple[str, list[str]]:
    traces = Path(tempfile.mkdtemp(dir=work))
    launcher, signum = (["nohup"], signal.SIGHUP) if k % 2 == 0 else (["bash", "-c", "trap '' INT; exec \"$0\" \"$@\""],
                                                                        signal.SIGINT)  # fmt: skip
    cmd = [*launcher, PY, "01_matmul_add.py", "--size", "8", "--active", "2000", "--traces-dir", str(traces)]
    proc = popen(cmd, repo)
    for line in proc.stdout:
        if line.startswith("CPU threads:"):
            break
    os.kill(proc.pid, signum)
    proc.communicate(timeout=GUARD_S)
    shutil.rmtree(traces)
    return f"{launcher[0]:5} {signal.Signals(signum).name} rc {proc.returncode}", ["ended"] * (proc.returncode != 0)


def trial_cgroup(repo: Path, work: Path, limit_gb: float) -> tuple[str, list[str]]:
    own = next(line.split(":", 2)[2] for line in Path("/proc/self/cgroup").read_text().splitlines()
               if "memory" in line.split(":")[1].split(","))  # fmt: skip
    child = Path("/sys/fs/cgroup/memory") / own.lstrip("/") / f"trial-{os.getpid()}"
    child.mkdir()
    try:
        (child / "memory.limit_in_bytes").write_text(str(int(limit_gb * 1e9)))
        cmd = [PY, "05_training_step.py", "--dim", "4096", "--heads", "32", "--hidden", "16384", "--device", "cpu",
               "--traces-dir", str(work)]  # fmt: skip
        done = subprocess.run(
            ["sh", "-c", f'echo $$ > {child}/cgroup.procs && exec "$@"', "sh", *cmd],
            cwd=repo, capture_output=True, text=True, timeout=GUARD_S,
        )  # fmt: skip
        last = (done.stderr.strip().splitlines() or [""])[-1]
        refused = done.returncode == 2 and last.startswith("error: these shapes need about")
        return f"rc {done.returncode} {last[:100]!r}", [] if refused else ["not refused in one line"]
    finally:
        child.rmdir()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=("save", "torchrun", "ignored", "cgroup"))
    parser.add_argument("--trials", type=int, default=10)
    parser.add_argument("--repo", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--limit-gb", type=float, default=4.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    random.seed(args.seed)
    repo = args.repo.resolve()
    work = Path(tempfile.mkdtemp(prefix="signal-trials-"))
    counts: collections.Counter[str] = collections.Counter()
    try:
        if args.kind == "save":
            earlier = good_run([PY, "05_training_step.py", *TINY_05, "--device", "cpu", "--traces-dir", str(work)],
                               repo, work / "05_training_step")  # fmt: skip
        if args.kind == "torchrun":
            earlier = good_run(torchrun_cmd(work), repo, work / "06_ddp_training_step")
        for k in range(args.trials):
            if args.kind == "save":
                what, bad = trial_save(repo, work, earlier)
            elif args.kind == "torchrun":
                what, bad = trial_torchrun(repo, work, earlier, k)
            elif args.kind == "ignored":
                what, bad = trial_ignored(repo, work, k)
            else:
                what, bad = trial_cgroup(repo, work, args.limit_gb)
            counts["trials"] += 1
            counts["trials with a loss"] += bool(bad)
            for item in bad:
                counts[item.split()[0]] += 1
            print(f"{k + 1:3}  {what}  {', '.join(bad) or 'ok'}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{repo}: " + ", ".join(f"{key} {n}" for key, n in counts.items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
