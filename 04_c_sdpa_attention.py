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
from torch.profiler import profile, record_function

from common.attention import (
    SDPA_BACKENDS,
    SHAPE,
    attention_memory,
    attention_work,
    make_qkv,
    reference_attention,
    require_sdpa_backend,
)
from common.bench import bench
from common.checks import check_output, reference_dtype
from common.cli import cli
from common.export import TraceFiles
from common.guess import Expect, check_guess, expect_kernels, expect_launches, expect_memcpy, expect_op
from common.profiling import activities, sync, warm_up
from common.report import exit_code, print_bench, print_files, print_report
from common.runtime import add_shape_flags, fit_machine, make_parser, setup, shape_of
from common.trace import read_trace


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
        sdpa = expect_op("aten::scaled_dot_product_attention", 0, "Inductor calls what SDPA would dispatch to")
        if fused and on_gpu:
            return [
                sdpa,
                expect_op(FUSED_OP[backend], 1, "the fused op stays one library call"),
                expect_kernels("attention", 1, "the same fused kernel as eager"),
                expect_memcpy(0, "nothing copied"),
            ]
        return [
            sdpa,
            expect_op("aten::bmm", 2, "decomposed into math (on the CPU flash too): two extern bmm GEMMs"),
            expect_kernels("gemm", 2, "q @ k.T and attn @ v"),
            expect_kernels("triton", 1, "the rest fused by Inductor", at_least=True),
        ]
    sdpa = expect_op("aten::scaled_dot_product_attention", 1, "the one line that replaces the naive module")
    if not fused:
        return [
            sdpa,
            expect_op("aten::_scaled_dot_product_attention_math", 1, "the reference: attention op by op"),
            expect_op("aten::tril", 1, "is_causal: the mask is rebuilt every call (ones -> tril -> where)"),
            expect_op("aten::_safe_softmax", 1, "NaN-safe softmax instead of a bare aten::softmax"),
            expect_op("aten::matmul", 2, "q @ k.T and attn @ v"),
            *(
                [expect_op("aten::_to_copy", 4, "q, k, v upcast to fp32, the output cast back", at_least=True)]
                if upcast
                else []
            ),
            expect_kernels(
                "gemm", 2, "fp32 GEMMs" + (", off the tensor cores (sgemm on the post's A100)" if upcast else "")
            ),
            expect_kernels("any", 10, "many small kernels besides (20 in all on the post's A100)", at_least=True),
        ]
    lines = [
        sdpa,
        expect_op(FUSED_OP[backend] + ("" if on_gpu else "_for_cpu"), 1, "dispatched straight to the fused backend"),
        expect_op("aten::_scaled_dot_product_attention_math", 0, "no op-by-op decomposition"),
        expect_kernels("attention", 1, "one fused kernel: the seq x seq scores never leave the chip"),
        expect_memcpy(0, "nothing copied"),
    ]
    if backend == "cudnn":
        return lines + [
            expect_op("aten::transpose", 0, "cuDNN reads [batch, heads, seq, head_dim] as it is"),
            expect_launches("cuLaunchKernelEx", 1, "launched through the driver, not cudaLaunchKernel", at_least=True),
        ]
    return lines + [
        expect_op("aten::transpose", 1, "views to the kernel's [batch, seq, heads, head_dim]", at_least=True)
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser, "attention shape", SHAPE)
    parser.add_argument(
        "--backend",
        choices=SDPA_BACKENDS,
        default="math",
        help="the SDPA backend pinned with sdpa_kernel (default: math)",
    )
    args = parser.parse_args(argv)
    run = setup(args, __file__)

    # math holds the scores (in fp32 for 16-bit inputs), a fused backend never does
    score_bytes = 0 if args.backend != "math" else 3 * (4 if run.dtype != torch.float32 else run.dtype.itemsize)
    # before allocating: refuse shapes that cannot fit; a tiny CPU step runs on one thread
    fit_machine(run, *attention_memory(args, run.dtype, score_bytes), attention_work(args, run.dtype.itemsize).flops)
    q, k, v = make_qkv(args, run)  # [batch, heads, seq, head_dim]
    attention = torch.compile(sdpa_attention) if run.compiled else sdpa_attention

    tag = run.tag(*shape_of(args, SHAPE), args.backend)
    with torch.no_grad(), sdpa_kernel(SDPA_BACKENDS[args.backend]):  # only this backend may run
        require_sdpa_backend(args.backend, q, k, v, run)
        if run.warm:  # --warmup: a few unprofiled calls first, so compile and set-up costs stay out of the trace
            warm_up(lambda: attention(q, k, v), run)
        # on_trace_ready's writer: traces/<script>/<tag>.json (the trace) and .txt (the table)
        files = TraceFiles(run, tag, "attn_fwd", attention_work(args, q.element_size()))
        with profile(
            activities=activities(run),
            schedule=run.schedule.torch(),
            record_shapes=True,
            profile_memory=run.memory,
            on_trace_ready=files.save,
        ) as prof:
            for _ in range(run.schedule.steps):
                with record_function("attn_fwd"):
                    out = attention(q, k, v)
                sync(run)
                prof.step()
        check_output(
            files, out, reference_attention(q, k, v, reference_dtype(run.dtype)), run.dtype, f"SDPA ({args.backend})"
        )

        trace = read_trace(files.json)
        verdicts = check_guess(trace, guess(args.backend, run.compiled, run.on_gpu, run.dtype != torch.float32))
        print_report(files, trace, verdicts, run)
        if args.bench:  # still pinned: --bench times the same backend
            print_bench(bench(lambda: attention(q, k, v), run.on_gpu), trace)
    print_files(files, run)
    return exit_code(verdicts, run.strict)


if __name__ == "__main__":
    raise SystemExit(main())
