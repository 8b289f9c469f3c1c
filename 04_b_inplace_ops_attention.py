"""Profile the hand-written causal attention with the mask applied in place, masked_fill_ (Part 3: in-place ops).

Usage:
    uv run 04_b_inplace_ops_attention.py
    uv run 04_b_inplace_ops_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --compile

Writes traces/04_b_inplace_ops_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<dtype>_<cold|warm>_<eager|compiled>, e.g. 8_16_1024_64_bf16_cold_eager.
"""

from common.harness.early import importing_torch, refuse_attention_memory
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import AttentionShape

# Before torch loads (about 10 s on a laptop): what this machine cannot run is refused in a second.
refuse_attention_memory(__name__, score_items=2)  # scores (masked in place), the softmax
# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
add_shape_flags(parser, "attention shape", AttentionShape)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import math

import torch
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_memcpy, expect_op
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.attention import (
    attention_budget,
    causal_mask,
    make_qkv,
    reference_attention,
)


class NaiveCausalAttention(nn.Module):
    def __init__(self, head_dim):
        super().__init__()
        self.scale = 1.0 / math.sqrt(head_dim)

    def forward(self, q, k, v, mask):
        # q, k, v: [batch, heads, seq, head_dim]
        scores = torch.matmul(q, k.transpose(-2, -1))  # [batch, heads, seq, seq]
        scores = torch.mul(scores, self.scale)
        scores.masked_fill_(mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v)  # [batch, heads, seq, head_dim]
        return out


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking: 04_a without the copy."""
    if compiled:
        return [
            expect_op("aten::masked_fill", 0, "Inductor traces a functional graph and fuses the mask"),
            expect_op("aten::softmax", 0, "scale, mask and softmax become generated code"),
            expect_op("aten::bmm", 2, "the two GEMMs stay library calls (extern bmm)"),
            expect_kernels("gemm", 2, "q @ k.T and attn @ v"),
            expect_kernels("triton", 1, "scale + mask + softmax fused by Inductor", at_least=True),
            expect_memcpy(0, "no clone in a compiled graph: in place or not no longer matters"),
        ]
    return [
        expect_op("aten::matmul", 2, "q @ k.T and attn @ v"),
        expect_op("aten::mul", 1, "scores * scale"),
        expect_op("aten::masked_fill", 0, "no out-of-place masking ..."),
        expect_op("aten::clone", 0, "... so no clone of scores ..."),
        expect_op("aten::masked_fill_", 1, "... only the in-place fill, on scores itself"),
        expect_op("aten::softmax", 1, "attention weights"),
        expect_kernels("gemm", 2, "q @ k.T and attn @ v"),
        expect_kernels("pointwise", 2, "the scale mul and the masking"),
        expect_kernels("softmax", 1, "one softmax kernel"),
        expect_memcpy(0, "the memcpy is gone: nothing is copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    shape = shape_of(args, AttentionShape)  # batch, heads, seq, head_dim
    # The GEMMs compute all seq x seq scores, twice what causal attention needs; counting the needed
    # work (as 04_c and 04_d do) makes TFLOP/s compare across the variants the way their speed does.
    work, need = attention_budget("in_place", shape, run)  # before any tensor exists
    fit_machine(run, *need, work.flops)

    q, k, v = make_qkv(shape, run)  # [batch, heads, seq, head_dim]
    mask = causal_mask(args.seq, run.device)  # [seq, seq], built once, outside the profiled step
    attention = NaiveCausalAttention(args.head_dim)
    model = torch.compile(attention) if args.compile else attention

    # forward only (no_grad): autograd keeps no scores, so overwriting them in place is safe
    with torch.no_grad(), recording(run, run.tag(*shape), work) as rec:
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: model(q, k, v, mask))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("attn_fwd"):
                    out = model(q, k, v, mask)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        expected = reference_attention(q, k, v, run.reference_dtype)
    return finish(rec, guess(args.compile), out, expected, step=lambda: model(q, k, v, mask), what="in-place attention")


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
