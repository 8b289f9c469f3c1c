"""03_simple_mlp.py and 03_kernels_mlp.py: end to end on the CPU, the reference, the Liger layer's two shapes."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers import CPU_DTYPE, load_script, requires_cuda, run, trace_names, usage_error
from torch import nn

from common.workloads.mlp import MLPShape, geglu_reference, liger_geglu, mlp_memory, mlp_work

TINY = ["--batch", "2", "--seq", "8", "--dim", "32", "--hidden", "64"]
TINY_TAG = "2_8_32_64"


def test_simple_mlp_eager_trace_shows_three_linears_gelu_and_mul(tmp_path, capsys):
    assert run("03_simple_mlp", tmp_path, *TINY) == 0
    trace = tmp_path / "03_simple_mlp" / f"{TINY_TAG}_{CPU_DTYPE}_cold_eager.json"
    names = trace_names(trace)
    assert {"ProfilerStep#2", "ProfilerStep#3", "ProfilerStep#4", "mlp_fwd"} <= names
    assert {"aten::linear", "aten::gelu", "aten::mul", "aten::mm"} <= names
    table = trace.with_suffix(".txt").read_text()
    assert "aten::linear" in table and "aten::gelu" in table
    out = capsys.readouterr().out
    assert "SimpleGeGLUMLP matches the reference" in out
    assert "all 4 checked guesses match the trace" in out


def test_simple_mlp_compiled_trace_shows_bare_mm_and_no_linear(tmp_path, capsys):
    assert run("03_simple_mlp", tmp_path, *TINY, "--compile") == 0
    trace = tmp_path / "03_simple_mlp" / f"{TINY_TAG}_{CPU_DTYPE}_cold_compiled.json"
    names = trace_names(trace)
    assert {"ProfilerStep#2", "ProfilerStep#4", "mlp_fwd", "aten::mm"} <= names
    assert not {"aten::linear", "aten::gelu"} & names
    assert "aten::mm" in trace.with_suffix(".txt").read_text()
    assert "all 3 checked guesses match the trace" in capsys.readouterr().out


def test_simple_mlp_matches_the_tanh_gelu_formula_in_fp32():
    torch.manual_seed(0)
    mlp = load_script("03_simple_mlp").SimpleGeGLUMLP(32, 64)
    x = torch.randn(2, 8, 32)
    g, u = x @ mlp.gate_proj.weight.T, x @ mlp.up_proj.weight.T
    gelu = 0.5 * g * (1 + torch.tanh(math.sqrt(2 / math.pi) * (g + 0.044715 * g**3)))
    expected = (gelu * u) @ mlp.down_proj.weight.T
    with torch.no_grad():
        torch.testing.assert_close(mlp(x), expected, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(mlp.to(torch.bfloat16)(x.bfloat16()).float(), expected, rtol=3e-2, atol=3e-2)


def test_the_mlp_physics_reads_the_shapes_fields_by_name():
    shape = MLPShape(hidden=7, dim=5, seq=3, batch=2)  # every field differs: a mix-up shows
    m, d, h = 2 * 3, 5, 7
    work = mlp_work(shape, element_size=2)
    assert work.flops == 3 * 2 * m * d * h + 2 * m * h and work.bytes == (2 * m * d + 3 * d * h) * 2
    need, _ = mlp_memory(shape, torch.bfloat16)
    assert need == 3 * d * h * (2 + 4) + (2 * m * d + 3 * m * h) * (2 + 4)


class ForwardOnlyGeGLU(nn.Module):
    """Shaped like newer Hub builds of LigerGEGLUMLP: no __init__, a forward that reads gate/up/down_proj."""

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


def test_a_forward_only_liger_layer_gets_the_simple_mlps_weights_from_the_same_seed():
    torch.manual_seed(0)
    simple = load_script("03_simple_mlp").SimpleGeGLUMLP(32, 64)
    torch.manual_seed(0)
    layer = liger_geglu(ForwardOnlyGeGLU, 32, 64, torch.device("cpu"), torch.float32)
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        torch.testing.assert_close(layer(x), simple(x))


def test_the_geglu_reference_is_the_simple_mlp_in_higher_precision():
    torch.manual_seed(0)
    simple = load_script("03_simple_mlp").SimpleGeGLUMLP(32, 64).to(torch.bfloat16)
    x = torch.randn(2, 8, 32, dtype=torch.bfloat16)
    expected = geglu_reference(simple, x, torch.bfloat16)
    assert expected.dtype == torch.float32
    with torch.no_grad():
        torch.testing.assert_close(simple(x).float(), expected, rtol=3e-2, atol=3e-2)


def test_a_config_built_liger_layer_from_pypi_holds_the_simple_mlps_weights():
    LigerGEGLUMLP = pytest.importorskip("liger_kernel.transformers").LigerGEGLUMLP
    torch.manual_seed(0)
    simple = load_script("03_simple_mlp").SimpleGeGLUMLP(32, 64).to(torch.bfloat16)
    torch.manual_seed(0)
    layer = liger_geglu(LigerGEGLUMLP, 32, 64, torch.device("cpu"), torch.bfloat16)
    assert isinstance(layer, LigerGEGLUMLP)
    for name, weight in simple.state_dict().items():
        assert torch.equal(layer.state_dict()[name], weight)
    assert layer.gate_proj.weight.dtype == torch.bfloat16


def test_kernels_mlp_on_cpu_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    err = usage_error(lambda: run("03_kernels_mlp", tmp_path, *TINY, "--device", "cpu"), capsys)
    assert "needs a CUDA GPU" in err
    assert list(tmp_path.iterdir()) == []  # no file, and no empty traces/03_kernels_mlp folder either


@pytest.mark.gpu
@requires_cuda
def test_kernels_mlp_from_pypi_on_gpu_traces_liger_geglu_kernel(tmp_path):
    pytest.importorskip("liger_kernel")
    assert run("03_kernels_mlp", tmp_path, *TINY, "--source", "pypi", "--device", "cuda") == 0
    names = trace_names(tmp_path / "03_kernels_mlp" / f"{TINY_TAG}_pypi_bf16_cold_eager.json")
    assert any("geglu" in str(n) for n in names)
    assert "aten::gelu" not in names
