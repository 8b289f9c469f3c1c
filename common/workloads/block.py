"""The decoder-block family (05_training_step.py): shape flags, the batch, the higher-precision reference, the
physics and memory of one training step, and the bytes autograd saves for the backward."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from common.cli import SuiteError
from common.harness.checks import reference_dtype
from common.harness.early import CUDA_GRAPHS_NEED_GPU
from common.harness.runtime import Run
from common.physics import Work
from common.units import human_bytes
from common.workloads.attention import REFERENCE_PASSES, reference_attention
from common.workloads.shapes import AMP_DTYPE_HELP as AMP_DTYPE_HELP
from common.workloads.shapes import BlockShape as BlockShape

AMP = "amp"  # the default precision: fp32 parameters and AdamW state, bf16 autocast


def training_precision(dtype: str | None, resolved: str) -> str:
    """05's and 06's one precision rule, from --dtype and the dtype setup resolved from it (runtime.resolve_dtype:
    left out, bf16 on a GPU and on a CPU that runs it natively, fp32 on any other CPU). Left out where that is
    bf16, AMP: fp32 parameters and AdamW state, the forward under bf16 autocast, its GEMMs in bf16. Otherwise the
    one dtype for parameters, activations and AdamW state alike: --dtype's, or fp32 where bf16 is emulated (there
    autocast's bf16 GEMMs took the slow path: a default 05 was estimated at 1,440 s with oneDNN held to AVX2, at
    15.4 s in fp32)."""
    return AMP if dtype is None and resolved == "bf16" else resolved


def check_shape(dim: int, heads: int) -> None:
    """Refuse, in one line, a width that does not split into whole heads."""
    if dim % heads:
        raise SuiteError(f"--dim {dim} does not split into --heads {heads}: dim must be a multiple of heads")


def require_cuda_graphs(cudagraphs: bool, run: Run) -> None:
    """Refuse --cudagraphs off a CUDA GPU, in one line: CUDA graphs are recorded and replayed by the GPU driver."""
    if cudagraphs and not run.on_gpu:
        raise SuiteError(CUDA_GRAPHS_NEED_GPU)


def describe_step(variant: str, precision: str, fused_optimizer: bool, by_default: bool = False) -> str:
    """The setup echo's lines: what the step runs, the loss, the optimizer, and the precision (`by_default`: the
    precision --dtype left out gives, which is fp32 on a CPU without native bf16)."""
    how = {
        "eager": "the block in eager mode",
        "compile": "torch.compile(block)",
        "cudagraphs": "torch.compile(block, mode='reduce-overhead'): forward and backward replayed as CUDA graphs",
    }[variant]
    adamw = "AdamW(fused=True)" if fused_optimizer else "AdamW (foreach on a GPU, a per-parameter loop on the CPU)"
    kept = (
        "fp32 parameters and AdamW state, bf16 autocast (the default; --dtype bf16 for pure bf16)"
        if precision == AMP
        else f"everything in {precision} (this CPU's default: bf16 is emulated here; --dtype bf16 runs it)"
        if by_default
        else f"everything in {precision}: parameters, activations, AdamW state"
    )
    return f"step: {how}; loss: MSE to a fixed random target\noptimizer: {adamw}\nprecision: {kept}"


def make_batch(
    batch: int, seq: int, dim: int, device: torch.device, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random input x and regression target, both [batch, seq, dim] (drawn after the block's weights)."""
    return tuple(torch.randn(batch, seq, dim, device=device, dtype=dtype) for _ in range(2))


def block_reference(block: nn.Module, x: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The decoder block written out op by op in `dtype` (fp32, or fp64 for fp32 runs) from `block`'s weights:
    RMSNorm, causal attention (common.workloads.attention's reference), residual, RMSNorm, tanh-GeGLU MLP, residual."""
    ref = reference_dtype(dtype)
    w = {name: p.detach().to(ref) for name, p in block.named_parameters()}
    x = x.detach().to(ref)
    b, s, d = x.shape
    heads = block.attn.heads

    def rms_norm(t: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        return t * torch.rsqrt(t.pow(2).mean(-1, keepdim=True) + block.attn_norm.eps) * weight

    with torch.no_grad():
        qkv = rms_norm(x, w["attn_norm.weight"]) @ w["attn.qkv_proj.weight"].T
        q, k, v = (t.view(b, s, heads, d // heads).transpose(1, 2) for t in qkv.split(d, dim=-1))
        attn = reference_attention(q, k, v, ref).transpose(1, 2).reshape(b, s, d)
        h = x + attn @ w["attn.out_proj.weight"].T
        n = rms_norm(h, w["mlp_norm.weight"])
        m = F.gelu(n @ w["mlp.gate_proj.weight"].T, approximate="tanh") * (n @ w["mlp.up_proj.weight"].T)
        return h + m @ w["mlp.down_proj.weight"].T


def parameter_count(dim: int, hidden: int) -> int:
    """qkv (3 dim²) and out (dim²) projections, gate, up and down (dim × hidden each), two RMSNorm weights."""
    return 4 * dim * dim + 3 * dim * hidden + 2 * dim


# The aten ops one eager training step on the CPU dispatches, views left out (what a TorchDispatchMode sees; a
# test counts them on the real step): the CPU estimate's per-op part (Work.ops), most of a small step's time.
STEP_OPS = 69  # forward and backward of the block and the MSE loss, in one dtype: 15 mm, 14 mul, 7 add, 6 casts ...
AUTOCAST_OPS = 12  # bf16 autocast's casts: each Linear's weight and input, forward and backward
ADAMW_OPS_PER_PARAMETER = 10  # AdamW's loop (no foreach on the CPU): step += 1 and its .item(), param *= 1 - lr * wd,
# lerp_, mul_ and addcmul_ for the moments, the bias corrections' sqrt and div, denom's add_, addcdiv_
FUSED_ADAMW_OPS = 2  # AdamW(fused=True): the steps' _foreach_add_ and one _fused_adamw_
BLOCK_PARAMETERS = 7  # qkv, out, gate, up, down and the two RMSNorm weights


# Bytes the eager step's other ops (not its GEMMs or attention kernels) read and write out of place, each into a fresh
# output (the CPU estimate's Work.moved, at its pointwise rate), as a TorchDispatchMode counts them on the real step
# (a test pins them): per token and unit of dim, the norms (fp32 math in every precision), residual adds, casts and
# loss and their gradients, by precision; per token and unit of hidden, HIDDEN_PASSES in the GEMMs' dtype (GeGLU's
# gelu and product, their gradients); per parameter, AdamW's sqrt and division of the second moment (2 passes each,
# none fused) and under autocast AUTOCAST_BYTES (each weight's bf16 copy, its gradient's fp32 copy).
DIM_BYTES = {"amp": 314, 2: 244, 4: 303}  # AMP, or pure bf16 / fp32 by the parameters' element size
HIDDEN_PASSES = 18
ADAMW_PASSES = 4
AUTOCAST_BYTES = 12


def step_ops(amp: bool, fused_optimizer: bool) -> int:
    """The aten ops of one eager training step of the decoder block on the CPU, views left out (see STEP_OPS)."""
    optimizer = FUSED_ADAMW_OPS if fused_optimizer else ADAMW_OPS_PER_PARAMETER * BLOCK_PARAMETERS
    return STEP_OPS + AUTOCAST_OPS * amp + optimizer


def block_work(
    shape: BlockShape,
    param_bytes: int,
    input_bytes: int,
    amp: bool = False,
    fused_optimizer: bool = False,
    reference_bytes: int = 0,
) -> Work:
    """FLOPs of one training step of `shape` and the fewest bytes it must move; for the CPU estimate, the bytes its
    eager ops move out of place (DIM_BYTES ...) and its ops (step_ops), under bf16 autocast with `amp`, with
    AdamW(fused=True) with `fused_optimizer`, and the reference (block_reference: the forward op by op, its
    attention over all seq x seq scores) in elements of `reference_bytes` (0: none, as 06 checks against rank 0).

    FLOPs: the forward's GEMMs (2 per multiply-add) and causal attention (half of q @ k.T and attn @ v), times
    three: the backward computes two GEMMs per forward GEMM (the input gradient and the weight gradient). The
    pointwise ops and the optimizer are left out (model FLOPs, no recomputation). Bytes: read x and the target;
    read each parameter in the forward, write its gradient, and in AdamW read parameter, gradient and the two
    moments and write parameter and moments: 9 accesses per parameter. Saved activations are not required
    traffic (a step that recomputed everything would never write them).
    """
    batch, seq, dim, hidden = shape.batch, shape.seq, shape.dim, shape.hidden
    tokens = batch * seq
    forward = 2 * tokens * (4 * dim * dim + 3 * dim * hidden) + 2 * batch * seq * seq * dim
    parameters = parameter_count(dim, hidden)
    moved = 2 * tokens * dim * input_bytes + 9 * parameters * param_bytes
    gemm_bytes = 2 if amp else param_bytes
    per_parameter = ADAMW_PASSES * param_bytes * (not fused_optimizer) + AUTOCAST_BYTES * amp
    eager = tokens * (DIM_BYTES["amp" if amp else param_bytes] * dim + HIDDEN_PASSES * gemm_bytes * hidden)
    scores = batch * shape.heads * seq * seq  # the reference's attention computes them all, and passes over them
    reference = Work(forward + 2 * batch * seq * seq * dim, 0.0, REFERENCE_PASSES * scores * reference_bytes)
    reference = reference if reference_bytes else Work(0.0, 0.0)  # 06: nothing to compute
    ops = step_ops(amp, fused_optimizer)
    return Work(3 * forward, moved, eager + per_parameter * parameters, reference=reference, ops=ops)


def saved_for_backward(shape: BlockShape, precision: str, dtype: torch.dtype) -> dict[str, int]:
    """Bytes the eager step's autograd graph holds for the backward, tensor by tensor (inputs and parameters left
    out: they are allocated before the step). `precision` is AMP (fp32 parameters and residual stream, `dtype`
    autocast) or a dtype name (everything in `dtype`). Worked out from what each op saves:

    - RMSNorm `(x32 * rsqrt(mean(x32²) + eps)).type_as(x) * w` saves its normalised input (for w's gradient); the
      second one, whose input needs a gradient, also saves the fp32 x32 (pow, mul) and the rsqrt [tokens, 1].
    - each projection's mm saves its input (and, under autocast, the bf16 copy of its weight); autocast casts
      the fp32 normed input once per projection, so gate and up each hold a copy.
    - SDPA saves q, k, v (views of the one qkv output), its output (which out_proj reads as a view) and the
      log-sum-exp [batch, heads, seq] in fp32; GeLU saves its input, the mul both operands; the loss its input.
    CUDA flash attention also keeps two 8-byte RNG tensors, left out here.
    """
    batch, seq, dim, heads, hidden = shape.batch, shape.seq, shape.dim, shape.heads, shape.hidden
    t, e = batch * seq, dtype.itemsize
    amp = precision == AMP
    r = 4 if amp else e  # the residual stream's bytes per element
    saved = {
        "attn_norm: normalised x (for its weight)": t * dim * r,
        "qkv_proj: its input" + (" (bf16 cast)" if amp else ""): t * dim * e,
        "attention: q, k, v (the qkv output)": 3 * t * dim * e,
        "attention: output (out_proj's input)": t * dim * e,
        "attention: log-sum-exp (fp32)": batch * heads * seq * 4,
        "mlp_norm: fp32 input (pow, mul)": t * dim * 4,
        "mlp_norm: rsqrt": t * 4,
        "mlp_norm: normalised input (for its weight)": t * dim * r,
        "gate_proj, up_proj: input" + (" (a bf16 cast each)" if amp else " (one tensor)"): (2 if amp else 1)
        * t
        * dim
        * e,
        "gelu: input (gate output)": t * hidden * e,
        "mul: gelu output and up output": 2 * t * hidden * e,
        "down_proj: input": t * hidden * e,
        "loss: block output": t * dim * r,
    }
    if amp:
        saved["weights: bf16 casts (autocast)"] = (4 * dim * dim + 3 * dim * hidden) * e
    return saved


def block_memory(shape: BlockShape, precision: str, dtype: torch.dtype) -> tuple[int, str]:
    """Bytes at the peak, and for what: parameters, gradients and AdamW's two moments, x and target, the saved
    activations, backward temporaries (a few [tokens, hidden] buffers), and the reference's fp32 block with its
    [batch, heads, seq, seq] scores."""
    batch, seq, dim, heads, hidden = shape.batch, shape.seq, shape.dim, shape.heads, shape.hidden
    p = parameter_count(dim, hidden) * (4 if precision == AMP else dtype.itemsize)
    saved = sum(saved_for_backward(shape, precision, dtype).values())
    ref = reference_dtype(dtype).itemsize
    tokens = batch * seq
    reference = parameter_count(dim, hidden) * ref + tokens * (6 * dim + 3 * hidden) * ref
    reference += 2 * batch * heads * seq * seq * ref
    need = 4 * p + 2 * tokens * dim * 4 + saved + 4 * tokens * hidden * dtype.itemsize + reference
    return need, "weights, grads, AdamW state, activations, reference"


def memory_lines(block: nn.Module, optimizer: torch.optim.Optimizer, saved: dict[str, int]) -> list[str]:
    """What the step holds before it starts and what the eager graph saves, to set beside the measured peak."""
    params = list(block.parameters())
    n = sum(p.numel() for p in params)
    weights = sum(p.numel() * p.element_size() for p in params)
    state = sum(t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values() if t.dim())
    moment = params[0].element_size()
    return [
        f"parameters: {n:,} in {len(params)} tensors ({human_bytes(weights)}, {params[0].dtype}); "
        f"gradients {human_bytes(weights)} during the backward",
        f"AdamW state: {human_bytes(state)} (two moments per parameter: 2 x {moment} B x {n:,} = "
        f"{human_bytes(2 * moment * n)})",
        "saved for the backward (eager, worked out per tensor in common/workloads/block.py): "
        f"{human_bytes(sum(saved.values()))}",
    ]
