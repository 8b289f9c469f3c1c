"""Profile the hand-written causal attention with the mask applied in place, masked_fill_ (Part 3: in-place ops).

Usage:
    uv run 04_b_inplace_ops_attention.py
    uv run 04_b_inplace_ops_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --compile

Writes traces/04_b_inplace_ops_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<dtype>_<cold|warm>_<eager|compiled>, e.g. 8_16_1024_64_bf16_cold_eager.
"""

import math

import torch
from torch import nn

from common import (Expect, check_output, cli, cpu_op, kernels, make_parser, memcpy, profile_steps, reference_dtype,
                    report, setup)
from common.attention import add_shape_flags, attention_work, causal_mask, make_qkv, reference_attention, shape_tag


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
            cpu_op("aten::masked_fill", 0, "Inductor traces a functional graph and fuses the mask"),
            cpu_op("aten::softmax", 0, "scale, mask and softmax become generated code"),
            cpu_op("aten::bmm", 2, "the two GEMMs stay library calls (extern bmm)"),
            kernels("gemm", 2, "q @ k.T and attn @ v"),
            kernels("triton", 1, "scale + mask + softmax fused by Inductor", at_least=True),
            memcpy(0, "no clone in a compiled graph: in place or not no longer matters"),
        ]
    return [
        cpu_op("aten::matmul", 2, "q @ k.T and attn @ v"),
        cpu_op("aten::mul", 1, "scores * scale"),
        cpu_op("aten::masked_fill", 0, "no out-of-place masking ..."),
        cpu_op("aten::clone", 0, "... so no clone of scores ..."),
        cpu_op("aten::masked_fill_", 1, "... only the in-place fill, on scores itself"),
        cpu_op("aten::softmax", 1, "attention weights"),
        kernels("gemm", 2, "q @ k.T and attn @ v"),
        kernels("pointwise", 2, "the scale mul and the masking"),
        kernels("softmax", 1, "one softmax kernel"),
        memcpy(0, "the memcpy is gone: nothing is copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser)
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    q, k, v = make_qkv(args, run)  # [batch, heads, seq, head_dim]
    mask = causal_mask(args.seq, run.device)  # [seq, seq], built once, outside the profiled step
    attention = NaiveCausalAttention(args.head_dim)
    model = torch.compile(attention) if run.compiled else attention

    # The GEMMs compute all seq x seq scores, twice what causal attention needs; counting the needed
    # work (as 04_c and 04_d do) makes TFLOP/s compare across the variants the way their speed does.
    work = attention_work(args, q.element_size())
    with torch.no_grad():  # forward only: autograd keeps no scores, so overwriting them in place is safe
        result = profile_steps(lambda: model(q, k, v, mask), "attn_fwd", run, run.tag(*shape_tag(args)), work)
        ref = reference_attention(q, k, v, reference_dtype(run.dtype))
        check_output(result, ref, run.dtype, "in-place attention")
    return report(result, run, guess(run.compiled))


if __name__ == "__main__":
    raise SystemExit(main())
