"""Profile F.scaled_dot_product_attention(q, k, v, is_causal=True) with one backend pinned (Part 3: SDPA).

Usage:
    uv run 04_c_sdpa_attention.py --backend math
    uv run 04_c_sdpa_attention.py --backend efficient
    uv run 04_c_sdpa_attention.py --backend flash
    uv run 04_c_sdpa_attention.py --backend cudnn

--backend defaults to math, the reference that runs on every device and dtype. On the CPU PyTorch
has math and flash only; efficient and cudnn need a CUDA GPU, and flash on a GPU needs bf16/fp16.

Writes traces/04_c_sdpa_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<backend>_<dtype>_<cold|warm>_<eager|compiled>,
e.g. 8_16_1024_64_flash_bf16_cold_eager.
"""

import torch
from torch.nn import functional as F
from torch.nn.attention import sdpa_kernel

from common import (Expect, check_output, cli, cpu_op, kernels, launches, make_parser, memcpy,
                    profile_steps, reference_dtype, report, setup)
from common.attention import (SDPA_BACKENDS, add_shape_flags, attention_work, make_qkv, reference_attention,
                              require_sdpa_backend, shape_tag)

def sdpa_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    # q, k, v: [batch, heads, seq, head_dim]; is_causal=True: no mask to build or pass
    return F.scaled_dot_product_attention(q, k, v, is_causal=True)


# The op SDPA dispatches to for each fused backend; the CPU's flash is `..._for_cpu`.
FUSED_OP = {
    "flash": "aten::_scaled_dot_product_flash_attention",
    "efficient": "aten::_scaled_dot_product_efficient_attention",
    "cudnn": "aten::_scaled_dot_product_cudnn_attention",
}


def guess(backend: str, compiled: bool, on_gpu: bool, upcast: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    fused = backend != "math"
    if compiled:
        sdpa = cpu_op("aten::scaled_dot_product_attention", 0, "Inductor calls what SDPA would dispatch to")
        if fused and on_gpu:
            return [sdpa, cpu_op(FUSED_OP[backend], 1, "the fused op stays one library call"),
                    kernels("attention", 1, "the same fused kernel as eager"), memcpy(0, "nothing copied")]
        return [sdpa,
                cpu_op("aten::bmm", 2, "decomposed into math (on the CPU flash too): two extern bmm GEMMs"),
                kernels("gemm", 2, "q @ k.T and attn @ v"),
                kernels("triton", 1, "the rest fused by Inductor", at_least=True)]
    sdpa = cpu_op("aten::scaled_dot_product_attention", 1, "the one line that replaces the naive module")
    if not fused:
        return [
            sdpa,
            cpu_op("aten::_scaled_dot_product_attention_math", 1, "the reference: attention op by op"),
            cpu_op("aten::tril", 1, "is_causal: the mask is rebuilt every call (ones -> tril -> where)"),
            cpu_op("aten::_safe_softmax", 1, "NaN-safe softmax instead of a bare aten::softmax"),
            cpu_op("aten::matmul", 2, "q @ k.T and attn @ v"),
            *([cpu_op("aten::_to_copy", 4, "q, k, v upcast to fp32, the output cast back", at_least=True)]
              if upcast else []),
            kernels("gemm", 2, "fp32 GEMMs" + (", off the tensor cores (sgemm on the post's A100)" if upcast else "")),
            kernels("any", 10, "many small kernels besides (20 in all on the post's A100)", at_least=True),
        ]
    lines = [
        sdpa,
        cpu_op(FUSED_OP[backend] + ("" if on_gpu else "_for_cpu"), 1, "dispatched straight to the fused backend"),
        cpu_op("aten::_scaled_dot_product_attention_math", 0, "no op-by-op decomposition"),
        kernels("attention", 1, "one fused kernel: the seq x seq scores never leave the chip"),
        memcpy(0, "nothing copied"),
    ]
    if backend == "cudnn":
        return lines + [
            cpu_op("aten::transpose", 0, "cuDNN reads [batch, heads, seq, head_dim] as it is"),
            launches("cuLaunchKernelEx", 1, "launched through the driver, not cudaLaunchKernel", at_least=True),
        ]
    return lines + [cpu_op("aten::transpose", 1, "views to the kernel's [batch, seq, heads, head_dim]", at_least=True)]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser)
    parser.add_argument("--backend", choices=SDPA_BACKENDS, default="math",
                        help="the SDPA backend pinned with sdpa_kernel (default: math)")
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    q, k, v = make_qkv(args, run)  # [batch, heads, seq, head_dim]
    attention = torch.compile(sdpa_attention) if run.compiled else sdpa_attention

    work = attention_work(args, q.element_size())
    tag = run.tag(*shape_tag(args), args.backend)
    with torch.no_grad(), sdpa_kernel(SDPA_BACKENDS[args.backend]):  # only this backend may run
        require_sdpa_backend(args.backend, q, k, v, run)
        result = profile_steps(lambda: attention(q, k, v), "attn_fwd", run, tag, work)
        ref = reference_attention(q, k, v, reference_dtype(run.dtype))
        check_output(result, ref, run.dtype, f"SDPA ({args.backend})")
        # still pinned: --bench times the same backend again
        return report(result, run, guess(args.backend, run.compiled, run.on_gpu, run.dtype != torch.float32))


if __name__ == "__main__":
    raise SystemExit(main())
