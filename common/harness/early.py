"""What a script does before it imports torch (5-12 s on a laptop): it says torch is loading, so no run starts
silent, and it makes the refusals that need no torch: a GPU-only script or flag on a machine without a CUDA device
(seen from the driver's files or `nvidia-smi`, not torch.cuda), and shapes whose tensors cannot fit in the CPU
memory (/proc/meminfo, capped by the cgroup). Each refusal is the same one-line message and exit 2 the script
gives after torch loads; where this module cannot be sure (a flag it cannot read, a device it may not see), it
says nothing and the script's own check decides. No torch here.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
from pathlib import Path
from typing import NamedTuple

from common.cli import MAX_INT, WIDTH, SuiteError, fail
from common.harness.flags import check_flags
from common.harness.machine import cpu_available_bytes, native_16bit
from common.harness.ticker import PROGRESS_AFTER_S, PROGRESS_EVERY_S, Progress

FLASH_NEEDS_GPU = "FlashAttention needs a CUDA GPU; on the CPU, 04_a, 04_b and 04_c (--backend math or flash) run"
CUDA_GRAPHS_NEED_GPU = (
    "--cudagraphs needs a CUDA GPU (reduce-overhead mode records CUDA graphs); here run eager or --compile"
)
ITEMSIZE = {"bf16": 2, "fp16": 2, "fp32": 4}  # bytes per element of each --dtype (runtime.DTYPES, without torch)


class AttentionShape(NamedTuple):
    """The attention shape of 04_a to 04_d: a flag per field (runtime.add_shape_flags)."""

    batch: int = 8
    heads: int = 16
    seq: int = 1024
    head_dim: int = 64

    HELP = {
        "batch": "batch size",
        "heads": "attention heads",
        "seq": "sequence length",
        "head_dim": "per-head dimension",
    }


def attention_bytes(shape: AttentionShape, itemsize: int, score_bytes: int) -> tuple[int, str]:
    """Bytes a variant of `shape` in a dtype of `itemsize` allocates at its peak, and for what: q, k, v and the
    output, `score_bytes` per element of the [batch, heads, seq, seq] scores it holds at once (0 for a fused
    kernel), and the fp32/fp64 reference the output is checked against, which materialises the scores itself
    (two [seq, seq] buffers per head)."""
    b, h, s, d = shape.batch, shape.heads, shape.seq, shape.head_dim
    ref = 8 if itemsize == 4 else 4  # checks.reference_dtype: fp64 for fp32 runs, fp32 for 16-bit runs
    need = 4 * b * h * s * d * (itemsize + ref) + b * h * s * s * (score_bytes + 2 * ref) + 2 * s * s
    return need, "q, k, v, output, scores, reference" if score_bytes else "q, k, v, output, reference"


def gigabytes(n: float) -> str:
    return f"{n / 1e9:,.0f} GB" if n >= 1e11 else f"{n / 1e9:.3g} GB"


def memory_refusal(need_bytes: float, what: str, have: float, on_gpu: bool) -> str | None:
    """The one line that refuses shapes needing `need_bytes` (for `what`) where `have` bytes are free, or None
    when they fit (in 90% of it)."""
    if need_bytes <= 0.9 * have:
        return None
    where = "free on the GPU" if on_gpu else "free"
    line = f"these shapes need about {gigabytes(need_bytes)} ({what}); {gigabytes(have)} {where}: try smaller shapes"
    if len(f"error: {line}") > WIDTH:  # the error line stays one line within the terminal: the list is left out
        line = f"these shapes need about {gigabytes(need_bytes)}; {gigabytes(have)} {where}: try smaller shapes"
    return line


# What a profiled step costs in memory at the least, to refuse a schedule that cannot fit: the fewest events a
# script's step records (01_matmul_add at --size 8: ProfilerStep, its label, its ops; 811 events over 100 steps)
# times the fewest bytes an event costs the run (350 in the trace's JSON alone; that run grew 6.8 KB an event).
MIN_EVENTS_PER_STEP = 8
EVENT_BYTES = 1_000


def schedule_refusal(warmup_steps: int, active: int, have: float) -> str | None:
    """The one line that refuses a schedule whose profiler events (warm-up and active steps, at the fewest
    MIN_EVENTS_PER_STEP each) cannot fit in 90% of the `have` bytes free, saying how many steps would; else None."""
    events = (warmup_steps + active) * MIN_EVENTS_PER_STEP
    if events * EVENT_BYTES <= 0.9 * have:
        return None
    fit = max(int(0.9 * have) // (MIN_EVENTS_PER_STEP * EVENT_BYTES) - warmup_steps, 0)
    need, free = gigabytes(events * EVENT_BYTES), gigabytes(have)
    return f"--active {active:,}: about {need} of profiler events ({MIN_EVENTS_PER_STEP}+ a step), {free} free; " + (
        f"--active {fit:,} fits"
    )


def refuse_schedule(name: str, argv: list[str] | None = None) -> None:
    """In a script run as `__main__` (`name`), exit 2 with schedule_refusal's line when --warmup-steps and --active
    cannot fit in the CPU memory free (where the profiler holds its events, on a GPU run too)."""
    if name != "__main__":
        return
    argv = sys.argv[1:] if argv is None else argv
    parser = _Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--warmup-steps", type=int, default=1)
    parser.add_argument("--active", type=int, default=3)
    try:
        if any(a in ("-h", "--help") for a in argv):
            return
        args, _ = parser.parse_known_args(argv)
    except _UnreadError:
        return
    if not (0 <= args.warmup_steps <= MAX_INT and 1 <= args.active <= MAX_INT):
        return  # the script's parser refuses it in its words
    refusal = schedule_refusal(args.warmup_steps, args.active, cpu_available_bytes())
    if refusal:
        fail(refusal)


def cuda_device_seen(root: Path = Path("/"), path: str | None = None) -> bool:
    """Whether this machine may have a CUDA device torch would use: an NVIDIA GPU in the driver's
    /proc/driver/nvidia/gpus, a /dev/nvidiaN node, ROCm's /dev/kfd, or `nvidia-smi` on PATH; False only when
    none is there, or CUDA_VISIBLE_DEVICES hides them all ('' or -1). `root` and `path`: a test's tree."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and (visible.strip() == "" or visible.split(",")[0].strip().startswith("-")):
        return False
    gpus = root / "proc" / "driver" / "nvidia" / "gpus"
    if gpus.is_dir() and any(gpus.iterdir()):
        return True
    dev = root / "dev"
    if (dev / "kfd").exists() or any(p.name[6:].isdigit() for p in dev.glob("nvidia[0-9]*")):
        return True
    return shutil.which("nvidia-smi", path=path) is not None


class _UnreadError(Exception):
    """The flags are not ones this module reads for sure: leave them to the script's parser."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UnreadError(message)


def _flags(argv: list[str], shape: type[NamedTuple] | None = None, flags: tuple[str, ...] = ()) -> argparse.Namespace:
    """--device, --dtype, the boolean `flags` and the fields of `shape` from `argv`; _UnreadError for --help or a
    value the script's parser would refuse (that parser, after torch, gives its own message)."""
    if any(a in ("-h", "--help") for a in argv):
        raise _UnreadError("help")
    parser = _Parser(add_help=False, allow_abbrev=False)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--dtype", choices=ITEMSIZE, default=None)
    for flag in flags:
        parser.add_argument(flag, action="store_true")
    for name, default in (shape._field_defaults if shape else {}).items():
        parser.add_argument(f"--{name}", type=int, default=default)
    args, _ = parser.parse_known_args(argv)
    if shape and any(not 1 <= getattr(args, name) <= MAX_INT for name in shape._fields):
        raise _UnreadError("a size below 1 or above MAX_INT")  # the script's parser refuses it in its words
    return args


def _on_cpu(args: argparse.Namespace) -> bool:
    """Whether the run will be on the CPU for sure: --device cpu, or auto without a CUDA device."""
    return args.device == "cpu" or (args.device == "auto" and not cuda_device_seen())


def refuse_without_gpu(name: str, message: str, flag: str | None = None, argv: list[str] | None = None) -> None:
    """In a script run as `__main__` (`name`), exit 2 with `message` when the run would be on the CPU (with
    `flag`, only when that flag is given): the refusal the script makes after torch loads, in a second."""
    if name != "__main__":
        return
    try:
        args = _flags(sys.argv[1:] if argv is None else argv, flags=(flag,) if flag else ())
    except _UnreadError:
        return
    if (flag is None or getattr(args, flag.lstrip("-").replace("-", "_"))) and _on_cpu(args):
        fail(message)


def refuse_attention_memory(name: str, score_items: int, argv: list[str] | None = None) -> None:
    """In a script run as `__main__` (`name`), on the CPU, exit 2 with fit_machine's line when the attention
    shape's tensors (attention_bytes, holding `score_items` dtype-sized copies of the scores) cannot fit."""
    if name != "__main__":
        return
    try:
        args = _flags(sys.argv[1:] if argv is None else argv, shape=AttentionShape)
    except _UnreadError:
        return
    if not _on_cpu(args):
        return
    itemsize = ITEMSIZE[args.dtype or ("bf16" if native_16bit("bf16") else "fp32")]  # runtime.resolve_dtype's
    shape = AttentionShape(**{f: getattr(args, f) for f in AttentionShape._fields})
    refusal = memory_refusal(*attention_bytes(shape, itemsize, score_items * itemsize), cpu_available_bytes(), False)
    if refusal:
        fail(refusal)


IMPORTING_TORCH = "importing torch ..."  # the first line of a script's run: torch takes 5-12 s to load on a laptop
_TICKER: list[Progress] = []  # the import's progress line, until setup() says torch is in (torch_imported)


def importing_torch(name: str, parser: argparse.ArgumentParser | None = None, argv: list[str] | None = None) -> None:
    """In a script run as `__main__` (`name`): parse and check every flag with the script's `parser` first (a typo
    or a bad value is refused in a second, with the line main() would give after torch; --help prints its page
    here), then say that torch is loading before it does, and every PROGRESS_EVERY_S while it goes on
    (common.harness.ticker, stopped by torch_imported), so a run never starts with seconds of silence; under
    torchrun rank 0 alone says it."""
    if name != "__main__":
        return
    argv = sys.argv[1:] if argv is None else argv
    if parser is not None:
        args = parser.parse_args(argv)  # OneLineParser: one error line and exit 2, or the help page and exit 0
        try:
            check_flags(args, Path(getattr(sys.modules["__main__"], "__file__", sys.argv[0])).stem)
        except SuiteError as exc:
            fail(str(exc))
    refuse_schedule(name, argv)
    if os.environ.get("RANK", "0") != "0" or any(a in ("-h", "--help") for a in argv):
        return
    print(IMPORTING_TORCH, flush=True)
    ticker = Progress(IMPORTING_TORCH.removesuffix(" ..."), None, PROGRESS_AFTER_S, PROGRESS_EVERY_S)
    ticker.start()
    _TICKER.append(ticker)


def torch_imported() -> None:
    """Stop the import's progress line (common.harness.runtime.setup calls this as the run's own lines begin)."""
    while _TICKER:
        _TICKER.pop().stop()
