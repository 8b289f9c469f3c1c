"""Theoretical occupancy against the CUDA occupancy calculator's arithmetic, on the H200's deviceProperties.

H200 (sm_90): 2048 threads = 64 warps, 65536 registers (4 partitions of 16384), 233472 bytes of shared
memory per SM, 32 blocks at most, 1 KB reserved per block; registers go to a warp in units of 256.
"""

from __future__ import annotations

import pytest
from helpers import FIXTURES

from common.analysis.tables import launch_cells
from common.reader.build import read_trace
from common.reader.occupancy import active_blocks, sm_limits, theoretical_occupancy

H200 = {"name": "NVIDIA H200", "computeMajor": 9, "computeMinor": 0, "maxThreadsPerBlock": 1024,
        "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536, "warpSize": 32, "regsPerMultiprocessor": 65536,
        "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}  # fmt: skip
SM = sm_limits(H200)


def test_flash_at_255_registers_128_threads_48_kb_is_two_blocks_12_5_percent():
    # a warp: 255 * 32 = 8160 -> 8192 registers; a partition (16384) holds 2 warps, the SM 8: 2 blocks of 4 warps.
    # shared: 49152 + 1024 = 50176 bytes a block, 4 blocks; warps: 64 / 4 = 16 blocks. 2 blocks * 4 warps / 64.
    assert active_blocks(128, 255, 49152, SM) == 2
    assert theoretical_occupancy(128, 255, 49152, SM) == 12.5


def test_cudnn_168_registers_384_threads_131_kb_is_one_block_18_75_percent():
    # a warp: 168 * 32 = 5376 registers (21 units); a partition holds 3 warps, the SM 12: one block of 12 warps.
    # shared: 134144 + 1024 = 135168 bytes, one block. 12 / 64 warps.
    assert active_blocks(384, 168, 134144, SM) == 1
    assert theoretical_occupancy(384, 168, 134144, SM) == 18.75


def test_nvjet_168_registers_384_threads_208_kb_is_one_block_18_75_percent():
    assert active_blocks(384, 168, 213188, SM) == 1  # 213188 + 1024 -> 214272 bytes: one block
    assert theoretical_occupancy(384, 168, 213188, SM) == 18.75


def test_a_pointwise_kernel_34_registers_128_threads_is_75_percent():
    # a warp: 34 * 32 = 1088 -> 1280 registers; a partition holds 12 warps, the SM 48: 12 blocks of 4 warps.
    assert active_blocks(128, 34, 0, SM) == 12
    assert theoretical_occupancy(128, 34, 0, SM) == 75.0


def test_few_registers_reach_the_warp_limit_100_percent():
    assert theoretical_occupancy(128, 16, 0, SM) == 100.0  # 16 blocks of 4 warps: all 64


def test_a_block_that_does_not_fit_has_no_occupancy():
    assert theoretical_occupancy(1024, 255, 0, SM) is None  # 32 warps * 8192 registers > 65536
    assert theoretical_occupancy(128, 32, 300_000, SM) is None  # more shared memory than the SM has


@pytest.mark.parametrize(
    "props", [{**H200, "warpSize": 64, "name": "AMD Instinct MI300X"}, {**H200, "computeMajor": 99}, {}]
)
def test_an_amd_or_unknown_gpu_has_no_limits(props):
    assert sm_limits(props) is None


@pytest.mark.parametrize(
    ("script", "tag", "theoretical"),
    [
        ("04_c_sdpa_attention", "8_16_1024_64_flash_bf16_cold_eager", 12.5),
        ("04_c_sdpa_attention", "8_16_1024_64_cudnn_bf16_cold_eager", 18.75),
        ("01_matmul_add", "4096_bf16_warm_eager", 18.75),  # the nvjet GEMM
    ],
)
def test_the_fixtures_first_kernel_gets_its_theoretical_occupancy(script, tag, theoretical):
    trace = read_trace(FIXTURES / script / f"{tag}.json.gz")
    assert trace.steps[0].kernels[0].theoretical_occupancy(trace.sm) == theoretical


def test_a_kernel_at_0_percent_prints_a_dash_and_its_theoretical_occupancy():
    trace = read_trace(FIXTURES / "04_c_sdpa_attention" / "8_16_1024_64_cudnn_bf16_cold_eager.json.gz")
    assert launch_cells(trace.steps[0].kernels[0], trace.sm)[-2:] == ["—", "18.8%"]


def test_no_kernel_of_any_fixture_prints_0_percent():
    for path in FIXTURES.rglob("*.json.gz"):
        trace = read_trace(path)
        cells = [launch_cells(k, trace.sm)[-2:] for s in trace.steps for k in s.kernels]
        assert not [c for c in cells if "0%" in c], path


def test_a_compute_capability_that_is_no_number_gives_no_limits():
    """The fuzz test's case: deviceProperties' computeMajor set to [] made a dict key of a list (TypeError)."""
    props = {"warpSize": 32, "computeMajor": [], "computeMinor": {}, "maxThreadsPerMultiprocessor": 2048}
    assert sm_limits(props) is None
