"""How long a run will take, said before its first step, and a progress line while a long run goes on.

On the CPU the estimate comes from the work the script already computes (`Work.flops` and `Work.bytes`
per step, `Work.moved` for its intermediates, `Work.reference` for its reference, `Work.ops` for the ops a step
dispatches, `Work.fused` for a fused attention kernel's shape) and rates measured here, at the run's dtype and
thread count, in a fraction of a second each: a matmul in the run's dtype and in its reference's (256 x 256 or
larger, see gemm_rate), a 16 MB copy, where the step moves intermediates an out-of-place multiply into a fresh
64 MB output (pointwise_rate: the slow bf16 path of a CPU without native bf16, and the page faults of a fresh
large tensor, are in it), where it counts its ops the cost of one op (op_rate: OpenMP's fork and join, and its
stalls while another process keeps a core busy, are in it), and where its FLOPs run in SDPA's CPU flash kernel
that kernel on a slice of the step's shape (fused_attention_rate). Each rate is measured once a
process. --bench's calls are counted as time_unprofiled makes them for a step of the estimated time
(common.harness.bench.timing_calls), hedged where that count jumps (bench_calls).
Nothing is measured for a run whose whole work is under MEASURE_ABOVE_FLOPS and
MEASURE_ABOVE_BYTES (it cannot take long): short runs print the same lines every time, and a cold run's first
step stays cold. A run estimated above SAY_ABOVE_S
prints the estimate; above LONG_S, also a cheaper command (fp32 where the dtype is emulated, a smaller
--batch or --size). A compiled run adds torch.compile's first call from a table measured on a 2-core CPU
(compile_cost: the graph's tracing, g++ building its kernels unless Inductor's cache holds them, a fresh cache's
first build). On a GPU there is no estimate: the posts' shapes take milliseconds there, and Triton's compile and
autotuning cannot be told in advance.

The progress line is elapsed time against the estimate, printed by a thread every PROGRESS_EVERY_S, so nothing
of the suite runs inside the script's profiler loop: from PROGRESS_AFTER_S on for a run estimated long, from
twice its estimate for a shorter one that overruns it, never for a run too small to estimate.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from common.cli import WIDTH, fit_command
from common.harness.bench import MIN_CALLS, UNTIMED_CALLS, timing_calls
from common.harness.machine import native_16bit
from common.harness.ticker import PROGRESS_AFTER_S, Progress, progress
from common.physics import FusedAttention, Work
from common.units import human_time

if TYPE_CHECKING:  # the run's type only: common.harness.runtime imports this module to say its phases
    from common.harness.runtime import Run

MEASURE_ABOVE_FLOPS = 2e9  # a run with less work than this in all (2 GFLOP, 2 GB) cannot take long: not measured
MEASURE_ABOVE_BYTES = 2e9
SAY_ABOVE_S = 10.0  # an estimate above this is printed, and progress lines follow
PHASES_ABOVE_S = 1.0  # a run estimated above this says its profiled steps, warm-up and trace writing as they start
# (each then takes a second or more: the estimate leaves out the profiler's start, stop and export)
LONG_S = 60.0  # above this the estimate says so, with a cheaper command
TARGET_S = 30.0  # what the cheaper command aims for
GEMM_N, GEMM_MAX_N = 256, 2048  # the matmul whose rate is measured, from this size up to that
GEMM_MIN_S = 0.1  # ... until one product takes this long
GEMM_PROBE_S = 4.0  # an emulated 16-bit GEMM goes on doubling while the next product should take at most this
COPY_BYTES = 16 << 20
POINTWISE_BYTES = 64 << 20  # above glibc's largest mmap threshold (32 MB): a fresh output is fresh pages, as
# attention's [8, 16, 1024, 1024] scores are
OP_ELEMENTS = 1 << 16  # fp32 elements of the op whose cost is measured: above ATen's grain size (32,768), so on
# more than one thread it enters OpenMP's pool, as a training step's ops on [tokens, dim] activations do
OP_MIN_S = 0.25  # ... calls back to back for at least this long: some scheduler ticks, however busy the CPU
FUSED_SLICE_FLOPS = 5e9  # the fused attention slice timed: as many batch elements (or heads) as stay under this


@dataclass(frozen=True)
class Estimate:
    """What a CPU run will take, from measured rates: its calls of the step, the reference, --bench."""

    seconds: float  # torch.compile's first call included (compile_s)
    calls: int  # calls of the step in the run's dtype (warm-up, profiled loop, --bench)
    flops_per_s: float | None  # the rate measured in the run's dtype for the step's FLOPs: a matmul's, or the fused
    # kernel's; None for a compiled run too small to measure, whose estimate is its compile
    cheaper: tuple[str, ...] = ()  # flags of a cheaper run, when this one is long
    cheaper_seconds: float | None = None
    op_s: float | None = None  # the measured cost of one op, where the step counts its ops (Work.ops)
    compile_cost: CompileCost | None = None  # torch.compile's first call (compile_cost; None for an eager run)

    @property
    def compile_s(self) -> float:
        return self.compile_cost.seconds if self.compile_cost else 0.0


@dataclass(frozen=True)
class Said:
    """A run's estimate as it said it, and when: the start its progress lines count from, whichever phase runs."""

    estimate: Estimate | None
    started: float  # time.monotonic() when it was said
    printed: bool  # the estimate line was printed (a run of more than SAY_ABOVE_S)
    reference_left: bool  # the reference is still to compute after the profiled steps (05 made it first)

    @property
    def seconds(self) -> float | None:
        return self.estimate.seconds if self.estimate else None

    @property
    def phases(self) -> bool:
        """The run's phases say when they start: a run whose estimate was printed, or one estimated above
        PHASES_ABOVE_S."""
        return self.printed or (self.estimate is not None and self.estimate.seconds > PHASES_ABOVE_S)


def gemm_rate(dtype: torch.dtype, size: float = GEMM_MAX_N) -> float:
    """FLOP/s of an n x n matmul in `dtype` on the CPU's threads at n = `size`, from best-of-three timings of
    smaller products (after an untimed call each).

    The matrix doubles from GEMM_N until one product takes GEMM_MIN_S, or reaches GEMM_MAX_N or `size`: a
    256 x 256 fp32 product takes 0.3 ms, where one OpenMP spin-wait stall (a 4 ms scheduler tick when
    another process keeps a core busy) would read as a rate ten times too slow. Past the largest size timed,
    a rate that fell from the size before is taken to keep falling at that pace (never to rise).

    A 16-bit dtype this CPU emulates falls off a cliff that small products do not show: with oneDNN held to
    AVX2, bf16 runs at 2.45 GFLOP/s from 256 to 768, 0.95 at 1024 and 0.30 at 2048, so timed up to 512 a
    2048 run was estimated 8x short (35 s for 286 s). For such a dtype the doubling goes on past GEMM_MIN_S
    while the next product should take at most GEMM_PROBE_S, each product that long timed once, untimed call
    skipped; a native one does not fall, and stops at GEMM_MIN_S.
    """
    name = {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype)
    emulated = name is not None and native_16bit(name) is None
    rates: list[tuple[int, float]] = []
    n = GEMM_N
    while True:
        x, w = torch.randn(n, n, dtype=dtype), torch.randn(n, n, dtype=dtype)
        long = bool(rates) and 2 * n**3 / rates[-1][1] >= GEMM_MIN_S  # one call is enough, and its own warm-up
        if not long:
            torch.matmul(x, w)
        best = math.inf
        for _ in range(1 if long else 3):
            start = time.perf_counter()
            torch.matmul(x, w)
            best = min(best, time.perf_counter() - start)
        rates.append((n, 2 * n**3 / best))
        if 2 * n > min(GEMM_MAX_N, size):
            break
        if best >= GEMM_MIN_S and not (emulated and 2 * (2 * n) ** 3 / rates[-1][1] <= GEMM_PROBE_S):
            break
        n *= 2
    (n1, r1), (n2, r2) = rates[-2] if len(rates) > 1 else rates[-1], rates[-1]
    falls = math.log(r1 / r2) / math.log(n2 / n1) if n2 > n1 and r2 < r1 else 0.0
    return r2 * (n2 / max(size, n2)) ** falls


def copy_rate() -> float:
    """Bytes/s moved (read plus written) by a COPY_BYTES copy on the CPU, best of three."""
    src = torch.empty(COPY_BYTES, dtype=torch.uint8)
    dst = torch.empty_like(src)
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        dst.copy_(src)
        best = min(best, time.perf_counter() - start)
    return 2 * COPY_BYTES / best


def pointwise_rate(dtype: torch.dtype) -> float:
    """Bytes/s moved (read plus written) by `x * 0.5` in `dtype` on POINTWISE_BYTES, each call into a fresh
    output as an out-of-place op writes one, best of three (after an untimed call)."""
    x = torch.ones(POINTWISE_BYTES // dtype.itemsize, dtype=dtype)
    x * 0.5
    best = math.inf
    for _ in range(3):
        start = time.perf_counter()
        y = x * 0.5
        best = min(best, time.perf_counter() - start)
        del y
    return 2 * POINTWISE_BYTES / best


def op_rate() -> float:
    """Calls per second of `torch.add(x, y, out=z)` on OP_ELEMENTS fp32 elements at the current thread count, back
    to back for OP_MIN_S (after untimed calls): the cost of one op of a small step beyond its arithmetic.

    A mean, not a best of a few: what it measures is mostly what a best leaves out. On more than one thread each
    op forks and joins OpenMP's pool, and while another process keeps a core busy the join waits for a scheduler
    tick: on this project's 2-core machine at a load of 3, 8 ms a call on 2 threads, 12 µs on one (a 1-element
    add, which stays on one thread, 2 µs on either).
    """
    x, y, z = torch.ones(OP_ELEMENTS), torch.ones(OP_ELEMENTS), torch.empty(OP_ELEMENTS)
    for _ in range(3):
        torch.add(x, y, out=z)
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < OP_MIN_S:
        torch.add(x, y, out=z)
        calls += 1
    return calls / elapsed


def fused_attention_rate(dtype: torch.dtype, fused: FusedAttention) -> float:
    """FLOP/s of causal SDPA pinned to its flash backend (torch's CPU flash-attention kernel, which tiles the
    scores rather than computing them with a matmul) on a slice of `fused`'s shape: `fused.seq` and
    `fused.head_dim` as the run has them, as many of its batch elements as keep one call under FUSED_SLICE_FLOPS
    (at least one; of a single element's heads as many as that allows, at least as many as threads), best of
    three after an untimed call. FLOPs as attention_work counts them: half of q @ k.T and attn @ v, the causal
    half. A slice of few heads runs slower per FLOP than the whole (25 GFLOP/s for 3 heads of 04_c's shape in bf16
    on this project's CPU, 50 for one batch element's 16, 65 for all 8): the kernel splits its work over batch
    elements, heads and blocks of queries, and a causal block's work grows along the sequence."""
    from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: PLC0415 (only where a step runs it)

    per_head = 2 * fused.seq * fused.seq * fused.head_dim
    batch = max(1, min(fused.batch, int(FUSED_SLICE_FLOPS // (fused.heads * per_head))))
    heads = min(fused.heads, max(torch.get_num_threads(), int(FUSED_SLICE_FLOPS // per_head), 1))
    q, k, v = (torch.randn(batch, heads, fused.seq, fused.head_dim, dtype=dtype) for _ in range(3))
    best = math.inf
    with torch.no_grad(), sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        for _ in range(3):
            start = time.perf_counter()
            torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            best = min(best, time.perf_counter() - start)
    return batch * heads * per_head / best


def profiler_imports() -> None:
    """Import what torch.profiler imports when it first starts (torch._inductor's config: a few seconds where
    Python compiles it afresh), before the estimate is printed: it is paid then, not inside the run. Said
    first when it is still to be imported."""
    if "torch._inductor.config" in sys.modules:
        return
    with phase("importing torch's compiler (torch._inductor), which the profiler loads"):
        import torch._inductor.config  # noqa: F401, PLC0415


@contextlib.contextmanager
def phase(what: str, said: Said | None = None) -> Iterator[Progress]:
    """Say `what` runs now, before it starts (`<what> ...`), and from PROGRESS_AFTER_S on how long it has
    taken: a slow step before or after the profiled block (a reference, a checked first step). With the run's
    estimate `said` before it, the progress lines count from that estimate and, past it, say what is left."""
    print(f"{what} ...", flush=True)
    if said is None:
        with progress(what) as ticker:
            yield ticker
        return
    with progress(f"{what}, then the profiled steps", said.seconds, started=said.started) as ticker:
        yield ticker


# torch.compile's first call on the CPU, in three parts (torch 2.15 on this project's 2-core VM, load 1-2; each
# measured cold and warm with a fresh TORCHINDUCTOR_CACHE_DIR, benchmarks/estimate_accuracy.py): Dynamo and AOT
# tracing the graph (all a graph in Inductor's FX graph cache costs: 01/02 0.7 s, 03_simple 1.1 s, 05 1.2 s); Inductor
# lowering a new one and g++ building its C++ kernels (01/02 +0.6 s: their GEMM and bias go to the BLAS, no kernel;
# 03_simple +1.5 s; 05's forward and backward +6.3 s); and a fresh cache's first C++ build (+8.3 s: 05 took 15.8 s
# in a fresh cache, 7.5 s after 03_simple had built there). A laptop under load takes a few times these.
GRAPH_S = {False: 0.9, True: 1.2}  # by whether the step runs a backward (grad enabled)
BUILD_S = {(False, False): 0.6, (False, True): 1.5, (True, True): 6.3}  # (backward, builds kernels)
TOOLCHAIN_S = 8.3


@dataclass(frozen=True)
class CompileCost:
    """What torch.compile's first call is counted at, and why (the cache's state)."""

    seconds: float
    why: str

    def said(self) -> str:
        return f"{human_time(self.seconds * 1e6)} ({self.why})"


def inductor_cache_state(cache: Path | None = None) -> str:
    """'fresh' when Inductor's cache (TORCHINDUCTOR_CACHE_DIR, else /tmp/torchinductor_<user>) holds no built kernel
    (no .so), 'built' when it holds some, 'graphs' when it also holds FX graphs: what a repeated command finds."""
    if cache is None:
        from torch._inductor.runtime.cache_dir_utils import cache_dir  # noqa: PLC0415 (loaded with the profiler)

        cache = Path(cache_dir())
    built = any(name.endswith(".so") for _, _, names in os.walk(cache) for name in names)
    if not built:
        return "fresh"
    graphs = cache / "fxgraph"
    return "graphs" if graphs.is_dir() and any(graphs.iterdir()) else "built"


def compile_cost(backward: bool, kernels: bool, ran_before: bool, state: str) -> CompileCost:
    """torch.compile's first call for a step with or without a `backward` whose graph builds C++ `kernels` or not
    (a forward's GEMMs alone, with their bias, go to the BLAS), where the same command `ran_before` (its trace is
    there) and Inductor's cache is in `state` (inductor_cache_state)."""
    graph = GRAPH_S[backward]
    kernels = kernels or backward  # a backward always has elementwise kernels of its own
    if ran_before and state == "graphs":
        return CompileCost(graph, "this command ran before: its graph is in Inductor's cache")
    seconds = graph + BUILD_S[(backward, kernels)]
    if not kernels:
        return CompileCost(seconds, "tracing and lowering; the GEMMs go to the BLAS")
    if state == "fresh":
        return CompileCost(seconds + TOOLCHAIN_S, "g++ builds its kernels, the first in a fresh Inductor cache")
    return CompileCost(seconds, f"g++ builds its kernels; {human_time(graph * 1e6)} once cached")


_COMPILE_SAID: list[bool] = []  # once a process: a script that compiles before the recording says it there


def announce_compile(backward: bool, said: Said | None = None) -> None:
    """Say, before a compiled run's first call and once a process, that it compiles, with what the estimate counts
    for it (`said`: on the CPU) or, on a GPU, that Triton builds its kernels there."""
    if _COMPILE_SAID:
        return
    _COMPILE_SAID.append(True)
    what = "forward and backward" if backward else "forward"
    cost = said.estimate.compile_cost if said and said.estimate else None
    about = f"about {human_time(cost.seconds * 1e6)}" if cost else "Triton builds and tunes its kernels"
    print(f"torch.compile: the first call compiles the {what}: {about} ...", flush=True)


Rate = Callable[[str, torch.dtype], float]  # ("gemm" | "copy" | "pointwise" | "op" | "fused", dtype) -> FLOP/s,
# bytes/s or ops/s
_measured: dict[tuple, float] = {}  # each rate once a process, by the function that measured it and the threads


def measured_rate(kind: str, dtype: torch.dtype, size: float, fused: FusedAttention | None = None) -> float:
    """The rate of `kind` in `dtype` on this CPU at its current thread count, measured the first time it is
    asked for in this process (gemm_rate at `size`, copy_rate, pointwise_rate, op_rate, fused_attention_rate of
    `fused`)."""
    measure = {
        "gemm": lambda: gemm_rate(dtype, size),
        "copy": copy_rate,
        "pointwise": lambda: pointwise_rate(dtype),
        "op": op_rate,
        "fused": lambda: fused_attention_rate(dtype, fused),
    }
    what = {"gemm": gemm_rate, "copy": copy_rate, "pointwise": pointwise_rate, "op": op_rate,
            "fused": fused_attention_rate}  # fmt: skip
    key = (
        what[kind],
        kind,
        dtype if kind not in ("copy", "op") else None,
        size if kind == "gemm" else fused if kind == "fused" else None,
        torch.get_num_threads(),
    )
    if key not in _measured:
        if not _measured:
            print("measuring this CPU's rate for the estimate ...", flush=True)
        _measured[key] = measure[kind]()
    return _measured[key]


def step_seconds(work: Work, dtype: torch.dtype, rate: Rate) -> float:
    """One call of `work` in `dtype`: its FLOPs at the matmul rate (at the fused attention kernel's where it has
    one), its bytes at the copy rate, the bytes its intermediates move at the out-of-place pointwise rate, its ops
    at the per-op rate (each measured only where the step has some)."""
    moved = work.moved / rate("pointwise", dtype) if work.moved else 0.0
    ops = work.ops / rate("op", dtype) if work.ops else 0.0
    flops = work.flops / rate("fused" if work.fused else "gemm", dtype) if work.flops else 0.0
    return flops + (work.bytes / rate("copy", torch.uint8) if work.bytes else 0.0) + moved + ops


def run_seconds(run: Run, work: Work, steps: int, dtype: torch.dtype, rate: Rate) -> tuple[float, int]:
    """The seconds and the calls of the step of a run: `steps` calls in `dtype` and --bench's (bench_calls: as many
    as common.harness.bench.timing_calls says it makes for a step of this time, hedged at its jump), and the reference
    once in its higher precision (`work.reference`, or the step's FLOPs), at the rates `rate(kind, dtype)`."""
    reference_dtype = run.reference_dtype if dtype == run.dtype else torch.float64
    reference = work.reference or Work(work.flops, 0.0)
    step = step_seconds(work, dtype, rate)
    calls = steps + (bench_calls(step) if run.bench else 0)
    return calls * step + step_seconds(reference, reference_dtype, rate), calls


STEP_SPREAD = 1.5  # how far a step's estimate may be off either way on a loaded CPU (runs took 0.65-1.8x theirs)


def bench_calls(step: float) -> int:
    """--bench's calls for a step estimated at `step` s: time_unprofiled's count (timing_calls) jumps where its timed
    calls fall below MIN_CALLS (9 calls of a 0.124 s step, 23 of a 0.126 s one: 2.6x the time), so a step off by
    STEP_SPREAD lands on either side. The calls whose time is the geometric mean of the two ends' times: the same
    count away from a jump (within a call), and near one a miss of about the square root of the jump instead of
    all of it (the worst over steps within STEP_SPREAD: 3.8x -> 2.4x, the bench's part of the run alone)."""
    lo, hi = step / STEP_SPREAD, step * STEP_SPREAD
    return max(1, round(math.sqrt(lo * timing_calls(lo) * hi * timing_calls(hi)) / step))


def with_flag(argv: tuple[str, ...], flag: str, value: object) -> tuple[str, ...]:
    """`argv` with `flag` set to `value` (an earlier `flag X` or `flag=X` removed)."""
    out: list[str] = []
    skip = False
    for word in argv:
        if skip:
            skip = False
        elif word == flag:
            skip = True
        elif not word.startswith(flag + "="):
            out.append(word)
    return (*out, flag, str(value))


def shrink(run: Run, argv: tuple[str, ...], seconds: float) -> tuple[tuple[str, ...], float]:
    """A smaller --batch (work grows with it in every script) or else --size (01's N: work grows as N³)
    that brings `seconds` to about TARGET_S; `argv` unchanged where neither can shrink."""
    sizes = dict(run.sizes)
    factor = seconds / TARGET_S
    if sizes.get("batch", 1) > 1:
        batch = max(1, int(sizes["batch"] / factor))
        return with_flag(argv, "--batch", batch), seconds * batch / sizes["batch"]
    if sizes.get("size", 0) > 64:
        size = max(64, int(sizes["size"] / factor ** (1 / 3)) // 64 * 64)
        return with_flag(argv, "--size", size), seconds * (size / sizes["size"]) ** 3
    return argv, seconds


def estimate(
    run: Run,
    work: Work,
    warmup_calls: int,
    rates: Rate | None = None,
    backward: bool | None = None,
    tag: str | None = None,
) -> Estimate | None:
    """How long this run will take on the CPU, or None on a GPU and for an eager run too small to take long.
    `rates(kind, dtype)`: the rates to use (default: measured here, once a process; see measured_rate).
    A compiled run adds torch.compile's first call (compile_cost, by whether it compiles a `backward`: default,
    whether grad is enabled now; whether its graph builds kernels, `work.kernels`; and whether the run's trace,
    `tag`, is there from an earlier run); a compiled run too small to measure is estimated at that alone."""
    steps = run.planned_steps + warmup_calls
    fewest = steps + (UNTIMED_CALLS + MIN_CALLS if run.bench else 0) + 1  # and the reference
    moves = work.bytes + work.moved
    small = fewest * work.flops < MEASURE_ABOVE_FLOPS and fewest * moves < MEASURE_ABOVE_BYTES
    if run.on_gpu:
        return None
    cost = None
    if run.compiled:
        ran_before = tag is not None and any(run.traces_dir.glob(f"{tag}.json*"))
        grad = torch.is_grad_enabled() if backward is None else backward
        cost = compile_cost(grad, work.kernels, ran_before, inductor_cache_state())
    compile_s = cost.seconds if cost else 0.0
    if small:
        return Estimate(compile_s, steps, None, compile_cost=cost) if cost else None
    size = (work.flops / 2) ** (1 / 3)  # the square matmul of a step's FLOPs

    def measured(kind: str, dtype: torch.dtype) -> float:
        return measured_rate(kind, dtype, size, work.fused)

    rate = rates or measured
    if rates is None:
        profiler_imports()
    seconds, calls = run_seconds(run, work, steps, run.dtype, rate)
    flops_per_s = rate("fused" if work.fused else "gemm", run.dtype)
    said = Estimate(seconds + compile_s, calls, flops_per_s, compile_cost=cost)
    if work.ops:
        said = dataclasses.replace(said, op_s=1 / rate("op", run.dtype))
    if seconds <= LONG_S:  # the steps' time: a smaller shape does not shorten the compile
        return said
    argv, cheaper = run.argv, seconds
    if run.dtype != torch.float32:
        fp32, _ = run_seconds(run, work, steps, torch.float32, rate)
        if fp32 < 0.8 * seconds:
            argv, cheaper = with_flag(argv, "--dtype", "fp32"), fp32
    if cheaper > LONG_S:
        argv, cheaper = shrink(run, argv, cheaper)
    if argv == run.argv:
        return said
    return dataclasses.replace(said, cheaper=argv, cheaper_seconds=cheaper + compile_s)


def estimate_lines(run: Run, work: Work, guess: Estimate | None) -> list[str]:
    """What the run says before its first step: nothing for a short run, the estimate for a longer one, and
    a cheaper command for a long one."""
    if guess is None or guess.seconds < SAY_ABOVE_S:
        return []
    total = human_time(guess.seconds * 1e6)
    if guess.flops_per_s is None:
        return [f"estimate: about {total}, nearly all of it torch.compile's first call ({guess.compile_cost.why})"]
    kernel = " (flash)" if work.fused else ""  # SDPA's CPU flash kernel's rate, not a matmul's
    ops = f", {work.ops} ops" if work.ops else ""
    reference = " and a reference" if work.has_reference else ""
    per_op = f", {human_time(guess.op_s * 1e6)} an op," if guess.op_s else ""
    rate = f"{run.dtype_name} at {guess.flops_per_s / 1e9:.3g} GFLOP/s{kernel}{per_op} on this CPU"
    lines = [f"estimate: about {total}: {guess.calls} calls of {work.flops / 1e9:.3g} GFLOP{ops}{reference}, {rate}"]
    if guess.compile_cost:
        lines.append(f"  and torch.compile's first call: about {guess.compile_cost.said()}")
    long = guess.seconds - guess.compile_s > LONG_S
    if long and guess.cheaper:
        command = " ".join([run.launcher, f"{run.script}.py", *guess.cheaper])
        instead = f"  that is long; about {human_time(guess.cheaper_seconds * 1e6)} instead:"
        if len(f"{instead} {command}") > WIDTH:  # the command on lines of its own, whole: copied, it runs as printed
            lines.append(f"{instead}\n{fit_command(command)}")
        else:
            lines.append(f"{instead} {command}")
    elif long:
        lines.append("  that is long; smaller shapes run faster")
    return lines


def progress_after(estimate_s: float | None) -> float:
    """When a run's progress lines start: after PROGRESS_AFTER_S, estimated or not (a run too small to estimate
    that still takes that long, compiling say, is not left silent either)."""
    return PROGRESS_AFTER_S
