"""The flags every script shares, built and checked without torch: a script refuses a typo in a second, not after
torch has loaded (common.harness.early.importing_torch parses them first; main() parses them again)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import NamedTuple

from common.cli import OneLineParser, SuiteError, non_negative_int, positive_float, positive_int
from common.harness.machine import cpu_cores

DTYPE_NAMES = ("bf16", "fp16", "fp32")  # --dtype's choices (common.harness.runtime.DTYPES maps them to torch's)
STARTUP_S = 120.0  # how long a rank waits for the others to join the process group, unless --startup-timeout
# torch.device types other than the two the suite runs on: refused as unsupported, not unknown
OTHER_DEVICES = ("mps", "xpu", "hip", "meta", "xla", "hpu", "mtia", "ipu", "lazy", "vulkan", "privateuseone")
REPO_ROOT = Path(__file__).resolve().parents[2]  # common/harness/flags.py -> the repository


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
        choices=DTYPE_NAMES,
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


def check_device(name: str) -> str:
    """Refuse, in one line, a --device the suite cannot run on: `auto`, `cpu`, `cuda` and `cuda:N` pass (whether
    the GPU is there is runtime.resolve_device's to say, with torch)."""
    if re.fullmatch(r"auto|cpu|cuda(:[0-9]+)?", name):
        return name
    if name.partition(":")[0] in OTHER_DEVICES:
        raise SuiteError(f"unsupported --device {name!r}; use auto, cpu, cuda or cuda:N")
    raise SuiteError(f"unknown --device {name!r}; use auto, cpu, cuda or cuda:N")


def traces_folder(traces_dir: str | None, script: str) -> Path:
    """traces/<script>/ or --traces-dir's <folder>/<script>/, refused in one line where its name cannot reach the
    profiler or it cannot be written (checked without creating it)."""
    if traces_dir is not None and not traces_dir.strip():
        raise SuiteError("--traces-dir is empty; give a folder, or leave the flag out for traces/")
    base = Path(os.path.expanduser(traces_dir)) if traces_dir is not None else REPO_ROOT / "traces"
    return check_writable(check_nameable(base / script))


def check_flags(args: argparse.Namespace, script: str) -> None:
    """Every check of the shared flags that needs no torch: --device's name, --threads against the cores, and the
    traces folder; a SuiteError names the first that fails."""
    check_device(args.device)
    check_threads(args.threads)
    traces_folder(args.traces_dir, script)
