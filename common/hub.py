"""What surrounds the scripts' `get_kernel(...)` call: offline awareness, clear errors, the fallbacks.

The call itself is in the scripts, as the post prints it. Wrapped in `with hub_access(repo):`,
it runs online as usual (downloading into KERNELS_CACHE, else the Hugging Face cache); offline
(HF_HUB_OFFLINE=1, or the Hub does not answer within PROBE_TIMEOUT_S) it reads only the cache and
LOCAL_KERNELS="org/repo=/path" mappings, so a cached kernel still loads and a missing one fails at
once; and any failure becomes HubError, one line that says what to do. The fallbacks load the
*same* kernel from elsewhere (Liger from PyPI, an installed FlashAttention, a local kernel
directory), never another algorithm. The scripts import without `kernels` installed.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import logging
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace

import torch
from torch import nn

from common.cli import SuiteError

PROBE_TIMEOUT_S = 3.0  # huggingface_hub's own HTTP client has no timeout: on a network that drops packets it hangs

FLASH_ATTN2, FLASH_ATTN3 = "kernels-community/flash-attn2", "kernels-community/flash-attn3"
FLASH_VERSION = 1
# pip-installed FlashAttention 3 and 2: the same flash_attn_func(q, k, v, causal=...) on [B, S, H, D]
FLASH_PACKAGES = ("flash_attn_interface", "flash_attn")

GET_IT = (
    "run once with a network to cache it (KERNELS_CACHE moves the cache), "
    "or map it to a local copy with LOCAL_KERNELS=org/repo=/path"
)


def hub_offline() -> bool:
    """True when the environment asks huggingface_hub for no network (HF_HUB_OFFLINE, TRANSFORMERS_OFFLINE)."""
    return any(
        os.environ.get(var, "").strip().upper() in {"1", "ON", "YES", "TRUE"}
        for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")
    )


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


class HubError(SuiteError):
    """A Hub kernel could not be loaded here; the message says why and what to do."""


@contextlib.contextmanager
def hub_access(repo_id: str) -> Iterator[None]:
    """Run the `get_kernel(repo_id, ...)` call inside this block offline-aware, with one-line failures.

    Offline, or when the Hub does not answer within PROBE_TIMEOUT_S, only the cache and LOCAL_KERNELS
    are consulted. `kernels` missing, the kernel not cached, no build for this machine, remote code
    failing: each becomes HubError.
    """
    try:
        importlib.import_module("kernels")
    except ImportError:
        raise HubError(
            "the `kernels` package is not installed: `uv sync` (or `pip install kernels`) "
            "to load kernels from the Hugging Face Hub"
        ) from None
    if hub_offline():
        offline_reason = "HF_HUB_OFFLINE is set"
    elif not hub_reachable():
        offline_reason = f"the Hub did not answer within {PROBE_TIMEOUT_S:g} s"
    else:
        offline_reason = None
    try:
        with _cache_only() if offline_reason else contextlib.nullcontext():
            yield
    except SuiteError:
        raise
    except Exception as exc:  # remote code can fail in many ways; each is the user's to fix, none a suite bug
        raise HubError(explain(exc, repo_id, offline_reason)) from None


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
    """The kernel in a local kernel directory (`<path>/build/<variant>/` holding `metadata.json` and the
    package), e.g. a Hub kernel repository downloaded by hand: through `kernels.get_local_kernel` when
    `kernels` is installed, else imported directly from the build variant that fits this torch."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise SuiteError(f"kernel directory {path} does not exist")
    try:
        kernels = importlib.import_module("kernels")
    except ImportError:
        return import_build_variant(path)
    try:
        return kernels.get_local_kernel(*local_kernel_args(kernels.get_local_kernel, path))
    except SuiteError:
        raise
    except Exception as exc:
        text = str(exc).strip()
        raise SuiteError(
            f"could not load the kernel in {path}: {type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        ) from None


def build_variant(path: Path) -> Path:
    """The folder of `path`/build/ that fits this torch, as `kernels` names them: `torch211-cxx11-cu130-
    x86_64-linux` (torch 2.11, CUDA 13.0), else a noarch `torch-universal` / `torch-cuda` build."""
    variants = sorted(p for p in (path / "build").glob("*") if p.is_dir())
    if not variants:
        raise SuiteError(f"{path}: no build/<variant>/ folder inside: not a kernel directory")
    major, minor = torch.__version__.split(".")[:2]
    cuda = f"cu{torch.version.cuda.replace('.', '')}" if torch.version.cuda else None
    exact = [v for v in variants if v.name.startswith(f"torch{major}{minor}-") and (cuda is None or cuda in v.name)]
    noarch = [v for v in variants if v.name in ("torch-universal", "torch-cuda" if cuda else "torch-cpu")]
    if exact or noarch:
        return (exact or noarch)[0]
    names = ", ".join(v.name for v in variants)
    raise SuiteError(
        f"{path}: no build for torch {major}.{minor}" + (f" with {cuda}" if cuda else "") + f" (builds: {names})"
    )


def import_build_variant(path: Path) -> ModuleType:
    """Import the kernel package of `build_variant(path)` (its `__init__.py`, or `<package>/__init__.py`)."""
    variant = build_variant(path)
    init = variant / "__init__.py"
    if not init.is_file():
        inits = sorted(variant.glob("*/__init__.py"))
        if not inits:
            raise SuiteError(f"{variant}: no __init__.py and no <package>/__init__.py inside")
        init = inits[0]
    name = re.sub(r"\W", "_", f"_local_kernel_{path.name}")
    spec = importlib.util.spec_from_file_location(name, init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except Exception as exc:
        del sys.modules[name]
        raise SuiteError(f"could not import the kernel in {variant}: {type(exc).__name__}: {exc}") from None
    return module


# --- Liger's fused GeGLU (03_kernels_mlp.py) ---------------------------------------------------------------


def pypi_liger_geglu() -> type[nn.Module]:
    """LigerGEGLUMLP from the liger-kernel package on PyPI: the same Triton kernel as the Hub's."""
    try:
        from liger_kernel.transformers import LigerGEGLUMLP
    except ImportError as exc:
        raise SuiteError(f"cannot import liger_kernel ({exc}): `uv sync` (or `pip install liger-kernel`)") from None
    return LigerGEGLUMLP


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


def flash_attn_func_of(module: ModuleType, where: str) -> Callable[..., object]:
    """`module.flash_attn_func`, or a one-line error naming `where` the module came from."""
    func = getattr(module, "flash_attn_func", None)
    if func is None:
        raise SuiteError(f"{where} has no flash_attn_func")
    return func


def installed_flash_attn(hub_failure: HubError, repo_id: str) -> tuple[Callable[..., object], str]:
    """After the Hub kernel failed to load: `flash_attn_func` of an installed FlashAttention package (saying
    so) and its source tag `pkg-<module>`; else one line with the ways to get the kernel onto this machine."""
    for name in FLASH_PACKAGES:
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        print(f"notice: {hub_failure}")
        print(f"notice: using the installed {name} package instead (FlashAttention, same [B, S, H, D] API)")
        return flash_attn_func_of(module, name), f"pkg-{name}"
    folder = repo_id.split("/")[-1]
    raise SuiteError(
        f"{hub_failure}; or, on a machine with a network, `hf download {repo_id} --local-dir "
        f"{folder}`, bring the folder here and pass --kernel-dir {folder} (works without `kernels`)"
    )
