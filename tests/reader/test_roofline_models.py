"""Each op's FLOPs and bytes from record_shapes (common.reader.roofline): the FLOPs checked against torch's own
FlopCounterMode on the shapes a real CPU profile writes, the bytes against the tensors an op reads and writes, and
no figure where the shapes cannot give one."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.profiler import ProfilerActivity, profile
from torch.utils.flop_counter import FlopCounterMode

from common.reader.build import read_trace
from common.reader.roofline import SHAPED_OPS, ShapedOp, op_work

BF16 = "c10::BFloat16"


def profiled_ops(tmp_path, work) -> dict[str, ShapedOp]:
    """Op name -> the ShapedOp the reader keeps of `work()` run under a CPU profile with record_shapes (the last
    of a name)."""
    with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
        work()
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    return {op.name: op for op in read_trace(path).shapes.values()}


def counted(work) -> dict[str, int]:
    """torch's FLOPs of `work()`, per aten op ("convolution", "convolution_backward", "mm", ...)."""
    with FlopCounterMode(display=False) as counter:
        work()
    return {str(op).split(".")[1]: n for op, n in counter.get_flop_counts()["Global"].items()}


@pytest.mark.parametrize(
    ("stride", "padding", "dilation", "groups"),
    [(1, 1, 1, 1), (2, 0, 1, 1), (2, 3, 2, 2), (1, 1, 1, 4)],
)
def test_convolution_flops_match_flop_counter(tmp_path, stride, padding, dilation, groups):
    x, w = torch.randn(2, 8, 17, 13), torch.randn(12, 8 // groups, 3, 5)

    def conv():
        torch.nn.functional.conv2d(x, w, stride=stride, padding=padding, dilation=dilation, groups=groups)

    ops = profiled_ops(tmp_path, conv)
    assert ops["aten::convolution"].flops == counted(conv)["convolution"]
    assert ops["aten::_convolution"].flops == counted(conv)["convolution"]


@pytest.mark.parametrize("weight_grad", [True, False])
def test_convolution_backward_flops_match_flop_counter(tmp_path, weight_grad):
    x = torch.randn(2, 4, 11, 11, requires_grad=True)
    w = torch.randn(6, 4, 3, 3, requires_grad=weight_grad)

    def step():
        torch.nn.functional.conv2d(x, w, stride=2, padding=1).sum().backward()

    ops = profiled_ops(tmp_path, step)
    assert ops["aten::convolution_backward"].flops == counted(step)["convolution_backward"]


def test_a_grouped_convolutions_backward_is_twice_its_forward(tmp_path):
    """Each gradient is a convolution of the forward's FLOPs, the weight's too: FlopCounterMode counts its every
    input channel against every output channel (three times the forward's here, where each group sees half)."""
    x = torch.randn(2, 4, 11, 11, requires_grad=True)
    w = torch.randn(6, 2, 3, 3, requires_grad=True)

    def step():
        torch.nn.functional.conv2d(x, w, stride=2, padding=1, groups=2).sum().backward()

    ops = profiled_ops(tmp_path, step)
    assert (
        ops["aten::convolution_backward"].flops
        == 2 * ops["aten::convolution"].flops
        == 2 * counted(step)["convolution"]
    )


@pytest.mark.parametrize(
    ("name", "work"),
    [
        ("mm", lambda: torch.randn(33, 17) @ torch.randn(17, 9)),
        ("addmm", lambda: torch.addmm(torch.randn(9), torch.randn(33, 17), torch.randn(17, 9))),
        ("bmm", lambda: torch.bmm(torch.randn(3, 33, 17), torch.randn(3, 17, 9))),
        ("baddbmm", lambda: torch.baddbmm(torch.randn(3, 33, 9), torch.randn(3, 33, 17), torch.randn(3, 17, 9))),
    ],
)
def test_gemm_flops_match_flop_counter(tmp_path, name, work):
    assert profiled_ops(tmp_path, work)[f"aten::{name}"].flops == counted(work)[name]


def test_a_gemm_moves_its_three_matrices():
    op = ShapedOp("aten::mm", [[64, 32], [32, 16]], [BF16, BF16], ["", ""])
    assert op.bytes == 2 * (64 * 32 + 32 * 16 + 64 * 16)
    assert op.intensity == 2 * 64 * 32 * 16 / op.bytes


def test_an_fp8_gemm_writes_the_dtype_out_dtype_names():
    types = ["c10::Float8_e4m3fn"] * 2 + ["float"] * 2 + ["", "", "Scalar", "Scalar"]
    op = ShapedOp("aten::_scaled_mm", [[64, 32], [32, 16], [], [], [], [], [], []], types, [""] * 6 + ["15", "False"])
    assert op.bytes == 64 * 32 + 32 * 16 + 2 * 4 + 2 * 64 * 16  # fp8 inputs, two fp32 scales, a bf16 output


def test_attention_moves_q_k_v_and_its_output():
    q = [2, 4, 128, 64]
    op = ShapedOp("aten::_scaled_dot_product_flash_attention", [q, q, q, [], [], []], [BF16] * 3 + ["Scalar"] * 3, [])
    assert op.bytes == 2 * 4 * (2 * 4 * 128 * 64)


def test_a_layer_norm_reads_its_input_and_weights_and_writes_its_output(tmp_path):
    x, w, b = torch.randn(8, 16), torch.ones(16), torch.zeros(16)
    op = profiled_ops(tmp_path, lambda: torch.nn.functional.layer_norm(x, (16,), w, b))["aten::native_layer_norm"]
    assert op.bytes == 4 * (2 * 8 * 16 + 16 + 16)
    assert op.flops == 7 * 8 * 16


def test_a_softmax_asked_for_fp32_of_bf16_writes_fp32():
    op = ShapedOp("aten::_softmax", [[8, 16], [], []], [BF16, "Scalar", "Scalar"], ["", "-1", "True"])
    assert op.bytes == 8 * 16 * (2 + 4)


def test_an_elementwise_op_writes_its_inputs_broadcast_shape():
    op = ShapedOp("aten::add", [[32, 128, 56, 56], [1, 128, 1, 1], []], [BF16, BF16, "Scalar"], ["", "", "1"])
    n = 32 * 128 * 56 * 56
    assert op.work == (n, 2 * (n + 128 + n))


def test_an_in_place_op_writes_its_first_input():
    op = ShapedOp("aten::add_", [[4, 8], [8], []], [BF16, BF16, "Scalar"], ["", "", "1"])
    assert op.work == (32, 2 * (32 + 8 + 32))


def test_a_copy_reads_its_source_and_writes_its_destination():
    op = ShapedOp("aten::copy_", [[4, 8], [4, 8], []], ["float", BF16, "Scalar"], ["", "", "False"])
    assert op.work == (0, 32 * (4 + 2))


@pytest.mark.parametrize(
    ("dims", "types", "concrete", "written"),
    [
        ([[4, 6, 5], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[]", "False", ""], 1),
        ([[4, 6, 5], []], ["float", ""], ["", ""], 1),
        ([[4, 6, 5], [], [], []], ["float", "ScalarList", "Scalar", ""], ["", "[0, -1]", "False", ""], 6),
    ],
    ids=["dim []", "no dim", "dims 0 and -1"],
)
def test_a_reduction_writes_the_dims_it_keeps(dims, types, concrete, written):
    assert ShapedOp("aten::sum", dims, types, concrete).work == (120, 4 * (120 + written))


def test_an_embedding_moves_the_rows_it_gathers_and_its_indices(tmp_path):
    table, ids = torch.randn(10, 8), torch.tensor([[1, 2], [3, 4]])
    op = profiled_ops(tmp_path, lambda: torch.nn.functional.embedding(ids, table))["aten::embedding"]
    assert op.work == (0, 2 * 4 * 8 * 4 + 4 * 8)


def test_every_modelled_op_is_kept_by_the_reader():
    assert {"aten::convolution_backward", "aten::native_layer_norm", "aten::_softmax", "aten::gelu", "aten::sum",
            "aten::embedding_dense_backward", "aten::mm"} <= SHAPED_OPS  # fmt: skip


@pytest.mark.parametrize(
    "op",
    [
        ShapedOp("aten::add", [[4, 8], [4, 8]], ["c10::Float8_e8m0fnu", BF16], ["", ""]),  # a dtype not in the table
        ShapedOp("aten::mm", [[4, 8], [8, 2]], [], []),  # no Input type
    ],
    ids=["unknown dtype", "no types"],
)
def test_an_unknown_element_size_gives_no_bytes(op):
    assert op.flops is not None and op.bytes is None and op.intensity is None


def test_a_convolution_without_its_stride_gives_no_figure():
    types = [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    op = ShapedOp("aten::convolution", [[2, 4, 9, 9], [6, 4, 3, 3], *[[]] * 7], types, [""] * 9)
    assert op.work == (None, None)


def test_a_transposed_convolution_is_not_modelled():
    types = [BF16, BF16, "", "ScalarList", "ScalarList", "ScalarList", "Scalar", "ScalarList", "Scalar"]
    concrete = ["", "", "", "[1, 1]", "[0, 0]", "[1, 1]", "True", "[0, 0]", "1"]
    assert op_work(ShapedOp("aten::convolution", [[2, 4, 9, 9], [4, 6, 3, 3], *[[]] * 7], types, concrete)) == (
        None,
        None,
    )


@pytest.mark.parametrize(
    "op",
    [
        ShapedOp("aten::add", [[4, -1], [4, 8]], [BF16, BF16], ["", ""]),
        ShapedOp(
            "aten::native_layer_norm", [[4, 8], [], [-8], [8], []], [BF16, "ScalarList", BF16, BF16, "Scalar"], []
        ),
    ],
    ids=["elementwise", "a norm's weight"],
)
def test_a_tensor_of_a_negative_dim_gives_no_bytes(op):
    assert op.bytes is None


def test_dims_no_float_holds_give_no_figure():
    huge = [10**200, 10**200]
    assert ShapedOp("aten::add", [huge, huge], [BF16, BF16], ["", ""]).work == (None, None)


def test_a_sum_of_a_zero_dim_tensor_over_dim_0_writes_one_element():
    assert ShapedOp("aten::sum", [[], []], ["float", "ScalarList"], ["", "[0]"]).work == (1, 8)


def test_an_op_without_shapes_gives_no_figure():
    assert ShapedOp("aten::native_layer_norm", [], [], []).work == (None, None)


ODD_DIMS = st.lists(
    st.one_of(
        st.lists(st.one_of(st.integers(-1, 8), st.sampled_from([0, 2**40, 10**30, 10**400])), max_size=4),
        st.sampled_from([None, "x", 3, [True], [1.5]]),
    ),
    max_size=11,
)
ODD_TYPES = st.one_of(st.lists(st.sampled_from([BF16, "float", "long int", "Scalar", "ScalarList", "", "weird", None,
                                                 7]), max_size=11), st.sampled_from([None, 3, "float"]))  # fmt: skip
ODD_CONCRETE = st.one_of(
    st.lists(st.sampled_from(["", "[1, 1]", "[2]", "[0, 0]", "[-3]", "[]", "True", "False", "15", "-1", "0", "x",
                              "[True, x]", "1e400", "[10000000000000000000000]", None, 5]), max_size=11),
    st.sampled_from([None, 3]),
)  # fmt: skip


@settings(max_examples=1000, deadline=None)
@given(name=st.sampled_from(sorted(SHAPED_OPS)), dims=ODD_DIMS, types=ODD_TYPES, concrete=ODD_CONCRETE)
def test_any_shapes_give_a_finite_figure_of_zero_or_more_or_none(name, dims, types, concrete):
    for figure in ShapedOp(name, dims, types, concrete).work:
        assert figure is None or (math.isfinite(figure) and figure >= 0)


@pytest.mark.parametrize(
    ("name", "call"),
    [
        ("aten::mm", lambda a, b, out: torch.mm(a, b, out=out)),
        ("aten::addmm", lambda a, b, out: torch.addmm(out, a, b, out=out)),  # in place through out=: out read too
        ("aten::mul", lambda a, b, out: torch.mul(a, b, out=out)),
        ("aten::sum", lambda a, b, out: torch.sum(torch.cat([a, a], 1), dim=1, keepdim=True, out=out[:, :1])),
    ],
)
def test_an_out_tensor_is_the_output_written_once_not_read_too(tmp_path, name, call):
    """Inductor's mm and addmm, mse_loss's mean and DDP's mul write into an `out=` tensor, the last input
    record_shapes lists: counted as an input read and as the output written, their bytes were up to 1.8x."""
    a, b, out = (torch.randn(64, 64) for _ in range(3))
    functional = {"aten::mm": lambda: torch.mm(a, b), "aten::addmm": lambda: torch.addmm(out, a, b),
                  "aten::mul": lambda: torch.mul(a, b),
                  "aten::sum": lambda: torch.sum(torch.cat([a, a], 1), dim=1, keepdim=True)}  # fmt: skip
    with_out = profiled_ops(tmp_path, lambda: call(a, b, out))[name]
    (tmp_path / "plain").mkdir()
    plain = profiled_ops(tmp_path / "plain", functional[name])[name]
    assert len(with_out.dims) == len(plain.dims) + 1 and with_out.bytes == plain.bytes > 0
    assert with_out.flops == plain.flops


def test_a_division_s_rounding_mode_is_no_out_tensor():
    op = ShapedOp("aten::div", [[8, 8], [8, 8], []], ["float", "float", "string"], ["", "", "'floor'"])
    assert op.bytes == 3 * 8 * 8 * 4
