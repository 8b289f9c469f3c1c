"""The flags every script shares, and the run they resolve to: device, dtype, seed, schedule, output folder, tag."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple, TypeVar

import torch

from common import interrupts
from common.cli import OneLineParser, SuiteError, non_negative_int, positive_float, positive_int
from common.harness.checks import reference_dtype
from common.harness.early import memory_refusal, schedule_refusal
from common.harness.estimate import phase
from common.harness.machine import (
    EMULATED_COST,
    NATIVE_16BIT,
    WITHOUT_NATIVE,
    cpu_available_bytes,
    cpu_cores,
    isa_cap,
    native_16bit,
    quiet_profiler,
    set_cpu_threads,
)

SEED = 0
REPO_ROOT = Path(__file__).resolve().parents[2]  # common/harness/runtime.py -> the repository
ShapeT = TypeVar("ShapeT", bound=tuple)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


@dataclass(frozen=True)
class Run:
    """Everything the shared flags resolved to for one script run."""

    script: str  # the script's stem, e.g. "01_matmul_add"
    device: torch.device
    dtype: torch.dtype
    dtype_name: str
    warm: bool
    compiled: bool
    planned_steps: int  # --wait + --warmup-steps + --active: the estimate's count; the loop's own is read from torch
    traces_dir: Path  # traces/<script>/, created when the trace is written
    strict: bool = False
    bench: bool = False
    per_step: bool = False
    memory: bool = False
    threads: int | None = None  # --threads: CPU threads (None: torch's default, one for a tiny step)
    peak_tflops: float | None = None
    peak_gbps: float | None = None
    argv: tuple[str, ...] = ()  # the script's flags as given, for the cheaper command a long run suggests
    launcher: str = "uv run"  # what the commands the run prints put before the script (06: uv run torchrun ...)
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
        """File stem for this run: the script's own parts, then dtype, cold/warm, eager/compiled, and
        `threadsN` for --threads N on the CPU: `64_bf16_cold_eager`, `8_16_1024_64_flash_bf16_cold_eager`,
        `64_bf16_cold_eager_threads2`. The recording adds what the profiler ran where it is not the default:
        the schedule and the options that change the trace (`64_bf16_cold_eager_w0u0a20_memory`, common.harness.loop).
        Flags that change only what is printed (--bench, --per-step, --strict, the peaks) add nothing."""
        words = [str(p) for p in parts]
        words += [self.dtype_name, "warm" if self.warm else "cold", "compiled" if self.compiled else "eager"]
        if self.threads and not self.on_gpu:  # a GPU run leaves the CPU threads as torch sets them
            words.append(f"threads{self.threads}")
        return "_".join(words)

    def describe(self) -> str:
        """Device, dtype, warm/cold, eager/compiled. The schedule is the loop's: the report prints it as the
        profiler ran it (common.harness.loop)."""
        where = f"{self.device_name} ({self.device})"
        return (
            f"device={where} dtype={self.dtype_name} run={'warm' if self.warm else 'cold'} "
            f"mode={'compiled' if self.compiled else 'eager'}"
        )


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


def add_shape_flags(parser: argparse.ArgumentParser, title: str, shape: type[NamedTuple]) -> None:
    """One integer flag per field of the shape type `shape` (a NamedTuple with a default and a HELP entry per
    field), e.g. --batch 8 --seq 1024."""
    group = parser.add_argument_group(title)
    for name, default in shape._field_defaults.items():
        group.add_argument(
            f"--{name}", type=positive_int, default=default, help=f"{shape.HELP[name]} (default: {default})"
        )


def shape_of(args: argparse.Namespace, shape: type[ShapeT]) -> ShapeT:
    """The `shape` the flags give (fields by name; iterating it gives the tag's parts, in field order)."""
    return shape(**{name: getattr(args, name) for name in shape._fields})


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


def fit_machine(run: Run, need_bytes: float, what: str, flops: float) -> None:
    """Fit the run to this machine before anything is allocated: refuse, in one line, shapes whose tensors
    cannot fit (`need_bytes`, what the script will allocate, `what` saying for what, against free GPU memory
    or available CPU memory), and on the CPU set the thread count (common.harness.machine.set_cpu_threads: one thread
    for a tiny step of under 10 MFLOP unless --threads says otherwise).
    """
    if not run.on_gpu:
        set_cpu_threads(run.threads, flops)
    have = torch.cuda.mem_get_info(run.device)[0] if run.on_gpu else cpu_available_bytes()
    refusal = memory_refusal(need_bytes, what, have, run.on_gpu)
    if refusal:
        raise SuiteError(refusal)


def setup(
    args: argparse.Namespace,
    script_file: str,
    device: str | None = None,
    compiled: bool | None = None,
    optimizer: bool = False,
) -> Run:
    """Seed, resolve the shared flags, check the output folder, route Ctrl-C/SIGTERM/SIGHUP to a clean exit
    (common.interrupts), and print the setup line. `device` and `compiled`, where given, are what the script's
    own rule made of the flags (06's GPU per rank, 05's --cudagraphs): `args` is never changed.
    `optimizer`: the script builds a torch.optim optimizer, whose constructor imports torch._dynamo (seconds on a
    laptop): imported here, after a line saying so, as a compiled run's compiler is."""
    interrupts.install()
    refusal = schedule_refusal(args.warmup_steps, args.active, cpu_available_bytes())  # as before torch, in-process
    if refusal:
        raise SuiteError(refusal)
    torch.manual_seed(SEED)
    device = resolve_device(device or args.device)
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
        compiled=args.compile if compiled is None else compiled,
        planned_steps=args.wait + args.warmup_steps + args.active,
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
    if run.compiled and "torch._dynamo" not in sys.modules:  # the script's torch.compile(...) imports it: seconds
        with phase("importing torch.compile's compiler (torch._dynamo, torch._inductor)"):
            torch.compile(lambda: None)  # wrapping resolves the Inductor backend, importing it; nothing compiles
    if optimizer and "torch._dynamo" not in sys.modules:  # torch.optim.Optimizer.__init__ imports it
        with phase("importing torch._dynamo, which torch.optim's optimizers load"):
            importlib.import_module("torch._dynamo")
    return run
