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
