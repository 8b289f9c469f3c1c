"""Profile one training step of a pre-norm decoder block: forward, backward, AdamW (beyond the posts: Parts 1-3).

Usage:
    uv run 05_training_step.py                          # batch 8, seq 1024 (8,192 tokens): 500 GFLOP a step
    uv run 05_training_step.py --compile                # Inductor fuses the RMSNorm and GeGLU pointwise ops
    uv run 05_training_step.py --cudagraphs             # reduce-overhead: CUDA graphs, one launch per graph (GPU only)
    uv run 05_training_step.py --batch 1 --seq 128      # the same step, bound by launch overhead
    uv run 05_training_step.py --batch 1 --seq 128 --cudagraphs --bench
    uv run 05_training_step.py --fused-optimizer        # AdamW(fused=True): the update in one kernel
    uv run 05_training_step.py --dtype bf16             # pure bf16: parameters, activations, AdamW state

By default parameters and AdamW's moments are fp32 and the forward runs under bf16 autocast, as real training
keeps them; --dtype names one dtype for everything. The step is `train_step` with `forward`, `backward` and
`optimizer` inside it, so the summary, the diff and the run's report show a row per phase. --cudagraphs needs
a CUDA GPU; eager and --compile run on the CPU too.

Writes traces/05_training_step/<tag>.json (Chrome trace) and .txt (profiler table), the tag being
<batch>_<seq>_<dim>_<heads>_<hidden>[_cudagraphs][_fusedadamw][_amp]_<dtype>_<cold|warm>_<eager|compiled>,
e.g. 8_1024_768_12_3072_amp_bf16_cold_eager.
"""

from common.harness.early import CUDA_GRAPHS_NEED_GPU, importing_torch, refuse_without_gpu
from common.harness.flags import add_shape_flags, make_parser
from common.workloads.shapes import AMP_DTYPE_HELP, BlockShape

# Before torch loads (about 10 s on a laptop): what this machine cannot run is refused in a second.
refuse_without_gpu(__name__, CUDA_GRAPHS_NEED_GPU, flag="--cudagraphs")
# The flags, built before torch loads: a typo is refused in a second, not after torch (5-12 s on a laptop).
parser = make_parser(__doc__, dtype_help=AMP_DTYPE_HELP)  # no --dtype: fp32 parameters, bf16 autocast
add_shape_flags(parser, "decoder block shape", BlockShape)
parser.add_argument(
    "--cudagraphs",
    action="store_true",
    help="torch.compile(mode='reduce-overhead'): forward and backward replayed as CUDA graphs, GPU only (default: off)",
)
parser.add_argument(
    "--fused-optimizer",
    action="store_true",
    help="AdamW(fused=True) (default: off: foreach on a GPU, a per-parameter loop on the CPU)",
)
importing_torch(__name__, parser)  # every flag checked first, then a line (and one every 10 s) while torch loads

import torch
import torch.nn.functional as F
from torch import nn
from torch.profiler import ProfilerActivity, profile, record_function, schedule

from common.cli import cli, end_process
from common.harness.estimate import announce_compile, phase
from common.harness.guess import (
    BESIDES_GEMMS,
    Expect,
    expect_graph_launches,
    expect_kernel_launches,
    expect_kernels,
    expect_memcpy,
    expect_op,
    in_phase,
)
from common.harness.recording import finish, recording, say_estimate
from common.harness.runtime import fit_machine, setup, shape_of
from common.workloads.block import (
    AMP,
    block_memory,
    block_reference,
    block_work,
    check_shape,
    describe_step,
    make_batch,
    memory_lines,
    require_cuda_graphs,
    saved_for_backward,
    training_precision,
)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x) * self.weight


class CausalSelfAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv_proj = nn.Linear(dim, 3 * dim, bias=False)
        self.out_proj = nn.Linear(dim, dim, bias=False)

    def forward(self, x):
        b, s, d = x.shape
        q, k, v = self.qkv_proj(x).split(d, dim=-1)
        q, k, v = (t.view(b, s, self.heads, d // self.heads).transpose(1, 2) for t in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)  # [b, heads, s, head_dim]
        return self.out_proj(y.transpose(1, 2).reshape(b, s, d))


class SimpleGeGLUMLP(nn.Module):  # the post's MLP (03_simple_mlp.py)
    def __init__(self, dim, hidden):
        super().__init__()
        self.gate_proj = nn.Linear(dim, hidden, bias=False)
        self.up_proj = nn.Linear(dim, hidden, bias=False)
        self.down_proj = nn.Linear(hidden, dim, bias=False)

    def forward(self, x):
        return self.down_proj(F.gelu(self.gate_proj(x), approximate="tanh") * self.up_proj(x))


class DecoderBlock(nn.Module):
    def __init__(self, dim, heads, hidden):
        super().__init__()
        self.attn_norm = RMSNorm(dim)
        self.attn = CausalSelfAttention(dim, heads)
        self.mlp_norm = RMSNorm(dim)
        self.mlp = SimpleGeGLUMLP(dim, hidden)

    def forward(self, x):
        x = x + self.attn(self.attn_norm(x))
        return x + self.mlp(self.mlp_norm(x))


def train_step(model, x, target, optimizer, amp):
    # one step in three phases; returns the block's output, for the correctness check
    with record_function("forward"), torch.autocast(x.device.type, torch.bfloat16, enabled=amp):
        y = model(x)
        loss = F.mse_loss(y, target)
    with record_function("backward"):
        loss.backward()
    with record_function("optimizer"):
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    return y.detach()


def guess(variant: str, precision: str, fused_optimizer: bool, on_gpu: bool) -> list[Expect]:
    """What one profiled step should show, phase by phase: (phase, what, how many, why) per variant, a count
    that differs by precision given as {amp, 16-bit, fp32}. README.md's training-step section derives each count
    and lists the first guesses that missed on the H200.

    variant: eager, compile or cudagraphs; precision: "amp" (fp32 parameters, bf16 autocast) or bf16/fp16/fp32.
    """
    graphs, amp = variant == "cudagraphs", precision == AMP
    n = lambda amp_, half, fp32: amp_ if amp else half if precision in ("bf16", "fp16") else fp32  # noqa: E731
    ops, kernels, launches = expect_op, expect_kernels, expect_kernel_launches
    rows = [  # every variant
        ("forward", ops("aten::mm", 0 if graphs else 5, "one mm per projection (replayed under graphs: none)")),
        ("forward", kernels("gemm", 5, "qkv, out, gate, up, down; cuBLAS may split a long-K one", at_least=True)),
        ("forward", kernels("attention", 1, "SDPA's one fused kernel (cuDNN's on the H200)")),
        ("backward", ops("aten::mm", 0 if graphs else 10, "twice the forward's: input and weight gradients")),
        ("backward", kernels("gemm", 10, "each projection's input and weight gradient", at_least=True)),
        ("backward", kernels("attention", 1, "one fused backward kernel, beside small helpers", at_least=True)),
        *(("optimizer", line) for line in adamw_guess(fused_optimizer, on_gpu)),
        ("", expect_memcpy(1 if variant == "eager" else 0, "pow's backward: self.pow(1) is a device copy, eager only")),
    ]
    if variant == "eager":
        rows += [
            ("forward", kernels(BESIDES_GEMMS, n(27, 23, 19), "one kernel per op: nothing is fused")),
            ("forward", launches(n(32, 28, 24), "one launch per kernel, GEMMs included", at_least=True)),
            ("forward", ops("aten::linear", n(10, 5, 5), "each nn.Linear call (twice under autocast)")),
            ("backward", kernels(BESIDES_GEMMS, n(37, 29, 27), "each forward op's gradient, op by op")),
            ("backward", launches(n(47, 39, 37), "one launch per kernel, GEMMs included", at_least=True)),
        ]
    else:
        rows += [
            ("forward", kernels("triton", n(9, 4, 4), "Inductor's: casts, both RMSNorms, gelu * mul, a residual add")),
            ("forward", kernels("rsqrt", 2, "each RMSNorm's pow, mean, rsqrt and muls in one kernel")),
            ("forward", kernels(r"gelu.*mul|mul.*gelu", 1, "GeGLU's gelu and mul fused, as 03_simple_mlp --compile")),
            ("forward", kernels("pointwise", 1 + graphs, "the eager loss's kernel" + " and the input copy" * graphs)),
            ("forward", kernels(BESIDES_GEMMS, n(12, 7, 7) + graphs, "triton + attention + the eager loss's 2")),
            ("forward", ops("aten::linear", 0, "Inductor calls mm directly")),
            ("backward", kernels("triton", n(10, 4, 4), "the backward graph's fused kernels", at_least=True)),
            ("backward", kernels("gelu_backward", 1, "gelu's backward and the mul's two gradients in one kernel")),
        ]
    if variant == "compile":
        rows += [
            ("forward", launches(n(17, 12, 12), "one launch per kernel", at_least=True)),
            ("backward", launches(n(26, 20, 20), "one launch per kernel", at_least=True)),
        ]
    if graphs:
        rows += [
            ("forward", expect_graph_launches(1, "the forward graph: every kernel of the block in one launch")),
            ("forward", launches(3, "outside the graph: the input copy, the eager loss's 2")),
            ("backward", expect_graph_launches(1, "the backward graph, launched from autograd's thread")),
            ("backward", launches(4, "outside the graph: ones_like, mse_loss_backward (2), the gradient copy")),
        ]
    return [out for phase, line in rows for out in (in_phase(phase, line) if phase else [line])]


def adamw_guess(fused: bool, on_gpu: bool) -> list[Expect]:
    """AdamW's ops and kernels: fused, foreach (the default on a GPU) or a per-parameter loop (on the CPU)."""
    if fused:
        return [
            expect_op("aten::_fused_adamw_", 1, "fused=True: one op updates every parameter and both moments"),
            expect_kernels("multi_tensor_apply", 2, "the step counts += 1 on the GPU, then the fused update"),
        ]
    if not on_gpu:
        return [
            expect_op("aten::lerp_", 7, "on the CPU AdamW loops over the 7 parameters: exp_avg.lerp_(grad) each"),
            expect_op("aten::addcdiv_", 7, "and param.addcdiv_(exp_avg, denom) each"),
        ]
    return [
        expect_op("aten::_foreach_lerp_", 1, "foreach: one op per line of the update, for all 7 parameters"),
        expect_kernels("multi_tensor_apply", 8, "decay, lerp, mul, addcmul, sqrt, div, add eps, addcdiv: one each"),
        expect_kernel_launches(8, "the optimizer is not compiled: its launches stay, under --cudagraphs too"),
    ]


@cli
def main(argv: list[str] | None = None) -> int:
    args = parser.parse_args(argv)
    run = setup(args, __file__, compiled=args.compile or args.cudagraphs, optimizer=True)
    precision = training_precision(args.dtype, run.dtype_name)  # --dtype left out: AMP where bf16 is fast
    amp = precision == AMP
    require_cuda_graphs(args.cudagraphs, run)
    check_shape(args.dim, args.heads)
    shape = shape_of(args, BlockShape)  # batch, seq, dim, heads, hidden
    param_dtype = torch.float32 if amp else run.dtype
    ref_bytes = run.reference_dtype.itemsize
    work = block_work(shape, param_dtype.itemsize, param_dtype.itemsize, amp, args.fused_optimizer, ref_bytes)
    fit_machine(run, *block_memory(shape, precision, run.dtype), work.flops)  # before any tensor exists

    block = DecoderBlock(args.dim, args.heads, args.hidden).to(run.device, param_dtype)
    x, target = make_batch(args.batch, args.seq, args.dim, run.device, param_dtype)  # [batch, seq, dim] each
    eps = 1e-4 if param_dtype == torch.float16 else 1e-8  # 1e-8 is 0 in fp16: AdamW's 0/0 would make NaN weights
    optimizer = torch.optim.AdamW(block.parameters(), lr=1e-4, eps=eps, fused=args.fused_optimizer or None)
    model = torch.compile(block, mode="reduce-overhead" if args.cudagraphs else None) if run.compiled else block
    variant = "cudagraphs" if args.cudagraphs else "compile" if run.compiled else "eager"
    print(describe_step(variant, precision, args.fused_optimizer, by_default=args.dtype is None))
    variant_words = ["cudagraphs"] * args.cudagraphs + ["fusedadamw"] * args.fused_optimizer + [AMP] * amp
    tag = run.tag(*shape, *variant_words)  # files: traces/05_training_step/<tag>.*
    said = say_estimate(run, work, checked_first=True, tag=tag)  # before the reference and the checked step

    with phase("the reference: the block's forward in higher precision", said):
        expected = block_reference(block, x, run.dtype)  # from the weights before the first step
    if run.compiled:
        announce_compile(backward=True, said=said)
    # the first step, not profiled, is the one checked (a CUDA graph's output is overwritten by the next replay)
    with phase("the first step, the one checked against the reference", said):
        checked = train_step(model, x, target, optimizer, amp).clone()
    print("\n".join(memory_lines(block, optimizer, saved_for_backward(shape, precision, run.dtype))))
    with recording(run, tag, work, said=said) as rec:
        if args.warmup:  # a few unprofiled steps first, so compile and set-up costs stay out of the trace
            rec.warm_up(lambda: train_step(model, x, target, optimizer, amp))
        with profile(
            activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if run.on_gpu else []),
            schedule=schedule(wait=args.wait, warmup=args.warmup_steps, active=args.active, repeat=1),
            record_shapes=True,
            profile_memory=args.memory,
            on_trace_ready=rec.save,
        ) as prof:
            for _ in range(args.wait + args.warmup_steps + args.active):
                with record_function("train_step"):
                    train_step(model, x, target, optimizer, amp)
                if run.on_gpu:
                    torch.cuda.synchronize()
                prof.step()
    guessed = guess(variant, precision, args.fused_optimizer, run.on_gpu)
    return finish(
        rec, guessed, checked, expected, step=lambda: train_step(model, x, target, optimizer, amp), what="DecoderBlock"
    )


if __name__ == "__main__":
    end_process(main())  # main's exit code, the prompt back at once (common.cli.end_process)
