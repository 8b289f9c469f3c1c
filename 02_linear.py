"""Profile one nn.Linear(in_dim, out_dim, bias=True) forward (Part 2: from nn.Linear to a fused MLP).

Usage:
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64 --compile

Writes traces/02_linear/<batch>_<in_dim>_<out_dim>_<dtype>_<cold|warm>_<eager|compiled>.json and .txt.
"""

import torch
from torch import nn

from common import (Expect, Work, check_output, cli, cpu_op, kernels, make_parser, memcpy, positive_int, profile_steps,
                    reference_dtype, report, setup)


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    if compiled:
        return [
            cpu_op("aten::addmm", 1, "the same addmm, called directly with baked-in strides"),
            cpu_op("aten::t", 0, "the view bookkeeping goes"),
            kernels("gemm", 1, "the kernel stays"),
            kernels("pointwise", 0, "bias still in the GEMM epilogue"),
        ]
    return [
        cpu_op("aten::linear", 1, "nn.Linear -> F.linear -> aten::linear"),
        cpu_op("aten::t", 1, "weight transposed as a view (no kernel)"),
        cpu_op("aten::addmm", 1, "bias given, so addmm(bias, x, w.t())"),
        cpu_op("aten::add", 0, "no separate bias add"),
        kernels("gemm", 1, "one GEMM with the bias in its epilogue"),
        kernels("pointwise", 0, "no add kernel"),
        memcpy(0, "nothing copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    parser.add_argument("--batch", type=positive_int, default=1024, help="rows of x (default: 1024)")
    parser.add_argument("--in_dim", type=positive_int, default=32, help="input features (default: 32)")
    parser.add_argument("--out_dim", type=positive_int, default=64, help="output features (default: 64)")
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    # bias=True reproduces Part 1's matmul + add: y = x @ w.T + b
    linear_layer = nn.Linear(args.in_dim, args.out_dim, bias=True).to(run.device, run.dtype)
    x = torch.randn(args.batch, args.in_dim, device=run.device, dtype=run.dtype)  # [batch, in_dim]
    layer = torch.compile(linear_layer) if run.compiled else linear_layer

    m, k, n = args.batch, args.in_dim, args.out_dim
    work = Work(flops=2 * m * k * n + m * n, bytes=(m * k + k * n + n + m * n) * x.element_size())
    with torch.no_grad():
        result = profile_steps(lambda: layer(x), "linear_fwd", run, run.tag(m, k, n), work)
        w, b = linear_layer.weight, linear_layer.bias
        ref = reference_dtype(run.dtype)
        check_output(result, x.to(ref) @ w.to(ref).T + b.to(ref), run.dtype, "nn.Linear")
    return report(result, run, guess(run.compiled))


if __name__ == "__main__":
    raise SystemExit(main())
