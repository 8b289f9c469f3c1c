"""The causal-attention family (04_a to 04_d): shape flags, inputs, the causal mask, the reference, the physics,
which SDPA backend can run, and FlashAttention from the Hub or elsewhere."""

from __future__ import annotations

import importlib
import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

import torch
from torch.nn.attention import SDPBackend

from common.cli import SuiteError, shown
from common.harness.early import FLASH_NEEDS_GPU, AttentionShape, attention_bytes
from common.harness.hub import HubError
from common.harness.private_api import SDPA_REFUSAL_END, SDPA_REFUSAL_HEADERS, SDPA_TRIGGERED_AT, fused_sdp_choice
from common.harness.runtime import SEED, Run
from common.physics import FusedAttention, Work
from common.workloads.shapes import FLASH_VERSION as FLASH_VERSION
from common.workloads.shapes import SDPA_BACKEND_NAMES

SDPA_BACKENDS = {
    "math": SDPBackend.MATH,
    "flash": SDPBackend.FLASH_ATTENTION,
    "efficient": SDPBackend.EFFICIENT_ATTENTION,
    "cudnn": SDPBackend.CUDNN_ATTENTION,
}
assert tuple(SDPA_BACKENDS) == SDPA_BACKEND_NAMES  # the flag's choices, named before torch loads


def make_qkv(shape: AttentionShape, run: Run, layout: str = "bhsd") -> tuple[torch.Tensor, ...]:
    """Random q, k, v of `shape` in `layout`: 'bhsd' = [batch, heads, seq, head_dim] (PyTorch's),
    'bshd' = [batch, seq, heads, head_dim] (FlashAttention's).

    The same seed gives the same numbers in either layout ('bshd' is 'bhsd' made contiguous
    after a transpose), so outputs of different scripts are comparable.
    """
    torch.manual_seed(SEED)
    bhsd = (shape.batch, shape.heads, shape.seq, shape.head_dim)
    qkv = [torch.randn(bhsd, device=run.device, dtype=run.dtype) for _ in range(3)]
    if layout == "bshd":
        qkv = [t.transpose(1, 2).contiguous() for t in qkv]
    elif layout != "bhsd":
        raise ValueError(f"unknown layout {layout!r}")
    return tuple(qkv)


def causal_mask(seq: int, device: torch.device) -> torch.Tensor:
    """Boolean [seq, seq] mask, True above the diagonal (the future a query must not see). Built once."""
    return torch.ones(seq, seq, dtype=torch.bool, device=device).triu(diagonal=1)


def reference_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Causal attention in `dtype` (fp32 or fp64), written out op by op: the truth the variants are checked against.

    q, k, v: [batch, heads, seq, head_dim]; returns the same shape.
    """
    q, k, v = (t.to(dtype) for t in (q, k, v))
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    scores = scores.masked_fill(causal_mask(q.shape[-2], q.device), float("-inf"))
    return torch.softmax(scores, dim=-1) @ v


# Passes over the [batch, heads, seq, seq] scores, each element read or written once, for the CPU estimate's
# `moved` (common.physics.Work): the first GEMM writes them (1), the scale reads and writes a new tensor (2),
# an out-of-place masked_fill clones (2) and fills (1) where masked_fill_ reads and writes in place (2),
# softmax reads and writes a new tensor (2), the second GEMM reads them (1).
SCORE_PASSES = {"out_of_place": 9, "in_place": 8}
REFERENCE_PASSES = SCORE_PASSES["out_of_place"]  # reference_attention: the same ops, out of place


def attention_work(
    shape: AttentionShape, element_size: int, score_passes: float = 0, reference_size: int = 4, fused: bool = False
) -> Work:
    """FLOPs of causal attention of `shape` as executed by a fused kernel (half of the two seq x seq GEMMs),
    and the fewest bytes: read q, k, v and write the output once.

    For the CPU estimate only: `score_passes` passes over the scores of `element_size` bytes each (0 for a
    fused kernel), the reference's work in `reference_size` bytes an element (fp32: 4), all s x s scores
    computed and REFERENCE_PASSES passes over them, and with `fused` the FLOPs' rate is SDPA's CPU flash
    kernel's on a slice of this shape (Work.fused), not a matmul's."""
    b, h, s, d = shape.batch, shape.heads, shape.seq, shape.head_dim
    flops = 4 * b * h * s * s * d / 2  # q @ k.T and attn @ v, 2*s*s*d each; causal skips half
    scores = b * h * s * s
    reference = Work(2 * flops, 4 * b * h * s * d * reference_size, REFERENCE_PASSES * scores * reference_size)
    kernel = FusedAttention(b, h, s, d) if fused else None
    return Work(flops, 4 * b * h * s * d * element_size, score_passes * scores * element_size, reference, fused=kernel)


def attention_memory(shape: AttentionShape, dtype: torch.dtype, score_bytes: int) -> tuple[int, str]:
    """Bytes a variant of `shape` in `dtype` allocates at its peak, and for what (common.harness.early.attention_bytes,
    which the scripts' refusal before torch reads too)."""
    return attention_bytes(shape, dtype.itemsize, score_bytes)


@dataclass(frozen=True)
class Variant:
    """How one attention variant treats the [batch, heads, seq, seq] scores: the CPU estimate's passes over them
    (SCORE_PASSES' rule) and the copies of them its peak holds, in the run's dtype or, for SDPA's math backend,
    in fp32 whatever the input; none for a fused kernel, whose FLOPs may run at SDPA flash's own CPU rate."""

    passes: int
    copies: int
    fp32_scores: bool = False
    flash_rate: bool = False


VARIANTS = {  # 04_a, 04_b, then 04_c's backends, then 04_d's Hub kernels
    "naive": Variant(SCORE_PASSES["out_of_place"], 3),  # scores, their masked copy, the softmax
    "in_place": Variant(SCORE_PASSES["in_place"], 2),  # scores (masked in place), the softmax
    "math": Variant(SCORE_PASSES["out_of_place"], 3, fp32_scores=True),
    "flash": Variant(0, 0, flash_rate=True),
    "efficient": Variant(0, 0),
    "cudnn": Variant(0, 0),
    "kernel": Variant(0, 0),
}


def attention_budget(variant: str, shape: AttentionShape, run: Run) -> tuple[Work, tuple[int, str]]:
    """The work of `shape` as VARIANTS[variant] runs it (attention_work) and the bytes its peak holds, and for
    what (attention_memory): what the script's estimate and fit_machine read, before any tensor exists."""
    v, size = VARIANTS[variant], run.dtype.itemsize
    score_size = 4 if v.fp32_scores else size
    work = attention_work(shape, size, v.passes * score_size / size, run.reference_dtype.itemsize, v.flash_rate)
    return work, attention_memory(shape, run.dtype, v.copies * score_size)


def require_sdpa_backend(backend: str, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, run: Run) -> None:
    """Raise SuiteError, in one line naming the backend and the reason, when it cannot run these inputs here.

    Asks SDPA's own dispatcher which kernel it would pick (common.harness.private_api.fused_sdp_choice, under
    the sdpa_kernel pin of the caller) without running one, so a cold run stays cold. On a GPU the
    dispatcher explains a refusal in warnings: "<Backend> kernel not used because:", then the reasons.
    """
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            fused_sdp_choice(q, k, v)
            return
        except RuntimeError as exc:
            error = str(exc).splitlines()[0]
    where = f"{run.device_name}, {run.dtype_name}, head_dim {q.shape[-1]}"
    if not run.on_gpu and backend in ("efficient", "cudnn"):
        reason = "CUDA only; on the CPU, only math and flash run"
    else:
        reason = dispatcher_reason(backend, [str(w.message) for w in caught]) or error
    raise SuiteError(f"--backend {backend} cannot run here ({where}): {reason}")


def dispatcher_reason(backend: str, messages: list[str]) -> str | None:
    """The first reason the dispatcher warned for `backend`: the line after its "... not used because:"."""
    header = SDPA_REFUSAL_HEADERS.get(backend)
    messages = [SDPA_TRIGGERED_AT.sub("", m) for m in messages]
    start = next((i for i, m in enumerate(messages) if header and m.startswith(header)), None)
    reasons = [] if start is None else messages[start + 1 :]
    return reasons[0] if reasons and not reasons[0].endswith(SDPA_REFUSAL_END) else None


# --- FlashAttention (04_d_kernels_attention.py) ------------------------------------------------------------

FLASH_ATTN2, FLASH_ATTN3 = "kernels-community/flash-attn2", "kernels-community/flash-attn3"
# pip-installed FlashAttention, tried in this order; each flash_attn_func takes q, k, v as [B, S, H, D] (fp16 or bf16)
# and causal=. FA3 (`flash_attn_interface`) and FA4 (`flash-attn-4`'s `flash_attn.cute`, CuTe DSL kernels compiled
# just in time on first call) return (out, softmax_lse), FA4's lse None unless asked for or a gradient is needed;
# FA2 (`flash_attn`) returns out. FA4 goes before FA2: it installs into FA2's `flash_attn` namespace.
FLASH_PACKAGES = {
    "flash_attn_interface": "FlashAttention 3",
    "flash_attn.cute": "FlashAttention 4, CuTe DSL, compiled on first call",
    "flash_attn": "FlashAttention 2",
}
FA4_COMPILE_WARNING = r"Argument aux_data \(position \d+\) cannot be converted to a JitArgument"  # 4.0.0b36
FLASH_MAX_HEAD_DIM = 256  # FA2, FA3 and FA4 on Hopper: head_dim up to 256, in multiples of 8


def require_flash(run: Run, head_dim: int) -> None:
    """Refuse, in one line, what FlashAttention cannot run: no CUDA GPU, fp32, an unsupported head_dim."""
    if not run.on_gpu:
        raise SuiteError(FLASH_NEEDS_GPU)
    if run.dtype == torch.float32:
        raise SuiteError("FlashAttention computes in bf16 or fp16, not fp32: drop --dtype fp32")
    if head_dim > FLASH_MAX_HEAD_DIM or head_dim % 8:
        raise SuiteError(f"--head_dim {head_dim}: FlashAttention supports multiples of 8 up to {FLASH_MAX_HEAD_DIM}")


def default_flash_repo(capability: tuple[int, int]) -> str:
    """flash-attn3 on Hopper (sm90), flash-attn2 on any other sm80+ GPU."""
    major, minor = capability
    if major < 8:
        raise SuiteError(f"FlashAttention needs an Ampere (sm80) or newer GPU; this one is sm{major}{minor}")
    return FLASH_ATTN3 if major == 9 else FLASH_ATTN2


def flash_attn_func_of(module: ModuleType, where: str) -> Callable[..., object]:
    """`module.flash_attn_func`, or a one-line error naming `where` the module came from."""
    func = getattr(module, "flash_attn_func", None)
    if func is None:
        raise SuiteError(f"{where} has no flash_attn_func")
    return func


def installed_flash_attn(hub_failure: HubError, repo_id: str) -> tuple[Callable[..., object], str]:
    """After the Hub kernel failed to load: `flash_attn_func` of an installed FlashAttention package (saying
    so) and its source tag `pkg-<module>` (dots as underscores: `pkg-flash_attn_cute`); else one line with the
    ways to get the kernel onto this machine. A package that is there but fails to import is one line too."""
    for name, what in FLASH_PACKAGES.items():
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            if _absent(exc, name):
                continue
            raise SuiteError(f"the installed {name} package ({what}) does not import: {exc}") from None
        func = getattr(module, "flash_attn_func", None)
        if func is None:  # e.g. `flash_attn` as the bare namespace FA4 leaves behind
            continue
        if name == "flash_attn.cute":  # its compile warns, in 600 characters, that one argument stays Python-side
            warnings.filterwarnings("ignore", message=FA4_COMPILE_WARNING, category=UserWarning)
        print(f"notice: {shown(str(hub_failure))}")
        print(f"notice: using the installed {name} package instead ({what}; the same [B, S, H, D] API)")
        return func, "pkg-" + name.replace(".", "_")
    folder = repo_id.split("/")[-1]
    raise SuiteError(
        f"{hub_failure}; or, on a machine with a network, `hf download {repo_id} --local-dir "
        f"{folder}` and pass --kernel-dir {folder}"
    )


def _absent(exc: ImportError, name: str) -> bool:
    """Whether importing `name` failed because `name` itself (or a package above it) is not installed,
    rather than something it needs."""
    parts = name.split(".")
    return exc.name in {".".join(parts[: i + 1]) for i in range(len(parts))}
