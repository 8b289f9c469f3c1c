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
from torch.profiler import profile, record_function

from common.bench import bench
from common.checks import check_close
from common.cli import SuiteError, cli
from common.export import TraceFiles
from common.guess import Expect, check_guess, expect_kernels, expect_op
from common.hub import HubError, hub_access, liger_mlp_like, pypi_liger_geglu
from common.mlp import SHAPE, make_input, mlp_memory, mlp_work, reference_output, simple_mlp_class
from common.profiling import activities, sync, warm_up
from common.report import exit_code, print_bench, print_files, print_report
from common.runtime import add_shape_flags, fit_machine, make_parser, setup, shape_of
from common.trace import read_trace

try:
    from kernels import get_kernel
except ImportError:  # the script still runs without `kernels`: hub_access says how to install it
    get_kernel = None


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
        expect_kernels("geglu", 1, "one hand-written Triton kernel: _geglu_tanh_forward_kernel, gelu(gate) * up"),
        expect_kernels("triton", 0, "no Inductor-generated (triton_*) kernels"),
        expect_kernels("pointwise", 0, "no eager pointwise kernels"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    parser = make_parser(__doc__)
    add_shape_flags(parser, "MLP shape", SHAPE)
    parser.add_argument(
        "--source",
        choices=("auto", "hub", "pypi"),
        default="auto",
        help="where LigerGEGLUMLP comes from: the Hub (as in the post), the liger-kernel "
        "package on PyPI, or auto: the Hub, else PyPI (default: auto)",
    )
    args = parser.parse_args(argv)
    run = setup(args, __file__)
    if not run.on_gpu:
        raise SuiteError(
            "LigerGEGLUMLP is a Triton kernel and needs a CUDA GPU; on this machine run 03_simple_mlp.py instead"
        )

    # before allocating: refuse shapes that cannot fit; a tiny CPU step runs on one thread
    fit_machine(
        run, *mlp_memory(args, run.dtype, models=2), mlp_work(args, run.dtype.itemsize).flops
    )  # SimpleGeGLUMLP's weights, copied into Liger's

    # The layer, as the post loads it; hub_access makes the call offline-aware and its failures one line.
    LigerGEGLUMLP, source = None, "pypi"
    if args.source != "pypi":
        try:
            with hub_access("kernels-community/liger-kernels"):
                kernels_layers = get_kernel("kernels-community/liger-kernels", version=1).layers
                LigerGEGLUMLP, source = kernels_layers.LigerGEGLUMLP, "hub"
        except HubError as exc:
            if args.source == "hub":
                raise SuiteError(f"{exc}; or use --source pypi") from None
            print(f"notice: {exc}")
            print(
                "notice: falling back to LigerGEGLUMLP from the liger-kernel package on PyPI (the same Triton kernel)"
            )
    if LigerGEGLUMLP is None:
        LigerGEGLUMLP = pypi_liger_geglu()
    print(f"LigerGEGLUMLP from {source} ({LigerGEGLUMLP.__module__})")

    # The post's SimpleGeGLUMLP from the same seed as in 03_simple_mlp.py: the same weights and x, for comparison.
    simple = simple_mlp_class()(args.dim, args.hidden).to(run.device, run.dtype)
    x = make_input(args, run)  # [batch, seq, dim]
    liger = liger_mlp_like(LigerGEGLUMLP, simple)  # LigerGEGLUMLP holding SimpleGeGLUMLP's weights
    mlp = torch.compile(liger) if run.compiled else liger

    with torch.no_grad():
        # Checked before profiling: a layer from another build must prove itself before any trace is written
        # (this also JIT-compiles the Triton kernel; the default schedule's skipped steps would anyway).
        check_close(liger(x), reference_output(simple, x, run.dtype), run.dtype, f"LigerGEGLUMLP ({source})")
        if run.warm:  # --warmup: a few unprofiled calls first, so compile and set-up costs stay out of the trace
            warm_up(lambda: mlp(x), run)
        # on_trace_ready's writer: traces/<script>/<tag>.json (the trace) and .txt (the table)
        files = TraceFiles(run, run.tag(*shape_of(args, SHAPE), source), "mlp_fwd", mlp_work(args, x.element_size()))
        with profile(
            activities=activities(run),
            schedule=run.schedule.torch(),
            record_shapes=True,
            profile_memory=run.memory,
            on_trace_ready=files.save,
        ) as prof:
            for _ in range(run.schedule.steps):
                with record_function("mlp_fwd"):
                    mlp(x)
                sync(run)
                prof.step()

    trace = read_trace(files.json)
    verdicts = check_guess(trace, guess(run.compiled))
    print_report(files, trace, verdicts, run)
    if args.bench:
        print_bench(bench(lambda: mlp(x), run.on_gpu), trace)
    print_files(files, run)
    return exit_code(verdicts, run.strict)


if __name__ == "__main__":
    raise SystemExit(main())
