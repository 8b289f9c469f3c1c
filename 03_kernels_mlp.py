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

from common.harness.early import importing_torch, refuse_without_gpu
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import MLPShape

NEEDS_GPU = "LigerGEGLUMLP is a Triton kernel and needs a CUDA GPU; on this machine run 03_simple_mlp.py"
# Before torch loads (about 10 s on a laptop): what this machine cannot run is refused in a second.
refuse_without_gpu(__name__, NEEDS_GPU)
# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__)
add_shape_flags(parser, "MLP shape", MLPShape)
parser.add_argument(
    "--source",
    choices=("auto", "hub", "pypi"),
    default="auto",
    help="where LigerGEGLUMLP comes from: the Hub (as in the post), the liger-kernel "
    "package on PyPI, or auto: the Hub, else PyPI (default: auto)",
)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import SuiteError, cli, end_process
from common.harness.guess import Expect, expect_kernels, expect_op
from common.harness.hub import HubError, hub_access
from common.harness.recording import finish, recording
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.mlp import (
    geglu_reference,
    liger_geglu,
    make_input,
    mlp_memory,
    mlp_work,
    pypi_liger_geglu,
)

REPO = "kernels-community/liger-kernels"


def guess(compiled: bool) -> list[Expect]:
    """What one profiled step should show, written down before looking."""
    return [
        expect_op(
            "aten::linear",
            0 if compiled else 3,
            "Inductor calls mm directly" if compiled else "gate_proj, up_proj, down_proj are still nn.Linear",
        ),
        expect_op("aten::mm", 3, "one mm per projection"),
        expect_op("aten::gelu", 0, "no eager GeLU ..."),
        expect_op("aten::mul", 0, "... and no eager mul: both are inside Liger's kernel"),
        expect_kernels("gemm", 3, "the same three cuBLAS GEMMs"),
        expect_kernels("geglu", 1, "Liger's hand-written Triton kernel: gelu(gate) * up"),
        expect_kernels("triton", 0, "no Inductor-generated (triton_*) kernels"),
        expect_kernels("pointwise", 0, "no eager pointwise kernels"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    if not run.on_gpu:
        raise SuiteError(NEEDS_GPU)
    shape = shape_of(args, MLPShape)  # batch, seq, dim, hidden
    work = mlp_work(shape, run.dtype.itemsize)
    fit_machine(run, *mlp_memory(shape, run.dtype), work.flops)  # before any tensor exists

    try:  # the layer, as the post loads it; hub_access makes the call offline-aware and its failures one line
        with hub_access(REPO, skip=args.source == "pypi"):
            from kernels import get_kernel  # here, so a machine without `kernels` gets hub_access's one line

            kernels_layers = get_kernel("kernels-community/liger-kernels", version=1).layers
        LigerGEGLUMLP, source = kernels_layers.LigerGEGLUMLP, "hub"
    except HubError as exc:  # --source auto: the same Triton kernel from the liger-kernel package on PyPI
        if args.source == "hub":
            raise SuiteError(f"{exc}; or use --source pypi") from None
        LigerGEGLUMLP, source = pypi_liger_geglu(exc if args.source == "auto" else None), "pypi"
    print(f"LigerGEGLUMLP from {source} ({LigerGEGLUMLP.__module__})")

    # gate/up/down made as in 03_simple_mlp.py, from the same seed: the same weights and x, for comparison
    liger = liger_geglu(LigerGEGLUMLP, args.dim, args.hidden, run.device, run.dtype)
    x = make_input(args.batch, args.seq, args.dim, run.device, run.dtype)  # [batch, seq, dim]
    mlp = torch.compile(liger) if args.compile else liger

    with torch.no_grad(), recording(run, run.tag(*shape, source), work) as rec:
        if args.warmup:  # a few unprofiled calls first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: mlp(x))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("mlp_fwd"):
                    y = mlp(x)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
        expected = geglu_reference(liger, x, run.dtype)
    return finish(rec, guess(args.compile), y, expected, step=lambda: mlp(x), what=f"LigerGEGLUMLP ({source})")


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
