"""Profile one nn.Linear(in_dim, out_dim, bias=True) forward (Part 2: from nn.Linear to a fused MLP).

Usage:
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64
    uv run 02_linear.py --batch 1024 --in_dim 32 --out_dim 64 --compile

Writes traces/02_linear/<batch>_<in_dim>_<out_dim>_<dtype>_<cold|warm>_<eager|compiled>.json and .txt.
"""

import torch
from torch import nn
from torch.profiler import profile, record_function

from common.bench import bench
from common.checks import check_output, reference_dtype
from common.cli import cli
from common.export import TraceFiles
from common.guess import Expect, check_guess, expect_kernels, expect_memcpy, expect_op
from common.physics import Work
from common.profiling import activities, sync, warm_up
from common.report import exit_code, print_bench, print_files, print_report
from common.runtime import add_shape_flags, fit_machine, make_parser, setup, shape_of
from common.trace import read_trace

SHAPE = {"batch": (1024, "rows of x"), "in_dim": (32, "input features"), "out_dim": (64, "output features")}


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
    parser = make_parser(__doc__)
    add_shape_flags(parser, "linear shape", SHAPE)
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    m, k, n = args.batch, args.in_dim, args.out_dim
    e, r = run.dtype.itemsize, reference_dtype(run.dtype).itemsize
    work = Work(flops=2 * m * k * n + m * n, bytes=(m * k + k * n + n + m * n) * e)
    # before allocating: refuse shapes that cannot fit; a tiny CPU step runs on one thread
    fit_machine(
        run, (m * k + k * n + n + m * n) * (e + r) + m * n * r, "x, the weight, y and their reference", work.flops
    )

    # bias=True reproduces Part 1's matmul + add: y = x @ w.T + b
    linear_layer = nn.Linear(args.in_dim, args.out_dim, bias=True).to(run.device, run.dtype)
    x = torch.randn(args.batch, args.in_dim, device=run.device, dtype=run.dtype)  # [batch, in_dim]
    layer = torch.compile(linear_layer) if run.compiled else linear_layer

    with torch.no_grad():
        if run.warm:  # --warmup: a few unprofiled calls first, so compile and set-up costs stay out of the trace
            warm_up(lambda: layer(x), run)
        # on_trace_ready's writer: traces/<script>/<tag>.json (the trace) and .txt (the table)
        files = TraceFiles(run, run.tag(*shape_of(args, SHAPE)), "linear_fwd", work)
        with profile(
            activities=activities(run),
            schedule=run.schedule.torch(),
            record_shapes=True,
            profile_memory=run.memory,
            on_trace_ready=files.save,
        ) as prof:
            for _ in range(run.schedule.steps):
                with record_function("linear_fwd"):
                    y = layer(x)
                sync(run)
                prof.step()
        w, b, ref = linear_layer.weight, linear_layer.bias, reference_dtype(run.dtype)
        check_output(files, y, x.to(ref) @ w.to(ref).T + b.to(ref), run.dtype, "nn.Linear")

    trace = read_trace(files.json)
    verdicts = check_guess(trace, guess(run.compiled))
    print_report(files, trace, verdicts, run)
    if args.bench:
        print_bench(bench(lambda: layer(x), run.on_gpu), trace)
    print_files(files, run)
    return exit_code(verdicts, run.strict)


if __name__ == "__main__":
    raise SystemExit(main())
