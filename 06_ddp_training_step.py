"""Profile 05_training_step.py's training step under DistributedDataParallel, one trace per rank (beyond the posts).

Usage:
    uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py     # 2 GPUs (NCCL), 2 CPU ranks (gloo)
    uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py --no-overlap   # all-reduce after backward
    uv run torchrun --standalone --nproc-per-node 2 06_ddp_training_step.py --bucket-cap-mb 5  # more, smaller buckets
    uv run torchrun --standalone --nproc-per-node 1 06_ddp_training_step.py     # one GPU: DDP on one rank
    uv run python -m common.summary traces/06_ddp_training_step                 # a row per rank, and the spread

The block, loss and AdamW step are 05_training_step.py's; DDP averages the gradients across ranks in buckets
of --bucket-cap-mb MiB, each bucket's all-reduce starting while the backward still runs (overlap). Every rank
writes traces/06_ddp_training_step/<tag>_rank<r>.json and .txt; the trace's distributedInfo and the suite's
metadata carry the rank and the world size. One rank runs too (DDP's reducer, hooks and buckets), but shows
no communication exposed between ranks.

Rank 0 prints the report; another rank prints only the lines whose words differ from rank 0's, as
`[rank N] ...` (each rank's figures: the summary). torchrun adds lines of its own: `W...` log lines first
(with 2+ ranks, that it set OMP_NUM_THREADS=1 per rank; LOGLEVEL=ERROR before the command hides that), and
after a rank fails (a refusal, Ctrl-C, a signal) a ChildFailedError or SignalException traceback and a box of
failures, then it exits 1. Read the rank's `error:` line above them: the box's `Root Cause ... traceback :`
entry repeats it, and its `exitcode` entries are the ranks' own codes (2 for a refusal on every rank, 130 for
Ctrl-C, 143 for SIGTERM).
"""

import contextlib
import dataclasses

from common.harness.early import importing_torch
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import AMP_DTYPE_HELP, BlockShape, add_ddp_flags

# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__, dtype_help=AMP_DTYPE_HELP)  # no --dtype: fp32 parameters, bf16 autocast
add_shape_flags(parser, "decoder block shape, per rank", BlockShape)
add_ddp_flags(parser)  # --bucket-cap-mb, --no-overlap, --startup-timeout
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli
from common.harness.guess import Expect, expect_kernels, expect_op
from common.harness.ranks import one_verdict, rank_line, read_together
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.harness.torchrun import TORCHRUN, exit_rank, not_launched, rendezvous, torchrun_launch
from common.workloads.block import (
    AMP,
    block_work,
    check_shape,
    make_batch,
    training_precision,
)
from common.workloads.ddp import ddp_memory, expected_buckets

SCRIPT = "06_ddp_training_step.py"


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, heads, s, head_dim]
        return self.out_proj(y.transpose(1, 2).reshape(b, s, d))


class SimpleGeGLUMLP(nn.Module):  # the post's MLP (03_simple_mlp.py)
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SimpleGeGLUMLP(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def train_step(model, x, target, optimizer, amp, overlap):
    # 05_training_step.py's step under DDP. With overlap, DDP all-reduces each gradient bucket during the
    # backward as soon as it is full; without, no_sync() holds them and one all-reduce of all of them follows.
    with contextlib.nullcontext() if overlap else model.no_sync():  # no_sync must hold forward and backward
        with record_function("forward"), torch.autocast(x.device.type, torch.bfloat16, enabled=amp):
            loss = F.mse_loss(model(x), target)
        with record_function("backward"):
            loss.backward()
    if not overlap:
        with record_function("allreduce"):
            grads = [p.grad for p in model.parameters()]
            flat = torch.cat([g.reshape(-1) for g in grads])
            dist.all_reduce(flat)
            flat /= dist.get_world_size()
            for g, part in zip(grads, flat.split([g.numel() for g in grads]), strict=True):
                g.copy_(part.view_as(g))
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)


def guess(all_reduces: int, parameters: int, on_gpu: bool, world_size: int) -> list[Expect]:
    """What one profiled step should show on every rank, written down before looking."""
    lines = [
        expect_op("c10d::allreduce_", all_reduces, "one all-reduce per gradient bucket (one in all without overlap)"),
        expect_op("aten::mm", 15, "the same compute on every rank: 5 forward GEMMs, 10 in the backward"),
    ]
    if on_gpu:
        return lines + [
            expect_op("aten::_foreach_lerp_", 1, "AdamW's foreach step (the default on a GPU): one call for all"),
            expect_kernels("communication", all_reduces, "one NCCL all-reduce kernel each, on its own stream")
            if world_size > 1
            else expect_kernels("communication", 0, "one rank: NCCL's in-place all-reduce returns at once, no kernel"),
        ]
    return lines + [expect_op("aten::lerp_", parameters, "AdamW on the CPU loops: one first-moment update each")]


@cli
def main(argv: list[str] | None = None) -> int:
    launch = torchrun_launch(SCRIPT)  # RANK, LOCAL_RANK, WORLD_SIZE from torchrun, checked; None without them
    args = parser.parse_args(argv)
    if launch is None:
        raise not_launched(SCRIPT)
    gpu = f"cuda:{launch.local_rank}" if args.device == "auto" and torch.cuda.is_available() else None  # one a rank
    run = setup(args, __file__, device=gpu, optimizer=True)
    precision = training_precision(args.dtype, run.dtype_name)  # --dtype left out: AMP where bf16 is fast
    amp = precision == AMP
    run = dataclasses.replace(run, launcher=f"{TORCHRUN} {launch.local_world_size}")  # for the commands it prints
    check_shape(args.dim, args.heads)
    backend = "nccl" if run.on_gpu else "gloo"  # NCCL between GPUs, gloo between CPU processes
    print(rank_line(launch, backend))
    shape = shape_of(args, BlockShape)  # batch, seq, dim, heads, hidden
    param_dtype = torch.float32 if amp else run.dtype
    work = block_work(shape, param_dtype.itemsize, param_dtype.itemsize, amp)
    with rendezvous(launch, args.startup_timeout) as store:  # every rank here, or one line naming the missing
        dist.init_process_group(backend, store=store, rank=launch.rank, world_size=launch.world_size)
    try:
        with one_verdict(launch):  # every rank checks; a shape one rank cannot hold stops them all, before any tensor
            fit_machine(run, *ddp_memory(shape, precision, run.dtype, launch, run.on_gpu), work.flops)
        torch.manual_seed(0)  # the same weights on every rank (DDP broadcasts rank 0's anyway)
        block = DecoderBlock(args.dim, args.heads, args.hidden).to(run.device, param_dtype)
        model = DistributedDataParallel(block, device_ids=[launch.local_rank] if run.on_gpu else None,
                                        bucket_cap_mb=args.bucket_cap_mb)  # fmt: skip
        eps = 1e-4 if param_dtype == torch.float16 else 1e-8  # 1e-8 is 0 in fp16: AdamW's 0/0 gives NaN weights
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, eps=eps)
        torch.manual_seed(1 + launch.rank)  # each rank its own batch
        x, target = make_batch(args.batch, args.seq, args.dim, run.device, param_dtype)
        all_reduces = expected_buckets(model) if not args.no_overlap else 1  # from DDP's caps and the parameters
        words = [
            f"cap{model.bucket_bytes_cap / 2**20:g}",
            "nooverlap" if args.no_overlap else "overlap",
            f"{launch.world_size}rank{'s' * (launch.world_size > 1)}",  # a run of 1 never replaces rank 0 of 2's
            *[AMP] * amp,
        ]
        tag = f"{run.tag(*shape, *words)}_rank{launch.rank}"
        meta = {"rank": launch.rank, "world_size": launch.world_size, "backend": backend, "all_reduces": all_reduces}

        with recording(run, tag, work, meta) as rec:
            if args.warmup:  # a few unprofiled steps first, so set-up costs stay out of the trace
                rec.warm_up(lambda: train_step(model, x, target, optimizer, amp, not args.no_overlap))
            with profile(
                activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
                schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
                record_shapes=True,
                profile_memory=args.memory,
                on_trace_ready=rec.save,
            ) as prof:
                for _ in range(args.wait + args.warmup_steps + args.active):
                    with record_function("train_step"):
                        train_step(model, x, target, optimizer, amp, not args.no_overlap)
                    if run.on_gpu:
                        torch.cuda.synchronize()
                    prof.step()
            weights = [torch.zeros_like(block.attn.out_proj.weight) for _ in range(launch.world_size)]
            dist.all_gather(weights, block.attn.out_proj.weight.detach())
        # every rank took the same steps from the same averaged gradients: its weights must equal rank 0's
        guessed = guess(all_reduces, len(list(block.parameters())), run.on_gpu, launch.world_size)
        last = launch.world_size - 1
        what = f"rank {last}'s out_proj weight " + ("(rank 0's is the reference)" if last else "(one rank: its own)")
        with one_verdict(launch):  # rank 0's report; another rank prints only what differs from it
            code = finish(rec, guessed, weights[-1], weights[0], what=what)
            if last and rec.files:  # the suite wrote the ranks' traces (not the loop's own on_trace_ready)
                print(read_together(run.traces_dir, launch))
        return code
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    exit_rank(main)  # main's exit code, without the interpreter teardown that can abort a finished rank
