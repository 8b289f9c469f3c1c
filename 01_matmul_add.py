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

from common import check_close, cli, make_parser, positive_int, profile_steps, reference_dtype, report, setup


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # x, w, b: [N, N], or [batch, N, N] with --batch (matmul then dispatches aten::bmm)
    return torch.add(torch.matmul(x, w), b)


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

    with torch.no_grad():
        ref = reference_dtype(run.dtype)
        check_close(fn(x, w, b), matmul_add(x.to(ref), w.to(ref), b.to(ref)), run.dtype, "matmul_add")
        size = f"{args.batch}x{args.size}" if args.batch else args.size
        result = profile_steps(lambda: fn(x, w, b), "matmul_add", run, run.tag(size))
    report(result, run)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
