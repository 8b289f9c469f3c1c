"""Command-line flags shared by every script; a script adds only its own."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

from common.errors import EXIT_USAGE

DTYPES = ("bf16", "fp16", "fp32")


class OneLineParser(argparse.ArgumentParser):
    """argparse, but a bad flag prints one `error:` line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        print(f"error: {message} (see --help)", file=sys.stderr)
        raise SystemExit(EXIT_USAGE)


def positive_int(text: str) -> int:
    """argparse type: an integer > 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {text}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected an integer >= 0, got {value}")
    return value


def make_parser(doc: str | None) -> OneLineParser:
    """A parser for one script: its docstring as help, plus the flags every script shares.

    Shared flags: --device, --dtype, --warmup, --compile, --wait, --warmup-steps,
    --active, --traces-dir, --bench, --strict, --peak-tflops, --peak-gbps. The script adds its own
    shape flags afterwards.
    """
    summary, _, details = (doc or "").strip().partition("\n")
    parser = OneLineParser(
        description=summary,
        epilog=details.strip() or None,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run = parser.add_argument_group("device and precision")
    run.add_argument("--device", default="auto",
                     help="auto (CUDA if available, else CPU), cpu, cuda or cuda:N (default: auto)")
    run.add_argument("--dtype", choices=DTYPES, default="bf16", help="tensor dtype (default: bf16)")

    mode = parser.add_argument_group("how the step runs")
    mode.add_argument("--warmup", action="store_true",
                      help="run the step a few times before profiling (a 'warm' run; default: cold)")
    mode.add_argument("--compile", action="store_true", help="torch.compile the profiled function or module")

    sched = parser.add_argument_group("profiler schedule (torch.profiler.schedule)")
    sched.add_argument("--wait", type=non_negative_int, default=1, help="steps skipped before recording (default: 1)")
    sched.add_argument("--warmup-steps", type=non_negative_int, default=1,
                       help="steps traced but discarded (default: 1)")
    sched.add_argument("--active", type=positive_int, default=3, help="steps recorded (default: 3)")

    out = parser.add_argument_group("output and checks")
    out.add_argument("--traces-dir", default=None,
                     help="folder for traces (default: traces/ beside the scripts)")
    out.add_argument("--bench", action="store_true",
                     help="also time the step without the profiler (median of many runs) to show its overhead")
    out.add_argument("--strict", action="store_true",
                     help="exit 1 when the trace does not match the script's guess")
    out.add_argument("--peak-tflops", type=positive_float, default=None,
                     help="override the device's peak TFLOP/s used for '%% of peak'")
    out.add_argument("--peak-gbps", type=positive_float, default=None,
                     help="override the device's peak memory bandwidth in GB/s")
    return parser
