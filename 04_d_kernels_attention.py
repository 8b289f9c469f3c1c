"""Profile FlashAttention loaded from the Hugging Face Hub with `kernels`, fed its own [B, S, H, D] layout (Part 3).

Usage:
    uv run 04_d_kernels_attention.py
    uv run 04_d_kernels_attention.py --repo kernels-community/flash-attn2 --version 1
    uv run 04_d_kernels_attention.py --kernel-dir path/to/flash-attn2   # a local kernel directory, no Hub

The kernel is kernels-community/flash-attn3 on Hopper (sm90) and kernels-community/flash-attn2 on other
GPUs (sm80+). Without the Hub (offline, HF_HUB_OFFLINE=1, kernel not cached) an installed FlashAttention
package with the same API (flash_attn_interface, flash_attn) is used, saying so; otherwise the run stops
and says how to get the kernel. Never SDPA: that is 04_c. It needs a CUDA GPU.

Writes traces/04_d_kernels_attention/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<heads>_<seq>_<head_dim>_<source>_<dtype>_<cold|warm>_<eager|compiled> and the source hub-<repo name>,
pkg-<module> or local, e.g. 8_16_1024_64_hub-flash-attn2_bf16_cold_eager.
"""

import torch

from common import (Expect, SuiteError, check_output, cli, cpu_op, kernels, make_parser, memcpy, positive_int,
                    profile_steps, reference_dtype, report, setup)
from common.attention import add_shape_flags, attention_work, make_qkv, reference_attention, shape_tag
from common.hub import FLASH_VERSION, default_flash_repo, load_flash_attn

MAX_HEAD_DIM = 256  # FlashAttention 2 and 3 support head_dim up to 256, in multiples of 8


def flash_attention(flash_attn_func, q, k, v):
    # q, k, v: [batch, seq, heads, head_dim], the kernel's own layout: nothing to transpose
    out = flash_attn_func(q, k, v, causal=True)
    return out[0] if isinstance(out, tuple) else out  # flash-attn3 may return (out, softmax_lse)


def guess() -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    return [
        kernels("attention", 1, "one fused kernel: q @ k.T, causal mask, online softmax and @ v, on chip"),
        kernels("gemm", 0, "no separate GEMMs"),
        kernels("softmax", 0, "no softmax kernel: the [seq, seq] scores never reach memory"),
        cpu_op("aten::transpose", 0, "no layout transposes: q, k, v arrive as [B, S, H, D]"),
        cpu_op("aten::scaled_dot_product_attention", 0, "the Hub kernel is called directly, not through SDPA"),
        memcpy(0, "nothing copied"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser)
    hub = parser.add_argument_group("which kernel")
    hub.add_argument("--repo", default=None,
                     help="Hub repository of the kernel (default: kernels-community/flash-attn3 on sm90, "
                          "kernels-community/flash-attn2 otherwise)")
    ref = hub.add_mutually_exclusive_group()
    ref.add_argument("--version", type=positive_int, default=None, help=f"kernel version (default: {FLASH_VERSION})")
    ref.add_argument("--revision", default=None, help="a branch, tag or commit instead of --version")
    hub.add_argument("--kernel-dir", default=None,
                     help="load the kernel from this local kernel directory (build/<variant>/...) instead of the Hub")
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    if not run.on_gpu:
        raise SuiteError("FlashAttention needs a CUDA GPU and this run is on the CPU; "
                         "04_a/04_b/04_c (--backend math) run on the CPU")
    if run.dtype == torch.float32:
        raise SuiteError("FlashAttention computes in bf16 or fp16, not fp32: drop --dtype fp32")
    if args.head_dim > MAX_HEAD_DIM or args.head_dim % 8:
        raise SuiteError(f"--head_dim {args.head_dim}: FlashAttention supports multiples of 8 up to {MAX_HEAD_DIM}")

    repo = args.repo or default_flash_repo(torch.cuda.get_device_capability(run.device))
    version = None if args.revision else (FLASH_VERSION if args.version is None else args.version)
    flash_attn_func, source = load_flash_attn(repo, version, args.revision, args.kernel_dir)
    print(f"kernel: flash_attn_func from {source} ({getattr(flash_attn_func, '__module__', '?')})")

    q, k, v = make_qkv(args, run, layout="bshd")  # [batch, seq, heads, head_dim]: FlashAttention's own layout
    fn = torch.compile(flash_attention) if run.compiled else flash_attention
    with torch.no_grad():
        result = profile_steps(lambda: fn(flash_attn_func, q, k, v), "attn_fwd", run,
                               run.tag(*shape_tag(args), source), attention_work(args, q.element_size()))
        # The reference works in [B, H, S, D]; the layout changes happen here, outside the profiled steps.
        expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), reference_dtype(run.dtype))
        check_output(result, expected.transpose(1, 2), run.dtype, f"flash_attn_func ({source})")
    return report(result, run, guess())


if __name__ == "__main__":
    raise SystemExit(main())
