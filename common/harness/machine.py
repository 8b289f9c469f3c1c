"""What this machine is: the CPU's native 16-bit features (/proc/cpuinfo), the memory a container may still
allocate (cgroup), the CPU thread policy, and the profiler warnings that are not true here. The first two need
no torch (common.harness.early reads them before a script imports it); the last two import it when called."""

from __future__ import annotations

import logging
import os
import re
import warnings
from pathlib import Path

# /proc/cpuinfo flags of the CPU features that run a 16-bit dtype natively (x86, then Arm), and their names.
NATIVE_16BIT = {
    "bf16": (("amx_bf16", "AMX-BF16"), ("avx512_bf16", "AVX512-BF16"), ("bf16", "Arm BF16")),
    "fp16": (("amx_fp16", "AMX-FP16"), ("avx512_fp16", "AVX512-FP16"), ("fphp", "Arm FP16")),
}
WITHOUT_NATIVE = {"bf16": "AVX512-BF16 or AMX", "fp16": "AVX512-FP16 or AMX-FP16"}
# Measured with oneDNN held to AVX2 (ONEDNN_MAX_CPU_ISA=AVX2), one thread: 64 x 64 126 µs vs 6 µs, 256 x 256
# 46 ms vs 0.3 ms; the AVX2 machine: 205 µs vs 11 µs at 64 x 64.
EMULATED_COST = "a matmul takes 20x (64 x 64) to 150x (256 x 256) as long as in fp32"


def cpu_flags() -> set[str]:
    """The CPU's feature flags from /proc/cpuinfo (`flags` on x86, `Features` on Arm); empty elsewhere."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return set(value.split())
    except OSError:
        pass
    return set()


def isa_cap() -> str:
    """ONEDNN_MAX_CPU_ISA (or its old name DNNL_MAX_CPU_ISA): the level oneDNN is held to, '' when unset."""
    return os.environ.get("ONEDNN_MAX_CPU_ISA") or os.environ.get("DNNL_MAX_CPU_ISA") or ""


def native_16bit(dtype_name: str) -> str | None:
    """The CPU feature that runs `dtype_name` (bf16 or fp16) natively, or None where torch's CPU GEMMs
    (oneDNN) emulate it, many times slower than fp32.

    torch itself reports only a vector level (`torch.backends.cpu.get_cpu_capability()`: "AVX2", "AVX512"),
    and AVX512 without its BF16 extension still emulates bf16, so the flags decide. ONEDNN_MAX_CPU_ISA,
    which holds oneDNN below a level (e.g. AVX2), counts too.
    """
    cap = isa_cap().upper() or "ALL"
    allowed = cap in ("ALL", "DEFAULT") or "AVX10" in cap or dtype_name.upper() in cap
    if not allowed and not (dtype_name == "bf16" and "AMX" in cap):
        return None
    flags = cpu_flags()
    return next((name for flag, name in NATIVE_16BIT.get(dtype_name, ()) if flag in flags), None)


PROC = Path("/proc")  # where cpu_available_bytes reads the process's cgroups and MemAvailable
FILESYSTEM_ROOT = Path("/")  # what the mount points of /proc/self/mountinfo are under
NO_CGROUP_LIMIT = 1 << 60  # cgroup v1 reads "no limit" as a number near 2**63
# The limit and the use of one memory cgroup: v2 ("max" for no limit), then v1's memory controller.
CGROUP_FILES = {
    "cgroup2": ("memory.max", "memory.current"),
    "cgroup": ("memory.limit_in_bytes", "memory.usage_in_bytes"),
}


def _unescape(field: str) -> str:
    """A mountinfo path with its octal escapes decoded (`\\040` is a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def memory_cgroup_dirs(proc: Path, root: Path) -> list[tuple[str, Path, Path]]:
    """(kind, the process's own memory cgroup folder, the folder its hierarchy is mounted at), for the cgroup
    v2 tree and v1's memory controller that /proc/self/cgroup names, found through /proc/self/mountinfo."""
    try:
        lines = (proc / "self" / "cgroup").read_text().splitlines()
        mounts = (proc / "self" / "mountinfo").read_text().splitlines()
    except OSError:
        return []
    wanted = {}  # kind -> the cgroup's path in its hierarchy
    for line in lines:
        hierarchy, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        if hierarchy == "0" and controllers == "":
            wanted.setdefault("cgroup2", path)
        elif "memory" in controllers.split(","):
            wanted.setdefault("cgroup", path)
    found = []
    for mount in mounts:
        fields, _, fs = mount.partition(" - ")
        fields, fs = fields.split(), fs.split()
        if len(fields) < 5 or len(fs) < 3 or fs[0] not in wanted:
            continue
        if fs[0] == "cgroup" and "memory" not in fs[2].split(","):
            continue
        mounted, point, path = _unescape(fields[3]), _unescape(fields[4]), wanted[fs[0]]
        if mounted == "/":
            rel = path
        elif path == mounted or path.startswith(mounted.rstrip("/") + "/"):
            rel = path[len(mounted) :]
        else:
            rel = ""  # the cgroup lies outside what is mounted here (a container sees its own only): the mount
        top = root / point.lstrip("/")
        found.append((fs[0], top / rel.lstrip("/"), top))
    return found


def cgroup_available_bytes(proc: Path, root: Path) -> int | None:
    """What the process's memory cgroups leave a new allocation, as the kernel applies their limits: for its
    own cgroup and every ancestor up to the mounted root (v2 and v1 alike), the limit less that cgroup's use;
    the smallest wins. None where none of them has a limit."""
    have = None
    for kind, folder, top in memory_cgroup_dirs(proc, root):
        limit_name, used_name = CGROUP_FILES[kind]
        while True:
            try:
                limit = (folder / limit_name).read_text().strip()
                if limit != "max" and int(limit) < NO_CGROUP_LIMIT:
                    try:
                        used = int((folder / used_name).read_text())
                    except (OSError, ValueError):
                        used = 0
                    have = min(have if have is not None else int(limit), int(limit) - used)
            except (OSError, ValueError):
                pass  # no limit file at this level (v2's root cgroup has none)
            if folder == top or top not in folder.parents:
                break
            folder = folder.parent
    return have


def cpu_available_bytes(proc: Path | None = None, root: Path | None = None) -> int:
    """Memory a new allocation can get: MemAvailable, capped by the process's cgroup (container) limits, v2
    or v1 (`cgroup_available_bytes`). `proc` and `root`: where /proc and the cgroup mounts are (a test's tree)."""
    proc, root = proc or PROC, root or FILESYSTEM_ROOT
    have = None
    try:
        with open(proc / "meminfo") as fh:
            have = next(int(line.split()[1]) * 1024 for line in fh if line.startswith("MemAvailable:"))
    except (OSError, StopIteration, ValueError):
        have = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else None
    limited = cgroup_available_bytes(proc, root)
    if limited is not None:
        have = min(have, limited) if have is not None else limited
    return have if have is not None else 1 << 62


def cpu_cores() -> int:
    """The CPU cores this process may run on: its affinity mask (narrowed by `taskset`, a container's cpuset,
    a batch scheduler), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


TINY_STEP_FLOPS = 1e7  # below this a CPU step runs on one thread (a 128 x 128 matmul is 4 MFLOP)


def set_cpu_threads(threads: int | None, flops: float) -> None:
    """The thread policy: `threads` (--threads) when given, else one thread for a tiny step (under
    TINY_STEP_FLOPS), else torch's default; prints the count.

    With two or more OpenMP threads, a 64 x 64 matmul that takes ~20 µs can take ~8 ms whenever another process
    keeps a core busy, because a thread spin-waits for a partner that waits a whole 4 ms scheduler tick for a core.
    Larger steps keep torch's default, where the threads pay off (a 1024 x 1024 bf16 matmul: 3.6 ms on two, 6.1 ms
    on one)."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    elif flops < TINY_STEP_FLOPS and torch.get_num_threads() > 1:
        torch.set_num_threads(1)
        print(f"notice: a tiny step ({flops / 1e6:.2g} MFLOP) runs on 1 CPU thread, so OpenMP spin-waits "
              "cannot stall it; --threads N overrides")  # fmt: skip
    print(f"CPU threads: {torch.get_num_threads()}")


def quiet_profiler(on_gpu: bool) -> None:
    """Silence what torch.profiler says that the run's own lines replace or that is not true here.

    `schedule(warmup=0)` warns "won't be using warmup": the cold-start experiment wants exactly that, and
    Run.describe says so. torch >= 2.11 warns that a cycle's events are cleared after on_trace_ready: the
    scripts export once, in it. Without a GPU, torch.compile's C++ build logs "No CUDA runtime is found",
    and Kineto a misleading "gpuGetDeviceCount failed" and, at its USDT level (5), profiler start/stop
    lines: above 5 it logs nothing (read when a profiler starts)."""
    from common.harness.private_api import PROFILER_CYCLE_WARNING, PROFILER_NO_WARMUP_WARNING

    warnings.filterwarnings("ignore", message=PROFILER_NO_WARMUP_WARNING)
    warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING)
    if not on_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found"
