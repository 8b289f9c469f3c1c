"""Profile one nn.Linear(in_dim, out_dim, bias=True) forward (Part 2: from nn.Linear to a fused MLP).

Usage:
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64 --compile

Writes traces/02_linear/<batch>_<in_dim>_<out_dim>_<dtype>_<cold|warm>_<eager|compiled>.json and .txt.
"""

from typing import NamedTuple

from common.harness.early import importing_torch
from common.harness.flags import add_shape_flags, make_parser


class LinearShape(NamedTuple):  # a flag per field (runtime.add_shape_flags)
    batch: int = 1024
    in_dim: int = 32
    out_dim: int = 64
    HELP = {"batch": "rows of x", "in_dim": "input features", "out_dim": "output features"}


# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
add_shape_flags(parser, "linear shape", LinearShape)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_memcpy, expect_op
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.matmul import linear_memory, linear_work


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    if compiled:
        return [
            expect_op("aten::addmm", 1, "the same addmm, called directly with baked-in strides"),
            expect_op("aten::t", 0, "the view bookkeeping goes"),
            expect_kernels("gemm", 1, "the kernel stays"),
            expect_kernels("pointwise", 0, "bias still in the GEMM epilogue"),
        ]
    return [
        expect_op("aten::linear", 1, "nn.Linear -> F.linear -> aten::linear"),
        expect_op("aten::t", 1, "weight transposed as a view (no kernel)"),
        expect_op("aten::addmm", 1, "bias given, so addmm(bias, x, w.t())"),
        expect_op("aten::add", 0, "no separate bias add"),
        expect_kernels("gemm", 1, "one GEMM with the bias in its epilogue"),
        expect_kernels("pointwise", 0, "no add kernel"),
        expect_memcpy(0, "nothing copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    work = linear_work(args.batch, args.in_dim, args.out_dim, run.dtype)
    fit_machine(run, *linear_memory(args.batch, args.in_dim, args.out_dim, run.dtype), work.flops)

    # bias=True reproduces Part 1's matmul + add: y = x @ w.T + b
    linear_layer = nn.Linear(args.in_dim, args.out_dim, bias=True).to(run.device, run.dtype)
    x = torch.randn(args.batch, args.in_dim, device=run.device, dtype=run.dtype)  # [batch, in_dim]
    layer = torch.compile(linear_layer) if args.compile else linear_layer

    with torch.no_grad(), recording(run, run.tag(*shape_of(args, LinearShape)), work) as rec:
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: layer(x))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("linear_fwd"):
                    y = layer(x)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        w, b, ref = linear_layer.weight, linear_layer.bias, run.reference_dtype
        expected = x.to(ref) @ w.to(ref).T + b.to(ref)
    return finish(rec, guess(args.compile), y, expected, step=lambda: layer(x), what="nn.Linear")


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
