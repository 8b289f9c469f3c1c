"""Profile torch.add(torch.matmul(x, w), b) on square matrices (Part 1: a beginner's guide to torch.profiler).

Usage:
    uv run 01_matmul_add.py --size 64
    uv run 01_matmul_add.py --size 4096 --warmup --compile
    uv run 01_matmul_add.py --size 64 --wait 0 --warmup-steps 0 --active 20   # the cold-start experiment
    uv run 01_matmul_add.py --size 64 --batch 8                                # the aten::bmm detour

Writes traces/01_matmul_add/<size>_<dtype>_<cold|warm>_<eager|compiled>.json (Chrome trace)
and .txt (profiler table), e.g. traces/01_matmul_add/64_bf16_cold_eager.json.
"""

import torch

from common import (Expect, Work, check_output, cli, cpu_op, kernels, make_parser, memcpy, positive_int, profile_steps,
                    reference_dtype, report, setup)


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # x, w, b: [N, N], or [batch, N, N] with --batch (matmul then dispatches aten::bmm)
    return torch.add(torch.matmul(x, w), b)


def guess(compiled: bool, batched: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    if compiled:
        return [
            cpu_op("aten::addmm", 0 if batched else 1, "Inductor folds matmul + add into one addmm"),
            cpu_op("aten::add", 0, "no separate add: b rides in the GEMM"),
            kernels("gemm", 1, "the same GEMM family as eager"),
            memcpy(0 if batched else 1, "b copied into the output buffer that addmm accumulates into"),
        ]
    mm = "aten::bmm" if batched else "aten::mm"
    return [
        cpu_op("aten::matmul", 1, "torch.matmul, the entry point"),
        cpu_op(mm, 1, f"matmul dispatches {mm}" + (" for the batch axis" if batched else " for 2-D inputs")),
        cpu_op("aten::bmm" if not batched else "aten::mm", 0, "and not the other one"),
        cpu_op("aten::add", 1, "torch.add"),
        kernels("gemm", 1, "one cuBLAS GEMM"),
        kernels("pointwise", 1, "one elementwise add kernel"),
        memcpy(0, "nothing to copy"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    parser.add_argument("--size", type=positive_int, default=64, help="N of the N x N matrices (default: 64)")
    parser.add_argument("--batch", type=positive_int, default=None,
                        help="give x, w and b a leading batch axis of this size, so matmul becomes "
                             "aten::bmm (a batch axis on x alone folds into one aten::mm)")
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    shape = (args.batch, args.size, args.size) if args.batch else (args.size, args.size)
    x, w, b = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))
    fn = torch.compile(matmul_add) if run.compiled else matmul_add

    batch, n = args.batch or 1, args.size
    work = Work(flops=batch * (2 * n**3 + n**2), bytes=batch * 4 * n * n * x.element_size())  # read x, w, b; write y
    tag = run.tag(f"{args.batch}x{n}" if args.batch else n)
    with torch.no_grad():
        result = profile_steps(lambda: fn(x, w, b), "matmul_add", run, tag, work)
        ref = reference_dtype(run.dtype)
        check_output(result, matmul_add(x.to(ref), w.to(ref), b.to(ref)), run.dtype, "matmul_add")
    return report(result, run, guess(run.compiled, bool(args.batch)))


if __name__ == "__main__":
    raise SystemExit(main())
