"""The datasheet peaks a device's name is matched to (common.physics.find_peak): by its whole words, the most
specific entry first, never an entry whose name is only a part of a word of the device's."""

from __future__ import annotations

import pytest

from common.physics import find_peak


@pytest.mark.parametrize(
    ("device", "entry", "gbps"),
    [
        ("NVIDIA GH200 480GB", "GH200", 4000.0),
        ("NVIDIA GH200 144G HBM3e", "GH200 HBM3e", 4900.0),
        ("NVIDIA H200", "H200", 4800.0),
        ("NVIDIA H200 NVL", "H200 NVL", 4800.0),
        ("NVIDIA H100 80GB HBM3", "H100", 3350.0),
        ("NVIDIA H100 PCIe", "H100 PCIe", 2000.0),
        ("NVIDIA H100 NVL", "H100 NVL", 3900.0),
        ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB", 2039.0),
        ("NVIDIA A100 80GB PCIe", "A100 80GB PCIe", 1935.0),
        ("NVIDIA A100-PCIE-40GB", "A100", 1555.0),
        ("NVIDIA L40S", "L40S", 864.0),
        ("NVIDIA A10G", "A10G", 600.0),
        ("Tesla T4", "T4", 320.0),
    ],
)
def test_a_device_gets_the_peaks_of_its_own_datasheet(device, entry, gbps):
    peak = find_peak(device)
    assert peak is not None and (peak.name, peak.gbps) == (entry, gbps)


def test_a_gh200_has_the_h100_sxm_compute_and_its_own_memory_not_the_h200s():
    gh200, h100, h200 = find_peak("NVIDIA GH200 480GB"), find_peak("NVIDIA H100 80GB HBM3"), find_peak("NVIDIA H200")
    assert (gh200.tflops_16bit, gh200.tflops_fp32, gh200.tflops_tf32, gh200.tflops_fp8) == (
        h100.tflops_16bit, h100.tflops_fp32, h100.tflops_tf32, h100.tflops_fp8,
    )  # fmt: skip
    assert gh200.gbps == 4000.0 != h200.gbps


@pytest.mark.parametrize("device", ["NVIDIA L40", "NVIDIA H800", "NVIDIA GH100", "NVIDIA A1000"])
def test_a_gpu_whose_name_only_holds_a_known_ones_is_unknown(device):
    """ "L40" holds "L4", "A1000" holds "A100": neither is that GPU, and a guessed peak is worse than none."""
    assert find_peak(device) is None
