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

from common.harness.early import importing_torch
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import SDPA_BACKEND_NAMES, AttentionShape

# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
add_shape_flags(parser, "attention shape", AttentionShape)
parser.add_argument(
    "--backend",
    choices=SDPA_BACKEND_NAMES,
    default="math",
    help="the SDPA backend pinned with sdpa_kernel (default: math)",
)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
from torch.nn import functional as F
from torch.nn.attention import sdpa_kernel
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_launches, expect_memcpy, expect_op
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.attention import (
    SDPA_BACKENDS,
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
    """What one profiled step should show, written down before looking: each line with the cases it is guessed
    in. Eager, "math" runs attention op by op and "fused" (flash, efficient, cudnn) is one library call; compiled,
    a fused backend on a GPU stays that call ("compiled fused"), and math or any backend on the CPU is decomposed
    into GEMMs and Triton kernels ("compiled decomposed")."""
    fused = backend != "math"
    eager = "fused" if fused else "math"
    case = ("compiled fused" if fused and on_gpu else "compiled decomposed") if compiled else eager
    fused_op = FUSED_OP.get(backend, "")
    compiled_cases, eager_cases = {"compiled fused", "compiled decomposed"}, {"math", "fused"}
    op, kernels = expect_op, expect_kernels
    rows = [
        (compiled_cases, op("aten::scaled_dot_product_attention", 0, "Inductor calls SDPA's choice directly")),
        ({"compiled fused"}, op(fused_op, 1, "the fused op stays one library call")),
        ({"compiled fused"}, kernels("attention", 1, "the same fused kernel as eager")),
        ({"compiled fused"}, expect_memcpy(0, "nothing copied")),
        ({"compiled decomposed"}, op("aten::bmm", 2, "decomposed (CPU flash too): two extern bmm GEMMs")),
        ({"compiled decomposed"}, kernels("gemm", 2, "q @ k.T and attn @ v")),
        ({"compiled decomposed"}, kernels("triton", 1, "the rest fused by Inductor", at_least=True)),
        (eager_cases, op("aten::scaled_dot_product_attention", 1, "replaces the naive code")),
        ({"math"}, op("aten::_scaled_dot_product_attention_math", 1, "the reference: attention op by op")),
        ({"math"}, op("aten::tril", 1, "is_causal: the mask rebuilt every call")),
        ({"math"}, op("aten::_safe_softmax", 1, "a NaN-safe softmax, not aten::softmax")),
        ({"math"}, op("aten::matmul", 2, "q @ k.T and attn @ v")),
        ({"math"} if upcast else set(), op("aten::_to_copy", 4, "q, k, v to fp32, the output back", at_least=True)),
        ({"math"}, kernels("gemm", 2, "fp32 GEMMs" + (": sgemm on the post's A100" if upcast else ""))),
        ({"math"}, kernels("any", 10, "20 in all on the post's A100", at_least=True)),
        ({"fused"}, op(fused_op + ("" if on_gpu else "_for_cpu"), 1, "straight to the fused backend")),
        ({"fused"}, op("aten::_scaled_dot_product_attention_math", 0, "no op-by-op decomposition")),
        ({"fused"}, kernels("attention", 1, "scores never leave the chip")),
        ({"fused"}, expect_memcpy(0, "nothing copied")),
        ({"fused"} if backend == "cudnn" else set(), op("aten::transpose", 0, "cuDNN reads [B, H, S, D] as is")),
        ({"fused"} if backend == "cudnn" else set(), expect_launches("cuLaunchKernelEx", 1, "via the driver API",
                                                                     at_least=True)),
        ({"fused"} if backend != "cudnn" else set(), op("aten::transpose", 1, "to the kernel's [B, S, H, D]",
                                                        at_least=True)),
    ]  # fmt: skip
    return [line for cases, line in rows if case in cases]


@cli
def main(argv: list[str] | None = None) -> int:
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
