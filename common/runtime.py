"""Resolve device, dtype, seed and output folder from the parsed flags, and echo them."""

from __future__ import annotations

import argparse
import tempfile
from dataclasses import dataclass
from pathlib import Path

import torch

from common.errors import SuiteError

SEED = 0
REPO_ROOT = Path(__file__).resolve().parent.parent
DTYPE_BY_NAME = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


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
    """Everything the harness resolved for one script run."""

    script: str  # the script's stem, e.g. "01_matmul_add"
    device: torch.device
    dtype: torch.dtype
    dtype_name: str
    warm: bool
    compiled: bool
    schedule: Schedule
    traces_dir: Path  # traces/<script>/
    bench: bool = False
    strict: bool = False
    peak_tflops: float | None = None
    peak_gbps: float | None = None

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    @property
    def device_name(self) -> str:
        """'NVIDIA H200' on a GPU, 'cpu' otherwise."""
        return torch.cuda.get_device_name(self.device) if self.on_gpu else "cpu"

    def tag(self, *parts: object) -> str:
        """File stem for this run: the script's own parts, then dtype, cold/warm, eager/compiled.

        A non-default schedule adds `wWuUaA`, so runs with other flags sit side by side:
        `64_bf16_cold_eager`, `8_16_1024_64_flash_bf16_cold_eager`, `64_bf16_cold_eager_w0u0a20`.
        """
        words = [str(p) for p in parts]
        words += [self.dtype_name, "warm" if self.warm else "cold", "compiled" if self.compiled else "eager"]
        if not self.schedule.is_default:
            s = self.schedule
            words.append(f"w{s.wait}u{s.warmup}a{s.active}")
        return "_".join(words)

    def describe(self) -> str:
        """One line: device, dtype, warm/cold, eager/compiled, schedule."""
        s = self.schedule
        return (f"device={self.device_name} ({self.device}) dtype={self.dtype_name} "
                f"run={'warm' if self.warm else 'cold'} mode={'compiled' if self.compiled else 'eager'} "
                f"schedule=wait {s.wait}, warmup {s.warmup}, active {s.active}")


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
            raise SuiteError(f"--device {name} asked for CUDA, but this machine has no CUDA GPU "
                             "(torch.cuda.is_available() is False); use --device cpu")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise SuiteError(f"--device {name}: only {torch.cuda.device_count()} CUDA device(s) here")
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def resolve_dtype(name: str) -> torch.dtype:
    try:
        return DTYPE_BY_NAME[name]
    except KeyError:
        raise SuiteError(f"unknown --dtype {name!r}; use one of {', '.join(DTYPE_BY_NAME)}") from None


def writable_dir(path: Path) -> Path:
    """Create `path` and prove a file can be written there, before any work is done."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            pass
    except OSError as exc:
        raise SuiteError(f"cannot write traces to {path}: {exc.strerror or exc}") from None
    return path


def setup(args: argparse.Namespace, script_file: str) -> Run:
    """Seed, resolve the shared flags, check the output folder, and print the setup line."""
    torch.manual_seed(SEED)
    device = resolve_device(args.device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    script = Path(script_file).stem
    base = Path(args.traces_dir) if args.traces_dir else REPO_ROOT / "traces"
    run = Run(
        script=script,
        device=device,
        dtype=resolve_dtype(args.dtype),
        dtype_name=args.dtype,
        warm=args.warmup,
        compiled=args.compile,
        schedule=Schedule(args.wait, args.warmup_steps, args.active),
        traces_dir=writable_dir(base / script),
        bench=args.bench,
        strict=args.strict,
        peak_tflops=args.peak_tflops,
        peak_gbps=args.peak_gbps,
    )
    print(f"[{script}] {run.describe()}")
    return run
