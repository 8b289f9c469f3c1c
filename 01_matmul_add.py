"""Profile torch.add(torch.matmul(x, w), b) on square matrices (Part 1: a beginner's guide to torch.profiler).

Usage:
    uv run 01_matmul_add.py --size 64
    uv run 01_matmul_add.py --size 4096 --warmup --compile
    uv run 01_matmul_add.py --size 64 --wait 0 --warmup-steps 0 --active 20   # the cold-start experiment
    uv run 01_matmul_add.py --size 64 --batch 8                                # the aten::bmm detour

Writes traces/01_matmul_add/<size>_<dtype>_<cold|warm>_<eager|compiled>.json (Chrome trace)
and .txt (profiler table), e.g. traces/01_matmul_add/64_bf16_cold_eager.json.
"""

from common.cli import positive_int
from common.harness.early import importing_torch
from common.harness.flags import make_parser

# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
parser.add_argument("--size", type=positive_int, default=64, help="N of the N x N matrices (default: 64)")
parser.add_argument(
    "--batch",
    type=positive_int,
    default=None,
    help="give x, w and b a leading batch axis of this size, so matmul becomes "
    "aten::bmm (default: none, 2-D; a batch axis on x alone folds into one aten::mm)",
)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_memcpy, expect_op
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup
from common.workloads.matmul import matmul_add_memory, matmul_add_work


def matmul_add(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    # x, w, b: [N, N], or [batch, N, N] with --batch (matmul then dispatches aten::bmm)
    return torch.add(torch.matmul(x, w), b)


def guess(compiled: bool, batched: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    if compiled:
        return [
            expect_op("aten::addmm", 0 if batched else 1, "Inductor folds matmul + add into one addmm"),
            expect_op("aten::add", 0, "no separate add: b rides in the GEMM"),
            expect_kernels("gemm", 1, "the same GEMM family as eager"),
            expect_memcpy(0 if batched else 1, "b copied into the output buffer that addmm accumulates into"),
        ]
    mm = "aten::bmm" if batched else "aten::mm"
    return [
        expect_op("aten::matmul", 1, "torch.matmul, the entry point"),
        expect_op(mm, 1, f"matmul dispatches {mm}" + (" for the batch axis" if batched else " for 2-D inputs")),
        expect_op("aten::bmm" if not batched else "aten::mm", 0, "and not the other one"),
        expect_op("aten::add", 1, "torch.add"),
        expect_kernels("gemm", 1, "one cuBLAS GEMM"),
        expect_kernels("pointwise", 1, "one elementwise add kernel"),
        expect_memcpy(0, "nothing to copy"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    batch, n = args.batch or 1, args.size
    work = matmul_add_work(batch, n, run.dtype, batched=bool(args.batch))
    fit_machine(run, *matmul_add_memory(batch, n, run.dtype), work.flops)  # before any tensor exists

    shape = (args.batch, n, n) if args.batch else (n, n)
    x, w, b = (torch.randn(shape, device=run.device, dtype=run.dtype) for _ in range(3))
    fn = torch.compile(matmul_add) if args.compile else matmul_add

    tag = run.tag(f"{args.batch}x{n}" if args.batch else n)
    with torch.no_grad(), recording(run, tag, work) as rec:  # files: traces/01_matmul_add/<tag>.*
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: fn(x, w, b))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("matmul_add"):
                    y = fn(x, w, b)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        ref = run.reference_dtype
        expected = matmul_add(x.to(ref), w.to(ref), b.to(ref))
    return finish(rec, guess(args.compile, bool(args.batch)), y, expected, step=lambda: fn(x, w, b))


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
