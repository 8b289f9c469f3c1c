"""Profile 05_training_step.py's training step under DistributedDataParallel, one trace per rank (beyond the posts).

Usage:
    torchrun --nproc-per-node 2 06_ddp_training_step.py                       # 2 GPUs (NCCL), or 2 CPU ranks (gloo)
    torchrun --nproc-per-node 2 06_ddp_training_step.py --no-overlap          # all-reduce after the backward
    torchrun --nproc-per-node 2 06_ddp_training_step.py --bucket-cap-mb 5     # smaller buckets, more all-reduces
    uv run python -m common.summary traces/06_ddp_training_step               # a row per rank, and the spread

The block, loss and AdamW step are 05_training_step.py's; DDP averages the gradients across ranks in buckets
of --bucket-cap-mb MiB, each bucket's all-reduce starting while the backward still runs (overlap). Every rank
writes traces/06_ddp_training_step/<tag>_rank<r>.json and .txt; the trace's distributedInfo and the suite's
metadata carry the rank and the world size.
"""

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import SuiteError, cli, positive_float
from common.ddp import all_reduce_gradients, expected_buckets, start_process_group, torchrun_launch, training_work
from common.guess import Expect, expect_kernels, expect_op
from common.recording import finish, recording
from common.runtime import add_shape_flags, make_parser, setup, shape_of


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(dim)
        self.qkv = nn.Linear(dim, 3 * dim, bias=False)
        self.out = nn.Linear(dim, dim, bias=False)
        self.mlp_norm = RMSNorm(dim)
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv(self.attn_norm(x)).view(b, s, 3, self.heads, d // self.heads).unbind(2)
        a = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True)
        x = x + self.out(a.transpose(1, 2).reshape(b, s, d))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.gelu(self.gate_proj(h), approximate="tanh") * self.up_proj(h))


SHAPE = {
    "batch": (8, "batch size per rank"),
    "seq": (1024, "sequence length"),
    "dim": (768, "model width"),
    "heads": (12, "attention heads"),
    "hidden": (3072, "GeGLU hidden width"),
}


def guess(buckets: int, parameters: int, on_gpu: bool) -> list[Expect]:
    """What one profiled step should show on every rank, written down before looking."""
    lines = [
        expect_op("c10d::allreduce_", buckets, f"one all-reduce per gradient bucket: {buckets} from the bucket cap"),
        expect_op("aten::mm", 15, "the same compute on every rank: 5 forward GEMMs, 10 in the backward"),
    ]
    if on_gpu:
        return lines + [
            expect_op("aten::_foreach_lerp_", 1, "AdamW's foreach step (the default on a GPU): one call for all"),
            expect_kernels("communication", buckets, "one NCCL all-reduce kernel per bucket, on its own stream"),
        ]
    return lines + [expect_op("aten::lerp_", parameters, "AdamW on the CPU loops: one first-moment update each")]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser, "block shape", SHAPE)
    ddp = parser.add_argument_group("data parallel")
    ddp.add_argument(
        "--bucket-cap-mb", type=positive_float, default=25.0, help="DDP's gradient bucket size in MiB (default: 25)"
    )
    ddp.add_argument(
        "--no-overlap",
        action="store_true",
        help="all-reduce the gradients after the backward instead of during it, for the comparison (default: off)",
    )
    args = parser.parse_args(argv)
    launch = torchrun_launch()  # RANK, LOCAL_RANK, WORLD_SIZE from torchrun; one line if it is not there
    if torch.cuda.is_available() and args.device == "auto":
        args.device = f"cuda:{launch.local_rank}"  # one GPU per rank
    run = setup(args, __file__)
    backend = start_process_group(run.on_gpu)
    try:
        shape = shape_of(args, SHAPE)  # batch, seq, dim, heads, hidden
        if args.dim % args.heads:
            raise SuiteError(f"--dim {args.dim} is not a multiple of --heads {args.heads}")
        torch.manual_seed(0)  # the same weights on every rank (DDP also broadcasts rank 0's)
        block = DecoderBlock(args.dim, args.heads, args.hidden).to(run.device)
        model = DistributedDataParallel(block, bucket_cap_mb=args.bucket_cap_mb)
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
        torch.manual_seed(launch.rank)  # each rank its own batch
        x = torch.randn(args.batch, args.seq, args.dim, device=run.device)
        buckets = expected_buckets(list(block.parameters()), args.bucket_cap_mb)
        overlap = "overlap" if not args.no_overlap else "no-overlap"
        tag = (
            run.tag(*shape, f"cap{args.bucket_cap_mb:g}", overlap, f"world{launch.world_size}") + f"_rank{launch.rank}"
        )
        meta = {"rank": launch.rank, "world_size": launch.world_size, "backend": backend, "buckets": buckets}
        work = training_work(*shape)
        autocast = torch.autocast(run.device.type, dtype=torch.bfloat16, enabled=run.dtype != torch.float32)

        with recording(run, tag, "train_step", work, meta) as rec:
            with profile(
                activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
                schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
                record_shapes=True,
                profile_memory=args.memory,
                on_trace_ready=rec.save,
            ) as prof:
                for _ in range(args.wait + args.warmup_steps + args.active):
                    with record_function("train_step"):
                        with record_function("forward"), autocast:
                            loss = model(x).float().pow(2).mean()
                        with record_function("backward"):
                            if args.no_overlap:
                                with model.no_sync():  # no all-reduce during the backward ...
                                    loss.backward()
                            else:
                                loss.backward()
                        if args.no_overlap:
                            with record_function("allreduce"):  # ... all of it after
                                all_reduce_gradients(list(block.parameters()), args.bucket_cap_mb)
                        with record_function("optimizer"):
                            optimizer.step()
                            optimizer.zero_grad(set_to_none=True)
                    if run.on_gpu:
                        torch.cuda.synchronize()
                    prof.step()
            gathered = [torch.zeros_like(p) for p in (block.out.weight,) for _ in range(launch.world_size)]
            dist.all_gather(gathered, block.out.weight.detach())
        # every rank took the same step from the same averaged gradients: the weights must agree
        guessed = guess(buckets, len(list(block.parameters())), run.on_gpu)
        return finish(rec, guessed, gathered[-1], gathered[0], what="the last rank's weights against rank 0's")
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    raise SystemExit(main())
