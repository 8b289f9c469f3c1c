"""Profile FlashAttention loaded from the Hugging Face Hub with `kernels`, fed its own [B, S, H, D] layout (Part 3).

Usage:
    uv run 04_d_kernels_attention.py
    uv run 04_d_kernels_attention.py --repo kernels-community/flash-attn2 --version 1
    uv run 04_d_kernels_attention.py --kernel-dir path/to/flash-attn2   # a local kernel directory, no Hub

The kernel is kernels-community/flash-attn3 on Hopper (sm90) and kernels-community/flash-attn2 on other
GPUs (sm80+). Without the Hub (offline, HF_HUB_OFFLINE=1, kernel not cached) an installed FlashAttention
package with the same API (FA3's flash_attn_interface, FA4's flash_attn.cute from `pip install flash-attn-4`,
FA2's flash_attn, in that order) is used, saying so; otherwise the run stops
and says how to get the kernel (e.g. `hf download kernels-community/flash-attn3 --local-dir flash-attn3` on
a machine with a network, then --kernel-dir flash-attn3: that needs `kernels` but no network). Never SDPA: that
is 04_c. It needs a CUDA GPU.

Writes traces/04_d_kernels_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<source>_<dtype>_<cold|warm>_<eager|compiled> and the source hub-<repo name>,
pkg-<module> (dots as underscores) or local, e.g. 8_16_1024_64_hub-flash-attn2_bf16_cold_eager or
8_16_1024_64_pkg-flash_attn_cute_bf16_cold_eager.
"""

from common.cli import positive_int
from common.harness.early import FLASH_NEEDS_GPU, importing_torch, refuse_without_gpu
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import FLASH_VERSION, AttentionShape

# Before torch loads (about 10 s on a laptop): what this machine cannot run is refused in a second.
refuse_without_gpu(__name__, FLASH_NEEDS_GPU)
# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
add_shape_flags(parser, "attention shape", AttentionShape)
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
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_memcpy, expect_op
from common.harness.hub import HubError, hub_access, load_local_kernel
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.attention import (
    attention_budget,
    default_flash_repo,
    flash_attn_func_of,
    installed_flash_attn,
    make_qkv,
    reference_attention,
    require_flash,
)


def flash_attention(flash_attn_func, q, k, v):
    # q, k, v: [batch, seq, heads, head_dim], the kernel's own layout: nothing to transpose
    out = flash_attn_func(q, k, v, causal=True)
    return out[0] if isinstance(out, tuple) else out  # FA3 and FA4 return (out, softmax_lse), FA2 out


# FA4's Hopper forward kernel: the CuTe DSL names it after the class whose `kernel` method it compiled.
FA4_KERNEL = r"FlashAttentionForwardSm90"


def guess(source: str = "local") -> list[Expect]:
    """What one profiled step should show, written down before looking; `source` is the tag's kernel source."""
    fa4 = source == "pkg-flash_attn_cute"
    return [
        expect_kernels("attention", 1, "one fused kernel: q @ k.T, mask, softmax, @ v"),
        *([expect_kernels(FA4_KERNEL, 1, "FA4's CuTe DSL kernel for sm90, compiled on the first call")] if fa4 else []),
        expect_kernels("any", 1, "nothing else on the GPU: no layout copies, no set-up kernels"),
        expect_kernels("gemm", 0, "no separate GEMMs"),
        expect_kernels("pointwise", 0, "no mask kernel: the causal mask is applied inside the tiles"),
        expect_kernels("softmax", 0, "no softmax kernel: scores never reach memory"),
        expect_op("aten::transpose", 0, "no transposes: q, k, v come as [B, S, H, D]"),
        expect_op("aten::scaled_dot_product_attention", 0, "the Hub kernel called directly, not SDPA"),
        expect_memcpy(0, "nothing copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    require_flash(run, args.head_dim)  # a CUDA GPU, bf16 or fp16, a head_dim FlashAttention supports
    shape = shape_of(args, AttentionShape)  # batch, heads, seq, head_dim
    work, need = attention_budget("kernel", shape, run)  # fused: no [seq, seq] scores
    fit_machine(run, *need, work.flops)

    # The kernel, from the Hub as the post loads it (or from a local kernel directory, or an installed package).
    repo = args.repo or default_flash_repo(torch.cuda.get_device_capability(run.device))
    version = None if args.revision else (args.version or FLASH_VERSION)
    if args.kernel_dir:
        flash_attn_func, source = flash_attn_func_of(load_local_kernel(args.kernel_dir), args.kernel_dir), "local"
    else:
        try:
            with hub_access(repo):
                from kernels import get_kernel  # here, so a machine without `kernels` gets hub_access's one line

                flash_attn_func = get_kernel(repo, version=version, revision=args.revision).flash_attn_func
            source = f"hub-{repo.split('/')[-1]}"
        except HubError as exc:
            flash_attn_func, source = installed_flash_attn(exc, repo)
    print(f"kernel: flash_attn_func from {source} ({getattr(flash_attn_func, '__module__', '?')})")

    q, k, v = make_qkv(shape, run, layout="bshd")  # [batch, seq, heads, head_dim]: FlashAttention's own layout
    fn = torch.compile(flash_attention) if args.compile else flash_attention

    with torch.no_grad(), recording(run, run.tag(*shape, source), work) as rec:
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: fn(flash_attn_func, q, k, v))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("attn_fwd"):
                    out = fn(flash_attn_func, q, k, v)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        # The reference works in [B, H, S, D]; the layout changes happen here, outside the profiled steps.
        expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), run.reference_dtype).transpose(1, 2)
    return finish(
        rec, guess(source), out, expected, lambda: fn(flash_attn_func, q, k, v), what=f"flash_attn_func ({source})"
    )


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
