"""Profile FlashAttention loaded from the Hugging Face Hub with `kernels`, fed its own [B, S, H, D] layout (Part 3).

Usage:
    uv run 04_d_kernels_attention.py
    uv run 04_d_kernels_attention.py --repo kernels-community/flash-attn2 --version 1
    uv run 04_d_kernels_attention.py --kernel-dir path/to/flash-attn2   # a local kernel directory, no Hub

The kernel is kernels-community/flash-attn3 on Hopper (sm90) and kernels-community/flash-attn2 on other
GPUs (sm80+). Without the Hub (offline, HF_HUB_OFFLINE=1, kernel not cached) an installed FlashAttention
package with the same API (flash_attn_interface, flash_attn) is used, saying so; otherwise the run stops
and says how to get the kernel (e.g. `hf download kernels-community/flash-attn3 --local-dir flash-attn3` on
a machine with a network, then --kernel-dir flash-attn3: that works without `kernels`). Never SDPA: that
is 04_c. It needs a CUDA GPU.

Writes traces/04_d_kernels_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<source>_<dtype>_<cold|warm>_<eager|compiled> and the source hub-<repo name>,
pkg-<module> or local, e.g. 8_16_1024_64_hub-flash-attn2_bf16_cold_eager.
"""

import torch
from torch.profiler import profile, record_function

from common.attention import SHAPE, attention_memory, attention_work, make_qkv, reference_attention
from common.bench import bench
from common.checks import check_output, reference_dtype
from common.cli import SuiteError, cli, positive_int
from common.export import TraceFiles
from common.guess import Expect, check_guess, expect_kernels, expect_memcpy, expect_op
from common.hub import (
    FLASH_VERSION,
    HubError,
    default_flash_repo,
    flash_attn_func_of,
    hub_access,
    installed_flash_attn,
    load_local_kernel,
)
from common.profiling import activities, sync, warm_up
from common.report import exit_code, print_bench, print_files, print_report
from common.runtime import add_shape_flags, fit_machine, make_parser, setup, shape_of
from common.trace import read_trace

try:
    from kernels import get_kernel
except ImportError:  # the script still runs without `kernels`: hub_access says how to install it
    get_kernel = None

MAX_HEAD_DIM = 256  # FlashAttention 2 and 3 support head_dim up to 256, in multiples of 8


def flash_attention(flash_attn_func, q, k, v):
    # q, k, v: [batch, seq, heads, head_dim], the kernel's own layout: nothing to transpose
    out = flash_attn_func(q, k, v, causal=True)
    return out[0] if isinstance(out, tuple) else out  # flash-attn3 may return (out, softmax_lse)


def guess() -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    return [
        expect_kernels("attention", 1, "one fused kernel: q @ k.T, causal mask, online softmax and @ v, on chip"),
        expect_kernels("gemm", 0, "no separate GEMMs"),
        expect_kernels("softmax", 0, "no softmax kernel: the [seq, seq] scores never reach memory"),
        expect_op("aten::transpose", 0, "no layout transposes: q, k, v arrive as [B, S, H, D]"),
        expect_op("aten::scaled_dot_product_attention", 0, "the Hub kernel is called directly, not through SDPA"),
        expect_memcpy(0, "nothing copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser, "attention shape", SHAPE)
    hub = parser.add_argument_group("which kernel")
    hub.add_argument(
        "--repo",
        default=None,
        help="Hub repository of the kernel (default: kernels-community/flash-attn3 on sm90, "
        "kernels-community/flash-attn2 otherwise)",
    )
    ref = hub.add_mutually_exclusive_group()
    ref.add_argument("--version", type=positive_int, default=None, help=f"kernel version (default: {FLASH_VERSION})")
    ref.add_argument(
        "--revision", default=None, help="a branch, tag or commit instead of --version (default: none, use --version)"
    )
    hub.add_argument(
        "--kernel-dir",
        default=None,
        help="load the kernel from this local kernel directory (build/<variant>/...) instead of the "
        "Hub (default: none, the Hub)",
    )
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    if not run.on_gpu:
        raise SuiteError(
            "FlashAttention needs a CUDA GPU and this run is on the CPU; 04_a/04_b/04_c (--backend math) run on the CPU"
        )
    if run.dtype == torch.float32:
        raise SuiteError("FlashAttention computes in bf16 or fp16, not fp32: drop --dtype fp32")
    if args.head_dim > MAX_HEAD_DIM or args.head_dim % 8:
        raise SuiteError(f"--head_dim {args.head_dim}: FlashAttention supports multiples of 8 up to {MAX_HEAD_DIM}")

    # The kernel, from the Hub as the post loads it (or from a local kernel directory, or an installed package).
    repo = args.repo or default_flash_repo(torch.cuda.get_device_capability(run.device))
    version = None if args.revision else (args.version or FLASH_VERSION)
    if args.kernel_dir:
        flash_attn_func, source = flash_attn_func_of(load_local_kernel(args.kernel_dir), args.kernel_dir), "local"
    else:
        try:
            with hub_access(repo):
                flash_attn_func = get_kernel(repo, version=version, revision=args.revision).flash_attn_func
                source = f"hub-{repo.split('/')[-1]}"
        except HubError as exc:
            flash_attn_func, source = installed_flash_attn(exc, repo)
    print(f"kernel: flash_attn_func from {source} ({getattr(flash_attn_func, '__module__', '?')})")

    # before allocating: refuse shapes that cannot fit; a tiny CPU step runs on one thread
    fit_machine(
        run, *attention_memory(args, run.dtype, score_bytes=0), attention_work(args, run.dtype.itemsize).flops
    )  # fused: no [seq, seq] scores
    q, k, v = make_qkv(args, run, layout="bshd")  # [batch, seq, heads, head_dim]: FlashAttention's own layout
    fn = torch.compile(flash_attention) if run.compiled else flash_attention

    with torch.no_grad():
        if run.warm:  # --warmup: a few unprofiled calls first, so compile and set-up costs stay out of the trace
            warm_up(lambda: fn(flash_attn_func, q, k, v), run)
        # on_trace_ready's writer: traces/<script>/<tag>.json (the trace) and .txt (the table)
        files = TraceFiles(
            run, run.tag(*shape_of(args, SHAPE), source), "attn_fwd", attention_work(args, q.element_size())
        )
        with profile(
            activities=activities(run),
            schedule=run.schedule.torch(),
            record_shapes=True,
            profile_memory=run.memory,
            on_trace_ready=files.save,
        ) as prof:
            for _ in range(run.schedule.steps):
                with record_function("attn_fwd"):
                    out = fn(flash_attn_func, q, k, v)
                sync(run)
                prof.step()
        # The reference works in [B, H, S, D]; the layout changes happen here, outside the profiled steps.
        expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), reference_dtype(run.dtype))
        check_output(files, out, expected.transpose(1, 2), run.dtype, f"flash_attn_func ({source})")

    trace = read_trace(files.json)
    verdicts = check_guess(trace, guess())
    print_report(files, trace, verdicts, run)
    if args.bench:
        print_bench(bench(lambda: fn(flash_attn_func, q, k, v), run.on_gpu), trace)
    print_files(files, run)
    return exit_code(verdicts, run.strict)


if __name__ == "__main__":
    raise SystemExit(main())
