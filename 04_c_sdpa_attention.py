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
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_launches, expect_memcpy, expect_op
from common.harness.recording import finish, recording
from common.harness.runtime import add_shape_flags, fit_machine, make_parser, setup, shape_of
from common.workloads.attention import (
    SDPA_BACKENDS,
    AttentionShape,
    attention_budget,
    make_qkv,
    reference_attention,
    require_sdpa_backend,
)


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
        sdpa = expect_op("aten::scaled_dot_product_attention", 0, "Inductor calls SDPA's choice directly")
        if fused and on_gpu:
            return [
                sdpa,
                expect_op(FUSED_OP[backend], 1, "the fused op stays one library call"),
                expect_kernels("attention", 1, "the same fused kernel as eager"),
                expect_memcpy(0, "nothing copied"),
            ]
        return [
            sdpa,
            expect_op("aten::bmm", 2, "decomposed (CPU flash too): two extern bmm GEMMs"),
            expect_kernels("gemm", 2, "q @ k.T and attn @ v"),
            expect_kernels("triton", 1, "the rest fused by Inductor", at_least=True),
        ]
    sdpa = expect_op("aten::scaled_dot_product_attention", 1, "replaces the naive code")
    if not fused:
        return [
            sdpa,
            expect_op("aten::_scaled_dot_product_attention_math", 1, "the reference: attention op by op"),
            expect_op("aten::tril", 1, "is_causal: the mask rebuilt every call"),
            expect_op("aten::_safe_softmax", 1, "a NaN-safe softmax, not aten::softmax"),
            expect_op("aten::matmul", 2, "q @ k.T and attn @ v"),
            *([expect_op("aten::_to_copy", 4, "q, k, v to fp32, the output back", at_least=True)] if upcast else []),
            expect_kernels("gemm", 2, "fp32 GEMMs" + (": sgemm on the post's A100" if upcast else "")),
            expect_kernels("any", 10, "20 in all on the post's A100", at_least=True),
        ]
    lines = [
        sdpa,
        expect_op(FUSED_OP[backend] + ("" if on_gpu else "_for_cpu"), 1, "straight to the fused backend"),
        expect_op("aten::_scaled_dot_product_attention_math", 0, "no op-by-op decomposition"),
        expect_kernels("attention", 1, "scores never leave the chip"),
        expect_memcpy(0, "nothing copied"),
    ]
    if backend == "cudnn":
        return lines + [
            expect_op("aten::transpose", 0, "cuDNN reads [B, H, S, D] as is"),
            expect_launches("cuLaunchKernelEx", 1, "via the driver API", at_least=True),
        ]
    return lines + [expect_op("aten::transpose", 1, "to the kernel's [B, S, H, D]", at_least=True)]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser, "attention shape", AttentionShape)
    parser.add_argument(
        "--backend",
        choices=SDPA_BACKENDS,
        default="math",
        help="the SDPA backend pinned with sdpa_kernel (default: math)",
    )
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    shape = shape_of(args, AttentionShape)  # batch, heads, seq, head_dim
    work, need = attention_budget(args.backend, shape, run)  # math holds 3 fp32 copies of the scores, fused none
    fit_machine(run, *need, work.flops)

    q, k, v = make_qkv(shape, run)  # [batch, heads, seq, head_dim]
    attention = torch.compile(sdpa_attention) if args.compile else sdpa_attention

    tag = run.tag(*shape, args.backend)
    with sdpa_kernel(SDPA_BACKENDS[args.backend]):
        require_sdpa_backend(args.backend, q, k, v, run)  # only this backend may run: say so first if it cannot
    with torch.no_grad(), sdpa_kernel(SDPA_BACKENDS[args.backend]), recording(run, tag, work) as rec:
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: attention(q, k, v))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("attn_fwd"):
                    out = attention(q, k, v)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        expected = reference_attention(q, k, v, run.reference_dtype)
        guessed = guess(args.backend, args.compile, run.on_gpu, run.dtype != torch.float32)
        # still pinned: --bench times the same backend
        return finish(rec, guessed, out, expected, step=lambda: attention(q, k, v), what=f"SDPA ({args.backend})")


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
