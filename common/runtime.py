"""The flags every script shares, and the run they resolve to: device, dtype, seed, schedule, output folder, tag."""

from __future__ import annotations

import argparse
import logging
import os
import re
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch

from common import interrupts
from common.checks import reference_dtype
from common.cli import OneLineParser, SuiteError, non_negative_int, positive_float, positive_int
from common.private_api import PROFILER_CYCLE_WARNING, PROFILER_NO_WARMUP_WARNING

SEED = 0
REPO_ROOT = Path(__file__).resolve().parent.parent
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Schedule:
    """The torch.profiler.schedule numbers: steps skipped, traced-but-dropped, recorded."""

    wait: int = 1
    warmup: int = 1
    active: int = 3

    @property
    def steps(self) -> int:
        """How many times the loop calls the step (and prof.step())."""
        return self.wait + self.warmup + self.active

    @property
    def is_default(self) -> bool:
        return self == Schedule()


@dataclass(frozen=True)
class Run:
    """Everything the shared flags resolved to for one script run."""

    script: str  # the script's stem, e.g. "01_matmul_add"
    device: torch.device
    dtype: torch.dtype
    dtype_name: str
    warm: bool
    compiled: bool
    schedule: Schedule
    traces_dir: Path  # traces/<script>/, created when the trace is written
    strict: bool = False
    bench: bool = False
    per_step: bool = False
    memory: bool = False
    threads: int | None = None  # --threads: CPU threads (None: torch's default, one for a tiny step)
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    argv: tuple[str, ...] = ()  # the script's flags as given, for the cheaper command a long run suggests
    sizes: tuple[tuple[str, int], ...] = ()  # --size and --batch where the script has them: what a cheaper run shrinks

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def reference_dtype(self) -> torch.dtype:
        """The precision the correctness reference is computed in: fp32 for 16-bit runs, fp64 for fp32."""
        return reference_dtype(self.dtype)

    @property
    def device_name(self) -> str:
        """'NVIDIA H200' on a GPU, 'cpu' otherwise."""
        return torch.cuda.get_device_name(self.device) if self.on_gpu else "cpu"

    def tag(self, *parts: object) -> str:
        """File stem for this run: the script's own parts, then dtype, cold/warm, eager/compiled, and a word
        for each other shared flag that changes the trace, so runs with other flags sit side by side: a
        non-default schedule adds `wWuUaA`, `--memory` adds `memory` (its trace holds the `[memory]` events),
        `--threads N` on the CPU `threadsN`: `64_bf16_cold_eager`, `8_16_1024_64_flash_bf16_cold_eager`,
        `64_bf16_cold_eager_w0u0a20`, `64_bf16_cold_eager_memory_threads2`. Flags that change only what is
        printed (`--bench`, `--per-step`, `--strict`, the peaks) add nothing.
        """
        words = [str(p) for p in parts]
        words += [self.dtype_name, "warm" if self.warm else "cold", "compiled" if self.compiled else "eager"]
        if not self.schedule.is_default:
            s = self.schedule
            words.append(f"w{s.wait}u{s.warmup}a{s.active}")
        if self.memory:
            words.append("memory")
        if self.threads and not self.on_gpu:  # a GPU run leaves the CPU threads as torch sets them
            words.append(f"threads{self.threads}")
        return "_".join(words)

    def describe(self) -> str:
        """Device, dtype, warm/cold, eager/compiled, schedule; a second line for a schedule without warm-up."""
        s = self.schedule
        where = f"{self.device_name} ({self.device})"
        line = (
            f"device={where} dtype={self.dtype_name} run={'warm' if self.warm else 'cold'} "
            f"mode={'compiled' if self.compiled else 'eager'} "
            f"schedule=wait {s.wait}, warmup {s.warmup}, active {s.active}"
        )
        if s.warmup == 0:
            line += "\n  (no profiler warm-up step: the first recorded step also pays for starting the tracer)"
        return line


def make_parser(doc: str | None, dtype_help: str | None = None) -> OneLineParser:
    """A parser for one script: its docstring as help, plus the flags every script shares.

    Shared flags: --device, --dtype, --threads, --warmup, --compile, --wait, --warmup-steps, --active,
    --traces-dir, --bench, --memory, --per-step, --strict, --peak-tflops, --peak-gbps. The script adds its own.
    """
    parser = OneLineParser(doc)
    run = parser.add_argument_group("device and precision")
    run.add_argument(
        "--device", default="auto", help="auto (CUDA if available, else CPU), cpu, cuda or cuda:N (default: auto)"
    )
    run.add_argument(
        "--dtype",
        choices=DTYPES,
        default=None,
        help=dtype_help
        or "tensor dtype (default: bf16 on a GPU and on a CPU with native bf16, AVX512-BF16 or AMX; else fp32)",
    )
    run.add_argument(
        "--threads",
        type=positive_int,
        default=None,
        help="CPU threads, at most the cores this process may use (default: torch's, which is the core count, "
        "or 1 for a step under 10 MFLOP)",
    )

    mode = parser.add_argument_group("how the step runs")
    mode.add_argument(
        "--warmup",
        action="store_true",
        help="run the step a few times before profiling (a 'warm' run; default: off, a cold run)",
    )
    mode.add_argument(
        "--compile", action="store_true", help="torch.compile the profiled function or module (default: off, eager)"
    )

    sched = parser.add_argument_group("profiler schedule (torch.profiler.schedule)")
    sched.add_argument("--wait", type=non_negative_int, default=1, help="steps skipped before recording (default: 1)")
    sched.add_argument(
        "--warmup-steps", type=non_negative_int, default=1, help="steps traced but discarded (default: 1)"
    )
    sched.add_argument("--active", type=positive_int, default=3, help="steps recorded (default: 3)")

    out = parser.add_argument_group("output and checks")
    out.add_argument("--traces-dir", default=None, help="folder for traces (default: traces/ beside the scripts)")
    out.add_argument(
        "--bench",
        action="store_true",
        help="also time the step without the profiler, to show its overhead (default: off)",
    )
    out.add_argument(
        "--memory",
        action="store_true",
        help="profile_memory=True, and on a GPU a CUDA memory snapshot <tag>.pickle beside the trace (default: off)",
    )
    out.add_argument(
        "--per-step",
        action="store_true",
        help="print a row per profiled step (default: off; on by itself when --active is over 3)",
    )
    out.add_argument(
        "--strict", action="store_true", help="exit 1 when the trace does not match the script's guess (default: off)"
    )
    out.add_argument(
        "--peak-tflops",
        type=positive_float,
        default=None,
        help="the device's peak TFLOP/s for '%% of peak' (default: the datasheet figure of known GPUs)",
    )
    out.add_argument(
        "--peak-gbps",
        type=positive_float,
        default=None,
        help="the device's peak memory GB/s (default: the datasheet figure of known GPUs)",
    )
    return parser


def add_shape_flags(parser: argparse.ArgumentParser, title: str, shape: dict[str, tuple[int, str]]) -> None:
    """One integer flag per entry of `shape` (name -> (default, help)), e.g. --batch 8 --seq 1024."""
    group = parser.add_argument_group(title)
    for name, (default, text) in shape.items():
        group.add_argument(f"--{name}", type=positive_int, default=default, help=f"{text} (default: {default})")


def shape_of(args: argparse.Namespace, shape: dict[str, tuple[int, str]]) -> tuple[int, ...]:
    """The values of `shape`'s flags, in order: the shape part of the tag."""
    return tuple(getattr(args, name) for name in shape)


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present, else CPU (with a one-line notice)."""
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda", torch.cuda.current_device())
        print("notice: no CUDA GPU found, running on the CPU: the trace's GPU lane will be empty")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise SuiteError(f"unknown --device {name!r}; use auto, cpu, cuda or cuda:N") from None
    if device.type not in ("cpu", "cuda"):
        raise SuiteError(f"unsupported --device {name!r}; use auto, cpu, cuda or cuda:N")
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise SuiteError(
                f"--device {name}: this machine has no CUDA GPU (torch.cuda.is_available() is False); use --device cpu"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SuiteError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


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


def resolve_dtype(name: str | None, device: torch.device) -> tuple[str, str | None]:
    """The dtype a run uses, and a notice when the reader should know why: bf16 on a GPU and on a CPU
    that runs it natively, fp32 on any other CPU (where bf16 is the slow, emulated path); an explicit
    16-bit --dtype on such a CPU runs as asked, with its cost said."""
    if device.type == "cuda":
        return name or "bf16", None
    capability = torch.backends.cpu.get_cpu_capability()
    seen = f"ONEDNN_MAX_CPU_ISA={isa_cap()}" if isa_cap() else f"torch reports {capability}"
    if name is None:
        if native_16bit("bf16"):
            return "bf16", None
        return "fp32", (
            f"notice: dtype fp32, the fast one on this CPU: it has no {WITHOUT_NATIVE['bf16']} ({seen}),\n"
            f"  so bf16 is emulated: {EMULATED_COST}; --dtype bf16 still runs it"
        )
    if name in NATIVE_16BIT and not native_16bit(name):
        return name, (
            f"notice: --dtype {name} is emulated on this CPU (no {WITHOUT_NATIVE[name]}; {seen}):\n"
            f"  {EMULATED_COST}; --dtype fp32 is the fast one here"
        )
    return name, None


def cpu_cores() -> int:
    """The CPU cores this process may run on: its affinity mask (narrowed by `taskset`, a container's cpuset,
    a batch scheduler), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def check_threads(threads: int | None) -> int | None:
    """Refuse, in one line, more --threads than the cores this process may use: OpenMP threads beyond them
    only wait for a core (see fit_machine: a spin-waiting thread can stall a 20 µs step for 8 ms), so the
    trace would show the waits, not the work."""
    cores = cpu_cores()
    if threads is not None and threads > cores:
        raise SuiteError(f"--threads {threads}: this process may run on {cores} CPU core(s) "
                         f"(os.sched_getaffinity); use --threads {cores} or fewer")  # fmt: skip
    return threads


def check_nameable(folder: Path) -> Path:
    """Refuse, in one line, a folder name the profiler cannot write to: one with a control character (a
    newline makes Kineto write elsewhere), or one this locale cannot encode (under LANG=C, a non-ASCII name
    reaches torch as undecodable bytes and export_chrome_trace fails with a TypeError)."""
    text = str(folder)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise SuiteError(f"cannot write traces to {text!r}: the name has a newline or another control character")
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        raise SuiteError(f"cannot write traces to {shown!r}: this locale ({sys.getfilesystemencoding()}) cannot "
                         "pass its name to torch; use an ASCII folder name, or a UTF-8 locale (LANG=C.UTF-8)"
                         ) from None  # fmt: skip
    return folder


def check_writable(folder: Path) -> Path:
    """Prove that `folder` can be created and written, without creating it (a refused run leaves nothing)."""
    probe = folder
    while not probe.exists():
        if probe.is_symlink():
            raise SuiteError(f"cannot write traces to {folder}: {probe} is a link to nothing")
        probe = probe.parent
    if not probe.is_dir():
        raise SuiteError(f"cannot write traces to {folder}: {probe} is not a folder")
    try:
        with tempfile.NamedTemporaryFile(dir=probe, prefix=".probe-"):
            pass
    except OSError as exc:
        raise SuiteError(f"cannot write traces to {folder}: {exc.strerror or exc}") from None
    return folder


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


TINY_STEP_FLOPS = 1e7  # below this a CPU step runs on one thread (a 128 x 128 matmul is 4 MFLOP)


def fit_machine(run: Run, need_bytes: float, what: str, flops: float) -> None:
    """Fit the run to this machine before anything is allocated.

    Refuse, in one line, shapes whose tensors cannot fit: `need_bytes` (what the script will allocate,
    `what` saying for what) against free GPU memory or available CPU memory. On the CPU, run a tiny step
    (under TINY_STEP_FLOPS) on one thread unless --threads says otherwise: with two or more OpenMP threads,
    a 64 x 64 matmul that takes ~20 µs can take ~8 ms whenever another process keeps a core busy, because a
    thread spin-waits for a partner that waits a whole 4 ms scheduler tick for a core. Larger steps keep
    torch's default, where the threads pay off (a 1024 x 1024 bf16 matmul: 3.6 ms on two, 6.1 ms on one).
    """
    if not run.on_gpu:
        if run.threads:
            torch.set_num_threads(run.threads)
        elif flops < TINY_STEP_FLOPS and torch.get_num_threads() > 1:
            torch.set_num_threads(1)
            print(f"notice: a tiny step ({flops / 1e6:.2g} MFLOP) runs on 1 CPU thread, so OpenMP spin-waits "
                  "cannot stall it; --threads N overrides")  # fmt: skip
        print(f"CPU threads: {torch.get_num_threads()}")
    have = torch.cuda.mem_get_info(run.device)[0] if run.on_gpu else cpu_available_bytes()
    if need_bytes > 0.9 * have:
        where = "free on the GPU" if run.on_gpu else "free"
        raise SuiteError(f"these shapes need about {gigabytes(need_bytes)} ({what}); {gigabytes(have)} {where}: "
                         "try smaller shapes")  # fmt: skip


def gigabytes(n: float) -> str:
    return f"{n / 1e9:,.0f} GB" if n >= 1e11 else f"{n / 1e9:.3g} GB"


def quiet_profiler(on_gpu: bool) -> None:
    """Silence what torch.profiler says that the run's own lines replace or that is not true here.

    `schedule(warmup=0)` warns "won't be using warmup": the cold-start experiment wants exactly that, and
    Run.describe says so. torch >= 2.11 warns that a cycle's events are cleared after on_trace_ready: the
    scripts export once, in it. Without a GPU, torch.compile's C++ build logs "No CUDA runtime is found",
    and Kineto a misleading "gpuGetDeviceCount failed" and, at its USDT level (5), profiler start/stop
    lines: above 5 it logs nothing (read when a profiler starts)."""
    warnings.filterwarnings("ignore", message=PROFILER_NO_WARMUP_WARNING)
    warnings.filterwarnings("ignore", message=PROFILER_CYCLE_WARNING)
    if not on_gpu:
        os.environ.setdefault("KINETO_LOG_LEVEL", "6")
        logging.getLogger("torch.utils.cpp_extension").setLevel(logging.ERROR)  # "No CUDA runtime is found"


def setup(args: argparse.Namespace, script_file: str) -> Run:
    """Seed, resolve the shared flags, check the output folder, route Ctrl-C/SIGTERM/SIGHUP to a clean exit
    (common.interrupts), and print the setup line."""
    interrupts.install()
    torch.manual_seed(SEED)
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    script = Path(script_file).stem
    if args.traces_dir is not None and not args.traces_dir.strip():
        raise SuiteError("--traces-dir is empty; give a folder, or leave the flag out for traces/")
    base = Path(os.path.expanduser(args.traces_dir)) if args.traces_dir is not None else REPO_ROOT / "traces"
    dtype_name, dtype_notice = resolve_dtype(args.dtype, device)
    run = Run(
        script=script,
        device=device,
        dtype=DTYPES[dtype_name],
        dtype_name=dtype_name,
        warm=args.warmup,
        compiled=args.compile,
        schedule=Schedule(args.wait, args.warmup_steps, args.active),
        traces_dir=check_writable(check_nameable(base / script)),
        strict=args.strict,
        bench=args.bench,
        per_step=args.per_step,
        memory=args.memory,
        threads=check_threads(args.threads),
        peak_tflops=args.peak_tflops,
        peak_gbps=args.peak_gbps,
        argv=tuple(getattr(args, "argv", ())),
        sizes=tuple((k, v) for k in ("size", "batch") if isinstance(v := getattr(args, k, None), int)),
    )
    quiet_profiler(run.on_gpu)
    print(f"[{script}] {run.describe()}")
    if dtype_notice:
        print(dtype_notice)
    return run
