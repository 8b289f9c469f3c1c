"""Profile causal attention written by hand, with an out-of-place masked_fill (Part 3: naive attention).

Usage:
    uv run 04_a_naive_attention.py
    uv run 04_a_naive_attention.py --batch 8 --heads 16 --seq 1024 --head_dim 64 --compile

Writes traces/04_a_naive_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
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
        scores = torch.matmul(q, k.transpose(-2, -1))
        scores = scores * self.scale
        scores = scores.masked_fill(mask, float("-inf"))
        attn = torch.softmax(scores, dim=-1)
        out = torch.matmul(attn, v)
        return out


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking.

    The post's first guess had five kernels and no copy; the trace showed a device-to-device
    memcpy. This is the corrected guess: out-of-place masked_fill is clone + masked_fill_.
    """
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
        cpu_op("aten::masked_fill", 1, "the out-of-place masking ..."),
        cpu_op("aten::clone", 1, "... is a clone of scores ..."),
        cpu_op("aten::masked_fill_", 1, "... then the in-place fill on that copy"),
        cpu_op("aten::softmax", 1, "attention weights"),
        kernels("gemm", 2, "q @ k.T and attn @ v"),
        kernels("pointwise", 2, "the scale mul and the masking"),
        kernels("softmax", 1, "one softmax kernel"),
        memcpy(1, "the post's surprise: the clone inside masked_fill copies scores device to device"),
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
        check_output(result, ref, run.dtype, "naive attention")
    return report(result, run, guess(run.compiled))


if __name__ == "__main__":
    raise SystemExit(main())
