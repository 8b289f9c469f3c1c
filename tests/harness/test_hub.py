"""common/harness/hub.py and 04_d_kernels_attention.py without a network: fast failures, clear messages, real local
kernels."""

from __future__ import annotations

import builtins
import importlib.util
import json
import re
import socket
import sys
import warnings
from pathlib import Path
from types import ModuleType, SimpleNamespace

import pytest
import torch
from helpers import load_script, needs_kernels, requires_cuda, trace_names, usage_error, written

from common.cli import SuiteError
from common.harness import hub
from common.reader.build import read_trace
from common.workloads import attention
from common.workloads.attention import FLASH_ATTN2, FLASH_ATTN3, reference_attention
from common.workloads.mlp import pypi_liger_geglu

# A pure-torch stand-in for FlashAttention's flash_attn_func: [batch, seq, heads, head_dim] and `causal=`.
TOY_FLASH_ATTN = """
import torch.nn.functional as F


def flash_attn_func(q, k, v, causal=False):
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    return F.scaled_dot_product_attention(q, k, v, is_causal=causal).transpose(1, 2)
"""


# A real FlashAttention-2 CUDA kernel behind the same API: PyTorch's own build of it, called on
# [B, S, H, D] directly (what SDPA's flash backend calls after its transposes).
TORCH_FLASH_ATTN = """
import torch


def flash_attn_func(q, k, v, causal=False):
    out, *_ = torch.ops.aten._flash_attention_forward(q, k, v, None, None, q.shape[1], k.shape[1], 0.0, causal, False)
    return out
"""


def make_kernel_dir(root: Path, source: str = TOY_FLASH_ATTN) -> Path:
    """A kernel directory as `kernels` reads it: build/<variant>/metadata.json and build/<variant>/<package>/,
    the package's `__init__.py` being `source`.

    `torch-universal` is the noarch variant `kernels` accepts on any backend (CPU or CUDA).
    """
    variant = root / "toy-flash-attn" / "build" / "torch-universal"
    (variant / "toy_flash_attn").mkdir(parents=True)
    (variant / "toy_flash_attn" / "__init__.py").write_text(source)
    (variant / "metadata.json").write_text(
        json.dumps(
            {
                "id": f"_toy_flash_attn_{abs(hash(str(root)))}",
                "name": "toy-flash-attn",
                "version": 1,
                "license": "Apache-2.0",
                "python-depends": [],
                "backend": {"type": "cpu"},
            }
        )
    )
    return root / "toy-flash-attn"


@pytest.fixture
def offline(monkeypatch, tmp_path):
    """HF_HUB_OFFLINE=1 and an empty kernels cache: nothing may come from the network or a warm cache."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path / "empty-cache"))
    monkeypatch.delenv("LOCAL_KERNELS", raising=False)


LIGER = "kernels-community/liger-kernels"


def hub_kernel(repo_id: str, **ref: object):
    """What the Hub scripts do: `get_kernel(...)` inside `hub_access(...)`."""
    from kernels import get_kernel

    with hub.hub_access(repo_id):
        return get_kernel(repo_id, **ref)


def failure(call) -> str:
    with pytest.raises(SuiteError) as exc:
        call()
    return str(exc.value)


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a connection fails the test: an offline failure must not even try."""

    def refuse(self, address):
        raise AssertionError(f"a network connection was attempted: {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@needs_kernels
def test_uncached_kernel_offline_fails_without_the_network_and_says_what_to_do(offline, no_network):
    message = failure(lambda: hub_kernel(LIGER, version=1))
    assert "kernels-community/liger-kernels is not in the local kernels cache" in message
    assert "HF_HUB_OFFLINE is set" in message and "run once with a network" in message
    assert "\n" not in message


@needs_kernels
def test_unreachable_hub_without_offline_flag_reads_the_cache_only(monkeypatch, tmp_path):
    from huggingface_hub import constants

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # the discard port: refused at once
    message = failure(lambda: hub_kernel(FLASH_ATTN2, version=1))
    assert "the Hub did not answer" in message and "not in the local kernels cache" in message


@needs_kernels
def test_a_silent_hub_is_given_up_on_after_one_probe_with_a_timeout(monkeypatch, tmp_path):
    import huggingface_hub.utils

    asked: list[float] = []

    class SilentSession:  # a Hub behind a packet-dropping network: the HEAD request times out
        def head(self, url, timeout):
            asked.append(timeout)
            raise TimeoutError("timed out")

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv("KERNELS_CACHE", str(tmp_path))
    monkeypatch.setattr(huggingface_hub.utils, "get_session", SilentSession)
    message = failure(lambda: hub_kernel(LIGER, version=1))
    assert asked == [hub.PROBE_TIMEOUT_S]  # one probe, bounded: huggingface_hub's own client has no timeout
    assert f"the Hub did not answer within {hub.PROBE_TIMEOUT_S:g} s" in message


def test_misleading_trust_error_is_reported_as_an_unreachable_hub():
    exc = ValueError("Kernel repository 'kernels-community/x' could not verify publisher trust status. Set ...")
    message = hub.explain(exc, "kernels-community/x (version 1)", offline_reason=None)
    assert message.startswith("could not reach the Hugging Face Hub to load kernels-community/x (version 1)")


def test_without_kernels_installed_the_hub_block_says_how_to_install_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "kernels", None)  # import kernels -> ImportError
    with pytest.raises(hub.HubError, match="`kernels` package is not installed"), hub.hub_access(LIGER):
        pass


@pytest.mark.parametrize("script", ["03_kernels_mlp", "04_d_kernels_attention"])
def test_the_hub_scripts_import_without_the_kernels_package(monkeypatch, script):
    """`get_kernel` is imported inside hub_access's block, so a machine without `kernels` (a plain `python3`
    run) gets hub_access's one line or the fallback, never a ModuleNotFoundError traceback at import."""
    monkeypatch.setitem(sys.modules, "kernels", None)
    assert callable(load_script(script).main)


@pytest.mark.gpu
@requires_cuda
def test_kernels_mlp_without_the_kernels_package_falls_back_to_pypi_saying_so(monkeypatch, tmp_path, capsys):
    pytest.importorskip("liger_kernel")
    monkeypatch.setitem(sys.modules, "kernels", None)
    flags = ["--batch", "2", "--seq", "16", "--dim", "64", "--hidden", "128", "--traces-dir", str(tmp_path)]
    assert load_script("03_kernels_mlp").main(flags) == 0
    out = capsys.readouterr().out
    assert "notice: the `kernels` package is not installed" in out
    assert "LigerGEGLUMLP from pypi" in out
    assert (tmp_path / "03_kernels_mlp" / "2_16_64_128_pypi_bf16_cold_eager.json").is_file()


@pytest.mark.gpu
@requires_cuda
def test_kernels_attention_without_kernels_or_flash_package_is_one_line(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "kernels", None)
    monkeypatch.setattr(attention, "FLASH_PACKAGES", {"no_such_flash_package": "none"})
    flags = ["--batch", "1", "--heads", "2", "--seq", "64", "--head_dim", "64", "--traces-dir", str(tmp_path)]
    err = usage_error(lambda: load_script("04_d_kernels_attention").main(flags), capsys)
    assert "`kernels` package is not installed" in err and "--kernel-dir flash-attn3" in err
    assert written(tmp_path) == []


def test_pypi_liger_is_the_liger_kernel_packages_layer():
    pytest.importorskip("liger_kernel")
    assert pypi_liger_geglu().__module__.startswith("liger_kernel.")


def test_importing_pypi_liger_is_announced_before_it_starts(monkeypatch, capsys):
    """liger_kernel.transformers imports Triton and transformers (10 s on an H200 host): a line says so first."""

    def importing(name: str, *args: object, **kwargs: object) -> object:
        if name.startswith("liger_kernel"):
            said = capsys.readouterr().out
            raise ImportError(f"blocked after: {said!r}")
        return real_import(name, *args, **kwargs)

    real_import = builtins.__import__
    monkeypatch.setattr(builtins, "__import__", importing)
    with pytest.raises(SuiteError, match=r"blocked after: 'importing liger_kernel.transformers .* \.\.\.\\n'"):
        pypi_liger_geglu()


@needs_kernels
def test_local_kernel_directory_loads_through_kernels_and_computes_attention(tmp_path):
    module = hub.load_local_kernel(make_kernel_dir(tmp_path))
    q, k, v = (torch.randn(2, 8, 3, 16) for _ in range(3))  # [batch, seq, heads, head_dim]
    out = module.flash_attn_func(q, k, v, causal=True)
    expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), torch.float64).transpose(1, 2)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_a_kernel_dir_needs_the_kernels_package_and_says_so(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "kernels", None)
    with pytest.raises(SuiteError, match="`kernels` package is not installed"):
        hub.load_local_kernel(make_kernel_dir(tmp_path))


def test_a_module_without_flash_attn_func_is_one_line():
    with pytest.raises(SuiteError, match="toy has no flash_attn_func"):
        attention.flash_attn_func_of(sys.modules[__name__], "toy")


@needs_kernels
def test_local_kernels_mapping_makes_get_kernel_load_from_disk(offline, monkeypatch, tmp_path):
    monkeypatch.setenv("LOCAL_KERNELS", f"{FLASH_ATTN2}={make_kernel_dir(tmp_path)}")
    kernel = hub_kernel(FLASH_ATTN2, version=1)
    q, k, v = (torch.randn(1, 4, 2, 8) for _ in range(3))  # the toy kernel's own output, loaded from disk
    expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), torch.float64).transpose(1, 2)
    out = kernel.flash_attn_func(q, k, v, causal=True)  # computed in fp32: compared at fp32's tolerance
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_missing_kernel_dir_is_one_line():
    with pytest.raises(SuiteError, match="does not exist"):
        hub.load_local_kernel("/no/such/kernel")


def test_get_local_kernel_arguments_follow_its_signature(tmp_path):
    kernel_dir = make_kernel_dir(tmp_path)

    def newer(repo_path, *, backend=None): ...

    def older(repo_path, package_name): ...

    assert hub.local_kernel_args(newer, kernel_dir) == [kernel_dir]
    assert hub.local_kernel_args(older, kernel_dir) == [kernel_dir, "toy_flash_attn"]


def test_offline_flash_attn_uses_an_installed_package_saying_so(offline, monkeypatch, tmp_path, capsys):
    (tmp_path / "toy_flash_pkg.py").write_text(TOY_FLASH_ATTN)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(attention, "FLASH_PACKAGES", {"no_such_flash_package": "none", "toy_flash_pkg": "a toy"})
    func, source = attention.installed_flash_attn(hub.HubError("the Hub is unreachable"), FLASH_ATTN3)
    assert source == "pkg-toy_flash_pkg" and func.__module__ == "toy_flash_pkg"
    assert "using the installed toy_flash_pkg package instead" in capsys.readouterr().out


def fa4_stand_in(monkeypatch, cute_dir: Path | None = None) -> list[dict]:
    """FlashAttention 4 as `pip install flash-attn-4` leaves it, put in sys.modules: `flash_attn` a bare namespace
    package (no flash_attn_func of its own) and `flash_attn.cute.flash_attn_func(q, k, v, ..., causal=...)` on
    [B, S, H, D], returning (out, lse) with lse None when neither asked for nor needed for a gradient, as
    flash_attn/cute/interface.py does. No FA3 (`flash_attn_interface`) is installed. With `cute_dir`, the
    namespace's path is that folder and `flash_attn.cute` is imported from it instead. Returns the calls' kwargs."""
    calls: list[dict] = []

    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False, **kwargs):
        calls.append({"causal": causal, **kwargs})
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=softmax_scale)
        return out.transpose(1, 2), None

    namespace = ModuleType("flash_attn")
    namespace.__path__ = [str(cute_dir)] if cute_dir else []
    monkeypatch.setitem(sys.modules, "flash_attn", namespace)
    monkeypatch.setitem(sys.modules, "flash_attn_interface", None)  # import flash_attn_interface: not installed
    if cute_dir is None:
        cute = ModuleType("flash_attn.cute")
        cute.flash_attn_func = flash_attn_func
        monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    return calls


def test_offline_flash_attn_takes_fa4s_flash_attn_cute_not_the_bare_namespace(offline, monkeypatch, capsys):
    fa4_stand_in(monkeypatch)
    func, source = attention.installed_flash_attn(hub.HubError("the Hub is unreachable"), FLASH_ATTN3)
    assert source == "pkg-flash_attn_cute" and func is sys.modules["flash_attn.cute"].flash_attn_func
    assert "using the installed flash_attn.cute package instead (FlashAttention 4" in capsys.readouterr().out


def test_fa4s_out_and_lse_pair_gives_the_causal_reference_output(monkeypatch):
    calls = fa4_stand_in(monkeypatch)
    cpu = SimpleNamespace(device=torch.device("cpu"), dtype=torch.float32)
    q, k, v = attention.make_qkv(attention.AttentionShape(2, 3, 16, 8), cpu, layout="bshd")
    func, _ = attention.installed_flash_attn(hub.HubError("offline"), FLASH_ATTN3)
    out = load_script("04_d_kernels_attention").flash_attention(func, q, k, v)
    expected = reference_attention(*(t.transpose(1, 2) for t in (q, k, v)), torch.float64).transpose(1, 2)
    assert calls == [{"causal": True}]  # no return_lse: FA4 then allocates no lse
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_fa4s_compile_time_aux_data_warning_is_silenced_and_no_other(monkeypatch):
    fa4_stand_in(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        attention.installed_flash_attn(hub.HubError("offline"), FLASH_ATTN3)
        warnings.warn(
            "Argument aux_data (position 17) cannot be converted to a JitArgument for function 'cutlass___call___'",
            UserWarning,
            stacklevel=1,
        )
        warnings.warn("another warning", UserWarning, stacklevel=1)
    assert [str(w.message) for w in caught] == ["another warning"]


def test_an_installed_fa4_that_lacks_a_dependency_is_one_line_naming_it(offline, monkeypatch, tmp_path):
    (tmp_path / "cute").mkdir()
    (tmp_path / "cute" / "__init__.py").write_text("import cutlass_dsl_not_installed_here\n")
    fa4_stand_in(monkeypatch, cute_dir=tmp_path)
    message = failure(lambda: attention.installed_flash_attn(hub.HubError("offline"), FLASH_ATTN3))
    assert message.startswith("the installed flash_attn.cute package (FlashAttention 4")
    assert message.endswith("does not import: No module named 'cutlass_dsl_not_installed_here'")


@needs_kernels
def test_offline_flash_attn_without_any_kernel_says_how_to_get_one(offline, no_network, monkeypatch):
    monkeypatch.setattr(attention, "FLASH_PACKAGES", {"no_such_flash_package": "none"})

    def load() -> None:
        try:
            hub_kernel(FLASH_ATTN3, version=1)
        except hub.HubError as exc:
            attention.installed_flash_attn(exc, FLASH_ATTN3)

    message = failure(load)
    assert "run once with a network" in message
    assert "hf download kernels-community/flash-attn3 --local-dir flash-attn3" in message
    assert "--kernel-dir flash-attn3" in message


@pytest.mark.parametrize(
    "capability, repo",
    [((9, 0), FLASH_ATTN3), ((8, 0), FLASH_ATTN2), ((8, 9), FLASH_ATTN2), ((12, 0), FLASH_ATTN2)],
)
def test_flash_attn3_on_hopper_flash_attn2_elsewhere(capability, repo):
    assert attention.default_flash_repo(capability) == repo


def test_pre_ampere_gpu_is_refused():
    with pytest.raises(SuiteError, match="sm80"):
        attention.default_flash_repo((7, 5))


def test_kernels_attention_on_cpu_exits_2_with_one_line_and_writes_nothing(tmp_path, capsys):
    main = load_script("04_d_kernels_attention").main
    err = usage_error(lambda: main(["--device", "cpu", "--traces-dir", str(tmp_path)]), capsys)
    assert "needs a CUDA GPU" in err
    assert written(tmp_path) == []


@pytest.mark.gpu
@requires_cuda
@needs_kernels
def test_kernels_attention_on_gpu_from_a_local_kernel_dir(tmp_path):
    flags = ["--batch", "2", "--heads", "2", "--seq", "64", "--head_dim", "64"]
    kernel_dir = make_kernel_dir(tmp_path / "kernel")
    assert (
        load_script("04_d_kernels_attention").main(
            [*flags, "--kernel-dir", str(kernel_dir), "--traces-dir", str(tmp_path)]
        )
        == 0
    )
    names = trace_names(tmp_path / "04_d_kernels_attention" / "2_2_64_64_local_bf16_cold_eager.json")
    assert {"attn_fwd", "ProfilerStep#2"} <= names


@pytest.mark.gpu
@requires_cuda
@needs_kernels
def test_kernels_attention_with_a_fused_local_kernel_matches_its_guess(tmp_path):
    """Through --kernel-dir, a FlashAttention-2 kernel fed [B, S, H, D]: one fused kernel, no transposes."""
    kernel_dir = make_kernel_dir(tmp_path / "kernel", TORCH_FLASH_ATTN)
    assert (
        load_script("04_d_kernels_attention").main(
            ["--kernel-dir", str(kernel_dir), "--strict", "--traces-dir", str(tmp_path)]
        )
        == 0
    )
    trace = read_trace(tmp_path / "04_d_kernels_attention" / "8_16_1024_64_local_bf16_cold_eager.json")
    for step in trace.steps:
        assert [k.family for k in step.kernels] == ["attention"]
        assert step.cpu_ops["aten::transpose"] == 0


def fa4_installed() -> bool:
    """Whether flash-attn-4's `flash_attn.cute` is installed, found without importing it."""
    try:
        return importlib.util.find_spec("flash_attn.cute") is not None
    except ImportError:  # no `flash_attn` at all
        return False


@pytest.mark.gpu
@requires_cuda
@needs_kernels
@pytest.mark.skipif(not fa4_installed(), reason="needs flash-attn-4 (flash_attn.cute)")
def test_kernels_attention_offline_runs_fa4s_kernel_and_its_guess_holds(offline, tmp_path):
    """No Hub: 04_d takes the installed FA4, its output matches the reference, and --strict holds its guess."""
    script = load_script("04_d_kernels_attention")
    assert script.main(["--strict", "--traces-dir", str(tmp_path)]) == 0
    trace = read_trace(tmp_path / "04_d_kernels_attention" / "8_16_1024_64_pkg-flash_attn_cute_bf16_cold_eager.json")
    for step in trace.steps:
        assert len(step.kernels) == 1 and re.search(script.FA4_KERNEL, step.kernels[0].name)
