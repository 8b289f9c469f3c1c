"""Honest about time on a CPU: the fast dtype by default, an estimate before a long run, progress during it."""

from __future__ import annotations

import dataclasses
import io
import json
import re
import subprocess
import sys
import threading
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from helpers import ROOT, docs_text, load_benchmark, run

import common.harness.estimate
import common.harness.machine
import common.harness.runtime
from common.harness.estimate import checked_lines, estimate, estimate_lines, progress, with_flag
from common.harness.runtime import Run, resolve_dtype
from common.physics import Work

CPU = torch.device("cpu")


REAL_CACHE_STATE = common.harness.estimate.inductor_cache_state


@pytest.fixture(autouse=True)
def fresh_inductor_cache(monkeypatch):
    """Every estimate here counts a compile as in a fresh Inductor cache, whatever this machine's cache holds."""
    monkeypatch.setattr(common.harness.estimate, "inductor_cache_state", lambda cache=None: "fresh")


def cpu_run(tmp_path: Path, dtype_name: str = "bf16", **kw) -> Run:
    base = dict(
        script="01_matmul_add",
        device=CPU,
        dtype=common.harness.runtime.DTYPES[dtype_name],
        dtype_name=dtype_name,
        warm=True,
        compiled=True,
        planned_steps=5,
        traces_dir=tmp_path,
        argv=("--size", "4096", "--warmup", "--compile", "--dtype", dtype_name),
        sizes=(("size", 4096),),
    )
    return Run(**{**base, **kw})


@pytest.fixture
def avx2_only(monkeypatch):
    """A CPU like the issue's: AVX2 and FMA, no AVX512-BF16 or AMX."""
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    monkeypatch.delenv("DNNL_MAX_CPU_ISA", raising=False)
    monkeypatch.setattr(common.harness.machine, "cpu_flags", lambda: {"avx", "avx2", "fma"})


def test_a_cpu_without_native_bf16_runs_fp32_by_default_and_says_why(tmp_path, capsys, avx2_only):
    assert run("01_matmul_add", tmp_path, "--size", "8") == 0
    out = capsys.readouterr().out
    assert "dtype=fp32" in out and "notice: dtype fp32, the fast one on this CPU: it has no AVX512-BF16 or AMX" in out
    assert json.loads((tmp_path / "01_matmul_add" / "8_fp32_cold_eager.json").read_text())["suite"]["dtype"] == "fp32"


def test_bf16_stays_the_default_on_a_cpu_with_native_bf16(monkeypatch):
    monkeypatch.delenv("ONEDNN_MAX_CPU_ISA", raising=False)
    for flag in ("avx512_bf16", "amx_bf16", "bf16"):  # x86 AVX512-BF16, x86 AMX, Arm
        monkeypatch.setattr(common.harness.machine, "cpu_flags", lambda flag=flag: {"avx2", flag})
        assert resolve_dtype(None, CPU) == ("bf16", None)


def test_bf16_stays_the_default_on_a_gpu(avx2_only):
    assert resolve_dtype(None, torch.device("cuda", 0)) == ("bf16", None)


def test_onednn_held_below_bf16_counts_as_no_native_bf16(monkeypatch):
    monkeypatch.setattr(common.harness.machine, "cpu_flags", lambda: {"avx512_bf16"})
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2")
    name, notice = resolve_dtype(None, CPU)
    assert name == "fp32" and "ONEDNN_MAX_CPU_ISA=AVX2" in notice


def test_an_explicit_bf16_on_such_a_cpu_runs_as_asked_and_states_the_cost(tmp_path, capsys, avx2_only):
    assert run("01_matmul_add", tmp_path, "--size", "8", "--dtype", "bf16") == 0
    out = capsys.readouterr().out
    assert "notice: --dtype bf16 is emulated on this CPU" in out and "150x" in out and "--dtype fp32" in out
    assert (tmp_path / "01_matmul_add" / "8_bf16_cold_eager.json").exists()


def test_a_small_run_measures_nothing_and_prints_no_estimate_or_progress(tmp_path, capsys, monkeypatch):
    def no_measuring(*args):
        raise AssertionError("a small run measured a rate")

    monkeypatch.setattr(common.harness.estimate, "gemm_rate", no_measuring)
    assert run("01_matmul_add", tmp_path, "--size", "64") == 0
    out = capsys.readouterr().out
    ticks = [line for line in out.splitlines() if line.startswith("... ") and "importing" not in line]
    assert "estimate:" not in out and not ticks  # a slow import's own ticks (a loaded machine) are the import's


def rates(monkeypatch, flops_per_s: dict[torch.dtype, float], bytes_per_s: float = 10e9) -> None:
    monkeypatch.setattr(common.harness.estimate, "gemm_rate", lambda dtype, size=0: flops_per_s[dtype])
    monkeypatch.setattr(common.harness.estimate, "copy_rate", lambda: bytes_per_s)


EMULATED = {torch.bfloat16: 0.7e9, torch.float32: 100e9, torch.float64: 50e9}  # the slow bf16 path, measured


def test_a_long_run_says_so_and_waits_for_its_first_call_before_a_cheaper_command(tmp_path, monkeypatch):
    rates(monkeypatch, EMULATED)
    r = cpu_run(tmp_path)
    work = Work(2 * 4096**3, 4 * 4096**2 * 2)
    guess = estimate(r, work, warmup_calls=5, backward=False)
    assert guess.calls == 10 and guess.seconds > 10 * work.flops / 0.7e9  # ten calls in bf16, then the reference
    head, compiling, long = estimate_lines(r, work, guess)
    assert head == ("estimate: about 1,980 s: 10 calls of 137 GFLOP and a reference, bf16 at 0.7 GFLOP/s on this CPU")
    assert compiling == (
        "  and torch.compile's first call: about 10.7 s (g++ builds its kernels, the first in a fresh Inductor cache)"
    )
    assert len(head) <= 120
    assert long == "  that is long; the first call checks this estimate, then a cheaper command is said"


def test_a_checked_long_run_says_its_cheaper_command_in_fp32(tmp_path, monkeypatch):
    """Issue 48 item 1: "... instead" only from a checked estimate: the first call took what was estimated."""
    rates(monkeypatch, EMULATED)
    r = cpu_run(tmp_path)
    guess = estimate(r, Work(2 * 4096**3, 4 * 4096**2 * 2), warmup_calls=5, backward=False)
    lines, corrected = checked_lines(r, guess, 1.2 * guess.step_s)
    assert corrected is None and lines[0].startswith("estimate checked: a call of the step took ")
    assert lines[0].endswith(", as estimated (196 s)")
    assert lines[1].startswith("  that is long; about ")
    assert lines[1].endswith("uv run 01_matmul_add.py --size 4096 --warmup --compile --dtype fp32")


def test_a_first_call_8x_the_estimate_corrects_it_and_its_cheaper_command(tmp_path, monkeypatch):
    rates(monkeypatch, {torch.float32: 1e9, torch.float64: 1e9})
    r = cpu_run(tmp_path, "fp32", argv=("--size", "2048"), compiled=False, sizes=(("size", 2048),))
    guess = estimate(r, Work(2 * 2048**3, 0), warmup_calls=0)
    assert guess.seconds == pytest.approx(6 * 2 * 2048**3 / 1e9)  # 5 steps and the reference: 103 s
    lines, corrected = checked_lines(r, guess, 8 * guess.step_s)
    assert corrected == pytest.approx(8 * guess.seconds)
    said = "estimate checked: a call of the step took 137 s, 8x the 17.2 s estimated: about 825 s in all, not 103 s"
    assert lines[0] == said
    size = int(lines[1].split("--size ")[1])
    assert lines[1].startswith("  that is long; about ") and size < 2048 * (30 / 103) ** (1 / 3)  # from the 825 s


def test_a_first_call_a_tenth_of_the_estimate_says_so_and_no_cheaper_command(tmp_path, monkeypatch):
    rates(monkeypatch, {torch.float32: 1e9, torch.float64: 1e9})
    r = cpu_run(tmp_path, "fp32", argv=("--size", "2048"), compiled=False, sizes=(("size", 2048),))
    guess = estimate(r, Work(2 * 2048**3, 0), warmup_calls=0)
    lines, corrected = checked_lines(r, guess, guess.step_s / 10)
    assert (
        corrected == pytest.approx(guess.seconds / 10) and len(lines) == 1 and "0.1x the 17.2 s estimated" in lines[0]
    )


def test_a_first_call_within_2x_of_a_short_estimate_says_nothing(tmp_path, monkeypatch):
    rates(monkeypatch, {torch.float32: 1e9, torch.float64: 1e9})
    r = cpu_run(tmp_path, "fp32", argv=("--size", "1024"), compiled=False, sizes=(("size", 1024),))
    guess = estimate(r, Work(2 * 1024**3, 0), warmup_calls=0)
    assert checked_lines(r, guess, 1.9 * guess.step_s) == ([], None)
    assert checked_lines(r, guess, guess.step_s / 1.9) == ([], None)


def test_a_long_fp32_run_gets_a_smaller_size(tmp_path, monkeypatch):
    rates(monkeypatch, {torch.float32: 1e9, torch.float64: 1e9})
    r = cpu_run(tmp_path, "fp32", argv=("--size", "4096"), compiled=False)
    guess = estimate(r, Work(2 * 4096**3, 0), warmup_calls=0)
    assert guess.cheaper[:1] == ("--size",) and int(guess.cheaper[1]) < 4096 and guess.cheaper_seconds < 60


def test_a_smaller_batch_is_what_a_long_batched_run_gets(tmp_path, monkeypatch):
    rates(monkeypatch, {torch.float32: 1e9, torch.float64: 1e9})
    r = cpu_run(tmp_path, "fp32", argv=("--batch", "64"), sizes=(("batch", 64),), script="03_simple_mlp")
    guess = estimate(r, Work(116e9, 0), warmup_calls=0)
    assert guess.cheaper[0] == "--batch" and 1 <= int(guess.cheaper[1]) < 64


def test_a_flag_is_replaced_not_repeated():
    assert with_flag(("--dtype", "bf16", "--size=8"), "--dtype", "fp32") == ("--size=8", "--dtype", "fp32")
    assert with_flag(("--size=8",), "--size", 4) == ("--size", "4")


def test_no_estimate_on_a_gpu(tmp_path):
    assert estimate(cpu_run(tmp_path, device=torch.device("cuda", 0)), Work(1e15, 1e12), 5) is None


def test_progress_lines_come_while_the_block_runs_and_stop_with_it():
    out = io.StringIO()
    printed = threading.Event()
    with redirect_stdout(out), progress("profiled steps", 120.0, after_s=0.0, every_s=0.01):
        while "\n" not in out.getvalue():
            printed.wait(0.01)
    lines = out.getvalue().splitlines()
    assert re.fullmatch(r"\.\.\. \d[\d.]* (µs|ms|s) of about 120 s estimated: profiled steps", lines[0]), lines[0]
    count = len(out.getvalue())
    printed.wait(0.05)
    assert len(out.getvalue()) == count  # the thread is gone


def test_no_progress_line_before_the_threshold():
    out = io.StringIO()
    with redirect_stdout(out), progress("steps", None, after_s=3600.0):
        pass
    assert out.getvalue() == ""


class FakeClock:
    """torch.matmul and time.perf_counter for gemm_rate: an n x n product takes 2n³ / rate(n) seconds."""

    def __init__(self, rate) -> None:
        self.now, self.rate = 0.0, rate

    def matmul(self, x, w):
        self.now += 2 * x.shape[0] ** 3 / self.rate(x.shape[0])

    def perf_counter(self) -> float:
        return self.now


def test_a_rate_that_falls_with_size_is_not_extrapolated_past_the_sizes_timed(monkeypatch):
    """Issue 48 item 1: the rate at the largest size timed (512, where a product first takes GEMM_MIN_S), not the
    fall from 256 to 512 carried on to the run's 4096 (1e9 · 256 / 4096: 8x slower)."""
    clock = FakeClock(lambda n: 1e9 * 256 / n)
    monkeypatch.setattr(common.harness.estimate.torch, "matmul", clock.matmul)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", clock.perf_counter)
    assert common.harness.estimate.gemm_rate(torch.float32, 4096) == pytest.approx(1e9 * 256 / 512)


def test_one_descheduled_timing_does_not_slow_the_rate(monkeypatch):
    """Issue 48 item 1: every third product stalls 100x (another process took the core): the best of several
    timings of each size is the machine's rate, at every size timed."""
    clock = FakeClock(lambda n: 10e9)
    calls = []

    def stalling(x, w):
        calls.append(1)
        clock.matmul(x, w)
        if len(calls) % 3 == 0:
            clock.now += 99 * 2 * x.shape[0] ** 3 / 10e9

    monkeypatch.setattr(common.harness.estimate.torch, "matmul", stalling)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", clock.perf_counter)
    assert common.harness.estimate.gemm_rate(torch.float32, 4096) == pytest.approx(10e9)


def cliff(n: int) -> float:
    """bf16 emulated with oneDNN held to AVX2, as measured on this project's 2-core VM: flat, then a cliff."""
    return 2.45e9 if n <= 768 else 0.95e9 if n <= 1024 else 0.30e9


@pytest.mark.parametrize(("native", "expected"), [(None, 0.95e9), ("avx512_bf16", 2.45e9)])
def test_an_emulated_16bit_rate_is_probed_past_the_cliff_a_native_one_is_not(monkeypatch, native, expected):
    """Timed to 512 the emulated rate is flat (2.45 GFLOP/s) where a 2048 product runs at 0.30. Emulated, the
    doubling goes on to 1024 (its product predicted 0.88 s from 512's rate, under GEMM_PROBE_S) and takes the rate
    there, 0.95, unextrapolated (the run's first call checks the rest); native, it stops at 512, where the product
    passed GEMM_MIN_S."""
    clock = FakeClock(cliff)
    monkeypatch.setattr(common.harness.estimate.torch, "matmul", clock.matmul)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", clock.perf_counter)
    monkeypatch.setattr(common.harness.estimate, "native_16bit", lambda name: native)
    assert common.harness.estimate.gemm_rate(torch.bfloat16, 2048) == pytest.approx(expected)


def test_a_rate_that_rises_with_size_is_not_extrapolated_upward(monkeypatch):
    clock = FakeClock(lambda n: 1e8 * n)  # a native GEMM gets faster as it grows: take the largest timed
    monkeypatch.setattr(common.harness.estimate.torch, "matmul", clock.matmul)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", clock.perf_counter)
    assert common.harness.estimate.gemm_rate(torch.float32, 100_000) == pytest.approx(
        1e8 * common.harness.estimate.GEMM_MAX_N
    )


def test_the_copy_rate_is_bytes_moved_over_the_fastest_of_three_copies(monkeypatch):
    clock = iter([0.0, 0.02, 1.0, 1.01, 2.0, 2.03])  # three copies: 20 ms, 10 ms, 30 ms
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", lambda: next(clock))
    assert common.harness.estimate.copy_rate() == pytest.approx(2 * common.harness.estimate.COPY_BYTES / 0.01)


def test_progress_lines_start_after_ten_seconds_estimated_or_not():
    from common.harness.estimate import PROGRESS_AFTER_S, SAY_ABOVE_S, progress_after

    assert PROGRESS_AFTER_S == 10.0
    assert progress_after(None) == progress_after(SAY_ABOVE_S * 3) == progress_after(0.1) == PROGRESS_AFTER_S


def test_a_progress_line_past_its_estimate_says_what_is_left(monkeypatch):
    ticker = common.harness.estimate.Progress("profiled steps, then the reference", 27.5, None, 10.0)
    monkeypatch.setattr(common.harness.estimate.time, "monotonic", lambda: ticker.started + 80.1)
    assert ticker.line() == "... 80.1 s, past the 27.5 s estimated; left: profiled steps, then the reference"


def test_the_rate_measurement_announces_itself_once(monkeypatch, capsys):
    monkeypatch.setattr(common.harness.estimate, "_measured", {})
    monkeypatch.setattr(common.harness.estimate, "copy_rate", lambda: 1e9)
    monkeypatch.setattr(common.harness.estimate, "op_rate", lambda: 1e5)
    common.harness.estimate.measured_rate("copy", torch.uint8, 0)
    common.harness.estimate.measured_rate("op", torch.float32, 0)
    assert capsys.readouterr().out == "measuring this CPU's rate for the estimate ...\n"


def test_a_compiled_run_announces_its_compile_before_the_first_call(tmp_path, capsys, monkeypatch):
    from common.harness.recording import recording

    monkeypatch.setattr(common.harness.estimate, "_COMPILE_SAID", [])
    with torch.no_grad(), recording(cpu_run(tmp_path, warm=False), "t", Work(1e3, 1e3)):
        assert "the first call compiles the forward: about 10.7 s ..." in capsys.readouterr().out
    monkeypatch.setattr(common.harness.estimate, "_COMPILE_SAID", [])
    with recording(cpu_run(tmp_path, warm=False, script="05_training_step"), "t", Work(1e3, 1e3)):
        assert "compiles the forward and backward" in capsys.readouterr().out


@pytest.mark.slow  # a fresh interpreter imports torch (and its compiler)
def test_importing_the_compiler_announces_itself():
    code = "import sys; from common.harness.estimate import profiler_imports; profiler_imports(); profiler_imports()"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    said = [line for line in done.stdout.splitlines() if not line.startswith("... ")]  # its ticks, if it takes 10 s
    assert said == ["importing torch's compiler (torch._inductor), which the profiler loads ..."]


def test_the_training_step_announces_its_reference_and_checked_step(tmp_path, capsys):
    flags = ("--batch", "1", "--seq", "16", "--dim", "64", "--heads", "2", "--hidden", "128")
    assert run("05_training_step", tmp_path, *flags) == 0
    out = capsys.readouterr().out
    reference, checked = out.index("the reference: "), out.index("the first step, the one checked")
    assert reference < checked < out.index("check: DecoderBlock matches")


def test_attention_estimate_counts_its_score_passes_at_the_pointwise_rate(tmp_path):
    from common.workloads.attention import SCORE_PASSES, AttentionShape, attention_work

    asked = []

    def rate(kind, dtype, pointwise=1e9):
        asked.append((kind, dtype))
        return {"gemm": 100e9, "copy": 10e9, "pointwise": pointwise}[kind]

    r = cpu_run(tmp_path, warm=False, compiled=False, argv=(), sizes=())
    work = attention_work(AttentionShape(8, 16, 1024, 64), 2, SCORE_PASSES["out_of_place"], 4)
    scores = 8 * 16 * 1024 * 1024
    assert work.moved == 9 * scores * 2 and work.reference.moved == 9 * scores * 4
    guess = estimate(r, work, 0, rate)
    step = work.flops / 100e9 + work.bytes / 10e9 + 9 * scores * 2 / 1e9
    reference = 2 * work.flops / 100e9 + work.reference.bytes / 10e9 + 9 * scores * 4 / 1e9
    assert guess.seconds == pytest.approx(5 * step + reference)
    assert ("pointwise", torch.bfloat16) in asked and ("pointwise", torch.float32) in asked  # step, reference
    slower = estimate(r, work, 0, lambda kind, dtype: rate(kind, dtype, pointwise=0.5e9))
    assert slower.seconds > 1.8 * guess.seconds  # the scores' passes are most of it: a halved rate shows


def test_each_rate_is_measured_once_a_process_per_thread_count(monkeypatch):
    calls = []
    monkeypatch.setattr(common.harness.estimate, "pointwise_rate", lambda dtype: calls.append(dtype) or 2e9)
    threads = torch.get_num_threads()
    assert common.harness.estimate.measured_rate("pointwise", torch.bfloat16, 0) == 2e9
    assert common.harness.estimate.measured_rate("pointwise", torch.bfloat16, 0) == 2e9
    assert calls == [torch.bfloat16]
    common.harness.estimate.measured_rate("pointwise", torch.float32, 0)
    try:
        torch.set_num_threads(threads + 1)
        common.harness.estimate.measured_rate("pointwise", torch.bfloat16, 0)
    finally:
        torch.set_num_threads(threads)
    assert calls == [torch.bfloat16, torch.float32, torch.bfloat16]


def test_pointwise_rate_is_bytes_moved_over_the_fastest_of_three_fresh_outputs(monkeypatch):
    clock = iter([0.0, 0.2, 1.0, 1.1, 2.0, 2.3])  # three products: 200 ms, 100 ms, 300 ms
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", lambda: next(clock))
    assert common.harness.estimate.pointwise_rate(torch.float32) == pytest.approx(
        2 * common.harness.estimate.POINTWISE_BYTES / 0.1
    )


def test_the_estimate_benchmark_runs_each_readme_script_command_on_the_cpu(tmp_path):
    import importlib.util

    path = ROOT / "benchmarks" / "estimate_accuracy.py"
    spec = importlib.util.spec_from_file_location("estimate_accuracy", path)
    bench = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = bench  # its dataclass looks its module up
    try:
        spec.loader.exec_module(bench)
    finally:
        del sys.modules[spec.name]
    commands = bench.readme_commands(docs_text())
    lines = [c.line for c in commands]
    for line in (
        "uv run 01_matmul_add.py --size 4096 --warmup",
        "uv run 04_c_sdpa_attention.py --backend math",  # its comment dropped
        "uv run 01_matmul_add.py --size 4096 --warmup --compile --dtype bf16",  # a `$ ` example
        "uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py --bucket-cap-mb 5",
    ):
        assert line in lines
    assert not [x for x in lines if "pytest" in x or "common.summary" in x] and len(set(lines)) == len(lines)
    math = commands[lines.index("uv run 04_c_sdpa_attention.py --backend math")]
    argv = math.argv(tmp_path)
    assert argv[1:5] == [str(path), "--one", "04_c_sdpa_attention.py", "--backend"]
    assert argv[-4:] == ["--device", "cpu", "--traces-dir", str(tmp_path)]
    ddp = commands[lines.index("uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py")]
    assert ddp.argv(tmp_path)[1:6] == ["-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2"]


def test_a_step_s_ops_each_cost_the_measured_per_op_time(tmp_path):
    def rate(kind, dtype):
        return {"gemm": 100e9, "copy": 10e9, "op": 1e3}[kind]  # 1 ms an op

    r = cpu_run(tmp_path, warm=False, compiled=False, argv=(), sizes=())
    plain, counted = Work(1e11, 1e9), Work(1e11, 1e9, ops=150)
    with_ops, without = estimate(r, counted, 0, rate), estimate(r, plain, 0, rate)
    assert with_ops.seconds - without.seconds == pytest.approx(5 * 150 * 1e-3)  # five steps, the reference has none
    assert with_ops.op_s == pytest.approx(1e-3) and without.op_s is None
    line = estimate_lines(r, counted, dataclasses.replace(with_ops, seconds=1234.0))[0]
    assert line.endswith("100 GFLOP, 150 ops and a reference, bf16 at 100 GFLOP/s, 1.00 ms an op, on this CPU")
    assert len(line) <= 120


def test_the_op_rate_is_a_mean_over_back_to_back_calls_stalls_included(monkeypatch):
    clock = {"now": 0.0, "calls": 0}

    def add(*args, **kw):  # every fourth call stalls for a scheduler tick, as OpenMP's join does under load
        clock["calls"] += 1
        clock["now"] += 0.004 if clock["calls"] % 4 == 0 else 0.0001

    monkeypatch.setattr(common.harness.estimate.torch, "add", add)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", lambda: clock["now"])
    rate = common.harness.estimate.op_rate()
    assert clock["calls"] > 3 + 20  # the untimed calls, then OP_MIN_S of them
    assert 1 / rate == pytest.approx((3 * 0.0001 + 0.004) / 4, rel=0.05)  # the mean, not the fastest call


def test_a_fused_attention_step_s_flops_run_at_the_fused_kernel_s_rate(tmp_path):
    from common.physics import FusedAttention
    from common.workloads.attention import AttentionShape, attention_work

    asked = []

    def rate(kind, dtype):
        asked.append(kind)
        return {"gemm": 100e9, "copy": 10e9, "pointwise": 1e9, "fused": 5e9}[kind]

    r = cpu_run(tmp_path, warm=False, compiled=False, argv=(), sizes=())
    work = attention_work(AttentionShape(8, 16, 1024, 64), 2, 0, 4, fused=True)
    assert work.fused == FusedAttention(8, 16, 1024, 64) and work.reference.fused is None
    guess = estimate(r, work, 0, rate)
    reference = 2 * work.flops / 100e9 + work.reference.bytes / 10e9 + work.reference.moved / 1e9
    assert guess.seconds == pytest.approx(5 * (work.flops / 5e9 + work.bytes / 10e9) + reference)
    line = estimate_lines(r, work, dataclasses.replace(guess, seconds=1234.0))[0]
    assert guess.flops_per_s == 5e9 and "bf16 at 5 GFLOP/s (flash) on this CPU" in line and len(line) <= 120
    assert "fused" in asked and attention_work(AttentionShape(), 2).fused is None  # math's FLOPs: a matmul's rate


def test_the_fused_attention_rate_times_a_slice_of_the_run_s_shape(monkeypatch):
    from common.physics import FusedAttention

    clock, shapes = {"now": 0.0}, []

    def sdpa(q, k, v, is_causal=False):
        shapes.append((tuple(q.shape), is_causal))
        clock["now"] += 0.01

    monkeypatch.setattr(common.harness.estimate.torch.nn.functional, "scaled_dot_product_attention", sdpa)
    monkeypatch.setattr(common.harness.estimate.time, "perf_counter", lambda: clock["now"])
    monkeypatch.setattr(common.harness.estimate, "FUSED_SLICE_FLOPS", 5e9)
    per_head = 2 * 1024 * 1024 * 64
    rate = common.harness.estimate.fused_attention_rate(torch.float32, FusedAttention(8, 16, 1024, 64))
    assert shapes == [((2, 16, 1024, 64), True)] * 4  # 2 of the 8 batch elements: 4.3 GFLOP a call
    assert rate == pytest.approx(2 * 16 * per_head / 0.01)
    shapes.clear()
    common.harness.estimate.fused_attention_rate(
        torch.float32, FusedAttention(8, 64, 4096, 128)
    )  # 275 GFLOP an element
    assert shapes[0][0][:1] == (1,) and shapes[0][0][2:] == (4096, 128)
    assert shapes[0][0][1] == max(torch.get_num_threads(), int(5e9 // (2 * 4096 * 4096 * 128)))


def test_bench_s_calls_are_counted_as_time_unprofiled_makes_them():
    from common.harness.bench import MIN_CALLS, MIN_RUN_TIME_S, TIMEIT_WARMUP_CALLS, UNTIMED_CALLS, timing_calls

    # a 1 s step: untimed calls, one calibration call, one timed block, then MIN_CALLS timeit(1) with their warm-ups
    assert timing_calls(1.0) == UNTIMED_CALLS + 1 + 1 + MIN_CALLS * (1 + TIMEIT_WARMUP_CALLS)
    # a 50 ms step: ten timed calls fill MIN_RUN_TIME_S, enough for the median
    assert timing_calls(0.05) == UNTIMED_CALLS + 1 + round(MIN_RUN_TIME_S / 0.05)
    # a 10 us step: blocks of 1, 10 and 100 calibrate (100 calls take a thousandth of MIN_RUN_TIME_S), then 500 blocks
    assert timing_calls(1e-5) == UNTIMED_CALLS + 111 + 100 * 500


def test_bench_s_calls_are_in_the_estimate_at_the_step_s_time(tmp_path):
    def rate(kind, dtype):
        return {"gemm": 1e10, "copy": 1e10}[kind]

    r = cpu_run(tmp_path, warm=False, compiled=False, argv=(), sizes=(), bench=True)
    work = Work(1e10, 0)  # a 1 s step
    guess = estimate(r, work, 0, rate)
    assert guess.calls == 5 + common.harness.estimate.timing_calls(1.0) and guess.seconds == pytest.approx(
        guess.calls + 1
    )


def test_near_bench_s_jump_in_calls_the_estimate_misses_by_the_jump_s_square_root():
    """time_unprofiled makes 9 calls of a 0.124 s step and 23 of a 0.126 s one. Over estimated steps from 10 µs to
    10 s and real steps within STEP_SPREAD of them, the bench's time from bench_calls misses the real one by at most
    2.4x; taking timing_calls of the estimated step itself missed by 3.8x. Away from the jump both agree."""
    from common.harness.bench import timing_calls
    from common.harness.estimate import STEP_SPREAD, bench_calls

    def worst(calls_of) -> float:
        miss = 1.0
        for i in range(400):
            step = 10 ** (-5 + i * 6 / 400)
            for real in (step / STEP_SPREAD, step, step * STEP_SPREAD):
                ratio = real * timing_calls(real) / (step * calls_of(step))
                miss = max(miss, ratio, 1 / ratio)
        return miss

    assert worst(bench_calls) < 2.4 < 3.8 < worst(timing_calls)
    assert [bench_calls(s) for s in (0.05, 0.2, 1.0)] == [timing_calls(s) for s in (0.05, 0.2, 1.0)]


def training_step_under(mode_type: type, shape, amp: bool, fused: bool, dtype: torch.dtype):
    """05's train_step of `shape` on the CPU (its second call: AdamW's state made) under a `mode_type()`."""
    from helpers import load_script

    from common.workloads.block import make_batch

    script = load_script("05_training_step")
    block = script.DecoderBlock(shape.dim, shape.heads, shape.hidden).to(dtype)
    x, target = make_batch(shape.batch, shape.seq, shape.dim, CPU, dtype)
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-4, fused=fused or None)
    script.train_step(block, x, target, optimizer, amp)
    with mode_type() as mode:
        script.train_step(block, x, target, optimizer, amp)
    return mode


STEP_VARIANTS = ((True, False, torch.float32), (False, False, torch.bfloat16), (True, True, torch.float32))
# the default (AMP), --dtype bf16, --fused-optimizer


def test_a_training_step_s_op_count_is_what_it_dispatches():
    from torch.utils._python_dispatch import TorchDispatchMode

    from common.workloads.block import BlockShape, step_ops

    class Count(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.ops += func.namespace == "aten" and not func.is_view
            return func(*args, **(kwargs or {}))

    for amp, fused, dtype in STEP_VARIANTS:
        count = training_step_under(Count, BlockShape(1, 16, 32, 2, 64), amp, fused, dtype)
        assert count.ops == step_ops(amp, fused), (amp, fused, dtype)


def test_a_training_step_s_moved_bytes_are_its_eager_ops_out_of_place_traffic():
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils._pytree import tree_leaves

    from common.workloads.block import BlockShape, block_work

    flash = "_scaled_dot_product_flash_attention_for_cpu"
    kernels = {"mm", flash, f"{flash}_backward"}  # their FLOPs are the estimate's matmul part

    def nbytes(tree) -> int:
        return sum(t.numel() * t.element_size() for t in tree_leaves(tree) if isinstance(t, torch.Tensor))

    class Bytes(TorchDispatchMode):
        moved = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func._schema.name.split("::")[1]
            if func.namespace == "aten" and not func.is_view and name not in kernels and not name.endswith("_"):
                self.moved += nbytes((args, kwargs)) + nbytes(out)
            return out

    for shape in (BlockShape(1, 16, 32, 2, 64), BlockShape(2, 32, 64, 4, 256)):
        for amp, fused, dtype in STEP_VARIANTS:
            counted = training_step_under(Bytes, shape, amp, fused, dtype).moved
            work = block_work(shape, dtype.itemsize, dtype.itemsize, amp, fused)
            assert work.moved == pytest.approx(counted, rel=0.1), (shape, amp, fused, dtype)


def test_the_estimate_benchmark_leaves_torch_compile_s_own_time_out_of_the_run(monkeypatch):
    import importlib.util
    from types import SimpleNamespace

    path = ROOT / "benchmarks" / "estimate_accuracy.py"
    spec = importlib.util.spec_from_file_location("estimate_accuracy", path)
    bench = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, spec.name, bench)
    spec.loader.exec_module(bench)
    timings = {"_compile.compile_inner": [1.0, 2.0], "compile_fx.<locals>.bw_compiler": [0.5], "compile_file": [9.0]}
    monkeypatch.setitem(sys.modules, "torch._dynamo.utils", SimpleNamespace(compilation_time_metrics=timings))
    assert bench.compiling_s() == 3.5  # frames compiled, and a backward compiled at its first call; nothing nested


@pytest.mark.parametrize("step_s", [1.0, 0.2, 0.07, 0.003])
def test_bench_s_call_count_is_what_time_unprofiled_makes(monkeypatch, step_s):
    import functools

    from torch.utils import benchmark

    from common.harness.bench import time_unprofiled, timing_calls

    clock = {"now": 0.0, "calls": 0}

    def step():  # a step of step_s on a fake clock: torch's Timer reads it
        clock["now"] += step_s
        clock["calls"] += 1

    monkeypatch.setattr(benchmark, "Timer", functools.partial(benchmark.Timer, timer=lambda: clock["now"]))
    time_unprofiled(step, on_gpu=False)
    assert clock["calls"] == timing_calls(step_s)


def test_progress_names_the_reference_only_where_the_run_has_one_left_to_compute(tmp_path):
    from common.harness.recording import progress_what, say_estimate
    from common.workloads.attention import AttentionShape, attention_work
    from common.workloads.block import BlockShape, block_work

    r = cpu_run(tmp_path, compiled=False, warm=False)
    block = BlockShape(2, 16, 32, 2, 64)
    assert progress_what(say_estimate(r, block_work(block, 4, 4))) == "profiled steps"  # 06: rank 0's weights
    assert progress_what(say_estimate(r, block_work(block, 4, 4, reference_bytes=8), checked_first=True)) == (
        "profiled steps"  # 05: made before the profiled steps
    )
    said = say_estimate(r, attention_work(AttentionShape(1, 2, 16, 8), 2))
    assert progress_what(said) == "profiled steps, then the reference"


@pytest.mark.slow  # a fresh interpreter imports torch (and its compiler)
def test_a_compiled_run_announces_importing_the_compiler_before_torch_compile(tmp_path):
    code = (
        "import sys; from common.harness.runtime import make_parser, setup\n"
        "setup(make_parser(None).parse_args(['--compile', '--device', 'cpu', '--traces-dir', sys.argv[1]]), 'x.py')\n"
        "print('torch._dynamo' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, cwd=ROOT)
    lines = done.stdout.splitlines()
    assert "importing torch.compile's compiler (torch._dynamo, torch._inductor) ..." in lines, done.stdout
    assert lines[-1] == "True", done.stderr


def test_a_compiled_run_s_estimate_counts_its_compile_from_the_table(tmp_path):
    from common.harness.estimate import BUILD_S, GRAPH_S, TOOLCHAIN_S

    def rate(kind, dtype):
        return {"gemm": 100e9, "copy": 10e9}[kind]

    work = Work(1e12, 1e9)
    eager = estimate(cpu_run(tmp_path, compiled=False), work, 0, rate)
    forward = estimate(cpu_run(tmp_path), work, 0, rate, backward=False)
    both = estimate(cpu_run(tmp_path), work, 0, rate, backward=True)
    fresh = TOOLCHAIN_S  # the fixture's cache holds nothing yet
    assert forward.seconds - eager.seconds == pytest.approx(GRAPH_S[False] + BUILD_S[False, True] + fresh)
    assert forward.compile_s == pytest.approx(forward.seconds - eager.seconds)
    assert both.seconds - eager.seconds == pytest.approx(GRAPH_S[True] + BUILD_S[True, True] + fresh)
    assert estimate_lines(cpu_run(tmp_path), work, both)[1] == (
        "  and torch.compile's first call: about 15.8 s (g++ builds its kernels, the first in a fresh Inductor cache)"
    )


def test_a_compiled_run_too_small_to_measure_is_estimated_at_its_compile(tmp_path, monkeypatch):
    def no_measuring(*args):
        raise AssertionError("a small run measured a rate")

    monkeypatch.setattr(common.harness.estimate, "measured_rate", no_measuring)
    small = Work(1e6, 1e6)
    assert estimate(cpu_run(tmp_path, compiled=False), small, 0) is None
    guess = estimate(cpu_run(tmp_path), small, 0, backward=False)
    assert guess.seconds == guess.compile_s == pytest.approx(10.7) and guess.flops_per_s is None
    assert estimate_lines(cpu_run(tmp_path), small, guess) == [
        "estimate: about 10.7 s, nearly all of it torch.compile's first call (g++ builds its kernels, the first in a "
        "fresh Inductor cache)"
    ]


def test_compile_cost_follows_the_graph_s_kernels_and_inductor_s_cache():
    from common.harness.estimate import compile_cost

    def seconds(backward, kernels, ran_before, state):
        return compile_cost(backward, kernels, ran_before, state).seconds

    assert seconds(False, False, False, "fresh") == pytest.approx(1.5)  # 01, 02: GEMM and bias in the BLAS
    assert seconds(False, True, False, "fresh") == pytest.approx(10.7)  # 03_simple: the first C++ build here
    assert seconds(False, True, False, "built") == pytest.approx(2.4)
    assert seconds(True, False, False, "fresh") == pytest.approx(15.8)  # 05: a backward builds kernels anyway
    assert seconds(True, True, True, "graphs") == pytest.approx(1.2)  # run before: its graph from the cache
    assert seconds(True, True, True, "fresh") == pytest.approx(15.8)  # ... unless the cache was emptied since
    assert seconds(True, True, False, "graphs") == pytest.approx(7.5)  # another command's graphs only


def test_inductor_cache_state_reads_the_cache_folder(tmp_path):
    assert REAL_CACHE_STATE(tmp_path) == "fresh"
    (tmp_path / "ab").mkdir()
    (tmp_path / "ab" / "kernel.so").write_bytes(b"")
    assert REAL_CACHE_STATE(tmp_path) == "built"
    (tmp_path / "fxgraph" / "xy").mkdir(parents=True)
    assert REAL_CACHE_STATE(tmp_path) == "graphs"


def test_a_command_that_ran_before_counts_its_graph_from_the_cache(tmp_path, monkeypatch):
    monkeypatch.setattr(common.harness.estimate, "inductor_cache_state", lambda cache=None: "graphs")
    small = Work(1e6, 1e6)
    new = estimate(cpu_run(tmp_path), small, 0, backward=True, tag="1_16_bf16_cold_compiled")
    (tmp_path / "1_16_bf16_cold_compiled.json").write_text("{}")
    again = estimate(cpu_run(tmp_path), small, 0, backward=True, tag="1_16_bf16_cold_compiled")
    assert (new.compile_s, again.compile_s) == (pytest.approx(7.5), pytest.approx(1.2))
    assert "ran before" in again.compile_cost.why


def test_the_training_step_says_its_estimate_before_its_reference_and_checked_step(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(common.harness.estimate, "MEASURE_ABOVE_FLOPS", 0.0)  # estimated, however small
    monkeypatch.setattr(common.harness.estimate, "MEASURE_ABOVE_BYTES", 0.0)
    monkeypatch.setattr(common.harness.estimate, "SAY_ABOVE_S", 0.0)  # and said
    flags = ("--batch", "1", "--seq", "16", "--dim", "64", "--heads", "2", "--hidden", "128")
    assert run("05_training_step", tmp_path, *flags) == 0
    out = capsys.readouterr().out
    said = out.index("estimate: about ")
    assert said < out.index("the reference: ") < out.index("the first step, the one checked")
    assert out.count("estimate: about ") == 1
    calls = re.search(r"estimate: about [^:]*: (\d+) calls of .* and a reference, ", out)
    assert calls and int(calls[1]) == 5 + 1  # the profiled steps and the checked one; the reference counted


def test_a_phase_s_progress_line_counts_from_the_estimate_and_says_what_is_left(monkeypatch):
    from common.harness.estimate import Said, phase

    said = Said(None, 0.0, printed=True, reference_left=False)
    said = dataclasses.replace(said, estimate=common.harness.estimate.Estimate(27.5, 6, 1e9))
    monkeypatch.setattr(common.harness.estimate.time, "monotonic", lambda: 80.1)
    with redirect_stdout(io.StringIO()), phase("the reference: the block's forward", said) as ticker:
        line = ticker.line()
    left = "left: the reference: the block's forward, then the profiled steps"
    assert line == f"... 80.1 s, past the 27.5 s estimated; {left}"


@pytest.mark.slow  # a fresh interpreter imports torch (and its compiler)
def test_the_estimate_benchmark_notes_a_run_that_ends_its_process_with_end_process(tmp_path):
    """01-05 end with common.cli.end_process (os._exit): the benchmark's note must come out before it."""
    script = tmp_path / "ends.py"
    script.write_text("from common.cli import end_process\nprint('last line')\nend_process(3)\n")
    bench = ROOT / "benchmarks" / "estimate_accuracy.py"
    done = subprocess.run([sys.executable, str(bench), "--one", str(script)], capture_output=True, text=True, cwd=ROOT)
    mark = "estimate_accuracy:"  # the benchmark's MARK
    notes = [json.loads(line[len(mark) :]) for line in done.stderr.splitlines() if line.startswith(mark)]
    assert done.returncode == 3 and done.stdout == "last line\n" and notes and notes[0]["rc"] == 3, done.stderr


def test_a_gpu_run_s_compile_is_said_without_a_figure(capsys, monkeypatch):
    monkeypatch.setattr(common.harness.estimate, "_COMPILE_SAID", [])
    common.harness.estimate.announce_compile(backward=True, said=None)  # a GPU run has no estimate
    assert capsys.readouterr().out == (
        "torch.compile: the first call compiles the forward and backward: Triton builds and tunes its kernels ...\n"
    )


@pytest.mark.parametrize(("seconds", "phases"), [(0.5, False), (5.0, True), (30.0, True)])
def test_a_run_estimated_above_a_second_says_its_phases_printed_or_not(tmp_path, capsys, monkeypatch, seconds, phases):
    """05 --memory sat 7.9 s silent in its profiled steps: estimated at 6 s, under the 10 s that prints an
    estimate, it said none of its phases. From PHASES_ABOVE_S on, the steps say themselves as they start."""
    from common.harness.estimate import Estimate
    from common.harness.recording import recording, say_estimate

    monkeypatch.setattr(common.harness.recording, "estimate", lambda *a, **kw: Estimate(seconds, 5, 1e9))
    r = cpu_run(tmp_path, compiled=False, warm=False)
    said = say_estimate(r, Work(1e9, 1e6))
    assert (said.phases, said.printed) == (phases, seconds > 10)
    with torch.no_grad(), recording(r, "t", Work(1e9, 1e6), said=said):
        pass
    assert ("the profiled steps (5 calls of the step" in capsys.readouterr().out) == phases


@pytest.mark.parametrize("warm", [False, True])
def test_a_run_checks_its_estimate_against_its_own_first_call(tmp_path, capsys, monkeypatch, warm):
    """Issue 48 item 1: rates 1000x too slow (a descheduled measurement) estimate a 1024 matmul at half an hour a
    call; the run's first call (in the profiled loop, or the warm-up's) takes milliseconds, and the run says the
    corrected estimate, the progress lines count against it, and no cheaper command is offered."""
    monkeypatch.setattr(common.harness.estimate, "gemm_rate", lambda dtype, size=0: 1e6)
    flags = ["--size", "1024", "--dtype", "fp32", *(["--warmup"] if warm else [])]
    assert run("01_matmul_add", tmp_path, *flags) == 0
    lines = capsys.readouterr().out.splitlines()
    said = next(line for line in lines if line.startswith("estimate: about "))
    assert said.startswith("estimate: about ") and "at 0.001 GFLOP/s" in said
    checked = [line for line in lines if line.startswith("estimate checked: a call of the step took ")]
    assert len(checked) == 1 and "x the 2,150 s estimated: about " in checked[0], checked
    assert not any("instead" in line for line in lines)
    assert lines.index(checked[0]) < next(i for i, line in enumerate(lines) if line.startswith("profiled: "))


def test_bench_times_the_step_on_the_threads_the_profiled_steps_ran_on():
    """torch.utils.benchmark.Timer sets 1 thread while it times unless told otherwise: a 2-thread CPU step of
    04_c --backend flash read 324 ms sustained against 180 ms profiled. The bench must time it as it ran."""
    from common.harness.bench import time_unprofiled

    seen = []
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        time_unprofiled(lambda: seen.append(torch.get_num_threads()), on_gpu=False)
    finally:
        torch.set_num_threads(before)
    assert seen and set(seen) == {2}, sorted(set(seen))


def test_the_bench_inside_the_recording_has_one_progress_line_that_says_it(monkeypatch, tmp_path):
    """04_c calls finish() inside its `with recording(...)`: the recording's ticker went on saying 'left: writing the
    trace, then the reference' while --bench ran, beside a second ticker of its own. One ticker, saying the bench."""
    import threading

    from helpers import load_script

    import common.harness.recording

    seen = []

    def bench(step, on_gpu, grad=False):
        tickers = [t for t in threading.enumerate() if t.name == "progress" and t.is_alive()]
        seen.append([t._target.__self__.what for t in tickers])
        from common.harness.bench import UnprofiledTime

        return UnprofiledTime(1e-3, 5, None, 0)

    monkeypatch.setattr(common.harness.recording, "time_unprofiled", bench)
    script = load_script("04_c_sdpa_attention")
    script.main(["--backend", "flash", "--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8", "--bench",
                 "--traces-dir", str(tmp_path)])  # fmt: skip
    assert seen == [["--bench: the step timed without the profiler"]], seen


def test_the_estimate_benchmark_reads_two_ranks_notes_written_into_one_line():
    """`06 --bucket-cap-mb 5` under torchrun: rank 1's note began in the middle of rank 0's line on the shared stderr,
    and json.loads of that line stopped the whole benchmark (Extra data)."""
    bench = load_benchmark("estimate_accuracy")
    one, two = json.dumps({"rank": 0, "estimate_s": 1.5}), json.dumps({"rank": 1, "estimate_s": 2.0})
    stderr = f"warn\n{bench.MARK}{one}{bench.MARK}{two}\n{bench.MARK}{{cut off\n"
    assert bench.marked(stderr) == [{"rank": 0, "estimate_s": 1.5}, {"rank": 1, "estimate_s": 2.0}]
