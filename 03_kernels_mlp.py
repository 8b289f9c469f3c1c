"""Profile Liger's hand-written GeGLU MLP, loaded from the Hub with `kernels` (Part 2: from nn.Linear to a fused MLP).

Usage:
    uv run 03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072
    uv run 03_kernels_mlp.py --batch 64 --seq 128 --dim 768 --hidden 3072 --source pypi   # no Hub needed

The layer comes from get_kernel("kernels-community/liger-kernels", version=1).layers, as in the post.
Without the Hub (offline, HF_HUB_OFFLINE=1, kernel not cached) --source auto falls back, saying so,
to the same Triton kernel from the liger-kernel package on PyPI. It needs a CUDA GPU.

Writes traces/03_kernels_mlp/<batch>_<seq>_<dim>_<hidden>_<hub|pypi>_<dtype>_<cold|warm>_<eager|compiled>.json
and .txt, e.g. traces/03_kernels_mlp/64_128_768_3072_hub_bf16_cold_eager.json.
"""

import torch

from common import Expect, SuiteError, check_close, cli, cpu_op, kernels, make_parser, profile_steps, report, setup
from common.hub import LIGER_SOURCES, liger_mlp_like, load_liger_geglu
from common.mlp import add_shape_flags, make_input, mlp_work, reference_output, shape_tag, simple_mlp_class


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    return [
        cpu_op("aten::linear", 0 if compiled else 3, "Inductor calls mm directly" if compiled
               else "gate_proj, up_proj, down_proj are still nn.Linear"),
        cpu_op("aten::mm", 3, "one mm per projection"),
        cpu_op("aten::gelu", 0, "no eager GeLU ..."),
        cpu_op("aten::mul", 0, "... and no eager mul: both are inside Liger's kernel"),
        kernels("gemm", 3, "the same three cuBLAS GEMMs"),
        kernels("geglu", 1, "one hand-written Triton kernel: _geglu_tanh_forward_kernel, gelu(gate) * up"),
        kernels("triton", 0, "no Inductor-generated (triton_*) kernels"),
        kernels("pointwise", 0, "no eager pointwise kernels"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser)
    parser.add_argument("--source", choices=LIGER_SOURCES, default="auto",
                        help="where LigerGEGLUMLP comes from: the Hub (as in the post), the liger-kernel "
                             "package on PyPI, or auto: the Hub, else PyPI (default: auto)")
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    if not run.on_gpu:
        raise SuiteError("LigerGEGLUMLP is a Triton kernel and needs a CUDA GPU; on this machine run "
                         "03_simple_mlp.py instead")

    # The post's SimpleGeGLUMLP from the same seed as in 03_simple_mlp.py: the same weights and x, for comparison.
    simple = simple_mlp_class()(args.dim, args.hidden).to(run.device, run.dtype)
    x = make_input(args, run)  # [batch, seq, dim]
    # get_kernel("kernels-community/liger-kernels", version=1).layers.LigerGEGLUMLP, or PyPI's with --source pypi
    layer, source = load_liger_geglu(args.source)
    print(f"LigerGEGLUMLP from {source} ({layer.__module__})")
    liger = liger_mlp_like(layer, simple)
    mlp = torch.compile(liger) if run.compiled else liger

    with torch.no_grad():
        # Checked before profiling, eagerly: a layer from another build must prove itself before any trace is
        # written (this also JIT-compiles the Triton kernel; the default schedule's skipped steps would anyway).
        check_close(liger(x), reference_output(simple, x, run.dtype), run.dtype, f"LigerGEGLUMLP ({source})")
        result = profile_steps(lambda: mlp(x), "mlp_fwd", run, run.tag(*shape_tag(args), source),
                               mlp_work(args, x.element_size()))
    return report(result, run, guess(run.compiled))


if __name__ == "__main__":
    raise SystemExit(main())
