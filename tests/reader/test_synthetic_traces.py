"""benchmarks/make_trace.py: large traces made from a real one read back as that step, repeated."""

from __future__ import annotations

import subprocess
import sys

from helpers import FIXTURES, ROOT

from common.reader.build import read_trace


def test_a_repeated_h200_step_reads_back_with_the_same_kernels_per_step(tmp_path):
    source = FIXTURES / "04_a_naive_attention" / "8_16_1024_64_bf16_cold_eager.json.gz"
    out = tmp_path / "big.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "make_trace.py"), "--source", str(source), "--steps", "200",
         "--out", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    original, big = read_trace(source).steps[0], read_trace(out)
    assert len(big.steps) == 200
    for step in big.steps:
        assert [k.name for k in step.gpu] == [k.name for k in original.gpu]
        assert abs(step.gpu_busy_us - original.gpu_busy_us) < 1e-6
        assert step.cpu_ops == original.cpu_ops
