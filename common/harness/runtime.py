"""The flags every script shares, and the run they resolve to: device, dtype, seed, schedule, output folder, tag."""

from __future__ import annotations

import argparse
import importlib
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

from common import interrupts
from common.cli import SuiteError
from common.harness.checks import reference_dtype
from common.harness.early import memory_refusal, schedule_refusal, torch_imported
from common.harness.estimate import phase
from common.harness.flags import DTYPE_NAMES, check_device, check_threads, traces_folder
from common.harness.flags import add_shape_flags as add_shape_flags  # the scripts' flags, built before torch loads
from common.harness.flags import make_parser as make_parser
from common.harness.machine import (
    EMULATED_COST,
    NATIVE_16BIT,
    WITHOUT_NATIVE,
    cpu_available_bytes,
    isa_cap,
    native_16bit,
    quiet_profiler,
    set_cpu_threads,
)

SEED = 0
REPO_ROOT = Path(__file__).resolve().parents[2]  # common/harness/runtime.py -> the repository
ShapeT = TypeVar("ShapeT", bound=tuple)
DTYPES = dict(zip(DTYPE_NAMES, (torch.bfloat16, torch.float16, torch.float32), strict=True))


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


def shape_of(args: argparse.Namespace, shape: type[ShapeT]) -> ShapeT:
    """The `shape` the flags give (fields by name; iterating it gives the tag's parts, in field order)."""
    return shape(**{name: getattr(args, name) for name in shape._fields})


def resolve_device(name: str) -> torch.device:
    """`auto` picks CUDA when present, else CPU (with a one-line notice)."""
    check_device(name)
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
    torch_imported()  # the import's progress line stops: the run's own lines begin
    interrupts.install()
    refusal = schedule_refusal(args.warmup_steps, args.active, cpu_available_bytes())  # as before torch, in-process
    if refusal:
        raise SuiteError(refusal)
    torch.manual_seed(SEED)
    device = resolve_device(device or args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    script = Path(script_file).stem
    dtype_name, dtype_notice = resolve_dtype(args.dtype, device)
    run = Run(
        script=script,
        device=device,
        dtype=DTYPES[dtype_name],
        dtype_name=dtype_name,
        warm=args.warmup,
        compiled=args.compile if compiled is None else compiled,
        planned_steps=args.wait + args.warmup_steps + args.active,
        traces_dir=traces_folder(args.traces_dir, script),
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
