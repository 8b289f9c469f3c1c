"""The private torch and huggingface_hub APIs the suite relies on still exist and still say what it expects.

A failure here names the entry of common/harness/private_api.py that a new release changed."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from helpers import requires_cuda
from torch.nn.attention import SDPBackend, sdpa_kernel

from common.harness import private_api


def test_the_dispatcher_answers_which_sdpa_kernel_would_run_without_running_one():
    q = k = v = torch.randn(1, 2, 8, 16)
    with sdpa_kernel(SDPBackend.MATH):
        assert isinstance(private_api.fused_sdp_choice(q, k, v), int), "torch._fused_sdp_choice changed"


def test_the_dispatcher_refuses_a_backend_that_cannot_run_with_a_runtime_error():
    q = k = v = torch.randn(1, 2, 8, 16)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION), pytest.raises(RuntimeError):
        private_api.fused_sdp_choice(q, k, v)  # no cuDNN attention on the CPU


def test_a_schedule_without_warmup_still_warns_in_the_words_the_suite_silences():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.profiler.schedule(wait=0, warmup=0, active=1)
    texts = [str(w.message) for w in caught]
    assert any(re.match(private_api.PROFILER_NO_WARMUP_WARNING, t) for t in texts), (
        f"PROFILER_NO_WARMUP_WARNING no longer matches torch's warning: {texts}"
    )


def test_the_memory_history_calls_exist():
    for name in ("_record_memory_history", "_snapshot"):
        assert callable(getattr(torch.cuda.memory, name, None)), f"torch.cuda.memory.{name} is gone"


def test_inside_hub_offline_a_download_is_refused_without_trying_the_network(monkeypatch, tmp_path):
    import huggingface_hub
    from huggingface_hub import constants
    from huggingface_hub.errors import LocalEntryNotFoundError, OfflineModeIsEnabled

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)  # as a run without HF_HUB_OFFLINE=1 starts
    with private_api.hub_offline(), pytest.raises(LocalEntryNotFoundError) as refused:
        huggingface_hub.hf_hub_download("org/repo", "f.json", cache_dir=tmp_path)
    chain, cause = [], refused.value
    while cause is not None:
        chain, cause = [*chain, cause], cause.__cause__ or cause.__context__
    assert any(isinstance(e, OfflineModeIsEnabled) for e in chain), chain  # blocked before any request went out
    assert constants.HF_HUB_OFFLINE is False  # given back after the block


@pytest.mark.gpu
@requires_cuda
def test_a_refused_sdpa_backend_still_explains_itself_in_the_expected_words():
    q = k = v = torch.randn(1, 2, 8, 512, device="cuda", dtype=torch.bfloat16)  # head_dim 512: too big for flash
    with warnings.catch_warnings(record=True) as caught, sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        warnings.simplefilter("always")
        with pytest.raises(RuntimeError):
            private_api.fused_sdp_choice(q, k, v)
    texts = [private_api.SDPA_TRIGGERED_AT.sub("", str(w.message)) for w in caught]
    header = private_api.SDPA_REFUSAL_HEADERS["flash"]
    assert any(t.startswith(header) and t.endswith(private_api.SDPA_REFUSAL_END) for t in texts), texts
