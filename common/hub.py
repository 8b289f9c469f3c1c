"""Kernels from the Hugging Face Hub through `kernels`, with or without a network.

Online, `get_kernel` downloads into the cache (KERNELS_CACHE, else the Hugging Face cache).
Offline (HF_HUB_OFFLINE=1, or the Hub does not answer within PROBE_TIMEOUT_S) only the cache and
LOCAL_KERNELS="org/repo=/path" mappings are used, so a cached kernel still loads and a missing
one fails at once with a message that says what to do. The fallbacks load the *same* kernel from
elsewhere (Liger from PyPI, an installed FlashAttention, a local kernel directory), never another
algorithm. `kernels` itself is imported only when a Hub kernel is asked for: the scripts import
without it.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Callable, Iterator

import torch
from torch import nn

from common.errors import SuiteError

PROBE_TIMEOUT_S = 3.0  # huggingface_hub's own HTTP client has no timeout: on a network that drops packets it hangs

LIGER_REPO, LIGER_VERSION = "kernels-community/liger-kernels", 1  # the post's get_kernel call
LIGER_SOURCES = ("auto", "hub", "pypi")
FLASH_ATTN2, FLASH_ATTN3 = "kernels-community/flash-attn2", "kernels-community/flash-attn3"
FLASH_VERSION = 1
# pip-installed FlashAttention 3 and 2: the same flash_attn_func(q, k, v, causal=...) on [B, S, H, D]
FLASH_PACKAGES = ("flash_attn_interface", "flash_attn")

GET_IT = ("run once with a network to cache it (KERNELS_CACHE moves the cache), "
          "or map it to a local copy with LOCAL_KERNELS=org/repo=/path")


def _kernels() -> ModuleType:
    """The `kernels` package, or a SuiteError saying how to install it."""
    try:
        return importlib.import_module("kernels")
    except ImportError:
        raise SuiteError("the `kernels` package is not installed: `uv sync` (or `pip install kernels`) "
                         "to load kernels from the Hugging Face Hub") from None


def hub_offline() -> bool:
    """True when the environment asks huggingface_hub for no network (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE)."""
    return any(os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
               for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"))


def hub_reachable(timeout_s: float = PROBE_TIMEOUT_S) -> bool:
    """Whether the Hub endpoint (HF_ENDPOINT honoured, proxies too) answers one HEAD request within `timeout_s`."""
    from huggingface_hub import constants
    from huggingface_hub.utils import get_session

    try:
        get_session().head(constants.ENDPOINT, timeout=timeout_s)
    except Exception:  # DNS failure, refused connection, timeout, proxy error: all mean "not reachable"
        return False
    return True


@contextlib.contextmanager
def _cache_only() -> Iterator[None]:
    """Make `kernels` resolve from the local cache alone; it reads huggingface_hub's flag at call time."""
    from huggingface_hub import constants

    log = logging.getLogger("kernels")  # offline it warns that it skips the publisher check: noise here
    saved, level = constants.HF_HUB_OFFLINE, log.level
    constants.HF_HUB_OFFLINE = True
    log.setLevel(logging.ERROR)
    try:
        yield
    finally:
        constants.HF_HUB_OFFLINE = saved
        log.setLevel(level)


def explain(exc: Exception, what: str, offline_reason: str | None) -> str:
    """One line for a failed `get_kernel(what)`, naming the real cause instead of `kernels`' wording."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if offline_reason and ("local cache" in text or "local snapshot" in text):
        return f"{what} is not in the local kernels cache and {offline_reason}: {GET_IT}"
    if "could not verify publisher trust status" in text:  # kernels 0.17 says this when the Hub is unreachable
        return f"could not reach the Hugging Face Hub to load {what}: {GET_IT}"
    if "Cannot find a build variant" in text:
        return f"{what} has no build for this machine (torch {torch.__version__}): {first}"
    return f"could not load {what}: {type(exc).__name__}: {first}"


def load_hub_kernel(repo_id: str, version: int | None = None, revision: str | None = None) -> ModuleType:
    """`kernels.get_kernel(repo_id, version=N)` or `(..., revision=R)`: exactly one of the two.

    Offline, or when the Hub does not answer within PROBE_TIMEOUT_S, only the cache and LOCAL_KERNELS
    are consulted. Every failure becomes one SuiteError line.
    """
    if (version is None) == (revision is None):
        raise ValueError("get_kernel takes exactly one of version and revision")
    kernels = _kernels()
    what = f"{repo_id} ({f'version {version}' if revision is None else f'revision {revision}'})"
    if hub_offline():
        offline_reason = "HF_HUB_OFFLINE is set"
    elif not hub_reachable():
        offline_reason = f"the Hub did not answer within {PROBE_TIMEOUT_S:g} s"
    else:
        offline_reason = None
    ref = {"version": version} if revision is None else {"revision": revision}
    try:
        with _cache_only() if offline_reason else contextlib.nullcontext():
            return kernels.get_kernel(repo_id, **ref)
    except Exception as exc:  # remote code can fail in many ways; each is the user's to fix, none a suite bug
        raise SuiteError(explain(exc, what, offline_reason)) from None


def local_kernel_args(get_local_kernel: Callable[..., ModuleType], path: Path) -> list[object]:
    """Positional arguments for this release's `get_local_kernel`: newer ones take the path alone,
    older ones the path and the package's name (the folder holding `__init__.py` in the build variant)."""
    params = inspect.signature(get_local_kernel).parameters
    if "package_name" not in params:
        return [path]
    inits = sorted(path.glob("build/*/*/__init__.py")) + sorted(path.glob("*/*/__init__.py"))
    if not inits:
        raise SuiteError(f"{path}: no build/<variant>/<package>/__init__.py inside: not a kernel directory")
    return [path, inits[0].parent.name]


def load_local_kernel(path: Path | str) -> ModuleType:
    """`kernels.get_local_kernel` on a kernel directory: `<path>/build/<variant>/` holding `metadata.json`
    and the package (`<package>/__init__.py`), e.g. a Hub kernel repository cloned or downloaded by hand."""
    kernels = _kernels()
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise SuiteError(f"kernel directory {path} does not exist")
    try:
        return kernels.get_local_kernel(*local_kernel_args(kernels.get_local_kernel, path))
    except SuiteError:
        raise
    except Exception as exc:
        text = str(exc).strip()
        raise SuiteError(f"could not load the kernel in {path}: {type(exc).__name__}: "
                         f"{text.splitlines()[0] if text else ''}") from None


# --- Liger's fused GeGLU (03_kernels_mlp.py) ---------------------------------------------------------------

def load_liger_geglu(source: str = "auto") -> tuple[type[nn.Module], str]:
    """The LigerGEGLUMLP class and where it came from: 'hub' (kernels-community/liger-kernels, version 1,
    as in the post) or 'pypi' (the liger-kernel package: the same Triton kernel). 'auto' tries the Hub and
    falls back to PyPI, saying so."""
    if source not in LIGER_SOURCES:
        raise SuiteError(f"unknown source {source!r}; use one of {', '.join(LIGER_SOURCES)}")
    if source in ("auto", "hub"):
        try:
            layer = getattr(getattr(load_hub_kernel(LIGER_REPO, version=LIGER_VERSION), "layers", None),
                            "LigerGEGLUMLP", None)
            if layer is None:
                raise SuiteError(f"{LIGER_REPO} has no layers.LigerGEGLUMLP")
            return layer, "hub"
        except SuiteError as exc:
            if source == "hub":
                raise SuiteError(f"{exc}; or use --source pypi") from None
            print(f"notice: {exc}")
            print("notice: falling back to LigerGEGLUMLP from the liger-kernel package on PyPI "
                  "(the same Triton kernel)")
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError as exc:
        raise SuiteError(f"cannot import liger_kernel ({exc}): `uv sync` (or `pip install liger-kernel`)") from None
    return LigerGEGLUMLP, "pypi"


def liger_mlp_like(layer: type[nn.Module], reference: nn.Module) -> nn.Module:
    """A `layer` (LigerGEGLUMLP) holding copies of `reference`'s gate/up/down weights, on its device and dtype.

    Newer Hub builds ship a forward-only layer (no `__init__`; its forward reads gate_proj, up_proj and
    down_proj); PyPI's and older Hub builds build those from a config and always use the tanh GeLU.
    """
    dim, hidden = reference.gate_proj.in_features, reference.gate_proj.out_features
    if layer.__init__ is nn.Module.__init__:
        mlp = layer()
        mlp.gate_proj = nn.Linear(dim, hidden, bias=False)
        mlp.up_proj = nn.Linear(dim, hidden, bias=False)
        mlp.down_proj = nn.Linear(hidden, dim, bias=False)
    else:
        mlp = layer(SimpleNamespace(hidden_size=dim, intermediate_size=hidden, hidden_act="gelu_pytorch_tanh"))
    mlp.load_state_dict(reference.state_dict())
    weight = reference.gate_proj.weight
    return mlp.to(weight.device, weight.dtype).eval()


# --- FlashAttention (04_d_kernels_attention.py) ------------------------------------------------------------

def default_flash_repo(capability: tuple[int, int]) -> str:
    """flash-attn3 on Hopper (sm90), flash-attn2 on any other sm80+ GPU."""
    major, minor = capability
    if major < 8:
        raise SuiteError(f"FlashAttention needs an Ampere (sm80) or newer GPU; this one is sm{major}{minor}")
    return FLASH_ATTN3 if major == 9 else FLASH_ATTN2


def _flash_attn_func(module: ModuleType, where: str) -> Callable[..., object]:
    func = getattr(module, "flash_attn_func", None)
    if func is None:
        raise SuiteError(f"{where} has no flash_attn_func")
    return func


def load_flash_attn(repo_id: str, version: int | None = None, revision: str | None = None,
                    kernel_dir: Path | str | None = None) -> tuple[Callable[..., object], str]:
    """`flash_attn_func` and its source for the tag: 'local' (from `kernel_dir`), 'hub-<repo name>', or
    'pkg-<module>' (an installed FlashAttention package, used only when the Hub kernel cannot be loaded)."""
    if kernel_dir is not None:
        return _flash_attn_func(load_local_kernel(kernel_dir), str(kernel_dir)), "local"
    try:
        module = load_hub_kernel(repo_id, version=version, revision=revision)
        return _flash_attn_func(module, repo_id), f"hub-{repo_id.split('/')[-1]}"
    except SuiteError as exc:
        for name in FLASH_PACKAGES:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue
            print(f"notice: {exc}")
            print(f"notice: using the installed {name} package instead (FlashAttention, same [B, S, H, D] API)")
            return _flash_attn_func(module, name), f"pkg-{name}"
        raise SuiteError(f"{exc}; or pass --kernel-dir PATH (a local kernel directory), "
                         "or install flash-attn") from None
