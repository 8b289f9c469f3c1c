"""One subprocess measured from outside, for the benchmarks: its wall time and peak RSS, taken when it ends
(a blocking os.wait4, so no polling interval is in the time), its process group killed after a timeout."""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Measured:
    """One measured subprocess."""

    wall_s: float
    peak_mib: float  # the largest process of its tree
    rc: int | None  # None: killed at the timeout
    why: str = ""  # where it failed: killed, or its exit code and the last line of its stderr
    out: list[str] = field(default_factory=list)  # its stdout's lines
    cpu_s: float = 0.0  # user + system CPU time of the process and the children it waited for


def measure(cmd: list[str], cwd: Path, timeout: float, env: dict[str, str] | None = None) -> Measured:
    """Run `cmd` in `cwd`, killing its process group after `timeout` s."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        start = time.perf_counter()
        proc = subprocess.Popen(cmd, cwd=cwd, stdout=out, stderr=err, env=env, start_new_session=True)
        killer = threading.Timer(timeout, os.killpg, (proc.pid, signal.SIGKILL))
        killer.start()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        killed = not killer.is_alive()
        killer.cancel()
        proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here; keep Popen from waiting again
        out.seek(0)
        err.seek(0)
        lines = out.read().decode(errors="replace").splitlines()
        errors = err.read().decode(errors="replace").strip().splitlines()
    rc = None if killed else proc.returncode
    why = f"killed after {timeout:.0f} s" if killed else f"exit {rc}: {errors[-1] if errors else ''}"[:160]
    cpu = usage.ru_utime + usage.ru_stime
    return Measured(wall, usage.ru_maxrss / 1024, rc, why if rc != 0 else "", lines, cpu)
