"""What a run prints fits 120 columns: guess lines, the setup echo, notices, the printed table, error lines."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from helpers import FIXTURES, load_script, run, usage_error

from common.harness.guess import check_guess, format_verdicts
from common.reader.build import read_trace

WIDTH = 120
H200_TRACE = FIXTURES / "04_a_naive_attention" / "8_16_1024_64_bf16_cold_eager.json.gz"
SMALL = ["--batch", "1", "--heads", "2", "--seq", "16", "--head_dim", "8"]


def every_guess() -> list[tuple[str, tuple]]:
    """Each script's guess() with every argument it can take."""
    bools = (False, True)
    calls = [("01_matmul_add", args) for args in itertools.product(bools, bools)]
    for name in ("02_linear", "03_simple_mlp", "03_kernels_mlp", "04_a_naive_attention", "04_b_inplace_ops_attention"):
        calls += [(name, (compiled,)) for compiled in bools]
    backends = ("math", "flash", "efficient", "cudnn")
    calls += [("04_c_sdpa_attention", args) for args in itertools.product(backends, bools, bools, bools)]
    return [*calls, ("04_d_kernels_attention", ())]


@pytest.mark.parametrize("name, args", every_guess(), ids=lambda x: str(x))
def test_every_guess_line_fits(name, args):
    script = load_script(name)
    trace = read_trace(H200_TRACE)
    guesses = [script.guess(*args)] + ([script.first_guess()] if hasattr(script, "first_guess") else [])
    for guess in guesses:
        for line in format_verdicts(check_guess(trace, guess), trace, gpu_work=False):
            assert len(line) <= WIDTH, line


@pytest.mark.slow
def test_a_cpu_run_prints_nothing_wider_than_120_columns(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)  # paths print as traces/...: a long folder name makes any line long
    assert run("04_c_sdpa_attention", Path("traces"), *SMALL, "--wait", "0", "--warmup-steps", "0", "--bench") == 0
    out = capsys.readouterr().out
    assert "Self CPU time total" in out  # the profiler's table is printed, its name column shortened to fit
    assert max(map(len, out.splitlines())) <= WIDTH


@pytest.mark.parametrize(
    "name, flags",
    [
        ("01_matmul_add", ["--size", "200000"]),
        ("04_a_naive_attention", ["--seq", "100000"]),
        ("03_simple_mlp", ["--batch", "100000"]),
        ("04_c_sdpa_attention", [*SMALL, "--backend", "efficient"]),
        ("04_d_kernels_attention", SMALL),
        ("03_kernels_mlp", []),
        ("01_matmul_add", ["--device", "cuda:7"]),
        ("01_matmul_add", ["--size", "0"]),
    ],
)
def test_error_lines_fit(tmp_path, capsys, name, flags):
    assert len(usage_error(lambda: run(name, tmp_path, *flags), capsys)) <= WIDTH


def test_a_progress_line_past_a_long_estimate_fits(monkeypatch):
    """A run past its estimate says what is left, which for 05 is a long phase: wrapped, never wider than 120."""
    import common.harness.ticker as estimate  # where the progress line lives

    what = "the reference: the block's forward in higher precision, then the profiled steps, then the reference"
    ticker = estimate.Progress(what, 123456.0, 0.0, 10.0)
    monkeypatch.setattr(estimate.time, "monotonic", lambda: ticker.started + 987654.0)
    waits = iter([False, False, True])  # after_s, one tick, then stopped
    monkeypatch.setattr(ticker._stop, "wait", lambda seconds: next(waits))
    printed = []
    monkeypatch.setattr("builtins.print", lambda line, **kw: printed.append(line))
    ticker._tick()
    lines = "\n".join(printed).splitlines()
    assert len(lines) >= 2 and "past the" in lines[0] and all(len(line) <= WIDTH for line in lines)


def test_the_estimate_of_a_long_run_with_long_figures_fits(monkeypatch, capsys):
    """The estimate and its cheaper command, with the widest figures a run can give: wrapped within 120 columns."""
    import common.harness.estimate as estimate
    import common.harness.recording as recording
    from common.harness.runtime import Run
    from common.physics import Work

    run = Run(script="05_training_step", device=None, dtype=None, dtype_name="bf16", warm=True, compiled=True,
              planned_steps=5, traces_dir=Path("."), argv=("--dtype", "bf16", "--memory"), sizes=())  # fmt: skip
    guess = estimate.Estimate(123456789.0, 123456, 0.000123, cheaper=("--batch", "1", "--seq", "128", "--dtype",
                              "fp32", "--memory", "--per-step"), cheaper_seconds=98765.4, op_s=0.00123)  # fmt: skip
    monkeypatch.setattr(recording, "profiler_imports", lambda: None)
    monkeypatch.setattr(recording, "estimate", lambda *a, **k: guess)
    recording.say_estimate(run, Work(flops=1.23e15, bytes=1.0, ops=12345, reference=Work(1.0, 1.0)))
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 3 and lines[0].startswith("estimate:") and all(len(line) <= WIDTH for line in lines), lines


@pytest.mark.parametrize("what", ["weights, gradients, AdamW state, saved activations, reference", "x" * 200])
def test_a_memory_refusal_with_the_largest_figures_is_one_line_within_120(what):
    from common.harness.early import memory_refusal

    line = f"error: {memory_refusal(9.99e20, what, 9.99e20 / 2, on_gpu=True)}"
    assert len(line) <= WIDTH and "\n" not in line and "try smaller shapes" in line


def test_every_workload_s_memory_refusal_fits_with_the_largest_figures():
    import torch

    from common.harness.early import memory_refusal
    from common.harness.torchrun import Launch
    from common.workloads.block import AMP, BlockShape, block_memory
    from common.workloads.ddp import ddp_memory
    from common.workloads.matmul import linear_memory, matmul_add_memory

    shape = BlockShape(1, 16, 32, 2, 64)
    whats = [block_memory(shape, AMP, torch.bfloat16)[1], matmul_add_memory(1, 8, torch.float32)[1],
             linear_memory(1, 8, 8, torch.float32)[1],
             ddp_memory(shape, AMP, torch.bfloat16, Launch(0, 0, 8, 8), False)[1]]  # fmt: skip
    for what in whats:
        common_figures = f"error: {memory_refusal(1.12e12, what, 19.8e9, on_gpu=False)}"  # docs' 1,120 GB
        assert len(common_figures) <= WIDTH and (what in common_figures or len(what) > 40), common_figures
        largest = f"error: {memory_refusal(9.99e20, what, 9.99e20 / 2, on_gpu=False)}"  # the list makes way
        assert len(largest) <= WIDTH and "try smaller shapes" in largest, largest


def test_a_long_cheaper_command_is_split_into_lines_a_shell_joins_back():
    from common.cli import fit_command

    command = "uv run torchrun --standalone --nproc-per-node 1 06_ddp_training_step.py --traces-dir " + "/d" * 40
    lines = fit_command(f"{command} --batch 1").splitlines()
    assert len(lines) >= 2 and all(len(line) <= WIDTH for line in lines)
    assert all(line.endswith(" \\") for line in lines[:-1]) and not lines[-1].endswith("\\")
    assert " ".join(line.strip().removesuffix(" \\") for line in lines) == f"{command} --batch 1"
