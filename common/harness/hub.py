"""What surrounds the scripts' `get_kernel(...)` call: offline awareness, clear errors, the fallbacks.

The call itself is in the scripts, as the post prints it. Wrapped in `with hub_access(repo):`,
it runs online as usual (downloading into KERNELS_CACHE, else the Hugging Face cache); offline
(HF_HUB_OFFLINE=1, or the Hub does not answer within PROBE_TIMEOUT_S) it reads only the cache and
LOCAL_KERNELS="org/repo=/path" mappings, so a cached kernel still loads and a missing one fails at
once; and any failure becomes HubError, one line that says what to do. A local kernel directory
loads through `kernels.get_local_kernel`. The fallbacks that load the *same* kernel from elsewhere
(Liger from PyPI, an installed FlashAttention) live with their model families (common.workloads.mlp,
common.workloads.attention), never another algorithm.
"""

from __future__ import annotations

import contextlib
import importlib
import inspect
import logging
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType

import torch

from common.cli import SuiteError
from common.harness.private_api import KERNELS_HUB_UNREACHABLE, KERNELS_NO_BUILD, KERNELS_NOT_CACHED, hub_offline

PROBE_TIMEOUT_S = 3.0  # huggingface_hub's own HTTP client has no timeout: on a network that drops packets it hangs

GET_IT = (
    "run once with a network to cache it (KERNELS_CACHE moves the cache), "
    "or map it to a local copy with LOCAL_KERNELS=org/repo=/path"
)


def offline_requested() -> bool:
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
    """Make `kernels` resolve from the local cache alone, quietly."""
    log = logging.getLogger("kernels")  # offline it warns that it skips the publisher check: noise here
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with hub_offline():
            yield
    finally:
        log.setLevel(level)


def explain(exc: Exception, what: str, offline_reason: str | None) -> str:
    """One line for a failed `get_kernel(what)`, naming the real cause instead of `kernels`' wording."""
    text = str(exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    if offline_reason and any(words in text for words in KERNELS_NOT_CACHED):
        return f"{what} is not in the local kernels cache and {offline_reason}: {GET_IT}"
    if KERNELS_HUB_UNREACHABLE in text:  # kernels 0.17 says this when the Hub is unreachable
        return f"could not reach the Hugging Face Hub to load {what}: {GET_IT}"
    if KERNELS_NO_BUILD in text:
        return f"{what} has no build for this machine (torch {torch.__version__}): {first}"
    return f"could not load {what}: {type(exc).__name__}: {first}"


class HubError(SuiteError):
    """A Hub kernel could not be loaded here; the message says why and what to do."""


@contextlib.contextmanager
def hub_access(repo_id: str, skip: bool = False) -> Iterator[None]:
    """Run the `get_kernel(repo_id, ...)` call inside this block offline-aware, with one-line failures.

    Offline, or when the Hub does not answer within PROBE_TIMEOUT_S, only the cache and LOCAL_KERNELS
    are consulted. `kernels` missing, the kernel not cached, no build for this machine, remote code
    failing: each becomes HubError. `skip`: the user asked for another source, so raise HubError at once.
    """
    if skip:
        raise HubError(f"{repo_id} not asked for")
    try:
        importlib.import_module("kernels")
    except ImportError:
        raise HubError(
            "the `kernels` package is not installed: `uv sync` (or `pip install kernels`) "
            "to load kernels from the Hugging Face Hub"
        ) from None
    if offline_requested():
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
    package), e.g. a Hub kernel repository downloaded with `hf download`, through `kernels.get_local_kernel`."""
    path = Path(path).expanduser().resolve()
    if not path.is_dir():
        raise SuiteError(f"kernel directory {path} does not exist")
    try:
        kernels = importlib.import_module("kernels")
    except ImportError:
        raise SuiteError("the `kernels` package is not installed: `uv sync` (or `pip install kernels`)") from None
    try:
        return kernels.get_local_kernel(*local_kernel_args(kernels.get_local_kernel, path))
    except SuiteError:
        raise
    except Exception as exc:
        text = str(exc).strip()
        raise SuiteError(
            f"could not load the kernel in {path}: {type(exc).__name__}: {text.splitlines()[0] if text else ''}"
        ) from None
